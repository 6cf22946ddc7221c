"""Issue 23's acceptance for quoted rows: the Table 1 report built from a store holding only FixMatch and MutexMatch
runs prints every quoted row of the paper (MixMatch†, UDA†, ReMixMatch†, SLA‡) with its mark, its printed numbers
and its footnote, in Markdown, LaTeX and the PDF, and CoMatch* -- a `comatch` level of the sweep since issue 23 item
3 -- as a run row with the paper's numbers and none of ours yet; with CoMatch runs in the store its row shows ours
beside the paper's numbers, as FixMatch's does.

The store is what the sweep leaves (the documented MLflow layout, one FINISHED grid run per cell and fold); no
training, no Ray."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from mlflow import MlflowClient
from mlflow.entities import Metric

from orchestration import contract as C
from reports.build import build_report

REPO = Path(__file__).resolve().parents[2]
TABLE1 = REPO / "experiments" / "table1_cifar_svhn.yaml"
BASE = {"fixmatch": 80.0, "mutexmatch": 85.0, "comatch": 70.0}     # test accuracy (%) of fold 0; fold f adds f
QUOTED = {   # Table 1 of the paper, as printed: label and mark → the nine columns ("—": the paper prints none)
    "MixMatch†": "— — 52.46±11.50 — — 33.39±1.32 60.06±0.37 57.45±14.53 96.02±0.23",
    "UDA†": "— — 70.95±5.93 — — 40.72±0.88 66.87±0.22 47.37±20.51 94.31±2.76",
    "ReMixMatch†": "— — 80.90±9.64 — — 55.72±2.06 72.57±0.31 96.66±0.20 97.08±0.48",
    "SLA‡": "65.87±10.83 81.91±6.77 94.83±0.32 94.98±0.28 — 58.56±1.41 71.27±0.44 96.37±2.91 —",
}
COMATCH = ("69.87±11.82 88.43±7.22 93.21±1.55 94.08±0.31 40.10±2.99 58.04±1.39 72.45±0.44 96.47±1.29 "   # a run row
           "96.98±1.29")
FOOTNOTES = ("† reported in FixMatch (Sohn et al., 2020). ‡ reported in SLA (Tai et al., 2021). \\* the paper authors' "
             "own reimplementation.")


def _store(root: Path, spec: dict, methods: list[str]) -> str:
    """A store with one FINISHED grid run per (method, setting, fold) of ``methods``, two evaluations each."""
    uri = f"sqlite:///{root / 'mlflow.db'}"
    client = MlflowClient(uri)
    exp_id = client.create_experiment(spec["name"], artifact_location=(root / "artifacts").as_uri())
    parent = client.create_run(exp_id, tags={C.ROLE: C.ROLE_SWEEP}, run_name="sweep").info.run_id
    now = int(time.time() * 1000)
    for method in methods:
        for i, setting in enumerate(spec["axes"]["setting"]):
            levels = {"method": method, "setting": setting}
            cid = C.cell_id(levels.items())
            for fold in spec["folds"]:
                tags = C.trial_tags(parent_run_id=parent, kind=C.KIND_GRID, cell_levels=levels.items(), cell_id=cid,
                                    fold=fold, variant=method, config_hash=f"h{cid}{fold}", commit="abc",
                                    trial_id=f"t{cid}{fold}", launch_id="l")
                rid = client.create_run(exp_id, tags={**tags, C.SPLIT_DIGEST: f"s{fold}"},
                                        run_name=C.trial_key(cid, fold)).info.run_id
                acc = BASE[method] + i + fold
                client.log_batch(rid, metrics=[Metric(C.TEST_ACC, (acc - 10 * (1 - s)) / 100, now + s, 100 * (s + 1))
                                               for s in range(2)])
                client.set_terminated(rid)
    client.set_terminated(parent)
    return uri


def _row(md: str, label: str) -> list[str]:
    """The cells of the Markdown row labelled ``label`` (exactly one)."""
    (line,) = [ln for ln in md.splitlines() if ln.startswith(f"| {label} |")]
    return [c.strip() for c in line.strip("|").split("|")][1:]


@pytest.fixture(scope="module")
def fixmatch_mutexmatch_only(scratch_dirs):
    root = scratch_dirs("table1-quoted-")
    spec = yaml.safe_load(TABLE1.read_text())
    uri = _store(root, spec, ["fixmatch", "mutexmatch"])
    formats = ["md", "tex", "pdf"] if shutil.which("pdflatex") else ["md", "tex"]
    return build_report(TABLE1, tracking_uri=uri, out_dir=root / "out", formats=formats)


def test_every_quoted_row_of_table1_is_printed_with_its_mark(fixmatch_mutexmatch_only):
    md = (fixmatch_mutexmatch_only.out_dir / "table1.md").read_text()
    lines = md.splitlines()
    quoted_at, run_at = lines.index("| *quoted from the paper (not run here)* |" + "  |" * 27), \
        lines.index("| *run here* |" + "  |" * 27)
    assert [ln.split(" |")[0][2:] for ln in lines[quoted_at + 1:run_at]] == list(QUOTED)   # above ours, in order
    for label, printed in QUOTED.items():
        cells = _row(md, label)
        assert cells[1::3] == printed.split(), label           # the Paper sub-column holds the printed numbers
        assert set(cells[0::3] + cells[2::3]) == {""}, label   # nothing under Ours and Δ: we did not run it
    ours = _row(md, "MutexMatch")
    assert ours[:3] == ["**87.00±1.58**", "66.45±30.42", "+20.55"]   # a run row: ours, the paper's, Δ, as before
    comatch = _row(md, "CoMatch\\*")                              # run here, nothing finished yet: the paper's only
    assert comatch[1::3] == COMATCH.split() and set(comatch[0::3] + comatch[2::3]) == {"—"}
    assert lines.index(next(ln for ln in lines if ln.startswith("| CoMatch\\* |"))) > run_at
    assert FOOTNOTES in lines
    assert _row(md, "FixMatch\\*")[:2] == ["*82.00±1.58*", "45.91±28.46"]   # the paper's FixMatch* (issue 32)
    assert "second best per column among the rows run here" in md


def test_the_latex_table_and_pdf_print_the_quoted_rows_and_footnotes(fixmatch_mutexmatch_only):
    tex = (fixmatch_mutexmatch_only.out_dir / "table1.tex").read_text()
    for label in ("MixMatch$^{\\dagger}$", "UDA$^{\\dagger}$", "ReMixMatch$^{\\dagger}$", "SLA$^{\\ddagger}$",
                  "CoMatch$^{\\ast}$"):
        assert tex.count(f"\n{label} & ") == 4, label           # once in each of the four column blocks
    # in each block the rule between the paper's rows and ours, right under SLA and above FixMatch; CoMatch, a run
    # row, below it
    assert len(re.findall(r"\nSLA\$\^\{\\ddagger\}\$ [^\n]*\n\\cmidrule\{1-(7|10)\}\nFixMatch\$\^\{\\ast\}\$ & [^\n]*\n"
                          r"CoMatch\$\^\{\\ast\}\$ & ", tex)) == 4
    assert "$^{\\dagger}$ reported in FixMatch (Sohn et al., 2020). $^{\\ddagger}$ reported in SLA" in tex
    pdf = fixmatch_mutexmatch_only.pdf
    if pdf is None:
        pytest.skip("pdflatex is not installed (make system-deps); the LaTeX is checked above")
    text = subprocess.run(["pdftotext", "-layout", str(pdf), "-"], capture_output=True, text=True, check=True,
                          timeout=60).stdout
    for needle in ("MixMatch†", "UDA†", "ReMixMatch†", "SLA‡", "CoMatch∗", "52.46±11.50", "96.98±1.29",
                   "reported in SLA (Tai et al., 2021)"):
        assert needle in text, needle


def test_with_comatch_runs_its_row_shows_ours_beside_the_papers(scratch_dirs):
    """The sweep's `comatch` level (issue 23 item 3): its runs fill the row beside the paper's numbers."""
    tmp_path = scratch_dirs("table1-comatch-")
    spec = yaml.safe_load(TABLE1.read_text())
    assert spec["axes"]["method"]["comatch"]["algorithm"]["name"] == "comatch"
    uri = _store(tmp_path, spec, ["fixmatch", "mutexmatch", "comatch"])
    out = build_report(TABLE1, tracking_uri=uri, out_dir=tmp_path / "out", formats=["md", "tex"])
    md = (out.out_dir / "table1.md").read_text()
    lines = md.splitlines()
    # CoMatch left the quoted block: it is a run row among ours, below the "run here" line
    cells = _row(md, "CoMatch\\*")
    assert lines.index(next(ln for ln in lines if ln.startswith("| CoMatch\\* |"))) > \
        lines.index("| *run here* |" + "  |" * 27)
    assert cells[:3] == ["72.00±1.58", "69.87±11.82", "+2.13"]        # ours (fold 0 = 70 + 0, …), paper, Δ
    assert cells[-3:] == ["80.00±1.58", "96.98±1.29", "-16.98"]
    assert [ln.split(" |")[0][2:] for ln in lines if ln.startswith(("| MixMatch", "| UDA", "| ReMixMatch", "| SLA"))] \
        == ["MixMatch†", "UDA†", "ReMixMatch†", "SLA‡"]
    assert "CoMatch$^{\\ast}$ & 72.00$\\pm$1.58 & 69.87$\\pm$11.82 & $+2.13$" in (out.out_dir / "table1.tex").read_text()
