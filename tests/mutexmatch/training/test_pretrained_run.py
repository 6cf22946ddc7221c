"""A run that starts from ``model.pretrained`` (issue 42 item 2): the trainer's backbone and its EMA hold the file's
tensors (the old head dropped), the heads drawn as without the file; a file of the wrong shape or digest stops the
command when its config is loaded, in one line, with nothing written; a file replaced after that stops the trainer
when it loads the bytes."""
from __future__ import annotations

import pytest
import torch

from mutexmatch.config import ConfigError, parse_config
from mutexmatch.models import build_backbone
from mutexmatch.training import Trainer, main


def _raw(tmp_path, **model) -> dict:
    return {"data": {"dataset": "digits", "num_labels": 20, "fold": 1},
            "model": {"backbone": "small_cnn", **model},
            "train": {"iterations": 2, "eval_interval": 2, "batch_size": 4, "mu": 2, "num_threads": 1,
                      "progress": False},
            "output_dir": str(tmp_path / "run")}


def _file(tmp_path, in_channels: int = 1) -> tuple:
    torch.manual_seed(7)
    state = build_backbone("small_cnn", num_classes=5, in_channels=in_channels).state_dict()
    path = tmp_path / f"w{in_channels}.pth"
    torch.save({"model": {f"module.{k}": v for k, v in state.items()}}, path)   # USB's form, a DDP save
    return path, state


def test_the_run_starts_from_the_file(tmp_path, capsys) -> None:
    path, state = _file(tmp_path)
    trainer = Trainer(parse_config(_raw(tmp_path, pretrained=str(path))))
    plain = Trainer(parse_config({**_raw(tmp_path), "output_dir": str(tmp_path / "plain")}))
    for module in (trainer.model.backbone, trainer.ema.module.backbone):
        got = module.state_dict()
        for k, v in state.items():
            if not k.startswith("classifier"):
                assert torch.equal(got[k], v), k
    # the heads are drawn as without the file (loading draws nothing)
    assert torch.equal(trainer.model.backbone.classifier.weight, plain.model.backbone.classifier.weight)
    assert torch.equal(trainer.model.tnc.weight, plain.model.tnc.weight)
    err = capsys.readouterr().err
    assert "[train] model.pretrained: 18 tensors loaded into small_cnn from" in err
    assert "[train] model.pretrained: missing (kept at their initial values): classifier.weight, classifier.bias" in err
    trainer.fit()


def test_a_file_of_another_shape_stops_the_command_in_one_line(tmp_path, capsys) -> None:
    path, _ = _file(tmp_path, in_channels=3)   # digits are gray: the stem's weights do not fit
    code = main(["--set", "data.dataset=digits", "--set", "data.num_labels=20", "--set", "model.backbone=small_cnn",
                 "--set", f"model.pretrained={path}", "--set", f"output_dir={tmp_path / 'run'}",
                 "--set", "train.progress=false", "--set", "train.num_threads=1"])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("error")]
    assert code == 2
    assert err == [f"error: model.pretrained={path}: tensor 'features.0.weight' has shape [32, 3, 3, 3] in the "
                   "file, [32, 1, 3, 3] in model.backbone=small_cnn: a file of another architecture or size"]
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_a_replaced_file_stops_the_command_in_one_line(tmp_path, capsys) -> None:
    path, _ = _file(tmp_path)
    digest = parse_config(_raw(tmp_path, pretrained=str(path))).model.pretrained_sha256
    _file(tmp_path, in_channels=3)[0].replace(path)   # another file under the name
    code = main(["--set", "data.dataset=digits", "--set", "data.num_labels=20", "--set", "model.backbone=small_cnn",
                 "--set", f"model.pretrained={path}", "--set", f"model.pretrained_sha256={digest}",
                 "--set", f"output_dir={tmp_path / 'run'}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith(f"error: model.pretrained={path}: its sha256 is ")


def test_a_file_replaced_after_the_config_was_checked_stops_the_trainer(tmp_path) -> None:
    path, _ = _file(tmp_path)
    cfg = parse_config(_raw(tmp_path, pretrained=str(path)))
    torch.save({"model": build_backbone("small_cnn", num_classes=5, in_channels=1).state_dict()}, path)
    with pytest.raises(ConfigError) as e:
        Trainer(cfg)
    assert str(e.value).startswith(f"model.pretrained={path}: its sha256 is ") and "\n" not in str(e.value)
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_a_run_resumes_from_its_checkpoint_without_the_file(tmp_path) -> None:
    # the checkpoint holds the weights: a file moved or deleted since the start must not stop a resume
    path, _ = _file(tmp_path)
    raw = {**_raw(tmp_path, pretrained=str(path)), "train": {**_raw(tmp_path)["train"], "iterations": 4}}
    Trainer(parse_config(raw)).fit(stop_at=2)
    stored = parse_config(raw).to_dict()
    path.unlink()
    resumed = Trainer(parse_config(stored), resume=True)
    assert resumed.step == 2
    assert resumed.fit().step == 4
