"""The dataset registry (mutexmatch/data/registry.py, mutexmatch/data/builtin/): every registered dataset's facts
are consistent with each other, and registration refuses what would make them ambiguous."""

import warnings

import pytest
import torch

from mutexmatch.data import imagefolder
from mutexmatch.data.builtin import DATASET_NAMES, DATASETS
from mutexmatch.data.cache import CACHE_DIRNAME, CHECKSUM_SUFFIX, cache_path, checksum_path
from mutexmatch.data.load import cache_paths, dataset_dir, footprint, load_dataset
from mutexmatch.data.registry import BuiltinDataset, register_dataset
from mutexmatch.checksum import sha256_file

NAMES = sorted(DATASETS)


def test_every_name_is_listed_once_and_imagefolder_last():
    assert sorted(DATASET_NAMES[:-1]) == NAMES and DATASET_NAMES[-1] == imagefolder.NAME
    assert len({d.folder for d in DATASETS.values()}) == len(DATASETS)  # no two datasets share a folder


@pytest.mark.parametrize("name", NAMES)
def test_facts_are_consistent(name):
    dataset = DATASETS[name]
    info = dataset.info
    assert info.name == name == dataset.name and dataset.folder and "/" not in dataset.folder
    assert info.num_classes >= 2 and info.image_size >= 8 and len(info.mean) == info.channels
    assert dataset.real_test_images >= info.num_classes
    if dataset.published_images:
        assert {"train", "test"} <= set(dataset.published_images)
        assert info.train_per_class_min is None or \
            info.train_per_class_min * info.num_classes <= dataset.published_images["train"]
    assert info.has_unlabeled_split == ("unlabeled" in dataset.published_images)
    assert dataset.extra_split is None or dataset.extra_split in dataset.published_images
    assert dataset.needs_files == (dataset.fake_size is not None)  # what is on disk can be generated
    if dataset.min_image_size is not None:
        assert dataset.min_image_size <= info.image_size
    for labels in dataset.allowed_num_labels or ():
        assert labels % info.num_classes == 0 and dataset.allowed_num_labels_reason
    if dataset.downloadable:
        assert dataset.files() and all(rel and not rel.startswith("/") for rel, _ in dataset.files())


@pytest.mark.parametrize("name", NAMES)
def test_cache_paths_and_footprint_follow_the_declared_splits(name, tmp_path):
    dataset = DATASETS[name]
    paths = cache_paths(name, tmp_path)
    assert list(paths) == dataset.cached_splits(False)
    assert all(p == dataset_dir(name, tmp_path) / CACHE_DIRNAME / f"{s}_{dataset.info.image_size}px.pt"
               for s, p in paths.items())
    fp = footprint(name, tmp_path)
    assert fp.channels == dataset.info.channels and fp.size == dataset.info.image_size
    if dataset.published_images:
        assert fp.splits == {s: dataset.published_images[s] for s in paths}


def test_a_name_registered_twice_is_refused():
    source = DATASETS["digits"]

    class Again(BuiltinDataset):
        info = source.info
        folder = "again"

    with pytest.raises(ValueError, match="dataset 'digits' registered twice"):
        register_dataset(Again)
    assert DATASETS["digits"] is source


@pytest.mark.parametrize("name", ["digits", "cifar10"])
def test_a_cache_in_460dc25s_format_is_read_without_decoding(name, tmp_path):
    """The cache of issue 29's starting commit (same folder, file names, payload and checksum file) is served as
    it is: its pixels, not the reader's (digits would decode scikit-learn's, CIFAR has no files here at all)."""
    info = DATASETS[name].info
    ddir = tmp_path / DATASETS[name].folder
    written = {}
    for split, n in (("train", 3 * info.num_classes), ("test", info.num_classes)):
        x = torch.full((n, info.channels, info.image_size, info.image_size), 7, dtype=torch.uint8)
        y = torch.arange(n, dtype=torch.int64) % info.num_classes
        path = ddir / ".mutexmatch_cache" / f"{split}_{info.image_size}px.pt"
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save({"format": 1, "x": x, "y": y}, path)
        (path.parent / (path.name + ".sha256")).write_text(sha256_file(path))
        written[split] = (x, y)
        assert path == cache_path(ddir, split, info.image_size) and checksum_path(path).name.endswith(CHECKSUM_SUFFIX)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an unreadable cache warns before it is decoded again
        bundle = load_dataset(name, tmp_path)
    for split, (x, y) in written.items():
        assert torch.equal(getattr(bundle, split).x, x) and torch.equal(getattr(bundle, split).y, y)
