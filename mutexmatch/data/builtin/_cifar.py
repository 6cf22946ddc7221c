"""What CIFAR-10 and CIFAR-100 share: torchvision's python-batch format, read, listed, downloaded and generated."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import NoReturn

import numpy as np
import torch

from mutexmatch.data.cache import cache_path, cached_images
from mutexmatch.data.fakefill import balanced_labels, pickle_to, pixels
from mutexmatch.data.images import ImageData, to_nchw
from mutexmatch.data.registry import DatasetError, DatasetInfo, FakeSize, Splits
from mutexmatch.data.torchvision_reader import TorchvisionDataset


class CifarDataset(TorchvisionDataset):
    """A CIFAR: ``tv_class`` (``CIFAR10`` or ``CIFAR100``) knows the batch files, the meta file and their md5s."""

    def read(self, info: DatasetInfo, root: Path, ddir: Path, *, download: bool, extra: bool) -> Splits:
        train, test = (self._read_split(info, root, ddir, train=t, download=download) for t in (True, False))
        return train, test, None, None

    def _read_split(self, info: DatasetInfo, root: Path, ddir: Path, *, train: bool, download: bool) -> ImageData:
        cls = self.tv_class
        required = [rel for rel, _ in self.files()]

        def decode() -> ImageData:
            ds = self.open(info, root, ddir, required, lambda: cls(str(ddir), train=train, download=download),
                           download=download)
            # torchvision keeps CIFAR as HWC (N, 32, 32, 3); its labels are a list of ints.
            return ImageData(to_nchw(ds.data, channels_last=True), torch.as_tensor(ds.targets, dtype=torch.int64))

        return cached_images(cache_path(ddir, "train" if train else "test", info.image_size), decode)

    def files(self, extra: bool = False) -> list[tuple[str, str | None]]:
        cls = self.tv_class
        pairs = [*cls.train_list, *cls.test_list, (cls.meta["filename"], cls.meta["md5"])]
        return [(f"{cls.base_folder}/{f}", md5) for f, md5 in pairs]

    def fetch(self, ddir: Path, extra: bool) -> None:
        self.tv_class(str(ddir), train=False, download=True)  # the smallest split that triggers the whole download

    def class_names(self, ddir: Path) -> list[str] | None:
        """The label names in torchvision's meta file (a latin1 pickle), read only once its md5 is verified."""
        meta, folder = self.tv_class.meta, self.tv_class.base_folder
        path = ddir / folder / meta["filename"]
        if not path.is_file():
            return None
        self.verify_published_md5s(ddir, only=[f"{folder}/{meta['filename']}"])
        with path.open("rb") as f:  # the same latin1 pickle torchvision's CIFAR classes read, verified above
            try:
                return list(_DataOnlyUnpickler(f, encoding="latin1").load()[meta["key"]])
            except pickle.UnpicklingError as err:
                raise DatasetError(f"{self.name}: {path}: {err}; delete it and run `python -m mutexmatch.datasets "
                                   f"download {self.name}`") from None

    def write_fake(self, root: Path, size: FakeSize, rng: np.random.Generator) -> Path:
        """CIFAR python batches: pickles with ``data`` uint8 (N, 3072) laid out as 1024 R, 1024 G, 1024 B."""
        cls, n = self.tv_class, self.info.num_classes
        fine = cls.meta["key"] == "fine_label_names"  # CIFAR-100: fine labels plus 20 coarse superclasses
        folder = root / self.folder / cls.base_folder
        folder.mkdir(parents=True, exist_ok=True)
        key = "fine_labels" if fine else "labels"
        train_y = balanced_labels(rng, n, size.train_per_class)
        batches = [f for f, _ in cls.train_list]
        for name_b, labels in zip(batches, np.array_split(train_y, len(batches))):
            entry = {"batch_label": name_b, "data": pixels(rng, (len(labels), 3072)), key: labels.tolist(),
                     "filenames": [f"{name_b}_{i}.png" for i in range(len(labels))]}
            if fine:
                entry["coarse_labels"] = (labels // 5).tolist()
            pickle_to(folder / name_b, entry)
        test_y = balanced_labels(rng, n, size.test_per_class)
        test = {"batch_label": "test", "data": pixels(rng, (len(test_y), 3072)), key: test_y.tolist()}
        if fine:
            test["coarse_labels"] = (test_y // 5).tolist()
            pickle_to(folder / cls.meta["filename"], {"fine_label_names": [f"c{i}" for i in range(n)],
                                                      "coarse_label_names": [f"s{i}" for i in range(20)]})
        else:
            pickle_to(folder / cls.meta["filename"], {"label_names": [f"c{i}" for i in range(n)], "num_vis": 3072})
        pickle_to(folder / cls.test_list[0][0], test)
        return folder


class _DataOnlyUnpickler(pickle.Unpickler):
    """Lists, dicts, strings and numbers only: a meta file that names a class or function is refused, not run."""

    def find_class(self, module: str, name: str) -> NoReturn:
        raise pickle.UnpicklingError(f"refused {module}.{name}: a dataset's meta file holds only data")


def cifar_info(n: int, name: str, mean: tuple[float, ...], std: tuple[float, ...], *, per_class: int,
               archive: str, folder: str) -> DatasetInfo:
    """CIFAR-10/100: the released code's statistics (themselves the usual CIFAR train-set statistics) for both
    normalisations, flip + crop 32 pad 4."""
    return DatasetInfo(
        name=name, num_classes=n, image_size=32, mean=mean, std=std, released_mean=mean, released_std=std,
        flip=True, train_per_class_min=per_class,
        download_hint=f"Set `data.download: true` to let torchvision download CIFAR-{n} (about 170 MB) into "
        f"<root>/{name}/, or extract {archive} there so that <root>/{name}/{folder}/ exists.")
