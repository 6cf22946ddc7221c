"""The built-in datasets, one module each (CIFAR-10/100, SVHN, STL-10, mini-ImageNet, Tiny-ImageNet, EuroSAT,
TissueMNIST, digits).

Importing this package imports every module in it (alphabetically; ``_``-prefixed ones hold shared code and are
imported by the modules that use them), and each registers its dataset with ``@register_dataset``
(:mod:`mutexmatch.data.registry`): adding a dataset is adding one module here, nothing else. ``DATASETS`` maps a
name to its :class:`~mutexmatch.data.registry.BuiltinDataset`; ``DATASET_NAMES`` is every name ``data.dataset``
takes, in listing order, ending with ``imagefolder`` (your own folder, no code: :mod:`mutexmatch.data.imagefolder`).
"""
from __future__ import annotations

import importlib
import pkgutil

from mutexmatch.data import imagefolder
from mutexmatch.data.registry import DATASETS, listed

__all__ = ["DATASETS", "DATASET_NAMES", "registered_names"]

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")):
    importlib.import_module(f"{__name__}.{_module}")

DATASET_NAMES: tuple[str, ...] = (*(d.name for d in listed(list(DATASETS.values()))), imagefolder.NAME)


def registered_names() -> tuple[str, ...]:
    """Every name ``data.dataset`` takes now: :data:`DATASET_NAMES` with the datasets plugins registered since
    (:mod:`mutexmatch.plugins`) before ``imagefolder``."""
    return (*(d.name for d in listed(list(DATASETS.values()))), imagefolder.NAME)
