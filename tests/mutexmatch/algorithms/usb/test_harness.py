"""The USB harness itself: semilearn's stubs do not outlive its import."""
from __future__ import annotations

import sys


def test_the_stubbed_modules_are_gone_from_sys_modules_after_the_import(usb_lockstep):
    stubs = [name for name, m in sys.modules.items() if type(m).__name__ == "_StubModule"]
    assert stubs == [] and "semilearn.core" in sys.modules
    import torch.utils
    assert type(getattr(torch.utils, "tensorboard", None)).__name__ != "_StubModule"
