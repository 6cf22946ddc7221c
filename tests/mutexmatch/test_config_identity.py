"""Config identity across issue 32's changed defaults (mutexmatch/config/identity.py): a run stored under the old
default is found by a config that asks for the old behaviour, never by one that takes the new default. The pinned
hashes are what the code of commit 1282aee (before issue 32) gave each config, current rule then legacy."""
from __future__ import annotations

import pytest

from mutexmatch.config import config_hashes, parse_config

BEFORE_32 = {   # algorithm section -> config_hashes(parse_config({"algorithm": section})) at 1282aee
    "pseudolabel": ("ee65c407e417ce20", "b3ab2f9f9b50db54"),
    "adamatch": ("f50c6ac3dc615fb5", "c173db9dd9e041a7"),
    "vat": ("28871d4c27fb89e6", "b8771a2b2a26be1e"),
    "simmatch": ("0c8fb25efef9c96f", "f39b388ae6578336"),
    "comatch": ("85381515df831c94", "9d93989ec06ccd48"),
    "comatch-usb": ("3ef78a5e1ca146d3", "3d1c8d9f4fbea6ac"),
    "fixmatch": ("bae6b578493e203e", "938d143683912ee0"),
    "mutexmatch": ("4b8729d9cede3958", "00718b78be781d86"),
}


def _hashes(name: str, **params) -> tuple[str, ...]:
    section = {"name": name.removesuffix("-usb"), **({"smoothing_start": "usb"} if name.endswith("-usb") else {})}
    return config_hashes(parse_config({"algorithm": {**section, **params}}))


@pytest.mark.parametrize("name,old", [("adamatch", {"da_ratio": "filled"}), ("vat", {"vat_probe": "usb"}),
                                      ("simmatch", {"epoch_steps": 0}), ("comatch-usb", {"epoch_steps": 0})])
def test_asking_for_the_old_behaviour_finds_the_old_runs_and_the_new_default_does_not(name, old) -> None:
    before = BEFORE_32[name]
    asked = _hashes(name, **old)
    assert asked[-len(before):] == before          # the oldest last: a search study keeps its name
    assert asked[0] not in before                   # new runs are tagged apart (the section names the parameter)
    assert set(_hashes(name)).isdisjoint(before)    # the new default never matches a run of the old behaviour


def test_comatch_queue_full_reads_no_epoch_so_any_epoch_length_finds_its_runs() -> None:
    for epoch_steps in (1024, 0, 7):
        assert set(BEFORE_32["comatch"]) <= set(_hashes("comatch", epoch_steps=epoch_steps))


def test_pseudolabel_runs_of_the_old_step_are_never_found() -> None:
    """Its old step (one concatenated forward with a strong view) is gone: no config computes it."""
    assert set(_hashes("pseudolabel")).isdisjoint(BEFORE_32["pseudolabel"])


@pytest.mark.parametrize("name", ["fixmatch", "mutexmatch"])
def test_algorithms_issue_32_left_alone_keep_exactly_their_hashes(name) -> None:
    assert _hashes(name) == BEFORE_32[name]


# FixMatch + TRAS on a long-tailed digits split: config_hashes at 58b7a67, before TRAS gained `form` (an imbalance
# algorithm's parameter declared with `earlier`, as issue 32's are in the algorithm section)
TRAS_RAW = {"algorithm": {"name": "fixmatch"}, "imb_algorithm": {"name": "tras"},
            "data": {"num_labels": 78, "imbalance": {"labeled_head": 20, "labeled_ratio": 10, "unlabeled_head": 100,
                                                     "unlabeled_ratio": 10}}}
TRAS_BEFORE_FORM = ("43702dc20f8f1ad3", "dd61ccf676dffa1d")


@pytest.mark.parametrize("form", [None, "usb"])
def test_tras_usb_form_finds_the_runs_stored_before_it_had_a_form(form) -> None:
    raw = {**TRAS_RAW, "imb_algorithm": {"name": "tras", **({"form": form} if form else {})}}
    hashes = config_hashes(parse_config(raw))
    assert hashes[-2:] == TRAS_BEFORE_FORM and hashes[0] not in TRAS_BEFORE_FORM


def test_tras_official_form_never_finds_the_usb_forms_runs() -> None:
    raw = {**TRAS_RAW, "imb_algorithm": {"name": "tras", "form": "official"}}
    assert set(config_hashes(parse_config(raw))).isdisjoint(TRAS_BEFORE_FORM)
