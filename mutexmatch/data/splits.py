"""Labeled / unlabeled / validation index splits of a training set.

The paper reports every setting as the mean over five "folds" (Sec. 5.1: "five different folds of labeled/unlabeled
data"); in the released code fold f is simply the labeled draw with numpy seed f + 1 (seeds 1-5), and STL-10 uses its
own predefined folds. Two draw rules are offered:

- ``official``: the released code's draw, bit for bit (``official_labeled_indices``).
- ``balanced``: the same class-balanced draw from a private ``np.random.Generator(PCG64(seed))``, so it neither reads
  nor disturbs numpy's global RNG and allows any number of folds.

The released code never saved its labeled indices; ``Split`` carries a digest and saves to JSON so a run can prove
which images it was trained on.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mutexmatch.atomic import atomic_write
from mutexmatch.checks import check_int
from mutexmatch.data.longtail import Imbalance, longtail_indices, num_labels_problem, split_counts

NUM_OFFICIAL_FOLDS = 5
# The validation draw gets its own seed stream, far from the labeled-draw seeds 1..5.
VAL_SEED_OFFSET = 10_000
_SPLIT_FORMAT = 1


def _as_labels(labels: np.ndarray, num_classes: int) -> np.ndarray:
    """Labels as a 1-D int64 array with values in [-1, num_classes); -1 marks images no draw may pick."""
    num_classes = check_int("num_classes", num_classes, low=1)
    arr = np.asarray(labels)
    if arr.ndim != 1 or not (np.issubdtype(arr.dtype, np.integer) or arr.size == 0):
        raise ValueError(f"labels must be a 1-D integer array, got dtype {arr.dtype} and shape {arr.shape}")
    arr = arr.astype(np.int64, copy=False)
    if arr.size and (arr.min() < -1 or arr.max() >= num_classes):
        raise ValueError(f"labels must lie in [0, {num_classes}) (or -1 for excluded images), found "
                         f"[{arr.min()}, {arr.max()}]")
    return arr


def _labels_per_class(labels: np.ndarray, num_labels: int, num_classes: int) -> int:
    """Validate ``data.num_labels`` against the labels that may still be drawn (label >= 0)."""
    num_labels = check_int("data.num_labels", num_labels, low=1)
    if num_labels % num_classes:
        raise ValueError(f"data.num_labels={num_labels} is not divisible by the {num_classes} classes; the labeled "
                         f"set holds num_labels / num_classes images of every class, so use a multiple of "
                         f"{num_classes}")
    per_class = num_labels // num_classes
    counts = np.bincount(labels[labels >= 0], minlength=num_classes)
    short = np.flatnonzero(counts < per_class)
    if short.size:
        c = int(short[0])
        raise ValueError(f"data.num_labels={num_labels} needs {per_class} images of each class, but class {c} has "
                         f"only {int(counts[c])} available ({short.size} class(es) too small; validation images "
                         f"from data.val_per_class are not available)")
    return per_class


def official_labeled_indices(labels: np.ndarray, num_labels: int, num_classes: int, seed: int) -> np.ndarray:
    """The released code's labeled draw, exactly.

    ``np.random.seed(seed)``, then for every class ``c`` in order
    ``np.random.choice(np.where(labels == c)[0], num_labels // num_classes, replace=False)``; the picks are
    concatenated in class order. The legacy global RNG is saved before and restored after, so callers' global
    numpy randomness is untouched. Images labeled -1 are never picked.
    """
    labels = _as_labels(labels, num_classes)
    per_class = _labels_per_class(labels, num_labels, num_classes)
    state = np.random.get_state()
    try:
        np.random.seed(seed)
        picks = [np.random.choice(np.where(labels == c)[0], per_class, replace=False) for c in range(num_classes)]
    finally:
        np.random.set_state(state)
    return np.concatenate(picks).astype(np.int64)


def balanced_labeled_indices(labels: np.ndarray, num_labels: int, num_classes: int, seed: int) -> np.ndarray:
    """``num_labels // num_classes`` images of every class without replacement, from a private
    ``np.random.Generator(PCG64(seed))``, concatenated in class order. Images labeled -1 are never picked."""
    labels = _as_labels(labels, num_classes)
    per_class = _labels_per_class(labels, num_labels, num_classes)
    rng = np.random.Generator(np.random.PCG64(seed))
    picks = [rng.choice(np.flatnonzero(labels == c), per_class, replace=False) for c in range(num_classes)]
    return np.concatenate(picks).astype(np.int64)


SPLIT_RULES: dict[str, Callable[[np.ndarray, int, int, int], np.ndarray]] = {
    "official": official_labeled_indices,
    "balanced": balanced_labeled_indices,
}


@dataclass
class Split:
    """Index sets into the training set.

    ``unlabeled`` indices ``>= meta["num_train"]`` refer to extra unlabeled images (STL-10's 100k split), the j-th
    extra image having index ``num_train + j``. ``val`` never overlaps ``labeled`` or ``unlabeled``.
    """

    labeled: np.ndarray
    unlabeled: np.ndarray
    val: np.ndarray
    meta: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("labeled", "unlabeled", "val"):
            arr = np.asarray(getattr(self, name))
            if arr.ndim != 1 or not (np.issubdtype(arr.dtype, np.integer) or arr.size == 0):
                raise ValueError(f"Split.{name} must be a 1-D integer array, got {arr.dtype} {arr.shape}")
            setattr(self, name, arr.astype(np.int64, copy=False))
        for name in ("labeled", "unlabeled"):
            overlap = np.intersect1d(self.val, getattr(self, name))
            if overlap.size:
                raise ValueError(f"Split: {overlap.size} validation indices are also in {name} (e.g. {overlap[0]})")

    def digest(self) -> str:
        """sha256 (hex) over the three index arrays in order and the JSON of ``meta``."""
        h = hashlib.sha256()
        for name in ("labeled", "unlabeled", "val"):
            arr = np.ascontiguousarray(getattr(self, name), dtype="<i8")
            h.update(f"{name}:{arr.size}:".encode())
            h.update(arr.tobytes())
        h.update(json.dumps(self.meta, sort_keys=True, separators=(",", ":")).encode())
        return h.hexdigest()

    def save(self, path: str | Path) -> None:
        """Write meta, digest and the index lists as JSON, atomically (temp file + ``os.replace``)."""
        path = Path(path)
        doc = {"format": _SPLIT_FORMAT, "digest": self.digest(), "meta": self.meta,
               "labeled": self.labeled.tolist(), "unlabeled": self.unlabeled.tolist(), "val": self.val.tolist()}
        atomic_write(path, json.dumps(doc, separators=(",", ":")).encode(), mode=0o644)

    @classmethod
    def load(cls, path: str | Path) -> Split:
        """Read a file written by ``save``; raises ``ValueError`` if its contents do not match its digest."""
        path = Path(path)
        try:
            doc = json.loads(path.read_text())
            if doc["format"] != _SPLIT_FORMAT:
                raise ValueError(f"format {doc['format']!r}, expected {_SPLIT_FORMAT}")
            split = cls(labeled=np.asarray(doc["labeled"], dtype=np.int64),
                        unlabeled=np.asarray(doc["unlabeled"], dtype=np.int64),
                        val=np.asarray(doc["val"], dtype=np.int64), meta=doc["meta"])
            stored = doc["digest"]
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
            raise ValueError(f"{path}: not a valid split file ({err!r})") from err
        actual = split.digest()
        if actual != stored:
            raise ValueError(f"{path}: split digest mismatch (file says {stored}, its contents give {actual}); the "
                             f"file was edited or corrupted")
        return split

    def check_file(self, path: str | Path) -> None:
        """On resume, where the split is drawn again: ``path`` must hold this split. A missing, unreadable or
        corrupt file (a kill while copying the folder, bit-rot, an edit) is rewritten with a warning, since the
        split itself is known; a valid file holding another split raises ``ValueError``: the run's labels changed."""
        path = Path(path)
        try:
            saved = Split.load(path)
        except (OSError, ValueError) as err:
            problem = "missing" if isinstance(err, FileNotFoundError) else " ".join(str(err).split())
            warnings.warn(f"{path}: {problem}; rewritten from the run's split (digest {self.digest()[:16]}...)",
                          stacklevel=2)
            self.save(path)
            return
        if saved.digest() != self.digest():
            raise ValueError(f"{path}: holds another labeled split (digest {saved.digest()[:16]}...) than this run "
                             f"draws now ({self.digest()[:16]}...): the dataset or its labels changed since the run "
                             "started; start a new run")


def _val_and_rest(labels: np.ndarray, val_per_class: int, num_classes: int, fold: int
                  ) -> tuple[np.ndarray, np.ndarray]:
    """The validation draw and the labels with those images relabelled -1, which no later draw may pick."""
    val = _draw_val(labels, val_per_class, num_classes, fold)
    candidates = labels.copy()
    candidates[val] = -1
    return val, candidates


def _draw_val(labels: np.ndarray, val_per_class: int, num_classes: int, fold: int) -> np.ndarray:
    """``val_per_class`` images of every class (labels >= 0 only) from Generator(PCG64(VAL_SEED_OFFSET + fold))."""
    if val_per_class == 0:
        return np.empty(0, dtype=np.int64)
    counts = np.bincount(labels[labels >= 0], minlength=num_classes)
    short = np.flatnonzero(counts < val_per_class)
    if short.size:
        c = int(short[0])
        raise ValueError(f"data.val_per_class={val_per_class} exceeds the {int(counts[c])} images of class {c} "
                         f"available for validation")
    rng = np.random.Generator(np.random.PCG64(VAL_SEED_OFFSET + fold))
    picks = [rng.choice(np.flatnonzero(labels == c), val_per_class, replace=False) for c in range(num_classes)]
    return np.concatenate(picks).astype(np.int64)


def make_split(labels: np.ndarray, *, dataset: str, num_labels: int, num_classes: int, fold: int,
               rule: str = "official", val_per_class: int = 0, unlabeled_includes_labeled: bool = True,
               num_extra_unlabeled: int = 0, predefined_folds: list[np.ndarray] | None = None,
               imbalance: Imbalance | None = None) -> Split:
    """Build the split of fold ``fold`` for ``num_labels`` labels.

    Without ``predefined_folds``: fold f draws its labeled set with ``SPLIT_RULES[rule]`` and seed f + 1 (the
    released code's seeds 1-5; ``official`` allows folds 0-4, ``balanced`` any fold >= 0). When
    ``val_per_class > 0``, ``val_per_class`` images per class are drawn first (seed ``VAL_SEED_OFFSET + fold``)
    and excluded from the labeled draw by relabelling them -1; the ``official`` draw is therefore identical to the
    released code only for ``val_per_class == 0``.

    With ``predefined_folds`` (STL-10): ``num_labels`` equal to a fold's size (1,000) uses predefined fold
    ``fold``; ``num_labels`` equal to the number of labeled train images (5,000) uses all of them (the released
    code silently trained on one 1,000-image fold here; we do not copy that bug). ``rule`` is validated but not
    used, and ``meta["rule"]`` is ``"predefined"``. Validation images come from the train images outside the
    labeled set. Any other ``num_labels`` (USB-CV's 40 and 100) is drawn by ``rule`` from the labeled train
    images, as without predefined folds.

    The unlabeled pool is every train image except validation images (minus the labeled ones when
    ``unlabeled_includes_labeled`` is False; the released code includes them), followed by the indices
    ``len(labels) + j`` of ``num_extra_unlabeled`` extra unlabeled images.

    With ``imbalance`` (``data.imbalance``): USB's long-tailed draw, :func:`_longtail_split`.
    """
    labels = _as_labels(labels, num_classes)
    if rule not in SPLIT_RULES:
        raise ValueError(f"data.split_rule must be one of {', '.join(sorted(SPLIT_RULES))}, got {rule!r}")
    fold = check_int("data.fold", fold, low=0)
    val_per_class = check_int("data.val_per_class", val_per_class, low=0)
    num_extra_unlabeled = check_int("num_extra_unlabeled", num_extra_unlabeled, low=0)
    num_labels = check_int("data.num_labels", num_labels, low=1)
    num_train = len(labels)

    if imbalance is not None:
        return _longtail_split(labels, imbalance, dataset=dataset, num_labels=num_labels, num_classes=num_classes,
                               fold=fold, val_per_class=val_per_class, num_extra_unlabeled=num_extra_unlabeled,
                               unlabeled_includes_labeled=unlabeled_includes_labeled)
    if predefined_folds is not None and _predefined(labels, num_labels, predefined_folds):
        labeled = _predefined_labeled(labels, num_labels, fold, predefined_folds, dataset)
        candidates = labels.copy()
        candidates[labeled] = -1
        val = _draw_val(candidates, val_per_class, num_classes, fold)
        seed: int | None = None
        rule_used = "predefined"
    else:
        labeled, val, seed = _drawn_labeled(labels, rule, fold, num_labels, num_classes, val_per_class)
        rule_used = rule

    pool = np.ones(num_train, dtype=bool)
    pool[val] = False
    if not unlabeled_includes_labeled:
        pool[labeled] = False
    unlabeled = np.concatenate([np.flatnonzero(pool), num_train + np.arange(num_extra_unlabeled)]).astype(np.int64)

    meta = _meta(dataset, num_labels, num_classes, fold, rule_used, seed, val_per_class,
                 unlabeled_includes_labeled, num_train, num_extra_unlabeled)
    return Split(labeled=labeled, unlabeled=unlabeled, val=val, meta=meta)


def _meta(dataset: str, num_labels: int, num_classes: int, fold: int, rule: str, seed: int | None,
          val_per_class: int, unlabeled_includes_labeled: bool, num_train: int, num_extra_unlabeled: int) -> dict:
    """A split's ``meta``; its keys and values enter the digest, so a stored run's split keeps its digest."""
    return {
        "dataset": dataset, "num_labels": num_labels, "num_classes": int(num_classes), "fold": fold,
        "rule": rule, "seed": seed, "val_per_class": val_per_class,
        "val_seed": VAL_SEED_OFFSET + fold if val_per_class else None,
        "unlabeled_includes_labeled": bool(unlabeled_includes_labeled), "num_train": num_train,
        "num_extra_unlabeled": num_extra_unlabeled,
    }


def _longtail_split(labels: np.ndarray, imbalance: Imbalance, *, dataset: str, num_labels: int, num_classes: int,
                    fold: int, val_per_class: int, num_extra_unlabeled: int, unlabeled_includes_labeled: bool
                    ) -> Split:
    """:func:`make_split` with ``imbalance``: validation first, then USB's draw (:mod:`mutexmatch.data.longtail`)
    with seed ``fold`` (USB's seeds 0, 1, 2 are folds 0, 1, 2) from the rest; ``rule`` and ``predefined_folds`` are
    not used and ``num_labels`` must be the labeled set's size. The unlabeled pool is the labeled images then the
    drawn unlabeled ones (USB's ``include_lb_to_ulb``; only the drawn ones when ``unlabeled_includes_labeled`` is
    False), then the extra images; ``meta`` adds the setting and the per-class counts."""
    labeled_counts, unlabeled_counts = split_counts(imbalance, num_classes)
    if (problem := num_labels_problem(num_labels, labeled_counts)) is not None:
        raise ValueError(problem)
    val, candidates = _val_and_rest(labels, val_per_class, num_classes, fold)
    labeled, drawn = longtail_indices(candidates, labeled_counts, unlabeled_counts, num_classes, seed=fold)
    num_train = len(labels)
    unlabeled = np.concatenate([labeled, drawn] if unlabeled_includes_labeled else [drawn])
    unlabeled = np.concatenate([unlabeled, num_train + np.arange(num_extra_unlabeled)]).astype(np.int64)
    meta = _meta(dataset, num_labels, num_classes, fold, "longtail", fold, val_per_class,
                 unlabeled_includes_labeled, num_train, num_extra_unlabeled)
    meta["imbalance"] = {f: getattr(imbalance, f) for f in
                         ("labeled_head", "labeled_ratio", "unlabeled_head", "unlabeled_ratio", "rule")}
    meta["labeled_per_class"] = labeled_counts
    meta["unlabeled_per_class"] = np.bincount(labels[drawn], minlength=num_classes).tolist()
    return Split(labeled=labeled, unlabeled=unlabeled, val=val, meta=meta)


def _drawn_labeled(labels: np.ndarray, rule: str, fold: int, num_labels: int, num_classes: int, val_per_class: int
                   ) -> tuple[np.ndarray, np.ndarray, int]:
    """Labeled and validation indices drawn by ``rule`` (validation first, then labeled from the rest), and the
    labeled draw's seed."""
    if rule == "official" and fold >= NUM_OFFICIAL_FOLDS:
        raise ValueError(f"data.fold must be in [0, {NUM_OFFICIAL_FOLDS - 1}] for data.split_rule 'official' "
                         f"(the released code's seeds 1-{NUM_OFFICIAL_FOLDS}), got {fold}; use data.split_rule "
                         f"'balanced' for more folds")
    val, candidates = _val_and_rest(labels, val_per_class, num_classes, fold)
    seed = fold + 1
    return SPLIT_RULES[rule](candidates, num_labels, num_classes, seed), val, seed


def _predefined(labels: np.ndarray, num_labels: int, predefined_folds: list[np.ndarray]) -> bool:
    """Whether ``num_labels`` is a predefined fold's size or every labeled train image (else it is drawn)."""
    return num_labels in {len(f) for f in predefined_folds} or num_labels == int((labels >= 0).sum())


def _predefined_labeled(labels: np.ndarray, num_labels: int, fold: int, predefined_folds: list[np.ndarray],
                        dataset: str) -> np.ndarray:
    folds = [np.asarray(f, dtype=np.int64) for f in predefined_folds]
    all_labeled = np.flatnonzero(labels >= 0)
    fold_sizes = sorted({len(f) for f in folds})
    if num_labels in fold_sizes:
        if fold >= len(folds):
            raise ValueError(f"data.fold must be in [0, {len(folds) - 1}] for {dataset}'s predefined folds, "
                             f"got {fold}")
        labeled = folds[fold]
        if labeled.size != num_labels:
            raise ValueError(f"data.num_labels={num_labels}: {dataset}'s predefined fold {fold} holds "
                             f"{labeled.size} images")
        if labeled.size and (labeled.min() < 0 or labeled.max() >= len(labels) or (labels[labeled] < 0).any()):
            raise ValueError(f"{dataset}'s predefined fold {fold} indexes images outside the labeled train set")
        return labeled
    if fold >= len(folds):   # every labeled image (:func:`_predefined`)
        raise ValueError(f"data.fold must be in [0, {len(folds) - 1}] for {dataset}, got {fold}")
    return all_labeled
