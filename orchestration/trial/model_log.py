"""A trial's trained model as an MLflow model (issue 34: MLflow's Models column and registry, and
``mlflow.pytorch.load_model`` give a classifier, not a bare state dict).

The run's final EMA weights (its best ones when it stopped before the end) become
:class:`mutexmatch.classifier.Classifier` (pixel values 0..255, NCHW float32 → class probabilities: the run's
normalisation and TPC head inside), logged with MLflow's pytorch flavour under ``model`` with its signature and an
input example (two blank images of the run's channels and size: a batch of one would make ``torch.export`` fix the
batch size to 1), in the ``pt2`` format (``torch.export``, no pickle), so loading it needs only torch, not this
project nor the plugin that defined the run's backbone (issue 44). The format is pinned: MLflow's default is a
pickle where the store is Databricks', which names the model's classes (``mutexmatch.classifier.Classifier``, a
plugin's network) for the loader to import.

MLflow 3 keeps a logged model in an experiment: ``Model.log`` puts it in the *active* one, which for a client-only
process is MLflow's Default (issue 40: 20 of 20 models there, ``runs:/<run>/model`` failing, since that URI looks
for a model named ``model`` in the run's experiment). So the logged model is created here, in the run's experiment,
named ``model`` (what ``runs:/<run>/model`` resolves) and tagged with the run's cell, fold and kind
(:data:`MODEL_TAGS`), and ``Model.log`` fills it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from orchestration import contract as C

if TYPE_CHECKING:  # mlflow is imported by the caller, after orchestration.runtime.env turned its telemetry off
    from mlflow import MlflowClient

__all__ = ["MODEL_KINDS", "MODEL_TAGS", "log_classifier"]

# The runs whose model a user takes away: a grid or refit trial, a single run. Search and smoke trials are many and
# only scored (logging costs ~1-4 s of torch.export per run on a CPU).
MODEL_KINDS = (C.KIND_GRID, C.KIND_REFIT, C.KIND_SINGLE)
# The run's tags its logged model carries: which cell, fold and kind it is, where the experiment's Models tab shows it.
MODEL_TAGS = (C.CELL, C.FOLD, C.KIND, C.VARIANT, C.CONFIG_HASH)


def log_classifier(client: "MlflowClient", run_id: str, weights: Path) -> str:
    """Log the classifier of the run whose ``weights`` these are (its run folder's ``config.yaml`` and
    ``dataset.json`` beside them) to run ``run_id`` as ``model``; returns the model's URI."""
    import mlflow.pytorch
    import numpy as np
    import torch
    from mlflow.entities import LoggedModelStatus
    from mlflow.models import Model, infer_signature
    from mlflow.tracking._tracking_service.utils import _use_tracking_uri

    from mutexmatch.classifier import load_classifier

    model = load_classifier(weights)
    example = np.zeros((2, model.mean.shape[1], model.image_size, model.image_size), dtype=np.float32)
    with torch.no_grad():
        signature = infer_signature(example, model(torch.from_numpy(example)).numpy())
    run = client.get_run(run_id)
    logged = client.create_logged_model(
        experiment_id=run.info.experiment_id, name=C.MODEL_ARTIFACT, source_run_id=run_id,
        tags={k: run.data.tags[k] for k in MODEL_TAGS if k in run.data.tags}, params=run.data.params)
    with _use_tracking_uri(client.tracking_uri):  # Model.log reads the global store; the trial's is this client's
        info = Model.log(artifact_path=None, name=C.MODEL_ARTIFACT, flavor=mlflow.pytorch, run_id=run_id,
                         model_id=logged.model_id, pytorch_model=model, signature=signature, input_example=example,
                         serialization_format="pt2", pip_requirements=[f"torch=={torch.__version__.split('+')[0]}"])
    client.finalize_logged_model(logged.model_id, LoggedModelStatus.READY)  # Model.log leaves it to its creator
    return info.model_uri
