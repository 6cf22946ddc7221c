"""Tune, then evaluate: the search's best parameters refit on every fold (kind ``refit``, cell id plus
``tuned=true``), skipped on relaunch when the same parameters FINISHED, and a durable Optuna study that a resumed
launch continues. Unit tests on the plan, then end to end through the real CLI, Ray, Optuna and MLflow."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
import yaml
from mlflow import MlflowClient

from orchestration import contract as C
from orchestration.spec.plan import build_plan
from orchestration.launch.best import legacy_config_value as config_value
from orchestration.launch.search import search_config
from orchestration.spec.sweepfile import parse_spec, trial_config

SPEC = """
name: {name}
base:
  data: {{dataset: digits, num_labels: 20, root: {root}}}
  model: {{backbone: small_cnn}}
  train: {{iterations: {iterations}, eval_interval: {eval_interval}, batch_size: 4, mu: 2, eval_batch_size: 512}}
folds: [0, 1]
axes:
  method:
    mutexmatch: {{algorithm: {{name: mutexmatch}}}}
resources: {{cpu: 1, gpu: 0}}
search:
  cells: [{{method: mutexmatch}}]
  metric: val/best_acc
  n_trials: {n_trials}
  max_concurrent: {max_concurrent}
  base: {{data: {{val_per_class: 5}}, train: {{iterations: {search_iterations}}}}}
  space:
    algorithm.tau: {{type: float, low: 0.7, high: 0.99}}
    algorithm.k: {{type: int, low: 1, high: 10}}
  scheduler: {{type: asha, grace_period: 1, reduction_factor: 2}}
"""


def write_spec(project: Path, data_root: Path, name: str = "tuned", *, iterations: int = 8, eval_interval: int = 4,
               n_trials: int = 3, max_concurrent: int = 2, search_iterations: int = 8) -> Path:
    project.mkdir(parents=True, exist_ok=True)
    path = project / f"{name}.yaml"
    path.write_text(SPEC.format(name=name, root=data_root, iterations=iterations, eval_interval=eval_interval,
                                n_trials=n_trials, max_concurrent=max_concurrent,
                                search_iterations=search_iterations))
    return path


def spec_of(tmp_path: Path, **search: object):
    raw = yaml.safe_load(SPEC.format(name="t", root=tmp_path, iterations=8, eval_interval=4, n_trials=3,
                                     max_concurrent=2, search_iterations=6))
    raw["search"].update(search)
    return parse_spec(raw, tmp_path)


# ------------------------------------------------------------------------------------------------ the plan
def test_refit_is_on_by_default_with_the_grid_config_on_every_fold(tmp_path):
    spec = spec_of(tmp_path)
    plan = build_plan(spec, tmp_path)
    assert [r.key for r in plan.refits] == ["method=mutexmatch,tuned=true/fold0", "method=mutexmatch,tuned=true/fold1"]
    for slot, grid in zip(plan.refits, plan.grid):
        assert slot.config == grid.config  # the full schedule and no validation split, not the search's base
        assert slot.iterations == 8 and slot.config["data"].get("val_per_class", 0) == 0
    assert plan.num_trials == 2 + 3 + 2


def test_refit_can_be_turned_off_or_given_folds_and_a_base(tmp_path):
    assert build_plan(spec_of(tmp_path, refit=False), tmp_path).refits == []
    plan = build_plan(spec_of(tmp_path, refit={"folds": [1], "base": {"train": {"iterations": 12}}}), tmp_path)
    assert [(r.fold, r.iterations) for r in plan.refits] == [(1, 12)]
    spec = spec_of(tmp_path, refit={"base": {"train": {"iterations": 12}}})
    assert plan.refits[0].config == trial_config(spec, plan.refits[0].cell, 1, project_dir=tmp_path, refit=True)


def test_refit_settings_do_not_change_the_search_hash(tmp_path):
    """A search that finished stays finished when only what follows it (refit, study storage) changes."""
    hashes = {build_plan(spec_of(tmp_path, **kw), tmp_path).searches[0].search_hash
              for kw in ({}, {"refit": False}, {"refit": {"folds": [0]}}, {"storage": "sqlite:////tmp/o.db"})}
    assert len(hashes) == 1


def test_refit_trial_sets_the_parameters_and_its_hash_covers_them(tmp_path):
    slot = build_plan(spec_of(tmp_path), tmp_path).refits[0]
    a = slot.trial({"algorithm.tau": 0.81, "algorithm.k": 3})
    b = slot.trial({"algorithm.tau": 0.82, "algorithm.k": 3})
    assert a.kind == C.KIND_REFIT and a.key == slot.key and a.cell.id == "method=mutexmatch,tuned=true"
    assert a.config["algorithm"]["tau"] == 0.81 and a.config["algorithm"]["k"] == 3
    assert a.config_hash != b.config_hash
    assert slot.config["algorithm"].get("tau") is None  # the slot itself is untouched


def test_bad_refit_settings_are_refused_naming_the_field(tmp_path):
    with pytest.raises(Exception, match="refit.folds"):
        spec_of(tmp_path, refit={"folds": [0, 0]})
    with pytest.raises(Exception, match="refit"):
        spec_of(tmp_path, refit={"fold": [0]})
    with pytest.raises(Exception, match="refit cell method=mutexmatch fold 0: .*train.iterations"):
        spec_of(tmp_path, refit={"base": {"train": {"iterations": -1}}})


@pytest.mark.parametrize("logged,value", [("3", 3), ("0.73", 0.73), ("1e-05", 1e-05), ("0.6C", "0.6C"),
                                          ("True", True), ("None", None), ("wrn28_2", "wrn28_2")])
def test_logged_params_come_back_as_config_values(logged, value):
    assert config_value(logged) == value and type(config_value(logged)) is type(value)


def test_optuna_storage_sits_beside_a_sqlite_store_else_in_the_project(tmp_path):
    assert C.optuna_storage_url(None, f"sqlite:///{tmp_path}/db/mlflow.db", tmp_path) == \
        f"sqlite:///{tmp_path}/db/optuna.db"
    assert C.optuna_storage_url(None, "http://127.0.0.1:5000", tmp_path) == f"sqlite:///{tmp_path}/optuna.db"
    assert C.optuna_storage_url("postgresql://h/db", "http://127.0.0.1:5000", tmp_path) == "postgresql://h/db"


def test_a_relaunched_search_continues_its_study_and_runs_only_the_missing_trials(tmp_path):
    study = build_plan(spec_of(tmp_path), tmp_path).searches[0]
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    first = optuna.create_study(study_name="s", storage=url, direction="maximize")
    first.add_trial(optuna.trial.create_trial(params={"algorithm.tau": 0.8, "algorithm.k": 2}, value=0.5,
                                              distributions={"algorithm.tau": optuna.distributions.FloatDistribution(
                                                  0.7, 0.99), "algorithm.k": optuna.distributions.IntDistribution(
                                                  1, 10)}))
    cfg = search_config(study, storage=url, name="s", finished=1)
    assert cfg["num_samples"] == 2
    searcher = cfg["search_alg"].searcher  # inside the ConcurrencyLimiter
    searcher.set_search_properties(study.search.metric, study.search.mode, {})
    assert [t.value for t in searcher._ot_study.trials] == [0.5]  # the same study, its history loaded


# ------------------------------------------------------------------------------------------------ end to end
def _runs(client: MlflowClient, name: str, kind: str | None = None) -> list:
    exp = client.get_experiment_by_name(name)
    flt = f"tags.`{C.KIND}` = '{kind}'" if kind else ""
    return client.search_runs([exp.experiment_id], flt, max_results=1000)


def _best_trials(project: Path, plan_spec: Path) -> list[optuna.trial.FrozenTrial]:
    """Optuna's COMPLETE trials that share the best value, read from the durable study."""
    plan = build_plan(parse_spec(yaml.safe_load(plan_spec.read_text()), project), project)
    s = plan.searches[0]
    study = optuna.load_study(study_name=C.study_name(plan.spec.name, s.key, s.search_hash),
                              storage=f"sqlite:///{project / C.OPTUNA_DB}")
    return [t for t in study.get_trials(states=[optuna.trial.TrialState.COMPLETE]) if t.value == study.best_value]


@pytest.mark.slow
def test_search_then_refit_trains_the_best_parameters_on_every_fold(tmp_path, data_root, run_cli):
    spec = write_spec(tmp_path, data_root)
    result = run_cli(tmp_path, spec.name)
    assert result.returncode == 0, result.output
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    refits = _runs(client, "tuned", C.KIND_REFIT)
    assert sorted(r.info.run_name for r in refits) == ["mutexmatch · fold 0 · refit", "mutexmatch · fold 1 · refit"]
    best_params = {(round(t.params["algorithm.tau"], 12), t.params["algorithm.k"])
                   for t in _best_trials(tmp_path, spec)}
    for run in refits:
        assert run.info.status == "FINISHED"
        assert run.data.tags[C.CELL] == "method=mutexmatch,tuned=true" and run.data.tags[C.axis_tag("tuned")] == "true"
        p = run.data.params
        assert (round(float(p["algorithm.tau"]), 12), int(p["algorithm.k"])) in best_params
        assert p["train.iterations"] == "8" and p["data.val_per_class"] == "0"  # the grid's schedule, no val split
    assert len({(r.data.params["algorithm.tau"], r.data.params["algorithm.k"]) for r in refits}) == 1
    # every search run carries the values Tune's searcher sampled, typed, equal to its Optuna trial's
    url = f"sqlite:///{tmp_path / C.OPTUNA_DB}"
    study = optuna.load_study(study_name=optuna.get_all_study_names(url)[0], storage=url)
    sampled = [C.read_sampled(r.data.tags) for r in _runs(client, "tuned", C.KIND_SEARCH)]
    assert all(type(s["algorithm.k"]) is int and type(s["algorithm.tau"]) is float for s in sampled), sampled
    assert sorted(map(str, sampled)) == sorted(str(dict(sorted(t.params.items()))) for t in study.get_trials())
    assert "method=mutexmatch,tuned=true" in result.output  # the summary's own row
    # grid statistics never see search or refit runs
    grid = _runs(client, "tuned", C.KIND_GRID)
    assert {r.data.tags[C.CELL] for r in grid} == {"method=mutexmatch"} and len(grid) == 2

    before = len(_runs(client, "tuned"))
    again = run_cli(tmp_path, spec.name, timeout=180)
    assert again.returncode == 0 and "nothing to do" in again.output, again.output
    assert len(_runs(client, "tuned")) == before
    plan = run_cli(tmp_path, spec.name, "--dry-run", timeout=180)
    assert plan.returncode == 0, plan.output
    # the finished refit is not planned again (left out, or listed as done)
    rows = [ln for ln in plan.output.splitlines() if ln.startswith("method=mutexmatch,tuned=true")]
    assert all("done" in r or "skipped" in r for r in rows), plan.output


def test_dry_run_lists_the_refit_trials_as_chosen_by_search(tmp_path, data_root, run_cli):
    spec = write_spec(tmp_path, data_root)
    result = run_cli(tmp_path, spec.name, "--dry-run", "--per-trial", timeout=180)
    if result.returncode != 0 and "--per-trial" in result.output:  # before the per-trial form exists
        result = run_cli(tmp_path, spec.name, "--dry-run", timeout=180)
    assert result.returncode == 0, result.output
    rows = [ln for ln in result.output.splitlines() if ln.startswith("method=mutexmatch,tuned=true")]
    assert rows and all(C.KIND_REFIT in r and "chosen by search" in r for r in rows)
    assert not (tmp_path / "mlflow.db").exists()


@pytest.mark.heavy  # heavy: 168 s; CI keeps the search+refit run and the journal study across two drivers
@pytest.mark.slow
def test_sigkilled_driver_during_the_search_resumes_with_its_study_intact(tmp_path, data_root, sweep_env, run_cli,
                                                                       procs):
    spec = write_spec(tmp_path, data_root, "skill", iterations=8, n_trials=4, max_concurrent=1,
                      search_iterations=400, eval_interval=100)
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    log = (tmp_path / "driver.log").open("w")
    driver = subprocess.Popen([sys.executable, "-m", "orchestration.sweep", spec.name], cwd=tmp_path, env=sweep_env,
                              stdout=log, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        def two_searched():
            exp = client.get_experiment_by_name("skill")
            runs = _runs(client, "skill", C.KIND_SEARCH) if exp else []
            return len([r for r in runs if r.info.status == "FINISHED"]) >= 2 and \
                any(r.info.status == "RUNNING" for r in runs)

        procs["wait_for"](two_searched, 400, "two finished search trials and a third running")
        ray_procs = procs["descendants"](driver.pid)
        driver.send_signal(signal.SIGKILL)
        driver.wait(timeout=30)
    finally:
        procs["kill"]([driver.pid, *procs["descendants"](driver.pid)])
        log.close()
    procs["kill"](ray_procs)
    storage = f"sqlite:///{tmp_path / C.OPTUNA_DB}"
    (name,) = optuna.get_all_study_names(storage)
    before = optuna.load_study(study_name=name, storage=storage)
    done_before = {t.number: (t.params, t.value) for t in before.trials if t.state.is_finished()}
    assert len(done_before) >= 2

    result = run_cli(tmp_path, spec.name, "--resume", timeout=500)
    assert result.returncode == 0, result.output
    after = optuna.load_study(study_name=name, storage=storage)
    assert {n: (t.params, t.value) for t in after.trials for n in [t.number] if n in done_before} == done_before
    complete = after.get_trials(states=[optuna.trial.TrialState.COMPLETE])
    assert len(complete) == 4 and after.best_value >= max(v for _, v in done_before.values())
    # a trial the killed driver had started but not saved is replaced, and says so
    assert not after.get_trials(states=[optuna.trial.TrialState.RUNNING])
    assert all(t.user_attrs.get("mutexmatch") for t in after.get_trials(states=[optuna.trial.TrialState.FAIL]))
    search = _runs(client, "skill", C.KIND_SEARCH)
    assert len(search) == 4 and {r.info.status for r in search} == {"FINISHED"}  # no duplicate, no orphan
    assert len({r.data.tags[C.TRIAL_ID] for r in search}) == 4
    assert not [r for r in _runs(client, "skill") if r.info.status == "RUNNING"]
    assert len(_runs(client, "skill", C.KIND_REFIT)) == 2
