"""Warnings as the user of a command line reads them: one ``warning: ...`` line on stderr.

Python's own form (``.../mutexmatch/training/runfolder.py:181: RuntimeWarning: ...`` and then the source line) is written for
the developer of the code that warns. A user of ``python -m mutexmatch.train`` or ``python -m mutexmatch.datasets``
wants what happened and what was done about it, which is what our messages say. A library's warning keeps its
category and the place it points at on the same line: that is what one searches for to learn what it means.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from pathlib import Path

PREFIX = "warning: "
_PACKAGE = Path(__file__).resolve().parent


def format_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int) -> str:
    """One line: the message alone for a warning raised in this package, else with its category and origin."""
    text = PREFIX + " ".join(str(message).split())
    if _PACKAGE in Path(filename).resolve().parents:
        return text
    return f"{text} ({category.__name__} at {filename}:{lineno})"


def _formatted(message, category, filename, lineno, line=None) -> str:  # warnings.formatwarning's signature
    return format_warning(message, category, filename, lineno) + "\n"


@contextlib.contextmanager
def one_line_warnings() -> Iterator[None]:
    """Show the warnings raised inside as one line each (a command line's ``main`` runs under it).

    It replaces ``warnings.formatwarning``, not ``showwarning``: Python's display writes what the former returns to
    stderr, while a caller recording warnings (``catch_warnings(record=True)``, ``pytest.warns``) still receives
    them. The previous formatter comes back on exit, so a ``main`` called in-process leaves no trace."""
    previous = warnings.formatwarning
    warnings.formatwarning = _formatted
    try:
        yield
    finally:
        warnings.formatwarning = previous
