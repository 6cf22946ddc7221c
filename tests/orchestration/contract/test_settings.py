"""``--set`` on a sweep YAML (orchestration.contract.settings; the sweep, status and report read it alike)."""

from __future__ import annotations

import copy

import pytest

from orchestration.contract.settings import apply_set_items

RAW = {"name": "x", "base": {"data": {"dataset": "digits"}},
       "axes": {"method": {"fixmatch": {"algorithm": {"name": "fixmatch"}}, "mutexmatch": {}},
                "k": {3: {"algorithm": {"k": 3}}, 6: {"algorithm": {"k": 6}}}}}


def _set(*items: str) -> dict:
    return apply_set_items(copy.deepcopy(RAW), items)


@pytest.mark.parametrize("item, message", [
    ("axes.method.fixmach.algorithm.tau=0.9", "--set 'axes.method.fixmach.algorithm.tau=0.9': axes.method has no "
     "level 'fixmach'; its levels: fixmatch, mutexmatch (a new level is set whole: --set axes.method.NAME={...})"),
    ("axes.methd.fixmatch.algorithm.tau=0.9", "--set 'axes.methd.fixmatch.algorithm.tau=0.9': axes has no axis "
     "'methd'; its axes: method, k (a new axis is set whole: --set axes.NAME={...})"),
    ("axes.k.4.algorithm.tau=0.9", "axes.k has no level '4'; its levels: 3, 6"),
])
def test_a_typo_in_an_axis_or_level_name_is_refused_not_a_new_cell(item, message):
    """Finding #20: `--set axes.method.fixmach.algorithm.tau=0.9` silently made a cell 'fixmach' (no algorithm)."""
    with pytest.raises(ValueError) as err:
        _set(item)
    assert message in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_levels_are_edited_and_added_whole():
    raw = _set("axes.method.fixmatch.algorithm.tau=0.9", "axes.k.3.algorithm.tau=0.5",
               "axes.method.flexmatch={algorithm: {name: flexmatch}}", "axes.k.6={algorithm: {k: 7}}",
               "axes.seed={s1: {train: {seed: 1}}}", "base.train.seed=3")
    assert raw["axes"]["method"] == {"fixmatch": {"algorithm": {"name": "fixmatch", "tau": 0.9}}, "mutexmatch": {},
                                     "flexmatch": {"algorithm": {"name": "flexmatch"}}}
    assert raw["axes"]["k"] == {3: {"algorithm": {"k": 3, "tau": 0.5}}, 6: {"algorithm": {"k": 7}}}  # YAML int names
    assert raw["axes"]["seed"] == {"s1": {"train": {"seed": 1}}} and raw["base"]["train"] == {"seed": 3}
