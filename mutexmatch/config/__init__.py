"""One typed schema for a training run, loaded from YAML and validated once.

A run is described by :class:`RunConfig` (sections ``data``, ``model``, ``algorithm``, ``optim``, ``train`` and
``output_dir``). Every field is documented below and in ``docs/config.md`` (generated from this module by
``python -m mutexmatch.config --doc``). Unknown keys are rejected and every value is range-checked; a bad value
raises :class:`ConfigError` with one line per problem naming the field, the value and what is allowed, e.g.
``algorithm.tau=1.5: must be in (0, 1]`` — before any data is touched.

Command-line overrides use dotted paths: ``--set algorithm.tau=0.9 --set train.iterations=2000``; the value is
parsed as YAML (``mutexmatch.yamlfile.read_set_value``) so ``true``, ``0.5`` and ``[1, 2]`` get their natural types.

The package holds one job per module: :mod:`~mutexmatch.config.schema` (the sections, fields, roles and validation),
:mod:`~mutexmatch.config.files` (YAML files and ``--set``), :mod:`~mutexmatch.config.identity` (the config hashes
and the lists the field roles derive) and :mod:`~mutexmatch.config.doc` (the generated reference). Import from
``mutexmatch.config``: the names below are its public surface.
"""

from mutexmatch.config.doc import config_markdown
from mutexmatch.config.files import apply_overrides, load_config, read_config_file
from mutexmatch.config.identity import (config_difference, config_hash, config_hashes, fields_with_role,
                                        legacy_config_hash, owned_fields, unsearchable_fields)
from mutexmatch.config.schema import (IMAGE_SIZE_MAX, IMAGE_SIZE_MIN, LEGACY_ALGORITHM_SECTION, NO_RESULT, OWNED,
                                      RESUMABLE, SEED_MAX, SWEEP_COMMAND, SWEEP_ONLY_KEY, TRAIN_COMMAND,
                                      AlgorithmConfig, ConfigError, DataConfig, ImbalanceConfig, ModelConfig,
                                      OptimConfig, RunConfig, TrainConfig, has_validation, parse_config, roles,
                                      search_value)
from mutexmatch.params import resolve_k

__all__ = ["ConfigError", "DataConfig", "ImbalanceConfig", "ModelConfig", "AlgorithmConfig", "OptimConfig",
           "TrainConfig", "RunConfig",
           "load_config", "read_config_file", "SEED_MAX", "TRAIN_COMMAND", "SWEEP_COMMAND", "SWEEP_ONLY_KEY",
           "IMAGE_SIZE_MIN", "IMAGE_SIZE_MAX", "parse_config", "search_value", "apply_overrides", "resolve_k",
           "has_validation", "config_hash", "config_hashes", "legacy_config_hash", "LEGACY_ALGORITHM_SECTION",
           "NO_RESULT", "RESUMABLE", "OWNED", "roles", "fields_with_role", "owned_fields", "unsearchable_fields",
           "config_markdown", "config_difference"]
