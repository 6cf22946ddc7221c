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
