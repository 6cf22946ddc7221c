"""Training algorithms as registered pieces: the contract in :mod:`mutexmatch.algorithms.base`, one module per method
family (supervised, FixMatch, MutexMatch, the paper's ablations, ...).

Importing this package imports every module in it (alphabetically), and each module registers its algorithms with
``@register_algorithm``: adding a method is adding one module here, nothing else. The contract and the core
methods are re-exported for ``from mutexmatch.algorithms import ...``.
"""
from __future__ import annotations

import importlib
import pkgutil

from mutexmatch.algorithms.alignment import DistributionAlignment
from mutexmatch.algorithms.base import (ALGORITHMS, Algorithm, StepInputs, StepOutput, StepSpec, TrainContext, Views,
                                        algorithms_markdown, build_algorithm, declared_terms, register_algorithm)
from mutexmatch.algorithms.fixmatch import FixMatch
from mutexmatch.algorithms.mutexmatch import MutexMatch
from mutexmatch.algorithms.supervised import Supervised

__all__ = ["ALGORITHMS", "Algorithm", "DistributionAlignment", "FixMatch", "MutexMatch", "StepInputs", "StepOutput",
           "StepSpec", "Supervised", "TrainContext", "Views", "algorithms_markdown", "build_algorithm", "declared_terms",
           "register_algorithm"]

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")):
    importlib.import_module(f"{__name__}.{_module}")
