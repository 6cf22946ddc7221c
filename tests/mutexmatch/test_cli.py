"""mutexmatch.cli: the wrapper every command line's ``main`` goes through (issue 33 item 1)."""

from __future__ import annotations

import errno

import pytest

from mutexmatch.cli import DEBUG_ENV, INTERRUPTED, UNEXPECTED, entry_point, unexpected_error_line


@pytest.fixture(autouse=True)
def _no_debug(monkeypatch):
    monkeypatch.delenv(DEBUG_ENV, raising=False)


def _main_raising(err: BaseException):
    seen = []

    @entry_point("python -m demo")
    def main(argv=None) -> int:
        seen.append(list(argv))
        raise err

    return main, seen


def test_an_unforeseen_exception_is_one_line_with_the_input_and_what_to_do(tmp_path, capsys) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text("x: 1\n")
    main, seen = _main_raising(ZeroDivisionError("division\nby zero"))
    assert main([str(spec), "--n", "3"]) == UNEXPECTED
    (line,) = capsys.readouterr().err.splitlines()
    assert line == (f"error: python -m demo failed unexpectedly: ZeroDivisionError: division by zero (input: {spec}); "
                    f"this is a bug: run again with --debug (or {DEBUG_ENV}=1) for the traceback and report it with "
                    "that output")
    assert seen == [[str(spec), "--n", "3"]]


def test_an_os_error_names_its_file_and_says_to_check_the_path(capsys) -> None:
    main, _ = _main_raising(OSError(errno.ENOSPC, "No space left on device", "/data/out/x.pt"))
    assert main([]) == UNEXPECTED
    err = capsys.readouterr().err
    assert "OSError: [Errno 28] No space left on device: '/data/out/x.pt' (input: /data/out/x.pt); check that path" \
        in err


def test_a_huge_message_is_bounded(capsys) -> None:
    main, _ = _main_raising(ValueError("x" * 100_000))
    assert main([]) == UNEXPECTED
    assert len(capsys.readouterr().err) < 600


def test_debug_flag_or_variable_lets_the_traceback_through_and_never_reaches_the_command(monkeypatch) -> None:
    main, seen = _main_raising(KeyError("k"))
    with pytest.raises(KeyError):
        main(["a", "--debug", "b"])
    assert seen[-1] == ["a", "b"]
    monkeypatch.setenv(DEBUG_ENV, "1")
    with pytest.raises(KeyError):
        main(["a"])
    monkeypatch.setenv(DEBUG_ENV, "0")
    assert main(["a"]) == UNEXPECTED


def test_debug_after_a_double_dash_belongs_to_the_other_command() -> None:
    main, seen = _main_raising(RuntimeError("r"))
    assert main(["--opt", "--", "python", "x.py", "--debug"]) == UNEXPECTED
    assert seen == [["--opt", "--", "python", "x.py", "--debug"]]


def test_usage_errors_and_ctrl_c_keep_their_own_ending(capsys) -> None:
    main, _ = _main_raising(SystemExit(2))
    with pytest.raises(SystemExit):
        main([])
    main, _ = _main_raising(KeyboardInterrupt())
    assert main([]) == INTERRUPTED
    assert capsys.readouterr().err == "error: interrupted\n"


def test_the_result_of_a_command_passes_unchanged() -> None:
    @entry_point("python -m demo")
    def main(argv=None) -> int:
        return len(argv)

    assert main(["a", "b"]) == 2 and main.__name__ == "main"


def test_unexpected_error_line_without_text_or_input() -> None:
    assert unexpected_error_line("p", MemoryError()).startswith(
        "error: p failed unexpectedly: MemoryError; the machine ran out of memory")
