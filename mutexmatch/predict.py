"""``python -m mutexmatch.predict --weights RUN/best_model.pt --images DIR``: classify the images of a folder with a
trained run's EMA weights (:mod:`mutexmatch.classifier`), one CSV line per image (path, class, probability); with
one subfolder per class, also the top-1 accuracy. The command line's face only."""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path
from typing import Sequence

from mutexmatch.cli import add_version, entry_point

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m mutexmatch.predict", description=__doc__.split("\n\n")[0])
    p.add_argument("--weights", required=True, type=Path,
                   help="a run's best_model.pt or final_model.pt (config.yaml and dataset.json beside it or one "
                        "folder up, as in a trial's MLflow artifacts)")
    p.add_argument("--images", required=True, type=Path, help="a folder of images, or of one folder per class")
    p.add_argument("--out", type=Path, help="write the CSV here instead of to stdout")
    p.add_argument("--batch-size", type=int, default=256, help="images per forward pass (default %(default)s)")
    return add_version(p)


def _bad_args(args: argparse.Namespace) -> str | None:
    """What is wrong with the arguments that needs no model to tell, said before any work (an ``--out`` into a
    missing folder failed only after every image was classified, fresh finding #12)."""
    if args.batch_size < 1:
        return f"--batch-size={args.batch_size}: must be >= 1"
    out = args.out
    if out is not None and out.is_dir():
        return f"--out {out}: is a folder; give a file name (e.g. {out / 'predictions.csv'})"
    if out is not None and not out.parent.is_dir():
        return f"--out {out}: folder {out.parent} does not exist; make it (mkdir -p {out.parent}) or write elsewhere"
    return None


@entry_point("python -m mutexmatch.predict")
def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    problem = _bad_args(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    from mutexmatch.classifier import accuracy, folder_images, load_classifier, predict_folder

    try:
        model = load_classifier(args.weights)
        paths, labels = folder_images(args.images)
        probs = predict_folder(model, paths, args.batch_size)
        acc = accuracy(model, probs, labels)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    conf, top = probs.max(dim=1)
    rows = [["image", "class", "probability"]]
    rows += [[str(p), model.classes[int(k)], f"{float(c):.4f}"] for p, k, c in zip(paths, top, conf)]
    if args.out:
        with open(args.out, "w", newline="") as f:
            csv.writer(f).writerows(rows)
    else:
        csv.writer(sys.stdout).writerows(rows)
    if acc is not None:
        print(f"[predict] top-1 accuracy on {len(paths)} images in class folders: {100 * acc:.2f}%", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
