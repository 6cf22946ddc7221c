"""Tiny generated datasets in the real on-disk formats, for smoke runs and tests without the real data.

``python -m mutexmatch.fakedata ROOT``: the command line over :mod:`mutexmatch.data.fake` (the writers and their
rules are there, each dataset's own in its module of :mod:`mutexmatch.data.builtin`).

    python -m mutexmatch.fakedata /tmp/fake-data            # all datasets at the default sizes

It never writes over files it did not make: a dataset folder holding any (real CIFAR-10 files, a generated file
edited by hand) is refused, naming them, before anything is written (``.mutexmatch_fakedata.json`` in each dataset
folder lists what it wrote, so a rerun over its own files is fine).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from mutexmatch.cli import add_version, entry_point
from mutexmatch.data import dataset_names


def _parser() -> argparse.ArgumentParser:
    """The command line, read before the datasets (torch) are imported: --help answers at once."""
    parser = argparse.ArgumentParser(prog="python -m mutexmatch.fakedata", description=__doc__.splitlines()[0])
    parser.add_argument("root", help="data root to write (e.g. /tmp/fake-data); use it as data.root")
    parser.add_argument("--datasets", default=None,
                        help=f"comma-separated datasets among {','.join(dataset_names())} (default: every one with a "
                             "fake-file writer)")
    parser.add_argument("--test-per-class", type=int, default=None,
                        help="test images per class for every dataset (default: each dataset's FAKE_SIZES value)")
    return add_version(parser)


@entry_point("python -m mutexmatch.fakedata")
def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    from mutexmatch.data.builtin import DATASETS
    from mutexmatch.data.fake import FAKE_DATASETS, FakeSize, write_fake_root

    names = [n.strip() for n in (args.datasets or ",".join(FAKE_DATASETS)).split(",") if n.strip()]
    if not names:
        parser.error(f"--datasets={args.datasets!r}: names no dataset; give some of {','.join(FAKE_DATASETS)}")
    sizes = None
    if args.test_per_class is not None:
        fake = {n: DATASETS[n].fake_size for n in names if n in FAKE_DATASETS}
        sizes = {n: FakeSize(s.train_per_class, args.test_per_class, s.unlabeled) for n, s in fake.items()}
    try:
        root = write_fake_root(args.root, names, sizes=sizes)
    except ValueError as e:
        parser.error(str(e))
    except OSError as e:  # the root is a file, a read-only folder, a full disk
        parser.error(f"{args.root}: cannot write the data there ({e.strerror or e}: {e.filename or args.root})")
    print(root)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
