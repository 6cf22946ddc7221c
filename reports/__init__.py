"""Rebuild the paper's tables and figures from MLflow: ``python -m reports.build experiments/X.yaml``.

Modules: :mod:`reports.specfile` (reading the YAML: duplicate keys and syntax errors in one line),
:mod:`reports.runs` (MLflow → pandas, the best/final/median20 protocols), :mod:`reports.selection` (which runs
the settings count: newest FINISHED per cell and fold), :mod:`reports.lost_sources` (reused
trials whose source run is gone), :mod:`reports.class_counts` (a trial's
class counts), :mod:`reports.stats` (cell statistics, paired t-test), :mod:`reports.tables` (Markdown),
:mod:`reports.tables_latex` (LaTeX), :mod:`reports.figures` (PNG, PDF, SVG), :mod:`reports.drawing` (runs →
figures and captions), :mod:`reports.search` (search trials and studies: read, analysed, drawn, written),
:mod:`reports.search_model` (a search's YAML section, studies, trial states), :mod:`reports.latex` (report.tex →
report.pdf), :mod:`reports.build` (the CLI).

Imports: of the project, only :mod:`orchestration.contract` (the MLflow layout's names, the ``tables``/``figures``
schema in :mod:`orchestration.contract.layout` that the sweep also checks at launch, the YAML reader and atomic
write); besides, mlflow, optuna, pandas, matplotlib, PyYAML and the standard library. No Ray, no torch, no trainer.
"""
