"""``--register-model NAME`` (issue 44 item 2): the best model of every cell of a sweep in MLflow's Model Registry,
as versions of the registered model NAME, so it can be served or compared by name (``models:/NAME/<version>``).

A cell's model is the logged model (``model``, :mod:`orchestration.trial.model_log`) of its fold with the highest
final test accuracy (``test/acc``: the final EMA weights, which that model holds; a tie goes to the first fold); a
searched cell's refit (``…,tuned=true``) is a cell of its own, as in the summary
(:func:`orchestration.launch.summary.runs_by_cell`: the runs the report counts, a reused trial's being the run it
links to). A cell is registered once every fold it plans has FINISHED, so its version is the best of all of them;
until then it is named in one line and the resume (or a relaunch) registers it. Each version carries the cell, the
fold, the accuracy, the config hash and the kind as tags (:data:`VERSION_TAGS`). Registering is idempotent: a run
that already has a version of NAME keeps it (nothing new), so a relaunch or ``--resume`` adds only what is new."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from orchestration import contract as C
from orchestration.launch.summary import runs_by_cell
from orchestration.spec.plan import SweepPlan
from orchestration.store.store import Store

if TYPE_CHECKING:
    from mlflow.entities.model_registry import ModelVersion

__all__ = ["VERSION_TAGS", "Registered", "check_model_name", "register_best_models"]

OPTION = "--register-model"
# The tags of a registered version: which cell and fold it is, its test accuracy (the fraction, as logged), the config
# hash its run trained and its kind (grid or refit).
VERSION_TAGS = (C.CELL, C.FOLD, C.TEST_ACC, C.CONFIG_HASH, C.KIND)


def check_model_name(name: str) -> None:
    """``ValueError`` in one line when MLflow's registry would refuse ``name`` (its own rule), before any work."""
    from mlflow.exceptions import MlflowException
    from mlflow.utils.validation import _validate_model_name  # the rule create_registered_model applies

    try:
        _validate_model_name(name)
    except MlflowException as e:
        raise ValueError(f"{OPTION} {name!r}: not a registered model name MLflow accepts: {e.message} (give a name "
                         "such as mutexmatch-cifar10)") from None


@dataclass(frozen=True)
class Registered:
    """One cell's registered version: ``new`` False when its run had one already (a relaunch, a resume)."""

    cell: str
    fold: str
    accuracy: float
    run_id: str
    version: str
    new: bool


def _best_fold(store: Store, runs: list[Any]) -> tuple[Any, float] | None:
    """The run holding the results of the best fold among ``runs`` (by ``test/acc``), with its accuracy."""
    scored = [(res, res.data.metrics[C.TEST_ACC]) for res in map(store.results_run, runs)
              if C.TEST_ACC in res.data.metrics]
    return max(scored, key=lambda pair: pair[1]) if scored else None  # max keeps the first of equals


def _model_id(store: Store, run: Any) -> str | None:
    """The id of the logged model ``model`` of ``run`` (in its experiment, or Default for a store made before issue 40
    that was not moved), the newest if there are several. Any status: models logged before 44 stayed PENDING (MLflow
    leaves finalizing to whoever created the model); a FINISHED run's model is complete, as its run logged it last."""
    found = store.client.search_logged_models(
        [run.info.experiment_id, "0"], filter_string=f"source_run_id = '{run.info.run_id}' AND "
                                                      f"name = '{C.MODEL_ARTIFACT}'",
        order_by=[{"field_name": "creation_timestamp", "ascending": False}])
    return found[0].model_id if found else None


def _existing(store: Store, name: str, run_id: str) -> "ModelVersion | None":
    """The version of ``name`` already registered from ``run_id`` (what makes registering idempotent)."""
    return next((v for v in store.client.search_model_versions(f"run_id = '{run_id}'") if v.name == name), None)


def _ensure_registered_model(store: Store, name: str) -> None:
    from mlflow.exceptions import MlflowException

    try:
        store.client.create_registered_model(name, description="The best model of each cell of a mutexmatch sweep "
                                             "(python -m orchestration.sweep --register-model); tags: cell, fold, "
                                             "test accuracy, config hash.")
    except MlflowException as e:
        if e.error_code != "RESOURCE_ALREADY_EXISTS":
            raise


def register_best_models(store: Store, plan: SweepPlan, name: str,
                         say: Callable[[str], None]) -> list[Registered]:
    """Every complete cell's best model registered under ``name`` (see the module); one line per cell to ``say``."""
    cells, folds_per_cell, _ = runs_by_cell(store, plan)
    _ensure_registered_model(store, name)
    out = []
    for cell, runs in cells.items():
        if len(runs) < folds_per_cell[cell]:
            say(f"{OPTION}: cell {cell} not registered yet: {len(runs)} of {folds_per_cell[cell]} folds finished "
                "(the resume or a relaunch registers it)")
            continue
        best = _best_fold(store, runs)
        model_id = None if best is None else _model_id(store, best[0])
        if best is None or model_id is None:
            say(f"{OPTION}: cell {cell} not registered: its best fold's run has no logged model (trained before "
                "trial models were logged; --force trains it again)")
            continue
        run, accuracy = best
        tags = {**{k: run.data.tags[k] for k in VERSION_TAGS if k in run.data.tags}, C.TEST_ACC: str(accuracy)}
        version, new = _existing(store, name, run.info.run_id), False
        if version is None:
            version, new = store.client.create_model_version(
                name, f"models:/{model_id}", run_id=run.info.run_id, tags=tags, model_id=model_id,
                description=f"{cell} fold {tags.get(C.FOLD, '?')}: the best fold of its cell by "
                            f"{C.TEST_ACC} ({C.percent(accuracy):.2f}%)"), True
        out.append(Registered(cell, tags.get(C.FOLD, "?"), accuracy, run.info.run_id, str(version.version), new))
        say(f"{OPTION}: {name} version {version.version}{'' if new else ' (registered before)'}: {cell} fold "
            f"{tags.get(C.FOLD, '?')}, {C.TEST_ACC} {C.percent(accuracy):.2f}% — models:/{name}/{version.version}")
    return out
