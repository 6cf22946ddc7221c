"""What the golden-record generators share: the reference checkout named on their command line, with its commit, and
the per-step tensors stacked one per name (which keeps the stored file small)."""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path
from typing import Any

import torch


def reference_checkout(description: str, what: str) -> tuple[Path, str]:
    """The reference's folder (``what``: a checkout or export of which repository) and its commit: ``--commit`` for
    an export without .git, else ``git rev-parse HEAD``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("repo", type=Path, help=what)
    parser.add_argument("--commit", help="its commit, for an export without .git (else git rev-parse HEAD)")
    cli = parser.parse_args()
    commit = cli.commit or subprocess.run(["git", "-C", str(cli.repo), "rev-parse", "HEAD"], capture_output=True,
                                          text=True, check=True).stdout.strip()
    return cli.repo, commit


def stacked_parts(steps: list[dict[str, Any]], parts: tuple[str, ...] = ("grads", "buffers")) -> dict[str, Any]:
    """``{part: {name: the step tensors stacked}}`` for each of ``parts`` of the recorded steps."""
    return {part: {n: torch.stack([s[part][n] for s in steps]) for n in steps[0][part]} for part in parts}
