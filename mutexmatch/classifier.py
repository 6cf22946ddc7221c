"""A trained model as a classifier of new images (issue 34: ``best_model.pt`` was a bare state dict nobody loaded).

A run folder (or a trial's MLflow artifacts) holds what a prediction needs: the EMA weights (``best_model.pt``,
``final_model.pt``), the resolved ``config.yaml`` (backbone, algorithm and its heads) and ``dataset.json`` (classes,
image size, the normalisation the run applied: :func:`mutexmatch.training.run_files.dataset_facts`).
:func:`load_classifier` rebuilds the network from them and loads the weights with ``weights_only=True``;
:class:`Classifier` takes images as pixel values (0..255, NCHW, the decoding of
:func:`mutexmatch.data.imagefolder.decode_images`: RGB, shorter side to the run's size, centre crop), normalises them
as in training and returns the class probabilities of the TPC head (the paper's classifier, ``softmax(f(x))``).
:func:`folder_images` lists an image folder: flat, or one subfolder per class (then :func:`accuracy` scores it).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from mutexmatch.checks import check_int, shown
from mutexmatch.config import RunConfig, load_config
from mutexmatch.config.schema import IMAGE_SIZE_MAX, IMAGE_SIZE_MIN
from mutexmatch.training.runfolder import CONFIG, DATASET

__all__ = ["RunFiles", "Classifier", "find_run_files", "read_dataset_facts", "load_classifier", "folder_images",
           "predict_folder", "accuracy"]

_LUMA = torch.tensor([0.299, 0.587, 0.114]).view(1, 3, 1, 1)   # RGB → gray as PIL's convert("L") (ITU-R 601-2)
# A run's dataset.json is a few hundred bytes (a few KB with an image folder's class names); a file past this bound
# is not one (a 6 GB sidecar was read whole, fresh finding #9), nor a class count past MAX_CLASSES.
MAX_FACTS_BYTES = 1 << 20
MAX_CLASSES = 100_000


@dataclass(frozen=True)
class RunFiles:
    weights: Path
    config: Path
    dataset: Path


def find_run_files(weights: str | Path) -> RunFiles:
    """``weights`` and the ``config.yaml`` and ``dataset.json`` of its run: beside it (a run folder) or one folder up
    (a trial's MLflow artifacts, ``weights/best_model.pt``); ``ValueError`` naming what is missing."""
    weights = Path(weights)
    if not weights.is_file():
        raise ValueError(f"--weights {weights}: no such file; give a run's best_model.pt or final_model.pt")
    for folder in (weights.parent, weights.parent.parent):
        if (folder / CONFIG).is_file() and (folder / DATASET).is_file():
            return RunFiles(weights, folder / CONFIG, folder / DATASET)
    raise ValueError(f"--weights {weights}: no {CONFIG} and {DATASET} beside it or one folder up; keep the weights "
                     "in their run folder (or the trial's downloaded MLflow artifacts)")


class Classifier(nn.Module):
    """Pixel values (N, C, H, W) in 0..255 → class probabilities (N, num_classes): the run's normalisation, its
    network's TPC head, a softmax."""

    def __init__(self, net: nn.Module, mean: list[float], std: list[float], image_size: int,
                 classes: list[str]) -> None:
        super().__init__()
        self.net, self.image_size, self.classes = net, image_size, list(classes)
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1))
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.to(torch.float32)
        if x.shape[1] == 3 and self.mean.shape[1] == 1:  # a grayscale run (digits) given decoded RGB images
            gray = torch.equal(x, x[:, :1].expand_as(x))
            x = x[:, :1] if gray else (x * _LUMA.to(x.device)).sum(1, keepdim=True)
        x = (x / 255 - self.mean) / self.std
        return torch.softmax(self.net.forward_tpc(x).float(), dim=1)


def _network(cfg: RunConfig, num_classes: int, in_channels: int, image_size: int) -> nn.Module:
    """The run's network with its algorithm's heads, as :func:`mutexmatch.training.network.build_network` makes it
    (its weights are replaced by the loaded ones)."""
    from mutexmatch.imb_algorithms import algorithm_class
    from mutexmatch.models import build_model

    alg_cls = algorithm_class(cfg)
    model = build_model(cfg.model.backbone, num_classes=num_classes, in_channels=in_channels, image_size=image_size,
                        with_tnc=alg_cls.uses_tnc)
    params = alg_cls.Params.parse(alg_cls.params_from(cfg.algorithm), alg_cls.name, num_classes)
    model.add_heads(alg_cls.heads(params, model.feat_dim, num_classes))
    alg_cls.setup_model(params, model, cfg.train.ema)
    return model


def _statistics(where: Path, facts: dict) -> tuple[list[float], list[float]]:
    """The normalisation's mean and std: lists of 1 (gray) or 3 (RGB) finite numbers of one length, std > 0."""
    out = []
    for field in ("mean", "std"):
        v = facts.get(field)
        ok = isinstance(v, list) and len(v) in (1, 3) and all(
            isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in v)
        if not ok or field == "std" and min(v) <= 0:
            raise ValueError(f"{where}: {field}={shown(v)}: must be a list of 1 or 3 finite numbers"
                             f"{' > 0' if field == 'std' else ''}; restore the run's own {DATASET}")
        out.append([float(x) for x in v])
    if len(out[0]) != len(out[1]):
        raise ValueError(f"{where}: std={shown(out[1])}: must have one value per channel of mean={shown(out[0])}")
    return out[0], out[1]


def read_dataset_facts(path: Path) -> tuple[list[float], list[float], int, list[str]]:
    """A run's ``dataset.json`` (:func:`mutexmatch.training.run_files.dataset_facts`) as (mean, std, image size,
    class names), its size bounded before it is read and every field used checked (``ValueError``: one line)."""
    size = path.stat().st_size
    if size > MAX_FACTS_BYTES:
        raise ValueError(f"{path}: is {size / 2**20:.1f} MiB, larger than the {MAX_FACTS_BYTES >> 20} MiB a run's "
                         f"{DATASET} can be (a few KB); not the run's own file: restore it from the run folder")
    try:
        facts = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: not JSON ({e}); restore the run's own {DATASET}") from None
    if not isinstance(facts, dict):
        raise ValueError(f"{path}: holds {type(facts).__name__}, not the object of a run's {DATASET}")
    mean, std = _statistics(path, facts)
    image_size = check_int(f"{path}: image_size", facts.get("image_size"), low=IMAGE_SIZE_MIN, high=IMAGE_SIZE_MAX)
    n = check_int(f"{path}: num_classes", facts.get("num_classes"), low=2, high=MAX_CLASSES)
    classes = facts.get("classes")
    if classes is None:
        return mean, std, image_size, [str(i) for i in range(n)]
    if not (isinstance(classes, list) and all(isinstance(c, str) for c in classes)
            and len(set(classes)) == len(classes)):
        raise ValueError(f"{path}: classes={shown(classes)}: must be null or a list of distinct names")
    if len(classes) != n:
        raise ValueError(f"{path}: num_classes={n}: must be the number of names in classes ({len(classes)})")
    return mean, std, image_size, classes


def load_classifier(weights: str | Path) -> Classifier:
    """The classifier of the run whose ``weights`` these are (:func:`find_run_files`), in eval mode on the CPU."""
    files = find_run_files(weights)
    mean, std, size, classes = read_dataset_facts(files.dataset)
    net = _network(load_config(files.config), len(classes), len(mean), size)
    state = torch.load(files.weights, map_location="cpu", weights_only=True)
    try:
        net.load_state_dict(state)
    except RuntimeError as e:
        first = str(e).strip().splitlines()[0]
        raise ValueError(f"--weights {files.weights}: not the weights of the network {files.config} describes "
                         f"({first})") from None
    return Classifier(net, mean, std, size, classes).eval()


def folder_images(folder: str | Path) -> tuple[list[Path], list[str | None]]:
    """The images under ``folder`` (sorted) and each one's class: its subfolder's name when the images sit one level
    down in class folders, else None. ``ValueError`` when there is no image."""
    from mutexmatch.data.imagefolder import image_extensions

    folder, exts = Path(folder), image_extensions()
    if not folder.is_dir():
        raise ValueError(f"--images {folder}: not a folder; give a folder of images (or of class folders)")
    paths = sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix.lower() in exts)
    if not paths:
        raise ValueError(f"--images {folder}: no image files (extensions PIL opens, e.g. .png, .jpg)")
    labelled = all(p.parent.parent == folder for p in paths)
    return paths, [p.parent.name if labelled else None for p in paths]


@torch.inference_mode()
def predict_folder(model: Classifier, paths: list[Path], batch_size: int = 256) -> torch.Tensor:
    """Class probabilities (N, num_classes) of the images ``paths``, decoded as in training."""
    from mutexmatch.data.imagefolder import decode_images

    out = [model(decode_images(paths[i:i + batch_size], model.image_size)) for i in range(0, len(paths), batch_size)]
    return torch.cat(out)


def accuracy(model: Classifier, probs: torch.Tensor, labels: list[str | None]) -> float | None:
    """The top-1 accuracy against the class folders' names; None when the images have no class folders or a folder
    names no class of the model (``ValueError`` naming it)."""
    if not labels or labels[0] is None:
        return None
    unknown = sorted(set(labels) - set(model.classes))
    if unknown:
        raise ValueError(f"--images: class folder(s) {', '.join(unknown)} are no class of the model "
                         f"({', '.join(model.classes)})")
    target = torch.tensor([model.classes.index(c) for c in labels])
    return float((probs.argmax(dim=1) == target).float().mean())
