"""Issue 29's acceptance for datasets: a new built-in dataset is ONE new module in ``mutexmatch/data/builtin/``,
nothing else touched.

The test copies the ``mutexmatch`` package into a temporary folder and writes there a copy of a built-in dataset
module under a new name (``svhn.py`` as ``housenumbers.py``, its names renamed). With that copy first on
``PYTHONPATH`` it finds the dataset registered with the facts its module declares, accepted by the config and
listed by both command lines, generates its fake files with ``python -m mutexmatch.fakedata`` and trains on them
for two steps with ``--set data.dataset=housenumbers``. ARCHITECTURE.md, "Where new things go", and
docs/datasets.md ("Adding a built-in dataset") describe exactly this path.
"""
from __future__ import annotations

import filecmp
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
SOURCE, NAME = "svhn", "housenumbers"
RENAMES = {SOURCE: NAME, "Svhn": "HouseNumbers"}

CHECK = f"""
import dataclasses, json
from mutexmatch.config import parse_config
from mutexmatch.data.builtin import DATASET_NAMES, DATASETS
from mutexmatch.data.fake import FAKE_DATASETS
new, source = DATASETS["{NAME}"], DATASETS["{SOURCE}"]
same = dataclasses.replace(new.info, name=source.info.name, download_hint=source.info.download_hint) == source.info
cfg = parse_config({{"data": {{"dataset": "{NAME}", "num_labels": 20, "download": True}}}})
print(json.dumps({{"module": type(new).__module__, "same_facts": same, "folder": new.folder,
                  "listed": "{NAME}" in DATASET_NAMES and "{NAME}" in FAKE_DATASETS, "dataset": cfg.data.dataset}}))
"""


def _run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


@pytest.fixture(scope="module")
def copy(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A copy of the package with the one new module, and the environment that imports it first."""
    root = tmp_path_factory.mktemp("new_dataset")
    shutil.copytree(REPO / "mutexmatch", root / "mutexmatch", ignore=shutil.ignore_patterns("__pycache__"))
    text = (REPO / "mutexmatch" / "data" / "builtin" / f"{SOURCE}.py").read_text()
    for old, new in RENAMES.items():
        assert old in text, f"{SOURCE}.py no longer contains {old!r}: update RENAMES"
        text = text.replace(old, new)
    (root / "mutexmatch" / "data" / "builtin" / f"{NAME}.py").write_text(text)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(REPO)]), "MLFLOW_TRACKING_URI": ""}
    return root, env


def test_the_copy_differs_from_the_package_by_the_new_module_only(copy) -> None:
    root, _ = copy
    cmp = filecmp.dircmp(REPO / "mutexmatch", root / "mutexmatch", ignore=["__pycache__"])
    pending = [cmp]
    added, changed = [], []
    while pending:
        d = pending.pop()
        added += [str(Path(d.right) / f) for f in d.right_only]
        changed += d.diff_files + d.left_only
        pending += d.subdirs.values()
    assert added == [str(root / "mutexmatch" / "data" / "builtin" / f"{NAME}.py")] and not changed


def test_registered_with_its_facts_accepted_by_the_config_and_listed(copy) -> None:
    root, env = copy
    out = json.loads(_run(["-c", CHECK], root, env).stdout)
    assert out == {"module": f"mutexmatch.data.builtin.{NAME}", "same_facts": True, "folder": NAME, "listed": True,
                   "dataset": NAME}
    assert NAME in _run(["-m", "mutexmatch.datasets", "check", "--help"], root, env).stdout
    assert NAME in "".join(_run(["-m", "mutexmatch.fakedata", "--help"], root, env).stdout.split())  # wrapped


def test_its_fake_files_train_from_the_command_line(copy) -> None:
    root, env = copy
    data, run_dir = root / "data", root / "run"
    _run(["-m", "mutexmatch.fakedata", str(data), "--datasets", NAME], root, env)
    assert (data / NAME / "train_32x32.mat").is_file() and not (data / SOURCE).exists()
    sets = [f"data.dataset={NAME}", f"data.root={data}", "data.num_labels=20", "model.backbone=small_cnn",
            "train.iterations=2", "train.eval_interval=2", "train.batch_size=2", "train.mu=1",
            "train.num_threads=1", "train.progress=false", f"output_dir={run_dir}"]
    result = _run(["-m", "mutexmatch.train", *(a for s in sets for a in ("--set", s)), "--yes"], root, env)
    assert json.loads(result.stdout.strip().splitlines()[-1])["step"] == 2
    assert json.loads((run_dir / "dataset.json").read_text())["dataset"] == NAME
