"""A trained run used as a classifier (mutexmatch.classifier, python -m mutexmatch.predict; issue 34): the test
images written as files and classified by the command score exactly what the trainer's evaluation logged."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from mutexmatch import metrics as M
from mutexmatch.config import parse_config
from mutexmatch.training import Trainer


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("classifier")
    cfg = parse_config({"data": {"dataset": "digits", "num_labels": 20, "fold": 0},
                        "model": {"backbone": "small_cnn"}, "algorithm": {"name": "mutexmatch"},
                        "train": {"iterations": 6, "eval_interval": 6, "batch_size": 4, "mu": 2, "num_threads": 1,
                                  "progress": False},
                        "output_dir": str(root / "run")})
    trainer = Trainer(cfg)
    summary = trainer.fit()
    images = root / "images"
    x, y = trainer.bundle.test.x, trainer.bundle.test.y
    for i, (img, label) in enumerate(zip(x, y)):   # the run's whole 16×16 test set, as PNG files in class folders
        (images / str(int(label))).mkdir(parents=True, exist_ok=True)
        Image.fromarray(img[0].numpy().astype(np.uint8)).save(images / str(int(label)) / f"{i:04d}.png")
    return summary, images, x, y


def test_predict_on_class_folders_scores_what_the_trainer_evaluated(trained, tmp_path, capsys):
    from mutexmatch.classifier import load_classifier
    from mutexmatch.predict import main

    summary, images, x, y = trained
    out = tmp_path / "pred.csv"
    assert main(["--weights", str(summary.final_weights), "--images", str(images), "--out", str(out)]) == 0
    # the trainer's last evaluation scored these EMA weights on the same test set: the same accuracy, to the image
    logged = summary.metrics[M.TEST_ACC]
    assert f"top-1 accuracy on {len(y)} images in class folders: {100 * logged:.2f}%" in capsys.readouterr().err
    rows = list(csv.DictReader(out.open()))
    model = load_classifier(summary.final_weights)
    assert model.classes == [str(i) for i in range(10)] and len(rows) == len(y)
    assert sum(r["class"] == Path(r["image"]).parent.name for r in rows) == round(logged * len(y))


def test_bad_input_is_one_line_naming_it(trained, tmp_path, capsys):
    from mutexmatch.predict import main

    summary, images, _, _ = trained
    lone = tmp_path / "best_model.pt"
    lone.write_bytes(summary.final_weights.read_bytes())
    assert main(["--weights", str(lone), "--images", str(images)]) == 2
    assert "no config.yaml and dataset.json beside it" in capsys.readouterr().err
    assert main(["--weights", str(summary.final_weights), "--images", str(tmp_path)]) == 2
    assert "no image files" in capsys.readouterr().err
    (tmp_path / "cat").mkdir()
    Image.new("L", (16, 16)).save(tmp_path / "cat" / "a.png")
    assert main(["--weights", str(summary.final_weights), "--images", str(tmp_path)]) == 2
    assert "class folder(s) cat are no class of the model" in capsys.readouterr().err
