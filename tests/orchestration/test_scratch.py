"""The trials' scratch folder is one per user, 0700, and a folder that is not this user's is refused (issue 33,
noticed in issue 31: ``$TMPDIR/mutexmatch_trials`` was shared by every user of a machine)."""

from __future__ import annotations

import os
import stat
import tempfile

import pytest

from orchestration.trial import trainable
from orchestration.trial.scratch import SCRATCH_DIRNAME, scratch_root


@pytest.fixture
def tmpdir_env(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)  # read $TMPDIR again
    return tmp_path


def test_each_user_has_a_private_scratch_folder_that_trials_use(tmpdir_env):
    root = scratch_root()
    assert root == tmpdir_env / f"{SCRATCH_DIRNAME}-{os.getuid()}"
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    attempt = trainable._scratch("t1")
    assert attempt.parent == root and attempt.name.startswith("t1_")
    assert not (tmpdir_env / SCRATCH_DIRNAME).exists()  # the old shared name is not made


def test_a_folder_made_open_is_made_private(tmpdir_env):
    (tmpdir_env / f"{SCRATCH_DIRNAME}-{os.getuid()}").mkdir(mode=0o777)
    os.chmod(tmpdir_env / f"{SCRATCH_DIRNAME}-{os.getuid()}", 0o777)
    assert stat.S_IMODE(scratch_root().stat().st_mode) == 0o700


def test_a_link_or_another_users_folder_in_its_place_is_refused_in_one_line(tmpdir_env):
    path = tmpdir_env / f"{SCRATCH_DIRNAME}-{os.getuid()}"
    (tmpdir_env / "elsewhere").mkdir()
    path.symlink_to(tmpdir_env / "elsewhere")
    with pytest.raises(PermissionError, match=r"^the trials' scratch folder .* is not a folder of user \d+ .*set "
                                              r"TMPDIR to a folder of your own$"):
        scratch_root()
    path.unlink()
    path.mkdir()
    if os.getuid() != 0:
        pytest.skip("only root can give a folder to another user")
    os.chown(path, os.getuid() + 4242, -1)
    with pytest.raises(PermissionError, match="is not a folder of user"):
        scratch_root()
