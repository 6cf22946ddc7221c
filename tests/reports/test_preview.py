"""``reports.build --preview`` (issue 34): a paper table before any run, with the paper's numbers and an empty cell
for each of ours, every file saying it is a preview, and no store read or made."""

from __future__ import annotations

from pathlib import Path

TABLE1 = Path(__file__).resolve().parents[2] / "experiments" / "table1_cifar_svhn.yaml"


def test_preview_builds_the_table_without_a_store(tmp_path, capsys):
    from reports.build import PREVIEW, main

    store = tmp_path / "nowhere" / "mlflow.db"
    assert main([str(TABLE1), "--preview", "--out", str(tmp_path / "out"), "--format", "md,tex",
                 "--tracking-uri", str(store)]) == 0
    assert not store.parent.exists()                                    # nothing read, nothing made
    printed = capsys.readouterr().out
    assert PREVIEW in printed and "cells with no finished run" not in printed
    table = (tmp_path / "out" / "table1.md").read_text()
    assert table.startswith(f"> {PREVIEW}")
    mutexmatch = next(line for line in table.splitlines() if line.startswith("| MutexMatch |"))
    cells = [c.strip() for c in mutexmatch.strip("|").split("|")]
    assert cells[1:4] == ["—", "66.45±30.42", "—"]                      # ours empty, the paper's, no Δ
    assert (tmp_path / "out" / "table1.tex").read_text().startswith(f"% {PREVIEW}")
    assert (tmp_path / "out" / "index.md").read_text().startswith("# Preview: ")
