"""The best search trial, computed in one place (issue 22 item 7): the rule (``contract.best_trial``) and its reading
of the MLflow search runs (``orchestration.launch.best``), which the refit, the sweep's ``best.*`` and a relaunch's
check of the finished refits all use; and the typed values a search run carries (``mutexmatch.sampled``), converted to
config values by the chosen algorithm's parameter model (a float ``k`` is a fraction of C) exactly as the trial
trained."""

from __future__ import annotations

import math
import uuid

import pytest
import yaml
from mlflow.tracking import MlflowClient

from orchestration import contract as C
from orchestration.launch.best import best_by_cell, best_of_study
from orchestration.launch.launch import select
from orchestration.spec.plan import build_plan
from orchestration.launch.refit import refit_trials
from orchestration.launch.search import log_best
from orchestration.spec.sweepfile import parse_spec, with_sampled
from orchestration.store.store import Store

O = C.SearchOutcome


# ------------------------------------------------------------------------------------------------ the rule
def test_the_best_value_wins_in_either_direction():
    trials = [O(0.5, True, run_id="a"), O(0.9, True, run_id="b"), O(0.7, True, run_id="c")]
    assert C.best_trial(trials, "max").run_id == "b"
    assert C.best_trial(trials, "min").run_id == "a"


def test_failed_running_and_valueless_trials_never_win():
    trials = [O(0.99, False, run_id="failed"), O(None, True, run_id="no value"), O(math.nan, True, run_id="nan"),
              O(math.inf, True, run_id="inf"), O(0.4, True, run_id="finished")]
    assert C.best_trial(trials, "max").run_id == "finished"
    assert C.best_trial(trials, "min").run_id == "finished"


def test_nothing_without_a_scored_trial():
    assert C.best_trial([], "max") is None
    assert C.best_trial([O(0.9, False), O(None, True), O(math.nan, True)], "max") is None


def test_ties_go_to_the_earlier_study_then_the_later_start_then_the_smaller_run_id():
    tie = [O(0.8, True, study=1, start_time=50, run_id="a"), O(0.8, True, study=0, start_time=10, run_id="z"),
           O(0.8, True, study=0, start_time=20, run_id="y"), O(0.8, True, study=0, start_time=20, run_id="x")]
    assert C.best_trial(tie, "max").run_id == "x"
    for order in (tie[::-1], tie[1:] + tie[:1], sorted(tie, key=lambda o: o.run_id)):  # any input order
        assert C.best_trial(order, "max").run_id == "x"


def test_a_mode_other_than_max_or_min_is_refused():
    with pytest.raises(ValueError, match="mode='maximize': must be max or min"):
        C.best_trial([O(0.5, True)], "maximize")


# ------------------------------------------------------------------------------------------------ from MLflow
SPEC = """
name: best
base:
  data: {dataset: digits, num_labels: 20, root: ROOT}
  model: {backbone: small_cnn}
  train: {iterations: 8, eval_interval: 4, batch_size: 4, mu: 2}
folds: [0, 1]
axes:
  method:
    mutexmatch: {algorithm: {name: mutexmatch}}
search:
  metric: val/best_acc
  n_trials: 3
  folds: [0, 1]
  base: {data: {val_per_class: 5}}
  space:
    algorithm.tau: {type: float, low: 0.7, high: 0.99}
    algorithm.k: {type: float, low: 0.3, high: 1.0}
  scheduler: {type: none}
"""


@pytest.fixture
def store(tmp_path):
    raw = yaml.safe_load(SPEC.replace("ROOT", str(tmp_path)))
    plan = build_plan(parse_spec(raw, tmp_path), tmp_path)
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    return client, client.create_experiment("best"), plan


def _search_run(client, exp, study, value, *, status="FINISHED", sampled=None, logged=None, start=0):
    tags = C.trial_tags(parent_run_id="p", kind=C.KIND_SEARCH, cell_levels=study.cell.levels, cell_id=study.cell.id,
                        fold=study.fold, variant="mutexmatch", config_hash="h", commit="c",
                        trial_id=uuid.uuid4().hex[:8], launch_id="l")
    tags[C.SEARCH_HASH] = study.search_hash
    if sampled is not None:
        tags[C.SAMPLED] = C.sampled_json(sampled)
    run = client.create_run(exp, start_time=start, tags=tags)
    for name, text in (logged or {}).items():
        client.log_param(run.info.run_id, name, text)
    if value is not None:
        client.log_metric(run.info.run_id, study.search.metric, value, step=1)
    client.set_terminated(run.info.run_id, status)
    return run.info.run_id


def test_typed_values_become_the_config_values_the_trial_trained(store):
    client, exp, plan = store
    study = plan.searches[0]
    sampled = {"algorithm.tau": 0.8123456789012345, "algorithm.k": 0.6}
    run = _search_run(client, exp, study, 0.9, sampled=sampled, logged={"algorithm.tau": "0.8", "algorithm.k": "x"})
    found = best_of_study(Store(client, exp), study)
    assert found.run_id == run and found.sampled == sampled  # the tag, not the (here deliberately wrong) params
    assert found.params == {"algorithm.tau": 0.8123456789012345, "algorithm.k": "0.6C"}
    trained = with_sampled(study.config, sampled)["algorithm"]  # what the trainable set on the search trial
    assert {f"algorithm.{k}": trained[k] for k in ("tau", "k")} == found.params
    refit = refit_trials(plan, best_by_cell(plan, Store(client, exp)))[0]
    assert {t.config["algorithm"]["k"] for t in refit.values()} == {"0.6C"}


def test_a_run_from_before_the_typed_tag_reads_its_params_as_its_refit_did(store):
    client, exp, plan = store
    study = plan.searches[0]
    _search_run(client, exp, study, 0.9, logged={"algorithm.tau": "1e-05", "algorithm.k": "0.6C"})
    assert best_of_study(Store(client, exp), study).params == {"algorithm.tau": 1e-05, "algorithm.k": "0.6C"}


def test_refit_best_parameters_and_relaunch_check_read_the_same_trial(store, tmp_path):
    """A failed run with a better value, a tie across the cell's two studies (the first fold's wins) and within a
    study (the later start wins): the refit, the logged best and the relaunch's skip agree on one run."""
    client, exp, plan = store
    s0, s1 = plan.searches
    _search_run(client, exp, s0, 0.99, status="FAILED", sampled={"algorithm.tau": 0.71, "algorithm.k": 0.3})
    _search_run(client, exp, s0, 0.8, sampled={"algorithm.tau": 0.72, "algorithm.k": 0.4}, start=1000)
    winner = _search_run(client, exp, s0, 0.8, sampled={"algorithm.tau": 0.73, "algorithm.k": 0.5}, start=2000)
    _search_run(client, exp, s1, 0.8, sampled={"algorithm.tau": 0.74, "algorithm.k": 0.6}, start=3000)
    _search_run(client, exp, s1, None, sampled={"algorithm.tau": 0.75, "algorithm.k": 0.7}, start=4000)
    cell = best_by_cell(plan, Store(client, exp))[s0.cell.id]
    assert cell.run_id == winner and cell.params == {"algorithm.tau": 0.73, "algorithm.k": "0.5C"}
    assert best_of_study(Store(client, exp), s1).params["algorithm.tau"] == 0.74
    parent = client.create_run(exp).info.run_id
    logged = log_best(plan, Store(client, exp), parent)
    tags = client.get_run(parent).data.tags
    assert tags[C.best_param_prefix(s0.cell.id, 0) + "run_id"] == winner
    assert logged[s0.key] == {"algorithm.tau": "0.73", "algorithm.k": "0.5C", "val/best_acc": "0.8"}
    refits, _ = refit_trials(plan, best_by_cell(plan, Store(client, exp)))
    for t in refits.values():  # the refits of that run, FINISHED: a relaunch has nothing left to run
        run = client.create_run(exp, tags={**C.trial_tags(parent_run_id=parent, kind=C.KIND_REFIT,
                                                            cell_levels=t.cell.levels, cell_id=t.cell.id,
                                                            fold=t.fold, variant="mutexmatch",
                                                            config_hash=t.config_hash, commit="c", trial_id="t",
                                                            launch_id="l")})
        client.set_terminated(run.info.run_id, "FINISHED")
    for s in plan.searches:  # and every study has its trials
        for _ in range(s.n_trials):
            _search_run(client, exp, s, 0.1, sampled={"algorithm.tau": 0.9, "algorithm.k": 0.9})
    assert select(plan, Store(client, exp), force=False)[1] == []
