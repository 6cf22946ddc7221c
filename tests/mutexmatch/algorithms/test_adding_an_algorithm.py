"""Issue 22's acceptance: a new algorithm is ONE new module in ``mutexmatch/algorithms/``, nothing else touched.

The test copies the ``mutexmatch`` package into a temporary folder, writes a small real method there (FixMatch with
a threshold lowered by its own ``margin`` parameter), and, with that copy first on ``PYTHONPATH`` (orchestration
and reports come from this repository, after it), finds the method registered with its terms, trains it from the
command line with ``--set algorithm.name=... --set algorithm.margin=...``, plans a sweep that searches ``margin``
(``orchestration.sweep --dry-run``) and reads it in the generated ``docs/config.md`` text. ARCHITECTURE.md,
"Adding an algorithm", describes exactly this path.
"""
from __future__ import annotations

import filecmp
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from mutexmatch.metrics import FIXED

REPO = Path(__file__).resolve().parents[3]
NAME = "fixmatch_margin"
MODULE = textwrap.dedent('''\
    """FixMatch whose confidence threshold is tau - margin (written by tests/mutexmatch/algorithms/
    test_adding_an_algorithm.py)."""
    from __future__ import annotations

    from pydantic import Field

    from mutexmatch.algorithms.base import register_algorithm
    from mutexmatch.algorithms.fixmatch import FixMatch
    from mutexmatch.params import FixMatchParams


    class FixMatchMarginParams(FixMatchParams):
        """FixMatch's parameters and the margin taken off tau."""

        margin: float = Field(0.05, ge=0.0, le=0.5, description="lowers the threshold to tau - margin")


    @register_algorithm("fixmatch_margin")
    class FixMatchMargin(FixMatch):
        """FixMatch with the threshold tau - margin."""

        Params = FixMatchMarginParams

        @property
        def threshold(self) -> float:
            return self.params.tau - self.params.margin
    ''')

SPEC = """
name: new_algorithm
base:
  data: {{dataset: digits, num_labels: 20, root: {root}}}
  model: {{backbone: small_cnn}}
  train: {{iterations: 4, eval_interval: 2, batch_size: 2, mu: 1}}
folds: [0]
axes:
  method:
    {name}: {{algorithm: {{name: {name}}}}}
resources: {{cpu: 1, gpu: 0}}
search:
  cells: [{{method: {name}}}]
  metric: val/best_acc
  n_trials: 2
  base: {{data: {{val_per_class: 2}}}}
  space:
    algorithm.margin: {{type: float, low: 0.0, high: 0.3}}
"""

# One interpreter for the facts read in-process: the registry, the config section, and the sweep spec loader (what
# `orchestration.sweep` runs first) on a search space outside the parameter's range.
CHECK = f"""
import json
from mutexmatch.algorithms import ALGORITHMS
from mutexmatch.config import parse_config
from orchestration.spec.models import SpecError
from orchestration.spec.sweepfile import load_spec
cls = ALGORITHMS["{NAME}"]
cfg = parse_config({{"algorithm": {{"name": "{NAME}", "margin": 0.2}}}})
try:
    load_spec("too_wide.yaml", ".")
    refused = None
except SpecError as e:
    refused = str(e)
print(json.dumps({{"module": cls.__module__, "terms": list(cls.terms), "section": cfg.to_dict()["algorithm"],
                  "refused": refused}}))
"""


def _run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


@pytest.fixture(scope="module")
def copy(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A copy of the package with the one new module, and the environment that imports it first."""
    root = tmp_path_factory.mktemp("new_algorithm")
    shutil.copytree(REPO / "mutexmatch", root / "mutexmatch", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "mutexmatch" / "algorithms" / f"{NAME}.py").write_text(MODULE)
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
    assert added == [str(root / "mutexmatch" / "algorithms" / f"{NAME}.py")] and not changed


def test_registered_configurable_documented_and_its_search_range_checked(copy) -> None:
    root, env = copy
    (root / "too_wide.yaml").write_text(SPEC.format(root=root / "data", name=NAME).replace("high: 0.3", "high: 0.9"))
    out = json.loads(_run(["-c", CHECK], root, env).stdout)
    assert out["module"] == f"mutexmatch.algorithms.{NAME}" and out["terms"] == ["sup", "p"]
    assert out["section"]["name"] == NAME and out["section"]["margin"] == 0.2 and "tau" in out["section"]
    doc = _run(["-m", "mutexmatch.config", "--doc"], root, env).stdout
    summary = f"| `{NAME}` | FixMatch with the threshold tau - margin. |"
    row = next(ln for ln in doc.splitlines() if ln.startswith(summary))
    assert "`margin` = `0.05`" in row and row.endswith("| `sup`, `p` |"), row
    assert "search.space.algorithm.margin.high=0.9" in out["refused"] and "less than or equal to 0.5" in out["refused"]


def test_trained_from_the_command_line_with_its_parameter(copy) -> None:
    root, env = copy
    run_dir = root / "run"
    sets = [f"algorithm.name={NAME}", "algorithm.margin=0.2", "data.dataset=digits", "data.num_labels=20",
            "model.backbone=small_cnn", "train.iterations=2", "train.eval_interval=2", "train.batch_size=2",
            "train.mu=1", "train.num_threads=1", "train.progress=false", f"output_dir={run_dir}"]
    result = _run(["-m", "mutexmatch.train", *(a for s in sets for a in ("--set", s)), "--yes"], root, env)
    assert json.loads(result.stdout.strip().splitlines()[-1])["step"] == 2
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())["algorithm"]
    assert saved["name"] == NAME and saved["margin"] == 0.2
    (line,) = (run_dir / "metrics.jsonl").read_text().splitlines()
    assert {k for k in json.loads(line) if k.startswith("train/") and k not in FIXED} == {"train/sup", "train/p"}


def test_searched_by_a_sweep(copy) -> None:
    """The sweep's own validation and plan (``--dry-run``) accept a search over the new parameter (out of its range
    the spec loader refuses it: the test above)."""
    root, env = copy
    spec = root / "new_algorithm.yaml"
    spec.write_text(SPEC.format(root=root / "data", name=NAME))
    plan = _run(["-m", "orchestration.sweep", str(spec), "--dry-run"], root, env).stdout
    assert "1 grid trials, 1 search studies (2 trials)" in plan and f"method={NAME}" in plan, plan
    assert "search ×2" in plan, plan
