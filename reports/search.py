"""The search in the report (issue 14): the tuned rows' refit runs, and for each Optuna study of the YAML's
``search`` (one per searched cell and search fold) a trials table, parameter importances and two plots.

- Which studies: MLflow's search runs (kind ``search``) carry their cell, fold and search hash; the study of a cell
  and fold is the newest hash's (a changed ``search`` is a new study, as in the sweep), named
  :func:`orchestration.contract.study_name`.
- Where their trials come from: the durable Optuna study (``search.storage``, by default ``optuna.db`` beside the
  MLflow SQLite store; :func:`orchestration.contract.optuna_storage_url`) when it exists; else the MLflow search
  runs, rebuilt into an in-memory study so importances and plots work the same, with the values each run's searcher
  sampled (tag ``mutexmatch.sampled``, typed; a run from before it: its params read by each distribution's type).
  A report never creates a storage.
- States: ``complete``, ``pruned (ASHA)``, ``failed``, ``running``. Ray's OptunaSearch tells Optuna that a trial
  ASHA stopped is COMPLETE with the last value it reported, so "pruned (ASHA)" comes from the MLflow run's
  ``mutexmatch.early_stopped`` tag, the run matched to its Optuna trial by its sampled values (by its logged
  parameters for a run from before the ``mutexmatch.sampled`` tag). Those trials keep their
  objective, and TPE, the best trial and the importances count them with it, as the sweep does.
- The best trial (★): the one :func:`orchestration.contract.best_trial` picks, the rule the refit and the parent
  run's ``best.*`` follow, so the star is on the trial the sweep chose.
- Importances: ``optuna.importance.get_param_importances`` with the fANOVA evaluator (seeded), "n/a" with the reason
  below :data:`MIN_IMPORTANCE_TRIALS` trials that ran to the end (ASHA-stopped ones do not count towards it) or when
  every objective is the same.
- Plots: the optimisation history and a slice plot, drawn in the report's own style (:mod:`reports.figures`):
  pruned trials hollow, the best trial a star, parameters and objective named in words; PNG, PDF and SVG.

Files per study (stem ``search-<levels>-fold<k>``): ``<stem>.md``, ``<stem>.tex`` (``\\input`` by report.tex),
``<stem>-history.*``, ``<stem>-slice.*``.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any, Callable, Sequence

import pandas as pd

from orchestration import contract as C
from orchestration.contract.fileio import atomic_write
from reports.drawing import level_labels
from orchestration.contract.layout import ReportLayout, metric_name, param_name
from reports.runs import RunSource
from reports.selection import select_trials, split_by_settings
from reports.search_model import (COMPLETE, FAILED, MIN_IMPORTANCE_TRIALS, PRUNED, RUNNING, STATES, SearchInfo,
                                  SearchOutput, StudyTrials)
from reports.tables_latex import latex_escape

# the search's model lives in reports.search_model; its names stay importable from here
__all__ = ["MIN_IMPORTANCE_TRIALS", "STATES", "SearchInfo", "StudyTrials", "SearchOutput", "with_refit_trials",
           "read_studies", "importances", "render_markdown", "render_latex", "write_searches"]

_MAX_RUNS = 10_000         # search runs read in one request: a search has tens
_SOURCES = {True: "the durable Optuna study", False: "the MLflow search runs (no Optuna study found)"}
_BEST = ("the best trial, as the sweep picks it (a tie goes to the trial started last; the refit trains the best "
         "one over all studies of the cell)")
_CAPTIONS = {"history": "optimisation history (each trial's objective and the best so far, by trial number)",
             "slice": "slice plot (each trial's objective against each parameter)"}
_MARKS = "filled: ran to the end; hollow grey: stopped early by ASHA; star: the best trial"


# ------------------------------------------------------------------------------------------------ refit runs
def with_refit_trials(layout: ReportLayout, source: RunSource, experiment_id: str,
                      grid: tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame],
                      expected: dict[str, set[str]] | None = None
                      ) -> tuple[tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame], list[str]]:
    """The grid's (used, duplicates, unfinished) plus, when a table has ``tuned_rows``, the refit runs (kind
    ``refit``) whose config hash the settings expect (``expected``: trial key → hashes; None keeps all) split the
    same way (:func:`reports.selection.select_trials`), and the FINISHED refit runs of other settings. Their cell ids end
    in ``tuned=true``, so they can only fill a tuned row, never a grid cell's statistics."""
    if not any(t.tuned_rows for t in layout.tables):
        return grid, []
    trials, ignored = split_by_settings(source.trials(experiment_id, [*layout.axes, C.TUNED_AXIS], kind=C.KIND_REFIT),
                                        expected)
    refit = select_trials(trials, layout.folds)
    return tuple(g if r.empty else r if g.empty else pd.concat([g, r], ignore_index=True)  # type: ignore[misc]
                 for g, r in zip(grid, refit)), ignored


# ------------------------------------------------------------------------------------------------ reading
def _search_runs(source: RunSource, experiment_id: str, expected: dict[str, set[str]] | None = None
                 ) -> dict[tuple[str, int, str], list[Any]]:
    """The MLflow search runs of the newest study of each (cell, fold), keyed by (cell, fold, search hash); with
    ``expected`` (trial key → search hashes the settings give), only those studies."""
    runs = source.client.search_runs([experiment_id], C.trials_filter(C.KIND_SEARCH), max_results=_MAX_RUNS)
    groups: dict[tuple[str, int, str], list[Any]] = {}
    for run in runs:
        tags = run.data.tags
        fold = tags.get(C.FOLD, "")
        if expected is not None and tags.get(C.SEARCH_HASH) not in expected.get(C.trial_key(tags.get(C.CELL), fold),
                                                                                 ()):
            continue
        if fold.isdigit():
            groups.setdefault((tags.get(C.CELL, ""), int(fold), tags.get(C.SEARCH_HASH, "")), []).append(run)
    newest: dict[tuple[str, int], tuple[int, str]] = {}
    for (cell, fold, h), members in groups.items():
        start = max(r.info.start_time or 0 for r in members)
        if (cell, fold) not in newest or start > newest[(cell, fold)][0]:
            newest[(cell, fold)] = (start, h)
    return {(cell, fold, h): sorted(groups[(cell, fold, h)], key=lambda r: (r.info.start_time or 0, r.info.run_id))
            for (cell, fold), (_, h) in sorted(newest.items())}


def _load_study(url: str, name: str, owner: Callable[[], str] | None = None) -> Any | None:
    """The Optuna study ``name`` in ``url``, or None when the storage or the study does not exist (an SQLite file
    is looked for first: opening a missing one would create it). With ``owner`` (the store's
    :func:`orchestration.contract.store_identity`, asked once the storage exists), the study that store's sweep uses
    for ``name`` (:func:`orchestration.contract.choose_study`): never another store's study of the same name."""
    import optuna
    import sqlalchemy.exc

    if url.startswith("sqlite:///") and not Path(url[len("sqlite:///"):].partition("?")[0]).is_file():
        return None
    journal = C.journal_file(url)
    if journal is not None and not Path(journal).is_file():
        return None
    try:
        storage = optuna.storages.RDBStorage(url) if journal is None else optuna.storages.JournalStorage(
            optuna.storages.journal.JournalFileBackend(journal))
        if owner is not None:  # the report runs after its search runs: a study from before the mark is its own
            name = C.choose_study(name, owner(), lambda n: C.study_owner(storage, n), ran_here=True)[0]
        return optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        return None
    except sqlalchemy.exc.SQLAlchemyError as e:
        reason = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
        raise ValueError(f"search.storage {url!r}: cannot be read as an Optuna storage ({reason})") from None


def _run_state(run: Any) -> str:
    if run.info.status == "FINISHED":
        return PRUNED if run.data.tags.get(C.EARLY_STOPPED) == "true" else COMPLETE
    return RUNNING if run.info.status in ("RUNNING", "SCHEDULED") else FAILED


def _optuna_state(trial: Any, run: Any | None) -> str:
    from optuna.trial import TrialState

    if trial.state == TrialState.COMPLETE:
        return PRUNED if run is not None and run.data.tags.get(C.EARLY_STOPPED) == "true" else COMPLETE
    if trial.state == TrialState.PRUNED:
        return PRUNED
    return FAILED if trial.state == TrialState.FAIL else RUNNING


def _sampled_key(sampled: dict[str, Any], space: dict[str, Any]) -> str:
    """Sampled values, typed (an Optuna trial's params, a run's ``mutexmatch.sampled`` tag): how a run is matched to
    its trial."""
    return C.sampled_json({p: sampled.get(p) for p in space})


def _param_key(params: dict[str, Any], space: dict[str, Any]) -> str:
    """The parameters as MLflow logs them (``str`` of the config value): how a run logged before the sampled tag is
    matched to its trial (a float ``k`` logged as ``0.6C`` matches none)."""
    return "params:" + "\x1f".join(str(params.get(p)) for p in space)


def _run_key(run: Any, space: dict[str, Any]) -> str:
    sampled = C.read_sampled(run.data.tags)
    return _param_key(run.data.params, space) if sampled is None else _sampled_key(sampled, space)


def _optuna_rows(study: Any, runs: list[Any], info: SearchInfo) -> list[dict[str, Any]]:
    """One row per trial of the durable study, with the MLflow run of the same sampled values (oldest first)."""
    from optuna.trial import TrialState

    by_params: dict[str, list[Any]] = {}
    for run in runs:
        by_params.setdefault(_run_key(run, info.space), []).append(run)
    rows = []
    for trial in study.get_trials(deepcopy=False):
        matched = by_params.get(_sampled_key(trial.params, info.space)) or by_params.get(
            _param_key(trial.params, info.space), [])
        run = matched.pop(0) if matched else None
        value = trial.value if trial.value is not None else math.nan
        started = run.info.start_time if run is not None else \
            int(trial.datetime_start.timestamp() * 1000) if trial.datetime_start else 0
        rows.append({"trial": trial.number, **{p: trial.params.get(p) for p in info.space}, "objective": value,
                     "state": _optuna_state(trial, run), "run_id": run.info.run_id if run is not None else "",
                     "finished": trial.state == TrialState.COMPLETE, "start": started or 0})
    return rows


def _config_params(logged: dict[str, str], dists: dict[str, Any]) -> dict[str, Any] | None:
    """A run's logged parameters (a run from before the ``mutexmatch.sampled`` tag) back as values of the search's
    distributions, read by each distribution's type; None when one does not fit."""
    import optuna.distributions as D

    out: dict[str, Any] = {}
    for path, dist in dists.items():
        text = logged.get(path)
        if text is None:
            return None
        if isinstance(dist, D.CategoricalDistribution):
            value = next((c for c in dist.choices if str(c) == text), None)
            if value is None and text != "None":
                return None
        else:
            value = (float if isinstance(dist, D.FloatDistribution) else int)(float(text))
            if not dist.low <= value <= dist.high:
                return None
        out[path] = value
    return out


def _mlflow_study(runs: list[Any], info: SearchInfo) -> tuple[Any, list[dict[str, Any]]]:
    """An in-memory study and the trial rows rebuilt from the MLflow search runs (trial numbers by start time)."""
    import optuna

    study = optuna.create_study(direction="maximize" if info.mode == "max" else "minimize")
    dists = info.distributions()
    rows = []
    for number, run in enumerate(runs):
        state, value = _run_state(run), run.data.metrics.get(info.metric, math.nan)
        sampled = C.read_sampled(run.data.tags)  # typed, as the searcher sampled them; else the logged params
        params = _config_params(run.data.params, dists) if sampled is None or set(info.space) - set(sampled) \
            else {p: sampled[p] for p in info.space}
        rows.append({"trial": number, **{p: params.get(p) if params else run.data.params.get(p)
                                         for p in info.space},
                     "objective": value, "state": state, "run_id": run.info.run_id,
                     "finished": run.info.status == "FINISHED", "start": run.info.start_time or 0})
        if params is not None and state in (COMPLETE, PRUNED) and math.isfinite(value):
            study.add_trial(optuna.trial.create_trial(params=params, distributions=dists, value=value))
    return study, rows


def _trials_frame(rows: list[dict[str, Any]], info: SearchInfo) -> pd.DataFrame:
    """The rows with ``best``: the one trial the sweep's rule picks (:func:`orchestration.contract.best_trial`, the
    rule the refit and the parent run's ``best.*`` follow: among trials that finished, ASHA-stopped ones included;
    a tie goes to the trial started last)."""
    frame = pd.DataFrame(rows, columns=["trial", *info.space, "objective", "state", "run_id"])
    frame["objective"] = frame["objective"].astype(float)
    found = C.best_trial([C.SearchOutcome(float(r["objective"]), r["finished"], 0, r["start"], r["run_id"], ref=i)
                          for i, r in enumerate(rows)], info.mode)
    frame["best"] = False
    if found is not None:
        frame.loc[found.ref, "best"] = True
    return frame.sort_values("trial", kind="stable").reset_index(drop=True)


def read_studies(info: SearchInfo, sweep: str, source: RunSource, experiment_id: str, tracking_uri: str,
                 project_dir: str | Path = ".", expected: dict[str, set[str]] | None = None) -> list[StudyTrials]:
    """Every study the MLflow search runs name (the newest per cell and fold), its trials from the durable Optuna
    study when it exists, else from those runs."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url = C.optuna_storage_url(info.storage, tracking_uri, project_dir)
    studies = []
    for (cell, fold, search_hash), runs in _search_runs(source, experiment_id, expected).items():
        name = C.study_name(sweep, C.trial_key(cell, fold), search_hash)
        durable = _load_study(url, name, lambda: C.store_identity(source.client.get_experiment(experiment_id)))
        if durable is not None:
            name = durable.study_name  # this store's own study when another store's holds the name
            study, rows, origin = durable, _optuna_rows(durable, runs, info), f"Optuna study `{name}` in `{url}`"
        else:
            study, rows = _mlflow_study(runs, info)
            origin = f"the MLflow search runs (no Optuna study `{name}` in `{url}`)"
        studies.append(StudyTrials(cell, fold, search_hash, name, origin, study, _trials_frame(rows, info),
                                   durable=durable is not None))
    return studies


# ------------------------------------------------------------------------------------------------ analysis
def importances(study: Any, pruned: int = 0) -> tuple[dict[str, float] | None, str]:
    """fANOVA parameter importances (normalised to sum 1) and how they were obtained; (None, why) when they
    cannot say anything: fewer than :data:`MIN_IMPORTANCE_TRIALS` trials that ran to the end (``pruned`` of the
    study's trials with an objective were stopped early by ASHA), or one objective for all."""
    import optuna
    from optuna.importance import FanovaImportanceEvaluator, get_param_importances

    # Optuna's COMPLETE trials: every trial with an objective, ASHA-stopped ones included (see the module docstring)
    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    ran = len(complete) - pruned
    if ran < MIN_IMPORTANCE_TRIALS:
        return None, (f"n/a: fANOVA needs at least {MIN_IMPORTANCE_TRIALS} trials that ran to the end, the study "
                      f"has {ran}" + (f" (and {pruned} stopped early by ASHA)" if pruned else ""))
    values = {t.value for t in complete}
    if len(values) == 1:
        return None, f"n/a: all {len(complete)} trials with an objective have the same one ({values.pop():.4g})"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        found = get_param_importances(study, evaluator=FanovaImportanceEvaluator(seed=0))
    return dict(found), (f"fANOVA (seed 0) over the {len(complete)} trials with an objective, ASHA-stopped ones at "
                         "the value they reached")


def draw_plots(st: StudyTrials, info: SearchInfo, out: Path) -> dict[str, list[Path]]:
    """The optimisation history and slice plots (``history``/``slice`` → files), in the report's style; empty
    without a trial that has an objective."""
    from reports.figures import is_fraction_metric, plot_search_history, plot_search_slice

    frame = st.trials[st.trials["state"].isin([COMPLETE, PRUNED])].dropna(subset=["objective"])
    if frame.empty:
        return {}
    frame = frame.assign(pruned=frame["state"] == PRUNED)
    percent = is_fraction_metric(info.metric)
    ylabel = metric_name(info.metric) + (" (%)" if percent else "")
    scale = 100.0 if percent else 1.0
    whole = {p for p, spec in info.space.items() if spec["type"] == "int"}
    params = {p: param_name(p) for p, spec in info.space.items() if spec["type"] != "categorical"}
    plots = {"history": plot_search_history(frame, ylabel, info.mode, out / f"{st.stem}-history", scale)}
    if params:
        plots["slice"] = plot_search_slice(frame, params, ylabel, out / f"{st.stem}-slice", whole, scale)
    return plots


# ------------------------------------------------------------------------------------------------ rendering
def _value(v: Any) -> str:
    if isinstance(v, float):
        return "—" if math.isnan(v) else f"{v:.4g}"
    return str(v)


def _in_percent(info: SearchInfo) -> bool:
    from reports.figures import is_fraction_metric  # the plots' rule; matplotlib is loaded only when a search is drawn

    return is_fraction_metric(info.metric)


def _objective(v: Any, info: SearchInfo) -> str:
    """An objective as the report's other figures show it: a fraction metric in % with two decimals (as the tables
    and the search plots), anything else as logged."""
    if _in_percent(info) and isinstance(v, float) and not math.isnan(v):
        return f"{100.0 * v:.2f}"
    return _value(v)


def _headers(info: SearchInfo) -> list[str]:
    """The trials table's parameter and objective headers in words (the plots' axis names), not config keys."""
    return [param_name(p) for p in info.space] + \
        [metric_name(info.metric) + (" (%)" if _in_percent(info) else "")]


def _keys(info: SearchInfo, code: Callable[[str], str]) -> str:
    """Which config key each parameter header stands for (what to ``--set``), for the note."""
    return ", ".join(f"{param_name(p)} = {code(p)}" for p in info.space) + f"; objective = {code(info.metric)}"


def _note(st: StudyTrials, info: SearchInfo, markdown: bool = True) -> str:
    """What the table shows; in LaTeX the source without its Markdown quoting and storage path (index.md has them)."""
    n = st.trials["state"].value_counts()
    counts = ", ".join(f"{n.get(s, 0)} {s}" for s in STATES if n.get(s, 0))
    code = (lambda k: f"`{k}`") if markdown else str
    return (f"Objective: {metric_name(info.metric)} ({info.mode}) on the search's validation split, the last value "
            f"each trial reported. Columns: {_keys(info, code)}. Trials: {counts or 'none'}. Pruned (ASHA): stopped "
            f"early by ASHA; its objective is the value it had reached. Read from "
            f"{st.origin if markdown else _SOURCES[st.durable]}.")


def render_markdown(st: StudyTrials, info: SearchInfo, imp: dict[str, float] | None, why: str,
                    plots: dict[str, list[Path]]) -> str:
    """The study's trials table (best in bold, ★), its importances and its plots, as Markdown."""
    params = list(info.space)
    lines = [f"**{st.title}**", "", "| Trial | " + " | ".join(_headers(info)) + " | State |",
             "| ---: | " + "---: | " * len(params) + "---: | :--- |"]
    for _, r in st.trials.iterrows():
        cells = [str(r["trial"]), *(_value(r[p]) for p in params), _objective(r["objective"], info)]
        cells = [f"**{c}**" if r["best"] else c for c in cells] + [r["state"] + (" ★ best" if r["best"] else "")]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", f"Note: {_note(st, info)} ★: {_BEST}.", "",
              f"Parameter importances ({why}):" if imp else f"Parameter importances: {why}."]
    if imp:
        lines += ["", "| Parameter | Importance |", "| :--- | ---: |"]
        lines += [f"| {param_name(p)} (`{p}`) | {v:.2f} |" for p, v in imp.items()]
    for kind, files in plots.items():
        lines += ["", f"![{st.stem} {kind}]({files[0].name})"]
    if not plots:
        lines += ["", "No plot: the study has no complete trial."]
    return "\n".join(lines) + "\n"


def render_latex(st: StudyTrials, info: SearchInfo, imp: dict[str, float] | None, why: str) -> str:
    """A ``table`` float (booktabs) with the trials and, below, the importances; best trial in bold."""
    params = list(info.space)
    lines = [r"\begin{table}[!htbp]", r"\centering", r"\footnotesize", rf"\caption{{{latex_escape(st.title)}}}",
             rf"\begin{{tabular}}{{@{{}}r{'r' * len(params)}rl@{{}}}}", r"\toprule",
             " & ".join(["Trial", *(latex_escape(h) for h in _headers(info)), "State"]) + r" \\", r"\midrule"]
    for _, r in st.trials.iterrows():
        cells = [str(r["trial"]), *(_value(r[p]) for p in params), _objective(r["objective"], info), r["state"]]
        cells = [latex_escape(c) for c in cells]
        lines.append(" & ".join(rf"\textbf{{{c}}}" if r["best"] else c for c in cells) + r" \\")
    note = latex_escape(f"{_note(st, info, markdown=False)} Bold: {_BEST}.")
    lines += [r"\bottomrule", r"\end{tabular}", r"\par\smallskip",
              rf"{{\footnotesize\raggedright Note: {note}\par}}", r"\par\smallskip"]
    if imp:
        lines += [rf"{{\footnotesize Parameter importances ({latex_escape(why)}):\par}}", r"\smallskip",
                  r"\begin{tabular}{@{}lr@{}}", r"\toprule", r"Parameter & Importance \\", r"\midrule",
                  *(rf"{latex_escape(f'{param_name(p)} ({p})')} & {v:.2f} \\" for p, v in imp.items()), r"\bottomrule",
                  r"\end{tabular}"]
    else:
        lines.append(rf"{{\footnotesize Parameter importances: {latex_escape(why)}.\par}}")
    lines.append(r"\end{table}")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------------ files
def _index_lines(st: StudyTrials, info: SearchInfo, formats: Sequence[str], plots: dict[str, list[Path]]
                 ) -> list[str]:
    links = ([f"[Markdown]({st.stem}.md)"] if "md" in formats else []) + \
            ([f"[LaTeX]({st.stem}.tex)"] if "tex" in formats else [])
    links += [f"{kind} " + " ".join(f"[{p.suffix[1:].upper()}]({p.name})" for p in files)
              for kind, files in plots.items()]
    best = st.trials[st.trials["best"]]
    said = "no complete trial yet" if best.empty else "; ".join(
        f"trial {r['trial']}: " + ", ".join(f"{p}={_value(r[p])}" for p in info.space) +
        f" → {info.metric} {_objective(r['objective'], info)}"
        + (" %" if _in_percent(info) else "") for _, r in best.iterrows())
    return [f"### {st.title}", "", f"{len(st.trials)} trials from {st.origin}. Best: {said}.", "",
            " · ".join(links) or "(no file: --format has neither md nor tex)", ""]


def _write(path: Path, text: str, output: SearchOutput) -> None:
    atomic_write(path, text.encode("utf-8"), mode=0o644)
    output.files.append(path)


def write_searches(layout: ReportLayout, source: RunSource, experiment_id: str, tracking_uri: str, out: Path,
                   formats: Sequence[str], expected: dict[str, set[str]] | None = None) -> SearchOutput:
    """Read every study of the YAML's search (only the studies ``expected`` names, when given: trial key → search
    hashes of these settings) and write its files (see the module docstring); nothing without a ``search``. Plots
    need ``png`` or ``pdf`` in ``formats``, like the report's other figures."""
    output = SearchOutput()
    if layout.search is None:
        return output
    info = SearchInfo.parse(layout.search)
    output.studies = read_studies(info, layout.name, source, experiment_id, tracking_uri, expected=expected)
    lines = ["## Searches", ""]
    if not output.studies:
        lines.append("The YAML has a search, but no search run of it is in this experiment yet.")
    labels = level_labels(layout)
    for st in output.studies:
        st.label = ", ".join(labels.get(axis, {}).get(level, level)
                             for axis, _, level in (pair.partition("=") for pair in st.cell.split(",")))
        imp, why = importances(st.study, pruned=int((st.trials["state"] == PRUNED).sum()))
        plots = draw_plots(st, info, out) if "png" in formats or "pdf" in formats else {}
        for kind, files in plots.items():
            output.files += files
            output.figures.append((files[0].stem, f"{st.title}: {_CAPTIONS[kind]} of the "
                                                  f"{metric_name(info.metric)}; {_MARKS}."))
        if "md" in formats:
            _write(out / f"{st.stem}.md", render_markdown(st, info, imp, why, plots), output)
        if "tex" in formats:
            _write(out / f"{st.stem}.tex", render_latex(st, info, imp, why), output)
            output.tex_inputs.append(st.stem)
        lines += _index_lines(st, info, formats, plots)
    output.markdown = "\n".join(lines).rstrip("\n") + "\n"
    return output
