"""The checks of a run config's ``data`` section that need the dataset's facts, done before anything is loaded.

:mod:`mutexmatch.config` calls :func:`data_section_facts` from its cross-field validation: the class count and
image side the rest of the config is checked against (the algorithm's class-dependent bounds, the backbone's
smallest image), and one error line per problem, naming the field, the value and what is allowed.
:func:`missing_data_root` is the one problem a plan may set aside, so it is also a typed fact of its own.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from mutexmatch.data import imagefolder
from mutexmatch.data.builtin import DATASETS

if TYPE_CHECKING:
    from mutexmatch.config import DataConfig


def data_section_facts(d: "DataConfig") -> tuple[int, int, list[str]]:
    """Class count, image side and the error lines of ``d``; ``ValueError`` for an image folder's bad layout."""
    if d.dataset == imagefolder.NAME:
        num_classes, image_size, errors = _imagefolder_facts(d)
    else:
        info = DATASETS[d.dataset].info
        num_classes, image_size, errors = info.num_classes, d.image_size or info.image_size, []
    if d.imbalance is not None:
        errors += _imbalance_errors(d, num_classes)
    else:
        errors += _balanced_errors(d, num_classes)
    dataset = DATASETS.get(d.dataset)
    if d.normalization == "released" and (dataset is None or dataset.info.released_mean is None):
        errors.append(f"data.normalization='released': the released code has no {d.dataset} dataset; use "
                      "`correct`")
    if (root := missing_data_root(d)) is not None:
        errors.append(f"data.root={root!r}: folder does not exist (create it with the dataset inside, or set "
                      "`data.download: true`)")
    return num_classes, image_size, errors + (_per_class_errors(d, num_classes) if d.imbalance is None else [])


def _balanced_errors(d: "DataConfig", num_classes: int) -> list[str]:
    """``num_labels`` and ``fold`` of a balanced split (num_labels / C images of every class)."""
    errors = []
    if d.num_labels % num_classes:
        errors.append(f"data.num_labels={d.num_labels}: must be divisible by the {num_classes} classes of "
                      f"{d.dataset}")
    if d.split_rule == "official" and d.fold > 4:
        errors.append(f"data.fold={d.fold}: the `official` split rule has folds 0-4 (seeds 1-5); use "
                      "`data.split_rule: balanced` for more")
    return errors + _declared_rule_errors(d)


def _imbalance_errors(d: "DataConfig", num_classes: int) -> list[str]:
    """A long-tailed split (``data.imbalance``): USB's draw seeded with the fold (any fold), whose labeled set's
    size ``num_labels`` must state; ``split_rule`` does not apply."""
    from mutexmatch.data.longtail import num_labels_problem, split_counts

    try:
        labeled, _ = split_counts(d.imbalance, num_classes)
    except ValueError as e:
        return [str(e)]
    problem = num_labels_problem(d.num_labels, labeled)
    errors = [] if problem is None else [problem]
    if d.split_rule != "official":
        errors.append(f"data.split_rule={d.split_rule!r}: a long-tailed split (data.imbalance) is drawn by USB's "
                      "rule, seeded with data.fold; leave data.split_rule at `official`")
    return errors


def missing_data_root(d: "DataConfig") -> str | None:
    """``d.root`` when the run must read its dataset from there and it is not a folder (nor ``data.download`` set to
    fetch it); else None. One rule, read by this module's error line and, as a fact rather than that line's text, by
    a sweep that plans without its data (``orchestration.spec.overrides.load_sweep(need_data=False)``)."""
    dataset = DATASETS.get(d.dataset)
    if (dataset is None or dataset.needs_files) and not d.download and not Path(d.root).is_dir():
        return d.root
    return None


def _declared_rule_errors(d: "DataConfig") -> list[str]:
    """What the chosen built-in dataset declares about labels and its extra split (an image folder has neither)."""
    dataset, errors = DATASETS.get(d.dataset), []
    allowed = dataset.allowed_num_labels if dataset else None
    if allowed is not None and d.num_labels not in allowed:
        errors.append(f"data.num_labels={d.num_labels}: {dataset.allowed_num_labels_reason}: "
                      f"{' or '.join(map(str, allowed))}")
    if d.svhn_extra and (dataset is None or dataset.extra_split is None):
        with_extra = [n for n, ds in DATASETS.items() if ds.extra_split is not None]
        errors.append(f"data.svhn_extra=True: only valid for dataset {' or '.join(with_extra)}, not {d.dataset}")
    return errors


def _per_class_errors(d: "DataConfig", num_classes: int) -> list[str]:
    """Labeled plus validation images per class beyond the dataset's smallest class: known without loading it."""
    dataset = DATASETS.get(d.dataset)
    most = None if dataset is None or (d.svhn_extra and dataset.extra_split) else dataset.info.train_per_class_min
    if most is None or d.num_labels % num_classes:
        return []
    per_class = d.num_labels // num_classes
    if per_class > most:
        return [f"data.num_labels={d.num_labels}: needs {per_class} labeled images of each class, but the smallest "
                f"class of {d.dataset} has {most} train images; at most {most * num_classes}"]
    if per_class + d.val_per_class > most:
        return [f"data.val_per_class={d.val_per_class}: the smallest class of {d.dataset} has {most} train images "
                f"and {per_class} of each class are labeled (data.num_labels={d.num_labels}); at most "
                f"{most - per_class}"]
    return []


def _imagefolder_facts(d: "DataConfig") -> tuple[int, int, list[str]]:
    """Class count, image side and layout errors of an image folder (only names and one header are read)."""
    errors = []
    if d.download:
        errors.append("data.download=True: imagefolder reads your own folder; there is nothing to download")
    index = imagefolder.scan_folder(d.root)
    if "val" in index.files and d.val_per_class:
        errors.append(f"data.val_per_class={d.val_per_class}: {index.root / 'val'} is the validation split; set 0 "
                      "(or remove the val/ folder to carve validation images out of train/)")
    if d.num_labels % len(index.classes) == 0:
        errors += imagefolder.check_labels_available(index, d.num_labels, d.val_per_class)
    return len(index.classes), d.image_size or imagefolder.infer_image_size(index), errors
