"""A ``--set`` try-out's trials are told apart from the YAML's real runs by their run name (issue 34;
orchestration.spec.tryouts): a --set that changes a trial's config makes it a try-out, one that changes none does
not, and a refit is judged on its base, not on the search's best parameters. Heavy: a real try-out's runs are so
named, and each is in its settings' MLflow view as soon as it finishes (item 4)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestration import contract as C
from orchestration.spec.overrides import load_sweep, plan_sweep
from orchestration.spec.tryouts import tryout_keys, yaml_plan

QUICKSTART = Path(__file__).resolve().parents[2] / "experiments" / "quickstart.yaml"
SPACE = ("algorithm.tau", "algorithm.k")


@pytest.fixture(scope="module")
def own(tmp_path_factory):
    project = tmp_path_factory.mktemp("tryouts")
    return project, yaml_plan(QUICKSTART, project, ["base.optim.lr=0.1"])


def _amended(project: Path, *items: str):
    return plan_sweep(load_sweep(QUICKSTART, project, items, need_data=False), project)


def test_a_set_that_changes_a_config_makes_try_outs_and_one_that_does_not_makes_none(own):
    project, plan = own
    assert plan is not None and plan.grid[0].config["optim"]["lr"] == 0.05  # the YAML's own, not the --set one
    every = {t.key for t in plan.grid}
    assert tryout_keys(plan, _amended(project, "base.optim.lr=0.1").grid) == every
    assert tryout_keys(plan, _amended(project, "resources.cpu=2").grid) == frozenset()   # no config changes
    fixmatch = _amended(project, "axes.method.fixmatch.algorithm.tau=0.9")
    assert tryout_keys(plan, fixmatch.grid) == {t.key for t in plan.grid if "method=fixmatch" in t.key}


def test_a_refit_is_a_try_out_of_its_base_not_of_the_searched_values(own):
    project, plan = own
    best = {"algorithm.tau": 0.91, "algorithm.k": 3}
    same_base = [s.trial(best) for s in _amended(project, "axes.method.fixmatch.algorithm.tau=0.9").refits]
    assert same_base and tryout_keys(plan, same_base, SPACE) == frozenset()
    other_base = [s.trial(best) for s in _amended(project, "base.train.iterations=900").refits]
    assert tryout_keys(plan, other_base, SPACE) == {t.key for t in other_base}


def test_no_set_no_smoke_no_try_outs(tmp_path):
    assert yaml_plan(QUICKSTART, tmp_path, []) is None
    assert yaml_plan(QUICKSTART, tmp_path, ["base.optim.lr=0.1"], smoke=True) is None
    assert tryout_keys(None, _amended(tmp_path, "base.optim.lr=0.1").grid) == frozenset()


def test_a_try_outs_run_name_says_so():
    levels = [("method", "mutexmatch"), ("setting", "digits-20")]
    assert C.trial_run_name(levels, 0) == "mutexmatch · digits-20 · fold 0"
    assert C.trial_run_name(levels, 0, tryout=True) == "mutexmatch · digits-20 · fold 0 · try-out"
    assert C.trial_run_name([*levels, ("tuned", "true")], 2, C.KIND_REFIT, True) == (
        "mutexmatch · digits-20 · fold 2 · refit · try-out")


@pytest.mark.heavy
def test_a_try_outs_run_is_named_so_and_in_its_view_as_soon_as_it_finishes(tmp_path, data_root, sweep_env, procs):
    """A real --set try-out of a tiny sweep: its runs end in '· try-out', and the first one to finish is marked for
    its settings' view while the launch still runs (two trials wait behind it: its end, which marks the whole set,
    is minutes away; the driver is SIGKILLed instead)."""
    import signal
    import subprocess
    import sys

    from mlflow import MlflowClient

    from tests.orchestration.test_fault_tolerance import grid_runs, write_spec

    spec = write_spec(tmp_path, data_root, name="try", iterations=40, folds=[0, 1, 2], methods=["fixmatch"])
    tryout = ("base.optim.lr=0.02",)
    digest = load_sweep(spec, tmp_path, tryout, need_data=False).settings_digest
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    driver = subprocess.Popen([sys.executable, "-m", "orchestration.sweep", spec.name, "--max-concurrent", "1",
                               "--set", tryout[0]], cwd=tmp_path, env=sweep_env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        procs["wait_for"](lambda: [r for r in grid_runs(client, "try") if r.info.status == "FINISHED"
                                   and r.data.tags.get(C.counted_tag(digest)) == "true"],
                          400, "a finished try-out trial marked for its view")
        assert driver.poll() is None, driver.communicate()[0]        # the launch had not ended
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait(timeout=60)
    finally:
        procs["kill"]([driver.pid, *procs["descendants"](driver.pid)])
    assert [r.info.run_name for r in grid_runs(client, "try") if not r.info.run_name.endswith(" · try-out")] == []
