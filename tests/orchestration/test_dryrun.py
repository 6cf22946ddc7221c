"""The dry run refuses a plan whose cells cannot train (issue 33 item 2): exit 2, one line per such row; it says the
launch's start-up apart from the trials' wall clock (issue 34).

Before, a cell whose measured step raised printed ``unknown: cannot measure (…)`` and the dry run exited 0, while a
launch would start its trials, retry each and fail them all. The measurement is replaced here by one that fails
for one algorithm (a real measured step costs seconds per setup on 2 cores)."""

from __future__ import annotations

import pytest

SPEC = """name: dryfail
base: {data: {dataset: digits, num_labels: 20}, train: {iterations: 2, eval_interval: 2, batch_size: 4, mu: 2}}
folds: [0, 1]
axes: {method: {fm: {algorithm: {name: fixmatch}}, mm: {algorithm: {name: mutexmatch}}}}
"""


@pytest.fixture
def measured(monkeypatch):
    import orchestration.launch.cost as cost

    def fake(raw, *, device, num_threads):
        if raw["algorithm"]["name"] == "mutexmatch":
            raise ValueError("dist_align target='model': the labeled batch's probabilities are needed\nmore")
        return cost.StepCost(step_s=0.01, eval_s=0.1, device="cpu")

    monkeypatch.setattr(cost, "measure_cost", fake)


def test_a_cell_that_cannot_train_fails_the_dry_run_with_one_line_per_row(tmp_path, monkeypatch, capsys,
                                                                          measured) -> None:
    from orchestration.sweep import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.yaml").write_text(SPEC)
    assert main(["s.yaml", "--dry-run"]) == 2
    out, err = capsys.readouterr()
    assert "cannot train (ValueError: dist_align target='model'" in out  # the table says it too
    lines = err.strip().splitlines()
    assert lines[0] == ("error: 1 row(s) of the plan cannot train: their step failed on generated data, as every "
                        "launched trial would; fix their settings")
    assert lines[1:] == ["cell method=mm (grid): cannot train (ValueError: dist_align target='model': the labeled "
                         "batch's probabilities are needed)"]
    assert not (tmp_path / "mlflow.db").exists()


def test_a_plan_whose_cells_all_train_still_exits_0(tmp_path, monkeypatch, capsys, measured) -> None:
    from orchestration.sweep import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.yaml").write_text(SPEC.replace("mm: {algorithm: {name: mutexmatch}}", "fm2: {algorithm: "
                                                                                           "{name: fixmatch, tau: 0.9}}"))
    assert main(["s.yaml", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "cannot" not in out
    # issue 34: a launch dry-run at "≈ 8 s" took 80 s; the start-up is its own line, with what it was measured on
    lines = out.splitlines()
    wall = next(i for i, line in enumerate(lines) if line.startswith("wall clock: ≈ "))
    assert lines[wall + 1] == ("start-up on top of that wall clock: ≈ 72 s idle, ≈ 225 s at a load of 12-16 per "
                               "launch, measured on a 2-core CPU machine (imports, the MLflow store, Ray and Tune, "
                               "each trial's worker process, shut-down)")
    assert "overhead not included" not in out


IMB_SPEC = """name: dryimb
base: {data: {dataset: digits, num_labels: 35, imbalance: {labeled_head: 10, labeled_ratio: 11}},
       train: {iterations: 2, eval_interval: 2, batch_size: 4, mu: 2}}
folds: [0, 1]
axes: {method: {fm: {algorithm: {name: fixmatch}},
                abc: {algorithm: {name: fixmatch}, imb_algorithm: {name: abc}},
                abc_tau: {algorithm: {name: fixmatch}, imb_algorithm: {name: abc, tau: 0.9}}}}
"""


def test_each_imbalance_algorithm_gets_its_own_measured_step(tmp_path, monkeypatch, capsys) -> None:
    """FixMatch and FixMatch + ABC step differently (ABC's head and loss): one measurement each (and one per set of
    the imbalance algorithm's parameters), not FixMatch's step for both; the folds share theirs."""
    import orchestration.launch.cost as cost
    from orchestration.sweep import main

    seen: list[tuple[str | None, float | None]] = []

    def fake(raw, *, device, num_threads):
        imb = raw.get("imb_algorithm")
        seen.append((imb and imb["name"], imb and imb.get("tau")))
        return cost.StepCost(step_s=1.0 if imb else 0.5, eval_s=0.0, device="cpu")

    monkeypatch.setattr(cost, "measure_cost", fake)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.yaml").write_text(IMB_SPEC)
    assert main(["s.yaml", "--dry-run"]) == 0
    assert sorted(seen, key=str) == [("abc", 0.9), ("abc", None), (None, None)]
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line.startswith("method=")}
    assert "1 s" in rows["method=fm"] and "2 s" in rows["method=abc"] and "2 s" in rows["method=abc_tau"]
