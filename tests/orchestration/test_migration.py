"""A store written before issue 22 relaunched after it (issue 22, migration): its runs carry the hashes of the code
before each algorithm owned its config section (``mutexmatch.config.legacy_config_hash``, which
tests/experiments/test_config_hash_pins.py proves equal to that code's, pinned), and a relaunch re-runs nothing
FINISHED — grid, search or refit; the resume check of an in-flight trial is tests/mutexmatch/training/test_train.py's."""
from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from orchestration import contract as C
from orchestration.launch import select
from orchestration.plan import GridTrial, SweepPlan, build_plan
from orchestration.refit import best_by_cell, refit_trials
from orchestration.spec import load_spec

QUICKSTART = Path(__file__).resolve().parents[2] / "experiments" / "quickstart.yaml"


def _finished(client: MlflowClient, exp: str, tags: dict[str, str], params: dict[str, str] | None = None,
              metrics: dict[str, float] | None = None) -> None:
    run = client.create_run(exp, tags=tags)
    for name, value in (params or {}).items():
        client.log_param(run.info.run_id, name, value)
    for name, value in (metrics or {}).items():
        client.log_metric(run.info.run_id, name, value, step=1)
    client.set_terminated(run.info.run_id, "FINISHED")


def _tags(kind: str, t: GridTrial | object, cell, fold: int, config_hash: str) -> dict[str, str]:
    return C.trial_tags(parent_run_id="old-parent", kind=kind, cell_levels=cell.levels, cell_id=cell.id, fold=fold,
                        variant="", config_hash=config_hash, commit="a627ccb", trial_id=uuid.uuid4().hex[:8],
                        launch_id="old-launch")


def _old_store(client: MlflowClient, exp: str, plan: SweepPlan, hash_of) -> None:
    """What a finished quickstart launch of the old code left: every grid trial, every search trial (tagged with
    its study's hash, the sampled parameters as MLflow strings), every refit of the best parameters."""
    for t in plan.grid:
        _finished(client, exp, _tags(C.KIND_GRID, t, t.cell, t.fold, hash_of(t)))
    for s in plan.searches:
        for i in range(s.n_trials):
            tags = {**_tags(C.KIND_SEARCH, s, s.cell, s.fold, "old"), C.SEARCH_HASH: s.search_hash}
            _finished(client, exp, tags, {"algorithm.tau": str(0.8 + i / 100), "algorithm.k": str(3 + i)},
                      {s.search.metric: 0.5 + i / 10})
    refits, _ = refit_trials(plan, best_by_cell(plan, client, exp))
    assert len(refits) == len(plan.refits) > 0
    for t in refits.values():
        _finished(client, exp, _tags(C.KIND_REFIT, t, t.cell, t.fold, hash_of(t)))


@pytest.fixture
def store(tmp_path):
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    return client, build_plan(load_spec(QUICKSTART, tmp_path), tmp_path)


def test_a_store_written_before_issue_22_relaunches_with_nothing_re_run(store) -> None:
    client, plan = store
    exp = client.create_experiment("quickstart")
    assert all(t.legacy_hashes and t.legacy_hashes[0] != t.config_hash for t in plan.grid)  # the rule did change
    _old_store(client, exp, plan, lambda t: t.legacy_hashes[0])
    grid, phases, skipped = select(plan, client, exp, force=False)
    assert grid == [] and phases == [], (grid, phases)
    assert len(skipped) == len(plan.grid) + len(plan.searches) + len(plan.refits)


def test_runs_of_other_settings_are_still_re_run(store) -> None:
    """The control: a store whose runs carry hashes of other settings counts for nothing (the test above can fail)."""
    client, plan = store
    exp = client.create_experiment("quickstart-other")
    _old_store(client, exp, plan, lambda t: "0123456789abcdef")
    grid, phases, _ = select(plan, client, exp, force=False)
    assert grid == [t.key for t in plan.grid] and phases == ["refit"]
