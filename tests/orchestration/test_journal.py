"""Optuna studies on a journal file (``search.storage: journal:///path``, issue 31): for shared filesystems, where
SQLite corrupts (Optuna #815). Two drivers one after the other, each its own process, continue one study in one
file; the sweep's searcher takes the storage and survives Tune's pickling of it."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from orchestration import contract as C
from orchestration.launch.search import open_storage
from orchestration.spec.models import SearchSpec

REPO = Path(__file__).resolve().parents[2]

# One "driver": the study opened as open_storage opens it (the contract's file rule, Optuna's JournalFileBackend;
# importing the launch package would cost a driver process half a minute here), three more trials asked and told.
DRIVER = """
import sys, optuna
from optuna.storages.journal import JournalFileBackend
from orchestration.contract import journal_file
optuna.logging.set_verbosity(optuna.logging.WARNING)
storage = optuna.storages.JournalStorage(JournalFileBackend(journal_file(sys.argv[1])))
study = optuna.create_study(study_name="tiny:method=mutexmatch/fold0:abc", storage=storage,
                            direction="maximize", load_if_exists=True,
                            sampler=optuna.samplers.TPESampler(seed=len(sys.argv[2])))
for _ in range(3):
    trial = study.ask({"tau": optuna.distributions.FloatDistribution(0.7, 0.99)})
    study.tell(trial, trial.params["tau"])
print(len(study.trials), flush=True)
"""


def _driver(url: str, name: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", DRIVER, url, name], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_a_journal_study_survives_two_drivers_one_after_the_other(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    url = C.optuna_storage_url("journal:shared/optuna.journal", "http://127.0.0.1:5000", tmp_path)
    assert url == f"journal://{shared / 'optuna.journal'}"  # relative: against the project folder
    assert _driver(url, "first") == "3"
    first = (shared / "optuna.journal").read_bytes()
    assert _driver(url, "second") == "6"  # the second driver found the first one's three trials and added three
    assert (shared / "optuna.journal").read_bytes().startswith(first)  # one append-only log
    import optuna

    study = optuna.load_study(study_name="tiny:method=mutexmatch/fold0:abc", storage=open_storage(url))
    assert [t.number for t in study.trials] == list(range(6))
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in study.trials)
    assert not list(shared.glob("*.db"))


def test_the_sweeps_searcher_takes_a_journal_storage_and_pickles(tmp_path):
    import optuna

    from orchestration.launch.search import search_config

    class _Study:  # the fields search_config reads of an orchestration.spec.plan.SearchStudy
        index, n_trials, max_concurrent, evaluations = 0, 4, None, 2
        search = SearchSpec(metric="val/best_acc", space={"algorithm.tau": {"type": "float", "low": 0.7,
                                                                           "high": 0.99}})

    url = f"journal://{tmp_path / 'optuna.journal'}"
    config = search_config(_Study(), storage=url, name="s")  # type: ignore[arg-type]
    searcher = config["search_alg"]
    assert isinstance(searcher._storage, optuna.storages.JournalStorage)
    again = pickle.loads(pickle.dumps(searcher))  # Tune saves the searcher with the experiment (--resume)
    assert isinstance(again._storage, optuna.storages.JournalStorage)


@pytest.mark.parametrize("url, needle", [
    ("journal:///no/such/folder/optuna.journal", "the folder /no/such/folder does not exist"),
    ("journal:///tmp/", "a journal storage names its file"),
])
def test_a_journal_url_that_cannot_work_is_refused_at_load(url, needle):
    with pytest.raises(ValueError, match=needle):
        SearchSpec(metric="val/best_acc", space={"algorithm.tau": {"type": "float", "low": 0.7, "high": 0.99}},
                   storage=url)
