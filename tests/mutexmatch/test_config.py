"""The run config: defaults valid, YAML + overrides, and a table of malformed configs each rejected by name."""

from __future__ import annotations

import pytest
import yaml

from mutexmatch.config import (ConfigError, RunConfig, apply_overrides, config_hash, config_markdown, load_config,
                               parse_config, resolve_k, search_value)
from mutexmatch.params import FixMatchParams, MutexMatchParams


def test_defaults_are_valid():
    cfg = parse_config({})
    assert cfg.data.dataset == "digits"
    assert cfg.algorithm.tau == 0.95
    assert cfg.train.iterations == 2**20


def test_yaml_and_overrides(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({"algorithm": {"tau": 0.9, "k": "0.6C"}, "train": {"iterations": 100}}))
    cfg = load_config(path, ["algorithm.lambda_n=0.5", "train.seed=3", "data.split_rule=balanced"])
    assert cfg.algorithm.tau == 0.9
    assert cfg.algorithm.lambda_n == 0.5
    assert cfg.train.seed == 3
    assert cfg.data.split_rule == "balanced"
    assert resolve_k(cfg.algorithm.k, 10) == 6


@pytest.mark.parametrize("k,C,expected", [("C", 10, 10), ("0.6C", 10, 6), ("0.6C", 100, 60), (3, 10, 3),
                                          ("0.01C", 10, 1), ("1C", 7, 7)])
def test_resolve_k(k, C, expected):
    assert resolve_k(k, C) == expected


def test_a_searched_k_is_read_by_mutexmatch_s_own_parameter_type():
    """A search samples k as an integer, or as a float that is a fraction of C: MutexMatch's parameter model says
    so (its field's SearchValue), and a sweep asks the chosen algorithm's model instead of knowing k by name."""
    assert MutexMatchParams.search_value("k", 0.6) == "0.6C" and MutexMatchParams.search_value("k", 3) == 3
    assert MutexMatchParams.search_value("k", "C") == "C" and MutexMatchParams.search_value("tau", 0.6) == 0.6
    with pytest.raises(ValueError, match=r"a float k is a fraction of C and must be in \(0, 1\]"):
        MutexMatchParams.search_value("k", 1.5)
    assert search_value({"algorithm": {"name": "mutexmatch"}}, "algorithm.k", 0.25) == "0.25C"
    assert search_value({}, "algorithm.k", 0.25) == "0.25C"  # the default algorithm is MutexMatch
    assert search_value({"algorithm": {"name": "fixmatch"}}, "algorithm.tau", 0.25) == 0.25
    assert search_value({"algorithm": {"name": "mutexmatch"}}, "optim.lr", 0.25) == 0.25
    assert "k" not in FixMatchParams.model_fields  # so k sampled for FixMatch is the config check's to refuse


def test_override_creates_no_silent_keys():
    raw = apply_overrides({}, ["algorithm.tua=0.5"])
    with pytest.raises(ConfigError, match=r"algorithm\.tua: unknown key"):
        parse_config(raw)


def test_relative_paths_become_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = parse_config({"output_dir": "runs/a", "data": {"root": "data"}})
    assert cfg.output_dir == str(tmp_path / "runs" / "a")
    assert cfg.data.root == str(tmp_path / "data")


def test_config_hash_ignores_paths_only():
    a = parse_config({"output_dir": "/tmp/a"})
    b = parse_config({"output_dir": "/tmp/b"})
    c = parse_config({"algorithm": {"tau": 0.9}})
    assert config_hash(a) == config_hash(b)
    assert config_hash(a) != config_hash(c)


def test_every_field_documented():
    for section in RunConfig.model_fields.values():
        assert section.description
        sub = section.annotation
        if hasattr(sub, "model_fields"):
            for name, f in sub.model_fields.items():
                assert f.description, name
    doc = config_markdown()
    assert "`algorithm.name`" in doc and "`tau` = `0.95`" in doc and "`train.ema`" in doc



def _tracked_package(repo, dest):
    """The files of ``mutexmatch/`` that git tracks, copied under ``dest`` (None outside a git checkout)."""
    import shutil
    import subprocess

    listed = subprocess.run(["git", "ls-files", "-z", "mutexmatch"], cwd=repo, capture_output=True)
    if listed.returncode or not listed.stdout:
        return None
    files = [f for f in listed.stdout.decode().split("\0") if f and (repo / f).exists()]
    for f in files:
        (dest / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(repo / f, dest / f)
    return set(files)


def test_committed_config_reference_is_the_generated_one(tmp_path):
    """docs/config.md is ``python -m mutexmatch.config --doc`` (issue 22 item 5): a new field, parameter, algorithm,
    backbone or dataset module, or loss term changes it, and a stale copy fails here. Generated in a fresh
    interpreter from the modules git tracks: the tests' conftest registers test-only algorithms that must not appear,
    and a module a contributor has just put into the package (not yet committed) trains and is tested at once; once
    committed, CI asks for `make docs` here (issue 29: the module alone is the change, the doc is generated)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from mutexmatch.algorithms import ALGORITHMS

    repo = Path(__file__).resolve().parents[2]
    tracked = _tracked_package(repo, tmp_path)
    tree = tmp_path if tracked is not None else repo
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), os.environ.get("PYTHONPATH", "")])}
    generated = subprocess.run([sys.executable, "-m", "mutexmatch.config", "--doc"], cwd=tree, env=env, check=True,
                               capture_output=True, text=True).stdout
    committed = (repo / "docs" / "config.md").read_text()
    assert committed == generated, ("docs/config.md is stale: regenerate it with `make docs` "
                                    "(python -m mutexmatch.config --doc > docs/config.md)")

    def committed_module(cls) -> bool:
        path = Path(sys.modules[cls.__module__].__file__).resolve()
        return tracked is None or path.relative_to(repo).as_posix() in tracked

    packaged = [n for n, cls in ALGORITHMS.items()
                if cls.__module__.startswith("mutexmatch.algorithms.") and committed_module(cls)]
    for name in packaged:   # every algorithm module's section: its row, parameters and terms
        row = next(ln for ln in committed.splitlines() if ln.startswith(f"| `{name}` |"))
        assert row.endswith(" | " + ", ".join(f"`{t}`" for t in ALGORITHMS[name].terms) + " |"), name

# (raw config, the field the message must name, a fragment of what is allowed)
MALFORMED = [
    ({"algorithm": {"tau": 1.5}}, "algorithm.tau=1.5", "must be in (0, 1]"),
    ({"algorithm": {"tau": 0.0}}, "algorithm.tau=0.0", "(0, 1]"),
    ({"algorithm": {"tau": "high"}}, "algorithm.tau='high'", "valid number"),
    ({"algorithm": {"k": 11}}, "algorithm.k=11", "[1, 10]"),
    ({"algorithm": {"k": 0}}, "algorithm.k=0", ">= 1"),
    ({"algorithm": {"k": "0.6"}}, "algorithm.k='0.6'", "fraction"),
    ({"algorithm": {"k": "1.5C"}}, "algorithm.k='1.5C'", "(0, 1]"),
    ({"algorithm": {"k": True}}, "algorithm.k", ""),
    ({"algorithm": {"k": 0.6}}, "algorithm.k=0.6", "fraction like `0.6C`"),
    ({"algorithm": {"lambda_sep": -1.0}}, "algorithm.lambda_sep=-1.0", "[0, inf)"),
    ({"algorithm": {"lambda_n": "1"}}, "algorithm.lambda_n='1'", "valid number"),
    ({"algorithm": {"name": "meanteachr"}}, "algorithm.name='meanteachr'", "registered"),
    ({"algorithm": {"form": "released"}}, "algorithm.form='released'", "paper"),
    ({"algorithm": {"name": "fixmatch", "lambda_sep": 0.5}}, "algorithm.lambda_sep=0.5", "not used by"),
    ({"algorithm": {"name": "fixmatch_nce", "tau_p": 1.2}}, "algorithm.tau_p=1.2", "(0, 1]"),
    ({"algorithm": {"name": "fixmatch_nce", "nce_variant": 4}}, "algorithm.nce_variant=4", "1, 2 or 3"),
    ({"algorithm": {"comp_rank": 0}}, "algorithm.comp_rank=0", ">= 1"),
    ({"algorithm": {"bogus": 1}}, "algorithm.bogus", "unknown key"),
    ({"data": {"num_labels": 25}}, "data.num_labels=25", "divisible by the 10 classes"),
    ({"data": {"num_labels": 0}}, "data.num_labels=0", "positive"),
    ({"data": {"num_labels": 20.0}}, "data.num_labels=20.0", "integer"),
    ({"data": {"fold": -1}}, "data.fold=-1", ">= 0"),
    ({"data": {"fold": 7}}, "data.fold=7", "folds 0-4"),
    ({"data": {"dataset": "mnist"}}, "data.dataset='mnist'", "cifar10"),
    ({"data": {"dataset": "cifar10", "root": "/nonexistent/data"}}, "data.root='/nonexistent/data'",
     "download: true"),
    ({"data": {"split_rule": "random"}}, "data.split_rule='random'", "official"),
    ({"data": {"val_per_class": -2}}, "data.val_per_class=-2", ">= 0"),
    ({"data": {"svhn_extra": True}}, "data.svhn_extra=True", "svhn, not digits"),
    ({"data": {"image_size": 4}}, "data.image_size=4", "[8, 512]"),
    ({"data": {"dataset": "stl10", "num_labels": 20, "download": True}}, "data.num_labels=20",
     "40 or 100 or 1000 or 5000"),
    ({"model": {"backbone": "vit_b16"}}, "model.backbone='vit_b16'", "registered"),
    ({"model": {"backbone": "cnn13"}, "data": {"image_size": 8}}, "data.image_size=8", "at least 12"),
    ({"model": {"depth": 28}}, "model.depth", "unknown key"),
    ({"optim": {"lr": 0.0}}, "optim.lr=0.0", "(0, 10]"),
    ({"optim": {"momentum": 1.0}}, "optim.momentum=1.0", "[0, 1)"),
    ({"optim": {"weight_decay": -1e-4}}, "optim.weight_decay=-0.0001", "[0, 1)"),
    ({"optim": {"schedule": "step"}}, "optim.schedule='step'", "cosine"),
    ({"train": {"iterations": 0}}, "train.iterations=0", ">= 1"),
    ({"train": {"batch_size": -64}}, "train.batch_size=-64", ">= 1"),
    ({"train": {"mu": 0}}, "train.mu=0", ">= 1"),
    ({"train": {"ema": 1.0}}, "train.ema=1.0", "[0, 1)"),
    ({"train": {"device": "tpu"}}, "train.device='tpu'", "cuda:N"),
    ({"train": {"precision": "fp8"}}, "train.precision='fp8'", "bf16"),
    ({"train": {"eval_interval": "often"}}, "train.eval_interval='often'", "integer"),
    ({"train": "fast"}, "train='fast'", ""),
    ({"trian": {}}, "trian", "unknown key"),
]


@pytest.mark.parametrize("raw,field,allowed", MALFORMED, ids=[m[1] for m in MALFORMED])
def test_malformed_config_rejected_with_field_name(raw, field, allowed):
    assert len(MALFORMED) >= 30
    with pytest.raises(ConfigError) as info:
        parse_config(raw)
    msg = str(info.value)
    assert field in msg, msg
    assert allowed in msg, msg


def test_multiple_errors_reported_together():
    with pytest.raises(ConfigError) as info:
        parse_config({"algorithm": {"tau": 2.0}, "train": {"mu": 0}})
    assert "algorithm.tau" in str(info.value) and "train.mu" in str(info.value)


def test_missing_config_file():
    with pytest.raises(ConfigError, match="file not found"):
        load_config("/nonexistent/run.yaml")


def test_bad_override_syntax():
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        load_config(None, ["algorithm.tau"])


# ------------------------------------------------------------------------------------------------ the YAML reader
_BAD_FILES = [
    # (file content, or None for a folder; what the one-line error says)
    (b"data:\n  dataset: digits\n  dataset: cifar10\n",
     r"line 3, column 3: duplicate key 'dataset' \(first at line 2, again at line 3\)"),
    (b"train: {seed: 1}\ntrain: {seed: 2}\n", r"duplicate key 'train' \(first at line 1, again at line 2\)"),
    (b"data: [unclosed\n", r"not valid YAML at line 2, column 1"),
    (b"data:\n\tdataset: x\n", r"not valid YAML at line 2, column 1: found character '\\t'"),
    (b"", r"is empty, expected a mapping of sections \(data, model"),
    (b"# only a comment\n", r"is empty"),
    (b"- data\n- train\n", r"top level is a list, expected a mapping of sections"),
    (b"digits\n", r"top level is the str 'digits'"),
    (b"\x89PNG\r\n\x1a\n\x00\x00", r"is a binary file \(byte 8 is NUL\)"),
    (b"data: {root: caf\xe9}\n", r"is not UTF-8 text \(byte 16 is 0xe9\)"),
    (b"a: 1\n---\nb: 2\n", r"not valid YAML at line 2, column 1: but found another document"),
    (b"x: !!python/object:os.system ls\n", r"could not determine a constructor"),
    (None, r"is a directory, expected a YAML file"),
]


@pytest.mark.parametrize("content, expected", _BAD_FILES, ids=[e[:30] for _, e in _BAD_FILES])
def test_a_bad_run_yaml_is_one_line_naming_the_file(tmp_path, content, expected):
    path = tmp_path / "run.yaml"
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)
    with pytest.raises(ConfigError, match=expected) as info:
        load_config(path)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"--config {str(path)!r}: ")


def test_merge_keys_may_be_overridden_but_not_repeated(tmp_path):
    from mutexmatch.yamlfile import YamlFileError, read_yaml_mapping

    path = tmp_path / "merge.yaml"
    path.write_text("common: &c {tau: 0.9, k: 3}\nalgorithm:\n  <<: *c\n  k: 5\n")
    assert read_yaml_mapping(path)["algorithm"] == {"tau": 0.9, "k": 5}
    path.write_text("algorithm:\n  <<: {k: 3}\n  k: 5\n  k: 6\n")
    with pytest.raises(YamlFileError, match="duplicate key 'k' .first at line 3, again at line 4"):
        read_yaml_mapping(path, "sweep YAML")


def test_a_sweep_yaml_given_to_the_trainer_names_the_sweep_command(tmp_path):
    path = tmp_path / "sweep.yaml"
    path.write_text("name: x\naxes: {method: {fixmatch: {algorithm: {name: fixmatch}}}}\n")
    with pytest.raises(ConfigError, match=r"is a sweep YAML \(it has `axes:`\), not a run config; run it with "
                                          r"`python -m orchestration.sweep .*sweep.yaml`"):
        load_config(path)


@pytest.mark.parametrize("overrides, expected", [
    (["train.seed=4294967296"], r"train.seed=4294967296: must be <= 4294967295"),
    (["data.num_labels=1270"], r"data.num_labels=1270: needs 127 labeled images of each class, but the smallest "
                               r"class of digits has 126 train images; at most 1260"),
    (["data.num_labels=100", "data.val_per_class=117"], r"data.val_per_class=117: .* at most 116"),
    (["data.dataset=cifar100", "data.download=true", "data.num_labels=50100"],
     r"data.num_labels=50100: needs 501 .* cifar100 has 500 train images"),
    (["algorithm.tau=[0.9,"], r"--set 'algorithm.tau=\[0.9,': the value is not valid YAML"),
])
def test_values_the_dataset_or_numpy_cannot_take_are_refused_up_front(overrides, expected):
    with pytest.raises(ConfigError, match=expected):
        load_config(None, overrides)


def test_the_largest_seed_and_class_share_are_accepted():
    cfg = load_config(None, ["train.seed=4294967295", "data.num_labels=1000", "data.val_per_class=26"])
    assert cfg.train.seed == 2**32 - 1


def test_set_algorithm_name_switches_the_files_algorithm(tmp_path):
    """`--set algorithm.name=X` on a file written for another algorithm (experiments/runs/digits.yaml documents it)
    keeps the file's parameters X takes and drops the rest; a parameter given by --set is still checked."""
    path = tmp_path / "run.yaml"
    path.write_text("algorithm: {name: mutexmatch, form: paper, tau: 0.9, k: 3}\n")
    fix = load_config(path, ["algorithm.name=fixmatch"])
    assert fix.algorithm.name == "fixmatch" and fix.algorithm.tau == 0.9
    assert "k" not in fix.algorithm.__pydantic_extra__ and "form" not in fix.algorithm.__pydantic_extra__
    assert load_config(path, ["algorithm.name=supervised"]).algorithm.__pydantic_extra__ == {}
    with pytest.raises(ConfigError, match=r"algorithm.k=3: not used by algorithm 'fixmatch'"):
        load_config(path, ["algorithm.name=fixmatch", "algorithm.k=3"])
    with pytest.raises(ConfigError, match=r"algorithm.k=3: not used by algorithm 'fixmatch'"):
        parse_config({"algorithm": {"name": "fixmatch", "tau": 0.9, "k": 3}})


def test_the_config_command_has_help_and_prints_a_config_that_loads():
    """Issue 34: ``python -m mutexmatch.config --help`` printed the default config instead of help; without options it
    prints the default config, which parses back to the defaults."""
    import subprocess
    import sys

    import yaml

    from mutexmatch.config import RunConfig

    help_ = subprocess.run([sys.executable, "-m", "mutexmatch.config", "--help"], capture_output=True, text=True)
    assert help_.returncode == 0 and help_.stdout.startswith("usage: python -m mutexmatch.config [-h] [--doc]")
    assert "--doc" in help_.stdout and "data:" not in help_.stdout
    default = subprocess.run([sys.executable, "-m", "mutexmatch.config"], capture_output=True, text=True, check=True)
    assert yaml.safe_load(default.stdout) == RunConfig.model_construct().model_dump(mode="json")
    bad = subprocess.run([sys.executable, "-m", "mutexmatch.config", "--dco"], capture_output=True, text=True)
    assert bad.returncode == 2 and "unrecognized arguments: --dco" in bad.stderr
