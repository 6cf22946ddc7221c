"""Test-wide settings: closed network, no telemetry, deterministic CPU threads."""
import os

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_USAGE_STATS_REPORT_URL", "http://127.0.0.1:9/")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("DO_NOT_TRACK", "true")
# Every command honours $MLFLOW_TRACKING_URI when no --tracking-uri is given (orchestration.contract): a developer's
# server must never receive the tests' runs, and the tests must find the stores they create.
os.environ.pop("MLFLOW_TRACKING_URI", None)


import pytest  # noqa: E402  (after the environment above, which must be set before anything imports Ray or MLflow)


@pytest.fixture(scope="session")
def train_tiny_digits():
    """``train(output_dir, algorithm, iterations) -> (trainer, summary)``: a fitted tiny digits run (small_cnn, 20
    labels, B 4, mu 2, one thread): a real run's folder and weights in seconds."""
    def train(output_dir, algorithm: str, iterations: int):
        from mutexmatch.config import parse_config
        from mutexmatch.training import Trainer

        cfg = parse_config({"data": {"dataset": "digits", "num_labels": 20, "fold": 0},
                            "model": {"backbone": "small_cnn"}, "algorithm": {"name": algorithm},
                            "train": {"iterations": iterations, "eval_interval": iterations, "batch_size": 4,
                                      "mu": 2, "num_threads": 1, "progress": False},
                            "output_dir": str(output_dir)})
        trainer = Trainer(cfg)
        return trainer, trainer.fit()
    return train


@pytest.fixture(scope="session")
def write_image_folder():
    """``write(x, y, dest)``: uint8 greyscale images ``x`` (N, 1, H, W) as PNG files in one folder per label ``y``
    under ``dest`` (an image folder, as ``python -m mutexmatch.predict`` reads one); returns ``dest``."""
    def write(x, y, dest):
        from PIL import Image

        for i, (img, label) in enumerate(zip(x, y)):
            (dest / str(int(label))).mkdir(parents=True, exist_ok=True)
            Image.fromarray(img[0].numpy()).save(dest / str(int(label)) / f"{i:04d}.png")
        return dest
    return write


@pytest.fixture
def plugin_sandbox(tmp_path, monkeypatch):
    """Plugins loaded in this test leave nothing behind (issue 44): the registries, ``mutexmatch.plugins``' record
    and the plugin modules under ``tmp_path`` are as they were afterwards; installed entry points are not loaded
    unless the test sets ``_ENTRY_POINTS_LOADED`` False. Yields ``(example, forget)``: the worked example's folder
    (docs/plugin_example, holding ``my_methods``) and ``forget()``, which makes this process as new as to plugins
    (a launch after the code changed)."""
    import sys
    from pathlib import Path

    from mutexmatch import plugins
    from mutexmatch.algorithms import ALGORITHMS
    from mutexmatch.data.builtin import DATASETS
    from mutexmatch.models import BACKBONES

    registries = [ALGORITHMS, DATASETS, BACKBONES]
    saved = [dict(r) for r in registries]
    monkeypatch.delenv(plugins.PLUGINS_ENV, raising=False)

    def forget() -> None:
        for registry, before in zip(registries, saved):
            registry.clear()
            registry.update(before)
        for name, module in list(sys.modules.items()):
            if str(getattr(module, "__file__", None) or "").startswith(str(tmp_path)):
                del sys.modules[name]
        monkeypatch.setattr(plugins, "_LOADED", {})
        monkeypatch.setattr(plugins, "_PROVIDERS", {})
        monkeypatch.setattr(plugins, "_ENTRY_POINTS_LOADED", True)

    forget()
    yield Path(__file__).resolve().parents[1] / "docs" / "plugin_example", forget
    forget()
