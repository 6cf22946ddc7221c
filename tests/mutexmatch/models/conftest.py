"""One intra-op thread for every model test: the forwards are small, and the machine's cores are shared."""
from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(autouse=True, scope="module")
def _one_thread() -> Iterator[None]:
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="session")
def usb_nets():
    """USB's ``semilearn/nets/vit/vit.py`` and ``semilearn/nets/utils.py`` (its ``load_checkpoint``), semilearn
    0.3.2 as ``make usb-reference`` installs it with timm, each loaded from its file on its own: the package's import
    pulls in modules the reference does not install, and the USB lockstep harness imports it with timm stubbed.
    Skipped, with the command, where the reference is not installed."""
    import importlib.util
    import sys
    import types
    import warnings
    from pathlib import Path

    found = importlib.util.find_spec("semilearn")
    if found is None or importlib.util.find_spec("timm") is None:
        pytest.skip("USB reference not installed: `make usb-reference` (semilearn and timm)")
    root = Path(found.submodule_search_locations[0]) / "nets"

    def load(name: str, path: Path) -> types.ModuleType:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    utils = load("_usb_nets_utils", root / "utils.py")
    # vit.py's `from semilearn.nets.utils import load_checkpoint` finds this module, not the package's import
    previous = sys.modules.get("semilearn.nets.utils")
    sys.modules["semilearn.nets.utils"] = utils
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)   # vit.py imports timm.models.layers (timm.layers now)
            vit = load("_usb_nets_vit", root / "vit" / "vit.py")
    finally:
        if previous is None:
            del sys.modules["semilearn.nets.utils"]
        else:
            sys.modules["semilearn.nets.utils"] = previous
    return types.SimpleNamespace(vit=vit, utils=utils)
