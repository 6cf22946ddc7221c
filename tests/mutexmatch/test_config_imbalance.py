"""``data.imbalance`` (issue 41 item 1): the long-tailed split's section, validated once with one line per problem,
left out of a balanced run's config (its hash unchanged), and documented."""

from __future__ import annotations

import pytest

from mutexmatch.config import ConfigError, config_hash, config_markdown, parse_config
from mutexmatch.data.longtail import imbalance_counts

DIGITS_LT = {"labeled_head": 20, "labeled_ratio": 10}
LT_LABELS = sum(imbalance_counts(20, 10, 10))   # 78 on digits' 10 classes


def _data(**data):
    return {"data": {"dataset": "digits", **data}}


def test_long_tailed_section_parses_and_enters_the_hash():
    cfg = parse_config(_data(num_labels=LT_LABELS, imbalance={**DIGITS_LT, "unlabeled_head": 100,
                                                              "unlabeled_ratio": -10}))
    imb = cfg.data.imbalance
    assert (imb.labeled_head, imb.labeled_ratio, imb.unlabeled_head, imb.unlabeled_ratio, imb.rule) == \
        (20, 10, 100, -10, "int")
    assert cfg.to_dict()["data"]["imbalance"]["unlabeled_ratio"] == -10
    reversed_ = parse_config(_data(num_labels=LT_LABELS, imbalance={**DIGITS_LT, "unlabeled_head": 100,
                                                                    "unlabeled_ratio": 10}))
    assert config_hash(cfg) != config_hash(reversed_)
    assert parse_config(cfg.to_dict()).data.imbalance == imb   # the run folder's config.yaml reads back


def test_balanced_run_has_no_imbalance_key():
    """A run without ``imbalance`` writes and hashes the config it did before (the pins in
    tests/experiments/test_config_hash_pins.py hold the stored hashes)."""
    cfg = parse_config(_data(num_labels=20))
    assert cfg.data.imbalance is None and "imbalance" not in cfg.to_dict()["data"]


@pytest.mark.parametrize("data, line", [
    ({"num_labels": LT_LABELS, "imbalance": {**DIGITS_LT, "labeled_ratio": 0.5}},
     "data.imbalance.labeled_ratio=0.5: must be <= -1 or >= 1"),
    ({"num_labels": LT_LABELS, "imbalance": {**DIGITS_LT, "labeled_head": 0}},
     "data.imbalance.labeled_head=0: must be >= 1"),
    ({"num_labels": LT_LABELS, "imbalance": {**DIGITS_LT, "rule": "round"}}, "data.imbalance.rule='round'"),
    ({"num_labels": LT_LABELS, "imbalance": {**DIGITS_LT, "gamma": 3}},
     "data.imbalance.gamma: unknown key; allowed keys: labeled_head, labeled_ratio, unlabeled_head"),
    ({"num_labels": LT_LABELS, "imbalance": {"labeled_ratio": 10}}, "data.imbalance.labeled_head"),
    ({"num_labels": LT_LABELS, "imbalance": {**DIGITS_LT, "unlabeled_ratio": 10}},
     "data.imbalance.unlabeled_ratio=10: needs data.imbalance.unlabeled_head"),
    ({"num_labels": 20, "imbalance": DIGITS_LT},
     f"data.num_labels=20: the long-tailed labeled set of data.imbalance holds {LT_LABELS} labeled images"),
    ({"num_labels": LT_LABELS, "split_rule": "balanced", "imbalance": DIGITS_LT},
     "data.split_rule='balanced': "),
])
def test_bad_values_name_field_value_and_what_is_allowed(data, line):
    with pytest.raises(ConfigError) as err:
        parse_config(_data(**data))
    assert any(ln.startswith(line) for ln in str(err.value).splitlines()), str(err.value)


def test_any_fold_is_a_seed():
    cfg = parse_config(_data(num_labels=LT_LABELS, fold=7, imbalance=DIGITS_LT))
    assert cfg.data.fold == 7


def test_documented():
    doc = config_markdown()
    for sub in ("labeled_head", "labeled_ratio", "unlabeled_head", "unlabeled_ratio", "rule"):
        assert f"| `data.imbalance.{sub}` |" in doc
