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


def _run_copy(summary, dest: Path) -> Path:
    """The run's weights, config.yaml and dataset.json copied into ``dest`` (a run folder to tamper with)."""
    dest.mkdir()
    for f in (summary.final_weights, summary.final_weights.parent / "config.yaml",
              summary.final_weights.parent / "dataset.json"):
        (dest / f.name).write_bytes(f.read_bytes())
    return dest / summary.final_weights.name


def test_a_huge_or_wrong_dataset_json_is_refused_before_it_is_read(trained, tmp_path, capsys):
    """Fresh finding #9: a 6 GB dataset.json beside the weights was read whole (killed); sidecars are size-bounded
    and their fields validated before use."""
    import json

    from mutexmatch.predict import main

    summary, images, _, _ = trained
    weights = _run_copy(summary, tmp_path / "run")
    facts = json.loads((weights.parent / "dataset.json").read_text())
    with open(weights.parent / "dataset.json", "w") as f:   # valid JSON, past the bound (sparse: no real disk)
        f.write("{")
        f.seek(64 << 20)
        f.write('"a": 1}')
    assert main(["--weights", str(weights), "--images", str(images)]) == 2
    err = capsys.readouterr().err
    assert f"{weights.parent / 'dataset.json'}: is 64.0 MiB, larger than the" in err and len(err.splitlines()) == 1
    names = {"classes": list("abcdefghij")}
    for field, change, allowed in [("mean", {"mean": "x"}, "list"), ("std", {"std": [0.0]}, "> 0"),
                                   ("image_size", {"image_size": 10**9}, "in [8, 512]"),
                                   ("num_classes", {"num_classes": 3, **names}, "number of names in classes (10)"),
                                   ("num_classes", {"num_classes": 10**12}, "in [2, 100000]"),
                                   ("classes", {"classes": ["a"] * 10}, "distinct names")]:
        (weights.parent / "dataset.json").write_text(json.dumps({**facts, **change}))
        assert main(["--weights", str(weights), "--images", str(images)]) == 2
        err = capsys.readouterr().err
        assert f"dataset.json: {field}=" in err and allowed in err and len(err.splitlines()) == 1, err


def test_out_into_a_missing_folder_is_refused_before_any_work(trained, tmp_path, capsys, monkeypatch):
    """Fresh finding #12: ``--out`` into a folder that does not exist failed with FileNotFoundError after the model
    was loaded and every image classified."""
    import mutexmatch.classifier
    from mutexmatch.predict import main

    summary, images, _, _ = trained
    monkeypatch.setattr(mutexmatch.classifier, "load_classifier", lambda *_: pytest.fail("work started"))
    out = tmp_path / "no" / "such" / "pred.csv"
    assert main(["--weights", str(summary.final_weights), "--images", str(images), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"--out {out}: folder {out.parent} does not exist; make it (mkdir -p {out.parent})" in err
    assert main(["--weights", str(summary.final_weights), "--images", str(images), "--out", str(tmp_path)]) == 2
    assert f"--out {tmp_path}: is a folder; give a file name" in capsys.readouterr().err
