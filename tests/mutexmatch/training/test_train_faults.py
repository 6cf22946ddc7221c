"""The trainer when things go wrong (issue 16): a kill between the checkpoint and the metrics line, a half-written
metrics line, a run folder that is not empty or in use, a broken config.yaml on --resume, Ctrl+C, a seed NumPy
cannot take and a batch that does not fit in memory. Each ends in one line (exit 2, or 130 after Ctrl+C) and loses
or duplicates nothing."""

from __future__ import annotations

import json
import re
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import mutexmatch.training.loop as loop
import mutexmatch.training.memory as memory
from mutexmatch.training.callbacks import Callback, StartEvent
from mutexmatch.config import ConfigError, parse_config
from mutexmatch.models import BACKBONES
from mutexmatch.training.runfolder import RunFolder, RunFolderLocked
from mutexmatch.data.builtin.digits import NUM_TEST as DIGITS_NUM_TEST, NUM_TRAIN as DIGITS_NUM_TRAIN
from mutexmatch.training import MemoryBudgetError, StepMemoryError, Trainer, check_memory, main

STEPS = ["--set", "train.iterations=8", "--set", "train.eval_interval=2", "--set", "train.batch_size=4",
         "--set", "train.mu=2", "--set", "train.progress=false", "--set", "train.num_threads=1"]


def _cfg(tmp_path, name="run", fold=1, **train_fields):
    return parse_config({
        "data": {"dataset": "digits", "num_labels": 20, "fold": fold},
        "model": {"backbone": "small_cnn"},
        "train": {"iterations": 8, "eval_interval": 2, "batch_size": 4, "mu": 2, "num_threads": 1,
                  "progress": False, "keep_checkpoints": 10, **train_fields},
        "output_dir": str(tmp_path / name),
    })


def _logged_steps(out) -> list[int]:
    return [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]


def _one_line_error(capsys, *needles: str) -> str:
    """The one error line on stderr, besides the trainer's own '[train] N steps, ETA, output' line."""
    err = "\n".join(ln for ln in capsys.readouterr().err.strip().splitlines() if not ln.startswith("[train] "))
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err
    return err


class _Killed(BaseException):
    """What a SIGKILL at that instant would leave: nothing after it runs (not even except Exception blocks)."""


def test_a_kill_between_the_checkpoint_and_the_metrics_line_logs_every_evaluation_once(tmp_path, monkeypatch):
    save = Trainer.save_checkpoint

    def save_then_die(self):
        path = save(self)
        if self.step == 4:
            raise _Killed
        return path

    monkeypatch.setattr(Trainer, "save_checkpoint", save_then_die)
    with pytest.raises(_Killed):
        Trainer(_cfg(tmp_path)).fit()
    monkeypatch.setattr(Trainer, "save_checkpoint", save)
    resumed = Trainer(_cfg(tmp_path), resume=True)
    assert resumed.step == 4
    resumed.fit()
    assert _logged_steps(tmp_path / "run") == [2, 4, 6, 8]
    reference = Trainer(_cfg(tmp_path, "reference"))
    reference.fit()
    ref = (tmp_path / "reference" / "metrics.jsonl").read_text().splitlines()
    got = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    def results(lines):  # timings differ between runs
        return [{k: v for k, v in json.loads(x).items() if not k.startswith("perf/")} for x in lines]

    assert results(got) == results(ref)  # the same evaluations, not just the same steps


@pytest.mark.parametrize("tail", ['{"step": 6, "train/loss": 0.5, "test/a', "\x00\x00\x00", "[1, 2]\n"])
def test_resume_recovers_from_a_half_written_last_metrics_line(tmp_path, capsys, tail):
    out = tmp_path / "run"
    assert main(STEPS + ["--set", f"output_dir={out}", "--stop-at", "4"]) == 0
    with open(out / "metrics.jsonl", "a") as f:
        f.write(tail)
    with pytest.warns(RuntimeWarning, match="not a metrics line"):
        assert main(["--resume", str(out)]) == 0
    assert _logged_steps(out) == [2, 4, 6, 8]


@pytest.mark.slow  # a fresh interpreter: pytest records warnings in-process, so only a real run shows their form
def test_the_dropped_metrics_line_is_one_warning_line_for_the_user(tmp_path):
    out = tmp_path / "run"
    assert main(STEPS + ["--set", f"output_dir={out}", "--stop-at", "4"]) == 0
    with open(out / "metrics.jsonl", "a") as f:
        f.write('{"step": 6, "tr')
    repo = Path(__file__).resolve().parents[3]
    proc = subprocess.run([sys.executable, "-m", "mutexmatch.train", "--resume", str(out)], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(repo)}, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "Warning:" not in proc.stderr, proc.stderr  # Python's "file:line: RuntimeWarning:" form
    assert [ln for ln in proc.stderr.splitlines() if "metrics" in ln and not ln.startswith("[train] ")] == [
        f"warning: {out / 'metrics.jsonl'}:3: not a metrics line (interrupted write?); dropped"]


def test_a_fresh_run_refuses_a_non_empty_output_dir_unless_overwrite(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(STEPS + ["--set", f"output_dir={out}"]) == 0
    capsys.readouterr()
    for f in (out / "checkpoints").iterdir():  # a finished run whose checkpoints were deleted
        f.unlink()
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    assert main(STEPS + ["--set", f"output_dir={out}"]) == 2
    _one_line_error(capsys, f"output_dir='{out}' is not empty", "--overwrite", f"--resume {out}")
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before  # metrics, weights intact
    (out / "notes.txt").write_text("mine")  # issue 26: --overwrite deleted what the run never wrote
    assert main(STEPS + ["--set", f"output_dir={out}", "--overwrite", "--stop-at", "2"]) == 2
    _one_line_error(capsys, f"output_dir='{out}' holds what no run writes (notes.txt)", f"--resume {out}")
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == {**before, "notes.txt": b"mine"}
    (out / "notes.txt").unlink()
    assert main(STEPS + ["--set", f"output_dir={out}", "--overwrite", "--stop-at", "2"]) == 0
    assert _logged_steps(out) == [2] and not (out / "final_model.pt").exists()


def test_a_second_trainer_on_a_locked_run_folder_exits_2(tmp_path, capsys):
    out = tmp_path / "run"
    Trainer(_cfg(tmp_path)).fit(stop_at=2)
    first = Trainer(_cfg(tmp_path), resume=True)  # holds the lock until fit() returns or close()
    assert main(["--resume", str(out)]) == 2
    _one_line_error(capsys, f"output_dir='{out}' is in use by another trainer", "pid ")
    with pytest.raises(RunFolderLocked):
        Trainer(_cfg(tmp_path), overwrite=True)
    assert _logged_steps(out) == [2]  # the refused trainers wrote nothing
    first.close()
    assert main(["--resume", str(out)]) == 0
    assert _logged_steps(out) == [2, 4, 6, 8]


def test_the_lock_is_held_while_training_and_released_after(tmp_path):
    seen = []

    class TrySecond(Callback):
        def on_eval(self, event):
            with pytest.raises(RunFolderLocked):
                Trainer(_cfg(tmp_path), resume=True)
            seen.append(event.step)

    Trainer(_cfg(tmp_path), [TrySecond()]).fit(stop_at=4)
    assert seen == [2, 4]
    Trainer(_cfg(tmp_path), resume=True).fit()
    assert _logged_steps(tmp_path / "run") == [2, 4, 6, 8]


@pytest.mark.parametrize("text,needle", [("", "is empty"), ("train: {iterations: [\n", "not valid YAML at line"),
                                         ("- 1\n- 2\n", "top level is a list"), ("\x00\x01", "binary")])
def test_resume_with_a_broken_config_yaml_is_one_line(tmp_path, capsys, text, needle):
    out = tmp_path / "run"
    assert main(STEPS + ["--set", f"output_dir={out}", "--stop-at", "2"]) == 0
    capsys.readouterr()
    (out / "config.yaml").write_text(text)
    assert main(["--resume", str(out)]) == 2
    _one_line_error(capsys, "config.yaml", needle)
    assert _logged_steps(out) == [2]


def test_ctrl_c_prints_where_it_stopped_and_the_resume_command(tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    step = Trainer.train_step

    def interrupted_at_5(self):
        if self.step == 5:
            raise KeyboardInterrupt
        step(self)

    monkeypatch.setattr(Trainer, "train_step", interrupted_at_5)
    assert main(STEPS + ["--set", f"output_dir={out}"]) == 130
    err = capsys.readouterr().err
    assert "interrupted at step 5 of 8; the last checkpoint is step 4" in err and "Traceback" not in err
    command = err.split("To resume this run:\n", 1)[1].strip()
    assert command == f"python -m mutexmatch.train --resume {out}"
    monkeypatch.setattr(Trainer, "train_step", step)
    assert main(command.split()[3:]) == 0
    assert _logged_steps(out) == [2, 4, 6, 8]


def test_ctrl_c_before_the_first_checkpoint_says_there_is_nothing_to_resume(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(Trainer, "train_step", lambda self: (_ for _ in ()).throw(KeyboardInterrupt))
    assert main(STEPS + ["--set", f"output_dir={tmp_path / 'run'}"]) == 130
    assert "interrupted at step 0 of 8; no checkpoint was written yet" in capsys.readouterr().err


@pytest.mark.parametrize("seed", [2 ** 32, 2 ** 40])
def test_a_seed_numpy_cannot_take_is_refused_before_anything_is_written(tmp_path, capsys, seed):
    out = tmp_path / "run"
    assert main(STEPS + ["--set", f"output_dir={out}", "--set", f"train.seed={seed}"]) == 2
    _one_line_error(capsys, f"train.seed={seed}: ", "4294967295")  # the bound is the config's
    assert not out.exists()


def test_the_largest_numpy_seed_trains(tmp_path):
    assert Trainer(_cfg(tmp_path, seed=2 ** 32 - 1)).fit(stop_at=2).step == 2


def test_a_batch_larger_than_the_device_memory_is_refused_up_front(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(memory, "_device_memory", lambda device: 1 << 20)  # 1 MiB of memory
    out = tmp_path / "run"
    steps = [a.replace("train.batch_size=4", "train.batch_size=1000") for a in STEPS]  # each --set key once
    assert main(steps + ["--set", f"output_dir={out}"]) == 2
    _one_line_error(capsys, "train.batch_size=1000, train.mu=2: one step of 5000 images of 1x16x16: the input "
                    "batch alone takes 4.9 MiB, more than the cpu memory (1.0 MiB)",
                    "lower train.batch_size or train.mu")
    assert not out.exists()


def _memory(monkeypatch, **free: int) -> None:
    monkeypatch.setattr(memory, "_available_memory", lambda device: free)


def test_an_image_size_beyond_the_memory_is_refused_before_any_image_is_decoded(tmp_path, capsys, monkeypatch):
    _memory(monkeypatch, host=100 << 20)
    monkeypatch.setattr(loop, "load_dataset", lambda *a, **k: pytest.fail("decoded before the memory check"))
    out, data = tmp_path / "run", tmp_path / "data"
    sets = ["--set", f"output_dir={out}", "--set", f"data.root={data}", "--set", "data.image_size=512"]
    assert main(STEPS + sets) == 2
    # 1,797 digits of 1x512x512 uint8 (449.2 MiB) and the float32 input of a 20-image step (20.0 MiB)
    _one_line_error(capsys, "data.image_size=512: digits needs 469.2 MiB of host memory (449.2 MiB for 1,797 "
                    "decoded images of 1x512x512, at least 20.0 MiB for one step of 20 images (small_cnn)), but "
                    "100.0 MiB is available; use a smaller data.image_size or fewer images")
    assert not out.exists() and not data.exists()


def test_the_memory_estimate_is_every_image_and_the_step_exactly(tmp_path, monkeypatch):
    images = (DIGITS_NUM_TRAIN + DIGITS_NUM_TEST) * 16 * 16
    step = 4 * (1 + 2 * 2) * 16 * 16 * 4  # small_cnn has no measured activations: its float32 input batch
    _memory(monkeypatch, host=images + step)
    Trainer(_cfg(tmp_path)).close()
    _memory(monkeypatch, host=images + step - 1)
    with pytest.raises(MemoryBudgetError, match="data.image_size=16: digits needs 0.5 MiB of host memory"):
        Trainer(_cfg(tmp_path, "other"))


def test_on_cuda_the_device_holds_the_training_images_and_the_measured_activations(tmp_path, monkeypatch):
    cuda = torch.device("cuda")  # only the estimate runs: no CUDA call is made
    cfg = parse_config({"data": {"dataset": "digits", "num_labels": 20, "image_size": 32},
                        "model": {"backbone": "wrn28_2"}, "train": {"batch_size": 4, "mu": 2},
                        "output_dir": str(tmp_path / "run")})
    trained = DIGITS_NUM_TRAIN * 32 * 32  # the test images stay on the host
    fp32 = 20 * BACKBONES["wrn28_2"].activation_bytes_per_pixel * 32 * 32
    _memory(monkeypatch, host=10 << 30, cuda=trained + fp32 // 2)
    with pytest.raises(MemoryBudgetError, match=r"of cuda memory \(1.3 MiB for 1,300 decoded images of 1x32x32, "
                       r"at least 72.3 MiB for one step of 20 images \(wrn28_2\)\), but 37.4 MiB is available"):
        check_memory(cfg, cuda)
    check_memory(cfg.model_copy(update={"train": cfg.train.model_copy(update={"precision": "bf16"})}), cuda)
    _memory(monkeypatch, host=(DIGITS_NUM_TRAIN + DIGITS_NUM_TEST) * 32 * 32 - 1, cuda=10 << 30)
    with pytest.raises(MemoryBudgetError, match="needs 1.8 MiB of host memory"):
        check_memory(cfg, cuda)


def test_running_out_of_memory_in_a_step_is_one_line(tmp_path, capsys, monkeypatch):
    def no_memory(self):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:118] data. DefaultCPUAllocator: can't allocate memory: "
                           "you tried to allocate 123456789 bytes.\nmore detail")

    monkeypatch.setattr(Trainer, "train_step", no_memory)
    assert main(STEPS + ["--set", f"output_dir={tmp_path / 'run'}"]) == 2
    _one_line_error(capsys, "train.batch_size=4, train.mu=2: one step of 20 images", "does not fit in the cpu "
                    "memory", "can't allocate memory")
    monkeypatch.setattr(Trainer, "train_step", lambda self: (_ for _ in ()).throw(RuntimeError("other bug")))
    with pytest.raises(RuntimeError, match="other bug"):  # only memory errors are turned into a message
        Trainer(_cfg(tmp_path, "other")).fit()
    with pytest.raises(StepMemoryError):
        monkeypatch.setattr(Trainer, "train_step", lambda self: (_ for _ in ()).throw(torch.OutOfMemoryError()))
        Trainer(_cfg(tmp_path, "cuda_like")).fit()


def test_callbacks_get_a_typed_start_event(tmp_path):
    starts: list[StartEvent] = []

    class Recorder(Callback):
        def on_start(self, event):
            starts.append(event)

    first = Trainer(_cfg(tmp_path), [Recorder()])
    first.fit(stop_at=4)
    Trainer(_cfg(tmp_path), [Recorder()], resume=True).fit()
    assert [(s.step, s.iterations) for s in starts] == [(0, 8), (4, 8)]
    assert all(isinstance(s.run, RunFolder) and s.run.path == tmp_path / "run" for s in starts)
    assert starts[0].split_digest == starts[1].split_digest == first.split.digest()
    assert starts[0].resumed_from is None and starts[1].resumed_from == starts[1].run.checkpoint(4)
    assert starts[0].config_hash == json.loads((tmp_path / "run" / "run.json").read_text())["config_hash"]


def test_resume_rewrites_a_corrupt_split_file_and_refuses_another_split(tmp_path, capsys):
    out = tmp_path / "run"
    Trainer(_cfg(tmp_path)).fit(stop_at=2)
    good = (out / "split.json").read_text()
    (out / "split.json").write_text(good[: len(good) // 2])  # a kill while the folder was copied
    with pytest.warns(UserWarning, match="split.json: .*rewritten from the run's split"):
        Trainer(_cfg(tmp_path), resume=True).close()
    assert (out / "split.json").read_text() == good
    Trainer(_cfg(tmp_path, "other", fold=2)).close()
    (out / "split.json").write_text((tmp_path / "other" / "split.json").read_text())
    assert main(["--resume", str(out)]) == 2
    _one_line_error(capsys, "split.json: holds another labeled split")


def test_ctrl_c_while_setting_up_says_so(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(loop, "load_dataset", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt))
    assert main(STEPS + ["--set", f"output_dir={tmp_path / 'run'}"]) == 130
    assert "interrupted while setting up, before the first training step" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def _metrics_without_timing(out) -> list[dict]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.items() if not k.startswith("perf/")} for row in rows]


@pytest.mark.parametrize("stop_at", [3, 5])
def test_a_stop_between_evaluations_then_resume_logs_exactly_the_uninterrupted_numbers(tmp_path, stop_at):
    # Issue 26: --stop-at 3 evaluated at step 3, an evaluation the uninterrupted run does not have, and the resumed
    # run ended with another test/best_acc (0.1066 vs 0.1006); the steps since the last evaluation were lost too.
    Trainer(_cfg(tmp_path, "whole")).fit()
    stopped = Trainer(_cfg(tmp_path, "stopped")).fit(stop_at=stop_at)
    assert stopped.step == stop_at and stopped.final_checkpoint.name == f"ckpt_{stop_at:08d}.pt"
    assert _logged_steps(tmp_path / "stopped") == list(range(2, stop_at, 2))  # no evaluation at the stop
    Trainer(_cfg(tmp_path, "stopped"), resume=True).fit()
    assert _metrics_without_timing(tmp_path / "stopped") == _metrics_without_timing(tmp_path / "whole")


def test_a_full_disk_mid_run_is_one_line_with_the_resume_command(tmp_path, monkeypatch, capsys):
    # Issue 26: a read-only output_dir or a full disk ended in an OSError traceback (nothing was lost).
    import errno

    save = loop.write_checkpoint

    def full_at_step_4(state, directory, step):
        if step == 4:
            raise OSError(errno.ENOSPC, "No space left on device", str(directory / f"ckpt_{step:08d}.pt"))
        return save(state, directory, step)

    monkeypatch.setattr(loop, "write_checkpoint", full_at_step_4)
    out = tmp_path / "run"
    assert main(STEPS + ["--set", "train.checkpoint_every=1", "--set", f"output_dir={out}"]) == 1
    err = _one_line_error(capsys, "error: the run stopped at step 4: ", "ckpt_00000004.pt: No space left on device",
                          f"continue from step 2 with `python -m mutexmatch.train --resume {out}`")
    assert "Traceback" not in err
    monkeypatch.setattr(loop, "write_checkpoint", save)
    assert main(["--resume", str(out)]) == 0
    assert _logged_steps(out) == [2, 4, 6, 8]


def test_a_diverging_run_is_its_one_line_without_a_traceback(tmp_path, monkeypatch, capsys):
    from mutexmatch.training.diagnostics import StepAccumulator

    monkeypatch.setattr(StepAccumulator, "non_finite", lambda self: [("loss", 3)])
    assert main(STEPS + ["--set", f"output_dir={tmp_path / 'run'}"]) == 1
    _one_line_error(capsys, "error: non-finite loss term 'loss' at step 3", "the run is stopped")


def test_resume_with_every_checkpoint_corrupt_is_one_line(tmp_path, capsys):
    # Issue 26: a warning per checkpoint and then the error repeating each one (5 lines).
    out = tmp_path / "run"
    assert main(STEPS + ["--set", f"output_dir={out}", "--stop-at", "4"]) == 0
    for ckpt in (out / "checkpoints").glob("*.pt"):
        ckpt.write_bytes(b"junk")
    capsys.readouterr()
    assert main(["--resume", str(out)]) == 2
    _one_line_error(capsys, f"error: no usable checkpoint in {out / 'checkpoints'}: ",
                    "(and 1 older one(s), none usable)", "start it again with --overwrite")


@pytest.mark.parametrize("damage", ["garbage run.json", "emptied metrics", "deleted metrics"])
def test_resume_says_what_was_wrong_with_the_run_files(tmp_path, damage):
    # Issue 26: a garbage run.json was accepted silently, and an emptied or deleted metrics.jsonl lost the earlier
    # evaluations on resume without a word.
    Trainer(_cfg(tmp_path)).fit(stop_at=4)
    out = tmp_path / "run"
    marker = (out / "run.json").read_text()
    if damage == "garbage run.json":
        (out / "run.json").write_text("garbage{")
    elif damage == "emptied metrics":
        (out / "metrics.jsonl").write_text("")
    else:
        (out / "metrics.jsonl").unlink()
    expected = "not this run's marker" if damage == "garbage run.json" else \
        "the evaluations of 2 step(s) up to 4 are not in it (first: step 2; emptied, cut or deleted?)"
    with pytest.warns(RuntimeWarning, match=re.escape(expected)):
        Trainer(_cfg(tmp_path), resume=True).fit()
    assert (out / "run.json").read_text() == marker
    assert _logged_steps(out) == ([2, 4, 6, 8] if damage == "garbage run.json" else [6, 8])


def test_a_divergence_names_the_overflowing_term_and_its_weight(tmp_path, capsys):
    # Issue 33 item 6 (free-lf-huge, meanteacher-lambda-huge): the terms stay finite and their weighted total
    # overflows; the message named only 'loss'. Now the term, its weight and what to lower.
    assert main(STEPS + ["--set", "algorithm.name=fixmatch", "--set", "algorithm.lambda_p=1.0e+300",
                         "--set", f"output_dir={tmp_path / 'run'}"]) == 1
    err = _one_line_error(capsys, "error: non-finite loss term 'loss' at step 0 (algorithm fixmatch); the run is "
                          "stopped: its terms are finite; the largest weighted one is 'p' (weight 1e+300): lower "
                          "that weight, or lower optim.lr (", "a retry fails the same way")
    assert "Traceback" not in err


def test_a_non_finite_term_is_named_before_the_total():
    from mutexmatch.training.diagnostics import divergence_message

    line = divergence_message([("loss", 2), ("p", 2)], {}, {"sup": 1.0, "p": 0.5}, "uda", 0.03)
    assert line.startswith("non-finite loss term 'p' at step 2 (algorithm uda); the run is stopped: lower the "
                           "settings that scale term 'p' (weight 0.5) (its weight, a temperature), or lower optim.lr "
                           "(0.03)")


def test_a_loss_that_explodes_without_turning_non_finite_ends_with_a_warning(tmp_path):
    # Issue 33 item 6 (nan-lr10-fixmatch-20steps): train/loss went 41 -> 7e26 and the run FINISHED at chance.
    # The command line prints it as one `warning: ...` line (mutexmatch.cliwarnings); pytest records it instead.
    with pytest.warns(RuntimeWarning, match=r"^train/loss rose from .* over 1e\+06 times: the run diverged") as seen:
        assert main(STEPS[:1] + ["train.iterations=20"] + STEPS[2:] + [
            "--set", "algorithm.name=fixmatch", "--set", "optim.lr=10", "--set", "optim.momentum=0.99",
            "--set", "optim.schedule=constant", "--set", f"output_dir={tmp_path / 'run'}"]) == 0
    said = [w for w in seen if "train/loss rose" in str(w.message)]
    assert len(said) == 1 and "lower optim.lr (10)" in str(said[0].message)


def test_comatchs_bank_bounds_are_refused_at_validation_and_its_size_counted_by_the_memory_check(tmp_path, capsys,
                                                                                                   monkeypatch):
    """Issue 33 (adversarial comatch-queue-huge, comatch-projdim-huge, comatch-queue-max): a huge queue_batch,
    proj_dim or da_window is a one-line config error, not a traceback at build; a bank that passes the bound but not
    the memory is refused before any image is decoded, naming algorithm.queue_batch."""
    out = tmp_path / "run"
    for field, value, allowed in (("queue_batch", 10 ** 9, "[1, 1048576]"), ("proj_dim", 10 ** 9, "[1, 16384]"),
                                  ("da_window", 10 ** 12, "[1, 1048576]")):
        sets = ["--set", "algorithm.name=comatch", "--set", f"algorithm.{field}={value}"]
        assert main(STEPS + sets + ["--set", f"output_dir={out}"]) == 2
        _one_line_error(capsys, f"algorithm.{field}", str(value), f"must be an integer in {allowed}")
    with pytest.raises(ConfigError, match=r"algorithm.proj_dim.*must be an integer in \[1, 16384\]"):
        parse_config({"data": {"dataset": "digits"}, "algorithm": {"name": "simmatch", "proj_dim": 16385}})
    _memory(monkeypatch, host=1 << 30)
    monkeypatch.setattr(loop, "load_dataset", lambda *a, **k: pytest.fail("decoded before the memory check"))
    sets = ["--set", "algorithm.name=comatch", "--set", "algorithm.queue_batch=1048576"]
    assert main(STEPS + sets + ["--set", f"output_dir={out}"]) == 2
    # 1,048,576 steps x (4 + 2 x 4) rows x (64 + 10) float32: 3.5 GiB
    _one_line_error(capsys, "3.5 GiB for CoMatch's memory bank of 12,582,912 rows (algorithm.queue_batch=1048576)",
                    "or a smaller algorithm.queue_batch")
    assert not out.exists()
