"""The generated datasets a smoke run trains on (``python -m mutexmatch.fakedata``: each registered dataset's
``fake_size``) hold every labeled set the experiment YAMLs ask for: labeled plus validation images per class, over
every grid trial, search and refit the sweep plans."""

from __future__ import annotations

from pathlib import Path

import pytest

from mutexmatch.data.builtin import DATASETS
from orchestration.spec.plan import build_plan
from orchestration.spec.sweepfile import load_spec

SPECS = sorted((Path(__file__).resolve().parents[2] / "experiments").glob("*.yaml"))


@pytest.fixture(scope="module")
def project(tmp_path_factory, spec_imagefolders) -> Path:
    root = tmp_path_factory.mktemp("project")
    (root / "data").mkdir()
    spec_imagefolders(root)
    return root


@pytest.mark.parametrize("path", SPECS, ids=[p.stem for p in SPECS])
def test_default_fake_sizes_hold_every_labeled_set(path: Path, project: Path) -> None:
    plan = build_plan(load_spec(path, project), project, smoke=True)  # what test_smoke_all.py trains
    checked = 0
    for trial in [*plan.grid, *plan.searches, *plan.refits]:
        data = trial.config["data"]
        dataset = DATASETS.get(data.get("dataset", "digits"))
        if dataset is None or dataset.fake_size is None:  # digits and image folders: no generated files
            continue
        per_class = data["num_labels"] // dataset.info.num_classes + data.get("val_per_class", 0)
        assert dataset.fake_size.train_per_class >= per_class, (path.name, dataset.name, data)
        checked += 1
    assert checked or not any(t.config["data"].get("dataset") in DATASETS and DATASETS[
        t.config["data"]["dataset"]].fake_size for t in plan.grid)
