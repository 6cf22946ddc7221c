"""TissueMNIST (MedMNIST v2): 236,386 28x28 grey kidney-cortex cell images of 8 classes, MedMNIST's
``tissuemnist.npz`` at ``<root>/tissuemnist/tissuemnist.npz`` (keys ``{train,val,test}_{images,labels}``: images
(N, 28, 28) uint8, labels (N, 1)).

As USB-CV (semilearn 0.3.2, ``datasets/cv_datasets/medmnist.py``): it trains on the ``train`` split (165,466) and
tests on ``test`` (47,280), the ``val`` split unused; images as RGB (MedMNIST's ``as_rgb``: the grey value in all
three channels, what a pretrained RGB ViT takes), mean = std = 0.5, resized to ``img_size`` (USB-CV: 32) by
torchvision's ``Resize`` of the PIL image (bilinear), here once at load time (``data.image_size``). USB also flips
vertically, which this project's weak augmentation does not (horizontal only).
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torchvision.transforms import functional as TF

from mutexmatch.data.cache import cache_path, cached_images
from mutexmatch.data.fakefill import balanced_labels, pixels
from mutexmatch.data.imagefiles import regular_file
from mutexmatch.data.images import ImageData
from mutexmatch.data.registry import (BuiltinDataset, DatasetError, DatasetInfo, FakeSize, Splits, missing_error,
                                      register_dataset)

FILE = "tissuemnist.npz"
MD5 = "ebe78ee8b05294063de985d821c1c34b"   # MedMNIST's INFO["tissuemnist"]["MD5"] (semilearn's copy)
URL = "https://zenodo.org/record/5208230/files/tissuemnist.npz"
_SPLITS = {"train": "train", "test": "test"}   # our split -> the npz's


@register_dataset
class TissueMnist(BuiltinDataset):
    info = DatasetInfo(
        name="tissuemnist", num_classes=8, image_size=28, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5), flip=True,
        pad=3, pad_mode="reflect",
        download_hint=f"TissueMNIST has no downloader here (data.download does not apply): put MedMNIST's {FILE} "
        f"({URL}, md5 {MD5}; or `python -m medmnist download`) at <root>/tissuemnist/{FILE}.",
    )
    folder = "tissuemnist"
    published_images = {"train": 165_466, "test": 47_280}
    fake_size = FakeSize(50, 2)   # USB-CV's most labels: 400 (50 a class)
    min_image_size = 16
    min_size_reason = " (USB-CV resizes it to 32)"
    listing_order = 8

    def scaled_pad(self, size: int) -> int:
        return size // 8

    def files(self, extra: bool = False) -> list[tuple[str, str | None]]:
        return [(FILE, MD5)]

    def read(self, info: DatasetInfo, root: Path, ddir: Path, *, download: bool, extra: bool) -> Splits:
        size = info.image_size

        def decoder(split: str):
            def decode() -> ImageData:
                grey, labels = _arrays(info, root, ddir, _SPLITS[split])
                return ImageData(_rgb(grey, size), torch.from_numpy(labels))
            return decode

        return (cached_images(cache_path(ddir, "train", size), decoder("train")),
                cached_images(cache_path(ddir, "test", size), decoder("test")), None, None)

    def write_fake(self, root: Path, size: FakeSize, rng: np.random.Generator) -> Path:
        """``tissuemnist.npz`` as MedMNIST writes it (``np.savez_compressed``): every split's images (N, 28, 28)
        uint8 and labels (N, 1) uint8; ``val`` gets the test split's size."""
        folder = root / self.folder
        folder.mkdir(parents=True, exist_ok=True)
        arrays = {}
        for split, per_class in (("train", size.train_per_class), ("val", size.test_per_class),
                                 ("test", size.test_per_class)):
            labels = balanced_labels(rng, self.info.num_classes, per_class)
            arrays[f"{split}_images"] = pixels(rng, (len(labels), 28, 28))
            arrays[f"{split}_labels"] = labels.astype(np.uint8)[:, None]
        np.savez_compressed(folder / FILE, **arrays)
        return folder


def _arrays(info: DatasetInfo, root: Path, ddir: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    """The npz's ``split`` images (N, 28, 28) uint8 and labels (N,) int64; a file that is not MedMNIST's is one
    line naming it."""
    path = ddir / FILE
    if not path.exists():
        raise missing_error(info, root, ddir, [path])
    try:
        with np.load(regular_file(path, info.name, DatasetError)) as npz:
            images, labels = npz[f"{split}_images"], npz[f"{split}_labels"]
    except (KeyError, ValueError, OSError, zipfile.BadZipFile) as e:
        raise DatasetError(f"tissuemnist: {path} is not MedMNIST's {FILE} ({type(e).__name__}: {e}); download it "
                           f"again ({URL}, md5 {MD5})") from None
    if images.ndim != 3 or images.shape[1:] != (28, 28) or images.dtype != np.uint8 or len(labels) != len(images):
        raise DatasetError(f"tissuemnist: {path}: {split}_images is {images.shape} {images.dtype} with "
                           f"{len(labels)} labels; MedMNIST's holds (N, 28, 28) uint8 and N labels")
    return images, labels.reshape(-1).astype(np.int64)


def _rgb(grey: np.ndarray, size: int) -> torch.Tensor:
    """(N, 3, size, size) uint8: each image as USB reads it (PIL, RGB), resized with torchvision's Resize."""
    out = torch.empty((len(grey), 3, size, size), dtype=torch.uint8)
    for i, a in enumerate(grey):
        img = Image.fromarray(a).convert("RGB")
        if size != a.shape[0]:
            img = TF.resize(img, [size, size])
        out[i] = torch.from_numpy(np.array(img)).permute(2, 0, 1)
    return out
