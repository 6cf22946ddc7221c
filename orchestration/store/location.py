"""Where a SQLite store's artifacts go, checked before anything is written (issue 34: ``cp -r A B`` and a run logged
to ``B/mlflow.db`` wrote its weights into ``A/mlruns``, silently; issue 40: its models too, through MLflow's Default
experiment).

MLflow records absolute artifact locations: each experiment's (``<store folder>/mlruns``, as
:func:`orchestration.trial.tracking.artifact_location` gives it, as a ``file:`` URI; MLflow's Default experiment
``<working directory of the process that made the store>/mlruns/0``, a plain path), each run's and each logged
model's under them. A store whose recorded local location lies outside its own folder was copied or moved (or made
from another working directory). Each such location is handled before anything is written:

- it is under a folder named ``mlruns`` whose copy is in the store's own ``mlruns`` (``cp -r`` of the project):
  every location recorded under the old ``mlruns`` (experiments, runs, logged models, reused-run tags; ``file:``
  URIs and plain paths alike) is moved to the copy's, and the command says so;
- it is the Default experiment's and that holds no run and no model: it is pinned to the store's own ``mlruns/0``,
  nothing said (nothing moves; an experiment of the user's choosing keeps its location or is refused);
- otherwise the command refuses, naming the copy that fixes it."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable
from urllib.parse import unquote, urlparse

from orchestration import contract as C
from orchestration.store.default_models import DEFAULT_ID, adopt_trial_models

__all__ = ["ARTIFACT_DIR", "ForeignArtifacts", "foreign_locations", "check_artifact_home"]

ARTIFACT_DIR = "mlruns"     # beside mlflow.db: where a SQLite store's artifacts live


class ForeignArtifacts(ValueError):
    """The store records artifact locations outside its folder and cannot move them to its own."""


@dataclass
class _Moved:
    """What a relocation changed, for the one line that says it."""

    runs: int = 0
    models: int = 0
    roots: set[Path] = field(default_factory=set)
    tried: set[str] = field(default_factory=set)
    pinned: set[str] = field(default_factory=set)


def _local_path(location: str) -> Path | None:
    """The local path of a ``file:`` URI or of an absolute plain path (MLflow's Default experiment); None for another
    scheme (a server's, S3) or a relative path (relative to whichever process reads it: nothing to check)."""
    parsed = urlparse(location)
    if parsed.scheme == "file":
        return Path(unquote(parsed.path))
    return Path(location) if not parsed.scheme and location.startswith("/") else None


def _mlruns_root(path: Path) -> Path | None:
    """``path`` or its nearest ancestor named ``mlruns``: the folder a project copy brings along."""
    return next((p for p in (path, *path.parents) if p.name == ARTIFACT_DIR), None)


def foreign_locations(db: sqlite3.Connection, folder: Path) -> dict[str, list[tuple[str, str]]]:
    """Artifact location (local, outside ``folder``) → the (id, name) of the experiments recorded with it."""
    found: dict[str, list[tuple[str, str]]] = {}
    for exp_id, name, location in db.execute("SELECT experiment_id, name, artifact_location FROM experiments"):
        path = _local_path(location or "")
        if path is not None and not path.resolve().is_relative_to(folder.resolve()):
            found.setdefault(location, []).append((str(exp_id), name))
    return found


def _locations(db: sqlite3.Connection) -> dict[str, tuple[str, str]]:
    """Experiment id → (name, recorded artifact location)."""
    rows = db.execute("SELECT experiment_id, name, artifact_location FROM experiments")
    return {str(i): (name, location) for i, name, location in rows}


def _tables(db: sqlite3.Connection) -> set[str]:
    return {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def _holds_anything(db: sqlite3.Connection, exp_ids: list[str]) -> bool:
    marks = ",".join("?" * len(exp_ids))
    if db.execute(f"SELECT 1 FROM runs WHERE experiment_id IN ({marks}) LIMIT 1", exp_ids).fetchone():
        return True
    return "logged_models" in _tables(db) and db.execute(
        f"SELECT 1 FROM logged_models WHERE experiment_id IN ({marks}) LIMIT 1", exp_ids).fetchone() is not None


def _relocate(db: sqlite3.Connection, old: str, new: str) -> tuple[int, int]:
    """Every recorded location equal to ``old`` or under it moved under ``new`` (compared as text, not with LIKE,
    whose ``_`` and ``%`` a folder name may hold); the numbers of runs and logged models moved."""
    cut = len(old) + 1
    under = "({col} = ? OR substr({col}, 1, ?) = ?)"
    args = (old, cut, old + "/")

    def move(table: str, col: str, extra: str = "", extra_args: tuple = ()) -> int:
        return db.execute(f"UPDATE {table} SET {col} = ? || substr({col}, ?) WHERE {under.format(col=col)}{extra}",
                          (new, cut, *args, *extra_args)).rowcount

    move("experiments", "artifact_location")
    runs = move("runs", "artifact_uri")
    move("tags", "value", " AND key = ?", (C.REUSED_ARTIFACT_URI,))
    models = move("logged_models", "artifact_location") if "logged_models" in _tables(db) else 0
    return runs, models


def _spellings(root: Path, home: Path) -> list[tuple[str, str]]:
    """(old, new) prefixes of the ways a location under ``root`` is recorded: a plain path or a ``file:`` URI."""
    return [(str(root), str(home)), (root.as_uri(), home.as_uri()), (f"file:{root}", home.as_uri())]


def _handle(db: sqlite3.Connection, location: str, exps: list[tuple[str, str]], home: Path, tracking_uri: str,
            moved: _Moved) -> None:
    """One foreign location: moved with its ``mlruns`` (a copy), pinned (nothing in it), or refused."""
    path, names = _local_path(location), [name for _, name in exps]
    root = _mlruns_root(path)
    target = home / (path.relative_to(root) if root is not None else exps[0][0])
    if root is not None and target.is_dir() and location not in moved.tried:
        for old, new in _spellings(root, home.resolve()):
            runs, models = _relocate(db, old, new)
            moved.runs, moved.models = moved.runs + runs, moved.models + models
        moved.roots.add(root)
        moved.tried.add(location)
    elif [i for i, _ in exps] == [DEFAULT_ID] and not _holds_anything(db, [DEFAULT_ID]):
        moved.pinned.update(i for i, _ in exps)
        db.execute("UPDATE experiments SET artifact_location = ? WHERE artifact_location = ?",
                   (target.resolve().as_uri(), location))
    else:
        fix = f"cp -r {path} {target}" if target == home else f"mkdir -p {home} && cp -r {path} {target}"
        raise ForeignArtifacts(
            f"{tracking_uri}: experiment(s) {', '.join(map(repr, names))} keep their artifacts in {path}, outside "
            f"this store's folder (a copied or moved store); new files would go there. Copy that folder beside the "
            f"store ({fix}) and run again (locations are then moved to {home}), or use the store that folder "
            f"belongs to")


def check_artifact_home(tracking_uri: str, say: Callable[[str], None] = print) -> None:
    """For a SQLite store: every local artifact location it records lies in its folder, or is moved there (said
    through ``say``) or pinned there (see the module's rules); else :class:`ForeignArtifacts` naming the fix. Trial
    models an earlier version left in the Default experiment move to their runs'
    (:func:`orchestration.store.default_models.adopt_trial_models`). Other stores (a server) choose their own
    locations: nothing to check."""
    if not tracking_uri.startswith("sqlite:///") or tracking_uri.startswith("sqlite:///:memory:"):
        return
    path = Path(tracking_uri[len("sqlite:///"):].partition("?")[0])
    if not path.is_file():
        return
    home, moved = path.parent / ARTIFACT_DIR, _Moved()
    with sqlite3.connect(path, timeout=30) as db:
        if not db.execute("SELECT 1 FROM sqlite_master WHERE name = 'experiments'").fetchone():
            return
        # first: trial models out of Default, which then may be empty (pinned, not refused: their files stay where
        # they are). One location at a time: moving an ``mlruns`` moves every location under it (a location still
        # foreign after its move was recorded in a spelling not known here: refused rather than left outside)
        adopted = adopt_trial_models(db)
        before = _locations(db)
        while found := foreign_locations(db, path.parent):
            location, exps = next(iter(found.items()))
            _handle(db, location, exps, home, tracking_uri, moved)
        names = [name for i, (name, loc) in _locations(db).items() if loc != before[i][1] and i not in moved.pinned]
    if moved.roots:
        roots = ", ".join(sorted(map(str, moved.roots)))
        say(f"[mlflow] {path} was copied or moved from {', '.join(sorted(str(r.parent) for r in moved.roots))}: "
            f"the artifact locations of experiment(s) {', '.join(map(repr, names))}, {moved.runs} run(s) and "
            f"{moved.models} logged model(s) now point to {home} (the copy's own), so nothing is written into "
            f"{roots}")
    if adopted:
        say(f"[mlflow] {path}: {adopted} trial model(s) that an earlier version logged into MLflow's Default "
            f"experiment moved to their runs' experiments (runs:/<run id>/model and the run pages find them)")
