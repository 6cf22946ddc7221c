"""Where a SQLite store's artifacts go, checked before anything is written (issue 34: ``cp -r A B`` and a run logged
to ``B/mlflow.db`` wrote its weights into ``A/mlruns``, silently).

MLflow records absolute artifact locations: each experiment's (``<store folder>/mlruns``, as
:func:`orchestration.trial.tracking.artifact_location` gives it) and each run's under it. A store whose recorded
location lies outside its own folder was copied or moved. When the copy brought its ``mlruns`` folder along (``cp -r``
of the project), every recorded location under the old ``mlruns`` is moved to the copy's, and the command says so;
otherwise it refuses, naming the fix, before anything is written."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Callable
from urllib.parse import unquote, urlparse

from orchestration import contract as C

__all__ = ["ARTIFACT_DIR", "ForeignArtifacts", "foreign_locations", "check_artifact_home"]

ARTIFACT_DIR = "mlruns"     # beside mlflow.db: where a SQLite store's artifacts live


class ForeignArtifacts(ValueError):
    """The store records artifact locations outside its folder and cannot move them to its own."""


def _file_path(uri: str) -> Path | None:
    """The local path of a ``file:`` URI (None for another scheme)."""
    parsed = urlparse(uri)
    return Path(unquote(parsed.path)) if parsed.scheme == "file" else None


def foreign_locations(db: sqlite3.Connection, folder: Path) -> dict[str, list[str]]:
    """Artifact location (a ``file:`` URI outside ``folder``) → the names of the experiments recorded with it."""
    found: dict[str, list[str]] = {}
    for name, location in db.execute("SELECT name, artifact_location FROM experiments"):
        path = _file_path(location or "")
        if path is not None and not path.resolve().is_relative_to(folder.resolve()):
            found.setdefault(location, []).append(name)
    return found


def _relocate(db: sqlite3.Connection, old: str, new: str) -> int:
    """Every recorded location under ``old`` moved under ``new``; the number of runs moved."""
    cut = len(old) + 1
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    db.execute("UPDATE experiments SET artifact_location = ? WHERE artifact_location = ?", (new, old))
    moved = db.execute("UPDATE runs SET artifact_uri = ? || substr(artifact_uri, ?) WHERE artifact_uri = ? OR "
                       "artifact_uri LIKE ? || '/%'", (new, cut, old, old)).rowcount
    db.execute("UPDATE tags SET value = ? || substr(value, ?) WHERE key = ? AND value LIKE ? || '/%'",
               (new, cut, C.REUSED_ARTIFACT_URI, old))
    if "logged_models" in tables:  # MLflow 3's logged models record their own location
        db.execute("UPDATE logged_models SET artifact_location = ? || substr(artifact_location, ?) WHERE "
                   "artifact_location LIKE ? || '/%'", (new, cut, old))
    return moved


def check_artifact_home(tracking_uri: str, say: Callable[[str], None] = print) -> None:
    """For a SQLite store: every artifact location it records lies in its folder, or is moved there when the
    copy's own ``mlruns`` holds the artifacts (said through ``say``); else :class:`ForeignArtifacts` naming the fix.
    Other stores (a server) choose their own locations: nothing to check."""
    if not tracking_uri.startswith("sqlite:///") or tracking_uri.startswith("sqlite:///:memory:"):
        return
    path = Path(tracking_uri[len("sqlite:///"):].partition("?")[0])
    if not path.is_file():
        return
    home = path.parent / ARTIFACT_DIR
    with sqlite3.connect(path, timeout=30) as db:
        if not db.execute("SELECT 1 FROM sqlite_master WHERE name = 'experiments'").fetchone():
            return
        for old, names in foreign_locations(db, path.parent).items():
            old_path = _file_path(old)
            if old_path is None or old_path.name != ARTIFACT_DIR or not home.is_dir():
                raise ForeignArtifacts(
                    f"{tracking_uri}: experiment(s) {', '.join(map(repr, names))} keep their artifacts in {old}, "
                    f"outside this store's folder (a copied or moved store); new weights would go there. Copy that "
                    f"folder beside the store (cp -r {old_path or old} {home}) and run again (locations are then "
                    f"moved to {home}), or use the store at {old_path.parent if old_path else old}")
            runs = _relocate(db, old, home.resolve().as_uri())
            say(f"[mlflow] {path} was copied or moved from {old_path.parent}: artifact locations of "
                f"{', '.join(map(repr, names))} and {runs} run(s) now point to {home} (the copy's own), so nothing "
                f"is written into {old_path}")
