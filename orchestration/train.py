"""One training run logged to MLflow: ``python -m mutexmatch.train`` with the sweep trials' MLflow layout.

    python -m orchestration.train --config FILE [--set key=value ...] [--tracking-uri URI] [--experiment-name NAME]
    python -m orchestration.train --resume DIR [--tracking-uri URI]

Every argument of ``python -m mutexmatch.train`` works the same (``--resume``, ``--overwrite``, ``--stop-at``,
``--yes``, the cost line before step 1); this command adds an MLflow run watched through the trainer's callback
seam (the trainer itself never imports MLflow). The store follows the rule of every command
(``--tracking-uri``, else ``$MLFLOW_TRACKING_URI``, else ``./mlflow.db``); the experiment is ``--experiment-name``
(default ``single-runs``). The run has a trial's layout (``orchestration/README.md``, MLflow layout): params = the
flattened config, the trainer's metrics at their steps, ``config.yaml``, ``split.json``, the class counts of every
evaluation and their heat map, the best and final weights and the final checkpoint; tags ``mutexmatch.kind=single``
(so no report table counts it), ``mutexmatch.axis.algorithm``, the fold, config hash, split digest and commit. It
is named ``<algorithm> · fold <k> · single``. ``--resume DIR`` continues the MLflow run of that run folder (found
by the folder's ``mutexmatch.trial_id``) without logging an evaluation twice; it ends FINISHED, FAILED (with the
error) or KILLED (Ctrl+C) as the run does.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import hashlib
import secrets
import socket
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import IO, Sequence

from mutexmatch.cli import add_version, answer_early, entry_point
from orchestration.runtime.env import apply_closed_network_env

DEFAULT_EXPERIMENT = "single-runs"


# The command line, defined before the imports below: --help, --version and a usage error answer without them.
def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m orchestration.train", add_help=False,
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--tracking-uri", help="MLflow tracking URI or a *.db path (default: $MLFLOW_TRACKING_URI, else "
                                          "sqlite:///<cwd>/mlflow.db, as the sweep)")
    p.add_argument("--experiment-name", default=DEFAULT_EXPERIMENT, help="MLflow experiment (default %(default)s)")
    p.add_argument("-h", "--help", action="store_true")
    return add_version(p)


def _parse(argv: Sequence[str] | None) -> tuple[argparse.Namespace, list[str]]:
    """This command's options and the trainer's (checked by its parser); ``--help`` prints both and exits."""
    from mutexmatch.training.command import build_parser  # the trainer's parser: no torch until a run starts

    ours, rest = _parser().parse_known_args(argv)
    if ours.help:
        _parser().print_help()
        print("\nand every option of python -m mutexmatch.train:\n")
        build_parser().print_help()
        raise SystemExit(0)
    build_parser().parse_args(rest)
    return ours, rest


if __name__ == "__main__":
    answer_early(_parse)  # before MLflow and torch load


apply_closed_network_env()

from mutexmatch.training import Callback, EvalEvent, RunSummary, StartEvent  # noqa: E402
from mutexmatch.config import RunConfig, config_hash  # noqa: E402
from mutexmatch.training import INTERRUPTED  # noqa: E402
from mutexmatch.training import main as train_main  # noqa: E402

from orchestration import contract as C  # noqa: E402
from orchestration.store import mlflow_ui  # noqa: E402
from orchestration.trial import tracking  # noqa: E402
from orchestration.store.store import Store, end_run  # noqa: E402

__all__ = ["DEFAULT_EXPERIMENT", "MlflowRunCallback", "main"]



class MlflowRunCallback(Callback):
    """Trainer events → the run's :class:`orchestration.trial.tracking.TrialRun` (the sweep trials' bookkeeping)."""

    def __init__(self, trial_run: tracking.TrialRun):
        self.trial_run = trial_run
        self.complete = False     # the run reached train.iterations (not stopped early by --stop-at)

    def on_start(self, event: StartEvent) -> None:
        self.trial_run.log_start(event)

    def on_eval(self, event: EvalEvent) -> bool | None:
        self.trial_run.log_eval(event)
        return None

    def on_end(self, summary: RunSummary) -> None:
        self.trial_run.log_end(summary)
        self.complete = summary.final_weights is not None


def _trial_id(cfg: RunConfig) -> str:
    """What finds a run folder's MLflow run again: its absolute path, hashed."""
    return "single-" + hashlib.sha256(str(Path(cfg.output_dir).resolve()).encode()).hexdigest()[:16]


def open_run(store: Store, cfg: RunConfig, resumed: bool, commit: str) -> tracking.TrialRun:
    """The MLflow run of this training run: a new one, or on ``--resume`` the newest one of the same run folder."""
    trial_id, launch_id = _trial_id(cfg), None
    if resumed:
        newest = store.newest_run_of_trial(trial_id)
        launch_id = newest.data.tags.get(C.LAUNCH_ID) if newest is not None else None
    launch_id = launch_id or f"single-{datetime.now():%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"
    levels = ((C.ALGORITHM_AXIS, cfg.algorithm.name),)
    tags = C.trial_tags(parent_run_id="", kind=C.KIND_SINGLE, cell_levels=levels, cell_id=C.cell_id(levels),
                        fold=cfg.data.fold, variant=cfg.algorithm.name, config_hash=config_hash(cfg), commit=commit,
                        trial_id=trial_id, launch_id=launch_id)
    del tags[C.PARENT_RUN_ID]   # a run of its own, not a sweep's child
    run = tracking.TrialRun.open(store, trial_id=trial_id, launch_id=launch_id, tags=tags,
                                 run_name=C.trial_run_name(levels, cfg.data.fold, C.KIND_SINGLE))
    run.start_attempt(cfg.to_dict(), node_id=socket.gethostname(), tune_checkpoint=False)
    return run


@entry_point("python -m orchestration.train")
def main(argv: Sequence[str] | None = None) -> int:
    ours, rest = _parse(argv)
    try:   # the store first: a dead server or a file that is no database is one line before any work
        uri = tracking.resolve_tracking_uri(ours.tracking_uri, Path.cwd())
        client = tracking.MlflowClient(uri)
        with C.bounded_http(uri, "--tracking-uri"):
            experiment_id = tracking.ensure_experiment(client, ours.experiment_name, uri)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    opened: list[MlflowRunCallback] = []
    t0 = time.perf_counter()

    def callbacks(cfg: RunConfig, resumed: bool) -> list[Callback]:
        run = open_run(Store(client, experiment_id), cfg, resumed, tracking.git_commit(Path(__file__).parent.parent))
        opened.append(MlflowRunCallback(run))
        print(f"[train] MLflow run {run.run_id} in experiment {ours.experiment_name!r}: "
              f"{mlflow_ui.ui_hint(uri, experiment_id)}", file=sys.stderr, flush=True)
        return list(opened)

    said = _ErrorLines(sys.stderr)
    try:
        with contextlib.redirect_stderr(said):  # the trainer's error line goes to the console and to the run
            code = train_main(rest, callbacks=callbacks)
    except BaseException as e:
        if opened and not isinstance(e, (KeyboardInterrupt, SystemExit)):
            opened[0].trial_run.failed(e)
        raise
    if opened:
        _end(opened[0], code, time.perf_counter() - t0, said.last)
    return code


class _ErrorLines(io.TextIOBase):
    """stderr passed through, its last ``error: ...`` line kept (issue 33 item 6: the MLflow run recorded only
    'the trainer exited with code 1', where a sweep trial records the reason)."""

    def __init__(self, through: IO[str]) -> None:
        self.through, self.last, self._line = through, "", ""

    def write(self, text: str) -> int:
        self._line += text
        *done, self._line = self._line.split("\n")
        self.last = next((ln[len("error: "):] for ln in reversed(done) if ln.startswith("error: ")), self.last)
        return self.through.write(text)

    def flush(self) -> None:
        self.through.flush()


def _end(callback: MlflowRunCallback, code: int, wall_s: float, error_line: str = "") -> None:
    """FINISHED when the run completed; KILLED when stopped (Ctrl+C, ``--stop-at``: ``--resume`` continues it);
    FAILED with the exit code otherwise."""
    run = callback.trial_run
    if code == 0 and callback.complete:
        run.finish({"wall_s": wall_s})
    elif code in (0, INTERRUPTED):
        how = "--stop-at" if code == 0 else "Ctrl+C"
        run.client.set_tag(run.run_id, C.ENDED_BY, f"{how} (continue: python -m orchestration.train --resume DIR)")
        end_run(run.client, run.run_id, "KILLED")
    else:
        run.client.set_tag(run.run_id, C.ERROR, error_line[:5000] or f"the trainer exited with code {code} (its "
                                                                    "error line: the console)")
        end_run(run.client, run.run_id, "FAILED")


if __name__ == "__main__":
    raise SystemExit(main())
