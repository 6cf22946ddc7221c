"""``python -m mutexmatch.datasets``: download, check and export the datasets :mod:`mutexmatch.data` loads.

- ``download NAME --root DIR``: fetch CIFAR-10/100, SVHN (+extra) or STL-10 through torchvision's own classes
  (``download=True``; torchvision checks every file against its published md5) and list each file as verified.
- ``check NAME --root DIR``: the layout, the images per split and per class, and the state of the decoded cache.
  Loading decodes whatever is not cached yet, so a check also proves that every image is readable.
- ``export NAME --root DIR --to DIR``: write any dataset as an image folder (``data.dataset: imagefolder``) of
  lossless PNGs, so that loading the export gives the same pixels and labels.

Every error is one line on stderr (the argument or path, the value, what is allowed) and exit status 2. The on-disk
layouts are described in ``docs/datasets.md``. This module is the command line only: what each dataset can do
(download, list its files, name its classes) is declared in its module of :mod:`mutexmatch.data.builtin`.
"""

from __future__ import annotations

import argparse
import pickle
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from mutexmatch.checks import int_arg, validation_error_lines
from mutexmatch.cli import add_version, answer_early, entry_point
from mutexmatch.config import IMAGE_SIZE_MAX, IMAGE_SIZE_MIN, ImbalanceConfig
from mutexmatch.data import EXPORT_FORMATS, dataset_names

PROG = "python -m mutexmatch.datasets"
DESCRIPTION = "Download, check and export the datasets mutexmatch trains on (layouts: docs/datasets.md)."

_EXAMPLES = {
    "download": [
        f"{PROG} download cifar10 --root data",
        f"{PROG} download svhn --root data --svhn-extra",
    ],
    "check": [
        f"{PROG} check cifar10 --root data",
        f"{PROG} check imagefolder --root data/my-photos --image-size 32",
    ],
    "export": [
        f"{PROG} export cifar10 --root data --to data/cifar10-folder",
        f"{PROG} export digits --root data --to /tmp/digits-folder --overwrite",
    ],
}


class CLIError(Exception):
    """A user error, printed as one ``error: ...`` line with exit status 2."""


class _Parser(argparse.ArgumentParser):
    # argparse prints the usage plus an error and exits; we want the one-line error of every other failure.
    def error(self, message: str) -> NoReturn:
        raise CLIError(f"{self.prog}: {message}")


def _epilog(commands: Sequence[str]) -> str:
    return "examples:\n" + "\n".join(f"  {e}" for c in commands for e in _EXAMPLES[c])


def build_parser() -> argparse.ArgumentParser:
    fmt = argparse.RawDescriptionHelpFormatter
    parser = _Parser(prog=PROG, description=DESCRIPTION, epilog=_epilog(list(_EXAMPLES)),
                     formatter_class=fmt)
    sub = parser.add_subparsers(dest="command", metavar="{download,check,export}")
    helps = {"download": "fetch CIFAR-10/100, SVHN or STL-10 with torchvision (md5-verified)",
             "check": "layout, images per split and class, cache state (decodes what is not cached)",
             "export": "write a dataset as an image folder of PNGs (train/<class>/NNNNN.png, ...)"}
    names = dataset_names()  # without importing the datasets (torch): --help answers at once
    for command in ("download", "check", "export"):
        p = sub.add_parser(command, help=helps[command], description=helps[command], epilog=_epilog([command]),
                           formatter_class=fmt)
        p.add_argument("name", metavar="NAME", choices=names, help=f"dataset: {', '.join(names)}")
        p.add_argument("--root", required=True, metavar="DIR",
                       help="the data root (data.root); for imagefolder the image folder itself")
        p.add_argument("--svhn-extra", action="store_true", help="svhn only: include the 531k extra images")
        if command == "download":
            continue
        p.add_argument("--image-size", type=int_arg(IMAGE_SIZE_MIN, IMAGE_SIZE_MAX, "pixels"), default=None, metavar="N",
                       help="side in pixels (data.image_size); digits, miniimagenet and imagefolder only")
        if command == "check":
            p.add_argument("--imbalance", metavar="MAPPING", default=None,
                           help="also draw the long-tailed split of this data.imbalance (YAML, e.g. '{labeled_head: "
                           "500, labeled_ratio: 100, unlabeled_head: 4000, unlabeled_ratio: 100}') and show its "
                           "labeled and unlabeled images per class")
            p.add_argument("--fold", type=int_arg(0), default=0, metavar="N",
                           help="with --imbalance: the fold (data.fold, the draw's seed)")
        if command == "export":
            p.add_argument("--to", required=True, metavar="DIR", help="the image folder to write (new or empty)")
            p.add_argument("--format", choices=EXPORT_FORMATS, default="png", help="image format (lossless)")
            p.add_argument("--overwrite", action="store_true",
                           help="replace an earlier export in --to (only the files it wrote; any other file "
                           "there is refused)")
    return add_version(parser)


def _parse(argv: Sequence[str] | None) -> argparse.Namespace | int:
    """The arguments, or the exit status after ``--help`` (0), ``--version`` (0) or a usage error (2, one line)."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exit_:  # --help, --version
        return int(exit_.code or 0)
    except CLIError as err:
        print(f"error: {_one_line(err)}", file=sys.stderr)
        return 2
    if args.command is None:
        print(f"error: {PROG}: choose a command: download, check or export (see --help)", file=sys.stderr)
        return 2
    return args


# The loaders word their errors for a run config; here the same value came from a flag.
_FLAG_OF_FIELD = {"data.image_size": "--image-size", "data.root": "--root", "svhn_extra=True": "--svhn-extra"}


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    for field, flag in _FLAG_OF_FIELD.items():
        text = text.replace(field, flag)
    return text


def _exit_unless_parsed(words: list[str]) -> None:
    code = _parse(words)
    if isinstance(code, int):
        sys.exit(code)


if __name__ == "__main__":
    answer_early(_exit_unless_parsed)  # --help, --version, usage errors: before torch loads

# The datasets: imported once the command line is read (torch, torchvision).
import torch
from pydantic import ValidationError
from torchvision.datasets.utils import check_integrity

from mutexmatch.cliwarnings import one_line_warnings
from mutexmatch.data import imagefolder
from mutexmatch.data.builtin import DATASET_NAMES, DATASETS
from mutexmatch.data.cache import (CACHE_DIRNAME, CHECKSUM_SUFFIX, checksum_path, source_digest, stale,
                                   verify_checksum)
from mutexmatch.data.export import (class_names, dataset_class_names, index_names,
                                    write_split)
from mutexmatch.data.load import DatasetBundle, cache_paths, dataset_dir, load_dataset
from mutexmatch.data.torchvision_reader import TorchvisionDataset
from mutexmatch.data.written import foreign_files, record_written, remove_written, shown
from mutexmatch.data.longtail import split_counts
from mutexmatch.data.splits import make_split
from mutexmatch.yamlfile import YamlFileError, read_set_value

# ----------------------------------------------------------------------------------------------------------------
# download


def _downloadable() -> list[str]:
    return [n for n in DATASET_NAMES if n in DATASETS and DATASETS[n].downloadable]


def run_download(args: argparse.Namespace) -> int:
    name = args.name
    if name not in _downloadable():
        raise CLIError(f"download {name}: {_manual_hint(name)} (`download` fetches only "
                       f"{', '.join(_downloadable())})")
    dataset = DATASETS[name]
    if args.svhn_extra and dataset.extra_split is None:
        with_extra = [n for n in DATASET_NAMES if n in DATASETS and DATASETS[n].extra_split is not None]
        raise CLIError(f"download {name}: --svhn-extra only applies to {', '.join(with_extra)}")
    ddir = dataset_dir(name, args.root)
    created = not ddir.exists()
    ddir.mkdir(parents=True, exist_ok=True)
    try:
        dataset.fetch(ddir, args.svhn_extra)
    except (OSError, RuntimeError) as err:  # URLError is an OSError; a failed md5 check a RuntimeError
        if created:  # a failed first download leaves nothing behind (at most a partial archive)
            shutil.rmtree(ddir, ignore_errors=True)
        raise CLIError(f"download {name}: torchvision could not fetch and verify the files in {ddir}: "
                       f"{_one_line(err)}") from None
    print(f"{name}: files in {ddir}")
    bad = []
    for rel, md5 in dataset.files(args.svhn_extra):
        path = ddir / rel
        if md5 is None:
            state = "present (no published md5)" if path.is_file() else "MISSING"
        else:
            state = f"md5 {md5} verified" if check_integrity(str(path), md5) else f"md5 {md5} MISMATCH"
        if state.endswith(("MISSING", "MISMATCH")):
            bad.append(rel)
        print(f"  {rel:<32} {state}")
    if bad:
        raise CLIError(f"download {name}: {', '.join(bad)} in {ddir} missing or corrupted after the download; "
                       f"delete them and run download again")
    print(f"next: {PROG} check {name} --root {args.root}   (decodes the images into the cache and counts them)")
    return 0


def _manual_hint(name: str) -> str:
    if name == imagefolder.NAME:
        return (f"an image folder is your own {'/<class>/, '.join(imagefolder.REQUIRED_SPLITS)}/<class>/ images; "
                f"see docs/datasets.md, or `{PROG} export` to write one from a built-in dataset")
    return DATASETS[name].info.download_hint


# ----------------------------------------------------------------------------------------------------------------
# check


def _load(args: argparse.Namespace) -> DatasetBundle:
    return load_dataset(args.name, args.root, image_size=args.image_size, svhn_extra=args.svhn_extra)


def _cache_state(args: argparse.Namespace) -> tuple[dict[str, Path], list[Path]]:
    """The cache files a load would read now, and the other caches of the same splits (another image size or
    folder content), which this load does not read."""
    current = cache_paths(args.name, args.root, image_size=args.image_size, svhn_extra=args.svhn_extra)
    others = sorted({p for s, c in current.items() if c.parent.is_dir() for p in c.parent.glob(f"{s}_*.pt")}
                    - set(current.values()))
    return current, others


def _cache_sources(args: argparse.Namespace) -> dict[str, list[Path]]:
    """Split -> the side files its cache is decoded from (an image folder's caches are keyed by content instead)."""
    if args.name == imagefolder.NAME:
        return {}
    ddir = dataset_dir(args.name, args.root)
    return {s: DATASETS[args.name].cache_sources(ddir, s) for s in DATASETS[args.name].cached_splits(args.svhn_extra)}


def _layout_lines(args: argparse.Namespace) -> list[str]:
    """What the raw files look like, before anything is decoded (a bad imagefolder layout raises here)."""
    if args.name == imagefolder.NAME:
        index = imagefolder.scan_folder(args.root)
        splits = ", ".join(f"{s}/ ({len(f):,} files)" for s, f in index.files.items())
        lines = [f"folder   {Path(args.root).expanduser()}", f"layout   ok: {splits}"]
        if index.ignored:
            lines.append(f"         {index.ignored} file(s) ignored (not an image extension PIL reads)")
        return lines
    ddir = dataset_dir(args.name, args.root)
    lines = [f"folder   {ddir}"]
    dataset = DATASETS[args.name]
    if isinstance(dataset, TorchvisionDataset):
        files = dataset.files(args.svhn_extra)
        dataset.verify_published_md5s(ddir, args.svhn_extra)  # a present file that is junk is not "present"
        missing = [rel for rel, _ in files if not (ddir / rel).is_file()]
        lines.append(f"layout   {len(files) - len(missing)} of {len(files)} torchvision files present, each "
                     "published md5 verified" + (f"; missing: {', '.join(missing)}" if missing else ""))
    return lines


def _class_table(bundle: DatasetBundle, names: Sequence[str]) -> list[str]:
    splits = {s: d for s, d in (("train", bundle.train), ("test", bundle.test), ("val", bundle.val)) if d}
    counts = {s: torch.bincount(d.y, minlength=len(names)).tolist() for s, d in splits.items()}
    width = max(len("class"), *(len(n) for n in names))
    lines = [f"  {'class':<{width}}" + "".join(f"{s:>10}" for s in splits)]
    for i, n in enumerate(names):
        lines.append(f"  {n:<{width}}" + "".join(f"{counts[s][i]:>10,}" for s in splits))
    lines.append(f"  {'total':<{width}}" + "".join(f"{len(d):>10,}" for d in splits.values()))
    if bundle.extra_unlabeled is not None:
        lines.append(f"  unlabeled: {len(bundle.extra_unlabeled):,} images without labels")
    return lines


def _longtail_table(bundle: DatasetBundle, names: Sequence[str], text: str, fold: int) -> list[str]:
    """The split a run with ``data.imbalance`` = ``text`` (YAML) and ``data.fold`` = ``fold`` draws: labeled and
    drawn unlabeled images per class (the trainer's pool adds the labeled ones, as USB's does)."""
    try:
        imbalance = ImbalanceConfig.model_validate(read_set_value("data.imbalance", text))
        labeled_counts, _ = split_counts(imbalance, bundle.info.num_classes)
        split = make_split(bundle.train.y.numpy(), dataset=bundle.info.name, num_labels=sum(labeled_counts),
                           num_classes=bundle.info.num_classes, fold=fold, imbalance=imbalance,
                           unlabeled_includes_labeled=False)
    except ValidationError as err:
        raise CLIError("; ".join(validation_error_lines(
            err, where=lambda loc: ".".join(["data.imbalance", *map(str, loc)]),
            allowed_keys=lambda loc: list(ImbalanceConfig.model_fields)))) from None
    except (YamlFileError, ValueError) as err:
        raise CLIError(f"--imbalance: {_one_line(err)}") from None
    labeled, unlabeled = split.meta["labeled_per_class"], split.meta["unlabeled_per_class"]
    width = max(len("class"), *(len(n) for n in names))
    lines = [f"long-tailed split, fold {fold} (seed {fold}): data.num_labels: {sum(labeled)}",
             f"  {'class':<{width}}{'labeled':>10}{'unlabeled':>10}"]
    lines += [f"  {n:<{width}}{a:>10,}{b:>10,}" for n, a, b in zip(names, labeled, unlabeled)]
    return lines + [f"  {'total':<{width}}{sum(labeled):>10,}{sum(unlabeled):>10,}"]


def run_check(args: argparse.Namespace) -> int:
    print(f"dataset  {args.name}")
    print("\n".join(_layout_lines(args)))
    current, others = _cache_state(args)
    sources = _cache_sources(args)
    states = {s: _cache_file_state(p, sources.get(s, [])) for s, p in current.items()}
    bundle = _load(args)  # decodes what is not cached yet: proves every image readable
    info = bundle.info
    print(f"images   {info.channels}x{info.image_size}x{info.image_size} uint8; mean "
          f"{_floats(info.mean)}, std {_floats(info.std)} (of pixel/255)")
    # the classes as the user named them: `export` alone shows its folder names (`0_café _ co__` for `café & co_%`)
    known = dataset_class_names(args.name, args.root, bundle)
    names = known if known is not None else index_names(info.num_classes)
    print(f"classes  {info.num_classes}" + (" (unnamed: shown by label index)" if known is None else ""))
    print("\n".join(_class_table(bundle, names)))
    if bundle.predefined_folds is not None:
        print(f"folds    {len(bundle.predefined_folds)} predefined labeled folds of "
              f"{', '.join(sorted({f'{len(f):,}' for f in bundle.predefined_folds}))} images")
    if args.imbalance is not None:
        print("\n".join(_longtail_table(bundle, names, args.imbalance, args.fold)))
    print(f"cache    {', '.join(sorted({str(p.parent) for p in current.values()}))}")
    for split, path in current.items():
        state = states[split]
        if not path.is_file():
            state = "missing: could not be written (see the warning above)"
        print(f"  {path.name:<40} {state}")
    for path in others:
        gone = "" if path.exists() else "; deleted by this load"
        print(f"  {path.name:<40} not read now (another image size, split set or folder content{gone})")
    return 0


def _cache_file_state(path: Path, sources: Sequence[Path]) -> str:
    """What the load about to run does with a cache file: read it, or decode its split again (the load re-decodes a
    cache without its checksum, whose bytes no longer match it, or decoded from other versions of the side files
    ``sources``, as it does a missing one)."""
    if not path.is_file():
        return "missing: decoded and written now"
    if not checksum_path(path).is_file():
        return "without its sha256: decoded again and written now"
    digest = source_digest(sources)
    try:
        verify_checksum(path)
        payload = torch.load(path, weights_only=True, mmap=True) if digest is not None else {}
        if stale(payload, digest):
            names = ", ".join(s.name for s in sources)
            why = f"decoded from another {names}" if "source" in payload else f"older than its record of {names}"
            return f"{why}: decoded again and written now"
    except ValueError:
        return f"differs from its {CHECKSUM_SUFFIX}: decoded again and written now"
    except (RuntimeError, OSError, EOFError, pickle.UnpicklingError):
        return "unreadable: decoded again and written now"
    return "current"


def _floats(values: Sequence[float]) -> str:
    return "(" + ", ".join(f"{v:.4f}" for v in values) + ")"


# ----------------------------------------------------------------------------------------------------------------
# export

_EXPORT = "export"  # the manifest of the files an export wrote (mutexmatch.data.written)


def _prepare_target(to: Path, overwrite: bool, source: Path | None) -> None:
    if to.exists() and not to.is_dir():
        raise CLIError(f"export: --to {to} is a file; give a new or empty folder")
    if source is not None and to.resolve() == source.resolve():
        raise CLIError(f"export: --to {to} is the source folder --root; give another folder")
    if source is not None and source.resolve() in to.resolve().parents:  # issue 33: its splits became classes
        raise CLIError(f"export: --to {to} lies inside the source folder --root {source}; its split folders would "
                       "be read as classes of the source next time; give a folder outside --root")
    if source is not None and to.resolve() in source.resolve().parents:
        raise CLIError(f"export: --to {to} holds the source folder --root {source}; writing (or --overwrite "
                       "replacing) its split folders would change the source; give a folder outside it")
    if to.is_dir() and any(to.iterdir()) and not overwrite:
        raise CLIError(f"export: --to {to} is not empty; give a new or empty folder, or pass --overwrite (which "
                       f"replaces an earlier export there)")
    foreign = foreign_files(to, _EXPORT, skip=(CACHE_DIRNAME,))  # finding #14: --overwrite deleted users' files
    if foreign:
        raise CLIError(f"export: --to {to} holds {len(foreign)} file(s) that no earlier export wrote "
                       f"({shown(to, foreign)}); --overwrite replaces only an export's own files: move them away, "
                       "or give a new or empty folder")


def run_export(args: argparse.Namespace) -> int:
    to = Path(args.to).expanduser()
    source = Path(args.root).expanduser() if args.name == imagefolder.NAME else None
    _prepare_target(to, args.overwrite, source)
    bundle = _load(args)
    names = class_names(args.name, args.root, bundle)
    empty = [n for n, c in zip(names, torch.bincount(bundle.train.y, minlength=len(names)).tolist()) if c == 0]
    if empty:
        raise CLIError(f"export {args.name}: class(es) {', '.join(empty[:5])} have no train image; an image folder "
                       f"takes its classes from train/, so the labels would shift")
    if to.is_dir():  # --overwrite: an earlier export's files must not mix with this one's
        remove_written(to, _EXPORT)
    parts = {"train": bundle.train, "test": bundle.test, "val": bundle.val,
             imagefolder.UNLABELED_SPLIT: bundle.extra_unlabeled}
    written = []
    try:
        for split, data in parts.items():
            if data is None or not len(data):
                continue
            write_split(data, to / split, None if split == imagefolder.UNLABELED_SPLIT else names)
            written.append(f"{split} {len(data):,}")
            print(f"  {split:<10} {len(data):>8,} images -> {to / split}", file=sys.stderr)
    finally:  # an export cut short (full disk, Ctrl-C) is still its own: the next --overwrite may replace it
        if to.is_dir():
            record_written(to, _EXPORT, skip=(CACHE_DIRNAME,))
    print(f"{args.name}: wrote {', '.join(written)} images as PNG to {to}; classes (label order): "
          f"{', '.join(names[:10])}{' ...' if len(names) > 10 else ''}")
    print(f"use it with: --set data.dataset=imagefolder --set data.root={to}"
          + (f"   ({bundle.info.image_size} px; digits and other grayscale images load as RGB)"
             if bundle.info.channels == 1 else ""))
    return 0


# ----------------------------------------------------------------------------------------------------------------
# command line


@entry_point(PROG)
def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status (0 ok, 2 for any error, printed as one line)."""
    with one_line_warnings():
        return _run(argv)


def _run(argv: Sequence[str] | None) -> int:
    args = _parse(argv)
    if isinstance(args, int):
        return args
    try:
        return {"download": run_download, "check": run_check, "export": run_export}[args.command](args)
    except CLIError as err:
        print(f"error: {_one_line(err)}", file=sys.stderr)
    except (ValueError, OSError, RuntimeError) as err:  # bad layout, missing files, unreadable images
        print(f"error: {args.command}: {_one_line(err)}", file=sys.stderr)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
