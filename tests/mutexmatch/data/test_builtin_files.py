"""The side files the built-in readers parse beside the images (Tiny-ImageNet's ``val_annotations.txt``, STL-10's
``fold_indices.txt``, mini-ImageNet's CSVs): malformed ones are refused naming the file and the line, and an edited
one is never answered from a cache decoded before the edit (adversarial findings #10, #11, #19).

Each dataset is generated tiny (one or two images per class) in its real layout by mutexmatch.data.fake.
"""

from __future__ import annotations

import re

import pytest
import torch

from mutexmatch.data.fake import FakeSize, generated_checksums_accepted, write_fake_dataset
from mutexmatch.data.load import load_dataset
from mutexmatch.data.registry import DatasetError
from mutexmatch.datasets import main as datasets_main

torch.set_num_threads(1)


def test_tinyimagenet_annotations_with_spaces_are_refused_naming_the_line(tmp_path):
    """#10: spaces instead of tabs ended in "failed unexpectedly: IndexError"."""
    folder = write_fake_dataset("tinyimagenet", tmp_path, FakeSize(1, 1))
    annotations = folder / "val" / "val_annotations.txt"
    lines = annotations.read_text().splitlines()
    annotations.write_text("\n".join([lines[0], lines[1].replace("\t", " "), *lines[2:]]) + "\n")
    with pytest.raises(DatasetError) as err:
        load_dataset("tinyimagenet", tmp_path)
    msg = str(err.value)
    assert f"{annotations} line 2" in msg and lines[1].split("\t")[0] in msg
    assert "<file><TAB><wnid>" in msg and len(msg.splitlines()) == 1


@pytest.mark.parametrize("edit, expect", [
    (lambda lines: ["0 1 x", *lines[1:]], r"/fold_indices\.txt line 1: 'x' is not an image index"),
    (lambda lines: lines[:3], r"/fold_indices\.txt holds 3 folds \(lines\); STL-10's holds 10"),
])
def test_stl10_fold_file_errors_name_the_file(tmp_path, edit, expect):
    """#11: a non-integer, or fewer than 10 folds with data.fold 4, ended in "failed unexpectedly: ValueError"."""
    folder = write_fake_dataset("stl10", tmp_path, FakeSize(1, 1, 0))
    folds = folder / "fold_indices.txt"
    folds.write_text("\n".join(edit(folds.read_text().splitlines())) + "\n")
    with generated_checksums_accepted(), pytest.raises(DatasetError, match=re.escape(str(folds.parent)) + expect):
        load_dataset("stl10", tmp_path)


def test_an_edited_stl10_fold_file_is_not_answered_from_the_cache(tmp_path):
    """#19: the folds cached before an edit of fold_indices.txt were served after it."""
    folder = write_fake_dataset("stl10", tmp_path, FakeSize(1, 1, 0))
    with generated_checksums_accepted():
        before = load_dataset("stl10", tmp_path).predefined_folds
    (folder / "fold_indices.txt").write_text("".join(f"{i} {(i + 1) % 10}\n" for i in range(10)))
    with pytest.warns(UserWarning, match="fold_indices.txt changed"):
        after = load_dataset("stl10", tmp_path).predefined_folds
    assert [f.tolist() for f in after] == [[i, (i + 1) % 10] for i in range(10)] != [f.tolist() for f in before]


def test_an_edited_miniimagenet_csv_is_decoded_again_and_check_says_so(tmp_path, capsys):
    """#19: after an edit of test.csv, `datasets check` called the old cache "current" and loads served it."""
    folder = write_fake_dataset("miniimagenet", tmp_path, FakeSize(1, 1))
    assert datasets_main(["check", "miniimagenet", "--root", str(tmp_path)]) == 0
    before = load_dataset("miniimagenet", tmp_path).test
    header, *rows = (folder / "test.csv").read_text().splitlines()
    files, labels = zip(*(r.split(",") for r in rows))
    (folder / "test.csv").write_text("\n".join([header, *map(",".join, zip(files, labels[1:] + labels[:1]))]))
    capsys.readouterr()
    with pytest.warns(UserWarning, match="test.csv changed"):
        assert datasets_main(["check", "miniimagenet", "--root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"test_80px\.pt +decoded from another train\.csv, test\.csv: decoded again", out), out
    assert re.search(r"train_80px\.pt +current", out), out
    after = load_dataset("miniimagenet", tmp_path).test
    assert torch.equal(after.y, before.y.roll(-1)) and torch.equal(after.x, before.x)


def test_a_cache_from_before_the_record_is_decoded_again_once_and_said_so(tmp_path, capsys):
    """A cache written before side files were recorded cannot tell whether they changed: decoded again, once."""
    from mutexmatch.checksum import sha256_file
    from mutexmatch.data.cache import cache_path, checksum_path

    folder = write_fake_dataset("miniimagenet", tmp_path, FakeSize(1, 1))
    load_dataset("miniimagenet", tmp_path)
    cache = cache_path(folder, "train", 80)
    payload = dict(torch.load(cache, weights_only=True))
    del payload["source"]
    torch.save(payload, cache)
    checksum_path(cache).write_text(sha256_file(cache))
    capsys.readouterr()
    with pytest.warns(UserWarning, match=r"train\.csv not recorded in it \(an older cache\)"):
        assert datasets_main(["check", "miniimagenet", "--root", str(tmp_path)]) == 0
    assert re.search(r"train_80px\.pt +older than its record of train\.csv: decoded again", capsys.readouterr().out)
    assert "source" in torch.load(cache, weights_only=True)
