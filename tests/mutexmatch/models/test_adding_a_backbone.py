"""Issue 29's acceptance for backbones: a new backbone is ONE new module in ``mutexmatch/models/``, nothing else
touched.

The test copies the ``mutexmatch`` package into a temporary folder and writes there a copy of a built-in backbone
module under a new name (``small_cnn.py`` as ``tiny_cnn.py``, its names renamed). With that copy first on
``PYTHONPATH`` it finds the backbone registered with the facts its decorator declares, listed in the generated
``docs/config.md`` text, accepted by the config, and trained from the command line with
``--set model.backbone=tiny_cnn``. ARCHITECTURE.md, "Where new things go", describes exactly this path.
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
import yaml

REPO = Path(__file__).resolve().parents[3]
SOURCE, NAME = "small_cnn", "tiny_cnn"
RENAMES = {SOURCE: NAME, "SmallCNN": "TinyCNN"}

CHECK = f"""
import json
from mutexmatch.config import parse_config
from mutexmatch.models import BACKBONES
spec, source = BACKBONES["{NAME}"], BACKBONES["{SOURCE}"]
cfg = parse_config({{"model": {{"backbone": "{NAME}"}}}})
print(json.dumps({{"module": spec.factory.__module__, "same_facts": [spec.feat_dim, spec.param_count,
                  spec.min_image_size, spec.activation_bytes_per_pixel] == [source.feat_dim, source.param_count,
                  source.min_image_size, source.activation_bytes_per_pixel], "backbone": cfg.model.backbone}}))
"""


def _run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


@pytest.fixture(scope="module")
def copy(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A copy of the package with the one new module, and the environment that imports it first."""
    root = tmp_path_factory.mktemp("new_backbone")
    shutil.copytree(REPO / "mutexmatch", root / "mutexmatch", ignore=shutil.ignore_patterns("__pycache__"))
    text = (REPO / "mutexmatch" / "models" / f"{SOURCE}.py").read_text()
    for old, new in RENAMES.items():
        assert old in text, f"{SOURCE}.py no longer contains {old!r}: update RENAMES"
        text = text.replace(old, new)
    (root / "mutexmatch" / "models" / f"{NAME}.py").write_text(text)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(REPO)]), "MLFLOW_TRACKING_URI": ""}
    return root, env


def test_the_copy_differs_from_the_package_by_the_new_module_only(copy) -> None:
    root, _ = copy
    pending = [filecmp.dircmp(REPO / "mutexmatch", root / "mutexmatch", ignore=["__pycache__"])]
    added, changed = [], []
    while pending:
        d = pending.pop()
        added += [str(Path(d.right) / f) for f in d.right_only]
        changed += d.diff_files + d.left_only
        pending += d.subdirs.values()
    assert added == [str(root / "mutexmatch" / "models" / f"{NAME}.py")] and not changed


def test_registered_with_its_facts_documented_and_accepted_by_the_config(copy) -> None:
    root, env = copy
    out = json.loads(_run(["-c", CHECK], root, env).stdout)
    assert out == {"module": f"mutexmatch.models.{NAME}", "same_facts": True, "backbone": NAME}
    doc = _run(["-m", "mutexmatch.config", "--doc"], root, env).stdout
    assert any(ln.startswith(f"| `{NAME}` | ") for ln in doc.splitlines()), doc


@pytest.mark.slow  # a two-step training run in a fresh interpreter: ~10 s on two cores
def test_trained_from_the_command_line(copy) -> None:
    root, env = copy
    run_dir = root / "run"
    sets = [f"model.backbone={NAME}", "algorithm.name=fixmatch", "data.dataset=digits", "data.num_labels=20",
            "train.iterations=2", "train.eval_interval=2", "train.batch_size=2", "train.mu=1",
            "train.num_threads=1", "train.progress=false", f"output_dir={run_dir}"]
    result = _run(["-m", "mutexmatch.train", *(a for s in sets for a in ("--set", s)), "--yes"], root, env)
    assert json.loads(result.stdout.strip().splitlines()[-1])["step"] == 2
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["model"]["backbone"] == NAME
