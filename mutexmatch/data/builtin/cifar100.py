"""CIFAR-100: 60,000 32x32 colour images of 100 classes, in torchvision's python-batch layout.

Folder: ``<root>/cifar100/cifar-100-python/``.
"""

from __future__ import annotations

from torchvision.datasets import CIFAR100

from mutexmatch.data.builtin._cifar import CifarDataset, cifar_info
from mutexmatch.data.registry import FakeSize, register_dataset


@register_dataset
class Cifar100(CifarDataset):
    info = cifar_info(100, "cifar100", tuple(v / 255 for v in (129.3, 124.1, 112.4)),
                      tuple(v / 255 for v in (68.2, 65.4, 70.4)), per_class=500,
                      archive="cifar-100-python.tar.gz", folder="cifar-100-python")
    tv_class = CIFAR100
    folder = "cifar100"
    published_images = {"train": 50_000, "test": 10_000}
    fake_size = FakeSize(100, 2)  # 10,000 labels, the most experiments/*.yaml use
    listing_order = 2
