"""Class-imbalanced SSL as USB runs it: imbalance algorithms composed with a base algorithm (issue 41 item 3).

The contract is :mod:`mutexmatch.imb_algorithms.base`. Importing this package imports every module in it
(alphabetically), and each registers its imbalance algorithm with ``@register_imb_algorithm``: adding one is adding
one module here, nothing else.
"""
from __future__ import annotations

import importlib
import pkgutil

from mutexmatch.imb_algorithms.base import (IMB_ALGORITHMS, SECTION, EpochNeeds, ImbAlgorithm, ImbParams,
                                            algorithm_class, base_errors, compose, declared_terms,
                                            imb_algorithms_markdown, register_imb_algorithm, usb_epoch)

__all__ = ["IMB_ALGORITHMS", "SECTION", "EpochNeeds", "ImbAlgorithm", "ImbParams", "algorithm_class", "base_errors",
           "compose", "declared_terms", "imb_algorithms_markdown", "register_imb_algorithm", "usb_epoch"]

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")):
    importlib.import_module(f"{__name__}.{_module}")
