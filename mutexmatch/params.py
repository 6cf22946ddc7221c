"""Algorithm hyper-parameters: every registered algorithm declares its parameters once, as a typed model.

A parameter model (a subclass of :class:`AlgorithmParams`) holds each parameter's default, its allowed values (a
validator whose message reads ``must be in (0, 1]``) and its description, with the paper's symbol in brackets.
Four readers use the same declaration:

- the run config: the ``algorithm`` section is ``{name: <algorithm>, <its own parameters>}``; :mod:`mutexmatch.config`
  validates it with the chosen algorithm's model (a parameter another algorithm owns is refused, naming the
  algorithm's own parameters) and, once the number of classes C is known, checks its C-dependent bounds
  (:class:`ClassBound`: ``k``, ``comp_rank``). So a new algorithm is one module: its class and its model;
- ``python -m mutexmatch.config --doc``, which lists every registered algorithm with its parameters;
- the algorithm itself, whose loss calls read ``self.params.<name>``;
- a sweep's search, which asks :meth:`AlgorithmParams.search_value` what a sampled value stands for
  (:class:`SearchValue`: a float ``k`` is a fraction of C) instead of knowing any parameter by name.

An ablation that drops parameters of its parent fixes them with :meth:`AlgorithmParams.without`. Torch-free,
because the config imports it.
"""
from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal, get_args, get_origin

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, create_model
from pydantic.fields import FieldInfo

from mutexmatch.checks import at_least, in_interval, interval_text, validation_error_lines

__all__ = ["AlgorithmParams", "ClassBound", "DistAlignParams", "FixMatchParams", "LowConfidenceParams",
           "MutexMatchParams", "NCEParams", "SearchValue", "resolve_k"]

_K_PATTERN = re.compile(r"^\s*(?:(\d*\.?\d+)\s*\*?\s*)?C\s*$")


@dataclass(frozen=True)
class ClassBound:
    """Field metadata: ``check(value, C)`` raises ``ValueError`` when the value does not fit C classes (known only
    once the dataset is)."""

    check: Callable[[Any, int], Any]


@dataclass(frozen=True)
class SearchValue:
    """Field metadata: ``convert(sampled)`` is the parameter's value for a value a search sampled (``ValueError``
    saying what is allowed when it stands for none). Without it a sampled value is the parameter's value."""

    convert: Callable[[Any], Any]


def _allows(text: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Mark a validator with the values it allows, as the docs show them."""
    def mark(check: Callable[..., Any]) -> Callable[..., Any]:
        check.allows = text  # type: ignore[attr-defined]
        return check
    return mark


def _within(lo: float, hi: float, *, lo_open: bool = False, hi_open: bool = False) -> AfterValidator:
    """A real number in the interval (None passes: an optional parameter; NaN and an open infinite end fail)."""
    @_allows(interval_text(lo, hi, lo_open, hi_open))
    def check(v: float | None) -> float | None:
        return v if v is None else in_interval(v, lo, hi, lo_open, hi_open)
    return AfterValidator(check)


@_allows("1..C, `C` or a fraction like `0.6C`")
def _k_syntax(v: Any) -> int | str:
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        raise ValueError("must be an integer, `C` or a fraction like `0.6C`")
    if isinstance(v, int):
        if v < 1:
            raise ValueError("must be >= 1 (or `C`, or a fraction like `0.6C`)")
        return v
    m = _K_PATTERN.match(v)
    if not m:
        raise ValueError("must be an integer, `C` or a fraction like `0.6C`")
    if m.group(1) is not None and not 0 < float(m.group(1)) <= 1:
        raise ValueError("fraction of C must be in (0, 1]")
    return v


def _k_from_search(v: Any) -> Any:
    """A search samples ``k`` as an integer, a choice, or as a float: a fraction of C (``0.6`` → ``0.6C``)."""
    if isinstance(v, float):
        if not 0 < v <= 1:
            raise ValueError("a float k is a fraction of C and must be in (0, 1]")
        return f"{v:.6g}C"
    return v


def resolve_k(k: int | str, num_classes: int) -> int:
    """Turn ``algorithm.k`` (an int, ``C`` or ``0.6C``) into an integer 1..C."""
    if isinstance(k, int):
        if not 1 <= k <= num_classes:
            raise ValueError(f"must be in [1, {num_classes}] (the number of classes)")
        return k
    m = _K_PATTERN.match(k)
    if not m:
        raise ValueError("must be an integer, `C` or a fraction like `0.6C`")
    frac = float(m.group(1)) if m.group(1) is not None else 1.0
    return max(1, min(num_classes, int(round(frac * num_classes))))


def _rank_fits(m: int, num_classes: int) -> int:
    if m > num_classes:
        raise ValueError(f"must be in [1, {num_classes}] (the number of classes)")
    return m


@_allows("1, 2 or 3")
def _nce_variant(v: int) -> int:
    if v not in (1, 2, 3):
        raise ValueError("must be 1, 2 or 3")
    return v


Probability = Annotated[float, _within(0.0, 1.0, lo_open=True)]
Weight = Annotated[float, _within(0.0, math.inf, hi_open=True)]
Positive = Annotated[float, _within(0.0, math.inf, lo_open=True, hi_open=True)]
Fraction = Annotated[float, _within(0.0, 1.0)]
AboveOne = Annotated[float, _within(1.0, math.inf, lo_open=True, hi_open=True)]
Steps = Annotated[int, AfterValidator(_allows("integer >= 0")(at_least(0)))]
PositiveSteps = Annotated[int, AfterValidator(_allows("integer >= 1")(at_least(1)))]
# The longest queue a parameter may ask for (a memory bank's or an alignment queue's length, in steps or batches):
# refused at validation, not by the constructor at build (issue 33, adversarial "comatch-queue-huge"); a bank that
# fits this bound but not the memory is the memory check's (mutexmatch.training.memory, Algorithm.state_memory).
MAX_QUEUE = 1 << 20
# The widest projection head output (an embedding size d): 16384, 8x the widest in the references (SimCLR's 2048);
# a billion-wide nn.Linear was an allocator traceback at build (adversarial "comatch-projdim-huge").
MAX_EMBEDDING = 1 << 14


def _int_range(high: int) -> AfterValidator:
    """An integer in [1, ``high``], the bound written out in the docs and the error (not ``1.04858e+06``)."""
    @_allows(f"integer in [1, {high}]")
    def check(v: int) -> int:
        if not 1 <= v <= high:
            raise ValueError(f"must be an integer in [1, {high}]")
        return v
    return AfterValidator(check)


QueueLength = Annotated[int, _int_range(MAX_QUEUE)]
EmbeddingSize = Annotated[int, _int_range(MAX_EMBEDDING)]
# USB's "epoch" in its classic-CV configs: num_train_iter // epoch = 2^20 // 1024 steps (issue 32). The algorithms
# whose schedule switches at an epoch boundary (SimMatch, CoMatch's `usb` start) take it as `epoch_steps`; 0 there
# means one pass over the unlabeled pool, ceil(N_u / muB) steps (TrainContext.steps_per_epoch), the earlier rule.
USB_EPOCH_STEPS = 1024
# A parameter added after runs were stored with the behaviour it now makes optional declares the value that
# reproduces that behaviour (``json_schema_extra=earlier(value)``); a config at that value is also found by the hash
# of its algorithm section without the parameter (mutexmatch.config.identity), so stored runs keep their identity.
EARLIER = "earlier"


def earlier(value: Any) -> dict[str, Any]:
    """``json_schema_extra`` of a parameter added after stored runs: ``value`` is what the code before it computed."""
    return {EARLIER: value}


class AlgorithmParams(BaseModel):
    """Base of every parameter model: strict types, unknown keys rejected, immutable once validated."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    pinned: ClassVar[dict[str, Any]] = {}   # parameters of a parent fixed by :meth:`without` (not settable)
    GOVERNED: ClassVar[dict[str, tuple[str, ...]]] = {}   # an on/off switch -> the parameters only it reads
    # Above 0 where the algorithm's computation changed with no parameter to ask for the old one: the config hash then
    # holds it, so runs stored before are not taken for this algorithm's (mutexmatch.config.identity; issue 32).
    hash_revision: ClassVar[int] = 0

    def stored_before(self) -> tuple[str, ...] | None:
        """The parameters added since runs were stored (declared with :func:`earlier`) when every one of them is at
        the value that reproduces the code before it (those runs compute what this config does), else None."""
        added = {n: f.json_schema_extra[EARLIER] for n, f in type(self).model_fields.items()
                 if isinstance(f.json_schema_extra, dict) and EARLIER in f.json_schema_extra}
        return tuple(added) if all(getattr(self, n) == v for n, v in added.items()) else None

    @classmethod
    def parse(cls, values: Mapping[str, Any], algorithm: str, num_classes: int | None) -> "AlgorithmParams":
        """Validate ``values`` for ``algorithm`` with C = ``num_classes`` (None: C-dependent bounds unchecked);
        ``ValueError`` naming ``algorithm.<param>`` on an unknown or bad one (one line per problem)."""
        if not isinstance(values, Mapping):
            raise ValueError(f"algorithm: parameters must be a mapping, got {type(values).__name__}")
        unknown = sorted(set(values) - set(cls.model_fields), key=str)
        if unknown:
            raise ValueError(f"algorithm.{unknown[0]}: not a parameter of algorithm {algorithm!r} "
                             f"(accepted: {', '.join(cls.model_fields) or 'none'})")
        try:
            params = cls.model_validate(dict(values))
        except ValidationError as err:
            raise ValueError("\n".join(validation_error_lines(err, where=lambda loc: f"algorithm.{loc[0]}"))) from None
        errors = [] if num_classes is None else params.class_bound_errors(num_classes)
        if errors:
            raise ValueError("\n".join(errors))
        return params

    @classmethod
    def search_value(cls, name: str, sampled: Any) -> Any:
        """The value of parameter ``name`` that a search's ``sampled`` value stands for: its :class:`SearchValue`
        conversion (a float ``k`` is a fraction of C), else ``sampled`` itself; ``ValueError`` when it stands for
        none."""
        field = cls.model_fields.get(name)
        for convert in (m.convert for m in (field.metadata if field else ()) if isinstance(m, SearchValue)):
            return convert(sampled)
        return sampled

    def class_bound_errors(self, num_classes: int) -> list[str]:
        """``algorithm.<param>=value: ...`` for every parameter whose :class:`ClassBound` rejects C classes."""
        errors = []
        for name, field in type(self).model_fields.items():
            for bound in (m for m in field.metadata if isinstance(m, ClassBound)):
                try:
                    bound.check(getattr(self, name), num_classes)
                except ValueError as e:
                    errors.append(f"algorithm.{name}={getattr(self, name)!r}: {e}")
        return errors

    @classmethod
    def without(cls, name: str, *, keep: tuple[str, ...] = (), **pinned: Any) -> type["AlgorithmParams"]:
        """A model ``name`` with this one's parameters minus ``pinned``, which are fixed at the given values (read as
        attributes, not accepted as input): how an ablation drops a parameter of the method it modifies. A switch
        pinned off (``dist_align=False``) takes the parameters it governs (``GOVERNED``) with it, at their defaults:
        a setting nothing reads is no parameter (nor part of the config hash), unless named in ``keep`` (a
        governed setting the algorithm reads without the switch, redeclared by the subclass: AdaMatch's da_ratio)."""
        for switch, governed in cls.GOVERNED.items():
            if pinned.get(switch) is False:
                pinned = {**{g: cls.model_fields[g].default for g in governed if g not in keep}, **pinned}
        fields: dict[str, Any] = {n: (f.annotation, f) for n, f in cls.model_fields.items() if n not in pinned}
        model = create_model(name, __base__=AlgorithmParams, __module__=cls.__module__, __doc__=cls.__doc__,
                             **fields)
        model.pinned = {**cls.pinned, **pinned}
        for key, value in model.pinned.items():
            setattr(model, key, value)
        return model


class DistAlignParams(AlgorithmParams):
    """Distribution alignment of p^w, the piece :mod:`mutexmatch.algorithms.alignment` (docs/training.md)."""

    GOVERNED: ClassVar[dict[str, tuple[str, ...]]] = {
        "dist_align": ("da_estimate", "da_window", "da_momentum", "da_target", "da_ratio")}

    dist_align: bool = Field(False, description="ReMixMatch distribution alignment of p^w: p^w · p(y) / p̃(y), "
                             "normalised, before the threshold and the pseudo-labels.")
    da_estimate: Literal["queue", "ema"] = Field(
        "queue", description="Running estimate p̃(y) of the model's class distribution on unlabeled data: a queue of "
        "the last `da_window` batch means (ReMixMatch) or an EMA with `da_momentum` (AdaMatch, SoftMatch).")
    da_window: QueueLength = Field(
        128, description="Queue length of the `queue` estimate, in batches.")
    da_momentum: Annotated[float, _within(0.0, 1.0, hi_open=True)] = Field(
        0.999, description="Momentum of the `ema` estimate.")
    da_target: Literal["uniform", "labeled", "model"] = Field(
        "uniform", description="Target p(y): uniform, the labeled set's class histogram, or the same running "
        "estimate of the model's predictions on labeled batches (AdaMatch).")
    da_ratio: Literal["filled", "usb"] = Field(
        "filled", description="Form of p(y) / p̃(y): `filled` = p(y) / max(p̃(y), 1e-12), a queue averaged over "
        "its filled slots (ours); `usb` = (p(y) + 1e-6) / (p̃(y) + 1e-6), a queue averaged over all slots, empty "
        "ones as zeros (USB 0.3.2, the authors' code). They differ while the queue fills and, at any time, for a class "
        "the model never predicts (docs/training.md, Distribution alignment).")


class RampUpParams(AlgorithmParams):
    """An unlabeled loss weight ramped up linearly from 0 over the first part of the run (USB's Pi-Model, Mean
    Teacher and VAT)."""

    lambda_u: Weight = Field(1.0, description="[λ_u] weight of the unlabeled loss once ramped up (USB's "
                             "ulb_loss_ratio).")
    unsup_warm_up: Fraction = Field(0.4, description="Fraction of the run over which the unlabeled loss weight "
                                    "ramps up linearly from 0 (USB's unsup_warm_up; 0: no ramp).")


class PositiveConsistencyParams(DistAlignParams):
    """L_p's weight and distribution alignment, shared by every method with a positive consistency term."""

    lambda_p: Weight = Field(1.0, description="[λ_p] weight of L_p, the TPC positive consistency loss.")


class FixMatchParams(PositiveConsistencyParams):
    """FixMatch: a confidence threshold and L_p."""

    tau: Probability = Field(0.95, description="[τ] confidence threshold splitting high- and low-confidence "
                             "samples.")


class MutexMatchParams(FixMatchParams):
    """MutexMatch (Algorithm 1) and its ablation knobs."""

    form: Literal["paper", "official"] = Field(
        "paper", description="MutexMatch loss form: `paper` = Algorithm 1 / Eqs. (sep), (p), (ln) as printed; "
        "`official` = what the released code computes (L_sep over all rows, no 1/k, one λu; WRN BatchNorm "
        "momentum 1 − `train.ema`). Use `official` to reproduce the published numbers.")
    k: Annotated[int | str, BeforeValidator(_k_syntax), ClassBound(resolve_k), SearchValue(_k_from_search)] = Field(
        "C", description="[k] top-k classes kept in the TNC consistency L_n: an integer 1..C, `C` (all classes) "
        "or a fraction of C such as `0.6C` (rounded to the nearest integer, at least 1).")
    lambda_sep: Weight = Field(1.0, description="[λ_sep] weight of L_sep, the TNC's separate training loss.")
    lambda_n: Weight = Field(1.0, description="[λ_n] weight of L_n, the TNC negative consistency loss.")
    sep_stop_grad: bool = Field(
        True, description="Stop the gradient of L_sep at the features (θ̂ in Eq. sep). False lets L_sep train θ "
        "(the SVHN-40 ablation table).")
    tnc_consistency: Literal["low", "all"] = Field(
        "low", description="Apply L_n to low-confidence samples only (paper) or to all samples (ablation).")
    tnc_target: Literal["soft", "hard"] = Field(
        "soft", description="TNC consistency target: soft r^w (paper) or hard (ablation: the top-k components of "
        "r^w set to 1).")
    comp_rank: Annotated[int, AfterValidator(_allows("integer >= 1")(at_least(1))), ClassBound(_rank_fits)] = Field(
        1, description="[m] complementary label = the m-th smallest TPC class (1 = argmin, the paper's choice).")


class LowConfidenceParams(FixMatchParams):
    """FixMatch plus the weight of a loss on the low-confidence samples."""

    lambda_ab1: Weight = Field(1.0, description="[λ_ab1] weight of the low-confidence loss in the FULL/SOFT/MSE "
                               "ablations.")


class NCEParams(PositiveConsistencyParams):
    """The UPS-style negative cross-entropy baselines: two thresholds instead of τ."""

    nce_variant: Annotated[int, AfterValidator(_nce_variant)] = Field(
        1, description="UPS-style negative cross-entropy baseline variant: 1, 2 or 3.")
    tau_p: Annotated[float | None, _within(0.0, 1.0, lo_open=True)] = Field(
        None, description="[τ_p] positive threshold of the NCE baselines; null = the variant's default "
        "(0.95 for F w. NCE (1) and (3), 0.7 for (2)).")
    tau_n: Annotated[float, _within(0.0, 1.0, lo_open=True, hi_open=True)] = Field(
        0.05, description="[τ_n] negative threshold of the NCE baselines.")


def allowed_values(field: FieldInfo) -> str:
    """The values a parameter allows, for the docs: its choices, or what its validator says it allows."""
    if field.annotation is bool:
        return "true, false"
    if get_origin(field.annotation) is Literal:
        return ", ".join(f"`{c}`" for c in get_args(field.annotation))
    shown = [getattr(m.func, "allows") for m in field.metadata if hasattr(getattr(m, "func", None), "allows")]
    text = "; ".join(shown) or str(getattr(field.annotation, "__name__", field.annotation))
    return f"null or {text}" if field.default is None else text


def markdown(model: type[AlgorithmParams]) -> str:
    """One algorithm's parameters for the docs: ``name`` = default (allowed values), then what it fixes."""
    shown = [f"`{n}` = `{f.default!r}` ({allowed_values(f)})" for n, f in model.model_fields.items()]
    fixed = [f"`{n}` = `{v!r}`" for n, v in model.pinned.items()]
    return "; ".join(shown) + (f"; fixed: {', '.join(fixed)}" if fixed else "") if shown or fixed else "none"
