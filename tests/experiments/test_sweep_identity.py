"""Golden sweep identity: what a relaunch uses to recognise its own trials, for every experiment YAML.

``sweep_identity.json`` was written by this module's ``--write`` mode from commit 460dc25, before the house was
reorganised (issue 29): per YAML, the spec hash, the settings digest the expected runs are filed under, every grid
trial's key and config hashes (current and legacy rule), every search study's key, search hash and Optuna study
name, and every refit slot's key with the config hash of its trial before parameters are set. A refactor that moves
any of them would make a relaunch re-run finished work or lose a study, so the file is never regenerated to make this
test pass; a change of identity needs a migration (see test_config_hash_pins.py).

    PYTHONPATH=<tree> python tests/experiments/test_sweep_identity.py --write   # what wrote the file, at 460dc25
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
EXPERIMENTS = HERE.parents[1] / "experiments"
GOLDEN = HERE / "sweep_identity.json"


def sweep_identity(path: Path, project: Path) -> dict[str, Any]:
    """The identity of ``path``'s sweep as the launcher plans it (the public load → plan path of a launch)."""
    from orchestration import contract as C
    from orchestration.overrides import load_sweep, plan_sweep

    plan = plan_sweep(load_sweep(path, project), project)
    name = plan.spec.name
    return {
        "spec_hash": plan.spec_hash,
        "settings_digest": plan.settings_digest,
        "grid": [[t.key, t.config_hash, *t.legacy_hashes] for t in plan.grid],
        "search": [[s.key, s.search_hash, C.study_name(name, s.key, s.search_hash)] for s in plan.searches],
        "refit": [[r.key, r.trial({}).config_hash] for r in plan.refits],
    }


def _dump(identities: dict[str, dict[str, Any]]) -> str:
    """One YAML per block, one trial per line: a diff of the golden file names the trials that moved."""
    blocks = []
    for name, ident in identities.items():
        rows = [f'  "{k}": {json.dumps(ident[k])}' for k in ("spec_hash", "settings_digest")]
        rows += [f'  "{k}": [\n' + ",\n".join("   " + json.dumps(r) for r in ident[k]) + "\n  ]" if ident[k]
                 else f'  "{k}": []' for k in ("grid", "search", "refit")]
        blocks.append(f' "{name}": {{\n' + ",\n".join(rows) + "\n }")
    return "{\n" + ",\n".join(blocks) + "\n}\n"


def every_identity(project: Path) -> dict[str, dict[str, Any]]:
    return {p.name: sweep_identity(p, project) for p in sorted(EXPERIMENTS.glob("*.yaml"))}


@pytest.fixture(scope="module")
def project(tmp_path_factory, spec_imagefolders) -> Path:
    root = tmp_path_factory.mktemp("identity")
    (root / "data").mkdir()
    spec_imagefolders(root)
    return root


def test_every_experiment_yaml_has_a_golden_identity() -> None:
    assert sorted(p.name for p in EXPERIMENTS.glob("*.yaml")) == sorted(json.loads(GOLDEN.read_text()))


@pytest.mark.parametrize("name", sorted(p.name for p in EXPERIMENTS.glob("*.yaml")))
def test_sweep_identity_is_the_golden_one(name: str, project: Path) -> None:
    golden = json.loads(GOLDEN.read_text())[name]
    assert sweep_identity(EXPERIMENTS / name, project) == golden


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    sys.path.insert(0, str(HERE))
    from conftest import write_spec_imagefolders

    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "data").mkdir()
        write_spec_imagefolders(Path(tmp))
        GOLDEN.write_text(_dump(every_identity(Path(tmp))))
    print(f"wrote {GOLDEN}")
