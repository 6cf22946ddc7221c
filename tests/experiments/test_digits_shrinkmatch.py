"""``experiments/digits_shrinkmatch.yaml`` (issue 43 item 4) pairs MutexMatch, ShrinkMatch and FixMatch on digits-20:
its trials must be zoo_digits.yaml's own (same config hashes), so the two YAMLs share their runs and the paired
table compares exactly the zoo's trained models."""

from __future__ import annotations

from pathlib import Path

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"


def test_its_trials_are_the_zoos(spec_imagefolders, tmp_path: Path) -> None:
    from orchestration.overrides import load_sweep, plan_sweep

    (tmp_path / "data").mkdir()
    spec_imagefolders(tmp_path)
    grid = {name: {t.key.split(",")[0] + "/" + t.key.rsplit("/", 1)[1]: t.config_hash
                   for t in plan_sweep(load_sweep(EXPERIMENTS / name, tmp_path), tmp_path).grid}
            for name in ("digits_shrinkmatch.yaml", "zoo_digits.yaml")}
    ours = grid["digits_shrinkmatch.yaml"]
    assert len(ours) == 15 and all(grid["zoo_digits.yaml"][key] == h for key, h in ours.items()), ours
