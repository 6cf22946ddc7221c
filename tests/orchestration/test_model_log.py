"""A trial's model in MLflow (orchestration.trial.model_log, issue 34): logged with its signature and input
example, shown in the run's Models column (its logged-model outputs), loaded by mlflow.pytorch.load_model and used
on an image folder with the same predictions as ``python -m mutexmatch.predict``. Issue 40 item 3: the model lives
in the run's own experiment (it went to MLflow's Default one), loads as ``runs:/<run>/model`` (pytorch and pyfunc),
carries the run's cell, and the run's downloaded artifacts serve ``python -m mutexmatch.predict``."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch


@pytest.fixture
def store_dir(tmp_path):
    shm = Path("/dev/shm")  # MLflow's ~60 schema migrations fsync each: tmpfs halves the cost
    store = Path(tempfile.mkdtemp(dir=shm)) if shm.is_dir() else tmp_path / "store"
    yield store
    shutil.rmtree(store, ignore_errors=True)


def test_a_trials_model_is_in_its_experiment_and_loads_from_its_run(tmp_path, store_dir, train_tiny_digits,
                                                                  write_image_folder, capsys):
    """The trial's own path (TrialRun.log_start/log_end) into an experiment of a fresh store: every logged model in
    that experiment, none in Default; ``runs:/<run>/model`` loads with both flavours and agrees with the weights;
    predict works on the run's downloaded artifacts (config.yaml and dataset.json one folder up from weights/)."""
    import mlflow.pyfunc
    import mlflow.pytorch
    from mlflow import MlflowClient
    from mlflow.tracking._tracking_service.utils import _use_tracking_uri

    from mutexmatch.classifier import load_classifier
    from mutexmatch.predict import main as predict
    from mutexmatch.training import StartEvent
    from mutexmatch.training.runfolder import RunFolder
    from orchestration import contract as C
    from orchestration.trial.tracking import TrialRun, ensure_experiment

    trainer, summary = train_tiny_digits(tmp_path / "run", "fixmatch", 2)
    uri = f"sqlite:///{store_dir / 'mlflow.db'}"
    client = MlflowClient(uri)
    exp = ensure_experiment(client, "sweep", uri)
    tags = {C.KIND: C.KIND_GRID, C.CELL: "method=fixmatch", C.FOLD: "0"}
    run = client.create_run(exp, tags=tags, run_name="fixmatch · fold 0")
    trial = TrialRun(client, run, 1, -1)
    folder = RunFolder(tmp_path / "run")
    trial.log_start(StartEvent(0, 2, folder, "hash", json.loads(folder.marker.read_text())["split_digest"]))
    trial.log_end(summary)

    run_id = run.info.run_id
    models = client.search_logged_models(experiment_ids=[exp, "0"])
    assert [(m.experiment_id, m.source_run_id, m.name) for m in models] == [(exp, run_id, "model")]
    assert {k: models[0].tags.get(k) for k in tags} == tags          # the cell it belongs to, on the model
    assert models[0].status == "READY"  # finalized: MLflow's Model.log leaves a model it did not create PENDING
    x = torch.zeros(2, 1, 16, 16)
    with torch.no_grad(), _use_tracking_uri(uri):
        expected = load_classifier(summary.final_weights)(x)
        assert torch.allclose(mlflow.pytorch.load_model(f"runs:/{run_id}/model")(x), expected, atol=1e-6)
        assert np.allclose(mlflow.pyfunc.load_model(f"runs:/{run_id}/model").predict(x.numpy()), expected.numpy(),
                           atol=1e-6)

    local = Path(client.download_artifacts(run_id, "", str(tmp_path / "downloaded")))
    images = write_image_folder(trainer.bundle.test.x[:10], trainer.bundle.test.y[:10], tmp_path / "images")
    out = tmp_path / "pred.csv"
    assert predict(["--weights", str(local / "weights" / "final_model.pt"), "--images", str(images),
                    "--out", str(out)]) == 0, capsys.readouterr().err
    assert len(out.read_text().splitlines()) == 11


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


PLUGIN_NET = '''"""A backbone class of the plugin's own: a pickled model would name my_net.MyNet."""
from mutexmatch.models.registry import register_backbone
from mutexmatch.models.small_cnn import SmallCNN


class MyNet(SmallCNN):
    pass


@register_backbone("my_net", feat_dim=128, param_count=94_762, typical_image_size=16, min_image_size=4,
                   activation_bytes_per_pixel=None, description="the small CNN as a class of a plugin's own")
def my_net(num_classes: int, in_channels: int) -> MyNet:
    return MyNet(num_classes, in_channels)
'''

LOAD_ELSEWHERE = '''import json, sys, mlflow.pytorch, torch
try:
    import my_net
    sys.exit("my_net is importable here: the test proves nothing")
except ImportError:
    pass
print(json.dumps(mlflow.pytorch.load_model(sys.argv[1])(torch.zeros(2, 1, 16, 16)).sum(1).tolist()))
'''


def test_a_plugin_runs_model_loads_where_the_plugin_is_not(tmp_path, store_dir, plugin_sandbox, monkeypatch):
    """Issue 44: the logged model of a run whose backbone class a plugin defines loads in a fresh process where
    neither the plugin nor its folder is (a user with the registry and torch only). MLflow's own default format is
    a pickle (the class by reference: ``my_net.MyNet``) where the store is Databricks', the pt2 graph elsewhere:
    the store is made to look like Databricks' here, so the format must be pinned, not left to that default."""
    import os
    import subprocess
    import sys

    import mlflow.pytorch
    from mlflow import MlflowClient

    from mutexmatch.config import parse_config
    from mutexmatch.training import Trainer
    from orchestration.trial.model_log import log_classifier

    (tmp_path / "plugin").mkdir()
    (tmp_path / "plugin" / "my_net.py").write_text(PLUGIN_NET)
    cfg = parse_config({"data": {"dataset": "digits", "num_labels": 20, "fold": 0}, "model": {"backbone": "my_net"},
                        "algorithm": {"name": "fixmatch"}, "plugins": [str(tmp_path / "plugin" / "my_net.py")],
                        "train": {"iterations": 2, "eval_interval": 2, "batch_size": 4, "mu": 2, "num_threads": 1,
                                  "progress": False}, "output_dir": str(tmp_path / "run")})
    summary = Trainer(cfg).fit()
    client = MlflowClient(f"sqlite:///{store_dir / 'mlflow.db'}")
    exp = client.create_experiment("e", artifact_location=(store_dir / "mlruns").as_uri())
    run_id = client.create_run(exp).info.run_id
    monkeypatch.setattr(mlflow.pytorch, "is_databricks_uri", lambda uri: True)
    uri = log_classifier(client, run_id, summary.final_weights)

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "load.py").write_text(LOAD_ELSEWHERE)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # pickles allowed: a pickled model would then fail for its class alone (no module named my_net)
    env.update(MLFLOW_TRACKING_URI=client.tracking_uri, MLFLOW_ALLOW_PICKLE_DESERIALIZATION="true")
    done = subprocess.run([sys.executable, "load.py", uri], cwd=elsewhere, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert np.allclose(json.loads(done.stdout.strip().splitlines()[-1]), [1.0, 1.0], atol=1e-5)  # probabilities
