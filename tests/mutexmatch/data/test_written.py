"""mutexmatch.data.written: the manifest of the files a tool wrote (findings #13 and #14: fake data and an export's
--overwrite wrote over or deleted files they had not made)."""

import os

from mutexmatch.data.written import foreign_files, has_manifest, record_written, remove_written


def test_only_unchanged_recorded_files_are_the_tools_and_only_they_are_removed(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "mine.png").write_bytes(b"1")
    (tmp_path / "a" / "edited.png").write_bytes(b"2")
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "x.pt").write_bytes(b"3")
    assert not has_manifest(tmp_path, "t") and foreign_files(tmp_path, "t", skip=("cache",)) == [
        "a/b/mine.png", "a/edited.png"]
    record_written(tmp_path, "t", skip=("cache",))
    assert has_manifest(tmp_path, "t") and foreign_files(tmp_path, "t", skip=("cache",)) == []
    (tmp_path / "a" / "edited.png").write_bytes(b"22")  # same name, new bytes: no longer the tool's
    (tmp_path / "a" / "b" / "user.md").write_text("notes")
    (tmp_path / "link").symlink_to(tmp_path / "a", target_is_directory=True)  # listed, never followed
    assert foreign_files(tmp_path, "t", skip=("cache",)) == ["a/b/user.md", "a/edited.png", "link"]
    remove_written(tmp_path, "t")
    left = sorted(os.path.relpath(os.path.join(d, f), tmp_path) for d, _, fs in os.walk(tmp_path) for f in fs)
    assert left == ["a/b/user.md", "a/edited.png", "cache/x.pt"] and not has_manifest(tmp_path, "t")
    assert foreign_files(tmp_path / "missing", "t") == []
