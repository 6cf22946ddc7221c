"""The MLflow layout contract: every name the sweep writes and the reports, benchmarks and tests read.

One package so that writer and readers cannot drift apart (issue 17); one module per topic, every name re-exported
here (``from orchestration import contract as C``; ``C.ROLE``):

- :mod:`~orchestration.contract.tags`: tag names, role and kind values, a trial's tags, MLflow's Source columns
- :mod:`~orchestration.contract.names`: cell ids, trial keys, run names, the ``best.`` prefix, Optuna study names
- :mod:`~orchestration.contract.studies`: whose an Optuna study is, and which study a store uses
- :mod:`~orchestration.contract.filters`: the MLflow search filters that find a layout's runs
- :mod:`~orchestration.contract.artifacts`: artifact paths
- :mod:`~orchestration.contract.metrics`: the metric names the layout relies on, accuracies in %
- :mod:`~orchestration.contract.search_trials`: the sampled-values tag and THE best-trial rule
- :mod:`~orchestration.contract.settings`: ``--set`` on a sweep YAML, its settings digest, the expected-runs record
- :mod:`~orchestration.contract.counted`: THE rule for which runs a YAML's settings count, their UI tag and filter
- :mod:`~orchestration.contract.reuse`: whether a reused trial's source still holds its results, code versions of reuse
- :mod:`~orchestration.contract.ui_links`: the MLflow UI's view of those runs: its key, address and ``mlflow ui`` command
- :mod:`~orchestration.contract.colors`: one colour per level, in the MLflow UI and the report figures alike
- :mod:`~orchestration.contract.tracking_uri`: the one rule that turns ``--tracking-uri`` into a store
- :mod:`~orchestration.contract.store_access`: how every command opens that store (checks, HTTP bounds, errors)

and, not re-exported here because they need pydantic: :mod:`~orchestration.contract.layout` (the report-layout
schema: the ``tables:``/``figures:`` sections the sweep validates at launch and the report builds from; its models
in ``layout_models``, its table checks in ``layout_checks``) with :mod:`~orchestration.contract.published` (quoted
paper values); :mod:`~orchestration.contract.cli` gives the report the one wrapper of every command line's ``main``;
:mod:`~orchestration.contract.fileio` gives the report the project's one YAML reader and atomic
write. The layout itself is described in ``orchestration/README.md`` (MLflow layout).

Who imports it: every module of ``orchestration`` that writes or reads the layout, ``reports`` (its only import
from ``orchestration``: a report never pulls in Ray or the trainer), benchmarks and tests. ``mutexmatch`` never
does (the trainer knows nothing of MLflow).

What it imports: the standard library, pydantic (the layout schema) and, so that a fact the trainer owns stays in
one place, the trainer's leaf modules that themselves import only the standard library (:data:`TRAINER_MODULES`):
:mod:`mutexmatch.metrics` (the metric names a run logs), here at import; and, in the modules named,
:mod:`mutexmatch.yamlfile` (how a YAML and a ``--set`` value are read: ``settings``, ``fileio``; PyYAML),
:mod:`mutexmatch.dotted` and :mod:`mutexmatch.checks` (dotted keys and the one-line error style: ``layout``,
``layout_checks``, ``settings``), :mod:`mutexmatch.atomic` (``fileio``), :mod:`mutexmatch.cli` (how a command line ends on an
unforeseen error: ``cli``). The trainer may import nothing above it, so their one
copy lives there; the contract is the one door through which ``reports`` reaches them. ``import
orchestration.contract`` loads the standard library and :mod:`mutexmatch.metrics` only (``orchestration/__init__.py``
imports nothing); no module of it imports mlflow, ray or torch.
"""

from orchestration.contract.artifacts import *  # noqa: F401,F403
from orchestration.contract.colors import *  # noqa: F401,F403
from orchestration.contract.counted import *  # noqa: F401,F403
from orchestration.contract.filters import *  # noqa: F401,F403
from orchestration.contract.metrics import *  # noqa: F401,F403
from orchestration.contract.names import *  # noqa: F401,F403
from orchestration.contract.reuse import *  # noqa: F401,F403
from orchestration.contract.search_trials import *  # noqa: F401,F403
from orchestration.contract.settings import *  # noqa: F401,F403
from orchestration.contract.studies import *  # noqa: F401,F403
from orchestration.contract.store_access import *  # noqa: F401,F403
from orchestration.contract.tags import *  # noqa: F401,F403
from orchestration.contract.tracking_uri import *  # noqa: F401,F403
from orchestration.contract.ui_links import *  # noqa: F401,F403

# The trainer's modules the contract may import (each imports only the standard library, yamlfile PyYAML too);
# tests check that a report loads no other module of mutexmatch.
TRAINER_MODULES = ("mutexmatch.metrics", "mutexmatch.yamlfile", "mutexmatch.dotted", "mutexmatch.checks",
                   "mutexmatch.atomic", "mutexmatch.cli")
