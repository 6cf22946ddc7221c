"""A fresh MLflow store beside another never continues the other's Optuna study, and its report never shows the
other's trials (issue 33 item 5, adversarial optuna-shared-across-stores / optuna-shared-report: both stores'
default Optuna file is the one optuna.db of their folder, and the study name is the sweep's, key's and hash's)."""

from __future__ import annotations

from types import SimpleNamespace

import optuna

from orchestration import contract as C
from orchestration.launch.search import study_for_store
from reports.search import _load_study

NAME = "srch:method=comatch/fold0:h1"


def _store(created_ms: int) -> SimpleNamespace:
    """What study_for_store reads of a Store: its experiment (MLflow gives a fresh store's first one id 1; the
    creation times differ)."""
    experiment = SimpleNamespace(experiment_id="1", creation_time=created_ms)
    return SimpleNamespace(experiment_id="1", client=SimpleNamespace(get_experiment=lambda _id: experiment))


def _add_trial(storage: str, name: str, value: float) -> None:
    study = optuna.load_study(study_name=name, storage=storage)
    study.add_trial(optuna.trial.create_trial(params={"x": value}, distributions={
        "x": optuna.distributions.FloatDistribution(0, 1)}, value=value))


def test_two_stores_in_one_folder_keep_their_own_studies(tmp_path):
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    first, second = _store(1700000000000), _store(1700000099999)
    url = C.optuna_storage_url(None, f"sqlite:///{tmp_path / 'a.db'}", tmp_path)
    assert url == C.optuna_storage_url(None, f"sqlite:///{tmp_path / 'b.db'}", tmp_path)  # one file for both
    assert study_for_store(first, url, NAME, mode="max", ran_here=False) == NAME
    _add_trial(url, NAME, 0.9)
    assert study_for_store(first, url, NAME, mode="max", ran_here=True) == NAME  # a relaunch continues it

    other = study_for_store(second, url, NAME, mode="max", ran_here=False)
    assert other != NAME and other.startswith(f"{NAME}@")
    assert optuna.load_study(study_name=other, storage=url).trials == []  # not warm-started by the first's trial
    assert study_for_store(second, url, NAME, mode="max", ran_here=True) == other  # and its relaunch keeps it

    owner = C.store_identity(second.client.get_experiment(second.experiment_id))
    assert _load_study(url, NAME, lambda: owner).study_name == other  # the second store's report: its own study
    mine = C.store_identity(first.client.get_experiment(first.experiment_id))
    assert [t.value for t in _load_study(url, NAME, lambda: mine).trials] == [0.9]


def test_a_store_launched_by_earlier_code_keeps_its_unmarked_study(tmp_path):
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    store = _store(1700000000000)
    url = f"sqlite:///{tmp_path / C.OPTUNA_DB}"
    optuna.create_study(study_name=NAME, storage=url, direction="maximize")  # as the code before the mark made it
    _add_trial(url, NAME, 0.7)
    assert study_for_store(store, url, NAME, mode="max", ran_here=True) == NAME
    study = optuna.load_study(study_name=NAME, storage=url)
    assert [t.value for t in study.trials] == [0.7]
    assert study.user_attrs[C.STUDY_OWNER] == C.store_identity(store.client.get_experiment(store.experiment_id))
