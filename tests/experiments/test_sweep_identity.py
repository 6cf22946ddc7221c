"""Golden sweep identity: what a relaunch uses to recognise its own trials, for every experiment YAML.

``sweep_identity.json`` was written by this module's ``--write`` mode from commit 460dc25, before the house was
reorganised (issue 29): per YAML, the spec hash, the settings digest the expected runs are filed under, every grid
trial's key and config hashes (current and legacy rule), every search study's key, search hash and Optuna study
name, and every refit slot's key with the config hash of its trial before parameters are set. A refactor that moves
any of them would make a relaunch re-run finished work or lose a study, so the file is never regenerated to make this
test pass; a change of identity needs a migration (see test_config_hash_pins.py).

Issue 32 changed five algorithms' defaults on purpose, with that migration (test_config_hash_pins.py's docstring):
a trial of an algorithm whose computation changed by default (``CHANGED_32``) must have lost its golden hashes (a
stored run of the old behaviour is not this trial's), every other trial keeps its golden hashes as the oldest of
its hashes now (its current-rule hash may be new: CoMatch's section gained ``epoch_steps``), and the two YAMLs it
edited (``EDITED_32``: rows added or asking for the old behaviour) have a new spec hash and settings digest and
may have new trials only in the levels it added. Issue 43 added five algorithms' rows to the zoo and CRMatch's,
with USB's published numbers, to usb_classic_cv (``ADDED_43``): new trials only. Issue 41 added RDA's row to the
zoo and ran usb_classic_cv_imb's base + imbalance algorithm rows (``ADDED_41``): new trials only.

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


CHANGED_32 = {"usb_classic_cv.yaml": {"adamatch", "pseudolabel"}, "zoo_digits.yaml": {"adamatch", "pseudolabel", "vat"}}
EDITED_32 = {"usb_classic_cv.yaml": {"mixmatch", "mixmatch_cifar100", "remixmatch", "simmatch", "comatch"},
             "zoo_digits.yaml": set()}   # YAML -> the levels issue 32 added
# the rows issue 43 added (new algorithms: new trials, every earlier trial keeps its hashes)
ADDED_43 = {"zoo_digits.yaml": {"defixmatch", "crmatch", "shrinkmatch", "refixmatch", "sequencematch"},
            "usb_classic_cv.yaml": {"crmatch"}, "cifar10_cpu.yaml": {"shrinkmatch"}}
ADDED_41 = {"zoo_digits.yaml": {"rda"},   # issue 41 item 4: RDA's row (new trials)
            # issue 41 item 5: the base + imbalance algorithm rows USB publishes, run (new trials)
            "usb_classic_cv_imb.yaml": {"fixmatch_crest", "fixmatch_crest_plus", "fixmatch_darp", "fixmatch_abc",
                                        "fixmatch_saw", "fixmatch_adsh", "fixmatch_debiaspl", "remixmatch_crest",
                                        "remixmatch_crest_plus", "remixmatch_abc", "remixmatch_saw",
                                        # then DASO, two levels per base (USB's T_dist per dataset)
                                        "fixmatch_daso", "fixmatch_daso_tdist0.3", "remixmatch_daso",
                                        "remixmatch_daso_tdist0.3",
                                        "fixmatch_cossl", "remixmatch_cossl"}}   # then CoSSL

# issue 41 item 5: imbalanced_digits gained the imbalance algorithms that landed after it (new trials)
ADDED_41["imbalanced_digits.yaml"] = {"fixmatch_darp", "fixmatch_saw", "fixmatch_adsh", "fixmatch_tras",
                                      "fixmatch_crest", "fixmatch_crest_plus",
                                      "fixmatch_tras_official",   # then TRAS's official form
                                      "fixmatch_daso", "fixmatch_cossl", "fixmatch_cossl_fixed"}   # then DASO, CoSSL


# the YAMLs whose CoMatch trials gained a current-rule hash (their golden ones kept as the oldest)
COMATCH_32 = {"table1_cifar_svhn.yaml", "table2_stl_mini_tiny.yaml", "table_cnn13_wrn.yaml"}


def _method(key: str) -> str | None:
    return dict(p.split("=", 1) for p in key.replace("/", ",").split(",") if "=" in p).get("method")


@pytest.mark.parametrize("name", sorted(p.name for p in EXPERIMENTS.glob("*.yaml")))
def test_sweep_identity_is_the_golden_one(name: str, project: Path) -> None:
    golden, now = json.loads(GOLDEN.read_text())[name], sweep_identity(EXPERIMENTS / name, project)
    edited = set(EDITED_32) | set(ADDED_43) | set(ADDED_41)   # YAMLs that gained rows: a new spec hash, new trials only
    if name not in edited and name not in COMATCH_32:   # the YAMLs left alone: exactly the golden one
        assert now == golden
        return
    if name not in edited:
        assert (now["spec_hash"], now["settings_digest"]) == (golden["spec_hash"], golden["settings_digest"])
    assert (now["search"], now["refit"]) == (golden["search"], golden["refit"])
    grid = {key: hashes for key, *hashes in now["grid"]}
    for key, *hashes in golden["grid"]:
        if _method(key) in CHANGED_32.get(name, ()):
            assert set(grid[key]).isdisjoint(hashes), key
        else:
            assert grid[key][-len(hashes):] == hashes, key
    added = {_method(key) for key in set(grid) - {row[0] for row in golden["grid"]}}
    assert added <= EDITED_32.get(name, set()) | ADDED_43.get(name, set()) | ADDED_41.get(name, set()), added


if __name__ == "__main__" and sys.argv[1:2] == ["--add"]:
    # A new experiment YAML gets its golden block; every other block stays as it is, byte for byte:
    #   PYTHONPATH=<tree> python tests/experiments/test_sweep_identity.py --add <name>.yaml ...
    sys.path.insert(0, str(HERE))
    from conftest import write_spec_imagefolders

    golden = json.loads(GOLDEN.read_text())
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "data").mkdir()
        write_spec_imagefolders(Path(tmp))
        for name in sys.argv[2:]:
            if name in golden:
                sys.exit(f"{name} already has a golden identity: it is never rewritten (see the docstring)")
            golden[name] = sweep_identity(EXPERIMENTS / name, Path(tmp))
    GOLDEN.write_text(_dump(dict(sorted(golden.items()))))
    print(f"added {', '.join(sys.argv[2:])} to {GOLDEN}")

if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    sys.path.insert(0, str(HERE))
    from conftest import write_spec_imagefolders

    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "data").mkdir()
        write_spec_imagefolders(Path(tmp))
        GOLDEN.write_text(_dump(every_identity(Path(tmp))))
    print(f"wrote {GOLDEN}")
