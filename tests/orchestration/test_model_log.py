"""A trial's model in MLflow (orchestration.trial.model_log, issue 34): logged with its signature and input
example, shown in the run's Models column (its logged-model outputs), loaded by mlflow.pytorch.load_model and used
on an image folder with the same predictions as ``python -m mutexmatch.predict``."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch


@pytest.mark.heavy  # ~25 s idle (a training run, MLflow's schema, torch.export): CI covers mutexmatch.classifier
def test_the_logged_model_loads_and_predicts_on_an_image_folder(tmp_path, train_tiny_digits, write_image_folder):
    import mlflow.pytorch
    from mlflow import MlflowClient

    from mutexmatch.classifier import folder_images, load_classifier, predict_folder
    from mutexmatch.data.imagefolder import decode_images
    from orchestration.trial.model_log import log_classifier

    trainer, summary = train_tiny_digits(tmp_path / "run", "fixmatch", 2)
    weights = summary.final_weights
    write_image_folder(trainer.bundle.test.x[:30], trainer.bundle.test.y[:30], tmp_path / "images")

    shm = Path("/dev/shm")  # MLflow's ~60 schema migrations fsync each: tmpfs halves the cost
    store = Path(tempfile.mkdtemp(dir=shm)) if shm.is_dir() else tmp_path / "store"
    try:
        client = MlflowClient(f"sqlite:///{store / 'mlflow.db'}")
        exp = client.create_experiment("e", artifact_location=(store / "mlruns").as_uri())
        run_id = client.create_run(exp).info.run_id
        uri = log_classifier(client, run_id, weights)
        outputs = client.get_run(run_id).outputs.model_outputs        # what the UI's Models column lists
        assert [o.model_id for o in outputs] == [uri.rsplit("/", 1)[1]]
        logged = client.get_logged_model(outputs[0].model_id)
        assert logged.name == "model" and logged.source_run_id == run_id
        with mlflow.tracking._tracking_service.utils._use_tracking_uri(client.tracking_uri):
            info = mlflow.models.get_model_info(uri)
            loaded = mlflow.pytorch.load_model(uri)
        assert info.signature.inputs.to_dict()[0]["tensor-spec"]["shape"] == (-1, 1, 16, 16)
        assert info.saved_input_example_info is not None
        paths, _ = folder_images(tmp_path / "images")
        x = decode_images(paths, 16)[:, :1].float()   # the run's one channel (digits): gray PNGs decode R = G = B
        with torch.no_grad():
            probs = loaded(x)
        assert torch.equal(probs.argmax(1), predict_folder(load_classifier(weights), paths).argmax(1))
        assert np.allclose(probs.sum(1).numpy(), 1.0, atol=1e-5)
    finally:
        shutil.rmtree(store, ignore_errors=True)
