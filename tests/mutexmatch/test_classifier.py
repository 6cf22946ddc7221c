"""A trained run used as a classifier (mutexmatch.classifier, python -m mutexmatch.predict; issue 34): the test
images written as files and classified by the command score exactly what the trainer's evaluation logged."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from PIL import Image

from mutexmatch import metrics as M


@pytest.fixture(scope="module")
def trained(tmp_path_factory, train_tiny_digits, write_image_folder):
    root = tmp_path_factory.mktemp("classifier")
    trainer, summary = train_tiny_digits(root / "run", "mutexmatch", 6)
    x, y = trainer.bundle.test.x, trainer.bundle.test.y
    images = write_image_folder(x, y, root / "images")   # the run's whole 16×16 test set, in class folders
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
