"""Sweep YAML validation: every problem is reported before anything starts, naming the field, the value and what is
allowed; the embedded quickstart YAML itself is valid."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from orchestration.spec.models import SpecError
from orchestration.spec.sweepfile import expand_cells, load_spec, parse_spec, search_cells, spec_hash, trial_config

REPO = Path(__file__).resolve().parents[2]

BASE = yaml.safe_load("""
name: unit
base:
  data: {dataset: digits, num_labels: 20}
  train: {iterations: 40, eval_interval: 10, batch_size: 4, mu: 2}
folds: [0, 1]
axes:
  method:
    supervised: {algorithm: {name: supervised}}
    fixmatch: {algorithm: {name: fixmatch}}
    mutexmatch: {algorithm: {name: mutexmatch}}
  labels:
    l20: {data: {num_labels: 20}}
    l40: {data: {num_labels: 40}}
search:
  cells: [{method: mutexmatch}]
  metric: val/best_acc
  n_trials: 4
  base: {data: {val_per_class: 5}}
  space:
    algorithm.tau: {type: float, low: 0.7, high: 0.99}
    algorithm.k: {type: int, low: 1, high: 10}
  scheduler: {type: asha, grace_period: 2, reduction_factor: 2}
tables: [{anything: goes, here: [1, 2]}]
""")


def _set(path: str, value):
    def edit(raw: dict) -> None:
        *parents, leaf = path.split("/")
        node = raw
        for p in parents:
            node = node[int(p)] if isinstance(node, list) else node[p]
        node[leaf] = value
    return edit


def _drop(path: str):
    def edit(raw: dict) -> None:
        *parents, leaf = path.split("/")
        node = raw
        for p in parents:
            node = node[p]
        del node[leaf]
    return edit


# (edit of the valid spec, substrings the error must contain)
CASES = [
    (_set("bogus", 1), ["bogus: unknown key; allowed keys: name, description, base"]),
    (_drop("name"), ["name: required field is missing"]),
    (_set("name", "has space"), ["name='has space': must start with an ASCII letter or digit"]),
    (_set("folds", []), ["folds=[]: needs at least one fold"]),
    (_set("folds", [0, 0]), ["folds=[0, 0]: folds must be distinct"]),
    (_set("folds", [0, 5]), ["cell method=supervised,labels=l20 fold 5: data.fold=5: the `official` split rule"]),
    (_set("folds", ["0"]), ["folds.0='0': Input should be a valid integer"]),
    (_set("axes", {}), ["axes={}: needs at least one axis"]),
    (_set("axes/method/fixmatch", {"algorithm": {"name": "fixmatch", "tau": 1.5}}),
     ["cell method=fixmatch,labels=l20 all folds: algorithm.tau=1.5: must be in (0, 1]"]),
    (_set("axes/method/fixmatch", {"algorithm": {"name": "fixmatch", "k": 3}}),
     ["algorithm.k=3: not used by algorithm 'fixmatch'"]),
    (_set("axes/labels/l40", {"data": {"num_labels": 45}}),
     ["data.num_labels=45: must be divisible by the 10 classes of digits"]),
    (_set("base/output_dir", "x"), ["base.output_dir='x': set per trial by orchestration"]),
    (_set("axes/method/supervised", {"algorithm": {"name": "supervised"}, "data": {"fold": 1}}),
     ["axes.method.supervised.data.fold=1: set per trial by orchestration from `folds`"]),
    (_set("base/train", {"iterations": 40, "eval_interval": 10, "device": "cuda"}),
     ["base.train.device='cuda': set per trial by orchestration from `resources.gpu`"]),
    (_set("exclude", [{"method": "bogus"}]), ["exclude[0].method='bogus': unknown level; levels of method: "
                                              "supervised, fixmatch, mutexmatch"]),
    (_set("exclude", [{"size": "big"}]), ["exclude[0].size='big': unknown axis; axes: method, labels"]),
    (_set("exclude", [{}]), ["excludes every cell"]),
    (_set("resources", {"gpu": -1}), ["resources.gpu=-1: must be >= 0"]),
    (_set("resources", {"gpu": 1.5}), ["resources.gpu=1.5: must be a fraction in [0, 1] or a whole number"]),
    (_set("resources", {"cpu": 0}), ["resources.cpu=0: must be > 0"]),
    (_set("resources", {"tpu": 1}), ["resources.tpu: unknown key; allowed keys: cpu, gpu"]),
    (_set("search/metric", "test/acc"), ["search.metric='test/acc': must be a validation metric: val/acc or "
                                         "val/best_acc"]),
    (_set("search/cells", [{"method": "nope"}]), ["search.cells[0].method='nope': unknown level"]),
    (_set("search/cells", [{"method": "supervised"}]),
     ["search cell method=supervised,labels=l20 fold 0: search.space.algorithm.tau.low=0.7: algorithm.tau=0.7: "
      "not used by algorithm 'supervised'"]),
    (_set("search/space/algorithm.k", {"type": "int", "low": 1, "high": 12}),
     ["search.space.algorithm.k.high=12: algorithm.k=12: must be in [1, 10] (the number of classes)"]),
    (_set("search/space/algorithm.k", {"type": "float", "low": 0.5, "high": 1.5}),
     ["search.space.algorithm.k.high=1.5: a float k is a fraction of C and must be in (0, 1]"]),
    (_set("search/space/algorithm.tau", {"type": "float", "low": 0.9, "high": 0.8}),
     ["search.space.algorithm.tau=", "low=0.9, high=0.8: need low < high"]),
    (_set("search/space/algorithm.tau", {"type": "float", "low": 0.0, "high": 0.8, "log": True}),
     ["low=0: must be > 0 when log is true"]),
    (_set("search/space/algorithm.tau", {"type": "gauss"}), ["search.space.algorithm.tau=", "does not match any "
                                                             "of the expected tags: 'float', 'int', 'categorical'"]),
    (_set("search/space/algorithm.tau", {"type": "float", "low": 0.7, "high": 0.9, "q": 0.1}),
     ["search.space.algorithm.tau.q: unknown key; allowed keys: type, low, high, log"]),
    (_set("search/space/algorithm.tua", {"type": "float", "low": 0.7, "high": 0.9}),
     ["search.space.algorithm.tua: not a searchable dotted RunConfig path; did you mean algorithm.tau"]),
    (_set("search/space/data.fold", {"type": "int", "low": 0, "high": 4}),
     ["search.space.data.fold: not a searchable dotted RunConfig path (set by orchestration)"]),
    # does not change results (left out of the config hash): every sampled value would re-run the same trial
    (_set("search/space/train.keep_freed_memory", {"type": "categorical", "choices": [True, False]}),
     ["search.space.train.keep_freed_memory: not a searchable dotted RunConfig path (does not change results)"]),
    (_set("search/space/algorithm.form", {"type": "categorical", "choices": ["paper", "paper"]}),
     ["choices must be distinct"]),
    (_set("search/space/algorithm.form", {"type": "categorical", "choices": ["paper", "nope"]}),
     ["search.space.algorithm.form.choices[1]='nope': algorithm.form='nope'"]),
    (_drop("search/base"), ["data.val_per_class=0: search.metric='val/best_acc' needs a validation split"]),
    (_set("search/scheduler", {"type": "asha", "grace_period": 5}),
     ["search.scheduler.grace_period=5: must be <= the 4 evaluations of a search trial"]),
    (_set("search/scheduler", {"type": "hyperband"}), ["search.scheduler.type='hyperband'"]),
    (_set("search/n_trials", 0), ["search.n_trials=0: must be >= 1"]),
]


@pytest.mark.parametrize("edit, expected", CASES, ids=[", ".join(e)[:60] for _, e in CASES])
def test_invalid_spec_names_field_value_and_rule(edit, expected, tmp_path):
    raw = copy.deepcopy(BASE)
    edit(raw)
    with pytest.raises(SpecError) as info:
        parse_spec(raw, tmp_path)
    msg = str(info.value)
    for part in expected:
        assert part in msg, f"{part!r} not in:\n{msg}"


def test_all_problems_are_reported_at_once(tmp_path):
    raw = copy.deepcopy(BASE)
    raw["bogus"] = 1
    raw["resources"] = {"gpu": -1}
    with pytest.raises(SpecError) as info:
        parse_spec(raw, tmp_path)
    assert len(str(info.value).splitlines()) == 2


def test_valid_spec_cells_configs_and_hash(tmp_path):
    spec = parse_spec(copy.deepcopy(BASE), tmp_path)
    cells = expand_cells(spec)
    assert [c.id for c in cells][:3] == ["method=supervised,labels=l20", "method=supervised,labels=l40",
                                         "method=fixmatch,labels=l20"]
    assert len(cells) == 6
    assert [c.id for c in search_cells(spec)] == ["method=mutexmatch,labels=l20", "method=mutexmatch,labels=l40"]
    raw = trial_config(spec, cells[1], 1, project_dir=tmp_path, search=True)
    assert raw["data"] == {"dataset": "digits", "num_labels": 40, "val_per_class": 5, "fold": 1,
                           "root": str(tmp_path / "data")}
    assert raw["algorithm"] == {"name": "supervised"} and raw["train"]["progress"] is False
    # the report sections and the description do not change what runs
    other = copy.deepcopy(BASE)
    other["tables"] = []
    other["description"] = "changed"
    assert spec_hash(parse_spec(other, tmp_path)) == spec_hash(spec)
    other["folds"] = [0]
    assert spec_hash(parse_spec(other, tmp_path)) != spec_hash(spec)


def test_each_fold_trains_with_its_own_seed_unless_disabled(tmp_path):
    raw = copy.deepcopy(BASE)
    raw["base"]["train"]["seed"] = 7
    spec = parse_spec(raw, tmp_path)
    cell = expand_cells(spec)[0]
    assert [trial_config(spec, cell, f, project_dir=tmp_path)["train"]["seed"] for f in (0, 1)] == [7, 8]
    assert trial_config(parse_spec(copy.deepcopy(BASE), tmp_path), cell, 1, project_dir=tmp_path)["train"]["seed"] == 1
    raw["seed_per_fold"] = False
    spec = parse_spec(raw, tmp_path)
    assert [trial_config(spec, cell, f, project_dir=tmp_path)["train"]["seed"] for f in (0, 1)] == [7, 7]


def test_quickstart_yaml_is_valid():
    spec = load_spec(REPO / "experiments" / "quickstart.yaml", REPO)
    assert spec.name == "quickstart"
    assert [c.id for c in expand_cells(spec)] == ["method=supervised,setting=digits-20",
                                                  "method=fixmatch,setting=digits-20",
                                                  "method=mutexmatch,setting=digits-20"]
    assert spec.search is not None and set(spec.search.space) == {"algorithm.tau", "algorithm.k"}


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(SpecError, match="file not found"):
        load_spec(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed")
    with pytest.raises(SpecError, match="not valid YAML"):
        load_spec(bad)
    bad.write_text("- a list")
    with pytest.raises(SpecError, match="top level is a list, expected a sweep YAML mapping"):
        load_spec(bad)


@pytest.mark.parametrize("edit, expected", [
    (_set("base/train/seed", 2**32 - 1),
     "every cell: train.seed=4294967295: fold 1 trains with train.seed + 1 = 4294967296 (seed_per_fold), above the "
     "largest seed 4294967295; use train.seed <= 4294967294"),
    (_set("search/folds", [3]), None),  # a search fold beyond the grid's: only the searched cells' seed is checked
    (_set("search/base", {"data": {"val_per_class": 200}}),
     "search cell method=mutexmatch,labels=l20 fold 0: data.val_per_class=200: the smallest class of digits has 126 "
     "train images and 2 of each class are labeled (data.num_labels=20); at most 124"),
    (_set("search/cells", []), "search.cells=[]: needs at least one partial cell"),
])
def test_seed_plus_fold_class_sizes_and_empty_search_are_refused_at_launch(edit, expected, tmp_path):
    raw = copy.deepcopy(BASE)
    edit(raw)
    if expected is None:
        raw["base"]["train"]["seed"] = 2**32 - 3  # grid folds 0-1 fit, search fold 3 does not
        with pytest.raises(SpecError) as info:
            parse_spec(raw, tmp_path)
        assert str(info.value).splitlines() == [
            "search cell method=mutexmatch,labels=l20, search cell method=mutexmatch,labels=l40: "
            "train.seed=4294967293: fold 3 trains with train.seed + 3 = 4294967296 (seed_per_fold), above the largest "
            "seed 4294967295; use train.seed <= 4294967292"]
        return
    with pytest.raises(SpecError) as info:
        parse_spec(raw, tmp_path)
    assert any(line.startswith(expected) for line in str(info.value).splitlines()), str(info.value)


def test_a_refit_fold_beyond_the_grid_is_checked_for_its_seed(tmp_path):
    raw = copy.deepcopy(BASE)
    raw["base"]["train"]["seed"] = 2**32 - 3  # grid folds 0-1 and search fold 0 fit, refit fold 4 does not
    raw["search"]["refit"] = {"folds": [4]}
    with pytest.raises(SpecError) as info:
        parse_spec(raw, tmp_path)
    assert str(info.value).splitlines() == [
        "refit cell method=mutexmatch,labels=l20, refit cell method=mutexmatch,labels=l40: train.seed=4294967293: "
        "fold 4 trains with train.seed + 4 = 4294967297 (seed_per_fold), above the largest seed 4294967295; use "
        "train.seed <= 4294967291"]


def test_without_seed_per_fold_the_largest_seed_is_fine(tmp_path):
    raw = copy.deepcopy(BASE)
    raw["base"]["train"]["seed"] = 2**32 - 1
    raw["seed_per_fold"] = False
    assert parse_spec(raw, tmp_path).base["train"]["seed"] == 2**32 - 1


@pytest.mark.parametrize("text, expected", [
    ("name: x\naxes:\n  method:\n    fixmatch: {algorithm: {name: fixmatch}}\n    fixmatch: {algorithm: {name: "
     "mutexmatch}}\n", "duplicate key 'fixmatch' (first at line 4, again at line 5)"),
    ("name: x\naxes:\n  method: {a: {}}\naxes:\n  labels: {b: {}}\n", "duplicate key 'axes' (first at line 2, again "
     "at line 4)"),
    ("data: {dataset: digits}\ntrain: {iterations: 10}\n", "is a run config (sections data, train), not a sweep "
     "YAML; train it with `python -m mutexmatch.train --config "),
    ("", "is empty, expected a sweep YAML mapping"),
])
def test_duplicate_keys_and_a_run_config_are_refused_by_the_loader(text, expected, tmp_path):
    path = tmp_path / "sweep.yaml"
    path.write_text(text)
    with pytest.raises(SpecError) as info:
        load_spec(path, tmp_path)
    assert expected in str(info.value) and "\n" not in str(info.value)
