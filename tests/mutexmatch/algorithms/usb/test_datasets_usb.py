"""EuroSAT and TissueMNIST (issue 42 item 4) read as semilearn 0.3.2's own dataset classes read them: the same images,
labels and train/test split, and at USB-CV's 32 pixels the same evaluation tensors (USB's transform_val: Resize,
ToTensor, Normalize(0.5, 0.5)), on files in the real formats (the fake writers'; EuroSAT with classes of unequal
sizes, as the real ones)."""
from __future__ import annotations

import importlib
import shutil

import numpy as np
import pytest
import torch
import torchvision.transforms as T

from mutexmatch.data.builtin import DATASETS
from mutexmatch.data.builtin.eurosat import CLASSES, IMAGES
from mutexmatch.data.cache import CACHE_DIRNAME
from mutexmatch.data.fake import write_fake_root
from mutexmatch.data.load import load_dataset
from mutexmatch.data.registry import FakeSize

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def usb(usb_lockstep):
    return (importlib.import_module("semilearn.datasets.cv_datasets.eurosat"),
            importlib.import_module("semilearn.datasets.cv_datasets.medmnist"))


def _ours(name: str, root, size: int):
    bundle = load_dataset(name, root, image_size=size)
    info = bundle.info
    mean, std = torch.tensor(info.mean)[:, None, None], torch.tensor(info.std)[:, None, None]
    return bundle, lambda x: (x.float() / 255 - mean) / std


def _usb_val(size: int):
    return T.Compose([T.Resize(size), T.ToTensor(), T.Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))])


def test_eurosat_split_and_images_equal_usbs(usb, tmp_path) -> None:
    usb_eurosat, _ = usb
    root = write_fake_root(tmp_path, ["eurosat"], sizes={"eurosat": FakeSize(8, 2)}, seed=1)
    for name in CLASSES[:3]:   # unequal classes, as the real ones (2,000-3,000): int(0.8 n) differs per class
        for f in sorted((root / "eurosat" / IMAGES / name).iterdir())[-3:]:
            f.unlink()
    shutil.rmtree(root / "eurosat" / CACHE_DIRNAME)   # decoded by write_fake_root before the removal
    for size in (64, 32):
        bundle, norm = _ours("eurosat", root, size)
        for split, usb_split, ours in (("train", "trainval", bundle.train), ("test", "test", bundle.test)):
            theirs = usb_eurosat.EuroSat("fixmatch", str(root / "eurosat" / IMAGES), split=usb_split,
                                         transform=_usb_val(size))
            assert len(theirs) == len(ours), split
            assert ours.y.tolist() == [int(t) for t in theirs.targets], split
            want = torch.stack([theirs[i]["x_lb"] for i in range(len(theirs))])
            torch.testing.assert_close(norm(ours.x), want, rtol=0, atol=1e-6)
    assert (len(bundle.train), len(bundle.test)) == (3 * 5 + 7 * 8, 3 * 2 + 7 * 2)   # 7 files: int(5.6) = 5 train


def test_tissuemnist_images_equal_usbs(usb, tmp_path) -> None:
    _, usb_medmnist = usb
    root = write_fake_root(tmp_path, ["tissuemnist"], sizes={"tissuemnist": FakeSize(6, 3)}, seed=2)
    for size in (28, 32):
        bundle, norm = _ours("tissuemnist", root, size)
        for split, ours in (("train", bundle.train), ("test", bundle.test)):
            theirs = usb_medmnist.TissueMNIST("fixmatch", split=split, root=str(root / "tissuemnist"), as_rgb=True,
                                              transform=_usb_val(size))
            assert ours.y.tolist() == theirs.targets.astype(np.int64).tolist(), split
            want = torch.stack([theirs[i]["x_lb"] for i in range(len(theirs))])
            torch.testing.assert_close(norm(ours.x), want, rtol=0, atol=1e-6)


def test_the_facts_are_usbs(usb) -> None:
    usb_eurosat, usb_medmnist = usb
    info = usb_medmnist.INFO["tissuemnist"]
    tissue = DATASETS["tissuemnist"]
    assert tissue.info.num_classes == len(info["label"]) and tissue.files()[0][1] == info["MD5"]
    assert tissue.published_images == {s: info["n_samples"][s] for s in ("train", "test")}
    assert DATASETS["eurosat"].info.mean == usb_eurosat.dataset_mean == tissue.info.mean
