"""The spec: a sweep YAML and the plan made from it, before Ray or MLflow is touched (nothing here imports either).

- ``models.py``: the YAML's schema as pydantic models (names, resources, search parameters, scheduler, refit, the
  sweep itself) and :class:`SpecError`.
- ``sweepfile.py``: reading a sweep YAML, its cells, each trial's config, the validation of every trial the sweep
  could start, the spec hash.
- ``overrides.py``: ``--set`` on a sweep YAML, and the load and plan every command makes of it.
- ``plan.py``: the trials a sweep runs (grid and smoke trials, search studies, refit slots) and their identities.
- ``tryouts.py``: which trials of a ``--set`` launch are try-outs (configs the YAML alone does not plan).

The package keeps the names of the module it replaced (``orchestration/spec.py`` before issue 29 made it a folder):
code, and pickles of older launches, that name ``orchestration.spec.load_spec`` or ``orchestration.spec.SweepSpec``
keep working. New code imports from the module that defines a name.
"""

from orchestration.contract import VALIDATION_METRICS
from orchestration.spec.models import (NAME_RULE, SMOKE_DEFAULT, CategoricalParam, FloatParam, IntParam, RefitSpec,
                                       Resources, SchedulerSpec, SearchSpec, SpecError, SweepSpec, check_rdb_url,
                                       is_name)
from orchestration.spec.sweepfile import (Cell, deep_merge, expand_cells, load_spec, parse_spec, read_spec_file,
                                          sampled_config_values, search_cells, set_dotted, spec_hash, trial_config,
                                          validate_spec, with_sampled)

__all__ = ["SpecError", "Resources", "FloatParam", "IntParam", "CategoricalParam", "SchedulerSpec", "RefitSpec",
           "SearchSpec", "SweepSpec", "NAME_RULE", "SMOKE_DEFAULT", "VALIDATION_METRICS", "check_rdb_url", "is_name",
           "Cell", "load_spec", "read_spec_file", "parse_spec", "deep_merge", "set_dotted", "expand_cells",
           "search_cells", "trial_config", "sampled_config_values", "with_sampled", "spec_hash", "validate_spec"]
