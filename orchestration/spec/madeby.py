"""Files a sweep's trials read that a command of the project makes (the sweep YAML's ``made_by``), and the weight
file a trial starts from (``model.pretrained``) resolved against the project folder.

A weight file trained by the project itself (experiments/transfer_cpu.yaml's, issue 42 item 5) is not in the
repository: the YAML names it relative to the project and says, in ``made_by``, which command makes it. A missing one
is refused before any work in one line naming that command, instead of the bare "no such file" of every trial's
config. A relative ``model.pretrained`` is resolved against the project folder, as ``data.root`` is: trials run in
Ray's temporary folder, and a launch from another folder must read the same file.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any


def project_file(path: str | Path, project_dir: Path) -> Path:
    """``path`` made absolute against ``project_dir`` (an absolute or ``~`` path is kept)."""
    path = Path(path).expanduser()
    return path if path.is_absolute() else (project_dir / path).resolve()


def with_project_pretrained(raw: dict[str, Any], project_dir: Path) -> dict[str, Any]:
    """The trial config ``raw`` with a relative ``model.pretrained`` made absolute against ``project_dir`` (any
    other value is left for the RunConfig validation to name)."""
    model = raw.get("model")
    if isinstance(model, dict) and isinstance(model.get("pretrained"), str):
        raw["model"] = {**model, "pretrained": str(project_file(model["pretrained"], project_dir))}
    return raw


def missing_made_files(made_by: dict[str, str], project_dir: Path) -> list[str]:
    """One line per ``made_by`` file that is not under ``project_dir``, naming the command that makes it."""
    return [f"made_by.{path}: no such file ({project_file(path, project_dir)}); make it first with: {command}"
            for path, command in made_by.items() if not project_file(path, project_dir).is_file()]
