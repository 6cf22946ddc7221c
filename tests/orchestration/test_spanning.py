"""Trials that span workers (issue 30, ``resources.workers``): the schema and its spec-hash rule, the batch-split
check at load, the cluster check and Tune's request, and the relay between rank 0 and the trial's process
(:mod:`orchestration.trial.spanning`) driven by a real trainer in this process with in-process queues (no Ray).
A real 2-worker sweep on local Ray is the heavy test at the end."""

from __future__ import annotations

import queue
import shutil
from pathlib import Path

import pytest
from pydantic import ValidationError

from mutexmatch.training import Callback, EvalEvent, RunFolder, RunSummary, StartEvent
from orchestration.launch.cluster import check_resources
from orchestration.launch.launch import SweepError
from orchestration.spec.models import Resources, SweepSpec
from orchestration.spec.overrides import load_sweep
from orchestration.spec.sweepfile import SpecError, spec_hash
from orchestration.trial import spanning
from orchestration.trial.scratch import scratch_root

NODE_2CPU = [{"Alive": True, "Resources": {"CPU": 2.0}}]


def _spec(resources: dict) -> SweepSpec:
    return SweepSpec.model_validate({"name": "s", "axes": {"m": {"a": {}}}, "resources": resources})


def test_workers_default_leaves_the_spec_hash_as_it_was_and_other_values_change_it():
    one = spec_hash(_spec({"cpu": 1.0}))
    assert spec_hash(_spec({"cpu": 1.0, "workers": 1})) == one
    assert spec_hash(_spec({"cpu": 1.0, "workers": 2})) != one


@pytest.mark.parametrize("resources, words", [
    ({"workers": 0}, ["workers", "must be >= 1"]),
    ({"workers": 2, "gpu": 2}, ["gpu=2 with workers=2", "gpu: 1 and workers: 4"]),
    ({"workers": 1.5}, ["workers"]),
])
def test_bad_workers_are_refused_naming_the_field_and_what_is_allowed(resources, words):
    with pytest.raises(ValidationError) as e:
        Resources.model_validate(resources)
    assert all(w in str(e.value) for w in words)


def test_a_batch_that_does_not_split_over_the_workers_is_refused_at_load(tmp_path):
    spec = tmp_path / "split.yaml"
    spec.write_text("name: split\nbase:\n  data: {dataset: digits, num_labels: 20, root: %s}\n"
                    "  model: {backbone: small_cnn}\n  train: {iterations: 4, batch_size: 8, mu: 2}\n"
                    "folds: [0]\naxes:\n  method:\n    fixmatch: {algorithm: {name: fixmatch}}\n"
                    "resources: {cpu: 1, workers: 3}\n" % (tmp_path / "data"))
    with pytest.raises(SpecError) as e:
        load_sweep(spec, tmp_path, need_data=False)
    assert "train.batch_size=8: must be divisible by resources.workers=3" in str(e.value)
    assert "train.batch_size x train.mu=16: must be divisible by resources.workers=3" in str(e.value)
    spec.write_text(spec.read_text().replace("workers: 3", "workers: 2"))
    assert load_sweep(spec, tmp_path, need_data=False).spec.resources.workers == 2


def test_one_worker_asks_the_cluster_exactly_what_it_asked_before():
    request, warns = check_resources(Resources(cpu=1), "error", NODE_2CPU)
    assert request == {"cpu": 1, "gpu": 0.0} and warns == []
    assert spanning.trial_request(request, 1, "/s") == (request, None)


def test_workers_are_counted_node_by_node_and_a_group_larger_than_the_cluster_is_refused():
    nodes = NODE_2CPU + [{"Alive": True, "Resources": {"CPU": 3.0, "GPU": 2.0}},
                         {"Alive": False, "Resources": {"CPU": 64.0}}]
    request, _ = check_resources(Resources(cpu=2, workers=2), "error", nodes)
    assert request == {"cpu": 2, "gpu": 0.0, "workers": 2.0, "groups": 1.0}  # 1 + 1 workers of 2 CPUs
    request, _ = check_resources(Resources(cpu=1, gpu=0.5, workers=2), "error", nodes)
    assert request["groups"] == 2.0  # 4 workers of half a GPU on the one GPU node
    with pytest.raises(SweepError, match=r"resources.workers=3: a trial needs 3 workers of 2 CPUs each, and the "
                                         r"Ray cluster holds 2 such workers"):
        check_resources(Resources(cpu=2, workers=3), "error", nodes)


def test_a_spanning_trial_reserves_a_token_and_its_workers_the_request():
    request, span = spanning.trial_request({"cpu": 2.0, "gpu": 1.0, "workers": 4.0, "groups": 2.0}, 4, "s3://b/x/")
    assert request == spanning.TRIAL_PROCESS_REQUEST and request["cpu"] == request["gpu"] == 0
    assert span == spanning.Span(workers=4, cpu=2.0, gpu=1.0, storage="s3://b/x/train_runs")
    assert spanning.concurrency_cap({}, 2.0) == {"max_concurrent_trials": 2}
    assert spanning.concurrency_cap({"max_concurrent_trials": 5}, 2.0) == {"max_concurrent_trials": 5}


def test_pack_unpack_and_moved_paths(tmp_path):
    src = tmp_path / "rank0" / "run"
    (src / "checkpoints").mkdir(parents=True)
    (src / "config.yaml").write_text("a: 1\n")
    (src / "checkpoints" / "ckpt_00000002.pt").write_bytes(b"\0\1")
    files = spanning.pack_folder(src)
    assert files == {"checkpoints/ckpt_00000002.pt": b"\0\1", "config.yaml": b"a: 1\n"}
    mirror = tmp_path / "mirror" / "run"
    spanning.unpack_files(files, mirror)
    assert spanning.pack_folder(mirror) == files
    event = RunSummary(step=4, metrics={}, output_dir=src, final_checkpoint=src / "checkpoints" / "c.pt",
                       best_weights=None, final_weights=Path("/elsewhere/w.pt"))
    moved = spanning.moved_event(event, src, mirror)
    assert (moved.output_dir, moved.final_checkpoint) == (mirror, mirror / "checkpoints" / "c.pt")
    assert moved.final_weights == Path("/elsewhere/w.pt") and moved.best_weights is None
    start = StartEvent(step=0, iterations=4, run=RunFolder(src), config_hash="h", split_digest="d")
    assert spanning.moved_event(start, src, mirror).run.path == mirror


class _Recorder(Callback):
    """The trial process's callback: what it received, the files it found, and (``stop_at``) Tune's stop."""

    def __init__(self, stop_at: int | None = None):
        self.seen: list[tuple[str, int]] = []
        self.files: dict[str, list[str]] = {}
        self.stop_at = stop_at

    def on_start(self, event: StartEvent) -> None:
        assert event.run.config.is_file() and event.run.split.is_file()  # log_start reads them from the mirror
        self.seen.append(("start", event.step))

    def on_eval(self, event: EvalEvent) -> bool | None:
        self.seen.append(("eval", event.step))
        if event.checkpoint is not None:
            assert event.checkpoint.is_file()
            self.files[f"eval{event.step}"] = sorted(spanning.pack_folder(event.checkpoint.parent.parent))
        if event.step == self.stop_at:
            raise SystemExit(0)  # what tune.report does when ASHA stops the trial
        return None

    def on_end(self, summary: RunSummary) -> None:
        self.seen.append(("end", summary.step))
        assert summary.final_weights is not None and summary.final_weights.is_file()


class _InProcessTrainer:
    """Stands for the TorchTrainer: one rank (world size 1) in a thread of this process."""

    def __init__(self, config: dict):
        self.config = config

    def fit(self) -> None:
        spanning.train_rank(self.config, 0)


def _relay_run(tmp_path: Path, data_root: Path, monkeypatch, callback: Callback, folder: RunFolder) -> None:
    monkeypatch.setattr(spanning, "_queues", lambda: (queue.Queue(), queue.Queue()))
    monkeypatch.setattr(spanning, "_torch_trainer", lambda span, config, trial_id: _InProcessTrainer(config))
    monkeypatch.setattr(spanning.tempfile, "tempdir", str(tmp_path / "node"))  # the worker node's scratch
    raw = {"data": {"dataset": "digits", "num_labels": 20, "root": str(data_root)}, "model": {"backbone": "small_cnn"},
           "train": {"iterations": 4, "eval_interval": 2, "batch_size": 4, "mu": 2, "eval_batch_size": 512,
                     "device": "cpu", "num_threads": 1}}
    spanning.fit_spanning(spanning.Span(1, 1.0, 0.0, str(tmp_path)), raw, folder, callback, trial_id="t1")


@pytest.mark.slow
def test_rank0_events_and_files_reach_the_trial_process_and_tunes_stop_stops_the_run(tmp_path, data_root,
                                                                                      monkeypatch):
    folder = RunFolder(tmp_path / "trial" / "run")
    done = _Recorder()
    _relay_run(tmp_path, data_root, monkeypatch, done, folder)
    assert done.seen == [("start", 0), ("eval", 2), ("eval", 4), ("end", 4)]
    assert "checkpoints/ckpt_00000002.pt" in done.files["eval2"] and "config.yaml" in done.files["eval2"]
    assert (folder.path / "final_model.pt").is_file()
    assert not list(scratch_root().iterdir())  # the rank's own folder (under the node's tmp_path/node) is gone

    # a restarted attempt: rank 0 is seeded with the trial's folder (Tune's checkpoint) and resumes at step 2
    keep = folder.path / "checkpoints" / "ckpt_00000004.pt"
    for f in (keep, keep.with_name(keep.name + ".sha256")):
        f.unlink(missing_ok=True)
    (folder.path / "final_model.pt").unlink()
    resumed = _Recorder()
    _relay_run(tmp_path, data_root, monkeypatch, resumed, folder)
    assert resumed.seen == [("start", 2), ("eval", 4), ("end", 4)]

    shutil.rmtree(folder.path)
    stopped = _Recorder(stop_at=2)
    with pytest.raises(SystemExit):
        _relay_run(tmp_path, data_root, monkeypatch, stopped, folder)
    assert stopped.seen == [("start", 0), ("eval", 2)]  # rank 0 was answered "stop" and trained no further


def test_a_worker_group_that_ends_without_a_word_fails_the_trial_in_one_line(tmp_path, monkeypatch):
    class Dies:
        def fit(self):
            raise RuntimeError("Worker group failed:\nActorDiedError: the actor died unexpectedly")

    monkeypatch.setattr(spanning, "_queues", lambda: (queue.Queue(), queue.Queue()))
    monkeypatch.setattr(spanning, "_torch_trainer", lambda span, config, trial_id: Dies())
    monkeypatch.setattr(spanning, "POLL_S", 0.05)
    with pytest.raises(spanning.SpanError, match=r"^the trial's 2 workers failed: RuntimeError: ActorDiedError: "
                                                 r"the actor died unexpectedly$"):
        spanning.fit_spanning(spanning.Span(2, 1.0, 0.0, str(tmp_path)), {}, RunFolder(tmp_path / "run"),
                              _Recorder(), trial_id="t")


# ------------------------------------------------------------------------------------- real sweeps on local Ray
SPEC = """
name: {name}
base:
  data: {{dataset: digits, num_labels: 20, root: {root}}}
  model: {{backbone: small_cnn}}
  train: {{iterations: {iterations}, eval_interval: {eval_interval}, batch_size: 8, mu: 2, eval_batch_size: 512,
          num_threads: 1}}
folds: [0]
axes:
  method:
    fixmatch: {{algorithm: {{name: fixmatch}}}}
resources: {{cpu: 1, workers: 2}}
"""


def _trial_runs(client, name: str) -> list:
    exp = client.get_experiment_by_name(name)
    return [] if exp is None else client.search_runs([exp.experiment_id], "tags.`mutexmatch.role` = 'trial'")


def _losses(client, run) -> dict[int, float]:
    return {m.step: m.value for m in client.get_metric_history(run.info.run_id, "train/loss")}


def _one_process_losses(client, run, dest: Path) -> dict[int, float]:
    """The trial's resolved config trained by the plain trainer in this process (world size 1)."""
    import yaml

    from mutexmatch.config import parse_config
    from mutexmatch.training import Trainer

    raw = yaml.safe_load(Path(client.download_artifacts(run.info.run_id, "config.yaml", str(dest))).read_text())
    raw["output_dir"] = str(dest / "reference")
    Trainer(parse_config(raw)).fit()
    return {row["step"]: row["train/loss"] for row in RunFolder(dest / "reference").read_metrics()}


@pytest.mark.heavy
@pytest.mark.slow
def test_a_two_worker_trial_trains_in_the_sweep_as_one_mlflow_run_with_the_one_process_losses(tmp_path, data_root,
                                                                                              run_cli):
    from mlflow import MlflowClient

    (tmp_path / "span.yaml").write_text(SPEC.format(name="span", root=data_root, iterations=8, eval_interval=4))
    result = run_cli(tmp_path, "span.yaml", timeout=900)
    assert result.returncode == 0, result.output
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    [run] = _trial_runs(client, "span")
    assert run.info.status == "FINISHED"
    assert run.data.tags["mutexmatch.attempt.1.world_size"] == "2"
    losses = _losses(client, run)
    assert sorted(losses) == [4, 8]  # each evaluation logged once
    reference = _one_process_losses(client, run, tmp_path / "ref")
    assert losses == pytest.approx({s: reference[s] for s in losses}, rel=1e-5)


@pytest.mark.heavy
@pytest.mark.slow
def test_a_lost_worker_restarts_the_trial_from_its_checkpoint_and_nothing_is_logged_twice(tmp_path, data_root,
                                                                                           sweep_env, procs):
    import os
    import signal
    import subprocess
    import sys

    from mlflow import MlflowClient

    (tmp_path / "lost.yaml").write_text(SPEC.format(name="lost", root=data_root, iterations=200, eval_interval=20))
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    driver = subprocess.Popen([sys.executable, "-m", "orchestration.sweep", "lost.yaml", "--max-failures", "2"],
                              cwd=tmp_path, env=sweep_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, start_new_session=True)
    try:
        def rank1_past_step_60():
            runs = _trial_runs(client, "lost")
            if not runs or max(_losses(client, runs[0]), default=0) < 60:
                return None
            workers = [p for p in procs["descendants"](driver.pid) if _cmdline(p).startswith("ray::RayTrainWorker")]
            return sorted(workers)[-1] if len(workers) == 2 else None

        os.kill(procs["wait_for"](rank1_past_step_60, 600, "the 2-worker trial to log step 60"), signal.SIGKILL)
        out, _ = driver.communicate(timeout=900)
    finally:
        if driver.poll() is None:
            procs["kill"]([driver.pid, *procs["descendants"](driver.pid)])
    assert driver.returncode == 0, out
    [run] = _trial_runs(client, "lost")
    tags = run.data.tags
    assert run.info.status == "FINISHED" and tags["mutexmatch.attempts"] == "2", out
    assert tags["mutexmatch.attempt.2.tune_checkpoint"] == "yes" and tags["mutexmatch.attempt.2.world_size"] == "2"
    assert 20 <= int(tags["mutexmatch.attempt.2.start_step"]) < 200
    assert sorted(_losses(client, run)) == list(range(20, 201, 20))  # every evaluation logged exactly once


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def test_the_dry_run_counts_a_spanning_trial_as_its_wall_time_on_all_its_workers(tmp_path):
    from orchestration.launch.dryrun import _Estimator, _rows, _slots, plan_hours
    from orchestration.launch.launch import SweepOptions
    from orchestration.spec.overrides import plan_sweep

    yaml_path = Path(__file__).resolve().parents[2] / "experiments" / "ablation_k.yaml"
    est = _Estimator(None, 1, tmp_path)  # the committed H200 figures: nothing is measured
    plans = {n: plan_sweep(load_sweep(yaml_path, tmp_path, (f"resources.workers={n}", "folds=[0]"), need_data=False), tmp_path)
             for n in (1, 4)}
    rows = {n: _rows(plan, set(), est, False) for n, plan in plans.items()}
    one, four = rows[1][0].per_trial.seconds, rows[4][0].per_trial.seconds
    assert one and four == pytest.approx(one / 4)
    assert plan_hours(plans[4], rows[4]) == pytest.approx(plan_hours(plans[1], rows[1]))  # 4 × a quarter
    gpu = plans[1].spec.resources.gpu
    slots = {n: _slots(plan, SweepOptions(Path("x"), gpus=16), None)[0] for n, plan in plans.items()}
    assert slots == {1: int(16 / gpu), 4: int(16 / (gpu * 4))}
