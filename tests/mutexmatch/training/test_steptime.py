"""A training run says what it will cost before step 1 (issue 26): steps, ETA and output folder; a CPU run longer
than an hour asks for --yes at a terminal and warns loudly without one."""

from __future__ import annotations

import io

import pytest

from mutexmatch.config import parse_config
from mutexmatch.training.steptime import LONG_CPU_RUN_S, StepCost, confirm_cost, run_cost_line
from mutexmatch.training import main

SHORT = ["--set", "data.dataset=digits", "--set", "model.backbone=small_cnn", "--set", "train.batch_size=4",
         "--set", "train.mu=2", "--set", "train.progress=false", "--set", "train.num_threads=1"]


def _cfg(iterations=1000, eval_interval=100, device="cpu"):
    return parse_config({"data": {"dataset": "digits"}, "model": {"backbone": "small_cnn"},
                         "train": {"iterations": iterations, "eval_interval": eval_interval, "device": device},
                         "output_dir": "runs/x"})


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_line_names_steps_evaluations_eta_and_output():
    line = run_cost_line(_cfg(), 0, StepCost(0.2, 1.0, "cpu"))
    assert line == ("[train] 1,000 steps, 10 evaluations on cpu, ETA ≈ 3.5 min (0.2 s/step, 1 s/evaluation, "
                    f"measured); output: {_cfg().output_dir}")
    resumed = run_cost_line(_cfg(), 400, StepCost(0.2, 1.0, "cpu"))
    assert resumed.startswith("[train] 600 steps (steps 401–1,000), 6 evaluations on cpu, ETA ≈ 2.1 min")
    assert "ETA not measured (under 100 steps)" in run_cost_line(_cfg(50, 10), 0, None)


def test_a_finished_run_resumed_says_so_instead_of_zero_steps():
    """Issue 34: ``--resume`` of a finished run printed "0 steps (steps 51–50)"."""
    for cost in (StepCost(0.2, 1.0, "cpu"), None):
        line = run_cost_line(_cfg(50, 10), 50, cost)
        assert line == f"[train] already finished at step 50, nothing to do; output: {_cfg().output_dir}"


def _long() -> StepCost:
    return StepCost(2 * LONG_CPU_RUN_S / 1000, 0.0, "cpu")   # 1,000 steps: two hours


@pytest.mark.parametrize("answer, started", [("y\n", True), ("\n", False), ("no\n", False)])
def test_a_long_cpu_run_at_a_terminal_asks(answer, started):
    err = io.StringIO()
    assert confirm_cost(_cfg(), 0, _long(), assume_yes=False, stdin=_Tty(answer), err=err) is started
    text = err.getvalue()
    assert "this CPU run takes ≈ 2.0 h. Start it? [y/N]" in text
    assert ("not started; nothing was written" in text) is not started and ("--yes" in text) is not started


def test_without_a_terminal_it_warns_loudly_and_goes_on():
    err = io.StringIO()
    assert confirm_cost(_cfg(), 0, _long(), assume_yes=False, stdin=io.StringIO(""), err=err)
    assert "WARNING: this CPU run takes ≈ 2.0 h (1,000 steps)" in err.getvalue() and "!" * 78 in err.getvalue()


@pytest.mark.parametrize("cost, yes", [(StepCost(2 * LONG_CPU_RUN_S / 1000, 0.0, "cuda"), False), (_long(), True),
                                        (StepCost(0.1, 0.0, "cpu"), False), (None, False)])
def test_gpu_short_or_confirmed_runs_start_without_a_word(cost, yes):
    err = io.StringIO()
    assert confirm_cost(_cfg(), 0, cost, assume_yes=yes, stdin=_Tty(""), err=err)
    assert err.getvalue().count("\n") == 1 and err.getvalue().startswith("[train] ")


def test_cli_measures_a_long_run_and_a_declined_one_writes_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", _Tty("n\n"))
    monkeypatch.setattr("mutexmatch.training.steptime.LONG_CPU_RUN_S", 0.0)   # any measured CPU run counts as long
    out = tmp_path / "long"
    assert main(SHORT + ["--set", "train.iterations=1048576", "--set", f"output_dir={out}"]) == 1
    err = capsys.readouterr().err
    assert "[train] 1,048,576 steps, 1,024 evaluations on cpu, ETA ≈ " in err and "s/step" in err
    assert f"output: {out}" in err and "not started" in err
    assert not out.exists() or not any(out.iterdir())


def test_cli_short_run_prints_the_line_first(tmp_path, capsys):
    out = tmp_path / "short"
    assert main(SHORT + ["--set", "train.iterations=4", "--set", "train.eval_interval=2",
                         "--set", f"output_dir={out}"]) == 0
    err = capsys.readouterr().err
    assert err.startswith(f"[train] 4 steps, 2 evaluations on cpu, ETA not measured (under 100 steps); output: {out}")
