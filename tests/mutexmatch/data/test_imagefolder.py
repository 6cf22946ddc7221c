"""``data.dataset: imagefolder``: your own folder of class folders (mutexmatch/data/imagefolder.py).

The folders are generated here with PNG and JPEG files of mixed sizes and modes and read through the real loader,
cache and trainer.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import namedtuple
from pathlib import Path

import numpy as np
import yaml
import pytest
import torch
from PIL import Image

from mutexmatch.data import imagefolder
from mutexmatch.config import ConfigError, has_validation, parse_config
from mutexmatch.data.cache import CACHE_DIRNAME
from mutexmatch.data.load import cache_paths, footprint, load_dataset
from mutexmatch.data.fake import write_fake_imagefolder
from mutexmatch.data.splits import make_split

torch.set_num_threads(1)
REPO = Path(__file__).resolve().parents[3]


def _save(path: Path, arr: np.ndarray, mode: str | None = None, fmt: str | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    img = Image.fromarray(arr)
    if mode:
        img = img.convert(mode)
    img.save(path, format=fmt)


def _mixed_folder(root: Path) -> Path:
    """3 classes (sorted order differs from creation order), PNG/JPEG, RGB/L/P/RGBA, 8x8 and other sizes."""
    rng = np.random.default_rng(0)
    for cls in ("zebra", "cat", "dog"):
        for i in range(6):
            _save(root / "train" / cls / f"{i}.png", rng.integers(0, 256, (8, 8, 3), dtype=np.uint8))
        _save(root / "train" / cls / "sub" / "gray.png", rng.integers(0, 256, (8, 8), dtype=np.uint8))
        _save(root / "train" / cls / "pal.png", rng.integers(0, 256, (8, 8, 3), dtype=np.uint8), mode="P")
        _save(root / "train" / cls / "alpha.png", rng.integers(0, 256, (8, 8, 4), dtype=np.uint8))
        _save(root / "train" / cls / "wide.jpg", rng.integers(0, 256, (10, 20, 3), dtype=np.uint8))
        _save(root / "test" / cls / "t0.jpeg", rng.integers(0, 256, (8, 8, 3), dtype=np.uint8))
        _save(root / "test" / cls / "t1.PNG", rng.integers(0, 256, (16, 16, 3), dtype=np.uint8), fmt="PNG")
    (root / "train" / "cat" / "README.txt").write_text("not an image")
    (root / "train" / "cat" / ".DS_Store").write_bytes(b"\0")
    return root


@pytest.fixture
def folder(tmp_path) -> Path:
    return _mixed_folder(tmp_path / "imgs")


def test_classes_labels_and_colour_and_size_rules(folder) -> None:
    b = load_dataset("imagefolder", folder, image_size=8)
    assert b.classes == ("cat", "dog", "zebra")
    assert b.info.num_classes == 3 and b.info.channels == 3 and b.info.image_size == 8 and b.info.pad == 1
    assert b.train.x.shape == (3 * 10, 3, 8, 8) and b.test.x.shape == (6, 3, 8, 8)
    assert b.train.y.tolist() == [0] * 10 + [1] * 10 + [2] * 10 and b.test.y.tolist() == [0, 0, 1, 1, 2, 2]
    index = imagefolder.scan_folder(folder)
    rels = [r for r, _ in index.files["train"][:10]]
    assert rels == sorted(rels) and "cat/README.txt" not in rels and index.ignored == 1
    # an 8x8 RGB PNG is kept pixel for pixel
    i = rels.index("cat/0.png")
    assert torch.equal(b.train.x[i], torch.from_numpy(np.array(Image.open(folder / "train/cat/0.png"))).permute(2, 0, 1))
    # grayscale is copied to the three channels
    g = b.train.x[rels.index("cat/sub/gray.png")]
    assert torch.equal(g[0], g[1]) and torch.equal(g[1], g[2])
    # alpha is dropped: the colour under it is kept
    rgba = np.array(Image.open(folder / "train/cat/alpha.png"))
    assert torch.equal(b.train.x[rels.index("cat/alpha.png")], torch.from_numpy(rgba[..., :3].copy()).permute(2, 0, 1))
    # a 20x10 JPEG: shorter side to 8, centre crop (the documented rule, via the same function)
    with Image.open(folder / "train/cat/wide.jpg") as img:
        want = torch.from_numpy(imagefolder.to_rgb_square(img, 8)).permute(2, 0, 1)
    assert torch.equal(b.train.x[rels.index("cat/wide.jpg")], want)


def test_normalisation_statistics_come_from_the_train_images(folder) -> None:
    b = load_dataset("imagefolder", folder, image_size=8)
    x = b.train.x.double() / 255
    assert np.allclose(b.info.mean, x.mean((0, 2, 3)).numpy(), atol=1e-6)
    assert np.allclose(b.info.std, x.std((0, 2, 3), unbiased=False).numpy(), atol=1e-6)


def test_image_size_is_inferred_from_a_square_first_image_or_required(folder, tmp_path) -> None:
    assert load_dataset("imagefolder", folder).info.image_size == 8  # train/cat/0.png is 8x8
    odd = tmp_path / "odd"
    _save(odd / "train/a/0.png", np.zeros((6, 9, 3), np.uint8))
    _save(odd / "train/b/0.png", np.zeros((6, 9, 3), np.uint8))
    _save(odd / "test/a/0.png", np.zeros((6, 9, 3), np.uint8))
    with pytest.raises(imagefolder.ImageFolderError, match=r"train/a/0.png.*9x6, not square: set data.image_size"):
        load_dataset("imagefolder", odd)
    assert load_dataset("imagefolder", odd, image_size=4).train.x.shape == (2, 3, 4, 4)


def test_cache_is_reused_and_an_edited_folder_is_decoded_again(folder, monkeypatch) -> None:
    first = load_dataset("imagefolder", folder, image_size=8)
    files = sorted(p.name for p in (folder / CACHE_DIRNAME).iterdir())
    cached = [n for n in files if n.endswith(".pt")]
    assert len(cached) == 2 and files == sorted([*cached, *(n + ".sha256" for n in cached)])  # each with its sha256
    assert sorted(p.name for p in cache_paths("imagefolder", folder, image_size=8).values()) == cached

    def no_decode(*args, **kwargs):
        raise AssertionError("decoded although the cache is current")

    with monkeypatch.context() as m:
        m.setattr(imagefolder, "decode_images", no_decode)
        second = load_dataset("imagefolder", folder, image_size=8)
    assert torch.equal(second.train.x, first.train.x)
    # an edit: one image replaced by a different one (new size and mtime)
    _save(folder / "train/dog/0.png", np.full((8, 8, 3), 7, np.uint8))
    os.utime(folder / "train/dog/0.png", ns=(1, 1))
    third = load_dataset("imagefolder", folder, image_size=8)
    i = [r for r, _ in imagefolder.scan_folder(folder).files["train"]].index("dog/0.png")
    assert (third.train.x[i] == 7).all() and not torch.equal(third.train.x, first.train.x)
    files = sorted(p.name for p in (folder / CACHE_DIRNAME).iterdir())
    now = [n for n in files if n.endswith(".pt")]
    assert len(files) == 4 and now != cached  # the superseded train cache and its sha256 are gone; test's unchanged
    assert [n for n in now if n.startswith("test")] == [n for n in cached if n.startswith("test")]


def test_val_and_unlabeled_folders(folder) -> None:
    rng = np.random.default_rng(1)
    for cls in ("cat", "zebra"):
        _save(folder / "val" / cls / "v.png", rng.integers(0, 256, (8, 8, 3), dtype=np.uint8))
    for rel in ("u0.png", "deep/er/u1.jpg", "u2.png"):
        _save(folder / "unlabeled" / rel, rng.integers(0, 256, (8, 8, 3), dtype=np.uint8))
    fp = footprint("imagefolder", folder, image_size=8)
    b = load_dataset("imagefolder", folder, image_size=8)
    assert fp.splits == {"train": len(b.train), "test": len(b.test), "val": 2, "unlabeled": 3}  # counted undecoded
    assert (fp.train, fp.unlabeled) == (len(b.train), 3)
    assert b.val.y.tolist() == [0, 2]
    assert len(b.extra_unlabeled) == 3 and (b.extra_unlabeled.y == -1).all() and b.info.has_unlabeled_split
    split = make_split(b.train.y.numpy(), dataset="imagefolder", num_labels=6, num_classes=3, fold=0,
                       num_extra_unlabeled=len(b.extra_unlabeled))
    assert len(split.val) == 0 and split.unlabeled.tolist() == list(range(33))


@pytest.mark.parametrize("rule", ["official", "balanced"])
def test_both_split_rules_and_the_config(folder, rule) -> None:
    cfg = parse_config({"data": {"dataset": "imagefolder", "root": str(folder), "num_labels": 6, "split_rule": rule,
                                 "val_per_class": 2, "image_size": 8}})
    assert has_validation(cfg.data)
    b = load_dataset("imagefolder", folder, image_size=8)
    split = make_split(b.train.y.numpy(), dataset="imagefolder", num_labels=6, num_classes=3, fold=1, rule=rule,
                       val_per_class=2)
    assert np.bincount(b.train.y.numpy()[split.labeled], minlength=3).tolist() == [2, 2, 2]
    assert not set(split.val) & set(split.labeled) and len(split.val) == 6


# ---------------------------------------------------------------------------------------------------------------
# Bad input: a clear error naming the path and the rule, before anything is decoded

Bad = namedtuple("Bad", "edit match")


def _drop(rel):
    return lambda root: shutil.rmtree(root / rel)


def _empty_class(root):
    for p in (root / "train/dog").rglob("*"):
        if p.is_file():
            p.unlink()


BAD_LAYOUTS = {
    "missing train": Bad(_drop("train"), r"imgs/train is missing: data.root must hold train/<class>/ and test"),
    "missing test": Bad(_drop("test"), r"imgs/test is missing"),
    "empty class": Bad(_empty_class, r"imgs/train/dog holds no images"),
    "test class not in train": Bad(lambda r: _save(r / "test/horse/0.png", np.zeros((8, 8, 3), np.uint8)),
                                   r"imgs/test/horse is not a class of train/ \(cat, dog, zebra\)"),
    "loose file": Bad(lambda r: _save(r / "train/x.png", np.zeros((8, 8, 3), np.uint8)),
                      r"imgs/train/x.png lies directly in train/"),
    "one class": Bad(lambda r: [shutil.rmtree(r / "train" / c) for c in ("dog", "zebra")] and None,
                     r"holds 1 class folder\(s\): a classifier needs at least 2"),
    # Adversarial finding #16: an empty test/ trained and logged test/acc 0.0 (rc 0); a search on an empty val/
    # passed --dry-run.
    "empty test": Bad(lambda r: shutil.rmtree(r / "test") or (r / "test").mkdir(),
                      r"imgs/test holds no class folder: test/ needs test/<class>/ images of the train classes"),
    "empty val": Bad(lambda r: (r / "val" / ".hidden").mkdir(parents=True),
                     r"imgs/val holds no class folder: val/ needs val/<class>/ images of the train classes "
                     r"\(or remove the empty val/ to carve data.val_per_class out of train/\)"),
}


@pytest.mark.parametrize("case", sorted(BAD_LAYOUTS))
def test_bad_layouts_are_refused_by_the_config_naming_the_path(folder, case) -> None:
    BAD_LAYOUTS[case].edit(folder)
    with pytest.raises(ConfigError, match=BAD_LAYOUTS[case].match):
        parse_config({"data": {"dataset": "imagefolder", "root": str(folder), "num_labels": 3, "image_size": 8}})
    assert not (folder / CACHE_DIRNAME).exists()


def test_too_few_images_for_the_labels(folder) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config({"data": {"dataset": "imagefolder", "root": str(folder), "num_labels": 30,
                               "val_per_class": 1, "image_size": 8}})
    lines = str(err.value).splitlines()
    assert len(lines) == 3  # one per class
    assert "imgs/train/cat holds 10 images, fewer than its share (10 labeled + 1 validation per class" in lines[0]


def test_other_field_errors(folder) -> None:
    (folder / "val/cat").mkdir(parents=True)
    _save(folder / "val/cat/0.png", np.zeros((8, 8, 3), np.uint8))
    with pytest.raises(ConfigError) as err:
        parse_config({"data": {"dataset": "imagefolder", "root": str(folder), "num_labels": 3, "image_size": 8,
                               "val_per_class": 1, "download": True, "normalization": "released"}})
    msg = str(err.value)
    assert "data.val_per_class=1: " in msg and "imgs/val is the validation split; set 0" in msg
    assert "data.download=True: imagefolder reads your own folder" in msg
    assert "data.normalization='released': the released code has no imagefolder dataset" in msg


def test_a_corrupt_image_is_an_error_naming_it_never_a_black_image(folder) -> None:
    (folder / "train/dog/x.jpg").write_bytes(b"\xff\xd8\xff\xe0 this is not a jpeg")
    with pytest.raises(imagefolder.ImageFolderError, match=r"imgs/train/dog/x.jpg is not a readable image"):
        load_dataset("imagefolder", folder, image_size=8)
    # a truncated PNG too
    data = (folder / "train/cat/1.png").read_bytes()
    (folder / "train/dog/x.jpg").unlink()
    (folder / "train/cat/1.png").write_bytes(data[: len(data) // 2])
    with pytest.raises(imagefolder.ImageFolderError, match=r"imgs/train/cat/1.png is not a readable image"):
        load_dataset("imagefolder", folder, image_size=8)


def test_a_cache_that_would_not_fit_on_disk_is_refused(folder, monkeypatch) -> None:
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(imagefolder.shutil, "disk_usage", lambda p: usage(10**6, 10**6 - 100, 100))
    with pytest.raises(imagefolder.ImageFolderError,
                       match=r"train 30, test 6 images at 8x8 px\) needs 0.00 GB in .*only 0.00 GB are free"):
        load_dataset("imagefolder", folder, image_size=8)
    assert not (folder / CACHE_DIRNAME).exists()


# ---------------------------------------------------------------------------------------------------------------
# The training command on a generated folder


def _train(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "mutexmatch.train", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_train_cli_on_a_generated_folder_and_a_corrupt_file(tmp_path) -> None:
    root = write_fake_imagefolder(tmp_path / "imgs", num_classes=3, train_per_class=6, test_per_class=2, side=20,
                                  unlabeled=4)
    args = ["--set", "data.dataset=imagefolder", "--set", f"data.root={root}", "--set", "data.image_size=16",
            "--set", "data.num_labels=6", "--set", "model.backbone=small_cnn", "--set", "train.iterations=4",
            "--set", "train.eval_interval=2", "--set", "train.batch_size=4", "--set", "train.mu=2",
            "--set", "train.progress=false"]
    done = _train([*args, "--set", f"output_dir={tmp_path / 'run'}"], tmp_path)
    assert done.returncode == 0, done.stderr
    facts = json.loads((tmp_path / "run" / "dataset.json").read_text())
    assert facts["classes"] == ["class_00", "class_01", "class_02"] and facts["image_size"] == 16
    assert facts["images"] == {"train": 18, "test": 6, "val": 0, "extra_unlabeled": 4}
    b = load_dataset("imagefolder", root, image_size=16)
    assert facts["mean"] == list(b.info.mean) and facts["std"] == list(b.info.std)

    (root / "train/class_01/x.jpg").write_bytes(b"garbage")
    bad = _train([*args, "--set", f"output_dir={tmp_path / 'run2'}"], tmp_path)
    assert bad.returncode != 0 and "x.jpg" in bad.stderr and "Traceback" not in bad.stderr


def test_the_documented_five_fold_sweep_over_an_image_folder_is_valid(tmp_path) -> None:
    """The YAML of docs/datasets.md's "A five-fold sweep over your folder" is a valid sweep and report layout."""
    from orchestration.spec.sweepfile import expand_cells, load_spec, validate_spec
    from orchestration.contract.layout import validate_report

    doc = (REPO / "docs" / "datasets.md").read_text()
    section = doc.split("### A five-fold sweep over your folder", 1)[1]
    block = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    (tmp_path / "my-photos.yaml").write_text(block)
    write_fake_imagefolder(tmp_path / "data" / "my-photos", train_per_class=40, test_per_class=1, side=64)
    spec = load_spec(tmp_path / "my-photos.yaml", tmp_path)
    validate_spec(spec, tmp_path)
    validate_report(yaml.safe_load(block))
    assert len(expand_cells(spec)) == 3 and spec.folds == [0, 1, 2, 3, 4]


def test_a_16_bit_image_is_clipped_with_a_warning(tmp_path):
    # Issue 26: the clipping was documented, but a 16-bit image turned white without a word.
    wide = tmp_path / "scan.png"
    Image.fromarray((np.arange(16 * 16).reshape(16, 16) * 200).astype(np.uint16)).save(wide)
    narrow = tmp_path / "photo.png"
    Image.new("RGB", (16, 16), (10, 20, 30)).save(narrow)
    with pytest.warns(RuntimeWarning, match=r"1 image\(s\) are 16-bit or float \(first: .*scan.png, mode I;16\); "
                                            "converting to 8-bit RGB clips their values to 0..255"):
        x = imagefolder.decode_images([narrow, wide], 16, workers=1)
    assert x.shape == (2, 3, 16, 16) and int(x[1].max()) == 255


def test_links_reaching_one_folder_by_many_paths_list_each_image_once(folder, tmp_path) -> None:
    """Adversarial finding #7: a "diamond" of links (each level linking twice to the next) made `datasets check`
    walk 2^depth paths (no answer in 150 s at the tester's depth); here depth 10 lists one image 1,024 times."""
    shared = tmp_path / "shared"
    for level in range(10):
        (shared / f"d{level}").mkdir(parents=True)
        for link in ("x", "y"):
            (shared / f"d{level}" / link).symlink_to(shared / f"d{level + 1}", target_is_directory=True)
    _save(shared / "d10" / "deep.png", np.zeros((8, 8, 3), np.uint8))
    (folder / "train" / "cat" / "diamond").symlink_to(shared / "d0", target_is_directory=True)
    (folder / "unlabeled").mkdir()
    (folder / "unlabeled" / "diamond").symlink_to(shared / "d0", target_is_directory=True)
    index = imagefolder.scan_folder(folder)
    deep = [rel for rel, _ in index.files["train"] if rel.endswith("deep.png")]
    assert deep == ["cat/diamond/x/x/x/x/x/x/x/x/x/x/deep.png"]  # the first path in sorted order
    assert [rel for rel, _ in index.files["unlabeled"]] == ["diamond/x/x/x/x/x/x/x/x/x/x/deep.png"]
