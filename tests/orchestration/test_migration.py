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


# Issue 32: a store written before its changed defaults. The sweep below, planned by the code of commit 1282aee,
# tagged its runs with these config hashes (pinned: that code's plan, not this one's).
ISSUE_32_SWEEP = """
name: issue32-migration
base:
  data: {dataset: digits, num_labels: 20, split_rule: official}
  model: {backbone: small_cnn}
  train: {iterations: 100, eval_interval: 50, batch_size: 16, mu: 4}
folds: [0]
axes:
  method:
    fixmatch: {algorithm: {name: fixmatch}}
    comatch: {algorithm: {name: comatch}}
    simmatch: {algorithm: {name: simmatch}}
    adamatch: {algorithm: {name: adamatch}}
    vat: {algorithm: {name: vat}}
    pseudolabel: {algorithm: {name: pseudolabel}}
resources: {cpu: 1, gpu: 0}
"""
BEFORE_32 = {"method=fixmatch/fold0": "1806a6abe2950dd3", "method=comatch/fold0": "f5cece62f3b5b178",
             "method=simmatch/fold0": "830182c2b59fdeaf", "method=adamatch/fold0": "28f276b480d67d36",
             "method=vat/fold0": "ec2fec252f120187", "method=pseudolabel/fold0": "ceacf3cd4c937d40"}
# what each algorithm computed before issue 32, asked for explicitly (Pseudo-Label's old step is gone)
ASK_FOR_32 = {"simmatch": {"epoch_steps": 0}, "adamatch": {"da_ratio": "filled"}, "vat": {"vat_probe": "usb"}}


@pytest.mark.heavy   # ~30 s of MLflow on the shared CPUs; CI: tests/mutexmatch/test_config_identity.py and the pins
def test_a_store_written_before_issue_32_is_found_only_by_configs_asking_for_the_old_behaviour(tmp_path):
    """Relaunched after issue 32 with the YAML as it was, the trials whose default changed (SimMatch's epoch,
    AdaMatch's quotient, VAT's probe, Pseudo-Label's step) run again and the others (FixMatch; CoMatch, whose
    default start reads no epoch) are skipped; with the YAML asking for the old behaviour, only Pseudo-Label runs."""
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    asked_text = ISSUE_32_SWEEP
    for name, params in ASK_FOR_32.items():
        extra = ", ".join(f"{k}: {v}" for k, v in params.items())
        asked_text = asked_text.replace(f"{{name: {name}}}", f"{{name: {name}, {extra}}}")
    for text, rerun in ((ISSUE_32_SWEEP, {"simmatch", "adamatch", "vat", "pseudolabel"}),
                        (asked_text, {"pseudolabel"})):
        folder = tmp_path / str(len(rerun))
        folder.mkdir()
        (folder / "sweep.yaml").write_text(text)
        plan = build_plan(load_spec(folder / "sweep.yaml", folder), folder)
        exp = client.create_experiment(f"issue32-{len(rerun)}")
        for t in plan.grid:
            _finished(client, exp, _tags(C.KIND_GRID, t, t.cell, t.fold, BEFORE_32[t.key]))
        grid, _, _ = select(plan, client, exp, force=False)
        assert sorted(grid) == sorted(f"method={m}/fold0" for m in rerun), text
