"""One cost figure (issue 24): README.md and experiments/README.md hold the paper's GPU-hours that
``experiments/paper_cost.py`` generates from the committed measurements (each YAML's own ``--dry-run`` estimate,
reuse of configurations shared across YAMLs counted); the test fails when either is stale."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _paper_cost():
    spec = importlib.util.spec_from_file_location("paper_cost", REPO / "experiments" / "paper_cost.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["paper_cost"] = module  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


def test_docs_hold_the_generated_cost_figure():
    pc = _paper_cost()
    generated = pc.generated()
    assert pc.current() == generated, "stale cost tables: run python experiments/paper_cost.py --write"
    costs, unit = pc.paper_costs()
    assert unit == "H200" and len(costs) == 13 and sum(c.trials for c in costs) == 870
    total = pc.format_hours(sum(c.after_reuse_h for c in costs))
    assert f"**{total}**" in generated["README.md"] and f"**{total}** |" in generated["experiments/README.md"]
    # reuse counted: an ablation re-running a table's default cell trains it no more
    assert all(c.after_reuse_h <= c.alone_h for c in costs) and sum(c.reused for c in costs) > 0
    assert costs[0].reused == 0 and costs[0].after_reuse_h == costs[0].alone_h
