"""SIGTERM / SIGUSR1 during training (issue 31): the handler only sets a flag, the loop writes a checkpoint at the
next step boundary and stops; ``--resume`` then ends with exactly the numbers of an uninterrupted run. A real
``python -m mutexmatch.train`` sent SIGTERM leaves a checkpoint seconds old and exits 143 (128 + SIGTERM)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mutexmatch.config import parse_config
from mutexmatch.training import Trainer, main, preemption
from mutexmatch.training.runfolder import checkpoint_step

REPO = Path(__file__).resolve().parents[3]


def _cfg(tmp_path, name, **train):
    return parse_config({
        "data": {"dataset": "digits", "num_labels": 20, "fold": 1},
        "model": {"backbone": "small_cnn"},
        "train": {"iterations": 8, "eval_interval": 2, "batch_size": 4, "mu": 2, "num_threads": 1,
                  "progress": False, "keep_checkpoints": 10, **train},
        "output_dir": str(tmp_path / name),
    })


def _metrics(out: Path) -> list[dict]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.items() if not k.startswith("perf/")} for row in rows]


def test_a_signal_between_evaluations_checkpoints_the_step_and_resume_matches_the_uninterrupted_run(
        tmp_path, monkeypatch):
    signum = signal.SIGUSR1  # SLURM's; SIGTERM takes the same handler (the command-line test below sends it)
    Trainer(_cfg(tmp_path, "whole")).fit()
    step = Trainer.train_step

    def signalled_after_3(self):
        step(self)
        if self.step == 3:
            os.kill(os.getpid(), signum)  # a real signal: the installed handler sets the flag

    monkeypatch.setattr(Trainer, "train_step", signalled_after_3)
    previous = preemption.install()
    try:
        with pytest.raises(preemption.Preempted) as stopped:
            Trainer(_cfg(tmp_path, "stopped")).fit()
    finally:
        preemption.restore(previous)
    assert signal.getsignal(signum) is previous[signum]  # the test process's own handler is back
    assert (stopped.value.step, stopped.value.signal_name) == (3, signal.Signals(signum).name)
    assert checkpoint_step(stopped.value.checkpoint.name) == 3 and stopped.value.checkpoint.is_file()
    monkeypatch.setattr(Trainer, "train_step", step)
    Trainer(_cfg(tmp_path, "stopped"), resume=True).fit()
    assert _metrics(tmp_path / "stopped") == _metrics(tmp_path / "whole")


def test_sigterm_to_the_train_command_leaves_a_checkpoint_seconds_old_and_resume_continues(tmp_path):
    out = tmp_path / "run"
    args = ["--set", "model.backbone=small_cnn", "--set", "train.iterations=100000", "--set",
            "train.eval_interval=50000", "--set", "train.batch_size=4", "--set", "train.mu=2", "--set",
            "train.num_threads=1", "--set", "train.progress=false", "--set", f"output_dir={out}", "--yes"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "mutexmatch.train", *args], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (out / "split.json").exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        time.sleep(2.0)  # a few steps into training
        sent = time.time()
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, output
    ckpts = sorted((out / "checkpoints").glob("ckpt_*.pt"))
    assert len(ckpts) == 1, output  # no evaluation was due: the one checkpoint is the signal's
    step = checkpoint_step(ckpts[0].name)
    age = ckpts[0].stat().st_mtime - sent
    assert 0 < step < 50000 and -0.5 < age < 10, (step, age, output)
    assert f"SIGTERM: stopped at step {step} of 100000" in output and \
        f"python -m mutexmatch.train --resume {out}" in output, output
    assert main(["--resume", str(out), "--stop-at", str(step + 2)]) == 0
    assert checkpoint_step(sorted((out / "checkpoints").glob("ckpt_*.pt"))[-1].name) == step + 2
