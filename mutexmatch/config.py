"""One typed schema for a training run, loaded from YAML and validated once.

A run is described by :class:`RunConfig` (sections ``data``, ``model``, ``algorithm``, ``optim``, ``train`` and
``output_dir``). Every field is documented below and in ``docs/config.md`` (generated from this module by
``python -m mutexmatch.config --doc``). Unknown keys are rejected and every value is range-checked; a bad value
raises :class:`ConfigError` with one line per problem naming the field, the value and what is allowed, e.g.
``algorithm.tau=1.5: must be in (0, 1]`` — before any data is touched.

Command-line overrides use dotted paths: ``--set algorithm.tau=0.9 --set train.iterations=2000``; the value is
parsed as YAML (``mutexmatch.yamlfile.read_set_value``) so ``true``, ``0.5`` and ``[1, 2]`` get their natural types.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal, Mapping, Sequence

import yaml
from pydantic import (AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator,
                      model_validator)

from mutexmatch.params import resolve_k
from mutexmatch.checks import at_least, validation_error_lines, within
from mutexmatch.yamlfile import YamlFileError, read_set_value, read_yaml_mapping

__all__ = [
    "ConfigError",
    "DataConfig",
    "ModelConfig",
    "AlgorithmConfig",
    "OptimConfig",
    "TrainConfig",
    "RunConfig",
    "load_config",
    "read_config_file",
    "SEED_MAX",
    "TRAIN_COMMAND",
    "SWEEP_COMMAND",
    "parse_config",
    "search_value",
    "apply_overrides",
    "resolve_k",
    "config_hash",
    "config_hashes",
    "legacy_config_hash",
    "LEGACY_ALGORITHM_SECTION",
    "NO_RESULT",
    "RESUMABLE",
    "OWNED",
    "roles",
    "fields_with_role",
    "owned_fields",
    "unsearchable_fields",
]

# The largest train.seed: the run seeds numpy's legacy RNG with it (the `official` split rule does too), which takes
# 32-bit seeds only. A sweep's fold k trains with train.seed + k, so orchestration checks that sum against it.
SEED_MAX = 2**32 - 1
# The two commands that read YAML files, named when one is given the other's file (mutexmatch cannot import
# orchestration, so the sweep's command is declared here with the trainer's).
TRAIN_COMMAND = "python -m mutexmatch.train"
SWEEP_COMMAND = "python -m orchestration.sweep"
# Every sweep YAML has this key and no run config has it: how a sweep YAML given to the trainer is recognised.
SWEEP_ONLY_KEY = "axes"


class ConfigError(ValueError):
    """A configuration problem; the message has one ``field=value: what is allowed`` line per problem."""


# ------------------------------------------------------------------------------------------------ field roles
# What each field means outside the trainer is declared once, on the field (``json_schema_extra=roles(...)``); the
# config hash, ``--resume`` and the sweep spec derive their lists from it, so those lists cannot disagree (issue 17).
NO_RESULT = "no_result"   # does not change results: left out of config_hash, so never searchable either
RESUMABLE = "resumable"   # may change when a run is resumed (``--resume DIR --set ...``)
OWNED = "owned"           # set per trial by orchestration: refused in a sweep YAML, never searchable


def roles(*names: str, owned: str | None = None) -> dict[str, Any]:
    """``json_schema_extra`` declaring a field's roles; ``owned`` (how orchestration sets it) adds ``OWNED``."""
    unknown = set(names) - {NO_RESULT, RESUMABLE}
    if unknown:
        raise ValueError(f"unknown field roles {sorted(unknown)}")
    extra: dict[str, Any] = {"roles": [*names, OWNED] if owned else list(names)}
    if owned:
        extra["owned_by"] = owned
    return extra


# Bounds declared on the field; the messages ("must be >= 1", "must be in [0, 1)") are checks.at_least's and
# checks.within's, the field and value are added by the error formatter.
_AtLeast0 = Annotated[int, AfterValidator(at_least(0))]
IMAGE_SIZE_MIN, IMAGE_SIZE_MAX = 8, 512  # pixels a side: data.image_size and `datasets check --image-size`
MAX_THREADS = 1024  # torch takes a C int; a larger count is a typo, not a machine
_AtLeast1 = Annotated[int, AfterValidator(at_least(1))]
_UnitOpen = Annotated[float, AfterValidator(within(0.0, 1.0, high_open=True))]   # [0, 1)


def _seed_bound(v: int) -> int:
    if v > SEED_MAX:  # within() would print the bound as 4.29497e+09
        raise ValueError(f"must be <= {SEED_MAX} (2^32 - 1, numpy's largest seed)")
    return v


_Seed = Annotated[int, AfterValidator(at_least(0)), AfterValidator(_seed_bound)]


class _Section(BaseModel):
    # strict=True keeps YAML's "0.5" string from silently becoming a float, and forbids unknown keys.
    model_config = ConfigDict(extra="forbid", strict=True, validate_assignment=True, frozen=False)


class DataConfig(_Section):
    """Which images, which labels, which fold."""

    dataset: str = Field(
        "digits", description="Dataset name. `digits` ships inside scikit-learn (no download); `imagefolder` is "
        "your own folder of class folders (docs/datasets.md).")
    root: str = Field(
        "data", description="Folder holding the datasets (each in its torchvision layout); for `imagefolder` the "
        "dataset folder itself (train/<class>/, test/<class>/, optional val/<class>/ and unlabeled/). Relative "
        "paths are resolved against the current directory when the config is loaded.",
        json_schema_extra=roles(NO_RESULT))
    download: bool = Field(False, description="Fetch the dataset with torchvision's downloader if it is missing.",
                           json_schema_extra=roles(NO_RESULT))
    num_labels: int = Field(20, description="Total labeled images; must be divisible by the number of classes.")
    fold: _AtLeast0 = Field(0, description="Labeled fold: 0-4 (the paper's five folds; seeds 1-5 under `official`).",
                            json_schema_extra=roles(owned="set per trial by orchestration from `folds`"))
    split_rule: Literal["official", "balanced"] = Field(
        "official", description="`official`: the released code's np.random.seed + per-class choice draw; "
        "`balanced`: our own numpy Generator per fold.")
    val_per_class: _AtLeast0 = Field(
        0, description="Images per class held out of the training set for validation (hyper-parameter search "
        "uses these, never the test set). 0 = no validation split.")
    unlabeled_includes_labeled: bool = Field(
        True, description="The unlabeled pool is the whole training set, labeled images included (the paper's "
        "protocol). False removes the labeled images from it.")
    svhn_extra: bool = Field(False, description="SVHN only: append the 531k `extra` images to the training set.")
    image_size: int | None = Field(
        None, description="Side length images are resized to at load time; null = the dataset's default "
        "(digits 16, CIFAR/SVHN 32, STL-10 96, mini-ImageNet 80, Tiny-ImageNet 64; imagefolder: the side of its "
        "first train image, which must then be square); only digits, mini-ImageNet and imagefolder can be "
        "resized.")
    normalization: Literal["correct", "released"] = Field(
        "correct", description="Normalisation statistics: `correct` = the dataset's real per-channel statistics "
        "(imagefolder: computed on its train images); `released` = the released code's constants, which for SVHN, "
        "STL-10 and Tiny-ImageNet are divided by 255 twice (how their published numbers were produced).")

    @field_validator("dataset", mode="before")
    @classmethod
    def _registered_dataset(cls, v: Any) -> str:
        # The registry is imported here, not at module level: it loads torch and every dataset module.
        from mutexmatch.data.builtin import DATASET_NAMES

        if not isinstance(v, str) or v not in DATASET_NAMES:
            *head, last = [repr(n) for n in DATASET_NAMES]
            raise ValueError(f"Input should be {', '.join(head)} or {last}")
        return v

    @field_validator("root")
    @classmethod
    def _absolute_root(cls, v: str) -> str:
        # Ray trials run in a temp working directory: a relative path must not change meaning there.
        return str(Path(v).expanduser().resolve())

    @field_validator("num_labels")
    @classmethod
    def _positive_labels(cls, v: int) -> int:
        if v < 1:
            raise ValueError("must be a positive integer")
        return v

    @field_validator("image_size")
    @classmethod
    def _image_size(cls, v: int | None) -> int | None:
        if v is not None and not IMAGE_SIZE_MIN <= v <= IMAGE_SIZE_MAX:
            raise ValueError(f"must be null or in [{IMAGE_SIZE_MIN}, {IMAGE_SIZE_MAX}]")
        return v


class ModelConfig(_Section):
    """The backbone θ with its linear TPC; MutexMatch adds a linear TNC on the same features."""

    backbone: str = Field(
        "small_cnn", description="Registered backbone: see the table below (`mutexmatch.models.BACKBONES`).")
    channels_last: bool = Field(True, description="Use channels-last memory format (faster convolutions).")


class AlgorithmConfig(_Section):
    """The semi-supervised algorithm and its own hyper-parameters: ``{name: <algorithm>, <its parameters>}``.

    Each registered algorithm owns its parameters (its parameter model, ``Params``; the table below): the section
    holds the chosen algorithm's and no other (another algorithm's parameter is refused, naming the chosen one's),
    resolved to their defaults once the config is validated. MLflow params and the config hash cover only them.
    """

    # The chosen algorithm's parameters are the section's extra keys; its model validates them (strictly) and
    # replaces them with the resolved values in _check_algorithm.
    model_config = ConfigDict(extra="allow")

    name: str = Field("mutexmatch", description="Registered algorithm: see the table below (`mutexmatch.algorithms."
                      "ALGORITHMS`); the other keys of this section are its parameters.")

    @model_validator(mode="after")
    def _own_parameters(self) -> "AlgorithmConfig":
        errors = _resolve_algorithm(self)
        if errors:
            raise ValueError("\n".join(errors))
        return self


class OptimConfig(_Section):
    """SGD with Nesterov momentum and the FixMatch cosine schedule."""

    lr: Annotated[float, AfterValidator(within(0.0, 10.0, low_open=True))] = Field(
        0.03, description="Base learning rate.")
    momentum: _UnitOpen = Field(0.9, description="SGD momentum.")
    nesterov: bool = Field(True, description="Nesterov momentum.")
    weight_decay: _UnitOpen = Field(5e-4, description="Weight decay (coupled, as SGD's); BatchNorm parameters get "
                                    "none.")
    schedule: Literal["cosine", "constant"] = Field(
        "cosine", description="`cosine`: LR factor cos(c·π·t/T) per step (T = train.iterations); `constant`: none.")
    cosine_factor: Annotated[float, AfterValidator(within(0.0, 0.5))] = Field(
        7 / 16, description="[c] in cos(c·π·t/T); FixMatch and MutexMatch use 7/16.")


class TrainConfig(_Section):
    """The loop: batch sizes, length, evaluation, EMA, checkpoints, device and precision."""

    iterations: _AtLeast1 = Field(2**20, description="[T] training steps (the paper: 2^20 = 1024 epochs × 1024).")
    batch_size: _AtLeast1 = Field(64, description="[B] labeled images per step.")
    mu: _AtLeast1 = Field(7, description="[μ] unlabeled-to-labeled ratio: μB weak and μB strong images per step.")
    eval_interval: _AtLeast1 = Field(1024, description="Steps between evaluations of the EMA (and raw) model.")
    eval_batch_size: _AtLeast1 = Field(1024, description="Batch size for evaluation.")
    ema: _UnitOpen = Field(0.999, description="EMA decay of the parameters (BN buffers are copied). 0 disables EMA.")
    median_window: _AtLeast1 = Field(20, description="Evaluations in the `median` accuracy (FixMatch: last 20).")
    checkpoint_every: _AtLeast1 = Field(1, description="Write a checkpoint every N evaluations (and always at the "
                                        "end).")
    keep_checkpoints: _AtLeast1 = Field(2, description="Checkpoints kept on disk (older ones are deleted).")
    seed: _Seed = Field(0, description="Seed of every RNG of the run (model init, sampling, augmentation).")
    device: str = Field("auto", description="`auto` (CUDA if available), `cpu`, `cuda` or `cuda:N`.",
                        json_schema_extra=roles(NO_RESULT, RESUMABLE, owned="set per trial by orchestration from "
                                                "`resources.gpu` (cuda if gpu > 0, else cpu)"))
    precision: Literal["fp32", "bf16", "fp16"] = Field(
        "fp32", description="Autocast precision of the backbone's forward pass; the heads, softmax thresholds "
        "and losses run in fp32 on its features cast to fp32, and BatchNorm keeps fp32 statistics. Whether bf16 "
        "keeps the accuracy of fp32 is not measured yet (issue 13).")
    compile: bool = Field(False, description="Wrap the model in torch.compile (its forward and, through "
                          "AOTAutograd, its backward; any precision). Graph breaks and recompiles: "
                          "mutexmatch.compiled.compile_report.")
    cuda_graphs: bool = Field(False, description="CUDA only: compile the model with CUDA graphs "
                              "(torch.compile mode reduce-overhead: the backbone's forward and backward replayed "
                              "from a captured graph, inputs copied into static buffers; heads, losses, SGD and EMA "
                              "stay eager). Refused on the CPU. With train.deterministic a graphed step equals the "
                              "compiled step bitwise (tests/mutexmatch/test_compiled.py, a device check).",
                              json_schema_extra=roles(NO_RESULT, RESUMABLE))
    num_threads: Annotated[int, AfterValidator(within(0, MAX_THREADS))] = Field(
        0, description=f"torch CPU threads; 0 keeps torch's default (at most {MAX_THREADS}).",
                                   json_schema_extra=roles(NO_RESULT, RESUMABLE))
    keep_freed_memory: bool = Field(True, description="CPU runs on glibc: keep freed host memory in the process "
                                    "instead of returning each ~100 MB activation block to the kernel and "
                                    "page-faulting it back the next step (mutexmatch/allocator.py; ~20% of a "
                                    "WRN-28-2 CPU step). Process-wide; no effect on CUDA runs or on results.",
                                    json_schema_extra=roles(NO_RESULT))
    deterministic: bool = Field(False, description="Bit-reproducible CUDA runs: torch.use_deterministic_algorithms "
                                "(warn-only, for ops without a deterministic CUDA kernel) and CUBLAS_WORKSPACE_CONFIG="
                                ":4096:8; with it a CUDA run stopped and resumed ends bit-identical to an "
                                "uninterrupted one (benchmarks/device_check.sh digits). Slower on CUDA: "
                                "benchmarks/train_step.py --pipelines ours,ours_deterministic measures by how much. "
                                "CPU runs are deterministic without it. Process-wide; not part of the config hash.",
                                json_schema_extra=roles(NO_RESULT))
    progress: bool = Field(True, description="Show a tqdm progress bar.", json_schema_extra=roles(NO_RESULT, RESUMABLE))

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:
        if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", v):
            raise ValueError("must be `auto`, `cpu`, `cuda` or `cuda:N`")
        return v


class RunConfig(_Section):
    """A whole training run."""

    data: DataConfig = Field(default_factory=DataConfig, description="Dataset, labels and fold.")
    model: ModelConfig = Field(default_factory=ModelConfig, description="Backbone.")
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig, description="Algorithm and losses.")
    optim: OptimConfig = Field(default_factory=OptimConfig, description="Optimiser and LR schedule.")
    train: TrainConfig = Field(default_factory=TrainConfig, description="Training loop.")
    output_dir: str = Field("outputs/run", description="Run folder: config, split, checkpoints, metrics.jsonl. "
                            "Relative paths are resolved against the current directory when the config is loaded.",
                            json_schema_extra=roles(NO_RESULT, owned="set per trial by orchestration (under the "
                                                    "Ray storage)"))

    @field_validator("output_dir")
    @classmethod
    def _absolute_output(cls, v: str) -> str:
        if not v.strip():  # Path("") is the current folder: a run would fill it
            raise ValueError("must name the run's folder, e.g. outputs/run (an empty value is the current folder)")
        return str(Path(v).expanduser().resolve())

    @model_validator(mode="after")
    def _cross_field(self) -> "RunConfig":
        # The data section's checks read the dataset registry: they live with it (lazy: torch start-up cost).
        from mutexmatch.data.section import data_section_facts

        try:
            num_classes, image_size, errors = data_section_facts(self.data)
        except ValueError as e:  # an image folder's layout
            raise ConfigError(str(e)) from None
        errors += _check_algorithm(self.algorithm, num_classes)
        errors += _check_backbone(self.model.backbone, image_size)
        if errors:
            raise ConfigError("\n".join(errors))
        return self

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


# The `algorithm` section of every config written before issue 22 (one flat section, the union of the built-in
# algorithms' parameters, each at its default unless the chosen algorithm set it). Frozen here: a resolved config of
# that time still loads (see _check_algorithm) and legacy_config_hash rebuilds the hash it was stored under.
LEGACY_ALGORITHM_SECTION: dict[str, Any] = {
    "form": "paper", "tau": 0.95, "k": "C", "lambda_sep": 1.0, "lambda_p": 1.0, "lambda_n": 1.0, "dist_align": False,
    "sep_stop_grad": True, "tnc_consistency": "low", "tnc_target": "soft", "comp_rank": 1, "lambda_ab1": 1.0,
    "nce_variant": 1, "tau_p": None, "tau_n": 0.05}


def _resolve_algorithm(alg: AlgorithmConfig) -> list[str]:
    """The chosen algorithm's own checks: a parameter it does not own is refused (naming its own and the algorithms
    that own it), its own are validated by its model. The section's keys become the chosen algorithm's parameters,
    resolved (defaults filled in). A resolved config written before issue 22 lists every legacy parameter: those
    the algorithm does not own are dropped where at their default, as is a parameter the algorithm fixes, given at
    its fixed value. C-dependent bounds: :func:`_check_algorithm`."""
    from mutexmatch.algorithms import ALGORITHMS

    if alg.name not in ALGORITHMS:
        return [f"algorithm.name={alg.name!r}: unknown; registered: {', '.join(sorted(ALGORITHMS))}"]
    model, given = ALGORITHMS[alg.name].Params, dict(alg.__pydantic_extra__)
    own = list(model.model_fields)
    if LEGACY_ALGORITHM_SECTION.keys() <= given.keys():
        given = {f: v for f, v in given.items() if f in own or f not in LEGACY_ALGORITHM_SECTION
                 or v != LEGACY_ALGORITHM_SECTION[f]}
    # A parameter an ablation fixes (Params.without) may be given at its fixed value: an axis that sets `form: paper`
    # for every scheme holds for one that runs only in the paper form.
    given = {f: v for f, v in given.items() if f not in model.pinned or v != model.pinned[f]}
    errors = []
    for f in [f for f in given if f not in own]:
        owners = sorted(n for n, cls in ALGORITHMS.items() if f in cls.Params.model_fields)
        problem = (f"={given[f]!r}: not used by algorithm {alg.name!r} (a parameter of {', '.join(owners)})"
                   if owners else ": unknown key (no algorithm has it)")
        errors.append(f"algorithm.{f}{problem}; {alg.name!r} takes: {', '.join(own) or 'no parameters'}")
    if errors:
        return errors
    try:
        params = model.parse(given, alg.name, None)
    except ValueError as e:
        return str(e).splitlines()
    alg.__pydantic_extra__.clear()
    alg.__pydantic_extra__.update({f: getattr(params, f) for f in own})
    return []


def _check_algorithm(alg: AlgorithmConfig, num_classes: int) -> list[str]:
    """The chosen algorithm's parameters that must fit ``num_classes`` (e.g. ``k``, ``comp_rank``)."""
    from mutexmatch.algorithms import ALGORITHMS

    try:
        ALGORITHMS[alg.name].Params.parse(dict(alg.__pydantic_extra__), alg.name, num_classes)
    except ValueError as e:
        return str(e).splitlines()
    return []


def _backbone_table() -> list[str]:
    from mutexmatch.models import backbones_markdown

    return backbones_markdown()


def _algorithm_table() -> list[str]:
    from mutexmatch.algorithms import algorithms_markdown

    return algorithms_markdown()


def has_validation(d: DataConfig) -> bool:
    """Whether a run of ``d`` evaluates on validation images (val_per_class, or an image folder's val/)."""
    return d.val_per_class > 0 or (d.dataset == "imagefolder" and (Path(d.root) / "val").is_dir())


def _check_backbone(name: str, image_size: int) -> list[str]:
    from mutexmatch.models import BACKBONES

    if name not in BACKBONES:
        return [f"model.backbone={name!r}: unknown; registered: {', '.join(sorted(BACKBONES))}"]
    if image_size < BACKBONES[name].min_image_size:
        return [f"data.image_size={image_size}: backbone {name} needs images of at least "
                f"{BACKBONES[name].min_image_size} pixels"]
    return []


def _format_validation_error(err: ValidationError) -> str:
    return "\n".join(validation_error_lines(err, allowed_keys=_allowed_keys))


def _allowed_keys(loc: Sequence[Any]) -> list[str]:
    parent = _model_at(RunConfig, loc)
    return list(parent.model_fields) if parent is not None else ["?"]


def _model_at(model: type[BaseModel], loc: Sequence[Any]) -> type[BaseModel] | None:
    for part in loc:
        field = model.model_fields.get(str(part))
        if field is None or not (isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)):
            return None
        model = field.annotation
    return model


def parse_config(raw: dict[str, Any] | None) -> RunConfig:
    """Validate a plain mapping (e.g. parsed YAML) into a :class:`RunConfig`; raise :class:`ConfigError`."""
    raw = {} if raw is None else raw
    if not isinstance(raw, dict):
        raise ConfigError(f"config: must be a mapping of sections, got {type(raw).__name__}")
    try:
        return RunConfig.model_validate(raw)
    except ValidationError as err:
        raise ConfigError(_format_validation_error(err)) from None


def search_value(raw: Mapping[str, Any], path: str, sampled: Any) -> Any:
    """The config value at dotted ``path`` that a search's ``sampled`` value stands for, in the raw config ``raw``:
    a parameter of the algorithm ``raw`` chooses is its parameter model's to convert
    (:meth:`mutexmatch.params.AlgorithmParams.search_value`: a float ``k`` is a fraction of C), any other field takes
    the value as sampled. ``ValueError`` (without the path) when the value stands for none."""
    from mutexmatch.algorithms import ALGORITHMS

    section, _, name = path.partition(".")
    chosen = raw.get("algorithm")
    algorithm = (chosen if isinstance(chosen, Mapping) else {}).get("name", AlgorithmConfig.model_fields["name"].default)
    if section != "algorithm" or algorithm not in ALGORITHMS:  # an unknown name is the config check's to name
        return sampled
    return ALGORITHMS[algorithm].Params.search_value(name, sampled)


def apply_overrides(raw: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """Apply ``a.b=value`` overrides to a raw config mapping (values read by :func:`mutexmatch.yamlfile
    .read_set_value`); a key given twice is refused, as a key repeated in a YAML file is."""
    out = copy.deepcopy(raw)
    seen: dict[str, str] = {}
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE with a dotted key such as algorithm.tau=0.9")
        if key.strip() in seen:
            raise ConfigError(f"--set {item!r}: {key.strip()} is already set by --set {seen[key.strip()]!r}; give "
                              "each key once")
        seen[key.strip()] = item
        parts = key.strip().split(".")
        node = out
        for p in parts[:-1]:
            nxt = node.setdefault(p, {})
            if not isinstance(nxt, dict):
                raise ConfigError(f"--set {item!r}: {p} is not a section")
            node = nxt
        node[parts[-1]] = _override_value(item, value)
    return _switch_algorithm(raw, out, [k for k in seen if k.startswith("algorithm.")])


def _switch_algorithm(raw: dict[str, Any], out: dict[str, Any], set_keys: list[str]) -> dict[str, Any]:
    """A ``--set algorithm.name=X`` that changes the file's algorithm keeps only the file's parameters X takes
    (``experiments/runs/digits.yaml`` is a MutexMatch run whose ``k`` FixMatch has no use for); a parameter given by
    ``--set`` itself is always checked, so ``--set algorithm.name=fixmatch --set algorithm.k=3`` is still refused."""
    from mutexmatch.algorithms import ALGORITHMS

    before, after = raw.get("algorithm"), out.get("algorithm")
    if ("algorithm.name" not in set_keys or not isinstance(before, dict) or not isinstance(after, dict)
            or before.get("name") == after.get("name") or after.get("name") not in ALGORITHMS):
        return out
    takes = ALGORITHMS[after["name"]].Params.model_fields
    given = {k.split(".", 1)[1] for k in set_keys}
    out["algorithm"] = {k: v for k, v in after.items() if k == "name" or k in given or k in takes}
    return out


def _override_value(item: str, value: str) -> Any:
    """An override's value as YAML reads a scalar (``true``, ``0.5``, ``[1, 2]``); empty is null."""
    try:
        return read_set_value(item, value)
    except YamlFileError as e:
        raise ConfigError(str(e)) from None


def read_config_file(path: str | Path, what: str = "--config") -> dict[str, Any]:
    """The raw mapping of a run config YAML (``--config``, or a run folder's ``config.yaml`` on ``--resume``); raise
    :class:`ConfigError` with one line naming the file for anything that is not a YAML mapping with unique keys, and
    for a sweep YAML (naming the sweep command)."""
    try:
        raw = read_yaml_mapping(path, what, expected=f"a mapping of sections ({', '.join(RunConfig.model_fields)})")
    except YamlFileError as e:
        raise ConfigError(str(e)) from None
    if SWEEP_ONLY_KEY in raw:
        raise ConfigError(f"{what} {str(path)!r}: is a sweep YAML (it has `{SWEEP_ONLY_KEY}:`), not a run config; "
                          f"run it with `{SWEEP_COMMAND} {path}`")
    return raw


def load_config(path: str | Path | None = None, overrides: Sequence[str] = ()) -> RunConfig:
    """Load a YAML run config (or the defaults when ``path`` is None), apply overrides, validate once."""
    raw = {} if path is None else read_config_file(path)
    return parse_config(apply_overrides(raw, overrides))


def _field_extras() -> dict[str, dict[str, Any]]:
    """Dotted path → ``json_schema_extra`` of every RunConfig field; top-level fields first, then each section's
    in schema order (the order error messages list them in)."""
    top, nested = {}, {}
    for name, field in RunConfig.model_fields.items():
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            nested.update({f"{name}.{sub}": f.json_schema_extra or {} for sub, f in ann.model_fields.items()})
        else:
            top[name] = field.json_schema_extra or {}
    return {path: extra for path, extra in {**top, **nested}.items() if isinstance(extra, dict)}


def fields_with_role(role: str) -> tuple[str, ...]:
    """Dotted paths of the fields declared with ``role`` (:data:`NO_RESULT`, :data:`RESUMABLE`, :data:`OWNED`)."""
    return tuple(path for path, extra in _field_extras().items() if role in extra.get("roles", ()))


def owned_fields() -> dict[str, str]:
    """Dotted path → how orchestration sets it, for every :data:`OWNED` field."""
    return {path: extra["owned_by"] for path, extra in _field_extras().items() if OWNED in extra.get("roles", ())}


def unsearchable_fields() -> set[str]:
    """Fields a hyper-parameter search may not vary: those that do not change results (searching them would only
    re-run the same trial; e.g. ``train.keep_freed_memory``) and those orchestration sets per trial."""
    return set(fields_with_role(NO_RESULT)) | set(owned_fields())


_HASH_EXCLUDE = {tuple(path.split(".")) for path in fields_with_role(NO_RESULT)}


def _hash(d: dict[str, Any]) -> str:
    for path in _HASH_EXCLUDE:
        node = d
        for p in path[:-1]:
            node = node[p]
        node.pop(path[-1], None)
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


def config_hash(cfg: RunConfig) -> str:
    """Short sha256 over the fields that change results (paths, device and display options excluded): the current
    rule, under which new runs are tagged. Whether a stored run or checkpoint IS this config: :func:`config_hashes`."""
    return _hash(cfg.to_dict())


def legacy_config_hash(cfg: RunConfig) -> str | None:
    """The hash the code before issue 22 gave this config (its algorithm section held every built-in algorithm's
    parameters, :data:`LEGACY_ALGORITHM_SECTION`, the chosen one's values over their defaults), or None where that
    section cannot express it (a parameter outside it not at its default)."""
    from mutexmatch.algorithms import ALGORITHMS

    from mutexmatch.params import DistAlignParams

    section = {f: v for f, v in cfg.to_dict()["algorithm"].items() if f != "name"}
    fields = ALGORITHMS[cfg.algorithm.name].Params.model_fields
    new = [f for f in DistAlignParams.model_fields if f not in LEGACY_ALGORITHM_SECTION]   # issue 22's own fields
    if any(f in section and section[f] != fields[f].default for f in new):
        return None
    # that code appended a parameter only a newly registered algorithm declared to the section
    legacy = {**LEGACY_ALGORITHM_SECTION, **{f: v for f, v in section.items() if f not in new}}
    return _hash({**cfg.to_dict(), "algorithm": {"name": cfg.algorithm.name, **legacy}})


def config_hashes(cfg: RunConfig) -> tuple[str, ...]:
    """Every config hash that identifies ``cfg``: the current rule's (:func:`config_hash`) first, then the legacy
    rule's (:func:`legacy_config_hash`, where it can express ``cfg``). THE rule for "was this stored run or
    checkpoint made with this config?": the sweep's skip (``orchestration.plan.GridTrial.hashes``, used by launch,
    refit, status and summary), the expected runs the report reads, a search study's identity (its oldest hash,
    so a study keeps its name across hash rules) and the trainer's resume check all call it, so a store written
    before a hash-rule change re-runs nothing finished and resumes what was in flight."""
    legacy = legacy_config_hash(cfg)
    current = config_hash(cfg)
    return (current,) if legacy is None or legacy == current else (current, legacy)


def _role_note(field: Any) -> str:
    """The roles of a field as a sentence for the docs (empty for a field without any)."""
    extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
    roles_ = extra.get("roles", ())
    notes = ["does not change results (left out of the config hash; not searchable)"] if NO_RESULT in roles_ else []
    notes += ["may change on `--resume`"] if RESUMABLE in roles_ else []
    notes += [f"owned by a sweep: {extra['owned_by']}; a value in its YAML is refused"] if OWNED in roles_ else []
    return f" *Role: {'; '.join(notes)}.*" if notes else ""


def config_markdown() -> str:
    """Reference documentation of every field, generated from the schema."""
    lines = ["# Run configuration reference", "", "Generated by `python -m mutexmatch.config --doc`.", ""]
    for name, field in RunConfig.model_fields.items():
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            lines += [f"## `{name}` — {field.description}", "", (ann.__doc__ or "").strip().splitlines()[0], "",
                      "| field | default | description |", "| --- | --- | --- |"]
            for sub, f in ann.model_fields.items():
                default = f.default_factory() if f.default_factory else f.default
                lines.append(f"| `{name}.{sub}` | `{default!r}` | {f.description}{_role_note(f)} |")
            if name == "model":
                lines += ["", *_backbone_table()]
            if name == "algorithm":
                lines += ["", *_algorithm_table()]
            lines.append("")
        else:
            lines += [f"## `{name}`", "", f"{field.description} Default `{field.default!r}`.{_role_note(field)}", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    import sys

    if "--doc" in sys.argv:
        print(config_markdown())
    else:
        print(yaml.safe_dump(RunConfig.model_construct().model_dump(mode="json"), sort_keys=False))
