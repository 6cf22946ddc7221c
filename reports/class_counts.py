"""A trial's class counts (``class_counts/step_<step>.json``: the pseudo- and complementary-label matrices the
trainer logs at each evaluation), read from its artifacts and summed over folds for the report's heat maps."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Iterable
from urllib.parse import urlparse
from urllib.request import url2pathname

import numpy as np

from orchestration import contract as C

__all__ = ["load_class_counts", "sum_class_counts"]


def _local_dir(artifact_uri: str) -> Path | None:
    """The folder behind a ``file:`` artifact URI (what an SQLite-backed sweep writes), else None."""
    parsed = urlparse(artifact_uri)
    if parsed.scheme == "file" and parsed.netloc in ("", "localhost"):
        return Path(url2pathname(parsed.path))
    return None


def _class_count_files(names: Iterable[str]) -> dict[int, str]:
    return {int(m.group(1)): name for name in names if (m := C.CLASS_COUNTS_FILE.match(name))}


def load_class_counts(artifact_uri: str, step: int | None = None, tracking_uri: str | None = None,
                      read_local: bool = True) -> dict:
    """A run's ``class_counts/step_<step:08d>.json`` (the last step when ``step`` is None) as a dict with ``step``,
    ``pseudo_label_counts`` and, for algorithms with a TNC, ``comp_label_counts`` (C×C lists, rows = true class).

    ``artifact_uri`` is the run's artifact root (the ``artifact_uri`` column of the trials frame). A ``file:`` root is
    a folder on this machine and is read as such (``read_local``; importing ``mlflow.artifacts`` alone takes 1-2 s);
    any other (``mlflow-artifacts:``, ``s3:`` …) goes through ``mlflow.artifacts``. Raises ``ValueError`` when there
    is no such file.
    """
    root = artifact_uri.rstrip("/")
    local = _local_dir(root) if read_local else None
    if local is not None:
        folder = local / C.CLASS_COUNTS_DIR
        files = _class_count_files(p.name for p in folder.iterdir() if p.is_file()) if folder.is_dir() else {}
    else:
        import mlflow.artifacts

        files = _class_count_files(Path(info.path).name for info in mlflow.artifacts.list_artifacts(
            artifact_uri=f"{root}/{C.CLASS_COUNTS_DIR}", tracking_uri=tracking_uri) if not info.is_dir)
    if not files:
        raise ValueError(f"{root}: has no class_counts/step_*.json artifact")
    chosen = max(files) if step is None else step
    if chosen not in files:
        raise ValueError(f"step={step}: {root} has class counts at steps {sorted(files)}")
    if local is not None:
        data = json.loads((local / C.CLASS_COUNTS_DIR / files[chosen]).read_text())
    else:
        with tempfile.TemporaryDirectory() as tmp:
            path = mlflow.artifacts.download_artifacts(artifact_uri=f"{root}/{C.CLASS_COUNTS_DIR}/{files[chosen]}",
                                                       dst_path=tmp, tracking_uri=tracking_uri)
            data = json.loads(Path(path).read_text())
    if "pseudo_label_counts" not in data:
        raise ValueError(f"{root}/{C.CLASS_COUNTS_DIR}/{files[chosen]}: lacks 'pseudo_label_counts'")
    return data


def sum_class_counts(artifact_uris: Iterable[str], step: int | None = None, tracking_uri: str | None = None
                     ) -> tuple[np.ndarray, np.ndarray | None, list[int]]:
    """Pseudo-label and complementary-label count matrices summed over runs (folds), and the step each came from.

    The complementary-label matrix is None when the runs have none (FixMatch and the other TNC-free algorithms).
    Summing counts (not averaging per-fold rates) weights every pseudo-labelled sample equally, as a heat map of
    one pooled run would.
    """
    pseudo: np.ndarray | None = None
    comp: np.ndarray | None = None
    steps: list[int] = []
    uris = list(artifact_uris)
    for i, uri in enumerate(uris):
        data = load_class_counts(uri, step, tracking_uri)
        p = np.asarray(data["pseudo_label_counts"], dtype=float)
        c = np.asarray(data["comp_label_counts"], dtype=float) if "comp_label_counts" in data else None
        if i and (c is None) != (comp is None):
            raise ValueError(f"{uri}: has {'no ' if c is None else ''}comp_label_counts, unlike {uris[0]}")
        if pseudo is not None and (p.shape != pseudo.shape or (c is not None and c.shape != comp.shape)):
            raise ValueError(f"{uri}: class-count matrices of shape {p.shape} differ from the other folds' "
                             f"{pseudo.shape}")
        pseudo = p if pseudo is None else pseudo + p
        comp = c if comp is None or c is None else comp + c
        steps.append(int(data.get("step", -1)))
    if pseudo is None:
        raise ValueError("class counts: no run given")
    return pseudo, comp, steps
