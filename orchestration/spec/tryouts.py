"""Try-outs: the trials of a ``--set`` launch whose config the sweep YAML alone does not plan (issue 34).

``--set optim.lr=0.1`` on a YAML is a try-out of other settings: its runs carry other config hashes, so the report
and the counted MLflow view of the YAML's own settings never take them (:mod:`orchestration.contract.counted`). Their
run names say so (:func:`orchestration.contract.trial_run_name`'s ``tryout``), so a person reading the run list
tells them from the YAML's real runs, which used to carry the same names. A ``--set`` that changes no trial's config
(``base.data.root``, ``resources.gpu``) is no try-out: its trials are the YAML's own, by config hash."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Sequence

from mutexmatch.dotted import flatten_dotted

from orchestration.contract import KIND_REFIT
from orchestration.spec.models import SpecError
from orchestration.spec.overrides import load_sweep, plan_sweep
from orchestration.spec.plan import GridTrial, SweepPlan

__all__ = ["yaml_plan", "tryout_keys"]


def yaml_plan(path: str | Path, project_dir: str | Path, overrides: Sequence[str], smoke: bool = False
              ) -> SweepPlan | None:
    """The plan of the sweep YAML at ``path`` without ``overrides``: what its real runs are. None when there is no
    ``--set`` (nothing is a try-out), for a smoke launch (named ``· smoke`` already) or when the YAML alone does not
    load (a YAML completed only by ``--set`` has no runs of its own to tell apart)."""
    if not overrides or smoke:
        return None
    try:
        return plan_sweep(load_sweep(path, project_dir, (), need_data=False), project_dir)
    except (SpecError, ValueError):
        return None


def tryout_keys(own: SweepPlan | None, trials: Iterable[GridTrial], space: Iterable[str] = ()) -> frozenset[str]:
    """The keys of ``trials`` (grid or refit trials of a launch) that are try-outs: no config hash in common with the
    trial of the same key in ``own`` (:func:`yaml_plan`). A refit trial is compared with ``own``'s refit slot given
    the same searched values (``space``: the dotted config paths the search sets), so a try-out of the refit's base
    is one while the search's best parameters are not."""
    if own is None:
        return frozenset()
    grid = {t.key: t.hashes for t in own.grid}
    slots = {s.key: s for s in own.refits}
    found = set()
    for t in trials:
        if t.kind == KIND_REFIT:
            slot, values = slots.get(t.key), flatten_dotted(t.config)
            mine = slot.trial({p: values[p] for p in space if p in values}).hashes if slot else frozenset()
        else:
            mine = grid.get(t.key, frozenset())
        if not t.hashes & mine:
            found.add(t.key)
    return frozenset(found)
