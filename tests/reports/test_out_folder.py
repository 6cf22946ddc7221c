"""``reports.build --out DIR`` replaces only files a build wrote there (adversarial finding #15: a hand-written
``index.md`` and ``report.tex`` in DIR were replaced without a word); ``--overwrite`` replaces them anyway. Previews:
no store is read, so each build takes well under a second."""

from __future__ import annotations

from pathlib import Path

import pytest

QUICKSTART = Path(__file__).resolve().parents[2] / "experiments" / "quickstart.yaml"


def _build(out: Path, *extra: str) -> int:
    from reports.build import main

    return main([str(QUICKSTART), "--preview", "--out", str(out), "--format", "md,tex", *extra])


def test_hand_written_files_in_out_are_refused_before_any_write(tmp_path, capsys):
    out = tmp_path / "paper"
    out.mkdir()
    (out / "index.md").write_text("# My notes\n")
    (out / "report.tex").write_text("\\documentclass{article} % my paper\n")
    assert _build(out) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith(f"error: --out {str(out)!r}: ") and "index.md" in err[0] and "report.tex" in err[0]
    assert "were not written by reports.build" in err[0] and "--overwrite" in err[0]
    assert sorted(p.name for p in out.iterdir()) == ["index.md", "report.tex"]          # nothing written
    assert (out / "index.md").read_text() == "# My notes\n"
    assert _build(out, "--overwrite") == 0
    assert (out / "index.md").read_text().startswith("# Preview: ")


def test_a_build_replaces_its_own_files_and_leaves_others_alone(tmp_path, capsys):
    out = tmp_path / "rep"
    assert _build(out) == 0
    (out / "notes.md").write_text("mine\n")                  # a file the build never writes: no obstacle
    assert _build(out) == 0
    assert (out / "notes.md").read_text() == "mine\n"
    # a file of the build edited by hand is no longer the build's
    with (out / "main.tex").open("a") as f:
        f.write("% my fix\n")
    capsys.readouterr()
    assert _build(out) == 2
    err = capsys.readouterr().err
    assert "main.tex" in err and "changed since reports.build wrote it" in err and "index.md" not in err


def test_a_folder_an_earlier_version_built_is_rebuilt(tmp_path):
    """Reports built before the build kept its list of files: an index.md with the build's own title is taken as a
    build's folder (``make quickstart`` run again after an update must not stop here)."""
    out = tmp_path / "old"
    out.mkdir()
    (out / "index.md").write_text("# Report: quickstart\n\nMLflow experiment …\n")
    (out / "main.md").write_text("old table\n")
    assert _build(out) == 0
    assert (out / "main.md").read_text() != "old table\n"


@pytest.mark.parametrize("title", ["# Report: another\n", "# Preview: another\n"])
def test_an_index_of_another_experiment_is_not_taken_for_this_builds(tmp_path, title):
    out = tmp_path / "other"
    out.mkdir()
    (out / "index.md").write_text(title)
    assert _build(out) == 2
