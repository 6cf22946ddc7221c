"""How a command line ends on an error nobody foresaw (one line, ``--debug`` for the traceback), for the report.

Its one copy is the trainer's (:mod:`mutexmatch.cli`, standard library only), which may import nothing above it;
``reports`` reaches it only through the contract, ``orchestration`` imports it directly."""

from __future__ import annotations

from mutexmatch.cli import add_version, answer_early, entry_point

__all__ = ["entry_point", "add_version", "answer_early"]
