"""``data.crop_ratio`` (issue 42 item 3): USB-CV's weak crop, RandomCrop(size, padding=int(size * (1 - crop_ratio)),
padding_mode='reflect'), in place of the dataset's own padding; the run's batches use it."""
from __future__ import annotations

import dataclasses

import pytest

from mutexmatch.config import parse_config
from mutexmatch.data.augment import weak_crop
from mutexmatch.data.builtin import DATASETS
from mutexmatch.training import Trainer
from mutexmatch.training import batches


@pytest.mark.parametrize(("size", "ratio", "pad"), [(32, 0.875, 4), (96, 0.875, 12), (224, 0.875, 28), (32, 1.0, 0),
                                                     (16, 0.9, 1)])
def test_usb_cv_padding(size: int, ratio: float, pad: int) -> None:
    info = dataclasses.replace(DATASETS["cifar10"].info, image_size=size)
    assert weak_crop(info, ratio) == (pad, "reflect")


def test_without_crop_ratio_the_dataset_pads_as_before() -> None:
    assert weak_crop(DATASETS["cifar10"].info, None) == (4, "constant")
    assert weak_crop(DATASETS["miniimagenet"].info, None) == (10, "reflect")


@pytest.mark.parametrize(("ratio", "want"), [(None, (2, "constant")), (0.75, (4, "reflect"))])
def test_a_runs_batches_crop_with_it(tmp_path, monkeypatch, ratio, want) -> None:
    seen = []
    real = batches.make_views

    def spy(spec, x_lb, x_ulb, aug, *args):
        seen.append((aug["pad"], aug["pad_mode"]))
        return real(spec, x_lb, x_ulb, aug, *args)
    monkeypatch.setattr(batches, "make_views", spy)
    data = {"dataset": "digits", "num_labels": 20, "fold": 1} | ({"crop_ratio": ratio} if ratio else {})
    cfg = parse_config({"data": data, "model": {"backbone": "small_cnn"}, "algorithm": {"name": "fixmatch"},
                        "train": {"iterations": 2, "eval_interval": 2, "batch_size": 4, "mu": 2, "num_threads": 1,
                                  "progress": False}, "output_dir": str(tmp_path / "run")})
    Trainer(cfg).fit(stop_at=1)
    assert seen and set(seen) == {want}   # digits: 16 px, its own pad 2 of zeros; 0.75 -> int(16 * 0.25) = 4
