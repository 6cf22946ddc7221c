"""End to end through the real CLI, a real local Ray and a real MLflow SQLite store: a tiny sweep (2 variants × 2
folds + an Optuna search of 4 trials) produces exactly the documented MLflow layout; a relaunch skips it; a dry run
prints the plan and a measured cost. (A GPU request refused on a CPU-only cluster: test_fault_tolerance.py.)"""

from __future__ import annotations

import json
import os
import re
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import yaml
from mlflow import MlflowClient

from mutexmatch.algorithms import ALGORITHMS
from mutexmatch.metrics import FIXED, term_metric
from mutexmatch.data.splits import Split

REPO = Path(__file__).resolve().parents[2]

TINY = """
name: tiny
base:
  data: {{dataset: digits, num_labels: 20, root: {root}}}
  model: {{backbone: small_cnn}}
  train: {{iterations: 8, eval_interval: 4, batch_size: 4, mu: 2, eval_batch_size: 512}}
folds: [0, 1]
axes:
  method:
    fixmatch: {{algorithm: {{name: fixmatch}}}}
    mutexmatch: {{algorithm: {{name: mutexmatch}}}}
resources: {{cpu: 1, gpu: {gpu}}}
search:
  cells: [{{method: mutexmatch}}]
  metric: val/best_acc
  n_trials: 4
  max_concurrent: 2
  base: {{data: {{val_per_class: 5}}}}
  space:
    algorithm.tau: {{type: float, low: 0.7, high: 0.99}}
    algorithm.k: {{type: int, low: 1, high: 10}}
  scheduler: {{type: asha, grace_period: 1, reduction_factor: 2}}
"""

REGISTERED = "tiny-best"  # --register-model of the tiny sweep (issue 44 item 2)

GRID_METRICS = {"test/acc", "test/acc_raw", "test/best_acc", "test/median_acc", "train/loss", "train/sup",
                "train/sep", "train/p", "train/n", "train/mask_ratio", "train/pl_acc", "train/pl_acc_all", "train/cpa",
                "train/tnc_cpa", "train/lr", "perf/img_per_s", "perf/data_s", "perf/compute_s"}


def _write_spec(project: Path, data_root: Path, gpu: float = 0) -> Path:
    project.mkdir(parents=True, exist_ok=True)
    spec = project / "tiny.yaml"
    spec.write_text(TINY.format(root=data_root, gpu=gpu))
    return spec


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, data_root, run_cli):
    """The tiny sweep, run once with the default tracking URI and storage (both under the project folder). The spec
    asks for no GPU, ``--set resources.gpu=0.5`` for half of one (applied before the resource check), and the sweep
    is told to drop it: this Ray has none. Resources do not change a trial's config, so a relaunch without the
    override finds every trial done. Each cell's best model is registered as a version of :data:`REGISTERED`."""
    project = tmp_path_factory.mktemp("tiny")
    _write_spec(project, data_root, gpu=0)
    result = run_cli(project, "tiny.yaml", "--gpu-policy", "drop", "--set", "resources.gpu=0.5",
                     "--register-model", REGISTERED)
    client = MlflowClient(f"sqlite:///{project / 'mlflow.db'}")
    return project, result, client, client.get_experiment_by_name("tiny")


def _runs(client, exp, flt=""):
    return client.search_runs([exp.experiment_id], flt, max_results=1000)


def _artifacts(client, run_id, path=None):
    out = []
    for a in client.list_artifacts(run_id, path):
        out += _artifacts(client, run_id, a.path) if a.is_dir else [a.path]
    return out


@pytest.mark.slow
def test_tiny_sweep_writes_the_documented_mlflow_layout(tiny, tmp_path):
    project, result, client, exp = tiny
    assert result.returncode == 0, result.output
    assert "resources.gpu=0.5: the Ray cluster has no GPU" in result.output  # dropped with a warning
    assert (project / "ray_results" / "tiny").is_dir()  # default storage: <project>/ray_results
    parents = _runs(client, exp, "tags.`mutexmatch.role` = 'sweep'")
    assert len(parents) == 1
    parent = parents[0]
    assert parent.info.status == "FINISHED"
    tags = parent.data.tags
    assert tags["mutexmatch.spec_path"] == str(project / "tiny.yaml")
    assert len(tags["mutexmatch.spec_hash"]) == 16 and tags["mutexmatch.git_commit"]
    spec_copy = Path(client.download_artifacts(parent.info.run_id, "spec.yaml", str(tmp_path)))
    assert spec_copy.read_text() == (project / "tiny.yaml").read_text()

    grid = _runs(client, exp, "tags.`mutexmatch.kind` = 'grid'")
    assert len(grid) == 4
    # readable names, levels first (contract.trial_run_name); runs are found by their tags
    assert sorted(r.info.run_name for r in grid) == ["fixmatch · fold 0", "fixmatch · fold 1",
                                                     "mutexmatch · fold 0", "mutexmatch · fold 1"]
    assert parent.info.run_name.startswith("sweep tiny · 20")
    assert len({r.data.tags["mutexmatch.config_hash"] for r in grid}) == 4
    for run in grid:
        t, p = run.data.tags, run.data.params
        variant = run.info.run_name.split(" · ")[0]
        fold = int(run.info.run_name[-1])
        assert run.info.status == "FINISHED"
        assert t["mlflow.parentRunId"] == parent.info.run_id
        assert (t["mutexmatch.role"], t["mutexmatch.kind"], t["mutexmatch.cell"], t["mutexmatch.axis.method"],
                t["mutexmatch.fold"], t["mutexmatch.variant"]) == ("trial", "grid", f"method={variant}", variant,
                                                                   str(fold), variant)
        assert t["mutexmatch.git_commit"] == tags["mutexmatch.git_commit"] and t["mutexmatch.trial_id"]
        # params: the resolved RunConfig flattened with dots; the dropped GPU request means CPU trials
        assert (p["algorithm.name"], p["data.fold"], p["train.iterations"], p["train.device"]) == (
            variant, str(fold), "8", "cpu")
        assert p["data.root"] == str(Path(yaml.safe_load((project / "tiny.yaml").read_text())["base"]["data"]
                                          ["root"]))
        # metrics at every evaluation step
        expected = GRID_METRICS - ({"train/tnc_cpa", "train/sep", "train/n"} if variant == "fixmatch" else set())
        assert expected <= set(run.data.metrics), expected - set(run.data.metrics)
        # the loss terms: exactly those its algorithm declares (issue 22: no train/sep, train/n of 0.0 for FixMatch)
        assert {m for m in run.data.metrics if m.startswith("train/") and m not in FIXED} == {
            term_metric(t) for t in ALGORITHMS[variant].terms}
        for key in ("test/acc", "train/loss", "train/lr"):
            assert [m.step for m in client.get_metric_history(run.info.run_id, key)] == [4, 8]
        assert 0.0 <= run.data.metrics["test/acc"] <= 1.0
        # artifacts
        arts = set(_artifacts(client, run.info.run_id))
        assert {"config.yaml", "split.json", "dataset.json", "weights/best_model.pt", "weights/final_model.pt",
                "class_counts/step_00000004.json", "class_counts/step_00000008.json",
                "checkpoints/ckpt_00000008.pt", "checkpoints/ckpt_00000008.pt.sha256"} <= arts, arts
        local = Path(client.download_artifacts(run.info.run_id, "", str(tmp_path / run.info.run_id)))
        assert Split.load(local / "split.json").digest() == t["mutexmatch.split_digest"]
        assert yaml.safe_load((local / "config.yaml").read_text())["algorithm"]["name"] == variant
        counts = json.loads((local / "class_counts" / "step_00000008.json").read_text())
        assert counts["step"] == 8 and len(counts["pseudo_label_counts"]) == 10
        assert sum(map(sum, counts["pseudo_label_counts"])) == 4 * 2 * 4  # B·μ unlabeled images × 4 steps
        assert ("comp_label_counts" in counts) == (variant == "mutexmatch")
        # the trial logs the counts; drawing them is the report's (a trial never imports reports or matplotlib)
        assert not any(a.endswith(".png") for a in arts), arts
        weights = torch.load(local / "weights" / "final_model.pt", weights_only=True)
        assert weights and all(torch.is_tensor(v) for v in weights.values())
        # the trial's local run folder (inside Ray's session directory) is gone once its files are in MLflow
        assert p["output_dir"].endswith("/run") and not Path(p["output_dir"]).exists(), p["output_dir"]
    assert "method=fixmatch" in result.output and "± " in result.output  # the summary table
    # issue 40 item 3: every logged model of the store is in the sweep's experiment (none in Default), one per run
    # that keeps a model, and loads as runs:/<run>/model with both flavours
    import mlflow.pyfunc
    import mlflow.pytorch
    from mlflow.tracking._tracking_service.utils import _use_tracking_uri

    every = [e.experiment_id for e in client.search_experiments()]
    models = client.search_logged_models(experiment_ids=every)
    keep = [r for kind in ("grid", "refit") for r in _runs(client, exp, f"tags.`mutexmatch.kind` = '{kind}'")]
    assert sorted((m.experiment_id, m.source_run_id) for m in models) == sorted(
        (exp.experiment_id, r.info.run_id) for r in keep)
    x = torch.zeros(2, 1, 16, 16)
    with _use_tracking_uri(client.tracking_uri), torch.no_grad():
        for run in keep:
            probs = mlflow.pytorch.load_model(f"runs:/{run.info.run_id}/model")(x)
            assert torch.allclose(probs.sum(1), torch.ones(2), atol=1e-5)
            assert mlflow.pyfunc.load_model(f"runs:/{run.info.run_id}/model").predict(x.numpy()).shape == (2, 10)


@pytest.mark.slow
def test_optuna_search_stays_inside_its_bounds_and_logs_the_best(tiny):
    project, result, client, exp = tiny
    assert result.returncode == 0, result.output
    search = _runs(client, exp, "tags.`mutexmatch.kind` = 'search'")
    assert len(search) == 4
    parent = _runs(client, exp, "tags.`mutexmatch.role` = 'sweep'")[0]
    for run in search:
        assert run.info.status == "FINISHED"
        assert run.data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert run.data.tags["mutexmatch.cell"] == "method=mutexmatch" and run.data.tags["mutexmatch.fold"] == "0"
        assert 0.7 <= float(run.data.params["algorithm.tau"]) <= 0.99
        k = run.data.params["algorithm.k"]
        assert k.isdigit() and 1 <= int(k) <= 10
        assert run.data.params["data.val_per_class"] == "5"
        assert "val/best_acc" in run.data.metrics
        assert not Path(run.data.params["output_dir"]).exists()  # removed when finished or stopped by ASHA
    assert len({run.data.params["algorithm.tau"] for run in search}) == 4
    best = max(search, key=lambda r: r.data.metrics["val/best_acc"])
    best_value = best.data.metrics["val/best_acc"]
    winners = [r for r in search if r.data.metrics["val/best_acc"] == best_value]
    logged = parent.data.params
    assert any(logged["best.algorithm.tau"] == r.data.params["algorithm.tau"] and
               logged["best.algorithm.k"] == r.data.params["algorithm.k"] for r in winners)
    assert parent.data.tags["best.algorithm.tau"] == logged["best.algorithm.tau"]
    assert parent.data.metrics["best.val/best_acc"] == best_value
    assert f"algorithm.tau={logged['best.algorithm.tau']}" in result.output


@pytest.mark.slow
def test_the_console_holds_the_sweeps_own_lines_not_tunes_boxes_or_hints(tiny):
    """Issue 40 item 6: Tune's new console (Ray 2.60) printed, even at verbose 0, a box-drawn table per phase and
    "View detailed results here" / "To visualize your results with TensorBoard" lines that no user of the sweep
    needs; the sweep's one line per trial event and its summary remain."""
    _, result, _, _ = tiny
    assert result.returncode == 0, result.output
    for noise in ("╭", "│", "╰", "Configuration for experiment", "View detailed results here", "TensorBoard"):
        assert noise not in result.output, (noise, result.output[-3000:])
    assert "] started: " in result.output and "] done at step 8: " in result.output


def test_relaunch_skips_finished_trials_without_starting_ray(tiny, run_cli):
    project, result, client, exp = tiny
    assert result.returncode == 0, result.output
    before = len(_runs(client, exp))
    versions = client.search_model_versions(f"name = '{REGISTERED}'")
    again = run_cli(project, "tiny.yaml", "--gpu-policy", "drop", "--register-model", REGISTERED, timeout=120)
    assert again.returncode == 0, again.output
    assert "nothing to do (--force runs them again)" in again.output
    # registering again adds no version: each cell's best run has its version already (issue 44 item 2)
    assert again.output.count("(registered before)") == 3, again.output
    assert len(client.search_model_versions(f"name = '{REGISTERED}'")) == len(versions) == 3
    assert "method=mutexmatch" in again.output  # the summary is still printed
    assert len(_runs(client, exp)) == before
    plan = run_cli(project, "tiny.yaml", "--dry-run", timeout=180)
    # 4 grid trials, the search study and the 2 refits of its best parameters
    assert "skipped (already FINISHED with the same config): 7" in plan.output, plan.output
    forced = run_cli(project, "tiny.yaml", "--dry-run", "--force", timeout=180)
    assert forced.returncode == 0 and "skipped (already" not in forced.output


@pytest.mark.slow
def test_resume_auto_on_the_finished_sweep_trains_nothing(tiny, run_cli):
    """Issue 31: what a requeued or retried job runs every time (``--resume auto``, unlimited retries) finds the
    launch of these settings FINISHED and trains nothing: no run is added."""
    project, result, client, exp = tiny
    assert result.returncode == 0, result.output
    before = len(_runs(client, exp))
    again = run_cli(project, "tiny.yaml", "--gpu-policy", "drop", "--set", "resources.gpu=0.5", "--resume", "auto",
                    "--max-failures", "-1", timeout=120)
    assert again.returncode == 0, again.output
    assert "of these settings FINISHED: nothing of it is trained again" in again.output, again.output
    assert "nothing to do" in again.output and len(_runs(client, exp)) == before


def test_dry_run_prints_plan_and_measured_cost_without_creating_a_store(tmp_path, data_root, run_cli):
    _write_spec(tmp_path, data_root)
    result = run_cli(tmp_path, "tiny.yaml", "--dry-run", "--n-trials", "3", timeout=180)
    assert result.returncode == 0, result.output
    lines = result.output.splitlines()
    header = next(i for i, ln in enumerate(lines) if ln.split()[:4] == ["cell", "folds", "kind", "iterations"])
    rows = [ln.split() for ln in lines[header + 2:header + 2 + 3]]
    # folds folded into one row per cell; the search study's 3 trials of 8 steps
    assert [r[:4] for r in rows] == [["method=fixmatch", "0,1", "grid", "8"], ["method=mutexmatch", "0,1", "grid", "8"],
                                     ["method=mutexmatch", "0", "search", "×3"]]
    assert rows[-1][4] == "3×8"
    assert "cost figures: measured here on cpu" in result.output and "CPU-hours" in result.output
    assert "unknown" not in result.output and "disk: ~" in result.output
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "ray_results").exists()
    long = run_cli(tmp_path, "tiny.yaml", "--dry-run", "--per-trial", timeout=180)
    assert sum(1 for ln in long.output.splitlines() if ln.startswith("method=") and " grid " in ln) == 4


PAPER_YAMLS = sorted([*(REPO / "experiments").glob("table*.yaml"), *(REPO / "experiments").glob("ablation_*.yaml"),
                      REPO / "experiments" / "pseudo_label_accuracy.yaml"])


def test_dry_run_of_every_paper_yaml_plans_from_an_empty_folder(tmp_path, monkeypatch, capsys):
    """No dataset, no GPU: each paper YAML gets a plan costed from the committed H200 measurements, one line
    naming the missing data, and no zero or unknown estimate."""
    from orchestration import sweep

    assert len(PAPER_YAMLS) == 13
    readme = (REPO / "experiments" / "README.md").read_text()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for path in PAPER_YAMLS:
        assert sweep.main([str(path), "--dry-run"]) == 0, path
        out = capsys.readouterr().out.split("[sweep] wall time")[0]
        assert out.count("warning: no data here for") == 1, out
        assert "python -m mutexmatch.datasets download" in out or "no downloader" in out
        assert "committed measurements for NVIDIA H200" in out and " H200-hours" in out, out
        # the one cost figure (issue 24): the dry run's total is its row of experiments/README.md's generated table
        hours = re.search(r"estimated cost for \d+ trials: ([\d,.]+) H200-hours", out).group(1)
        assert f"| `{path.name}` | " in readme and re.search(rf"\| `{re.escape(path.name)}` \| \d+ \| \d+ \| "
                                                            rf"{re.escape(hours)} \|", readme), (path.name, hours)
        assert "unknown" not in out and not re.search(r"(?<![\d.,])0(\.0+)? (s|min|h|d|H200-hours)\b", out), out
    assert list(tmp_path.iterdir()) == []  # nothing written: no store, no storage, no data


def test_a_figure_on_a_loss_term_no_algorithm_declares_is_refused_at_launch(tmp_path, monkeypatch, capsys):
    """The sweep validates the report layout with the registered algorithms' declared terms (issue 22): a typo of a
    loss term is refused before anything trains (the report alone could not know it), a declared term (an
    ablation's ab1) passes."""
    from orchestration import sweep

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    spec = tmp_path / "tiny.yaml"
    for metric, code in (("train/sepp", 2), ("train/ab1", 0)):
        spec.write_text(TINY.format(root=tmp_path / "no_data", gpu=0) +
                        f"figures: [{{type: curves, id: c, metrics: [{metric}]}}]\n")
        assert sweep.main([str(spec), "--dry-run"]) == code, metric
    err = capsys.readouterr().err
    assert "error: figures[0].metrics: 'train/sepp' is not a metric the trainer logs; did you mean 'train/sep'?" in err


def test_bad_spec_exits_2_with_the_field(tmp_path, data_root, run_cli):
    spec = _write_spec(tmp_path, data_root)
    spec.write_text(spec.read_text().replace("metric: val/best_acc", "metric: test/acc"))
    result = run_cli(tmp_path, "tiny.yaml", "--dry-run", timeout=120)
    assert result.returncode == 2
    assert "error: search.metric='test/acc': must be a validation metric" in result.output


@pytest.mark.slow
def test_parent_run_shows_description_status_and_progress_metrics(tiny, tmp_path):
    project, result, client, exp = tiny
    assert result.returncode == 0, result.output
    parent = _runs(client, exp, "tags.`mutexmatch.role` = 'sweep'")[0]
    assert parent.data.tags["mlflow.note.content"] == "(the sweep YAML has no description)"
    assert parent.data.tags["mutexmatch.overrides"] == '["resources.gpu=0.5"]'
    assert "--set resources.gpu=0.5" in parent.data.tags["mutexmatch.command"]
    shown = result.output.split("[sweep] MLflow UI, the runs the report counts (each added as it finishes): ")[1]
    assert shown.split(" ui --backend-store-uri sqlite:///")[0].endswith("mlflow")   # the venv's (mlflow_executable)
    status_md = Path(client.download_artifacts(parent.info.run_id, "status.md", str(tmp_path))).read_text()
    assert "| method=fixmatch | 0 | grid | FINISHED | 8/8 |" in status_md and " 0 PENDING" in status_md
    history = client.get_metric_history(parent.info.run_id, "trials/finished")
    assert len(history) >= 2 and history[0].value < history[-1].value  # refreshed as the sweep went on
    assert parent.data.metrics["trials/pending"] == 0 and parent.data.metrics["trials/failed"] == 0


@pytest.mark.slow
def test_every_trial_run_has_system_metrics(tiny):
    """Issue 44 item 3: MLflow's system metrics on every trial's run (grid, search, refit), the tiny sweep's trials
    being shorter than the default 10 s interval."""
    project, result, client, exp = tiny
    assert result.returncode == 0, result.output
    trials = _runs(client, exp, "tags.`mutexmatch.role` = 'trial'")
    assert {r.data.tags["mutexmatch.kind"] for r in trials} == {"grid", "search", "refit"}
    for run in trials:
        system = {k for k in run.data.metrics if k.startswith("system/")}
        assert {"system/cpu_utilization_percentage", "system/system_memory_usage_megabytes",
                "system/disk_usage_percentage", "system/network_receive_megabytes"} <= system, (run.info.run_name,
                                                                                                system)


def _best_by_cell(client, exp) -> dict:
    """Cell → its FINISHED grid or refit run of the highest test/acc (the first fold of equals)."""
    by_cell: dict = {}
    for kind in ("grid", "refit"):
        runs = sorted(_runs(client, exp, f"tags.`mutexmatch.kind` = '{kind}'"),
                      key=lambda r: int(r.data.tags["mutexmatch.fold"]))
        for run in runs:
            by_cell.setdefault(run.data.tags["mutexmatch.cell"], []).append(run)
    return {cell: max(runs, key=lambda r: r.data.metrics["test/acc"]) for cell, runs in by_cell.items()}


@pytest.mark.slow
def test_register_model_holds_each_cells_best_model_predicting_as_predict_does(tiny, tmp_path, write_image_folder,
                                                                               capsys):
    """Issue 44 item 2: after the sweep with --register-model, one version per cell (the tuned row is a cell of its
    own), from the run of its best fold, tagged with the cell, fold, accuracy and config hash; each loads by name
    with mlflow.pytorch.load_model and predicts the classes `python -m mutexmatch.predict` gives on the same
    images."""
    import mlflow.pytorch
    from mlflow.tracking._tracking_service.utils import _use_tracking_uri

    from mutexmatch.classifier import folder_images, load_classifier
    from mutexmatch.data.builtin.digits import _decode_all
    from mutexmatch.data.imagefolder import decode_images
    from mutexmatch.predict import main as predict

    project, result, client, exp = tiny
    assert result.returncode == 0, result.output
    best = _best_by_cell(client, exp)
    assert sorted(best) == ["method=fixmatch", "method=mutexmatch", "method=mutexmatch,tuned=true"]
    versions = client.search_model_versions(f"name = '{REGISTERED}'")
    assert sorted(v.tags["mutexmatch.cell"] for v in versions) == sorted(best)
    test = _decode_all(16)[1]
    images = write_image_folder(test.x[:30], test.y[:30], tmp_path / "images")
    paths, _ = folder_images(images)
    for v in versions:
        run = best[v.tags["mutexmatch.cell"]]
        assert v.run_id == run.info.run_id and v.source.startswith("models:/m-")
        assert (v.tags["mutexmatch.fold"], v.tags["mutexmatch.config_hash"], float(v.tags["test/acc"])) == (
            run.data.tags["mutexmatch.fold"], run.data.tags["mutexmatch.config_hash"], run.data.metrics["test/acc"])
        assert f"models:/{REGISTERED}/{v.version}" in result.output
        with _use_tracking_uri(client.tracking_uri), torch.no_grad():
            # the model takes the run's channels (its signature): digits' one, where predict's decoder gives RGB
            gray = decode_images(paths, 16)[:, :1].float()
            probs = mlflow.pytorch.load_model(f"models:/{REGISTERED}/{v.version}")(gray)
        local = Path(client.download_artifacts(run.info.run_id, "", str(tmp_path / str(v.version))))
        weights = local / "weights" / "final_model.pt"
        out = tmp_path / f"pred{v.version}.csv"
        assert predict(["--weights", str(weights), "--images", str(images), "--out", str(out)]) == 0, \
            capsys.readouterr().err
        classes = load_classifier(weights).classes
        predicted = [line.split(",")[1] for line in out.read_text().splitlines()[1:]]
        assert [classes[int(k)] for k in probs.argmax(1)] == predicted


def test_a_bad_register_model_name_is_one_line_before_any_work(tmp_path, capsys):
    from orchestration.sweep import main

    spec = tmp_path / "missing.yaml"  # never read: the name is refused first
    for args, expected in ((["--register-model", "a/b"], "error: --register-model 'a/b': not a registered model "
                                                          "name MLflow accepts: Invalid model name 'a/b'. Names "
                                                          "cannot contain '/' or ':'."),
                           (["--register-model", "m", "--smoke"], "error: --register-model 'm' with --smoke: smoke "
                                                                   "trials log no model")):
        assert main([str(spec), *args]) == 2
        err = capsys.readouterr().err
        assert err.startswith(expected) and len(err.strip().splitlines()) == 1, err


def test_set_overrides_enter_the_resume_command(tmp_path):
    from orchestration.launch.launch import SweepOptions, command_line

    opts = SweepOptions(spec_path=Path("x.yaml"), overrides=("base.data.root=/mnt/data sets", "resources.gpu=1"))
    cmd = command_line(opts, "sqlite:////a/mlflow.db", "/a/rr", resume=True)
    assert "--set 'base.data.root=/mnt/data sets' --set resources.gpu=1" in cmd and cmd.endswith("--resume")
    # --register-model: the resume registers what the interrupted launch did not get to (issue 44 item 2)
    cmd = command_line(replace(opts, register_model="my model"), "sqlite:////a/mlflow.db", "/a/rr", resume=True)
    assert "--register-model 'my model' --resume" in cmd



TRYOUT_SPEC = TINY.replace("n_trials: 4", "n_trials: 2").replace("""    mutexmatch: {{algorithm: {{name: mutexmatch}}}}
""", """    mutexmatch: {{algorithm: {{name: mutexmatch}}}}
  setting:
    digits-20: {{}}
""") + """
tables:
  - {{id: main, rows: method, columns: setting, metric: test/acc, protocol: best,
     tuned_rows: {{mutexmatch: "MutexMatch (tuned)"}}}}
"""


# Four real launches, ~12 min on 2 cores: beyond CI's budget, so `make test-heavy` runs it; its fast twin on a synthetic
# store is tests/reports/test_settings_choice.py.
@pytest.mark.heavy
def test_a_set_tryout_changes_no_table_summary_or_status(tmp_path, data_root, run_cli, capsys):
    """Issue 26's try-out case through the real sweep: a later launch with --set (fewer steps, one fold) trains
    runs the report, the end-of-launch summary and the status of the plain YAML leave out, naming them in a line."""
    from orchestration.status import main as status_main
    from reports.build import build_report

    project = tmp_path / "p"
    project.mkdir()
    (project / "t.yaml").write_text(TRYOUT_SPEC.format(root=data_root, gpu=0))
    uri = f"sqlite:///{project / 'mlflow.db'}"
    first = run_cli(project, "t.yaml", "--set", "resources.gpu=0", timeout=900)  # resources: no setting
    assert first.returncode == 0, first.output
    before = build_report(project / "t.yaml", tracking_uri=uri, out_dir=tmp_path / "before", formats=["md"])
    assert before.ignored == [] and before.settings_note == ""
    tryout = ("base.train.iterations=4", "base.train.eval_interval=2", "folds=[0]")
    out = run_cli(project, "t.yaml", *[a for s in tryout for a in ("--set", s)], timeout=900)
    assert out.returncode == 0, out.output
    after = build_report(project / "t.yaml", tracking_uri=uri, out_dir=tmp_path / "after", formats=["md"])
    assert (tmp_path / "after" / "main.md").read_text() == (tmp_path / "before" / "main.md").read_text()
    # its 2 grid runs and its refit of fold 0 (its search runs are another study: the search section leaves them)
    assert len(after.ignored) == 3 and all("/fold0 (config " in x for x in after.ignored), after.ignored
    assert [s.search_hash for s in after.searches.studies] == [s.search_hash for s in before.searches.studies]
    mine = build_report(project / "t.yaml", tracking_uri=uri, out_dir=tmp_path / "tryout", formats=["md"],
                        overrides=tryout)
    assert len(mine.ignored) == 4 + 2
    assert (tmp_path / "tryout" / "main.md").read_text() != (tmp_path / "before" / "main.md").read_text()
    again = run_cli(project, "t.yaml", timeout=300)   # nothing to do: the summary leaves the try-out out
    assert "nothing to do" in again.output and "3 runs of other settings ignored: " in again.output, again.output
    capsys.readouterr()
    cwd = os.getcwd()
    try:
        os.chdir(project)
        assert status_main(["t.yaml"]) == 0
    finally:
        os.chdir(cwd)
    assert "**3 runs of other settings ignored: " in capsys.readouterr().out
