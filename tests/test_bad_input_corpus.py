"""The bad-input corpus (issue 16): malformed inputs to every command line, each refused before any work.

Every case runs a CLI's ``main(argv)`` in this process (a few run the real ``python -m`` command) inside a fresh
folder that is also the working directory, and asserts what we promise users about bad input:

- exit status 2;
- one message on stderr naming the input (the file, flag or field and its value), and no traceback;
- nothing written: the folder holds exactly what it held before (no run folder, no ``mlflow.db``, no cache), and
  an MLflow store that was there holds the same number of runs.

A case whose fix belongs to a file another engineer owns is marked ``xfail(strict=True, reason="owner: <file>")``:
it fails today for the reason it names, and turns into an error (XPASS) as soon as the fix lands, so the mark is
removed with the fix. The cases of a CLI whose module does not exist yet are skipped.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import signal
import sqlite3
import subprocess
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest

REPO = Path(__file__).resolve().parents[1]

# The command line of each CLI (`python -m <module>`) and the module whose main(argv) runs it in-process.
CLIS = {
    "train": ("mutexmatch.train", "mutexmatch.train"),
    "sweep": ("orchestration.sweep", "orchestration.sweep"),
    "report": ("reports.build", "reports.build"),
    "datasets": ("mutexmatch.datasets", "mutexmatch.datasets"),
    "status": ("orchestration.status", "orchestration.status"),
}

RUN_YAML = "data: {dataset: digits, num_labels: 20}\ntrain: {iterations: 4, eval_interval: 2, batch_size: 4, mu: 2}\n"
SWEEP_YAML = """name: corpus
base:
  data: {dataset: digits, num_labels: 20}
  train: {iterations: 4, eval_interval: 2, batch_size: 4, mu: 2}
folds: [0, 1]
axes:
  method:
    fixmatch: {algorithm: {name: fixmatch}}
    mutexmatch: {algorithm: {name: mutexmatch}}
"""
# The report's YAML: a second axis for the table's columns.
REPORT_YAML = SWEEP_YAML + """  setting:
    d20: {}
tables:
  - {id: main, caption: c, rows: method, columns: setting, metric: test/acc, protocol: best}
"""
CIFAR10_FILES = [*(f"data_batch_{i}" for i in range(1, 6)), "test_batch", "batches.meta"]
PNG_1PX = bytes.fromhex("89504e470d0a1a0a0000000d49484452000000010000000108000000003a7e9b55000000"
                        "0a49444154789c6360000000020001e221bc330000000049454e44ae426082")


# "Billion laughs": five levels of nine aliases, 242 bytes that expand to 74,738 values (a 343-byte one of the
# same shape took more than 3 GB); and four levels inside one field, small enough to build but huge to print.
BOMB = "".join(f"{b}: &{b} [{', '.join([f'*{a}'] * 9)}]\n" for a, b in zip("abcd", "bcde"))
BOMB = 'a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]\n' + BOMB
ECHO_BOMB = 'train: {seed: [&a [1, 1, 1, 1, 1, 1, 1, 1, 1], &b [*a, *a, *a, *a, *a, *a, *a, *a, *a], ' \
            '&c [*b, *b, *b, *b, *b, *b, *b, *b, *b], [*c, *c, *c, *c, *c, *c, *c, *c, *c]]}\n'
LARGE_YAML = "# a comment line of a large file\n" * 40_000  # 1.3 MB: over the 1 MiB a YAML config may have
# Issue 33's re-pass: a config listing more values than a config may hold without any alias (the alias fix does not
# apply), and --set values so large that echoing them whole made 60-120 KB error lines.
MANY_VALUES_YAML = "train:\n  seed: [" + ", ".join(["1"] * 20_001) + "]\n"
HUGE_LIST = "[" + ",".join(["1"] * 20_000) + "]"


def _sweep(*edits: tuple[str, str]) -> str:
    """SWEEP_YAML with textual replacements (the corpus is about text the user typed, so it is edited as text)."""
    text = SWEEP_YAML
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new, 1)
    return text


def _cifar_junk(t: Path) -> None:
    folder = t / "data" / "cifar10" / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    for name in CIFAR10_FILES:
        (folder / name).write_bytes(b"\x80junk" * 10)


class _Payload:
    """A pickle that writes a file when loaded (a crafted CIFAR ``batches.meta``); the snapshot sees the file."""

    def __reduce__(self):
        return (open, ("payload-ran", "w"))


def _cifar_cached_with_payload(t: Path) -> None:
    """Generated CIFAR-10 files (not the published ones) with a valid decoded cache, its meta file a payload."""
    import pickle

    from mutexmatch.data.fake import FakeSize, write_fake_root

    write_fake_root(t / "data", ["cifar10"], sizes={"cifar10": FakeSize(1, 1)})
    (t / "data" / "cifar10" / "cifar-10-batches-py" / "batches.meta").write_bytes(pickle.dumps(_Payload()))


def _imagefolder(t: Path, *, loose: bool = False, corrupt: bool = False) -> None:
    for split in ("train", "test"):
        for cls in ("a", "b"):
            (t / "photos" / split / cls).mkdir(parents=True)
            (t / "photos" / split / cls / "0.png").write_bytes(PNG_1PX)
    if loose:
        (t / "photos" / "train" / "loose.png").write_bytes(PNG_1PX)
    if corrupt:
        (t / "photos" / "train" / "a" / "1.png").write_bytes(b"\x89PNG\r\n\x1a\nnot really")


def _run_folder(t: Path, config: bytes | None) -> None:
    run = t / "outputs" / "run"
    run.mkdir(parents=True)
    (run / "run.json").write_text('{"mutexmatch_run": 1}')
    if config is not None:
        (run / "config.yaml").write_bytes(config)


def _not_a_run(t: Path) -> None:
    """A folder of the user's that is not a run: its own config.yaml and weights under checkpoints/."""
    (t / "mine" / "checkpoints").mkdir(parents=True)
    (t / "mine" / "config.yaml").write_text("notes: mine\n")
    (t / "mine" / "checkpoints" / "model_v1.bin").write_bytes(b"weights")


def _foreign_db(t: Path) -> None:
    """Another program's SQLite database: one table of its own, nothing of MLflow's."""
    with sqlite3.connect(t / "notes.db") as db:
        db.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT)")
        db.execute("INSERT INTO notes (text) VALUES ('mine')")


def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """torchvision's downloader as it behaves without network (no real request is ever made)."""
    import socket
    import urllib.error

    import torchvision.datasets.cifar

    def refuse(*args: object, **kwargs: object) -> None:
        raise urllib.error.URLError(socket.gaierror(-3, "Temporary failure in name resolution"))

    monkeypatch.setattr(torchvision.datasets.cifar, "download_and_extract_archive", refuse)


@dataclass(frozen=True)
class Case:
    id: str
    cli: str
    argv: tuple[str, ...]            # "{t}" stands for the case's folder
    expect: str                      # the part of the message that names the input ("{t}" as above)
    files: dict[str, bytes | str | None] = field(default_factory=dict)  # None: a folder
    setup: Callable[[Path], None] | None = None
    patch: Callable[[pytest.MonkeyPatch], None] | None = None
    owner: str | None = None         # the file whose owner fixes this case (xfail until then)
    store: bool = False              # start from a store holding one finished run (the report's cases)


def C(id: str, cli: str, argv: str, expect: str, **kw) -> Case:
    return Case(id, cli, tuple(argv.split()), expect, **kw)


T, S, R, D, ST = "train", "sweep", "report", "datasets", "status"
CASES = [
    # ---------------------------------------------------------------- mutexmatch.train: the run YAML
    C("train-config-missing", T, "--config {t}/nope.yaml", "--config '{t}/nope.yaml': file not found"),
    C("train-config-folder", T, "--config {t}/cfg", "'{t}/cfg': is a directory", files={"cfg": None}),
    C("train-config-empty", T, "--config {t}/r.yaml", "'{t}/r.yaml': is empty, expected a mapping of sections",
      files={"r.yaml": ""}),
    C("train-config-comments-only", T, "--config {t}/r.yaml", "'{t}/r.yaml': is empty",
      files={"r.yaml": "# data: {dataset: digits}\n"}),
    C("train-config-list", T, "--config {t}/r.yaml", "'{t}/r.yaml': top level is a list",
      files={"r.yaml": "- data\n- train\n"}),
    C("train-config-scalar", T, "--config {t}/r.yaml", "'{t}/r.yaml': top level is the int 42", files={"r.yaml": "42"}),
    C("train-config-binary", T, "--config {t}/r.png", "'{t}/r.png': is a binary file", files={"r.png": PNG_1PX}),
    C("train-config-latin1", T, "--config {t}/r.yaml", "'{t}/r.yaml': is not UTF-8 text",
      files={"r.yaml": b"data: {root: caf\xe9}\n"}),
    C("train-config-syntax", T, "--config {t}/r.yaml", "'{t}/r.yaml': not valid YAML at line 2, column 6",
      files={"r.yaml": "data: {dataset: digits\ntrain: {seed: 1}\n"}),
    C("train-config-tab", T, "--config {t}/r.yaml", "'{t}/r.yaml': not valid YAML at line 2, column 1",
      files={"r.yaml": "train:\n\tseed: 1\n"}),
    C("train-config-dup-section", T, "--config {t}/r.yaml", "duplicate key 'train' (first at line 2, again at line 3)",
      files={"r.yaml": RUN_YAML + "train: {seed: 3}\n"}),
    C("train-config-dup-field", T, "--config {t}/r.yaml", "duplicate key 'tau' (first at line 2, again at line 3)",
      files={"r.yaml": "algorithm:\n  tau: 0.9\n  tau: 0.5\n"}),
    C("train-config-two-documents", T, "--config {t}/r.yaml", "line 3, column 1: but found another document",
      files={"r.yaml": RUN_YAML + "---\n" + RUN_YAML}),
    C("train-config-python-tag", T, "--config {t}/r.yaml", "could not determine a constructor for the tag",
      files={"r.yaml": "output_dir: !!python/object/apply:os.getcwd []\n"}),
    C("train-config-alias-bomb", T, "--config {t}/r.yaml", "'{t}/r.yaml': holds 74,738 values once its aliases",
      files={"r.yaml": BOMB}),
    C("train-config-alias-echo", T, "--config {t}/r.yaml", "train.seed=[[1, 1, 1, 1, 1, 1, ...], [[1, 1, 1, 1, 1, 1, ...], [1, 1, 1, 1, 1, 1, ...], ...",
      files={"r.yaml": ECHO_BOMB}),
    C("train-config-too-large", T, "--config {t}/r.yaml", "'{t}/r.yaml': is 1.3 MiB, larger than the 1 MiB",
      files={"r.yaml": LARGE_YAML}),
    C("train-config-is-a-sweep", T, "--config {t}/s.yaml",
      "'{t}/s.yaml': is a sweep YAML (it has `axes:`), not a run config; run it with `python -m orchestration.sweep",
      files={"s.yaml": SWEEP_YAML}),
    C("train-config-unknown-section", T, "--config {t}/r.yaml", "trian: unknown key; allowed keys: data, model",
      files={"r.yaml": "trian: {seed: 1}\n"}),
    C("train-config-string-number", T, "--config {t}/r.yaml", "algorithm.tau='0.9'",
      files={"r.yaml": "algorithm: {tau: '0.9'}\n"}),
    # ---------------------------------------------------------------- mutexmatch.train: values
    C("train-tau-range", T, "--set algorithm.tau=1.5", "algorithm.tau=1.5: must be in (0, 1]"),
    C("train-seed-2^32", T, "--set train.seed=4294967296", "train.seed=4294967296: must be <= 4294967295"),
    C("train-seed-negative", T, "--set train.seed=-1", "train.seed=-1: must be >= 0"),
    C("train-labels-beyond-dataset", T, "--set data.num_labels=2000", "data.num_labels=2000: needs 200 labeled"),
    C("train-val-beyond-class", T, "--set data.val_per_class=200", "data.val_per_class=200: the smallest class"),
    C("train-labels-not-divisible", T, "--set data.num_labels=25", "data.num_labels=25: must be divisible by the 10"),
    C("train-set-no-equals", T, "--set algorithm.tau", "--set 'algorithm.tau': expected KEY=VALUE"),
    C("train-set-bad-yaml", T, "--set algorithm.tau=[0.9,", "--set 'algorithm.tau=[0.9,': the value is not valid"),
    C("train-set-octal", T, "--set train.seed=010", "--set 'train.seed=010': YAML 1.1 reads 010 as 8"),
    C("train-config-octal-seed", T, "--config {t}/r.yaml", "'{t}/r.yaml': line 1, column 15: YAML 1.1 reads 0755 as "
      "493; write the number you mean (or quote it, '0755', for text)", files={"r.yaml": "train: {seed: 0755}\n"}),
    C("train-set-sexagesimal", T, "--set train.iterations=1:00", "--set 'train.iterations=1:00': YAML 1.1 reads 1:00 "
      "as 60"),
    C("train-set-twice", T, "--set algorithm.tau=0.9 --set algorithm.tau=0.5", "--set 'algorithm.tau=0.5': "
      "algorithm.tau is already set by --set 'algorithm.tau=0.9'; give each key once"),
    C("train-unknown-dataset", T, "--set data.dataset=imagenet", "data.dataset='imagenet'"),
    C("train-unknown-backbone", T, "--set model.backbone=vit", "model.backbone='vit': unknown"),
    C("train-num-threads-huge", T, "--set train.num_threads=100000000000",
      "train.num_threads=100000000000: must be in [0, 1024]"),
    C("train-bad-device", T, "--set train.device=tpu", "train.device='tpu': must be `auto`"),
    C("train-image-size-range", T, "--set data.image_size=1024", "data.image_size=1024: must be null or in [8, 512]"),
    C("train-image-size-beyond-memory", T, "--set data.image_size=512", "data.image_size=512: digits needs",
      patch=lambda mp: mp.setattr("mutexmatch.training.memory._available_memory", lambda device: {"host": 100 << 20})),
    C("train-fixed-parameter", T, "--set algorithm.name=remixmatch --set algorithm.dist_align=false",
      "algorithm.dist_align=False: fixed at True by algorithm 'remixmatch'; leave it out"),
    C("train-fixed-parameter-of-a-variant", T,
      "--set algorithm.name=mutexmatch_rev_norm --set algorithm.lambda_sep=0.5",
      "algorithm.lambda_sep=0.5: fixed at 0.0 by algorithm 'mutexmatch_rev_norm'; leave it out"),
    Case("train-set-huge-value", T, ("--set", "algorithm.name=" + "x" * 120_000), "algorithm.name='xxxxxxxxxx"),
    Case("train-set-huge-list", T, ("--set", f"train.seed={HUGE_LIST}"),
         "holds 20,001 values, more than the 20,000 a config may have; a config lists settings, not data"),
    C("train-config-many-values", T, "--config {t}/r.yaml", "'{t}/r.yaml': holds 20,006 values, more than the 20,000",
      files={"r.yaml": MANY_VALUES_YAML}),
    Case("train-set-newline", T, ("--set", "output_dir={t}/o\nx"),
         "': the value holds the control character '\\n' at position"),
    C("train-field-of-other-algorithm", T, "--set algorithm.name=fixmatch --set algorithm.lambda_n=0.5",
      "algorithm.lambda_n=0.5: not used by algorithm 'fixmatch'"),
    C("train-stop-at-negative", T, "--stop-at -5", "argument --stop-at: must be a positive integer, got '-5'"),
    C("train-output-dir-empty", T, "--set output_dir=''", "output_dir='': must name the run's folder"),
    C("train-stop-at-not-int", T, "--stop-at soon", "argument --stop-at: must be a positive integer, got 'soon'"),
    C("train-data-root-missing", T, "--set data.dataset=cifar10 --set data.root={t}/nodata",
      "data.root='{t}/nodata': folder does not exist"),
    # ---------------------------------------------------------------- mutexmatch.train: data and run folders
    C("train-cifar-junk", T, "--set data.dataset=cifar10 --set data.root={t}/data",
      "cifar10: {t}/data/cifar10/cifar-10-batches-py/data_batch_1 does not match its published md5",
      setup=_cifar_junk),
    C("train-download-offline", T, "--set data.dataset=cifar10 --set data.root={t}/data --set data.download=true",
      "cifar10: data.download=true could not fetch the files", files={"data": None}, patch=_offline),
    C("train-imagefolder-loose-image", T, "--set data.dataset=imagefolder --set data.root={t}/photos "
      "--set data.num_labels=2", "photos/train/loose.png lies directly in train/",
      setup=lambda t: _imagefolder(t, loose=True)),
    C("train-resume-missing", T, "--resume {t}/gone", "--resume {t}/gone: directory not found"),
    C("train-resume-not-a-run", T, "--resume {t}/cfg", "--resume {t}/cfg: not a mutexmatch run directory",
      files={"cfg": None}),
    C("train-resume-with-config", T, "--resume {t}/outputs/run --config {t}/r.yaml", "do not pass --config",
      files={"r.yaml": RUN_YAML}, setup=lambda t: _run_folder(t, RUN_YAML.encode())),
    C("train-resume-config-broken", T, "--resume {t}/outputs/run", "config.yaml': not valid YAML at line 2, column 1",
      setup=lambda t: _run_folder(t, b"data: [digits\n")),
    C("train-resume-config-empty", T, "--resume {t}/outputs/run", "config.yaml': is empty",
      setup=lambda t: _run_folder(t, b"")),
    C("train-resume-config-dup", T, "--resume {t}/outputs/run", "duplicate key 'data'",
      setup=lambda t: _run_folder(t, b"data: {num_labels: 20}\ndata: {num_labels: 40}\n")),
    C("train-overwrite-not-a-run", T, "--set output_dir={t}/mine --overwrite",
      "output_dir='{t}/mine' holds what no run writes (checkpoints/model_v1.bin); --overwrite deletes only a run's "
      "own files", setup=_not_a_run),
    C("train-overwrite-users-config", T, "--set output_dir={t}/mine --overwrite",
      "output_dir='{t}/mine' holds run file names (config.yaml) but no run.json", files={"mine": None,
                                                                                        "mine/config.yaml": "a: 1\n"}),
    # ---------------------------------------------------------------- orchestration.sweep: the sweep YAML
    C("sweep-missing", S, "{t}/nope.yaml", "spec '{t}/nope.yaml': file not found"),
    C("sweep-folder", S, "{t}/exp", "spec '{t}/exp': is a directory", files={"exp": None}),
    C("sweep-empty", S, "{t}/s.yaml", "spec '{t}/s.yaml': is empty, expected a sweep YAML mapping",
      files={"s.yaml": ""}),
    C("sweep-list", S, "{t}/s.yaml", "spec '{t}/s.yaml': top level is a list", files={"s.yaml": "- name: x\n"}),
    C("sweep-binary", S, "{t}/s.yaml", "spec '{t}/s.yaml': is a binary file", files={"s.yaml": b"\x00\x01\x02"}),
    C("sweep-syntax", S, "{t}/s.yaml", "spec '{t}/s.yaml': not valid YAML at line 4, column 3",
      files={"s.yaml": _sweep(("base:\n", "base: [\n"))}),
    C("sweep-dup-level", S, "{t}/s.yaml", "duplicate key 'fixmatch' (first at line 8, again at line 9)",
      files={"s.yaml": _sweep(("    mutexmatch:", "    fixmatch:"))}),
    C("sweep-dup-axes", S, "{t}/s.yaml", "duplicate key 'axes' (first at line 6, again at line 10)",
      files={"s.yaml": SWEEP_YAML + "axes:\n  labels: {l20: {}}\n"}),
    C("sweep-dup-in-base", S, "{t}/s.yaml", "duplicate key 'data' (first at line 3, again at line 4)",
      files={"s.yaml": _sweep(("  train:", "  data:"))}),
    C("sweep-alias-bomb", S, "{t}/s.yaml --dry-run", "spec '{t}/s.yaml': holds 74,778 values once its aliases",
      files={"s.yaml": SWEEP_YAML + BOMB}),
    C("sweep-too-large", S, "{t}/s.yaml --dry-run", "spec '{t}/s.yaml': is 1.3 MiB",
      files={"s.yaml": SWEEP_YAML + LARGE_YAML}),
    C("sweep-is-a-run-config", S, "{t}/r.yaml",
      "spec '{t}/r.yaml': is a run config (sections data, train), not a sweep YAML; train it with `python -m "
      "mutexmatch.train --config", files={"r.yaml": RUN_YAML}),
    C("sweep-unknown-key", S, "{t}/s.yaml", "fold: unknown key", files={"s.yaml": SWEEP_YAML + "fold: [0]\n"}),
    C("sweep-no-axes", S, "{t}/s.yaml", "axes: required field is missing",
      files={"s.yaml": "name: corpus\nbase: {data: {dataset: digits}}\n"}),
    C("sweep-name-path", S, "{t}/s.yaml", "name='../x': must start with an ASCII letter or digit and use only ASCII "
      "letters, digits, `_`, `-`, `.`, `+` (it names a folder); '.' (U+002E) at position 1 is not allowed",
      files={"s.yaml": _sweep(("name: corpus", "name: ../x"))}),
    C("sweep-seed-plus-fold", S, "{t}/s.yaml", "train.seed=4294967295: fold 1 trains with train.seed + 1 = "
      "4294967296 (seed_per_fold), above the largest seed 4294967295",
      files={"s.yaml": _sweep(("mu: 2}", "mu: 2, seed: 4294967295}"))}),
    C("sweep-val-beyond-class", S, "{t}/s.yaml", "data.val_per_class=130: the smallest class of digits has 126",
      files={"s.yaml": _sweep(("{name: fixmatch}}", "{name: fixmatch}, data: {val_per_class: 130}}"))}),
    C("sweep-search-cells-empty", S, "{t}/s.yaml", "search.cells=[]: needs at least one partial cell",
      files={"s.yaml": SWEEP_YAML + "search: {cells: [], metric: val/acc, space: {algorithm.tau: {type: float, "
                                    "low: 0.5, high: 0.9}}}\n"}),
    C("sweep-search-test-metric", S, "{t}/s.yaml", "search.metric='test/acc': must be a validation metric",
      files={"s.yaml": SWEEP_YAML + "search: {metric: test/acc, space: {algorithm.tau: {type: float, low: 0.5, "
                                    "high: 0.9}}}\n"}),
    C("sweep-search-algorithm-name", S, "{t}/s.yaml --dry-run",   # issue 33: a 'fixmatch (tuned)' row ran UDA
      "search.space.algorithm.name: a cell's algorithm is its axis level's, and its refit row is named after it",
      files={"s.yaml": _sweep(("  data: {dataset: digits, num_labels: 20}",
                               "  data: {dataset: digits, num_labels: 20, val_per_class: 2}"))
             + "search: {metric: val/acc, cells: [{method: fixmatch}], n_trials: 2, space: {algorithm.name: {type: "
               "categorical, choices: [fixmatch, uda]}}}\n"}),
    C("sweep-level-switches-algorithm", S, "{t}/s.yaml --dry-run",
      "comp_rank (from base.algorithm, which every level inherits: move lambda_c into the levels that run comatch)",
      files={"s.yaml": _sweep(("  data: {dataset: digits, num_labels: 20}",
                               "  data: {dataset: digits, num_labels: 20}\n"
                               "  algorithm: {name: comatch, lambda_c: 2.0}"),
                              ("    fixmatch: {algorithm: {name: fixmatch}}\n", ""))}),
    C("sweep-owned-field", S, "{t}/s.yaml", "base.output_dir='x': set per trial by orchestration",
      files={"s.yaml": _sweep(("base:\n", "base:\n  output_dir: x\n"))}),
    C("sweep-folds-repeated", S, "{t}/s.yaml", "folds=[0, 0]: folds must be distinct",
      files={"s.yaml": _sweep(("folds: [0, 1]", "folds: [0, 0]"))}),
    C("sweep-bad-tau", S, "{t}/s.yaml", "algorithm.tau=2: must be in (0, 1]",
      files={"s.yaml": _sweep(("{name: fixmatch}", "{name: fixmatch, tau: 2}"))}),
    C("sweep-two-axes-set-one-field", S, "{t}/s.yaml --dry-run",
      "axes method and tau both set algorithm.tau: each level of tau silently replaces the value the other axis's "
      "level gives; set algorithm.tau on one axis only, or declare `axis_wins: {algorithm.tau: tau}`",
      files={"s.yaml": _sweep(("{name: fixmatch}}", "{name: fixmatch, tau: 0.5}}")) + "  tau:\n    t95: {algorithm: "
                                                                                     "{tau: 0.95}}\n"}),
    C("sweep-axis-wins-earlier", S, "{t}/s.yaml --dry-run", "axis_wins.algorithm.tau='method': levels merge in axis "
      "order, so tau (the last of method, tau) wins", files={"s.yaml": _sweep(("{name: fixmatch}}", "{name: fixmatch, "
      "tau: 0.5}}")) + "  tau:\n    t95: {algorithm: {tau: 0.95}}\naxis_wins: {algorithm.tau: method}\n"}),
    C("sweep-set-twice", S, "{t}/s.yaml --dry-run --set base.train.seed=1 --set base.train.seed=2",
      "--set 'base.train.seed=2': base.train.seed is already set by --set 'base.train.seed=1'",
      files={"s.yaml": SWEEP_YAML}),
    # Finding #20: a typo'd level made a new cell; YAML 1.1's octal trained seed 0755 as 493 (--set refused it)
    C("sweep-set-level-typo", S, "{t}/s.yaml --dry-run --set axes.method.fixmach.algorithm.tau=0.9",
      "--set 'axes.method.fixmach.algorithm.tau=0.9': axes.method has no level 'fixmach'; its levels: fixmatch, "
      "mutexmatch", files={"s.yaml": SWEEP_YAML}),
    C("sweep-octal-seed", S, "{t}/s.yaml --dry-run", "spec '{t}/s.yaml': line 4, column 72: YAML 1.1 reads 0755 as "
      "493; write the number you mean", files={"s.yaml": _sweep(("mu: 2}", "mu: 2, seed: 0755}"))}),
    C("sweep-null-level", S, "{t}/s.yaml --dry-run", "level method.mutexmatch: is null; give its settings, or {}",
      files={"s.yaml": _sweep(("{algorithm: {name: mutexmatch}}", "null"))}),
    C("sweep-level-trailing-newline", S, "{t}/s.yaml --dry-run", "level method.'fixmatch\\n': use ASCII letters, "
      "digits, `_`, `-`, `.`, `+`; '\\n' (U+000A) at position 9 is not allowed",
      files={"s.yaml": _sweep(("    fixmatch:", '    "fixmatch\\n":'))}),
    C("sweep-exclude-unknown-level", S, "{t}/s.yaml", "exclude[0].method='flexmatch': unknown level",
      files={"s.yaml": SWEEP_YAML + "exclude: [{method: flexmatch}]\n"}),
    C("sweep-max-concurrent-negative", S, "{t}/s.yaml --max-concurrent -1", "--max-concurrent",
      files={"s.yaml": SWEEP_YAML}),
    # Issue 33 (uni-level-dry, uni-expname, uni-name-homoglyph): é, 固 and a Cyrillic е are letters; the rule is ASCII
    C("sweep-axis-not-ascii", S, "{t}/s.yaml --dry-run", "axis 'méthode': use ASCII letters, digits, `_`, `-`, `.`, "
      "`+` (no `=` or `,`); 'é' (U+00E9) at position 2 is not allowed",
      files={"s.yaml": _sweep(("  method:", "  méthode:"))}),
    C("sweep-level-not-ascii", S, "{t}/s.yaml --dry-run", "level method.'固定': use ASCII letters, digits, `_`, `-`, "
      "`.`, `+`; '固' (U+56FA) at position 1 is not allowed", files={"s.yaml": _sweep(("    fixmatch:", "    固定:"))}),
    C("sweep-experiment-name-homoglyph", S, "{t}/s.yaml --experiment-name advswееp",
      "--experiment-name='advswееp': must start with an ASCII letter or digit and use only ASCII letters, digits, "
      "`_`, `-`, `.`, `+` (it names a folder); 'е' (U+0435) at position 6 is not allowed",
      files={"s.yaml": SWEEP_YAML}),
    C("sweep-experiment-name-escape", S, "{t}/s.yaml --experiment-name ../../escape", "--experiment-name",
      files={"s.yaml": SWEEP_YAML}),
    C("sweep-tracking-uri-not-a-db", S, "{t}/s.yaml --tracking-uri {t}/notes.db", "{t}/notes.db",
      files={"s.yaml": SWEEP_YAML, "notes.db": "not a database\n"}),
    C("sweep-search-storage-garbage", S, "{t}/s.yaml --dry-run", "search.storage='not a url': must be a database URL "
      "Optuna can open", files={"s.yaml": SWEEP_YAML + "search: {metric: val/acc, storage: not a url, space: "
                                                       "{algorithm.tau: {type: float, low: 0.5, high: 0.9}}}\n"}),
    C("sweep-search-storage-no-folder", S, "{t}/s.yaml --dry-run", "search.storage='sqlite:///gone/optuna.db': "
      "its folder {t}/gone does not exist", files={"s.yaml": SWEEP_YAML + "search: {metric: val/acc, storage: "
      "'sqlite:///gone/optuna.db', space: {algorithm.tau: {type: float, low: 0.5, high: 0.9}}}\n"}),
    C("sweep-storage-is-a-file", S, "{t}/s.yaml --dry-run --storage {t}/notes.txt",
      "--storage '{t}/notes.txt': is a file", files={"s.yaml": SWEEP_YAML, "notes.txt": "x"}),
    C("sweep-storage-bad-scheme", S, "{t}/s.yaml --storage ftp://host/tune", "--storage 'ftp://host/tune': unknown "
      "scheme 'ftp'", files={"s.yaml": SWEEP_YAML}),
    C("sweep-tracking-uri-memory", S, "{t}/s.yaml --dry-run --tracking-uri sqlite:///:memory:",
      "--tracking-uri='sqlite:///:memory:': an in-memory store is gone when the command ends", files={"s.yaml":
                                                                                                  SWEEP_YAML}),
    C("sweep-table-metric-typo", S, "{t}/s.yaml", "test/accc",
      files={"s.yaml": REPORT_YAML.replace("test/acc", "test/accc")}),
    # ---------------------------------------------------------------- reports.build
    C("report-missing", R, "{t}/nope.yaml", "'{t}/nope.yaml': file not found"),
    C("report-folder", R, "{t}/exp", "'{t}/exp': is a directory", files={"exp": None}),
    C("report-empty", R, "{t}/s.yaml", "'{t}/s.yaml'", files={"s.yaml": ""}),
    C("report-syntax", R, "{t}/s.yaml", "'{t}/s.yaml': not valid YAML at line 4, column 3",
      files={"s.yaml": _sweep(("base:\n", "base: [\n"))}),
    C("report-dup-level", R, "{t}/s.yaml", "'fixmatch'",
      files={"s.yaml": REPORT_YAML.replace("    mutexmatch:", "    fixmatch:")}),
    C("report-alias-bomb", R, "{t}/s.yaml", "'{t}/s.yaml': holds 74,",
      files={"s.yaml": REPORT_YAML + BOMB}),
    C("report-binary", R, "{t}/s.yaml", "'{t}/s.yaml': is a binary file", files={"s.yaml": b"\x00\x01"}),
    C("report-latin1", R, "{t}/s.yaml", "'{t}/s.yaml': is not UTF-8 text", files={"s.yaml": b"name: caf\xe9\n"}),
    C("report-store-not-a-db", R, "{t}/s.yaml --tracking-uri {t}/notes.db", "{t}/notes.db",
      files={"s.yaml": REPORT_YAML, "notes.db": "not a database\n"}),
    C("report-table-id-newline", R, "{t}/s.yaml", "'main\\n'",
      files={"s.yaml": REPORT_YAML.replace("id: main", 'id: "main\\n"')}),
    C("report-table-id-index", R, "{t}/s.yaml", "tables(index).id='index': the report writes its own index.md; "
      "choose another id", files={"s.yaml": REPORT_YAML.replace("id: main", "id: index")}),
    C("report-set-level-typo", R, "{t}/s.yaml --set axes.setting.d2O.data.num_labels=30",
      "axes.setting has no level 'd2O'; its levels: d20", files={"s.yaml": REPORT_YAML}),
    C("report-tracking-uri-memory", R, "{t}/s.yaml --tracking-uri sqlite:///:memory:",
      "--tracking-uri='sqlite:///:memory:': an in-memory store", files={"s.yaml": REPORT_YAML}),
    C("report-bad-format", R, "{t}/s.yaml --format md,docx", "docx", files={"s.yaml": REPORT_YAML}),
    C("report-bad-protocol", R, "{t}/s.yaml --protocol mean", "argument --protocol: invalid choice: 'mean'",
      files={"s.yaml": REPORT_YAML}),
    C("report-out-below-a-file", R, "{t}/s.yaml --tracking-uri {t}/mlflow.db --out {t}/notes.txt/report",
      "{t}/notes.txt", files={"s.yaml": REPORT_YAML, "notes.txt": "x"}, store=True),
    C("report-table-metric-typo", R, "{t}/s.yaml --tracking-uri {t}/mlflow.db", "test/accc",
      files={"s.yaml": REPORT_YAML.replace("test/acc", "test/accc")}, store=True),
    # ---------------------------------------------------------------- mutexmatch.datasets
    C("datasets-no-command", D, "", "choose a command: download, check or export"),
    C("datasets-unknown-dataset", D, "check imagenet --root {t}", "invalid choice: 'imagenet'"),
    C("datasets-cifar-missing", D, "check cifar10 --root {t}/data", "cifar10: dataset files not found under "
      "{t}/data/cifar10", files={"data": None}),
    C("datasets-cifar-junk", D, "check cifar10 --root {t}/data",
      "{t}/data/cifar10/cifar-10-batches-py/data_batch_1 does not match its published md5", setup=_cifar_junk),
    C("datasets-cifar-cached-junk-payload", D, "check cifar10 --root {t}/data",
      "{t}/data/cifar10/cifar-10-batches-py/data_batch_1 does not match its published md5 "
      "c99cafc152244af753f735de768cd75f (and 6 more file(s))", setup=_cifar_cached_with_payload),
    C("datasets-export-cached-junk-payload", D, "export cifar10 --root {t}/data --to {t}/out",
      "{t}/data/cifar10/cifar-10-batches-py/batches.meta does not match its published md5",
      setup=_cifar_cached_with_payload),
    C("datasets-download-offline", D, "download cifar10 --root {t}/data", "download cifar10: torchvision could not "
      "fetch", files={"data": None}, patch=_offline),
    C("datasets-download-no-downloader", D, "download miniimagenet --root {t}", "mini-ImageNet has no downloader"),
    C("datasets-image-size-zero", D, "check digits --root {t} --image-size 0", "--image-size"),
    C("datasets-image-size-huge", D, "check digits --root {t} --image-size 4096",
      "argument --image-size: must be an integer in [8, 512] (pixels), got '4096'"),
    C("datasets-native-size", D, "check cifar10 --root {t} --image-size 64", "must be its native 32"),
    C("datasets-imagefolder-empty", D, "check imagefolder --root {t}/photos", "photos/train is missing",
      files={"photos": None}),
    C("datasets-imagefolder-loose", D, "check imagefolder --root {t}/photos", "lies directly in train/",
      setup=lambda t: _imagefolder(t, loose=True)),
    C("datasets-imagefolder-corrupt", D, "check imagefolder --root {t}/photos",
      "photos/train/a/1.png is not a readable image", setup=lambda t: _imagefolder(t, corrupt=True)),
    C("datasets-export-no-target", D, "export digits --root {t}", "--to"),
    # Issue 33 item 10: an export inside the image folder it reads added the source's split folders as classes.
    C("datasets-export-inside-root", D, "export imagefolder --root {t}/photos --to {t}/photos/train/copy",
      "--to {t}/photos/train/copy lies inside the source folder --root {t}/photos",
      setup=lambda t: _imagefolder(t)),
    C("datasets-export-around-root", D, "export imagefolder --root {t}/photos --to {t} --overwrite",
      "--to {t} holds the source folder --root {t}/photos", setup=lambda t: _imagefolder(t)),
    C("datasets-check-fifo", D, "check imagefolder --root {t}/photos",
      "photos/train/a/9.png is not a regular file", setup=lambda t: (_imagefolder(t),
                                                                     os.mkfifo(t / "photos/train/a/9.png"))),
    C("datasets-imagefolder-link-above", D, "check imagefolder --root {t}/photos",
      "photos/train/a/up leads back to {t}/photos (a link loop)",
      setup=lambda t: (_imagefolder(t), (t / "photos" / "train" / "a" / "up").symlink_to(t / "photos"))),
    C("datasets-imagefolder-link-loop", D, "check imagefolder --root {t}/photos",
      "photos/train/a/again leads back to {t}/photos/train/a (a link loop); remove the link",
      setup=lambda t: (_imagefolder(t), (t / "photos" / "train" / "a" / "again").symlink_to(t / "photos" / "train" /
                                                                                             "a"))),
    # ---------------------------------------------------------------- orchestration.status
    C("status-missing", ST, "{t}/nope.yaml", "spec '{t}/nope.yaml': file not found"),
    C("status-empty", ST, "{t}/s.yaml", "spec '{t}/s.yaml': is empty", files={"s.yaml": "\n"}),
    C("status-dup-level", ST, "{t}/s.yaml", "duplicate key 'fixmatch' (first at line 8, again at line 9)",
      files={"s.yaml": _sweep(("    mutexmatch:", "    fixmatch:"))}),
    C("status-is-a-run-config", ST, "{t}/r.yaml", "is a run config (sections data, train)",
      files={"r.yaml": RUN_YAML}),
    C("status-no-store", ST, "{t}/s.yaml", "no MLflow store there", files={"s.yaml": SWEEP_YAML}),
    C("status-watch-zero", ST, "{t}/s.yaml --watch 0", "--watch=0", files={"s.yaml": SWEEP_YAML}),
    # Issue 26: pointed at someone else's database, sweep and status (documented as read-only) added MLflow's 65
    # tables to it, and status turned an empty file into an MLflow store.
    C("sweep-tracking-uri-foreign-db", S, "{t}/s.yaml --tracking-uri {t}/notes.db",
      "{t}/notes.db is an SQLite database but not an MLflow store", files={"s.yaml": SWEEP_YAML}, setup=_foreign_db),
    C("status-foreign-db", ST, "{t}/s.yaml --tracking-uri {t}/notes.db",
      "{t}/notes.db is an SQLite database but not an MLflow store", files={"s.yaml": SWEEP_YAML}, setup=_foreign_db),
    C("status-empty-file", ST, "{t}/s.yaml --tracking-uri {t}/empty.db", "{t}/empty.db is empty, not an MLflow store",
      files={"s.yaml": SWEEP_YAML, "empty.db": ""}),
    C("status-tracking-uri-memory", ST, "{t}/s.yaml --tracking-uri sqlite:///:memory:",
      "--tracking-uri='sqlite:///:memory:': an in-memory store", files={"s.yaml": SWEEP_YAML}),
    C("status-store-not-a-db", ST, "{t}/s.yaml --tracking-uri {t}/notes.db", "{t}/notes.db",
      files={"s.yaml": SWEEP_YAML, "notes.db": "not a database\n"}),
]


def _snapshot(root: Path) -> dict[str, object]:
    """Every path below ``root`` with its size (folders: None); an MLflow SQLite store by its number of runs."""
    seen: dict[str, object] = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.suffix == ".db" and path.is_file() and path.stat().st_size:
            try:
                with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
                    seen[rel] = ("runs", db.execute("SELECT count(*) FROM runs").fetchone()[0])
                continue
            except sqlite3.DatabaseError:
                pass  # not a database (a case's own junk file): compared by size
        seen[rel] = path.stat().st_size if path.is_file() else None
    return seen


def _make_store(t: Path, values: tuple[float, float] = (0.5, 0.6)) -> None:
    """``mlflow.db`` holding one FINISHED grid run of the corpus sweep's first cell, as a sweep logs it (its test
    accuracy ``values`` at steps 2 and 4)."""
    from mlflow.tracking import MlflowClient

    from orchestration import contract

    client = MlflowClient(f"sqlite:///{t / 'mlflow.db'}")
    exp = client.create_experiment("corpus", artifact_location=str(t / "artifacts"))
    levels = (("method", "fixmatch"), ("setting", "d20"))
    cid = contract.cell_id(levels)
    tags = contract.trial_tags(parent_run_id="p", kind=contract.KIND_GRID, cell_levels=levels, cell_id=cid, fold=0,
                               variant="grid", config_hash="h", commit="c", trial_id="t0", launch_id="l")
    run = client.create_run(exp, tags=tags, run_name=contract.trial_key(cid, 0))
    for step, value in zip((2, 4), values):  # what the report's default learning-curve figure reads too
        client.log_metric(run.info.run_id, "test/acc", value, step=step)
        client.log_metric(run.info.run_id, "train/pl_acc", value, step=step)
    client.set_terminated(run.info.run_id, "FINISHED")


@pytest.fixture(scope="module")
def store_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("store")
    _make_store(folder)
    return folder


def _prepare(case: Case, t: Path, store_template: Path | None) -> None:
    for name, content in case.files.items():
        path = t / name
        if content is None:
            path.mkdir(parents=True)
        elif isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    if case.setup is not None:
        case.setup(t)
    if store_template is not None:
        import shutil

        shutil.copytree(store_template, t, dirs_exist_ok=True)


def _in_process(main: Callable[[list[str]], int], argv: list[str]) -> int:
    """Run ``main(argv)`` as ``python -m`` would: SystemExit's code, or a traceback and status 1."""
    try:
        return main(argv)
    except SystemExit as exit_:
        if isinstance(exit_.code, str):
            print(exit_.code, file=sys.stderr)
            return 1
        return exit_.code or 0
    except Exception:  # noqa: BLE001 - exactly what the corpus guards against: shown as the user would see it
        traceback.print_exc()
        return 1


class _WouldStart(Exception):
    """Raised instead of starting Ray: a corpus case that gets that far has accepted bad input."""


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The case's folder as working directory; signal handlers and Ray's start restored or guarded."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    monkeypatch.setenv("TUNE_DISABLE_SIGINT_HANDLER", os.environ.get("TUNE_DISABLE_SIGINT_HANDLER", "0"))
    try:
        yield tmp_path
    finally:
        for s, h in handlers.items():
            signal.signal(s, h)


def _guard_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    import ray

    def refuse(*args: object, **kwargs: object) -> None:
        raise _WouldStart("ray.init: the sweep accepted this input and was about to start Ray")

    monkeypatch.setattr(ray, "init", refuse)


def _params() -> list:
    params = []
    for case in CASES:
        marks = [pytest.mark.xfail(strict=True, reason=f"owner: {case.owner}")] if case.owner else []
        params.append(pytest.param(case, id=case.id, marks=marks))
    return params


def _error_lines(err: str) -> list[str]:
    """The message lines of stderr: without argparse's usage block and Python warnings."""
    return [ln for ln in err.splitlines() if ln.strip() and not ln.startswith(("usage:", " "))
            and "Warning:" not in ln and not ln.startswith("warning:")]


@pytest.mark.parametrize("case", _params())
def test_bad_input_is_one_line_exit_2_and_nothing_written(case: Case, isolated: Path, monkeypatch, capsys,
                                                          request) -> None:
    t = isolated
    if importlib.util.find_spec(CLIS[case.cli][1]) is None:
        pytest.skip(f"{CLIS[case.cli][1]} does not exist yet")
    _prepare(case, t, request.getfixturevalue("store_template") if case.store else None)
    before = _snapshot(t)
    capsys.readouterr()  # what making the store printed
    if case.patch is not None:
        case.patch(monkeypatch)
    if case.cli == S:
        _guard_ray(monkeypatch)
    main = importlib.import_module(CLIS[case.cli][1]).main
    rc = _in_process(main, [a.replace("{t}", str(t)) for a in case.argv])
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    assert rc == 2, err
    assert case.expect.replace("{t}", str(t)) in err, err
    assert len(_error_lines(err)) == 1, err
    assert len(err) < 1000, f"{len(err):,} characters on stderr"  # an echoed value is bounded too
    assert _snapshot(t) == before


def test_the_corpus_covers_every_cli_with_sixty_cases() -> None:
    assert len(CASES) >= 60 and len({c.id for c in CASES}) == len(CASES)
    assert {c.cli for c in CASES} == set(CLIS)


# The real commands, as a user runs them: no in-process shortcut hides a traceback printed by the interpreter.
SUBPROCESS = [
    ("train", ["--config", "{t}/r.yaml"], {"r.yaml": RUN_YAML + "train: {seed: 3}\n"}, "duplicate key 'train'"),
    ("sweep", ["{t}/s.yaml"], {"s.yaml": SWEEP_YAML + "axes: {}\n"}, "duplicate key 'axes'"),
    ("datasets", ["check", "cifar10", "--root", "{t}/data"], {}, "does not match its published md5"),
]


@pytest.mark.slow  # a fresh interpreter importing torch per case (make test runs it; test-fast does not)
@pytest.mark.parametrize("cli, argv, files, expect", SUBPROCESS, ids=[s[0] for s in SUBPROCESS])
def test_the_real_command_line_refuses_in_one_line(cli, argv, files, expect, tmp_path) -> None:
    case = Case(f"{cli}-subprocess", cli, tuple(argv), expect, files=files,
                setup=_cifar_junk if cli == "datasets" else None)
    _prepare(case, tmp_path, None)
    before = _snapshot(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_USAGE_STATS_ENABLED": "0", "MLFLOW_DISABLE_TELEMETRY": "true"}
    proc = subprocess.run([sys.executable, "-m", CLIS[cli][0], *(a.replace("{t}", str(tmp_path)) for a in argv)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert "Traceback" not in proc.stderr and proc.returncode == 2, proc.stderr
    assert expect in proc.stderr and len(_error_lines(proc.stderr)) == 1, proc.stderr
    assert _snapshot(tmp_path) == before



def test_a_deleted_experiment_is_said_the_same_way_by_report_status_and_sweep(isolated, monkeypatch, capsys) -> None:
    # Issue 26: after the experiment was deleted, the next sweep restored it silently ("nothing to do") while
    # status and report called it missing. One rule now (contract.deleted_experiment), said by each.
    from mlflow.tracking import MlflowClient

    from orchestration import contract
    from orchestration.trial import tracking

    t = isolated
    _make_store(t)
    (t / "s.yaml").write_text(REPORT_YAML)
    uri = f"sqlite:///{t / 'mlflow.db'}"
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("corpus").experiment_id
    client.delete_experiment(exp)
    capsys.readouterr()
    said = contract.deleted_experiment("corpus", exp, uri)
    for cli in (R, ST):
        main = importlib.import_module(CLIS[cli][1]).main
        assert _in_process(main, [str(t / "s.yaml"), "--tracking-uri", str(t / "mlflow.db")]) == 2
        err = capsys.readouterr().err
        assert _error_lines(err) == [f"error: {said}"], err
    assert tracking.ensure_experiment(client, "corpus", uri) == exp
    assert capsys.readouterr().out == f"[sweep] {contract.deleted_experiment('corpus', exp, uri, restored=True)}\n"
    assert client.get_experiment(exp).lifecycle_stage == "active"



def test_a_report_over_runs_whose_metric_is_nan_says_so(isolated, capsys) -> None:
    # Issue 26: a cell whose finished runs logged only NaN (a diverged run) was reported as having no finished run.
    t = isolated
    _make_store(t, values=(float("nan"), float("nan")))
    (t / "s.yaml").write_text(REPORT_YAML)
    capsys.readouterr()
    main = importlib.import_module(CLIS[R][1]).main
    assert _in_process(main, [str(t / "s.yaml"), "--tracking-uri", str(t / "mlflow.db"), "--out", str(t / "out")]) == 0
    out = capsys.readouterr().out
    assert "1 finished run(s) whose test/acc is NaN: diverged?" in out, out
