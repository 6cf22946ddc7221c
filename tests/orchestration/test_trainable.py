"""A trial whose config breaks a rule fails the same way every time: it ends at once, never retried (finding #1: a
search that sampled data.num_labels=31 on 10 classes failed at start, and `--max-failures -1` retried it forever)."""

from __future__ import annotations

from types import SimpleNamespace

from mutexmatch.config import ConfigError
from orchestration.trial import trainable

RAW = {"data": {"dataset": "digits", "num_labels": 31}, "model": {"backbone": "small_cnn"},
       "train": {"iterations": 8, "eval_interval": 4}}


def test_a_sampled_config_that_breaks_a_rule_ends_the_trial_without_a_retry(tmp_path, capsys):
    assert trainable.trial_config(RAW, tmp_path / "run", device="cpu", threads=1, trial_id="t1") is None
    err = capsys.readouterr().err
    assert "[trial t1] error: data.num_labels=31: must be divisible by the 10 classes" in err, err
    assert "a config error: not retried" in err and "Traceback" not in err
    cfg = trainable.trial_config({**RAW, "data": {"dataset": "digits", "num_labels": 30}}, tmp_path / "run",
                                 device="cpu", threads=1, trial_id="t2")
    assert cfg.data.num_labels == 30 and cfg.output_dir == str(tmp_path / "run")


def test_a_config_error_while_training_is_not_retried(tmp_path, capsys):
    failed = []
    run = SimpleNamespace(failed=failed.append, run_id="r1", client=None)
    error = ConfigError("data.num_labels=2000: needs 200 labeled images per class")
    assert trainable._failed(run, "t1", SimpleNamespace(path=tmp_path), error) is True  # True: ended, no raise
    assert failed == [error] and "a config error: not retried" in capsys.readouterr().err
