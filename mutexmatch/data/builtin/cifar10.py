"""CIFAR-10: 60,000 32x32 colour images of 10 classes, in torchvision's python-batch layout.

Folder: ``<root>/cifar10/cifar-10-batches-py/`` (torchvision root = ``<root>/cifar10``).
"""

from __future__ import annotations

from torchvision.datasets import CIFAR10

from mutexmatch.data.builtin._cifar import CifarDataset, cifar_info
from mutexmatch.data.registry import FakeSize, register_dataset


@register_dataset
class Cifar10(CifarDataset):
    info = cifar_info(10, "cifar10", tuple(v / 255 for v in (125.3, 123.0, 113.9)),
                      tuple(v / 255 for v in (63.0, 62.1, 66.7)), per_class=5000,
                      archive="cifar-10-python.tar.gz", folder="cifar-10-batches-py")
    tv_class = CIFAR10
    folder = "cifar10"
    published_images = {"train": 50_000, "test": 10_000}
    fake_size = FakeSize(400, 2)  # 4,000 labels, the most experiments/*.yaml use
    listing_order = 1
