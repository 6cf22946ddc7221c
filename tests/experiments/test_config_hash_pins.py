"""Migration guard: the config hash of every experiment YAML's trials is pinned.

A trial whose config hash changes is planned again by every relaunch (``orchestration.tracking.finished_grid_hashes``
skips a (cell, fold) only when a FINISHED run carries the same hash), so a schema refactor that changes a hash
silently re-runs finished paper-scale sweeps. The values below were computed with the code of commit 0dd7fd9,
before the field roles moved onto the schema (issue 17); they must never change unless a change of results is
intended, and then with a migration for the stores written before it.

Per YAML: the config hash of the first grid trial (first cell, first fold), and a digest over every planned trial's
``key=config_hash`` line (grid trials, then ``search:key=search_hash`` for each search study) with their count.

Issue 22 gave each algorithm its own config section, which changed every hash: ``PINNED`` keeps the values above,
now reproduced by the legacy rule (``mutexmatch.config.legacy_config_hash``) that the sweep's skip logic and the
resume check accept beside the current one (``config_hashes``); ``PINNED_CURRENT`` pins the current rule's.
A YAML that gains a row (UDA in usb_classic_cv and zoo_digits; then Π-Model, Mean Teacher and VAT, issue 23: the
digests without their lines were fbb9c39a78ae6617 / 787bc082843f88aa and 6f85bef518f12fca / d462166fbb8c275f, the
pins before them; CoMatch in table1_cifar_svhn, table_cnn13_wrn, table2_stl_mini_tiny and zoo_digits, checked when
added: every earlier key=hash line of both rules is among the new plan's) gains lines in its digest; its first hash
and every earlier trial's line stay the same. The two YAMLs new with issue 22 changed once more before any release:
the algorithms that pin ``dist_align`` off (AdaMatch, Dash, FreeMatch, Pseudo-Label, SoftMatch) lost the ``da_*``
settings nothing read (``AlgorithmParams.GOVERNED``).

Issue 32 changed what five algorithms compute by default: Pseudo-Label's step (USB's two forwards; the old step is
gone, so its trials are hashed apart: ``AlgorithmParams.hash_revision``), SimMatch's and CoMatch's epoch
(``epoch_steps`` 1024; 0 was the rule before), AdaMatch's alignment quotient (``da_ratio`` usb; filled before) and
VAT's probe (``vat_probe`` relative; usb before). A parameter added since runs were stored declares the value that
reproduces the code before it (``mutexmatch.params.earlier``); a config at that value also carries the hashes that
code gave it (``mutexmatch.config.identity.earlier_config_hashes``), so a stored run is found by a config that asks
for the old behaviour and never by one that takes the new default. Hence the pins that moved with issue 32:
usb_classic_cv (four algorithms' rows added, AdaMatch and Pseudo-Label re-hashed, VAT asking for USB's probe) and
zoo_digits (Pseudo-Label, AdaMatch and VAT re-hashed; SimMatch asking for the pool-pass epoch it ran with) in both
rules; table1_cifar_svhn, table2_stl_mini_tiny and table_cnn13_wrn in the current rule only (CoMatch's section gained
``epoch_steps``, which its ``queue_full`` start never reads: its legacy lines are unchanged). ``PINNED_BEFORE_32``,
computed with the code of commit 1282aee (Pseudo-Label's trials left out), proves that every other trial of those
YAMLs, asked for the old behaviour, still has the hashes it had.

The pins are of the YAMLs alone: a new algorithm, dataset or backbone module moves none of them (no YAML lists a
registry; ``zoo_digits.yaml`` is checked as a subset of the algorithms, not equal to them, and the config hash
reads only the chosen algorithm's parameters). A pin moves when a YAML gains or changes a trial.

Issue 43 added DeFixMatch's row to zoo_digits (the digests before it: c7103e89c3e231e4 legacy, 54ae68654fc8baae
current), then CRMatch's (before it: cb423cead8c3c35c, 1080b9d3017d2255), ShrinkMatch's (before it:
cfacf894a89177db, 12cdb60fc540076e), ReFixMatch's (before it: 4ce4f6536728df01, 5ac0eccb6013ce5c) and
SequenceMatch's (before it: dd82544f49c59522, 52fea1bd737d7b79), each checked when added: every earlier
key=hash line of both rules is among the new plan's, and those lines alone give the earlier digests. Issue 43 item 3
added CRMatch's row to usb_classic_cv (USB publishes its numbers; 27 trials; the digests before it: b74adc21980b1465
legacy, 28af9a94d2ea2c6d current, 432 trials), checked the same way.

Issue 41 item 4 added RDA's row to zoo_digits (5 trials; the digests before it: 26313e7d711ab1f7 legacy,
a53b62a01aa38259 current, 145 trials), checked the same way: the 145 earlier lines alone give those digests.

Issue 43 item 4 added ShrinkMatch's row to cifar10_cpu (5 trials; the digests before it: 85e866e06a8a90eb legacy,
3a978a62552e6842 current, 15 trials), checked the same way: the 15 earlier lines alone give those digests.

Issue 41 item 5 added DARP's, SAW's, Adsh's, TRAS's, CReST's and CReST+'s rows to imbalanced_digits (54 trials; the
digests before them: 338eef88511a27d6 legacy, 1c04633419344207 current, 54 trials), checked the same way: the 54
earlier lines alone give those digests.

TRAS gained ``form`` (usb, the default, as before; official), declared with ``earlier("usb")``: imbalanced_digits'
9 TRAS trials carry the hash without it as their oldest (``earlier_config_hashes`` reads the imb_algorithm section
too), so the legacy digest above did not move and the current one did (before: bd38653a6b57e9bd). Then
imbalanced_digits gained the fixmatch_tras_official row (9 trials; the digests before it: 852c1fbce126ef05 legacy,
90a732f48d27e1a1 current, 108 trials), checked the same way: the 108 earlier lines alone give those digests. Then
DASO's and CoSSL's rows (27 trials; before them: 6732e34139ff3228 legacy, 9ba2a7249ccbb3f7 current, 117 trials), checked
the same way: the 117 earlier lines alone give those digests.

Issue 41 item 5 ran usb_classic_cv_imb's base + imbalance algorithm rows (11 levels, 363 trials; the digests before
them: b09ae46b557ebb29 legacy, a031572e4cc05423 current, 99 trials), checked the same way: the 99 earlier lines
alone give those digests, and every earlier trial keeps all its hashes.

Issue 41 item 5 then ran FixMatch + DASO and ReMixMatch + DASO in usb_classic_cv_imb (4 levels: USB's T_dist per
dataset; 66 trials; the digests before them: 3da782005556f755 legacy, 4abbec8a7638f10f current, 462 trials), checked
the same way: the 462 earlier lines alone give those digests. Then FixMatch + CoSSL and ReMixMatch + CoSSL (2 levels,
66 trials; before them: 992ee92ab1be97e0 legacy, c9609cff6aff1319 current, 528 trials), checked the same way.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from mutexmatch.config import config_hashes, parse_config
from orchestration.plan import build_plan
from orchestration.spec import deep_merge, load_spec

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"

PINNED = {  # YAML: (first grid trial's config hash, digest of every planned trial's hash, planned trials)
    "ablation_k.yaml": ("849568bbb7d01195", "2efaac0aea105e71", 60),
    "ablation_lowconf.yaml": ("75e555bde156920e", "bb9b04997c971305", 45),
    "ablation_lr.yaml": ("7f8044f5ccf4ff12", "9823b451d0c6c1d2", 60),
    "ablation_m.yaml": ("3f89ab719ab79288", "4853e789215e3073", 50),
    "ablation_nce.yaml": ("d750fc346a4a86e9", "03ab4a3cfec43101", 25),
    "ablation_svhn40_lambda_sg.yaml": ("59a957fb7714f44f", "627d18abbc01cfe5", 45),
    "ablation_tau.yaml": ("e8553e153b8f20f9", "cb8e6f67507c5904", 70),
    "ablation_tnc_consistency.yaml": ("85863cff2c6bda13", "bf9fc6487095dca6", 25),
    "ablation_tnc_schemes.yaml": ("554c45e44f01d09b", "80f8d2440dfb436b", 35),
    "cifar10_cpu.yaml": ("3461dd09085c22bc", "e8f59705e64d96e3", 20),        # issue 43; before: 85e866e06a8a90eb, 15
    "cifar10_lt_cpu.yaml": ("34fc935c2d008238", "fcdf4aa7bd111797", 4),   # issue 41 item 5 (new)
    "imbalanced_digits.yaml": ("020a21b5f0bf2924", "b3a664e1b57f37b2", 144),  # DASO, CoSSL; before: 6732e34139ff3228, 117
    "digits_lambda_sg.yaml": ("1a490717146046fb", "5514482f8a80c9cc", 45),
    "digits_shrinkmatch.yaml": ("8fc7a0fbc37bdd88", "b83f6e352e5c6112", 15),      # issue 43 item 4 (new)
    "pseudo_label_accuracy.yaml": ("d5a0480da493193b", "ff9943fc18db79f8", 70),
    "quickstart.yaml": ("3d0eb9b96566484e", "3f912c45b693d1c0", 16),
    "table1_cifar_svhn.yaml": ("d5a0480da493193b", "f2450788d4c242bb", 185),
    "shrinkmatch_published.yaml": ("5a251ea354ff63c5", "1bf2eda305ea04c0", 30),   # issue 43 item 3 (new)
    "table2_stl_mini_tiny.yaml": ("56c1b3e3e3a009d2", "f5c3d26cbe8d7a08", 120),
    "table_cnn13_wrn.yaml": ("fe82e43f836b8f29", "82372673f8dc31e4", 80),
    "usb_classic_cv.yaml": ("c33d122bd89d0ded", "a25ccd81df29df95", 459),   # issue 43; before: b74adc21980b1465, 432
    "usb_classic_cv_imb.yaml": ("a9ffd3458f05d49c", "a1ad2df1b1dee621", 594),  # issue 41; before: 992ee92ab1be97e0
    "usb_cv.yaml": ("e746c8f05a1a663a", "13b1ab62cc05a674", 168),     # issue 42 item 4 (new)
    "transfer_cpu.yaml": ("8779563f027224bd", "3b9fc459af11e878", 6),   # issue 42 item 5 (new; conftest.py weights)
    "zoo_digits.yaml": ("3d0eb9b96566484e", "f2bfb8f66f456535", 150),       # issue 41 (RDA); before: 26313e7d711ab1f7
}

PINNED_CURRENT = {  # YAML: (first grid trial's config hash, digest of every planned trial's hash), the rule of issue 22
    "ablation_k.yaml": ("5ff60c5629836f9d", "adebf5e3e78c71dd"),
    "ablation_lowconf.yaml": ("91b0598df0fd1804", "d595f07fcf42126a"),
    "ablation_lr.yaml": ("fe070974e2899ad2", "cb6aae40f065dfa8"),
    "ablation_m.yaml": ("0165ffdad934839d", "7185668d4ba2339b"),
    "ablation_nce.yaml": ("a7f6650d0b632c1c", "17c17186752487a5"),
    "ablation_svhn40_lambda_sg.yaml": ("553802754aea9e0f", "849292d29cf9f883"),
    "ablation_tau.yaml": ("182f5517745ffa6b", "028639e094d8b8d4"),
    "ablation_tnc_consistency.yaml": ("e68f058b305bbb25", "4fdc3388e1fb29db"),
    "ablation_tnc_schemes.yaml": ("a758e5cfefadc5db", "bd0fafc2e70e1cb8"),
    "cifar10_cpu.yaml": ("5e169afbfac87ec8", "e3da2e110451dabe"),            # issue 43; before: 3a978a62552e6842
    "cifar10_lt_cpu.yaml": ("856928dba3fbb261", "0d92c876b40b2b80"),      # issue 41 item 5 (new)
    "imbalanced_digits.yaml": ("1edad8972420de24", "12dc731f272f040c"),      # DASO, CoSSL; before: 9ba2a7249ccbb3f7
    "digits_lambda_sg.yaml": ("0962cc01db2d2219", "0646b1c2c9f666cb"),
    "digits_shrinkmatch.yaml": ("572858df260ea442", "0d53c22cd4f83af4"),         # issue 43 item 4 (new)
    "pseudo_label_accuracy.yaml": ("c5043f96e3fd581c", "e5085fc1c3ebd45c"),
    "quickstart.yaml": ("0a9d6cefa8473a1e", "03c942e24db6f3d2"),
    "table1_cifar_svhn.yaml": ("c5043f96e3fd581c", "9dbdff4e81e1785d"),     # issue 32; before: 489ca54959a36bb8
    "shrinkmatch_published.yaml": ("f71b808253d687b8", "c9a47d29943876be"),       # issue 43 item 3 (new)
    "table2_stl_mini_tiny.yaml": ("4ff257bcab18b186", "7fa039d04613ad7b"),  # issue 32; before: b5e6878bd6a86292
    "table_cnn13_wrn.yaml": ("86df2d10f09c66d0", "7b7f0d0500bd223c"),       # issue 32; before: f3e9a10c630e7e04
    "usb_classic_cv.yaml": ("5da89869e8a2ecbc", "161322b9c89bcb94"),        # issue 43; before: 28af9a94d2ea2c6d
    "usb_classic_cv_imb.yaml": ("7c63e6991db39eaa", "c8dd82e12fec6fea"),    # issue 41; before: c9609cff6aff1319
    "usb_cv.yaml": ("b30c4800de151853", "f74db8c338dd0c8b"),           # issue 42 item 4 (new)
    "transfer_cpu.yaml": ("108b8247dfeb9ae5", "ed4ef6be3e55db74"),     # issue 42 item 5 (new)
    "zoo_digits.yaml": ("0a9d6cefa8473a1e", "91ab3385315f62ec"),            # issue 41 (RDA); before: a53b62a01aa38259
}


# Issue 32: (legacy-rule digest, current-rule digest, trials) of each YAML's grid trials as the code of commit 1282aee
# planned them, Pseudo-Label's trials left out; the values that reproduce that code's behaviour, asked for by the
# trials now; the levels issue 32 added (not in that code's plan). The other three YAMLs whose pins moved have their
# pre-32 digests in PINNED_CURRENT's comments and PINNED (their legacy lines did not move).
PINNED_BEFORE_32 = {
    "usb_classic_cv.yaml": ("3e97990dc2153eee", "1336f14ff36ad20c", 297),
    "zoo_digits.yaml": ("bd2762065b46877c", "482b8234c2cebe3e", 115),
    "table1_cifar_svhn.yaml": ("f2450788d4c242bb", "489ca54959a36bb8", 185),
    "table2_stl_mini_tiny.yaml": ("f5c3d26cbe8d7a08", "b5e6878bd6a86292", 120),
    "table_cnn13_wrn.yaml": ("82372673f8dc31e4", "f3e9a10c630e7e04", 80),
}
BEHAVIOUR_BEFORE_32 = {"simmatch": {"epoch_steps": 0}, "comatch": {"epoch_steps": 0},
                       "adamatch": {"da_ratio": "filled"}, "vat": {"vat_probe": "usb"}}
ADDED_BY_32 = {"mixmatch", "mixmatch_cifar100", "remixmatch", "simmatch", "comatch"}   # usb_classic_cv's new levels
ADDED_AFTER_32 = {"defixmatch", "crmatch", "shrinkmatch", "refixmatch", "sequencematch",   # algorithms new since
                  "rda"}   # issue 32 (issues 43, 41): no trial of them predates it


@pytest.fixture(scope="module")
def project(tmp_path_factory, spec_imagefolders) -> Path:
    root = tmp_path_factory.mktemp("pins")
    (root / "data").mkdir()
    spec_imagefolders(root)
    return root


def test_every_experiment_yaml_is_pinned() -> None:
    assert sorted(p.name for p in EXPERIMENTS.glob("*.yaml")) == sorted(PINNED) == sorted(PINNED_CURRENT)


def _digest(plan, hash_of) -> tuple[str, int]:
    lines = [f"{t.key}={hash_of(t)}" for t in plan.grid] + [f"search:{s.key}={s.search_hash}" for s in plan.searches]
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16], len(lines)


@pytest.mark.parametrize("name", sorted(PINNED))
def test_config_hashes_of_experiment_yamls_are_unchanged(name: str, project: Path) -> None:
    """The legacy rule (mutexmatch.config.legacy_config_hash) still gives every pinned hash of the code before
    issue 22, and the plan counts it (GridTrial.hashes): a store written then re-runs nothing. The current rule
    (each algorithm's own section) is pinned too; search studies keep their hashes (their identity is the oldest)."""
    first, digest, count = PINNED[name]
    plan = build_plan(load_spec(EXPERIMENTS / name, project), project)
    assert plan.grid[0].legacy_hashes == (first,) and first in plan.grid[0].hashes
    assert _digest(plan, lambda t: (t.legacy_hashes or (t.config_hash,))[-1]) == (digest, count)   # the oldest
    assert (plan.grid[0].config_hash, *_digest(plan, lambda t: t.config_hash)) == PINNED_CURRENT[name] + (count,)
    # What the trainable adds per trial (run folder, device, threads) must not move the hashes either.
    raw = deep_merge(plan.grid[0].config, {"output_dir": str(project / "run"),
                                           "train": {"device": "cpu", "num_threads": 3}})
    assert config_hashes(parse_config(raw)) == (plan.grid[0].config_hash, first)


@pytest.mark.parametrize("name", sorted(PINNED_BEFORE_32))
def test_trials_asking_for_the_behaviour_before_issue_32_keep_its_hashes(name: str, project: Path) -> None:
    """Every trial but Pseudo-Label's (whose old step is gone) and the rows issue 32 added, its config amended to ask
    for what the code before issue 32 computed, carries the hashes that code gave it (both rules): a store written
    before it re-runs none of them. Unamended, the trials whose default changed on purpose carry none of them."""
    from mutexmatch.config.identity import earlier_config_hashes

    plan = build_plan(load_spec(EXPERIMENTS / name, project), project)
    kept = [t for t in plan.grid if t.config["algorithm"]["name"] not in {"pseudolabel", *ADDED_AFTER_32}
            and not (name == "usb_classic_cv.yaml" and t.cell.as_dict()["method"] in ADDED_BY_32)]
    old_legacy, old_current = [], []
    for t in kept:
        cfg = parse_config(deep_merge(t.config, {"algorithm": BEHAVIOUR_BEFORE_32.get(t.config["algorithm"]["name"],
                                                                                     {})}))
        before = earlier_config_hashes(cfg) or config_hashes(cfg)
        assert set(before) <= set(config_hashes(cfg)), t.key
        old_current.append(f"{t.key}={before[0]}")
        old_legacy.append(f"{t.key}={before[-1]}")
    digest = lambda lines: hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]   # noqa: E731
    assert (digest(old_legacy), digest(old_current), len(kept)) == PINNED_BEFORE_32[name]
