"""The CPU-sized transfer check's two helpers (issue 42 item 5; experiments/transfer_cpu.yaml, docs/pretrained.md):

    python -m experiments.transfer_cpu folders --archive cifar10-jpeg.tar.gz --to data
        the CIFAR-10 JPEG archive (train/<class>/, test/<class>/) as two image folders of disjoint classes:
        data/cifar10-c0-4 (airplane .. deer: the pretraining task) and data/cifar10-c5-9 (dog .. truck: the
        semi-supervised task), each with every train image of its classes and the first --test-per-class test images
        of each class (sorted names), files copied byte for byte.
    python -m experiments.transfer_cpu convert RUN/final_model.pt weights/transfer_cpu/vit_tiny_c0-4.pth
        a run's saved weights (``final_model.pt``/``best_model.pt``: the network's state dict, the backbone's
        tensors under ``backbone.``) as USB's file form, ``{'model': <the backbone's state dict>}`` (timm names, its
        old head included: USB's loading rule drops it), the file ``model.pretrained`` reads.

Classes are CIFAR-10's label order (the archive's folders, sorted), so ``--classes 0-4`` names the same five classes
on every machine. Both commands refuse to overwrite what is there unless told (``--overwrite``).
"""
from __future__ import annotations

import argparse
import io
import sys
import tarfile
from pathlib import Path

import torch

from mutexmatch.atomic import atomic_write

# the backbone's tensors in the network's state dict (mutexmatch.models.net.MutexNet.backbone)
BACKBONE_PREFIX = "backbone."
SPLITS = ("train", "test")
SUBSETS = {"cifar10-c0-4": range(0, 5), "cifar10-c5-9": range(5, 10)}


def _members(archive: tarfile.TarFile) -> dict[str, dict[str, list[tarfile.TarInfo]]]:
    """split -> class folder -> its image files (sorted by name)."""
    found: dict[str, dict[str, list[tarfile.TarInfo]]] = {s: {} for s in SPLITS}
    for m in archive.getmembers():
        parts = Path(m.name).parts
        if m.isfile() and len(parts) >= 3 and parts[-3] in SPLITS:
            found[parts[-3]].setdefault(parts[-2], []).append(m)
    for split in found.values():
        for files in split.values():
            files.sort(key=lambda m: Path(m.name).name)
    return found


def make_folders(archive_path: Path, out: Path, test_per_class: int, overwrite: bool) -> list[Path]:
    """Write the class-subset image folders of :data:`SUBSETS` under ``out``; returns their paths."""
    targets = [out / name for name in SUBSETS]
    there = [t for t in targets if t.exists()]
    if there and not overwrite:
        raise SystemExit(f"--to {out}: {', '.join(map(str, there))} already there; remove it or pass --overwrite")
    with tarfile.open(archive_path) as archive:
        found = _members(archive)
        classes = sorted(found["train"])
        if len(classes) != 10 or sorted(found["test"]) != classes:
            raise SystemExit(f"--archive {archive_path}: expected train/<class>/ and test/<class>/ for CIFAR-10's "
                             f"10 classes, found train: {classes}, test: {sorted(found['test'])}")
        kept: dict[str, Path] = {}   # member name -> the folder its file goes to
        for target, labels in zip(targets, SUBSETS.values()):
            for label in labels:
                for split in SPLITS:
                    files = found[split][classes[label]]
                    for m in files[:test_per_class] if split == "test" else files:
                        kept[m.name] = target / split / classes[label]
    # a second pass in the archive's order: a gzip stream read backwards would be decompressed again per file
    with tarfile.open(archive_path, mode="r|gz") as stream:
        for m in stream:
            if m.name in kept:
                kept[m.name].mkdir(parents=True, exist_ok=True)
                (kept[m.name] / Path(m.name).name).write_bytes(stream.extractfile(m).read())
    for target, labels in zip(targets, SUBSETS.values()):
        print(f"[transfer_cpu] {target}: classes {', '.join(classes[i] for i in labels)}")
    return targets


def usb_form(state: dict[str, torch.Tensor]) -> dict[str, dict[str, torch.Tensor]]:
    """A network's state dict as USB's weight file: ``{'model': the backbone's tensors, prefix stripped}``."""
    backbone = {k[len(BACKBONE_PREFIX):]: v for k, v in state.items() if k.startswith(BACKBONE_PREFIX)}
    if not backbone:
        raise SystemExit(f"no tensor named {BACKBONE_PREFIX}* in the weights (found: {', '.join(list(state)[:4])}): "
                         "give a run's final_model.pt or best_model.pt")
    return {"model": backbone}


def convert(weights: Path, out: Path, overwrite: bool) -> Path:
    """Write ``weights`` (a run's saved network) at ``out`` in USB's file form, atomically."""
    if out.exists() and not overwrite:
        raise SystemExit(f"{out}: already there; remove it or pass --overwrite")
    try:
        state = torch.load(weights, map_location="cpu", weights_only=True)
    except (OSError, RuntimeError) as e:
        raise SystemExit(f"{weights}: cannot be read as a run's weights ({e})") from None
    backbone = usb_form(state)["model"]
    write_usb_file(backbone, out)
    print(f"[transfer_cpu] {out}: {len(backbone)} backbone tensors from {weights}, USB's form")
    return out


def write_usb_file(backbone: dict[str, torch.Tensor], out: Path) -> Path:
    """``{'model': backbone}`` saved at ``out`` (atomically, its folder made), as USB's files are."""
    buf = io.BytesIO()
    torch.save({"model": backbone}, buf)
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(out, buf.getvalue())
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.transfer_cpu", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    f = sub.add_parser("folders", help="the two class-subset image folders from the CIFAR-10 JPEG archive")
    f.add_argument("--archive", type=Path, required=True,
                   help="the CIFAR-10 JPEG archive, train/<class>/ and test/<class>/ (cifar10-jpeg.tar.gz)")
    f.add_argument("--to", type=Path, default=Path("data"), help="where the folders go (default: data)")
    f.add_argument("--test-per-class", type=int, default=200, help="test images kept per class (default 200)")
    f.add_argument("--overwrite", action="store_true")
    c = sub.add_parser("convert", help="a run's saved weights as USB's {'model': state_dict} file")
    c.add_argument("weights", type=Path, help="RUN/final_model.pt or RUN/best_model.pt")
    c.add_argument("out", type=Path, help="the weight file to write")
    c.add_argument("--overwrite", action="store_true")
    args = p.parse_args(argv)
    if args.command == "folders":
        if args.test_per_class < 1:
            p.error(f"--test-per-class={args.test_per_class}: must be at least 1")
        make_folders(args.archive, args.to, args.test_per_class, args.overwrite)
    else:
        convert(args.weights, args.out, args.overwrite)
    return 0


if __name__ == "__main__":
    sys.exit(main())
