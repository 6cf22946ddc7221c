"""Generated malformed inputs to every command line (issue 33 item 1): no traceback, no hang, no silent success.

Where ``tests/test_bad_input_corpus.py`` checks each hand-written case's message word for word, this file checks a
property over inputs nobody listed, generated from the schemas themselves: every field of the run config and of
every registered algorithm's parameters given values of the wrong kind (on ``--set`` and in a ``--config`` file),
run and sweep YAMLs cut inside a mapping, every part of the sweep YAML replaced by a wrong kind, data folders with
what an image folder or a dataset's files must not hold, malformed numeric options and store URIs, and
``orchestration.submit``'s runtime environments. Each case runs its command line's ``main(argv)`` in this process
(a fresh Python per case would cost ~3 s here) under a timeout, and must end with:

- an exit status other than 0 (never a silent success: training, Ray and ``ray job submit`` are replaced by a
  sentinel that ends the case, so an accepted input is seen before any work);
- no ``Traceback`` and no ``failed unexpectedly`` line (:mod:`mutexmatch.cli`'s last resort means an input nobody
  foresaw: the wrapper keeps it from the user, this test does not let it pass);
- stderr's message in one line (argparse's usage block and warnings aside), bounded in length.

``test_the_fuzz_sees_a_reintroduced_traceback`` proves the check can fail; a few real ``python -m`` runs prove the
wrapper is what ``python -m`` runs.
"""

from __future__ import annotations

import importlib
import io
import os
import signal
import subprocess
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, get_args, get_origin

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
TIMEOUT_S = 30
CLIS = {"train": "mutexmatch.train", "datasets": "mutexmatch.datasets", "config": "mutexmatch.config.__main__",
        "fakedata": "mutexmatch.fakedata", "predict": "mutexmatch.predict", "sweep": "orchestration.sweep", "status": "orchestration.status",
        "submit": "orchestration.submit", "otrain": "orchestration.train", "report": "reports.build"}
RUN = {"data": {"dataset": "digits", "num_labels": 20},
       "train": {"iterations": 2, "eval_interval": 2, "batch_size": 4, "mu": 2}}
RUN_YAML = "data: {dataset: digits, num_labels: 20}\ntrain: {iterations: 2, eval_interval: 2, batch_size: 4, mu: 2}\n"
SWEEP_YAML = """name: fuzz
base: {data: {dataset: digits, num_labels: 20}, train: {iterations: 2, eval_interval: 2, batch_size: 4, mu: 2}}
folds: [0]
axes: {method: {fm: {algorithm: {name: fixmatch}}, mm: {algorithm: {name: mutexmatch}}}}
"""
PNG_1PX = bytes.fromhex("89504e470d0a1a0a0000000d49484452000000010000000108000000003a7e9b55000000"
                        "0a49444154789c6360000000020001e221bc330000000049454e44ae426082")
# A PNG header that claims 100,000 x 100,000 pixels: a decompression bomb unless refused before decoding.
PNG_HUGE = PNG_1PX[:16] + (100_000).to_bytes(4, "big") * 2 + PNG_1PX[24:]


@dataclass(frozen=True)
class Fuzz:
    id: str
    cli: str
    argv: tuple[str, ...]                       # "{t}" stands for the case's folder
    files: tuple[tuple[str, bytes | None], ...] = ()   # None: a folder
    setup: Callable[[Path], None] | None = None


class _Accepted(BaseException):
    """Raised where work would start: the input was accepted (a BaseException, so no handler of ours eats it)."""


class _Hung(BaseException):
    pass


# ---------------------------------------------------------------- the values of the wrong kind, by annotation
WRONG_ANY = ("{zz: 1}", "[[1], 2]")


def _wrong_values(annotation: Any) -> tuple[str, ...]:
    """Values no field of this type accepts (YAML text); a free-form string field gets only the wrong kinds."""
    args = get_args(annotation)
    if get_origin(annotation) is not None and type(None) in args:   # int | None and the like
        return _wrong_values(next(a for a in args if a is not type(None)))
    if annotation is bool:
        return (*WRONG_ANY, "maybe", "2")
    if annotation is int:
        return (*WRONG_ANY, "abc", "1.5", ".inf")
    if annotation is float:
        return (*WRONG_ANY, "abc", ".nan", ".inf")
    if args and all(isinstance(a, str) for a in args):              # a Literal's choices
        return (*WRONG_ANY, "no-such-choice")
    return WRONG_ANY


def _run_fields() -> list[tuple[str, Any]]:
    from mutexmatch.config import RunConfig

    fields = []
    for section, f in RunConfig.model_fields.items():
        sub = getattr(f.annotation, "model_fields", None)
        if sub is None:
            fields.append((section, f.annotation))
        else:
            fields += [(f"{section}.{name}", g.annotation) for name, g in sub.items() if section != "algorithm"]
    return fields


def _algorithm_fields() -> list[tuple[str, str, Any]]:
    from mutexmatch.algorithms import ALGORITHMS

    return [(name, field, f.annotation) for name, cls in sorted(ALGORITHMS.items())
            for field, f in cls.Params.model_fields.items() if field != "name"]


def _nested(dotted: str, value: Any) -> dict[str, Any]:
    out: dict[str, Any] = {k: dict(v) for k, v in RUN.items()}
    *parents, leaf = dotted.split(".")
    node = out
    for key in parents:
        node = node.setdefault(key, {})
    node[leaf] = value
    return out


def _cuts(text: str, step: int) -> list[str]:
    """Prefixes of ``text`` that end inside a ``{...}`` (so an unclosed mapping): never valid YAML."""
    out, depth = [], 0
    for i, ch in enumerate(text):
        depth += {"{": 1, "}": -1}.get(ch, 0)
        if depth > 0 and i % step == 0:
            out.append(text[:i + 1])
    return out


# ---------------------------------------------------------------- the generated cases, per input kind
def _config_cases() -> list[Fuzz]:
    cases = []
    for dotted, annotation in _run_fields():
        for i, value in enumerate(_wrong_values(annotation)):
            cases.append(Fuzz(f"train-set-{dotted}-{i}", "train", ("--set", f"{dotted}={value}")))
            if i % 2 == 0:
                text = yaml.safe_dump(_nested(dotted, yaml.safe_load(value)))
                cases.append(Fuzz(f"train-file-{dotted}-{i}", "train", ("--config", "{t}/r.yaml"),
                                  (("r.yaml", text.encode()),)))
    for algo, field, annotation in _algorithm_fields():
        value = _wrong_values(annotation)[2 if len(_wrong_values(annotation)) > 2 else 0]
        cases.append(Fuzz(f"train-algo-{algo}.{field}", "train",
                          ("--set", f"algorithm.name={algo}", "--set", f"algorithm.{field}={value}")))
    for i, text in enumerate(_cuts(RUN_YAML, 3)):
        cases.append(Fuzz(f"train-cut-{i}", "train", ("--config", "{t}/r.yaml"), (("r.yaml", text.encode()),)))
    return cases


SWEEP_WRONG = {
    "name": ("{zz: 1}", "''", "'a/b c'", "[x]"),
    "base": ("abc", "[]", "{zz: 1}", "{data: {dataset: nope}}", "{train: {iterations: 0}}"),
    "folds": ("abc", "[]", "[-1]", "{a: 1}", "[0.5]", "[x]"),
    "axes": ("abc", "[]", "{}", "{method: {}}", "{method: abc}", "{method: [fm]}", "{'a b': {x: {}}}"),
    "zz": ("1",),
}
LEVEL_WRONG = ("abc", "[1]", "{zz: 1}", "{algorithm: {name: nope}}", "{algorithm: {name: fixmatch, tau: 9}}",
               "{algorithm: {name: fixmatch, k: 3}}", "{train: {batch_size: 0}}", "{data: {num_labels: 7}}")


def _sweep_cases() -> list[Fuzz]:
    spec = yaml.safe_load(SWEEP_YAML)
    cases = []

    def add(cid: str, doc: Any, *extra: str) -> None:
        text = yaml.safe_dump(doc, sort_keys=False).encode()
        cases.append(Fuzz(cid, "sweep", ("{t}/s.yaml", "--dry-run", *extra), (("s.yaml", text),)))

    for key, values in SWEEP_WRONG.items():
        for i, value in enumerate(values):
            add(f"sweep-{key}-{i}", {**spec, key: yaml.safe_load(value)})
    for i, value in enumerate(LEVEL_WRONG):
        add(f"sweep-level-{i}", {**spec, "axes": {"method": {"fm": yaml.safe_load(value)}}})
    for dotted, annotation in _run_fields()[::2]:
        if dotted == "output_dir":
            continue
        value = _wrong_values(annotation)[-1]
        base = {**spec["base"], **_nested(dotted, yaml.safe_load(value))}
        add(f"sweep-base-{dotted}", {**spec, "base": base})
        cases.append(Fuzz(f"sweep-set-{dotted}", "sweep", ("{t}/s.yaml", "--dry-run", "--set",
                                                           f"base.{dotted}={value}"), (("s.yaml", SWEEP_YAML.encode()),)))
    for i, text in enumerate(_cuts(SWEEP_YAML, 9)):
        cases.append(Fuzz(f"sweep-cut-{i}", "sweep", ("{t}/s.yaml", "--dry-run"), (("s.yaml", text.encode()),)))
    for option in ("--n-trials", "--max-concurrent", "--max-failures", "--gpus"):
        for value in ("x", "-5", "1e3", ""):
            cases.append(Fuzz(f"sweep-option{option}={value}", "sweep", ("{t}/s.yaml", "--dry-run", option, value),
                              (("s.yaml", SWEEP_YAML.encode()),)))
    return cases


def _imagefolder(t: Path, layout: dict[str, bytes | None]) -> None:
    for name, content in layout.items():
        path = t / "photos" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if content is None:
            path.mkdir(exist_ok=True)
        else:
            path.write_bytes(content)


GOOD = {f"{s}/{c}/{i}.png": PNG_1PX for s in ("train", "test") for c in ("a", "b") for i in range(2)}
FOLDERS: dict[str, Callable[[Path], None]] = {
    "empty": lambda t: (t / "photos").mkdir(),
    "no-test": lambda t: _imagefolder(t, {k: v for k, v in GOOD.items() if k.startswith("train")}),
    "one-class": lambda t: _imagefolder(t, {k: v for k, v in GOOD.items() if "/a/" in k}),
    "class-is-file": lambda t: _imagefolder(t, {**GOOD, "train/c": b"x"}),
    "empty-class": lambda t: _imagefolder(t, {**GOOD, "train/c": None}),
    "loose-image": lambda t: _imagefolder(t, {**GOOD, "train/loose.png": PNG_1PX}),
    "zero-bytes": lambda t: _imagefolder(t, {**GOOD, "train/a/0.png": b""}),
    "text-as-png": lambda t: _imagefolder(t, {**GOOD, "train/a/0.png": b"hello"}),
    "truncated-png": lambda t: _imagefolder(t, {**GOOD, "train/a/0.png": PNG_1PX[:40]}),
    "huge-png": lambda t: _imagefolder(t, {**GOOD, "train/a/0.png": PNG_HUGE}),
    "hidden-only-class": lambda t: _imagefolder(t, {**GOOD, "train/c/.0.png": PNG_1PX}),
    "dangling-link": lambda t: (_imagefolder(t, GOOD), os.symlink(t / "gone.png", t / "photos/train/a/9.png")),
    "fifo": lambda t: (_imagefolder(t, GOOD), os.mkfifo(t / "photos/train/a/9.png")),
    "split-is-file": lambda t: _imagefolder(t, {**{k: v for k, v in GOOD.items() if k.startswith("train")},
                                                "test": b"x"}),
}


def _data_cases() -> list[Fuzz]:
    cases = []
    for name, setup in FOLDERS.items():
        cases.append(Fuzz(f"datasets-check-{name}", "datasets", ("check", "imagefolder", "--root", "{t}/photos"),
                          setup=setup))
        cases.append(Fuzz(f"train-imagefolder-{name}", "train", ("--set", "data.dataset=imagefolder", "--set",
                                                                  "data.root={t}/photos", "--set", "data.num_labels=2"),
                          setup=setup))
    for name in ("cifar10", "svhn"):
        for how, content in (("junk", b"\x80junk"), ("empty", b"")):
            cases.append(Fuzz(f"datasets-check-{name}-{how}", "datasets", ("check", name, "--root", "{t}/data"),
                              setup=lambda t, n=name, c=content: _builtin_files(t, n, c)))
    for argv in (("check",), ("check", "nope", "--root", "{t}"), ("export", "digits", "--root", "{t}"),
                 ("check", "digits", "--image-size", "x"),
                 ("check", "digits", "--image-size", "3"), ("frobnicate",), ("--nope",)):
        cases.append(Fuzz("datasets-" + "_".join(argv).replace("{t}", "T"), "datasets", argv))
    for argv in (("{t}/f", "--datasets", "nope"), ("{t}/f", "--datasets", ","), ("{t}/file", ),
                 ("{t}/f", "--test-per-class", "x"), ("{t}/f", "--test-per-class", "-1"), ()):
        cases.append(Fuzz("fakedata-" + "_".join(argv).replace("{t}/", ""), "fakedata", argv,
                          (("file", b"x"),)))
    cases += [Fuzz("config-nope", "config", ("--nope",)), Fuzz("config-extra", "config", ("--doc", "extra"))]
    weights = (("w.pt", b"not a checkpoint"), ("empty.pt", b""), ("dir.pt", None), ("r.yaml", RUN_YAML.encode()))
    for name in ("w.pt", "empty.pt", "dir.pt", "gone.pt", "r.yaml"):
        cases.append(Fuzz(f"predict-weights-{name}", "predict", ("--weights", f"{{t}}/{name}", "--images",
                                                                  "{t}/photos"), weights, FOLDERS["empty-class"]))
    for argv in (("--weights", "{t}/w.pt"), ("--images", "{t}"), ("--weights", "{t}/w.pt", "--images", "{t}",
                                                                  "--batch-size", "0")):
        cases.append(Fuzz("predict-" + "_".join(argv).replace("{t}/", ""), "predict", argv, weights))
    return cases


def _builtin_files(t: Path, name: str, content: bytes) -> None:
    """Every file a built-in dataset's reader needs, present with ``content`` (junk or nothing)."""
    from mutexmatch.data.builtin import DATASETS
    from mutexmatch.data.load import dataset_dir

    for rel, _md5 in DATASETS[name].files():
        path = dataset_dir(name, t / "data") / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)


URIS = ("ftp://127.0.0.1/x", "sqlite:///{t}/no/such/dir/x.db", "{t}/notes.db", "{t}/dir.db", "file:///{t}/none/x",
        "sqlite://", "mysql://u@127.0.0.1:1/x", "{t}/spec.yaml", "http://127.0.0.1:1", "x\x00y.db")
URI_FILES = (("notes.db", b"these are my notes, not a database\n"), ("dir.db", None), ("spec.yaml", SWEEP_YAML.encode()))


def _store_cases() -> list[Fuzz]:
    cases = []
    for i, uri in enumerate(URIS):
        cases += [Fuzz(f"status-uri-{i}", "status", ("{t}/spec.yaml", "--tracking-uri", uri), URI_FILES),
                  Fuzz(f"report-uri-{i}", "report", ("{t}/spec.yaml", "--tracking-uri", uri, "--out", "{t}/o"),
                       URI_FILES),
                  Fuzz(f"sweep-uri-{i}", "sweep", ("{t}/spec.yaml", "--tracking-uri", uri), URI_FILES),
                  Fuzz(f"otrain-uri-{i}", "otrain", ("--tracking-uri", uri, "--config", "{t}/r.yaml"),
                       (*URI_FILES, ("r.yaml", RUN_YAML.encode())))]
        if uri.startswith("http://"):
            cases = [c for c in cases if c.cli == "status" or not c.id.endswith(f"-{i}")]
        if "/no/such/dir/" in uri:  # a new store in a new folder is how a sweep or a run starts one: not malformed
            cases = [c for c in cases if c.cli not in ("sweep", "otrain") or not c.id.endswith(f"-{i}")]
    for option, value in (("--watch", "0"), ("--watch", "x"), ("--count", "0"), ("--count", "-2")):
        cases.append(Fuzz(f"status{option}={value}", "status", ("{t}/spec.yaml", option, value), URI_FILES))
    for value in ("5", "[]", '{"env_vars": 5}', '{"env_vars": ["A"]}', "not json", "{"):
        for form in ("split", "equals"):
            opt = ("--runtime-env-json", value) if form == "split" else (f"--runtime-env-json={value}",)
            cases.append(Fuzz(f"submit-renv-{form}-{value}", "submit", (*opt, "--", "python", "-V")))
    cases += [Fuzz("submit-no-entrypoint", "submit", ("--address", "http://127.0.0.1:1")),
              Fuzz("submit-empty-entrypoint", "submit", ("--",))]
    # issue 33's re-pass: Ray's CLI ended these in 49- and 107-line tracebacks after the wrapper had started it
    for i, opts in enumerate((("--address", "http://127.0.0.1:1"), ("--address=127.0.0.1:1",),
                              ("--address", "http://127.0.0.1:port"), ("--working-dir", "{t}/no/such/folder"))):
        cases.append(Fuzz(f"submit-unreachable-{i}", "submit", (*opts, "--", "python", "-V")))
    return cases


CASES = [*_config_cases(), *_sweep_cases(), *_data_cases(), *_store_cases()]


# ---------------------------------------------------------------- running one case
def _stop(*args: object, **kwargs: object) -> None:
    raise _Accepted("the input was accepted: work was about to start")


@pytest.fixture
def guarded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The case's folder as working directory; training, Ray and exec replaced by the sentinel."""
    import ray

    from mutexmatch.training.loop import Trainer

    monkeypatch.chdir(tmp_path)
    for var in ("MLFLOW_TRACKING_URI", "RAY_ADDRESS", "MUTEXMATCH_DEBUG"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(Trainer, "fit", _stop)
    monkeypatch.setattr(ray, "init", _stop)
    monkeypatch.setattr(os, "execvp", _stop)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGALRM)}
    try:
        yield tmp_path
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        for s, h in handlers.items():
            signal.signal(s, h)


def _on_alarm(signum: int, frame: object) -> None:
    raise _Hung(f"no answer within {TIMEOUT_S} s")


def run_case(case: Fuzz, t: Path, capfd: pytest.CaptureFixture[str]) -> tuple[str | None, int | None, str]:
    """Run ``case`` in folder ``t``; return (what is wrong or None, exit status, stderr)."""
    for name, content in case.files:
        (t / name).mkdir() if content is None else (t / name).write_bytes(content)
    if case.setup is not None:
        case.setup(t)
    main = importlib.import_module(CLIS[case.cli]).main
    capfd.readouterr()
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, TIMEOUT_S)
    rc, problem = None, None
    try:
        rc = main([a.replace("{t}", str(t)) for a in case.argv])
    except SystemExit as exit_:
        rc = exit_.code if isinstance(exit_.code, int) or exit_.code is None else 1
        if isinstance(exit_.code, str):
            print(exit_.code, file=sys.stderr)
    except _Accepted:
        problem = "silent success: the input was accepted and work was about to start"
    except _Hung as e:
        problem = f"hang: {e}"
    except Exception:  # noqa: BLE001 - what a user would see without the wrapper
        traceback.print_exc()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    err = capfd.readouterr().err
    return problem or _judge(rc, err), rc, err


def _judge(rc: int | None, err: str) -> str | None:
    if "Traceback" in err:
        return "traceback"
    if "failed unexpectedly" in err:
        return "an unforeseen exception (the wrapper's last resort)"
    if not rc:
        return "silent success: exit status 0"
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith(("usage:", " ", "warning:"))
             and "Warning:" not in ln and " INFO " not in ln]
    # One line (``error: …``, argparse's ``prog: error: …``); a sweep's validation says one line per failing cell
    # (``cell method=… fold 0: …``) after the first.
    first_ok = bool(lines) and (lines[0].startswith("error: ") or ": error: " in lines[0])
    if not first_ok or any(not ln.startswith("cell ") for ln in lines[1:]):
        return f"{len(lines)} message lines, not one saying 'error: ' (and one per cell)"
    if len(err) > 2000:
        return f"{len(err):,} characters on stderr"
    return None


# CI runs every case but two of every three of the two largest groups (about 400 inputs); the rest run in
# `make test-heavy`. A store address nobody answers (MLflow retries for ~2.5 s) is tried by `status` alone.
HEAVY_GROUPS = ("train-algo-", "train-set-")


def _params() -> list:
    out, seen = [], {g: 0 for g in HEAVY_GROUPS}
    for case in CASES:
        group = next((g for g in HEAVY_GROUPS if case.id.startswith(g)), None)
        heavy = group is not None and seen[group] % 3 != 0
        if group is not None:
            seen[group] += 1
        out.append(pytest.param(case, id=case.id, marks=[pytest.mark.heavy] if heavy else []))
    return out


@pytest.mark.parametrize("case", _params())
def test_malformed_input_is_refused_in_one_line(case: Fuzz, guarded: Path, capfd) -> None:
    problem, rc, err = run_case(case, guarded, capfd)
    assert problem is None, f"{problem} (exit status {rc}):\n{err[-3000:]}"


def test_the_fuzz_covers_every_command_line_with_300_inputs_in_ci() -> None:
    in_ci = [p.values[0] for p in _params() if not p.marks]
    assert len(in_ci) >= 300 and len({c.id for c in CASES}) == len(CASES), len(in_ci)
    assert {c.cli for c in in_ci} == set(CLIS)


def test_the_fuzz_sees_a_reintroduced_traceback(guarded: Path, capfd, monkeypatch) -> None:
    """The check can fail: an exception escaping a command (here the YAML reader's) is a traceback when the wrapper
    is off, and the wrapper's last-resort line when it is on; the fuzz refuses both."""
    import mutexmatch.config.files as files

    def broken(*args: object, **kwargs: object) -> None:
        raise KeyError("reintroduced")

    monkeypatch.setattr(files, "read_yaml_mapping", broken)
    case = next(c for c in CASES if c.id.startswith("train-file-"))
    problem, rc, err = run_case(case, guarded, capfd)
    assert problem == "an unforeseen exception (the wrapper's last resort)" and rc == 1, (problem, err)
    monkeypatch.setenv("MUTEXMATCH_DEBUG", "1")
    for path in guarded.iterdir():
        path.unlink()
    problem, rc, err = run_case(case, guarded, capfd)
    assert problem == "traceback" and "KeyError: 'reintroduced'" in err, (problem, err)


# The real command lines: the wrapper is what `python -m` runs (a fresh interpreter each, ~3-7 s here). A
# sitecustomize on PYTHONPATH (imported by Python at start-up) breaks the one YAML reader before the command runs.
# One in CI (a fresh Python importing torch: 10-60 s on the loaded 2-core CI machine), the rest heavy.
REAL = [pytest.param("mutexmatch.train", ["--config", "r.yaml"], False, id="train"),
        pytest.param("mutexmatch.train", ["--config", "r.yaml"], True, id="train-debug", marks=pytest.mark.heavy),
        pytest.param("reports.build", ["s.yaml", "--out", "o"], False, id="report",  # through the contract
                     marks=pytest.mark.heavy),
        pytest.param("orchestration.status", ["s.yaml"], False, id="status", marks=pytest.mark.heavy)]


@pytest.mark.slow
@pytest.mark.parametrize("module, argv, debug", REAL)
def test_python_m_ends_an_unforeseen_error_in_one_line_and_shows_it_with_debug(module, argv, debug, tmp_path) -> None:
    (tmp_path / "r.yaml").write_text(RUN_YAML)
    (tmp_path / "s.yaml").write_text(SWEEP_YAML)
    (tmp_path / "plant").mkdir()
    (tmp_path / "plant" / "sitecustomize.py").write_text(
        "import mutexmatch.yamlfile as y\n"
        "def broken(*a, **k):\n    raise ZeroDivisionError('planted')\n"
        "y.read_yaml_mapping = broken\n")
    env = {**os.environ, "PYTHONPATH": f"{tmp_path / 'plant'}:{REPO}", "MLFLOW_DISABLE_TELEMETRY": "true",
           "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("MUTEXMATCH_DEBUG", None)
    proc = subprocess.run([sys.executable, "-m", module, *argv, *(["--debug"] if debug else [])], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr[-3000:]
    if debug:
        assert "Traceback" in proc.stderr and "ZeroDivisionError: planted" in proc.stderr, proc.stderr[-3000:]
    else:
        assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
        assert f"error: python -m {module} failed unexpectedly: ZeroDivisionError: planted" in proc.stderr
