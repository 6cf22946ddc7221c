"""``python -m mutexmatch.train``: train one run (``--help`` for the options).

The command line's face only; what it does is :mod:`mutexmatch.training.command` and the trainer is the
:mod:`mutexmatch.training` package.
"""

from __future__ import annotations

from mutexmatch.cli import entry_point
from mutexmatch.training import command

main = entry_point("python -m mutexmatch.train")(command.main)

__all__ = ["main"]

if __name__ == "__main__":
    raise SystemExit(main())
