"""The run schema: its sections and fields (each documented and range-checked where it is declared), the field roles,
and :func:`parse_config`, which validates a mapping once and raises :class:`ConfigError` naming every bad field."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal, Mapping, Sequence, get_args

from pydantic import (AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError,
                      field_validator, model_validator)

from mutexmatch import plugins as plugin_loading   # not `plugins`: RunConfig has a field of that name
from mutexmatch.checks import at_least, shown, validation_error_lines, within
from mutexmatch.config.optim_section import OptimConfig, check_optim
from mutexmatch.config.imb_section import ImbAlgorithmConfig, imb_base_errors


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


def _ratio(v: float) -> float:
    if not abs(v) >= 1:
        raise ValueError("must be <= -1 or >= 1 (head class / tail class; negative reverses the class order)")
    return v


_Ratio = Annotated[float, AfterValidator(_ratio)]


class ImbalanceConfig(_Section):
    """A long-tailed split, USB's class-imbalanced protocol (mutexmatch/data/longtail.py): class c of C gets
    int(head * mu^c) images, mu = (1/|ratio|)^(1/(C-1)), the last class int(head/|ratio|); drawn as USB's
    sample_labeled_unlabeled_data draws it, seeded with data.fold (USB's seed); data.num_labels must be the
    labeled set's size."""

    labeled_head: _AtLeast1 = Field(description="N_1: labeled images of the head class (class 0, or the last class "
                                    "when labeled_ratio < 0).")
    labeled_ratio: _Ratio = Field(description="gamma_l: head / tail of the labeled set (USB's lb_imb_ratio), "
                                  "at least 1 in absolute value; negative reverses the class order; 1 = N_1 of every class.")
    unlabeled_head: Annotated[int | None, AfterValidator(at_least(1, or_none=True))] = Field(
        None, description="M_1: unlabeled images of the head class, drawn apart from the labeled ones; null = every "
        "image of each class that is not labeled (STL-10's `unknown` setting). At ratio 1 it is per class (USB's "
        "ulb_num_labels is then the total).")
    unlabeled_ratio: _Ratio = Field(1.0, description="gamma_u (USB's ulb_imb_ratio); negative = the reversed "
                                    "(`inconsistent`) order; other than 1 needs unlabeled_head.")
    rule: Literal["int", "ceil"] = Field("int", description="Rounding of each class's count: `int` (USB: down) or "
                                         "`ceil` (DARP/RDA: up).")

    @model_validator(mode="before")
    @classmethod
    def _keys(cls, v: Any) -> Any:
        # One line for the section's keys (an unknown key, then the missing ones), not one per key.
        if isinstance(v, dict):
            fields = list(cls.model_fields)
            unknown = [k for k in v if k not in fields]
            missing = [k for k, f in cls.model_fields.items() if f.is_required() and k not in v]
            if unknown:
                raise ValueError(f"data.imbalance.{unknown[0]}: unknown key; allowed keys: {', '.join(fields)}")
            if missing:
                raise ValueError(f"data.imbalance.{missing[0]}: missing; data.imbalance needs at least "
                                 "labeled_head (N_1) and labeled_ratio (gamma_l)")
        return v

    @model_validator(mode="after")
    def _ratio_needs_head(self) -> "ImbalanceConfig":
        if self.unlabeled_head is None and self.unlabeled_ratio != 1:
            raise ValueError(f"data.imbalance.unlabeled_ratio={self.unlabeled_ratio:g}: needs "
                             "data.imbalance.unlabeled_head (M_1); without it the unlabeled set is the rest of every "
                             "class, so leave the ratio at 1")
        return self


def _crop_ratio(v: float | None) -> float | None:
    return None if v is None else within(0.0, 1.0, low_open=True)(v)


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
    imbalance: ImbalanceConfig | None = Field(
        None, exclude_if=lambda v: v is None, description="Long-tailed labeled and unlabeled sets (keys below); "
        "null = the balanced split. docs/datasets.md, \"Long-tailed splits\".")
    svhn_extra: bool = Field(False, description="SVHN only: append the 531k `extra` images to the training set.")
    image_size: int | None = Field(
        None, description="Side length images are resized to at load time; null = the dataset's default "
        "(digits 16, CIFAR/SVHN 32, STL-10 96, mini-ImageNet 80, Tiny-ImageNet 64, EuroSAT 64, TissueMNIST 28; "
        "imagefolder: the side of its first train image, which must then be square); only digits, mini-ImageNet, "
        "EuroSAT, TissueMNIST and imagefolder can be resized.")
    # Left out of the config (and so of its hash) when null: every earlier run padded as its dataset does.
    crop_ratio: Annotated[float | None, AfterValidator(_crop_ratio)] = Field(
        None, exclude_if=lambda v: v is None, description="USB-CV's weak crop: pad int(image_size·(1 - crop_ratio)) "
        "pixels by reflection, then crop image_size (USB's RandomCrop(img_size, padding=int(img_size*(1-crop_ratio)), "
        "padding_mode='reflect'), with the dataset's horizontal flip); USB-CV uses 0.875 (4 px at 32, 12 at 96). "
        "null = the dataset's own padding (CIFAR: 4 px of zeros).")
    normalization: Literal["correct", "released"] = Field(
        "correct", description="Normalisation statistics: `correct` = the dataset's real per-channel statistics "
        "(imagefolder: computed on its train images); `released` = the released code's constants, which for SVHN, "
        "STL-10 and Tiny-ImageNet are divided by 255 twice (how their published numbers were produced).")

    @field_validator("dataset", mode="before")
    @classmethod
    def _registered_dataset(cls, v: Any) -> str:
        # The registry is imported here, not at module level: it loads torch and every dataset module.
        from mutexmatch.data.builtin import registered_names

        if not isinstance(v, str) or v not in registered_names():
            *head, last = [repr(n) for n in registered_names()]
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
    # The file's path changes no result, its bytes do: its digest joins the config hash (both left out when null).
    pretrained: str | None = Field(
        None, exclude_if=lambda v: v is None, json_schema_extra=roles(NO_RESULT), description="Weight file the "
        "backbone starts from, loaded by USB's rules (docs/pretrained.md): USB's `{'model': state_dict}`, a plain "
        "state dict (timm's, torchvision's) or `.safetensors`; null = random initialisation.")
    pretrained_sha256: str | None = Field(
        None, exclude_if=lambda v: v is None, description="sha256 of model.pretrained: another file is refused; "
        "null = computed from the file when the config is loaded (the resolved config holds it).")

    @model_validator(mode="after")
    def _pretrained_file(self) -> "ModelConfig":   # __dict__: an assignment would validate again, and again
        from mutexmatch.models.pretrained import checked_file

        self.__dict__.update(checked_file(self.pretrained, self.pretrained_sha256))
        return self


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
                          "mutexmatch.training.compiled.compile_report.")
    cuda_graphs: bool = Field(False, description="CUDA only: compile the model with CUDA graphs "
                              "(torch.compile mode reduce-overhead: the backbone's forward and backward replayed "
                              "from a captured graph, inputs copied into static buffers; heads, losses, SGD and EMA "
                              "stay eager). Refused on the CPU. With train.deterministic a graphed step equals the "
                              "compiled step bitwise (tests/mutexmatch/training/test_compiled.py, a device check).",
                              json_schema_extra=roles(NO_RESULT, RESUMABLE))
    # Left out of the config (and so of its hash) at its default, whose results are the single process's at any
    # world size; off changes results under data parallelism, so it then enters the hash.
    sync_bn: bool = Field(True, exclude_if=lambda v: v is True,
                          description="Data parallel (several processes, e.g. torchrun): BatchNorm normalises with "
                          "the statistics of the global batch, as one process does (on), or of each rank's rows, "
                          "rank 0's running statistics kept (off: what TorchSSL/USB do; results differ). No effect "
                          "in a single process. docs/training.md, \"Data parallel\".")
    num_threads: Annotated[int, AfterValidator(within(0, MAX_THREADS))] = Field(
        0, description=f"torch CPU threads; 0 keeps torch's default (at most {MAX_THREADS}).",
                                   json_schema_extra=roles(NO_RESULT, RESUMABLE))
    keep_freed_memory: bool = Field(True, description="CPU runs on glibc: keep freed host memory in the process "
                                    "instead of returning each ~100 MB activation block to the kernel and "
                                    "page-faulting it back the next step (mutexmatch/training/allocator.py; ~20% of a "
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
    imb_algorithm: ImbAlgorithmConfig | None = Field(   # left out of the config and its hash when null
        None, exclude_if=lambda v: v is None, description="Imbalance algorithm composed with the base algorithm.")
    train: TrainConfig = Field(default_factory=TrainConfig, description="Training loop.")
    output_dir: str = Field("outputs/run", description="Run folder: config, split, checkpoints, metrics.jsonl. "
                            "Relative paths are resolved against the current directory when the config is loaded.",
                            json_schema_extra=roles(NO_RESULT, owned="set per trial by orchestration (under the "
                                                    "Ray storage)"))
    plugins: Annotated[list[str], BeforeValidator(plugin_loading.checked_entries)] = Field(
        default_factory=list, exclude_if=lambda v: not v, json_schema_extra=roles(NO_RESULT, RESUMABLE),
        description="Plugins whose registered algorithms, datasets and backbones join the built-ins: module names, "
        "or `.py` files and package folders relative to the YAML; entry points `mutexmatch.plugins` always load "
        "(docs/plugins.md).")

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
        errors += imb_base_errors(self.imb_algorithm, self.algorithm.name)
        errors += _check_backbone(self.model, image_size, num_classes, self.data.dataset)
        errors += check_optim(self.optim, self.train.iterations)
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
        return [f"algorithm.name={shown(alg.name)}: unknown; registered: {', '.join(sorted(ALGORITHMS))}"]
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
        problem = (f"={shown(given[f])}: fixed at {model.pinned[f]!r} by algorithm {alg.name!r}; leave it out"
                   if f in model.pinned else
                   f"={shown(given[f])}: not used by algorithm {alg.name!r} (a parameter of {', '.join(owners)})"
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


def has_validation(d: DataConfig) -> bool:
    """Whether a run of ``d`` evaluates on validation images (val_per_class, or an image folder's val/)."""
    return d.val_per_class > 0 or (d.dataset == "imagefolder" and (Path(d.root) / "val").is_dir())


def _check_backbone(model: ModelConfig, image_size: int, num_classes: int, dataset: str) -> list[str]:
    from mutexmatch.data.builtin import DATASETS
    from mutexmatch.models import BACKBONES
    from mutexmatch.models.pretrained import pretrained_errors

    name = model.backbone
    if name not in BACKBONES:
        return [f"model.backbone={shown(name)}: unknown; registered: {', '.join(sorted(BACKBONES))}"]
    if problem := BACKBONES[name].size_error(image_size):
        return [f"data.image_size={image_size}: {problem}"]
    channels = DATASETS[dataset].info.channels if dataset in DATASETS else 3   # an image folder's are RGB
    return pretrained_errors(name, model.pretrained, model.pretrained_sha256, num_classes=num_classes,
                             in_channels=channels, image_size=image_size)


def _format_validation_error(err: ValidationError) -> str:
    return "\n".join(validation_error_lines(err, allowed_keys=_allowed_keys))


def _allowed_keys(loc: Sequence[Any]) -> list[str]:
    parent = _model_at(RunConfig, loc)
    return list(parent.model_fields) if parent is not None else ["?"]


def _model_at(model: type[BaseModel], loc: Sequence[Any]) -> type[BaseModel] | None:
    for part in loc:
        field = model.model_fields.get(str(part))
        inner = None if field is None else section_model(field.annotation)
        if inner is None:
            return None
        model = inner
    return model


def section_model(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds (a section, or an optional one such as ``data.imbalance``), else None."""
    for a in (annotation, *get_args(annotation)):
        if isinstance(a, type) and issubclass(a, BaseModel):
            return a
    return None


def parse_config(raw: dict[str, Any] | None) -> RunConfig:
    """Validate a plain mapping (e.g. parsed YAML) into a :class:`RunConfig`; raise :class:`ConfigError`."""
    raw = {} if raw is None else raw
    if not isinstance(raw, dict):
        raise ConfigError(f"config: must be a mapping of sections, got {type(raw).__name__}")
    plugin_loading.load_plugins(plugin_loading.listed(raw), error=ConfigError)   # before their names are checked
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
