"""mutexmatch.atomic, .dotted and .checks: the one atomic write, merge/flatten with dotted keys, pydantic error lines and number checks."""

from __future__ import annotations

import math
import stat

import pytest
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from mutexmatch.atomic import atomic_write
from mutexmatch.checks import at_least, check_int, in_interval, interval_text, validation_error_lines, within
from mutexmatch.dotted import deep_merge, flatten_dotted, set_dotted


def test_atomic_write_bytes_or_a_writer_with_the_asked_permissions(tmp_path):
    path = tmp_path / "sub" / "f.bin"
    atomic_write(path, b"abc")
    assert path.read_bytes() == b"abc" and stat.S_IMODE(path.stat().st_mode) == 0o600   # mkstemp's, as before
    atomic_write(path, lambda f: f.write(b"xyz"), mode=0o644)
    assert path.read_bytes() == b"xyz" and stat.S_IMODE(path.stat().st_mode) == 0o644
    assert sorted(p.name for p in path.parent.iterdir()) == ["f.bin"]


def test_a_failed_atomic_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(b"old")

    def fail(f):
        f.write(b"half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        atomic_write(path, fail)
    assert path.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["f.bin"]


def test_a_full_disk_names_the_file_being_written_and_corrupts_nothing(tmp_path):
    """Issue 33 (full disk): the write's OSError named no file ("[Errno 28] No space left on device"), so the run's
    one line did not say which file, or which disk, was full."""
    import errno

    path = tmp_path / "ckpt.pt"
    path.write_bytes(b"old")

    def full(f):
        f.write(b"half")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSError) as err:
        atomic_write(path, full)
    assert (err.value.errno, err.value.filename) == (errno.ENOSPC, str(path))
    assert str(err.value) == f"[Errno 28] No space left on device: '{path}'"
    assert path.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["ckpt.pt"]


def test_merge_set_and_flatten_dotted():
    base = {"a": {"b": 1, "c": [1]}, "d": 2}
    merged = deep_merge(base, {"a": {"b": 3}, "e": {"f": None}})
    assert merged == {"a": {"b": 3, "c": [1]}, "d": 2, "e": {"f": None}}
    merged["a"]["c"].append(2)
    assert base == {"a": {"b": 1, "c": [1]}, "d": 2}                         # copies, never aliases
    assert set_dotted(base, "a.x.y", 5)["a"] == {"b": 1, "c": [1], "x": {"y": 5}}
    assert flatten_dotted({"a": {"b": 1, "c": {}}, "d": [1]}, "p.") == {"p.a.b": 1, "p.d": [1]}


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    x: float
    y: int = 0

    @field_validator("x")
    @classmethod
    def _x(cls, v: float) -> float:
        return in_interval(v, 0.0, 1.0, True, False)


def test_validation_error_lines():
    with pytest.raises(ValidationError) as info:
        _M.model_validate({"x": 1.5, "z": 1})
    assert validation_error_lines(info.value, allowed_keys=lambda loc: list(_M.model_fields)) == [
        "x=1.5: must be in (0, 1]", "z: unknown key; allowed keys: x, y"]
    with pytest.raises(ValidationError) as info:
        _M.model_validate({"y": "1"})
    assert validation_error_lines(info.value, where=lambda loc: "m." + ".".join(map(str, loc)),
                                  missing="required") == ["m.x: required", "m.y='1': Input should be a valid integer"]


def test_intervals_and_integers():
    assert interval_text(0, None, False, True) == "[0, inf)" and interval_text(0, 0.5) == "[0, 0.5]"
    assert in_interval(1.0, 0.0, 1.0, True, False) == 1.0 == within(0.0, 1.0, low_open=True)(1.0)
    with pytest.raises(ValueError, match=r"^must be in \[0, 1\)$"):
        within(0.0, 1.0, high_open=True)(1.0)
    for bad in (0.0, math.nan):
        with pytest.raises(ValueError, match=r"^must be in \(0, 1\]$"):
            in_interval(bad, 0.0, 1.0, True, False)
    assert check_int("n", 3, low=1) == 3 and check_int("k", 4, low=1, high=4) == 4
    for bad, msg in ((True, r"^n=True: must be an integer >= 1$"), (0, r"^n=0: must be an integer >= 1$"),
                     (2.0, r"^n=2\.0: must be an integer >= 1$")):
        with pytest.raises(ValueError, match=msg):
            check_int("n", bad, low=1)
    with pytest.raises(ValueError, match=r"^k=5: must be an integer in \[1, 4\] \(C=4\)$"):
        check_int("k", 5, low=1, high=4, note=" (C=4)")


def test_at_least():
    assert at_least(1)(1) == 1 and at_least(0, strict=True)(0.5) == 0.5 and at_least(1, or_none=True)(None) is None
    for check, value, msg in ((at_least(1), 0, "must be >= 1"), (at_least(0, strict=True), 0.0, "must be > 0"),
                              (at_least(1, or_none=True), 0, "must be >= 1 or null"), (at_least(1), None, ">= 1")):
        with pytest.raises(ValueError, match=msg):
            check(value)
