"""Plan expansion: cells × folds minus exclude, smoke trials, search studies, refits, and --set overrides."""

from __future__ import annotations

import copy

import pytest
import yaml

from orchestration.spec.plan import build_plan
from orchestration.spec.sweepfile import parse_spec

SPEC = yaml.safe_load("""
name: plan
base:
  data: {dataset: digits, num_labels: 20}
  train: {iterations: 40, eval_interval: 10, batch_size: 4, mu: 2}
folds: [0, 2, 4]
axes:
  method:
    supervised: {algorithm: {name: supervised}}
    fixmatch: {algorithm: {name: fixmatch}}
  labels:
    l20: {}
    l40: {data: {num_labels: 40}, train: {iterations: 60}}
exclude: [{method: supervised, labels: l40}]
smoke: {train: {iterations: 2, eval_interval: 1}}
search:
  cells: [{method: fixmatch}]
  folds: [1, 3]
  metric: val/acc
  n_trials: 3
  max_concurrent: 2
  base: {data: {val_per_class: 5}, train: {iterations: 30}}
  space:
    algorithm.tau: {type: float, low: 0.7, high: 0.99}
""")


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    return parse_spec(SPEC, tmp_path_factory.mktemp("proj"))


def test_grid_is_cells_times_folds_minus_exclude(spec, tmp_path):
    plan = build_plan(spec, tmp_path)
    keys = [t.key for t in plan.grid]
    assert keys == [f"{c}/fold{f}" for c in ("method=supervised,labels=l20", "method=fixmatch,labels=l20",
                                              "method=fixmatch,labels=l40") for f in (0, 2, 4)]
    assert all(t.kind == "grid" for t in plan.grid)
    l40 = [t for t in plan.grid if t.cell.as_dict()["labels"] == "l40"]
    assert {t.iterations for t in l40} == {60} and {t.evaluations for t in l40} == {6}
    assert {t.config["data"]["num_labels"] for t in l40} == {40}
    assert [t.config["data"]["fold"] for t in l40] == [0, 2, 4]
    # same cell, different folds → different config hashes; the hash ignores the (absolute) data root
    assert len({t.config_hash for t in plan.grid}) == len(plan.grid)
    assert build_plan(spec, tmp_path / "elsewhere").grid[0].config_hash == plan.grid[0].config_hash


def test_search_studies_per_searched_cell_and_search_fold(spec, tmp_path):
    plan = build_plan(spec, tmp_path)
    assert [(s.key, s.phase) for s in plan.searches] == [
        ("method=fixmatch,labels=l20/fold1", "search00"), ("method=fixmatch,labels=l20/fold3", "search01"),
        ("method=fixmatch,labels=l40/fold1", "search02"), ("method=fixmatch,labels=l40/fold3", "search03")]
    s = plan.searches[0]
    assert (s.n_trials, s.max_concurrent, s.iterations, s.evaluations) == (3, 2, 30, 3)
    assert s.config["data"]["val_per_class"] == 5
    assert len(plan.refits) == 2 * 3  # each searched cell refit on the sweep's 3 folds
    assert plan.num_trials == 9 + 4 * 3 + 2 * 3
    over = build_plan(spec, tmp_path, n_trials=5, max_concurrent=1)
    assert {(x.n_trials, x.max_concurrent) for x in over.searches} == {(5, 1)}
    assert over.searches[0].search_hash != s.search_hash  # more trials = another search (not skipped as done)
    with pytest.raises(ValueError, match="--n-trials=0: must be >= 1"):
        build_plan(spec, tmp_path, n_trials=0)


def test_smoke_runs_every_cell_on_the_first_fold_without_search(spec, tmp_path):
    plan = build_plan(spec, tmp_path, smoke=True)
    assert [t.key for t in plan.grid] == ["method=supervised,labels=l20/fold0", "method=fixmatch,labels=l20/fold0",
                                          "method=fixmatch,labels=l40/fold0"]
    assert {(t.kind, t.iterations, t.evaluations) for t in plan.grid} == {("smoke", 2, 2)}
    assert plan.searches == []


# ------------------------------------------------------------------------------------------------ --set overrides
def _write(tmp_path, raw, name="sweep.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(raw, sort_keys=False))  # YAML order: the axes' order makes the cell ids
    return path


def test_set_gives_exactly_the_trials_of_the_same_yaml_edit(tmp_path):
    from orchestration.spec.overrides import load_sweep, plan_sweep

    (tmp_path / "mnt").mkdir()
    original = _write(tmp_path, SPEC)
    edited = copy.deepcopy(SPEC)
    edited["base"]["data"]["root"] = str(tmp_path / "mnt")
    edited["base"]["train"]["iterations"] = 50
    edited["search"]["space"]["algorithm.tau"]["low"] = 0.8
    sets = [f"base.data.root={tmp_path / 'mnt'}", "base.train.iterations=50", "search.space.algorithm.tau.low=0.8"]
    by_set = plan_sweep(load_sweep(original, tmp_path, sets), tmp_path)
    by_edit = plan_sweep(load_sweep(_write(tmp_path, edited, "edited.yaml"), tmp_path), tmp_path)
    unchanged = plan_sweep(load_sweep(original, tmp_path), tmp_path)
    assert by_set.spec_hash == by_edit.spec_hash != unchanged.spec_hash
    assert [(t.key, t.config_hash, t.config) for t in by_set.grid] == \
        [(t.key, t.config_hash, t.config) for t in by_edit.grid]
    assert [s.search_hash for s in by_set.searches] == [s.search_hash for s in by_edit.searches]
    assert by_set.grid[0].config["data"]["root"] == str(tmp_path / "mnt")
    # as in an edit, the l40 level's own iterations win over base's: only the l20 trials change
    changed = [a.key for a, b in zip(by_set.grid, unchanged.grid) if a.config_hash != b.config_hash]
    assert changed == [t.key for t in unchanged.grid if "l20" in t.key]


@pytest.mark.parametrize("item, message", [
    ("base.algorithm.tau=1.5", "algorithm.tau=1.5: must be in (0, 1] (from --set base.algorithm.tau=1.5)"),
    ("resources.gpu=-1", "(from --set resources.gpu=-1)"),
    ("name.x=1", "--set 'name.x=1': name='plan' is not a mapping, so it has no key 'x'"),
    ("base.train.iterations", "--set 'base.train.iterations': expected key=value"),
    ("base.train.iterations=[1", "--set 'base.train.iterations=[1': the value is not valid YAML"),
])
def test_set_errors_name_the_override(tmp_path, item, message):
    from orchestration.spec.overrides import load_sweep
    from orchestration.spec.models import SpecError

    with pytest.raises(SpecError) as err:
        load_sweep(_write(tmp_path, SPEC), tmp_path, [item])
    assert message in str(err.value)


def test_planning_without_data_reports_the_missing_folder_and_keeps_hashes(tmp_path):
    from orchestration.spec.overrides import load_sweep, plan_sweep
    from orchestration.spec.models import SpecError

    raw = copy.deepcopy(SPEC)
    raw["base"]["data"].update(dataset="cifar10", num_labels=40)
    path = _write(tmp_path, raw)
    with pytest.raises(SpecError, match="folder does not exist"):
        load_sweep(path, tmp_path)
    loaded = load_sweep(path, tmp_path, need_data=False)
    assert loaded.missing_roots == [str(tmp_path / "data")]
    planned = plan_sweep(loaded, tmp_path)
    (tmp_path / "data").mkdir()
    real = plan_sweep(load_sweep(path, tmp_path), tmp_path)
    assert planned.spec_hash == real.spec_hash
    assert [t.config_hash for t in planned.grid] == [t.config_hash for t in real.grid]
    raw["base"]["algorithm"] = {"tau": 2}  # any other problem is still an error
    with pytest.raises(SpecError, match="algorithm.tau=2"):
        load_sweep(_write(tmp_path, raw), tmp_path, need_data=False)


def test_planning_without_data_reads_a_typed_fact_not_the_message_wording(tmp_path, monkeypatch):
    """Issue 29: the missing folders come from ``missing_data_root``, so rewording the error line changes nothing."""
    import mutexmatch.data.section as section
    from orchestration.spec.overrides import load_sweep

    facts = section.data_section_facts

    def reworded(d):
        num_classes, image_size, errors = facts(d)
        return num_classes, image_size, [e.replace("folder does not exist", "no such directory") for e in errors]

    monkeypatch.setattr(section, "data_section_facts", reworded)
    raw = copy.deepcopy(SPEC)
    raw["base"]["data"].update(dataset="cifar10", num_labels=40)
    loaded = load_sweep(_write(tmp_path, raw), tmp_path, need_data=False)
    assert loaded.missing_roots == [str(tmp_path / "data")]


def test_a_missing_folder_with_another_problem_carries_no_roots(tmp_path):
    from orchestration.spec.models import SpecError

    raw = copy.deepcopy(SPEC)
    raw["base"]["data"].update(dataset="cifar10", num_labels=40)
    with pytest.raises(SpecError) as only_folder:
        parse_spec(raw, tmp_path)
    assert only_folder.value.missing_roots == (str(tmp_path / "data"),)
    raw["base"]["data"]["num_labels"] = 41  # a line of the same data check, beside the folder's
    with pytest.raises(SpecError) as both:
        parse_spec(raw, tmp_path)
    assert "folder does not exist" in str(both.value) and "num_labels=41" in str(both.value)
    assert both.value.missing_roots == ()
