"""An Optuna (TPE) study on Ray Tune: the search space, the searcher and ASHA scheduler, and the best parameters
logged to the parent run."""

from __future__ import annotations

from typing import Any

from orchestration import contract as C
from orchestration.launch.best import best_of_study
from orchestration.spec.plan import SearchStudy, SweepPlan
from orchestration.spec.models import CategoricalParam, FloatParam, IntParam
from orchestration.store.store import Store

__all__ = ["optuna_space", "search_config", "fail_stale_trials", "log_best", "open_storage", "study_for_store"]


def optuna_space(study: SearchStudy) -> dict[str, Any]:
    import optuna

    space = {}
    for path, p in study.search.space.items():
        if isinstance(p, FloatParam):
            space[path] = optuna.distributions.FloatDistribution(p.low, p.high, log=p.log)
        elif isinstance(p, IntParam):
            space[path] = optuna.distributions.IntDistribution(p.low, p.high, log=p.log)
        elif isinstance(p, CategoricalParam):
            space[path] = optuna.distributions.CategoricalDistribution(p.choices)
    return space


def open_storage(url: str) -> Any:
    """The Optuna storage at ``url`` (:func:`orchestration.contract.optuna_storage_url`): a journal file
    (``journal:///path``: ``JournalStorage(JournalFileBackend(path))``, for a shared filesystem, where SQLite's
    locks corrupt the file, Optuna #815) or a database (``RDBStorage``)."""
    import optuna

    path = C.journal_file(url)
    if path is None:
        return optuna.storages.RDBStorage(url)
    from optuna.storages.journal import JournalFileBackend

    return optuna.storages.JournalStorage(JournalFileBackend(path))


def study_for_store(store: Store, storage: str, name: str, *, mode: str, ran_here: bool) -> str:
    """The Optuna study in ``storage`` this store's search ``name`` uses (:func:`orchestration.contract.choose_study`),
    created and marked as the store's (:data:`orchestration.contract.STUDY_OWNER`) when it is new to it: a fresh
    store beside another one never continues the other's study (issue 33 item 5). ``ran_here``: the store already
    has search runs of it (a study from before the mark is then this store's)."""
    import optuna

    backend = open_storage(storage)
    owner = C.store_identity(store.client.get_experiment(store.experiment_id))
    chosen, claim = C.choose_study(name, owner, lambda n: C.study_owner(backend, n), ran_here)
    if claim:
        study = optuna.create_study(study_name=chosen, storage=backend, load_if_exists=True,
                                    direction="maximize" if mode == "max" else "minimize")
        study.set_user_attr(C.STUDY_OWNER, owner)
    if chosen != name:
        print(f"[sweep] the Optuna study {name!r} in {storage} holds another MLflow store's trials; this store's "
              f"search uses its own study {chosen!r}", flush=True)
    return chosen


def search_config(study: SearchStudy, *, storage: str, name: str, finished: int = 0) -> dict[str, Any]:
    """Tune's searcher, scheduler and sample count for ``study``: TPE on the durable Optuna study ``name`` in
    ``storage`` (an RDB or journal URL, :func:`open_storage`), so a relaunch continues the same study — its earlier trials inform the sampler and
    only the ``n_trials − finished`` missing trials run — and ``optuna.load_study`` or optuna-dashboard can open it.
    (``--resume`` restores Tune's own pickled searcher instead, which holds the same storage.)"""
    import optuna
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler
    from ray.tune.search import ConcurrencyLimiter
    from ray.tune.search.optuna import OptunaSearch

    s = study.search
    # TPE needs a few random trials before it models anything; in small searches give it half of them.
    sampler = optuna.samplers.TPESampler(seed=study.index, n_startup_trials=min(10, max(2, study.n_trials // 2)))
    searcher: Any = OptunaSearch(space=optuna_space(study), metric=s.metric, mode=s.mode, sampler=sampler,
                                 study_name=name, storage=open_storage(storage))
    if study.max_concurrent:
        searcher = ConcurrencyLimiter(searcher, max_concurrent=study.max_concurrent)
    if s.scheduler.type == "asha":
        scheduler: Any = ASHAScheduler(time_attr="training_iteration", metric=s.metric, mode=s.mode,
                                       max_t=study.evaluations, grace_period=s.scheduler.grace_period,
                                       reduction_factor=s.scheduler.reduction_factor)
    else:
        scheduler = FIFOScheduler()
    return {"search_alg": searcher, "scheduler": scheduler, "num_samples": max(1, study.n_trials - finished)}


def fail_stale_trials(storage: str, name: str) -> None:
    """Once Tune is done with a study, a trial still RUNNING in it belonged to a killed driver and was replaced:
    mark it FAIL (with the reason as a user attribute) so the study's history says what happened."""
    import optuna

    rdb = open_storage(storage)
    study = optuna.load_study(study_name=name, storage=rdb)
    for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        rdb.set_trial_user_attr(trial._trial_id, "mutexmatch", "its sweep driver was killed; the trial was replaced")
        rdb.set_trial_state_values(trial._trial_id, optuna.trial.TrialState.FAIL)


def log_best(plan: SweepPlan, store: Store, parent_run_id: str) -> dict[str, dict[str, str]]:
    """Best parameters of every search study → printed, and logged to the parent run as params and tags
    ``best.<param>`` (prefixed with the cell and fold when the sweep has several studies)."""
    from mlflow.exceptions import MlflowException

    best: dict[str, dict[str, str]] = {}
    client = store.client
    for study in plan.searches:
        found = best_of_study(store, study)
        if found is None:
            continue
        params = {k: str(v) for k, v in found.params.items()}  # as MLflow logs a config value
        best[study.key] = {**params, study.search.metric: f"{found.value:.6g}"}
        prefix = C.best_param_prefix(study.cell.id, study.fold) if len(plan.searches) > 1 else C.BEST_PREFIX
        entries = {f"{prefix}{k}": v for k, v in params.items()}
        entries[f"{prefix}run_id"] = found.run_id
        for k, v in entries.items():
            client.set_tag(parent_run_id, k, v)
            try:
                client.log_param(parent_run_id, k, v)
            except MlflowException:  # a resumed launch that logged another best earlier: the tag holds the latest
                pass
        client.log_metric(parent_run_id, f"{prefix}{study.search.metric}", found.value)
    return best
