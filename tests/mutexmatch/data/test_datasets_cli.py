"""Tests for ``python -m mutexmatch.datasets`` (mutexmatch/datasets.py, over mutexmatch/data/).

Datasets are generated in their real on-disk formats by mutexmatch.data.fake. The download tests give torchvision
the md5s of the generated files (patched into its classes' file lists), so its real integrity check runs and no
network is touched; its downloaders are made to raise. ``check`` and ``export`` verify those md5s too (a CIFAR meta
file is a pickle), so ``fake_root`` comes with its generated md5s published.
"""

import hashlib
import os
import pickle
import re
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import torch
from PIL import Image
from torchvision.datasets import CIFAR10, CIFAR100, STL10, SVHN

from mutexmatch.cliwarnings import format_warning
from mutexmatch.data.builtin import DATASET_NAMES, DATASETS
from mutexmatch.data.cache import CACHE_DIRNAME, checksum_path
from mutexmatch.data.fake import FakeSize, write_fake_dataset, write_fake_root
from mutexmatch.data.load import cache_paths, dataset_dir, load_dataset
from mutexmatch.datasets import _EXAMPLES, main

torch.set_num_threads(1)
REPO = Path(__file__).resolve().parents[3]


def _run(argv, capsys):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def _assert_one_line_error(rc, err, *parts):
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    for p in parts:
        assert p in lines[0], (p, lines[0])


SMALL = {"cifar10": FakeSize(3, 2), "cifar100": FakeSize(1, 1), "stl10": FakeSize(1, 1, 3)}


@pytest.fixture(scope="module")
def fake_files(tmp_path_factory):
    return write_fake_root(tmp_path_factory.mktemp("data"), list(SMALL), sizes=SMALL, seed=5)


@pytest.fixture
def fake_root(fake_files, monkeypatch):
    """The generated datasets, their md5s published as torchvision's (check and export verify them)."""
    for name in SMALL:
        _accept_generated_md5s(monkeypatch, name, dataset_dir(name, fake_files))
    return fake_files


def _class_major(data):
    """The order an exported folder loads in: by label, the original order within each label."""
    order = torch.argsort(data.y, stable=True)
    return data.x[order], data.y[order]


# ---------------------------------------------------------------------------------------------------------------
# --help and argument errors


def test_help_as_module_shows_examples_for_every_command():
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "mutexmatch.datasets", "--help"], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    for command, examples in _EXAMPLES.items():
        assert command in proc.stdout
        for example in examples:
            assert example in proc.stdout


@pytest.mark.slow  # a fresh interpreter: pytest records warnings in-process, so only a real run shows their form
def test_a_warning_reaches_the_user_as_one_line(tmp_path):
    load_dataset("digits", tmp_path)
    checksum_path(cache_paths("digits", tmp_path)["train"]).write_text("0" * 64)  # bit-rot, as far as it knows
    proc = subprocess.run([sys.executable, "-m", "mutexmatch.datasets", "check", "digits", "--root", str(tmp_path)],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("warning: ignoring unreadable dataset cache "), proc.stderr
    assert "train_16px.pt (its sha256 " in lines[0] and lines[0].endswith("decoding the raw files again")
    assert re.search(r"train_16px.pt +differs from its .sha256: decoded again and written now", proc.stdout)


def test_a_library_warning_keeps_its_category_and_origin_on_its_one_line():
    assert format_warning("a\n  b", UserWarning, "/lib/x.py", 3) == "warning: a b (UserWarning at /lib/x.py:3)"
    ours = str(REPO / "mutexmatch" / "data" / "load.py")
    assert format_warning("dropped", RuntimeWarning, ours, 181) == "warning: dropped"


@pytest.mark.parametrize("argv, parts", [
    ([], ["download, check or export"]),
    (["check", "cifar11", "--root", "x"], ["NAME", "'cifar11'", "imagefolder"]),
    (["check", "digits"], ["--root"]),
    (["check", "digits", "--root", "x", "--image-size", "0"], ["--image-size", "'0'", "an integer in [8, 512] (pixels)"]),
    (["export", "digits", "--root", "x", "--to", "y", "--format", "jpg"], ["--format", "'jpg'", "png"]),
])
def test_argument_errors_are_one_line(capsys, argv, parts):
    _assert_one_line_error(*_run(argv, capsys)[::2], *parts)


# ---------------------------------------------------------------------------------------------------------------
# download


def _md5(path):
    return hashlib.md5(path.read_bytes()).hexdigest()


def _accept_generated_md5s(monkeypatch, name, ddir):
    """Patch the published md5s in torchvision's classes to those of the generated files and make its downloaders
    raise the error an offline machine gives, so the real integrity check decides."""
    if name == "svhn":
        for split, (url, fname, _) in list(SVHN.split_list.items()):
            if (ddir / fname).is_file():
                monkeypatch.setitem(SVHN.split_list, split, [url, fname, _md5(ddir / fname)])
    else:
        cls = {"stl10": STL10, "cifar10": CIFAR10, "cifar100": CIFAR100}[name]
        base = ddir / cls.base_folder
        for attr in ("train_list", "test_list"):
            monkeypatch.setattr(cls, attr, [[f, _md5(base / f)] for f, _ in getattr(cls, attr)])
        if cls is not STL10:
            monkeypatch.setattr(cls, "meta", {**cls.meta, "md5": _md5(base / cls.meta["filename"])})

    def offline(*args, **kwargs):
        raise urllib.error.URLError("offline in tests")

    # At the network layer, so torchvision's own download code runs (it skips files that verify).
    monkeypatch.setattr(urllib.request, "urlopen", offline)


@pytest.mark.parametrize("name, files, with_md5", [
    ("cifar10", 7, 7),  # five train batches, test batch, batches.meta
    ("svhn", 2, 2),
    ("stl10", 7, 5),    # five md5-listed binaries; class_names.txt and fold_indices.txt have no published md5
])
def test_download_with_files_present_verifies_each(tmp_path, monkeypatch, capsys, name, files, with_md5):
    write_fake_dataset(name, tmp_path, FakeSize(1, 1, 1))
    ddir = dataset_dir(name, tmp_path)
    _accept_generated_md5s(monkeypatch, name, ddir)
    rc, out, err = _run(["download", name, "--root", tmp_path], capsys)
    assert rc == 0, err
    rows = [ln for ln in out.splitlines() if ln.startswith("  ")]
    assert len(rows) == files
    verified = [r for r in rows if re.search(r" md5 [0-9a-f]{32} verified$", r)]
    assert len(verified) == with_md5
    assert all(r.endswith("present (no published md5)") for r in rows if r not in verified)


def test_download_corrupted_file_is_refetched_and_offline_fails_in_one_line(tmp_path, monkeypatch, capsys):
    write_fake_dataset("cifar10", tmp_path, FakeSize(1, 1))
    ddir = dataset_dir("cifar10", tmp_path)
    _accept_generated_md5s(monkeypatch, "cifar10", ddir)
    batch = ddir / CIFAR10.base_folder / "data_batch_2"
    batch.write_bytes(batch.read_bytes()[:-1] + b"\x00")  # no longer matches its md5: torchvision downloads
    rc, _, err = _run(["download", "cifar10", "--root", tmp_path], capsys)
    _assert_one_line_error(rc, err, "download cifar10", str(ddir), "offline in tests")


def test_download_missing_svhn_extra_fails_in_one_line(tmp_path, monkeypatch, capsys):
    write_fake_dataset("svhn", tmp_path, FakeSize(1, 1))
    _accept_generated_md5s(monkeypatch, "svhn", dataset_dir("svhn", tmp_path))
    rc, _, err = _run(["download", "svhn", "--root", tmp_path, "--svhn-extra"], capsys)
    _assert_one_line_error(rc, err, "download svhn")


@pytest.mark.parametrize("name", ["miniimagenet", "tinyimagenet", "digits", "imagefolder"])
def test_download_unsupported_names_the_manual_layout(tmp_path, capsys, name):
    rc, _, err = _run(["download", name, "--root", tmp_path], capsys)
    hint = "train/<class>/" if name == "imagefolder" else " ".join(DATASETS[name].info.download_hint.split())
    downloadable = [n for n in DATASET_NAMES if n in DATASETS and DATASETS[n].downloadable]
    assert {"cifar10", "cifar100", "svhn", "stl10"} <= set(downloadable) and name not in downloadable
    _assert_one_line_error(rc, err, f"download {name}", hint, f"fetches only {', '.join(downloadable)}")


# ---------------------------------------------------------------------------------------------------------------
# check


def _table(out):
    """{class: [count per split]} from check's per-class table."""
    lines = out.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.split()[:1] == ["class"])
    rows = {}
    for ln in lines[start + 1:]:
        cells = ln.split()
        if cells[0] == "total":
            break
        rows[cells[0]] = [int(c.replace(",", "")) for c in cells[1:]]
    return lines[start].split()[1:], rows


def test_check_lists_counts_per_split_and_class(fake_root, capsys):
    rc, out, err = _run(["check", "cifar10", "--root", fake_root], capsys)
    assert rc == 0, err
    splits, rows = _table(out)
    assert splits == ["train", "test"]
    assert rows == {f"c{i}": [3, 2] for i in range(10)}  # fakedata: 3 train and 2 test images per class
    assert "7 of 7 torchvision files present, each published md5 verified" in out
    assert "train_32px.pt" in out and "current" in out


def test_check_stl10_reports_unlabeled_and_folds(fake_root, capsys):
    rc, out, err = _run(["check", "stl10", "--root", fake_root], capsys)
    assert rc == 0, err
    assert _table(out)[1] == {f"class{i}": [1, 1] for i in range(10)}
    assert "unlabeled: 3 images" in out
    assert "10 predefined labeled folds" in out


def test_check_shows_an_image_folders_classes_as_they_are_named(tmp_path, capsys):
    """Issue 33 (uni-imagefolder-check): the table showed the export's folder names (`0_café_`), not the classes."""
    for split in ("train", "test"):
        for cls in ("café%", "日本"):
            (tmp_path / "été" / split / cls).mkdir(parents=True)
            Image.new("RGB", (16, 16), (9, 9, 9)).save(tmp_path / "été" / split / cls / "0.png")
    rc, out, err = _run(["check", "imagefolder", "--root", tmp_path / "été"], capsys)
    assert rc == 0, err
    assert _table(out)[1] == {"café%": [1, 1], "日本": [1, 1]} and "unnamed" not in out


def test_check_imagefolder_cache_states(tmp_path, fake_root, capsys):
    folder = tmp_path / "folder"
    assert _run(["export", "cifar10", "--root", fake_root, "--to", folder], capsys)[0] == 0
    rc, out, _ = _run(["check", "imagefolder", "--root", folder], capsys)
    assert rc == 0 and out.count("missing: decoded and written now") == 2
    rc, out, _ = _run(["check", "imagefolder", "--root", folder], capsys)
    assert rc == 0 and out.count(" current") == 2 and "missing" not in out
    old = sorted(p.name for p in (folder / CACHE_DIRNAME).glob("train_*.pt"))
    Image.new("RGB", (32, 32), (9, 9, 9)).save(folder / "train" / "c0" / "extra.png")  # an edit: train is stale
    rc, out, _ = _run(["check", "imagefolder", "--root", folder], capsys)
    assert rc == 0
    assert _table(out)[1]["c0"] == [4, 2]
    assert out.count("missing: decoded and written now") == 1 and out.count(" current") == 1
    assert f"{old[0]}" in out and "not read now" in out and "deleted by this load" in out
    for sidecar in (folder / CACHE_DIRNAME).glob("test_*.pt.sha256"):
        sidecar.unlink()  # a cache written before the checksums, or by a writer killed in between
    with pytest.warns(UserWarning, match="no readable checksum"):
        rc, out, _ = _run(["check", "imagefolder", "--root", folder], capsys)
    assert rc == 0 and out.count("without its sha256: decoded again and written now") == 1


def test_check_bad_layout_and_missing_dataset_fail_in_one_line(tmp_path, capsys):
    (tmp_path / "imgs" / "train" / "a").mkdir(parents=True)
    rc, _, err = _run(["check", "imagefolder", "--root", tmp_path / "imgs"], capsys)
    _assert_one_line_error(rc, err, str(tmp_path / "imgs" / "test"))
    rc, _, err = _run(["check", "cifar10", "--root", tmp_path], capsys)
    _assert_one_line_error(rc, err, "cifar-10-batches-py", "data.download: true")
    rc, _, err = _run(["check", "cifar10", "--root", tmp_path, "--image-size", "16"], capsys)
    _assert_one_line_error(rc, err, "--image-size", "32", "16")


# ---------------------------------------------------------------------------------------------------------------
# export


def _assert_same(exported, original, channels=None):
    x, y = _class_major(original)
    if channels is not None:  # grayscale loads as RGB (imagefolder's colour rule): every channel a copy
        x = x.expand(-1, channels, -1, -1)
    assert torch.equal(exported.y, y)
    assert torch.equal(exported.x, x)


def test_export_cifar10_round_trips_through_imagefolder(tmp_path, fake_root, capsys):
    rc, out, err = _run(["export", "cifar10", "--root", fake_root, "--to", tmp_path / "c10"], capsys)
    assert rc == 0, err
    assert sorted(p.name for p in (tmp_path / "c10" / "train").iterdir()) == [f"c{i}" for i in range(10)]
    original, folder = load_dataset("cifar10", fake_root), load_dataset("imagefolder", tmp_path / "c10")
    assert folder.classes == tuple(f"c{i}" for i in range(10))
    _assert_same(folder.train, original.train)
    _assert_same(folder.test, original.test)


def test_export_digits_writes_grayscale_pngs_that_round_trip(tmp_path, capsys):
    rc, _, err = _run(["export", "digits", "--root", tmp_path / "data", "--to", tmp_path / "d"], capsys)
    assert rc == 0, err
    first = next((tmp_path / "d" / "train" / "0").iterdir())
    assert Image.open(first).mode == "L"
    original, folder = load_dataset("digits", tmp_path / "data"), load_dataset("imagefolder", tmp_path / "d")
    _assert_same(folder.train, original.train, channels=3)
    _assert_same(folder.test, original.test, channels=3)


def test_export_unsorted_class_names_get_index_prefixes(tmp_path, fake_root, capsys):
    # fakedata names CIFAR-100's classes c0..c99: as strings c10 sorts before c2, so the folders need the index.
    rc, _, err = _run(["export", "cifar100", "--root", fake_root, "--to", tmp_path / "c100"], capsys)
    assert rc == 0, err
    names = sorted(p.name for p in (tmp_path / "c100" / "train").iterdir())
    assert names[:3] == ["00_c0", "01_c1", "02_c2"] and len(names) == 100
    _assert_same(load_dataset("imagefolder", tmp_path / "c100").train, load_dataset("cifar100", fake_root).train)


def test_export_stl10_writes_its_unlabeled_split(tmp_path, fake_root, capsys):
    assert _run(["export", "stl10", "--root", fake_root, "--to", tmp_path / "s"], capsys)[0] == 0
    original, folder = load_dataset("stl10", fake_root), load_dataset("imagefolder", tmp_path / "s")
    assert sorted(p.name for p in (tmp_path / "s" / "unlabeled").iterdir()) == ["00000.png", "00001.png",
                                                                                "00002.png"]
    assert torch.equal(folder.extra_unlabeled.x, original.extra_unlabeled.x)
    _assert_same(folder.train, original.train)


def test_export_refuses_a_non_empty_folder_unless_overwrite(tmp_path, fake_root, capsys):
    to = tmp_path / "out"
    (to / "train" / "stale").mkdir(parents=True)
    (to / "train" / "stale" / "old.png").write_bytes(b"")
    (to / "notes.txt").write_text("keep")
    rc, _, err = _run(["export", "cifar10", "--root", fake_root, "--to", to], capsys)
    _assert_one_line_error(rc, err, str(to), "not empty", "--overwrite")
    assert (to / "train" / "stale" / "old.png").exists()
    rc, _, err = _run(["export", "cifar10", "--root", fake_root, "--to", to, "--overwrite"], capsys)
    _assert_one_line_error(rc, err, str(to / "notes.txt"), str(to / "train" / "stale" / "old.png"),
                           "no earlier export wrote")
    assert (to / "train" / "stale" / "old.png").exists() and (to / "notes.txt").read_text() == "keep"


def test_export_overwrite_removes_only_what_an_earlier_export_wrote(tmp_path, fake_root, capsys):
    """Adversarial finding #14 (data loss): `export --overwrite` into a folder holding the user's files deleted
    them (`test/test_model.py`, `train/notes.md`) with the split folders."""
    to = tmp_path / "out"
    assert _run(["export", "cifar100", "--root", fake_root, "--to", to], capsys)[0] == 0
    load_dataset("imagefolder", to)  # a load leaves its cache in the export: the export's own, not the user's
    (to / "test" / "test_model.py").write_text("the user's code")
    (to / "train" / "notes.md").write_text("the user's notes")
    rc, _, err = _run(["export", "cifar10", "--root", fake_root, "--to", to, "--overwrite"], capsys)
    _assert_one_line_error(rc, err, str(to / "test" / "test_model.py"), str(to / "train" / "notes.md"))
    assert (to / "test" / "test_model.py").read_text() == "the user's code"
    assert (to / "train" / "notes.md").read_text() == "the user's notes"
    (to / "test" / "test_model.py").unlink()
    (to / "train" / "notes.md").unlink()
    assert _run(["export", "cifar10", "--root", fake_root, "--to", to, "--overwrite"], capsys)[0] == 0
    assert sorted(p.name for p in (to / "train").iterdir()) == [f"c{i}" for i in range(10)]  # no CIFAR-100 class
    _assert_same(load_dataset("imagefolder", to).train, load_dataset("cifar10", fake_root).train)


class _Payload:
    """A pickle that creates a file when loaded: what a crafted CIFAR ``batches.meta`` can do (issue 26)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.mark.parametrize("command", ["check", "export"])
def test_a_crafted_cifar_meta_is_never_unpickled(tmp_path, monkeypatch, capsys, command):
    # Every other file verifies and the decoded cache is valid, so only the meta file's own md5 stands between
    # the folder and its payload.
    root = write_fake_root(tmp_path / "data", ["cifar10"], sizes={"cifar10": FakeSize(1, 1)})
    ddir = dataset_dir("cifar10", root)
    _accept_generated_md5s(monkeypatch, "cifar10", ddir)
    meta, marker = ddir / CIFAR10.base_folder / "batches.meta", tmp_path / "payload-ran"
    meta.write_bytes(pickle.dumps(_Payload(marker), protocol=2))
    rc, _, err = _run([command, "cifar10", "--root", root, *(["--to", tmp_path / "out"] * (command == "export"))],
                      capsys)
    _assert_one_line_error(rc, err, f"{meta} does not match its published md5")
    assert not marker.exists()


def test_meta_unpickler_refuses_globals_even_behind_a_matching_md5(tmp_path, monkeypatch, capsys):
    # Defence in depth: an md5 collision would still meet an unpickler that loads data only.
    root = write_fake_root(tmp_path / "data", ["cifar10"], sizes={"cifar10": FakeSize(1, 1)})
    ddir = dataset_dir("cifar10", root)
    marker = tmp_path / "payload-ran"
    (ddir / CIFAR10.base_folder / "batches.meta").write_bytes(pickle.dumps(_Payload(marker), protocol=2))
    _accept_generated_md5s(monkeypatch, "cifar10", ddir)
    rc, _, err = _run(["check", "cifar10", "--root", root], capsys)
    _assert_one_line_error(rc, err, "batches.meta", "refused io.open", "holds only data")
    assert not marker.exists()
