"""Reuse that knows its source (issue 33 items 4 and 8), on a small SQLite store built with the MLflow client (the
sweeps' real plans and config hashes; no Ray, no training, no subprocess):

- a reused trial whose source run was deleted (MLflow's trash) or purged (``mlflow gc``) is named, one line each,
  by the status, the relaunch and the report; it is not counted, and the relaunch (also with ``--no-reuse``) trains
  exactly it. Before: the status and every relaunch ended in ``Run … not found``, the report said "NaN: diverged?",
  and a deleted source was still counted;
- reuse across code versions is said in one line and ``--reuse same-commit`` refuses it;
- SIGINT or SIGTERM while links are written leaves no link run RUNNING and says how many were written; the next
  launch ends a RUNNING link it finds (KILLED, with the reason)."""

from __future__ import annotations

import os
import signal

import pytest
from click.testing import CliRunner

from orchestration import contract as C
from orchestration.launch import interrupts
from orchestration.launch.launch import SweepOptions, check_options, command_line, link_reusable, select
from orchestration.launch.summary import grid_summary
from orchestration.status import collect, format_status
from orchestration.store.store import Store
from reports.build import build_report
from tests.orchestration.test_reuse import _plan, _yaml, two_sweeps


@pytest.fixture(scope="module")
def lost(tmp_path_factory):
    """Sweep A (supervised, FixMatch; commit ``abc``) FINISHED; sweep B's FixMatch trials linked to A's runs, its
    MutexMatch trials trained; then A's FixMatch fold-0 run deleted and its fold-1 run purged by ``mlflow gc``."""
    tmp, uri, client, _, (exp_b, plan_b, yaml_b), _, _ = two_sweeps(tmp_path_factory.mktemp("reuse_lost"))
    store_b = Store(client, exp_b)
    links = {r.data.tags[C.FOLD]: r for r in client.search_runs([exp_b], f"tags.`{C.REUSED_FROM}` != ''")}
    deleted, purged = links["0"].data.tags[C.REUSED_FROM], links["1"].data.tags[C.REUSED_FROM]
    client.delete_run(deleted)
    client.delete_run(purged)
    from mlflow.cli import gc
    from mlflow.tracking._tracking_service import utils as tracking_utils

    with pytest.MonkeyPatch.context() as mp:  # gc sets the process's tracking URI (and its variable): put both back
        mp.setattr(tracking_utils, "_tracking_uri", tracking_utils._tracking_uri)
        mp.setenv("MLFLOW_TRACKING_URI", uri)
        result = CliRunner().invoke(gc, ["--backend-store-uri", uri, "--tracking-uri", uri, "--run-ids", purged])
    assert result.exit_code == 0, result.output
    fix = [t.key for t in plan_b.grid if dict(t.cell.levels)["method"] == "fixmatch"]
    return tmp, uri, client, store_b, plan_b, yaml_b, links, (deleted, purged), fix


def test_the_relaunch_trains_exactly_the_trials_whose_source_is_gone(lost):
    _, _, client, store_b, plan_b, _, links, (deleted, purged), fix = lost
    with pytest.raises(Exception, match="not found"):  # the finding: the purged run is gone from the store
        client.get_run(purged)
    assert client.get_run(deleted).info.lifecycle_stage == "deleted"
    # --no-reuse takes select's list (before: empty, "nothing to do"); with reuse, no other FINISHED run of these
    # configs is left to link
    grid, _, skipped = select(plan_b, store_b, force=False)
    assert grid == fix and len(skipped) == 2
    todo, reused = link_reusable(plan_b, store_b, grid)
    assert todo == fix and reused == []
    assert store_b.lost_sources(links.values()) == {links["0"].info.run_id: C.SOURCE_DELETED,
                                                    links["1"].info.run_id: C.SOURCE_PURGED}
    lines = store_b.lost_lines(store_b.finished_trials(C.KIND_GRID))
    assert len(lines) == 2 and all("fixmatch · digits-20 · fold" in line and "· reused" in line for line in lines)
    assert f"{deleted} (experiment 'sweep_a') was deleted (in MLflow's trash)" in lines[0]
    assert f"{purged} (experiment 'sweep_a') is gone (purged, e.g. by mlflow gc)" in lines[1]


@pytest.mark.parametrize("no_reuse", [True, False])
def test_the_launch_names_them_and_selects_exactly_them(lost, capsys, no_reuse):
    """The sweep's own choice of trials (what follows is Ray and the phases): before, ``Run … not found``."""
    from orchestration.launch.launch import Launch
    from orchestration.sweep import _choose

    tmp, uri, _, store_b, plan_b, yaml_b, links, _, fix = lost
    launch = Launch(SweepOptions(spec_path=yaml_b, no_reuse=no_reuse), plan_b, uri, str(tmp / "ray"), "sweep_b",
                    tmp, store=store_b)
    chosen = _choose(launch)
    assert chosen.grid_keys == fix and chosen.phases == []
    printed = [line for line in capsys.readouterr().out.splitlines() if "its source run" in line]
    assert printed == [f"[sweep] {line}" for line in store_b.lost_lines(links.values())] and len(printed) == 2


def test_status_and_summary_say_which_trials_lost_their_source_and_do_not_count_them(lost):
    _, _, _, store_b, plan_b, _, _, _, _ = lost
    st = collect(store_b, plan_b)  # before: MlflowException "Run … not found"
    assert [t.state for t in st.trials] == ["PENDING", "PENDING", "FINISHED", "FINISHED"]
    assert len(st.lost) == 2 and st.ignored == []
    text = format_status(st)
    assert "reused trials whose source run is gone (2)" in text and "is gone (purged" in text
    summary = grid_summary(store_b, plan_b)  # before: the same traceback; a deleted source was counted
    row = next(line for line in summary.splitlines() if line.startswith("method=fixmatch"))
    assert row.split()[1] == "0/2" and "—" in row


def test_the_report_names_the_lost_trials_instead_of_blaming_divergence(lost):
    tmp, uri, _, _, _, yaml_b, links, _, _ = lost
    result = build_report(yaml_b, tracking_uri=uri, out_dir=tmp / "report_b", formats=["md"])
    assert all("diverged" not in cell for cells in result.missing.values() for cell in cells)
    assert any("fixmatch" in cell for cell in result.missing["main"])   # shown as —, not a (deleted) run's number
    assert len(result.lost) == 2 and all("a relaunch trains it again" in line for line in result.lost)
    index = (tmp / "report_b" / "index.md").read_text()
    assert "Reused trials whose source run is gone (2)" in index and links["0"].info.run_name in index


@pytest.fixture(scope="module")
def plan_sup(lost):
    """A YAML of A's supervised cell alone: its runs (commit ``abc``) are intact in the store."""
    return _plan(lost[0], _yaml(lost[0], "sweep_sup", ["supervised"]))


def test_reuse_across_commits_is_said_and_can_be_refused(lost, plan_sup):
    client, plan_b = lost[2], plan_sup
    keys = [t.key for t in plan_b.grid]
    said: list[str] = []
    store = Store(client, client.create_experiment("refused"))
    todo, reused = link_reusable(plan_b, store, keys, commit="def", reuse=C.REUSE_SAME_COMMIT, say=said.append)
    assert todo == keys and reused == [] and not list(store.runs())
    assert said == ["2 trial(s) with a FINISHED run of the same config from other code than this launch's def: "
                    "abc (2 trials); not reused (--reuse same-commit): trained again"]
    said.clear()
    todo, reused = link_reusable(plan_b, Store(client, client.create_experiment("any")), keys, commit="def",
                                 say=said.append)
    assert todo == [] and len(reused) == 2 and len(said) == 1 and said[0].endswith(
        "reused (--reuse same-commit trains them again instead)")
    said.clear()
    todo, _ = link_reusable(plan_b, Store(client, client.create_experiment("same")), keys, commit="abc",
                            reuse=C.REUSE_SAME_COMMIT, say=said.append)
    assert todo == [] and said == []                       # the same clean commit: reused, nothing to say
    assert not C.same_code("abc-dirty", "abc-dirty") and not C.same_code("unknown", "unknown")


def test_the_reuse_option(tmp_path):
    from orchestration.sweep import _parser

    assert _parser().parse_args(["x.yaml", "--reuse", "same-commit"]).reuse == "same-commit"
    assert _parser().parse_args(["x.yaml"]).reuse == "any"
    assert "--reuse {any,same-commit}" in _parser().format_help()
    opts = SweepOptions(spec_path=tmp_path / "x.yaml", reuse="same-commit")
    assert command_line(opts, "sqlite:///m.db", "/r", resume=False).endswith("--reuse same-commit")
    with pytest.raises(ValueError, match=r"--reuse 'newest': give one of any, same-commit"):
        check_options(SweepOptions(spec_path=tmp_path / "x.yaml", reuse="newest"))


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_linking_leaves_no_link_running_and_counts_the_links(lost, plan_sup, monkeypatch, signum):
    """The signal arrives inside a link's create_run, before its end (the finding: after SIGINT one link stayed
    RUNNING for ever and the line said no run was opened)."""
    client, plan_b = lost[2], plan_sup
    store = Store(client, client.create_experiment(f"signal{int(signum)}"))
    real = client.create_run

    def create_then_signal(*args, **kwargs):
        run = real(*args, **kwargs)
        os.kill(os.getpid(), signum)   # as a user's Ctrl+C or a scheduler's SIGTERM between create and end
        return run

    monkeypatch.setattr(client, "create_run", create_then_signal)
    before = {s: signal.signal(s, interrupts.on_interrupt) for s in (signal.SIGINT, signal.SIGTERM)}  # the CLI's
    try:
        with pytest.raises(KeyboardInterrupt) as caught:  # caught here: a bare one would end pytest's session
            link_reusable(plan_b, store, [t.key for t in plan_b.grid])
    finally:
        for s, h in before.items():
            signal.signal(s, h)
        interrupts.INTERRUPTED.clear()
    assert [r.info.status for r in store.runs()] == ["FINISHED"]   # before: ["RUNNING"]
    assert isinstance(caught.value, interrupts.LinkingInterrupted)
    assert (caught.value.linked, caught.value.total) == (1, 2)


def test_the_next_launch_ends_a_link_left_running(lost):
    client = lost[2]
    store = Store(client, client.create_experiment("stale"))
    tags = C.reused_trial_tags(kind=C.KIND_GRID, cell_levels=[("method", "fixmatch")], cell_id="method=fixmatch",
                               fold=0, source_id="abc", source_tags={}, source_experiment="a", source_artifact_uri="")
    link = client.create_run(store.experiment_id, tags=tags, run_name="fixmatch · fold 0 · reused").info.run_id
    trial = client.create_run(store.experiment_id, tags={C.ROLE: C.ROLE_TRIAL}).info.run_id  # a trial: not a link
    assert store.end_stale_links(min_age_s=60) == []      # a tracking server: a link RUNNING for < 60 s may be live
    assert [r.info.run_id for r in store.end_stale_links()] == [link]
    ended = client.get_run(link)
    assert ended.info.status == "KILLED" and ended.data.tags[C.ENDED_BY] == C.STALE_LINK_REASON
    assert client.get_run(trial).info.status == "RUNNING"


def test_the_command_line_says_what_an_interrupted_linking_wrote(monkeypatch, capsys):
    import orchestration.sweep as sweep

    def interrupted(opts):
        raise interrupts.LinkingInterrupted(61, 200)

    monkeypatch.setattr(sweep, "run_sweep", interrupted)
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)}
    try:
        assert sweep.main(["x.yaml"]) == 130
    finally:
        for s, h in before.items():
            signal.signal(s, h)
    err = capsys.readouterr().err
    assert "interrupted while linking reused trials: 61 of 200 link run(s) written, each FINISHED (none left " \
           "RUNNING)" in err and "no run was opened" not in err
