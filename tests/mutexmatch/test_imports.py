"""The trainer knows nothing of the orchestration: no module of ``mutexmatch`` imports Ray or MLflow."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow   # a fresh interpreter importing torch and torchvision: ~3-7 s on 2 cores
def test_importing_every_mutexmatch_module_pulls_in_neither_ray_nor_mlflow():
    code = ("import importlib, pkgutil, sys\n"
            "import mutexmatch\n"
            "names = [m.name for m in pkgutil.walk_packages(mutexmatch.__path__, 'mutexmatch.')]\n"
            "assert 'mutexmatch.train' in names and 'mutexmatch.models.wrn' in names, names\n"
            "for name in names:\n"
            "    importlib.import_module(name)\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('ray', 'mlflow', 'orchestration', 'reports'))\n"
            "assert not bad, bad\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
