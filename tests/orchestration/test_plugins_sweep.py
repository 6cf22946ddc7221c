"""A sweep of one's own method (issue 44 item 1): the worked example's plugin folder (docs/plugin_example/my_methods:
an algorithm, a dataset and a backbone), copied outside the project, named by a sweep YAML's ``plugins:``.

The cheap tests take the sweep's own path without Ray: the plan (trial configs naming the plugin, the settings
digest of the YAML as written, which the report looks up), the runtime environment that ships the plugin, the
trainable's config of a trial trained for a few steps, and the one line a relaunch says when the plugin code
changed. ``test_a_plugin_sweep_through_local_ray`` (heavy: four launches on a local Ray, minutes) is the
acceptance test: trained, reported, retrained after a change, and installed with an entry point."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow import MlflowClient

from orchestration import contract as C
from orchestration.launch.cluster import plugin_runtime_env
from orchestration.launch.launch import plugin_code_line
from orchestration.spec.overrides import load_sweep, plan_sweep
from orchestration.spec.sweepfile import read_spec_file
from orchestration.store.store import Store
from orchestration.trial import trainable

SWEEP = """
name: my-methods
{plugins}
base:
  data: {{dataset: mydigits, num_labels: 20, root: {root}}}
  model: {{backbone: tiny_cnn}}
  train: {{iterations: 4, eval_interval: 2, batch_size: 4, mu: 2, num_threads: 1, eval_batch_size: 512}}
folds: [0]
axes:
  method:
    myfixmatch: {{algorithm: {{name: myfixmatch}}}}
  setting:
    mydigits-tiny_cnn: {{}}
resources: {{cpu: 1, gpu: 0}}
tables:
  - id: main
    caption: "accuracy"
    rows: method
    columns: setting
    metric: test/acc
    protocol: best
"""


def _project(tmp_path: Path, example: Path, data: Path, plugins: str = "plugins: [../my_methods]") -> Path:
    """A user's repository outside this one: ``my_methods/`` and ``sweeps/mine.yaml`` naming it relatively."""
    shutil.copytree(example / "my_methods", tmp_path / "my_methods", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "sweeps").mkdir()
    (tmp_path / "sweeps" / "mine.yaml").write_text(SWEEP.format(plugins=plugins, root=data))
    return tmp_path / "sweeps" / "mine.yaml"


def test_a_plugin_sweep_plans_ships_and_trains_without_ray(tmp_path, plugin_sandbox):
    example, _ = plugin_sandbox
    yaml = _project(tmp_path, example, tmp_path / "data")
    plan = plan_sweep(load_sweep(yaml, tmp_path), tmp_path)
    [trial] = plan.grid
    assert trial.config["plugins"] == [str(tmp_path / "my_methods")]
    assert plan.settings_digest == C.settings_digest(read_spec_file(yaml))   # the YAML as the report reads it
    assert plugin_runtime_env() == {"py_modules": [str(tmp_path / "my_methods")],
                                    "env_vars": {"MUTEXMATCH_PLUGINS": "my_methods"}}

    from mutexmatch.config import config_hash
    from mutexmatch.training import Trainer

    cfg = trainable.trial_config(trial.config, tmp_path / "run", device="cpu", threads=1, trial_id="t1")
    assert config_hash(cfg) == trial.config_hash
    summary = Trainer(cfg).fit()
    assert summary.step == 4 and 0.0 <= summary.metrics["test/acc"] <= 1.0


def test_a_relaunch_says_which_trials_the_changed_plugin_code_trains_again(tmp_path, plugin_sandbox):
    example, forget = plugin_sandbox
    yaml = _project(tmp_path, example, tmp_path / "data")
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    store = Store(client, client.create_experiment("my-methods", artifact_location=(tmp_path / "a").as_uri()))
    old = plan_sweep(load_sweep(yaml, tmp_path), tmp_path)
    [trial] = old.grid
    assert plugin_code_line(old, store, [trial.key]) == ""   # nothing trained yet
    old_code = C.plugin_code_value({"my_methods": _digest(tmp_path)})
    run = client.create_run(store.experiment_id, tags={
        C.ROLE: C.ROLE_TRIAL, C.KIND: C.KIND_GRID, C.CELL: trial.cell.id, C.FOLD: "0",
        C.CONFIG_HASH: trial.config_hash, C.PLUGIN_CODE: old_code}, start_time=int(time.time() * 1000))
    client.set_terminated(run.info.run_id)

    with (tmp_path / "my_methods" / "methods.py").open("a") as f:
        f.write("\n# the method changed\n")
    forget()
    new = plan_sweep(load_sweep(yaml, tmp_path), tmp_path)
    assert new.grid[0].config_hash != trial.config_hash   # no reuse of the old run: another config hash
    line = plugin_code_line(new, store, [new.grid[0].key])
    assert line == (f"1 trial(s) trained again: their FINISHED runs were trained by other plugin code ({old_code} → "
                    f"my_methods={_digest(tmp_path)}); a run is reused only by the plugin code that trained it")


def _digest(tmp_path: Path) -> str:
    from mutexmatch.plugins import source_digest

    return source_digest(tmp_path / "my_methods")


def _cli(project: Path, env: dict[str, str], *args: str, module: str = "orchestration.sweep") -> str:
    proc = subprocess.run([sys.executable, "-m", module, *args], cwd=project, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:]
    return proc.stdout


@pytest.mark.heavy  # heavy: four launches on a local Ray (324-575 s on 2 loaded cores); the tests above cover
def test_a_plugin_sweep_through_local_ray(tmp_path, sweep_env, data_root):  # its path without Ray in CI
    example = Path(__file__).resolve().parents[2] / "docs" / "plugin_example"
    yaml = _project(tmp_path, example, data_root)
    first = _cli(tmp_path, sweep_env, str(yaml))
    assert "done at step 4: method=myfixmatch,setting=mydigits-tiny_cnn/fold0" in first, first
    _cli(tmp_path, sweep_env, str(yaml), "--out", str(tmp_path / "report"), "--format", "md",
         module="reports.build")
    table = (tmp_path / "report" / "main.md").read_text()
    assert "| Method | mydigits-tiny_cnn |" in table and re.search(r"\| myfixmatch \| \**\d+\.\d\d", table), table
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    [run] = client.search_runs([client.get_experiment_by_name("my-methods").experiment_id],
                               f"tags.`{C.ROLE}` = '{C.ROLE_TRIAL}'")
    assert run.data.tags[C.VARIANT] == "myfixmatch"
    assert run.data.tags[C.PLUGIN_CODE] == f"my_methods={_digest(tmp_path)}"

    assert "nothing to do" in _cli(tmp_path, sweep_env, str(yaml))   # the same code: nothing trained again
    with (tmp_path / "my_methods" / "methods.py").open("a") as f:
        f.write("\n# the method changed\n")
    second = _cli(tmp_path, sweep_env, str(yaml))
    assert "1 trial(s) trained again: their FINISHED runs were trained by other plugin code" in second, second
    assert "done at step 4: method=myfixmatch" in second, second

    # the same plugin installed as a package with an entry point: no `plugins:` in the YAML
    installed = tmp_path / "installed"
    installed.mkdir()
    site = tmp_path / "site"
    shutil.copytree(tmp_path / "my_methods", site / "my_methods", ignore=shutil.ignore_patterns("__pycache__"))
    (site / "my_methods-0.1.dist-info").mkdir()
    (site / "my_methods-0.1.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: my-methods\n"
                                                                  "Version: 0.1\n")
    (site / "my_methods-0.1.dist-info" / "entry_points.txt").write_text("[mutexmatch.plugins]\n"
                                                                          "my_methods = my_methods\n")
    (installed / "mine.yaml").write_text(SWEEP.format(plugins="", root=data_root))
    env = {**sweep_env, "PYTHONPATH": os.pathsep.join([str(site), sweep_env["PYTHONPATH"]])}
    third = _cli(installed, env, "mine.yaml")
    assert "done at step 4: method=myfixmatch,setting=mydigits-tiny_cnn/fold0" in third, third
