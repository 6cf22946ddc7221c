"""``python -m mutexmatch.train`` in float64 (``dp_worker.float64``), for the heavy test of the torchrun command line
(``test_distributed.py``): ``torchrun --standalone --nproc-per-node 2 tests/mutexmatch/training/float64_train.py
--config ...`` runs the same command, the same trainer and the same data-parallel path as ``-m mutexmatch.train``,
with float32 rounding (which a few free-running steps of this small network amplify) out of the comparison.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

if __name__ == "__main__":
    spec = importlib.util.spec_from_file_location("dp_worker", Path(__file__).with_name("dp_worker.py"))
    worker = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(worker)
    from mutexmatch.train import main

    with worker.float64():
        code = main()
    sys.exit(code)
