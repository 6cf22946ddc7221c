"""No configuration trained twice (issue 24 item 8): two sweep YAMLs share a cell; the second launch reuses the
first's FINISHED runs of that cell (a link run per trial, labelled reused, nothing copied), trains only the rest, and
its summary, status and report table include the reused runs with the first sweep's numbers. ``--no-reuse``
trains them again. The store is what the sweeps leave (real plans and config hashes, FINISHED runs logged as the
trainable logs them); no Ray, no training."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from mlflow import MlflowClient
from mlflow.entities import Metric

from orchestration import contract as C
from orchestration.trial import tracking
from orchestration.launch.launch import (SweepOptions, command_line, link_reusable, record_expected_runs, reusable,
                                         select)
from orchestration.spec.overrides import load_sweep, plan_sweep
from orchestration.status import collect, format_status
from orchestration.store.store import Store
from orchestration.launch.summary import grid_summary
from reports.build import build_report

YAML = """
name: {name}
base:
  data: {{dataset: digits, num_labels: 20, split_rule: official}}
  model: {{backbone: small_cnn}}
  train: {{iterations: 100, eval_interval: 50, batch_size: 16, mu: 4, eval_batch_size: 512}}
folds: [0, 1]
axes:
  method:
{levels}
  setting:
    digits-20: {{data: {{num_labels: 20}}}}
resources: {{cpu: 1, gpu: 0}}
tables:
  - id: main
    caption: "accuracy"
    rows: method
    columns: setting
    metric: test/acc
    protocol: best
"""
LEVELS = {"supervised": "    supervised: {algorithm: {name: supervised}}",
          "fixmatch": "    fixmatch: {algorithm: {name: fixmatch}}",
          "mutexmatch": "    mutexmatch: {algorithm: {name: mutexmatch, form: paper}}"}
ACC = {"supervised": [70, 72], "fixmatch": [80, 82], "mutexmatch": [90, 94]}


def _yaml(tmp: Path, name: str, methods: list[str]) -> Path:
    path = tmp / f"{name}.yaml"
    path.write_text(YAML.format(name=name, levels="\n".join(LEVELS[m] for m in methods)))
    return path


def _plan(tmp: Path, path: Path):
    return plan_sweep(load_sweep(path, tmp, (), need_data=False), tmp)


def _train(client, exp_id, parent, trial, start):
    """A FINISHED trial run as the trainable leaves it (tags, two evaluations of test/acc)."""
    method = dict(trial.cell.levels)["method"]
    tags = C.trial_tags(parent_run_id=parent, kind=C.KIND_GRID, cell_levels=trial.cell.levels, cell_id=trial.cell.id,
                        fold=trial.fold, variant=method, config_hash=trial.config_hash, commit="abc",
                        trial_id=f"t{trial.key}", launch_id=parent)
    run = client.create_run(exp_id, tags={**tags, C.SPLIT_DIGEST: f"s{trial.fold}"}, start_time=start)
    acc = ACC[method][trial.fold]
    client.log_batch(run.info.run_id, metrics=[Metric(C.TEST_ACC, (acc - 5 + 5 * i) / 100, start + i, 50 * (i + 1))
                                               for i in range(2)])
    client.set_terminated(run.info.run_id, end_time=start + 60_000)


def _parent(client, exp_id, plan, start):
    parent = client.create_run(exp_id, tags={C.ROLE: C.ROLE_SWEEP, C.SPEC_HASH: plan.spec_hash,
                                             **C.parent_display_tags("", ())}, start_time=start).info.run_id
    record_expected_runs(client, parent, plan)
    return parent


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Sweep A (supervised, FixMatch) FINISHED; sweep B (FixMatch, MutexMatch) launched after it: its FixMatch
    trials linked to A's runs, its MutexMatch trials trained."""
    return two_sweeps(tmp_path_factory.mktemp("reuse"))


def two_sweeps(tmp: Path):
    """The store of :func:`store` in ``tmp`` (also the start of tests/orchestration/test_reuse_source.py's)."""
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    client = MlflowClient(uri)
    yaml_a, yaml_b = _yaml(tmp, "sweep_a", ["supervised", "fixmatch"]), _yaml(tmp, "sweep_b", ["fixmatch", "mutexmatch"])
    plan_a, plan_b = _plan(tmp, yaml_a), _plan(tmp, yaml_b)
    now = int(time.time() * 1000)
    exp_a = client.create_experiment("sweep_a", artifact_location=(tmp / "artifacts").as_uri())
    parent_a = _parent(client, exp_a, plan_a, now - 3_600_000)
    for t in plan_a.grid:
        _train(client, exp_a, parent_a, t, now - 3_600_000)
    exp_b = client.create_experiment("sweep_b", artifact_location=(tmp / "artifacts").as_uri())
    todo, reused = link_reusable(plan_b, Store(client, exp_b), [t.key for t in plan_b.grid])
    parent_b = _parent(client, exp_b, plan_b, now)
    for t in plan_b.grid:
        if t.key in todo:
            _train(client, exp_b, parent_b, t, now)
    return tmp, uri, client, (exp_a, plan_a), (exp_b, plan_b, yaml_b), todo, reused


def test_the_second_sweep_trains_nothing_for_the_shared_cell(store):
    _, _, client, (exp_a, plan_a), (exp_b, plan_b, _), todo, reused = store
    shared = [t for t in plan_b.grid if dict(t.cell.levels)["method"] == "fixmatch"]
    assert {t.config_hash for t in shared} <= {t.config_hash for t in plan_a.grid}  # the same configs
    assert todo == [t.key for t in plan_b.grid if t not in shared]                   # MutexMatch only
    assert len(reused) == 2 and all("reused: FINISHED run " in r for r in reused)
    links = client.search_runs([exp_b], f"tags.`{C.REUSED_FROM}` != ''")
    assert len(links) == 2 and all(r.info.status == "FINISHED" for r in links)
    for link in links:  # nothing copied that could diverge: the link holds no metric, param or artifact
        assert not link.data.metrics and not link.data.params and not client.list_artifacts(link.info.run_id)
        source = client.get_run(link.data.tags[C.REUSED_FROM])
        assert source.info.experiment_id == exp_a and link.data.tags[C.REUSED_FROM_EXPERIMENT] == "sweep_a"
        assert link.data.tags[C.CONFIG_HASH] == source.data.tags[C.CONFIG_HASH]
        assert link.info.run_name.endswith("· reused")
    # a relaunch of B finds nothing left: its own links and runs count as FINISHED in its experiment
    grid, _, skipped = select(plan_b, Store(client, exp_b), force=False)
    assert grid == [] and len(skipped) == 4 and reusable(plan_b, Store(client, exp_b), grid) == {}


def test_summary_status_and_report_of_the_second_sweep_include_the_reused_runs(store):
    tmp, uri, client, _, (exp_b, plan_b, yaml_b), _, _ = store
    summary = grid_summary(Store(client, exp_b), plan_b)
    row = next(line for line in summary.splitlines() if line.startswith("method=fixmatch"))
    assert "2/2 (2 reused)" in row and "81.00 ± 1.41" in row  # A's FixMatch runs: best 80 and 82
    assert "92.00 ± 2.83" in summary                          # B's own MutexMatch runs
    st = collect(Store(client, exp_b), plan_b)
    fix = [t for t in st.trials if t.cell.startswith("method=fixmatch")]
    assert [t.state for t in st.trials] == ["FINISHED"] * 4
    assert all(t.detail.startswith("reused: run ") and "'sweep_a'" in t.detail for t in fix)
    assert sorted(round(100 * t.final) for t in fix) == [80, 82]
    assert "reused" in format_status(st)
    build_report(yaml_b, tracking_uri=uri, out_dir=tmp / "report_b", formats=["md"])
    table = (tmp / "report_b" / "main.md").read_text()
    assert "81.00±1.41" in table and "92.00±2.83" in table


def test_no_reuse_and_dry_run(store, capsys):
    tmp, uri, client, _, (_, plan_b, yaml_b), _, _ = store
    assert "--no-reuse" in command_line(SweepOptions(spec_path=yaml_b, no_reuse=True), uri, str(tmp / "ray"),
                                        resume=False)
    from orchestration.launch.dryrun import dry_run

    # a third experiment of B's YAML: all four trials are in the store already (two in A, two in B)
    out = dry_run(plan_b, SweepOptions(spec_path=yaml_b), uri, str(tmp / "ray"), "sweep_b_again")
    printed = capsys.readouterr().out
    assert len(out.skipped) == 4
    assert "reused (a FINISHED run of the same config elsewhere in this store; not trained again, --no-reuse " \
           "trains them): 4 trial(s), saving ≈ " in printed and "CPU-hours" in printed
    assert "nothing to run" in printed
    dry_run(plan_b, SweepOptions(spec_path=yaml_b, no_reuse=True), uri, str(tmp / "ray"), "sweep_b_again")
    assert "reused (" not in capsys.readouterr().out
    assert Store(client, "").finished_runs_by_hash({"no-such-hash"}) == {}


def test_a_launch_whose_every_trial_is_reused_trains_nothing_and_records_them(store, run_cli):
    """Through the CLI: a third YAML made only of the shared cell reuses both runs, starts no Ray (nothing to
    train), opens a FINISHED parent run holding its expected runs, and prints the summary with them."""
    tmp, uri, client, (exp_a, _), _, _, _ = store
    yaml_c = _yaml(tmp, "sweep_c", ["fixmatch"])
    # a link run left RUNNING by a launch interrupted while linking (issue 33 item 8): this launch ends it
    tags = C.reused_trial_tags(kind=C.KIND_GRID, cell_levels=[("method", "fixmatch")], cell_id="method=fixmatch",
                               fold=0, source_id="gone", source_tags={}, source_experiment="a", source_artifact_uri="")
    # made where a launch makes it (beside the store), not in MLflow's default ./mlruns of the test's folder, which
    # the launch's copied-store check rightly refuses as another folder's
    exp_c = client.create_experiment("sweep_c", artifact_location=tracking.artifact_location(uri))
    stale = client.create_run(exp_c, tags=tags, run_name="stale · reused").info.run_id
    result = run_cli(tmp, str(yaml_c), "--tracking-uri", uri, timeout=300)
    assert result.returncode == 0, result.output
    assert "ended 1 link run(s) of reused trials left RUNNING by an interrupted launch (now KILLED): stale · " \
           "reused" in result.output and client.get_run(stale).info.status == "KILLED"
    assert "2 trial(s) with a FINISHED run of the same config from other code than this launch's " in result.output
    assert "abc (2 trials); reused (--reuse same-commit trains them again instead)" in result.output
    assert "2 trial(s) reused from FINISHED runs of the same config" in result.output
    assert "nothing to do" in result.output and "2/2 (2 reused)" in result.output and "81.00 ± 1.41" in result.output
    exp_c = client.get_experiment_by_name("sweep_c").experiment_id
    parents = client.search_runs([exp_c], f"tags.`{C.ROLE}` = '{C.ROLE_SWEEP}'")
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert not (tmp / "ray_results").exists()  # Tune never ran
    again = run_cli(tmp, str(yaml_c), "--tracking-uri", uri, "--no-reuse", "--dry-run", timeout=300)
    assert again.returncode == 0 and "reused (" not in again.output  # its own links: skipped, not reused
