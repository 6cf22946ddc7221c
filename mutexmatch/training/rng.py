"""The process-wide random generators a run draws from: seeding them, and their state in a checkpoint.

Python's, numpy's and torch's global generators (and CUDA's) are saved in every checkpoint and restored on resume,
so a resumed run draws what the uninterrupted one drew (an algorithm's MixUp draws from numpy's and torch's).
NumPy's state is stored as tensors and plain numbers, which ``torch.load(weights_only=True)`` reads.
"""

from __future__ import annotations

import random

import numpy as np
import torch

__all__ = ["seed_everything", "rng_state", "set_rng_state"]


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def rng_state() -> dict:
    np_state = np.random.get_state()
    state = {
        "python": random.getstate(),
        "numpy": {"name": np_state[0], "keys": torch.from_numpy(np_state[1].astype(np.int64)),
                  "pos": int(np_state[2]), "has_gauss": int(np_state[3]), "gauss": float(np_state[4])},
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    n = state["numpy"]
    np.random.set_state((n["name"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["gauss"]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
