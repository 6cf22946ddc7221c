"""The MLflow layout contract (orchestration.contract): the wire format it pins, its builders, its light imports,
and the one tracking-URI rule that makes the sweep and the report resolve the same store."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from orchestration import contract as C
from orchestration.trial import tracking
from reports.runs import resolve_tracking_uri as report_uri

REPO = Path(__file__).resolve().parents[3]


def test_the_wire_format_is_the_documented_one():
    # Stores written by earlier versions use exactly these names (README, orchestration/README.md).
    assert (C.ROLE, C.KIND, C.CELL, C.FOLD, C.CONFIG_HASH, C.PARENT_RUN_ID) == (
        "mutexmatch.role", "mutexmatch.kind", "mutexmatch.cell", "mutexmatch.fold", "mutexmatch.config_hash",
        "mlflow.parentRunId")
    assert (C.ROLE_SWEEP, C.ROLE_TRIAL, C.KIND_GRID, C.KIND_SEARCH, C.KIND_SMOKE) == (
        "sweep", "trial", "grid", "search", "smoke")
    assert C.axis_tag("method") == "mutexmatch.axis.method"
    assert C.attempt_tag(2, "start_step") == "mutexmatch.attempt.2.start_step"
    assert C.overhead_tag("wall_s") == "mutexmatch.overhead.wall_s"
    assert C.class_counts_artifact(40) == "class_counts/step_00000040.json"
    assert C.CLASS_COUNTS_FILE.match("step_00000040.json").group(1) == "00000040"
    assert C.trials_filter("grid") == "tags.`mutexmatch.role` = 'trial' AND tags.`mutexmatch.kind` = 'grid'"


def test_cell_id_and_trial_key_builders():
    cell = C.cell_id([("method", "fixmatch"), ("setting", "c10-40")])
    assert cell == "method=fixmatch,setting=c10-40"
    assert C.trial_key(cell, 3) == "method=fixmatch,setting=c10-40/fold3" == C.trial_key(cell, "3")
    assert C.split_trial_key(C.trial_key(cell, 3)) == (cell, "3")
    assert C.split_trial_key("search method=x/fold1 (2/4 trials)") is None
    assert C.best_param_prefix(cell, 1) == "best.method-fixmatch.setting-c10-40.fold1."
    tags = C.trial_tags(parent_run_id="p", kind="grid", cell_levels=[("method", "fixmatch")], cell_id="method=fixmatch",
                        fold=2, variant="fixmatch", config_hash="h", commit="c", trial_id="t", launch_id="l")
    assert tags == {"mlflow.parentRunId": "p", "mutexmatch.role": "trial", "mutexmatch.kind": "grid",
                    "mutexmatch.cell": "method=fixmatch", "mutexmatch.fold": "2", "mutexmatch.variant": "fixmatch",
                    "mutexmatch.config_hash": "h", "mutexmatch.git_commit": "c", "mutexmatch.trial_id": "t",
                    "mutexmatch.launch_id": "l", "mutexmatch.axis.method": "fixmatch", "mutexmatch.group": "fixmatch"}


STORES = {  # a value of --tracking-uri or $MLFLOW_TRACKING_URI → the store, relative to the working directory
    "sqlite:///sub/m.db": "sqlite:///{cwd}/sub/m.db", "rel.db": "sqlite:///{cwd}/rel.db",
    "/abs/m.db": "sqlite:////abs/m.db", "sqlite:////abs/m.db": "sqlite:////abs/m.db",
    "http://mlflow:5000": "http://mlflow:5000"}


@pytest.mark.parametrize("env", [None, *STORES])
@pytest.mark.parametrize("given", [None, "given.db", "http://127.0.0.1:5000"])
def test_sweep_and_report_resolve_the_same_store(env, given, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    if env is None:
        monkeypatch.delenv(C.TRACKING_URI_ENV, raising=False)
    else:
        monkeypatch.setenv(C.TRACKING_URI_ENV, env)
    sweep = tracking.resolve_tracking_uri(given, Path.cwd())   # as run_sweep does (the project is the cwd)
    assert sweep == report_uri(given)                          # as reports.build does
    cwd = tmp_path.resolve()
    expected = ({**STORES, "given.db": "sqlite:///{cwd}/given.db"}.get(given, given) if given is not None  # flag wins
                else STORES[env] if env is not None else "sqlite:///{cwd}/mlflow.db")
    assert sweep == expected.format(cwd=cwd)


def test_the_sweep_refuses_a_file_store_wherever_it_comes_from(tmp_path, monkeypatch):
    monkeypatch.setenv(C.TRACKING_URI_ENV, "./mlruns")
    with pytest.raises(ValueError, match=r"\$MLFLOW_TRACKING_URI='./mlruns': use sqlite"):
        tracking.resolve_tracking_uri(None, tmp_path)
    assert report_uri(None) == "./mlruns"   # a reader passes it to MLflow, which explains its own refusal


def test_the_contract_imports_only_the_standard_library():
    """Besides the standard library, only the trainer's metric names (mutexmatch.metrics, itself standard library
    only): reports import the contract without torch, ray or mlflow."""
    code = ("import sys\nbefore = set(sys.modules)\nimport orchestration.contract\n"
            "new = set(sys.modules) - before\n"
            "bad = sorted(m for m in new if m.split('.')[0] not in sys.stdlib_module_names\n"
            "             and m.split('.')[0] != 'orchestration' and m not in ('mutexmatch', 'mutexmatch.metrics'))\n"
            "assert not bad, bad\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_the_layout_schema_and_file_helpers_add_only_pydantic_yaml_and_the_declared_trainer_modules():
    """What the sweep and the report share beyond names: no torch, ray, mlflow or optuna, and of the trainer only
    the modules the contract declares (``TRAINER_MODULES``), whose one copy the trainer keeps."""
    code = ("import sys\nbefore = set(sys.modules)\n"
            "import orchestration.contract.layout, orchestration.contract.fileio\n"
            "from orchestration.contract import TRAINER_MODULES\n"
            "new = set(sys.modules) - before\n"
            "heavy = {'torch', 'torchvision', 'numpy', 'PIL', 'ray', 'mlflow', 'optuna', 'pandas', 'matplotlib'}\n"
            "bad = sorted(m for m in new if m.split('.')[0] in heavy\n"
            "             or m.startswith('mutexmatch.') and m not in TRAINER_MODULES)\n"
            "assert not bad, bad\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_ui_names_and_description():
    from datetime import datetime

    levels = (("method", "mutexmatch"), ("setting", "cifar10-40"))
    assert C.trial_run_name(levels, 3) == "mutexmatch · cifar10-40 · fold 3"
    assert C.trial_run_name(levels, 0, C.KIND_SEARCH) == "mutexmatch · cifar10-40 · fold 0 · search"
    assert C.trial_run_name(C.tuned_levels(levels), 1, C.KIND_REFIT) == "mutexmatch · cifar10-40 · fold 1 · refit"
    assert C.parent_run_name("table1_cifar_svhn", datetime(2026, 11, 26, 7, 57, 3)) == \
        "sweep table1_cifar_svhn · 2026-11-26 07:57"
    tags = C.parent_display_tags("  Table 1 with the paper's loss form.\n", ["resources.gpu=1"])
    assert tags == {"mlflow.note.content": "Table 1 with the paper's loss form.",
                    "mutexmatch.overrides": '["resources.gpu=1"]'}


def test_accuracies_in_percent_and_one_colour_per_method():
    assert C.with_percent({C.TEST_ACC: 0.9122749, C.TRAIN_LOSS: 0.5}) == {
        C.TEST_ACC: 0.9122749, C.TRAIN_LOSS: 0.5, "test/acc_pct": 91.2275}  # averaged per cell to the tables' 91.23
    assert C.color_axis(["setting", "backbone", "method"], [{"rows": "method", "columns": "setting"}]) == "method"
    assert C.color_axis(["k", "setting"]) == "k"
    levels = ["supervised", "fixmatch", "mutexmatch"]
    colors = [C.run_color([("method", m), ("setting", "s")], "method", levels) for m in levels]
    tuned = C.run_color(C.tuned_levels([("method", "mutexmatch")]), "method", levels)
    assert len({*colors, tuned}) == 4 and all(c.startswith("#") for c in colors)
    assert C.run_color([("method", "other")], "method", levels) is None
    tags = C.trial_tags(parent_run_id="p", kind=C.KIND_GRID, cell_levels=[("method", "fixmatch")], cell_id="c",
                        fold=0, variant="fixmatch", config_hash="h", commit="abc", trial_id="t", launch_id="L",
                        source="experiments/quickstart.yaml", color=colors[1])
    assert (tags[C.RUN_COLOR], tags[C.SOURCE_NAME], tags[C.SOURCE_GIT_COMMIT]) == (
        colors[1], "experiments/quickstart.yaml", "abc")


def test_artifact_downloads_go_through_the_servers_proxy_even_when_it_offers_presigned_urls(monkeypatch):
    """An S3-backed `mlflow server` advertises multipart downloads; MLflow's client would then fetch artifacts by
    presigned URLs naming the store as the server reaches it (unreachable from a workstation). With the project's
    setting the client keeps to the proxy; a user's own setting wins."""
    from mlflow.store.artifact.mlflow_artifacts_repo import MlflowArtifactsRepository
    from mlflow.store.artifact import mlflow_artifacts_repo as repo_module

    capabilities = {repo_module.SERVER_INFO_MULTIPART_DOWNLOADS_ENABLED: True}
    monkeypatch.setattr(MlflowArtifactsRepository, "_fetch_server_capabilities", lambda self: capabilities)
    repo = MlflowArtifactsRepository("mlflow-artifacts:/1/run/artifacts", tracking_uri="http://127.0.0.1:5000")
    for key in C.PROXY_ARTIFACTS_ENV:
        monkeypatch.delenv(key, raising=False)
    assert repo._is_multipart_download_enabled()  # MLflow's default: straight to the store
    C.prefer_artifact_proxy()
    assert not repo._is_multipart_download_enabled()
    monkeypatch.setenv("MLFLOW_ENABLE_PROXY_MULTIPART_DOWNLOAD", "true")
    C.prefer_artifact_proxy()
    assert repo._is_multipart_download_enabled()
