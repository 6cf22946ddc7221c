"""The images a run trains on, from the files on disk to augmented batches on the device.

- the dataset registry (:mod:`~mutexmatch.data.registry`, ``@register_dataset``) and one module per built-in dataset
  in :mod:`~mutexmatch.data.builtin` (its facts, reader and fake-file writer); :mod:`~mutexmatch.data.imagefolder`,
  your own folder of class folders with no code;
- loading by name (:mod:`~mutexmatch.data.load`), the decoded cache (:mod:`~mutexmatch.data.cache`), the shared
  readers (:mod:`~mutexmatch.data.torchvision_reader`, :mod:`~mutexmatch.data.imagefiles`), generated fake data
  (:mod:`~mutexmatch.data.fake`) and export to an image folder (:mod:`~mutexmatch.data.export`);
- the labeled/unlabeled/validation split (:mod:`~mutexmatch.data.splits`), the batch sampler
  (:mod:`~mutexmatch.data.sampler`), augmentation (:mod:`~mutexmatch.data.augment`) and host-to-device prefetch
  (:mod:`~mutexmatch.data.prefetch`).

Importing this package imports none of them (the trainer's split and sampler do not pay for torchvision's dataset
classes); ``mutexmatch.datasets`` and ``mutexmatch.fakedata`` are the command lines over it.
"""

from __future__ import annotations

import pkgutil
from pathlib import Path

__all__ = ["EXPORT_FORMATS", "dataset_names"]

EXPORT_FORMATS = ("png",)  # the lossless image formats an export writes (mutexmatch.data.export)


def dataset_names() -> tuple[str, ...]:
    """Every name ``data.dataset`` takes, read without importing the datasets (torch), for a command line's
    ``--help``: a built-in dataset is named as its module of :mod:`mutexmatch.data.builtin` (tests/mutexmatch/data
    check it against the registry), then ``imagefolder``. Alphabetical; the registry's ``DATASET_NAMES`` is in
    listing order."""
    modules = pkgutil.iter_modules([str(Path(__file__).with_name("builtin"))])
    return (*sorted(m.name for m in modules if not m.name.startswith("_")), "imagefolder")
