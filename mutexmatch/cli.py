"""How every command line ends on an error nobody foresaw: one line and a non-zero exit status, the traceback on
request (issue 33 item 1).

Each command line's ``main(argv)`` (``mutexmatch.train|datasets|config|fakedata``, ``orchestration.sweep|status|
submit|train``, ``reports.build``) is decorated with :func:`entry_point`. The errors a command foresees it says
itself (exit status 2, its own line); what escapes it is a defect of ours or a failure of the machine, and the user
still gets what failed, the input involved when it is known, and what to do, on one line of stderr:

    error: python -m mutexmatch.train failed unexpectedly: ZeroDivisionError: division by zero (input: r.yaml); ...

``--debug`` (anywhere before a ``--``) or ``MUTEXMATCH_DEBUG=1`` lets the exception through, so Python prints the
whole traceback. The one copy lives here, a leaf of the trainer importing only the standard library, so that
``orchestration`` imports it directly and ``reports`` through the contract (``orchestration.contract.cli``).
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

__all__ = ["DEBUG_ENV", "DEBUG_FLAG", "UNEXPECTED", "INTERRUPTED", "entry_point", "unexpected_error_line",
           "add_version", "version_line", "answer_early"]

DEBUG_ENV = "MUTEXMATCH_DEBUG"
DEBUG_FLAG = "--debug"
UNEXPECTED = 1      # 2 is the foreseen refusal of bad input; 1 says "not your input's fault, as far as we know"
INTERRUPTED = 130   # the shell's convention for Ctrl+C
_MAX_MESSAGE = 300  # characters of the exception's own text: a value echoed back must not flood the terminal

Main = TypeVar("Main", bound=Callable[..., int])


def _split_debug(argv: Sequence[str]) -> tuple[list[str], bool]:
    """``argv`` without ``--debug`` before the first ``--`` (after it, the words belong to another command)."""
    words = list(argv)
    cut = words.index("--") if "--" in words else len(words)
    head = [w for w in words[:cut] if w != DEBUG_FLAG]
    return head + words[cut:], len(head) < cut


def debug_requested(flag: bool = False) -> bool:
    return flag or os.environ.get(DEBUG_ENV, "").strip().lower() not in ("", "0", "false", "no")


def _input_of(err: BaseException, argv: Sequence[str]) -> str:
    """The input involved: the exception's file when it names one, else the command line's existing files."""
    for name in ("filename", "filename2", "path"):
        value = getattr(err, name, None)
        if isinstance(value, (str, os.PathLike)) and str(value):
            return str(value)
    files = []
    for word in argv:
        text = word.split("=", 1)[-1] if word.startswith("-") else word
        try:
            if text and len(text) < 4096 and Path(text).exists():
                files.append(text)
        except (OSError, ValueError):  # a name too long or with a NUL byte is not an existing file
            continue
    return ", ".join(files[:3])


def _what_to_do(err: BaseException) -> str:
    if isinstance(err, MemoryError):
        return "the machine ran out of memory: free memory or lower the sizes the input asks for"
    if isinstance(err, OSError):
        return "check that path (it exists, its permissions, free space) and run again"
    return (f"this is a bug: run again with {DEBUG_FLAG} (or {DEBUG_ENV}=1) for the traceback and report it with "
            "that output")


def unexpected_error_line(prog: str, err: BaseException, argv: Sequence[str] = ()) -> str:
    """The one line an unforeseen exception ends ``prog`` with: what failed, the input if known, what to do."""
    text = " ".join(str(err).split())
    if len(text) > _MAX_MESSAGE:
        text = text[:_MAX_MESSAGE] + f"… ({len(text):,} characters)"
    what = f"{type(err).__name__}: {text}" if text else type(err).__name__
    where = _input_of(err, argv)
    return (f"error: {prog} failed unexpectedly: {what}" + (f" (input: {where})" if where else "")
            + f"; {_what_to_do(err)}")


def entry_point(prog: str) -> Callable[[Main], Main]:
    """Decorate a command line's ``main(argv=None, ...)``: an exception it lets escape becomes one line on stderr
    and exit status :data:`UNEXPECTED` (Ctrl+C: ``error: interrupted``, :data:`INTERRUPTED`); ``SystemExit``
    (argparse's usage errors, ``--help``) passes unchanged, as does anything not an ``Exception``. With ``--debug``
    or ``MUTEXMATCH_DEBUG=1`` the exception propagates and Python prints its traceback."""
    def decorate(main: Main) -> Main:
        @functools.wraps(main)
        def guarded(argv: Sequence[str] | None = None, *args, **kwargs) -> int:
            words, flag = _split_debug(sys.argv[1:] if argv is None else argv)
            if debug_requested(flag):
                return main(words, *args, **kwargs)
            try:
                return main(words, *args, **kwargs)
            except KeyboardInterrupt:
                print("error: interrupted", file=sys.stderr)
                return INTERRUPTED
            except Exception as err:  # noqa: BLE001 - the point: whatever escapes ends in one line
                print(unexpected_error_line(prog, err, words), file=sys.stderr, flush=True)
                return UNEXPECTED
        return guarded  # type: ignore[return-value]
    return decorate


def version_line(prog: str) -> str:
    """``python -m mutexmatch.train (mutexmatch 0.1.0)``: the installed package's version (pyproject.toml's)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        installed = version("mutexmatch")
    except PackageNotFoundError:
        installed = "not installed: `pip install -e .` in the repository"
    return f"{prog} (mutexmatch {installed})"


class _Version(argparse.Action):
    """``--version``: the version read when asked, so a command's parser costs no package metadata scan."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help="print the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *args, **kwargs) -> None:
        print(version_line(parser.prog))
        parser.exit()


def add_version(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Every command's ``--version`` (issue 40 item 5: answered before anything heavy is imported)."""
    parser.add_argument("--version", action=_Version)
    return parser


def answer_early(parse: Callable[[list[str]], object]) -> None:
    """For a command whose module imports torch, Ray, MLflow or pandas at its top, called before those imports when
    it runs as ``python -m``: ``parse`` (the command's own parser over its words, ``--debug`` left out as
    :func:`entry_point` does) answers ``--help``, ``--version`` and a usage error there and exits (those imports
    took 13-20 s and ~0.9 GB at a load of 5, issue 40 item 5); a command line it accepts goes on, and ``main``
    parses it again."""
    parse(_split_debug(sys.argv[1:])[0])
