"""Rebuild the paper's tables and figures from MLflow: ``python -m reports.build experiments/X.yaml``.

Modules: :mod:`reports.specfile` (reading the YAML: duplicate keys and syntax errors in one line),
:mod:`reports.layout` (the YAML's ``tables``/``figures`` schema, ``validate_layout``), :mod:`reports.runs` (MLflow →
pandas, the best/final/median20 protocols), :mod:`reports.stats` (cell statistics, paired t-test),
:mod:`reports.tables` (Markdown and LaTeX), :mod:`reports.figures` (PNG, PDF, SVG), :mod:`reports.drawing` (runs →
figures and captions), :mod:`reports.latex` (report.tex → report.pdf), :mod:`reports.build` (the CLI).
Needs no Ray: of ``orchestration`` it imports only :mod:`orchestration.contract`, the MLflow layout's names
(standard library only).
"""
