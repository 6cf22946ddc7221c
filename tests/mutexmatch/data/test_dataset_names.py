"""``mutexmatch.data.dataset_names``: the names a command line's --help lists without importing the datasets."""

from __future__ import annotations

import subprocess
import sys


def test_the_names_read_without_torch_are_the_registrys():
    from mutexmatch.data import dataset_names
    from mutexmatch.data.builtin import DATASET_NAMES

    assert sorted(dataset_names()) == sorted(DATASET_NAMES) and dataset_names()[-1] == "imagefolder"


def test_reading_them_imports_no_torch():
    code = "import sys; from mutexmatch.data import dataset_names; dataset_names(); print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "False"
