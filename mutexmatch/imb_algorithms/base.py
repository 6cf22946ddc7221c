"""The imbalance-algorithm contract: an imbalance algorithm is composed with a base algorithm as USB composes them.

USB 0.3.2 (``semilearn/imb_algorithms/__init__.py``, ``get_imb_algorithm``) builds ``class DummyClass(ImbAlg, BaseAlg)``:
the imbalance algorithm subclasses the base, its ``train_step`` calls the base's and adds its terms to the loss. Ours
is the same: :func:`compose` makes ``type(..., (ImbCls, BaseCls), ...)``, so an :class:`ImbAlgorithm`'s
``compute`` calls ``super().compute`` (the base's step, unchanged) and adds its own terms; the composed class is an
:class:`~mutexmatch.algorithms.Algorithm` to the trainer (its extra heads, state, evaluated head, terms).

Writing one (one module ``mutexmatch/imb_algorithms/<name>.py``, nothing else; docs/longtail.md has the rule):

- a class ``@register_imb_algorithm("<name>")`` subclassing :class:`ImbAlgorithm`, with ``imb_params_model`` (a
  subclass of :class:`ImbParams`: defaults from USB's configs, ranges, descriptions; not ``Params``, which stays
  the base's), ``imb_terms`` (the loss terms it adds, logged as ``train/<term>``), ``bases`` (the
  ``algorithm.name`` values it composes with, USB's rule), ``evaluated_head`` (the head evaluation and prediction use; None: the base's TPC) and ``epoch_needs`` (what it
  needs at USB's epoch boundaries: :class:`EpochNeeds`);
- ``imb_heads(params, feat_dim, num_classes)``: its heads (attached as ``model.heads[name]``);
- ``imb_init()``: its state, built after the base's ``__init__`` (``self.imb`` holds its parameters,
  ``self.ctx`` the trainer's context); ``imb_state_dict`` / ``imb_load_state_dict`` save it in checkpoints;
- ``compute(model, inp)``: ``out = super().compute(model, inp)``, then its terms from :meth:`view_features` (the
  backbone features of the base's views by name, as USB's ``out_dict['feat']``) added with :meth:`add_terms`.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from pydantic import ValidationError
from torch import Tensor, nn

from mutexmatch.algorithms.base import ALGORITHMS, Algorithm, StepInputs, StepOutput
from mutexmatch.algorithms.base import declared_terms as algorithm_terms
from mutexmatch.checks import shown, validation_error_lines
from mutexmatch.metrics import term_name_errors
from mutexmatch.params import USB_EPOCH_STEPS, AlgorithmParams
from mutexmatch.params import markdown as params_markdown
from mutexmatch.registry import register_class

SECTION = "imb_algorithm"


class ImbParams(AlgorithmParams):
    """Base of an imbalance algorithm's parameter model (errors name ``imb_algorithm.<param>``)."""

    @classmethod
    def parse(cls, values: Mapping[str, Any], algorithm: str, num_classes: int | None = None) -> "ImbParams":
        unknown = sorted(set(values) - set(cls.model_fields), key=str)
        if unknown:
            raise ValueError(f"{SECTION}.{unknown[0]}={shown(values[unknown[0]])}: not a parameter of imbalance "
                             f"algorithm {algorithm!r} (it takes: {', '.join(cls.model_fields) or 'none'})")
        try:
            return cls.model_validate(dict(values))
        except ValidationError as err:
            raise ValueError("\n".join(validation_error_lines(err, where=lambda loc: f"{SECTION}.{loc[0]}"))) from None


@dataclass(frozen=True)
class EpochNeeds:
    """What an imbalance algorithm needs at USB's epoch boundaries (USB's epoch: ``num_train_iter // epoch`` steps,
    1,024 in its classic-CV-imb configs; the parameter ``epoch_steps``). ``progress``: it reads the epoch counter
    (ABC's epoch/epochs); ``pool_logits``: it needs the model's logits on the whole unlabeled pool at each boundary
    (Adsh, SAW, CReST)."""

    progress: bool = False
    pool_logits: bool = False


def usb_epoch(step: int, epoch_steps: int, total_steps: int) -> tuple[int, int]:
    """(epoch, epochs) of USB's loop at ``step``: epoch = step // epoch_steps, epochs = ceil(total / epoch_steps),
    so epoch / epochs stays below 1 as USB's does (its epoch counter runs 0..epochs-1)."""
    return step // epoch_steps, max(1, math.ceil(total_steps / epoch_steps))


class ImbAlgorithm:
    """An imbalance algorithm: a mixin that :func:`compose` puts before a base algorithm (never used alone)."""

    imb_name: ClassVar[str] = "<unregistered>"
    # Not ``Params``: the composed class is the base algorithm to the trainer, its ``Params`` the base's.
    imb_params_model: ClassVar[type[ImbParams]] = ImbParams
    imb_terms: ClassVar[tuple[str, ...]] = ()
    bases: ClassVar[tuple[str, ...]] = ("fixmatch", "remixmatch")
    evaluated_head: ClassVar[str | None] = None
    epoch_needs: ClassVar[EpochNeeds] = EpochNeeds()
    imb_params: ClassVar[ImbParams]          # set by compose
    wants_view_feats: ClassVar[bool] = True   # a separate-forward base reports its views' features (StepOutput)

    def __init__(self, params: Any, ctx: Any) -> None:
        super().__init__(params, ctx)         # type: ignore[call-arg]   # the base algorithm's
        self.imb = self.imb_params
        self.imb_init()

    # ------------------------------------------------------------------ the hooks a module overrides
    @classmethod
    def imb_heads(cls, params: ImbParams, feat_dim: int, num_classes: int) -> dict[str, nn.Module]:
        return {}

    def imb_init(self) -> None:
        """Build the state (``self.ctx``, ``self.imb`` are set)."""

    def imb_state_dict(self) -> dict[str, Any]:
        return {}

    def imb_load_state_dict(self, state: Mapping[str, Any]) -> None:
        if set(state) != set(self.imb_state_dict()):
            raise ValueError(f"{SECTION} state for {self.imb_name!r}: keys {sorted(state)} do not match "
                             f"{sorted(self.imb_state_dict())}")

    # ------------------------------------------------------------------ the composition
    @classmethod
    def heads(cls, params: AlgorithmParams, feat_dim: int, num_classes: int) -> dict[str, nn.Module]:
        base = super().heads(params, feat_dim, num_classes)    # type: ignore[misc]
        own = cls.imb_heads(cls.imb_params, feat_dim, num_classes)
        clash = sorted(base.keys() & own.keys())
        if clash:
            raise ValueError(f"{SECTION}.name={cls.imb_name!r}: its head {clash[0]!r} is a head of the base already")
        return {**base, **own}

    @classmethod
    def setup_model(cls, params: AlgorithmParams, model: nn.Module, ema_decay: float) -> None:
        super().setup_model(params, model, ema_decay)          # type: ignore[misc]
        if cls.evaluated_head is not None:
            model.evaluated_head = cls.evaluated_head

    _loading_base = False

    def state_dict(self) -> dict[str, Any]:
        base = super().state_dict()                                         # type: ignore[misc]
        # While the base loads its part it checks the keys against its own state_dict, without this entry.
        return base if self._loading_base else {**base, SECTION: self.imb_state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if SECTION not in state:
            raise ValueError(f"algorithm state: no {SECTION!r} entry for imbalance algorithm {self.imb_name!r} "
                             "(the checkpoint was written without it)")
        self.imb_load_state_dict(state[SECTION])
        self._loading_base = True
        try:
            super().load_state_dict({k: v for k, v in state.items() if k != SECTION})   # type: ignore[misc]
        finally:
            self._loading_base = False

    def term_weights(self) -> dict[str, float]:
        return {**super().term_weights(), **self.imb_term_weights()}        # type: ignore[misc]

    def after_step(self, step: int) -> None:
        """After ``step``'s optimiser and EMA updates: at the end of each of USB's epochs (``epoch_steps`` steps,
        0 = one pass over the pool) an algorithm with ``epoch_needs.pool_logits`` gets the EMA model's logits on the
        unlabeled pool (``TrainContext.pool_logits``) in :meth:`on_epoch_end`, as USB's ``after_train_epoch`` hooks
        read ``evaluate('eval_ulb')``; without a trainer (no ``pool_logits``, no EMA) nothing is called."""
        super().after_step(step)                                            # type: ignore[misc]
        if not self.epoch_needs.pool_logits or self.ctx.pool_logits is None or self.ctx.ema_model is None:
            return
        if (step + 1) % (getattr(self.imb, "epoch_steps", 0) or self.ctx.steps_per_epoch) == 0:
            self.on_epoch_end(self.ctx.pool_logits(self.ctx.ema_model))

    def on_epoch_end(self, pool_logits: Tensor) -> None:
        """USB's ``after_train_epoch`` of an algorithm with ``epoch_needs.pool_logits``: ``pool_logits`` (N_u, C), the
        pool in ``TrainContext.unlabeled``'s order."""
        raise NotImplementedError

    def imb_term_weights(self) -> dict[str, float]:
        """lambda of each of ``imb_terms``."""
        raise NotImplementedError

    def view_features(self, inp: StepInputs, out: StepOutput) -> dict[str, Tensor]:
        """The backbone features of the base's views by name (``lb``, ``weak``, ``strong``, ...): the concatenated
        forward's (``inp.feats``, split by the step's views), or what a separate-forward base reports
        (``StepOutput.view_feats``: ReMixMatch's labeled and first strong view, its weak view without gradient)."""
        if out.view_feats is not None:
            return dict(out.view_feats)
        if inp.feats is None:
            raise ValueError(f"{SECTION}.name={self.imb_name!r}: base algorithm {self.name!r} reports no view "
                             "features (StepOutput.view_feats)")
        spec = self.step                                                    # type: ignore[attr-defined]
        return dict(zip(spec.made(inp.num_ulb > 0), inp.feats.split(spec.rows(inp.num_lb, inp.num_ulb))))

    def add_terms(self, out: StepOutput, terms: dict[str, Tensor], diagnostics: dict[str, Tensor]) -> StepOutput:
        """``out`` with ``terms`` added to the loss at their weights (USB: ``out_dict['loss'] += ratio * term``) and
        logged; ``diagnostics`` (masks, pseudo-labels of the algorithm's own head) as ``StepOutput.extra``."""
        weights = self.imb_term_weights()
        out.loss = out.loss + sum(weights[t] * v for t, v in terms.items())
        out.terms = {**out.terms, **terms}
        out.extra = {**(out.extra or {}), **diagnostics}
        return out


def state_tensor(owner: str, state: Mapping[str, Any], key: str, like: Tensor) -> Tensor:
    """``state[key]`` of a checkpoint, checked against ``like`` (one line naming the entry), on ``like``'s device in
    its own dtype."""
    theirs = state[key]
    if not isinstance(theirs, Tensor) or theirs.shape != like.shape:
        raise ValueError(f"{SECTION} state {owner}.{key}: shape {tuple(getattr(theirs, 'shape', ()))} does not match "
                         f"{tuple(like.shape)} (a different unlabeled pool or number of classes?)")
    return theirs.to(like.device).clone()


I = TypeVar("I", bound=type[ImbAlgorithm])
IMB_ALGORITHMS: dict[str, type[ImbAlgorithm]] = {}


def register_imb_algorithm(name: str) -> Callable[[I], I]:
    """Class decorator: register under ``name`` (the ``imb_algorithm.name`` config value)."""
    def register(cls: I) -> I:
        return register_class(IMB_ALGORITHMS, name, cls, field=f"{SECTION}.name", name_attr="imb_name",
                              params_attr="imb_params_model", params_base=ImbParams,
                              params_rule="an ImbParams model", declaration_errors=_declaration_errors)
    return register


def _declaration_errors(cls: type[ImbAlgorithm]) -> list[str]:
    """The problems of an imbalance algorithm's loss terms (it may add none) and its bases, one line each."""
    errors = term_name_errors(cls.__qualname__, cls.imb_terms) if cls.imb_terms != () else []
    return errors + [f"{cls.__qualname__}.bases: {b!r} is not a registered algorithm" for b in cls.bases
                     if b not in ALGORITHMS]


def base_errors(imb_name: str, base_name: str) -> list[str]:
    """One line where imbalance algorithm ``imb_name`` does not compose with ``algorithm.name`` ``base_name``."""
    if imb_name not in IMB_ALGORITHMS:
        return [f"{SECTION}.name={shown(imb_name)}: unknown; registered: {', '.join(sorted(IMB_ALGORITHMS))}"]
    allowed = IMB_ALGORITHMS[imb_name].bases
    if base_name in allowed:
        return []
    return [f"algorithm.name={shown(base_name)}: imbalance algorithm {imb_name!r} composes with "
            f"{' or '.join(allowed)} only (docs/longtail.md); choose one of them or leave {SECTION} out"]


_COMPOSED: dict[tuple[str, str, str], type[Algorithm]] = {}


def compose(imb_name: str, base_name: str, imb_values: Mapping[str, Any]) -> type[Algorithm]:
    """The class of ``base_name`` with imbalance algorithm ``imb_name`` (parameters ``imb_values``) composed in, as
    USB's ``get_imb_algorithm`` makes it; ``ValueError`` (one line) where they do not compose."""
    errors = base_errors(imb_name, base_name)
    if errors:
        raise ValueError(errors[0])
    imb_cls, base_cls = IMB_ALGORITHMS[imb_name], ALGORITHMS[base_name]
    params = imb_cls.imb_params_model.parse(imb_values, imb_name)
    key = (imb_name, base_name, params.model_dump_json())
    if key not in _COMPOSED:
        _COMPOSED[key] = type(f"{imb_cls.__name__}{base_cls.__name__}", (imb_cls, base_cls), {
            "imb_params": params, "terms": base_cls.terms + imb_cls.imb_terms, "__module__": imb_cls.__module__})
    return _COMPOSED[key]


def algorithm_class(cfg: Any) -> type[Algorithm]:
    """The algorithm class a run config trains: ``algorithm.name``'s, composed with ``imb_algorithm`` where set."""
    imb = getattr(cfg, SECTION, None)
    if imb is None:
        return ALGORITHMS[cfg.algorithm.name]
    return compose(imb.name, cfg.algorithm.name, dict(imb.__pydantic_extra__))


def declared_terms() -> frozenset[str]:
    """Every loss term a registered algorithm or imbalance algorithm declares: what ``train/<term>`` may name."""
    return algorithm_terms() | frozenset(t for cls in IMB_ALGORITHMS.values() for t in cls.imb_terms)


def imb_algorithms_markdown() -> list[str]:
    """The registered imbalance algorithms as a Markdown table (for docs/config.md)."""
    lines = [f"Registered imbalance algorithms (`{SECTION}.name`), composed with the base `algorithm.name` as USB "
             "composes them: the bases each allows, its parameters, the terms it adds (`train/<term>`), the head "
             "evaluated and what it needs at USB's epoch boundaries:", "",
             "| `imb_algorithm.name` | method | bases | parameters = default (allowed) | terms | evaluated head | "
             "epoch needs |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for name, cls in sorted(IMB_ALGORITHMS.items()):
        summary = " ".join((cls.__doc__ or "").strip().split("\n\n")[0].split())
        needs = [n for n, on in (("epoch progress", cls.epoch_needs.progress),
                                 ("the pool's logits", cls.epoch_needs.pool_logits)) if on]
        lines.append(f"| `{name}` | {summary} | {', '.join(cls.bases)} | {params_markdown(cls.imb_params_model)} | "
                     f"{', '.join(f'`{t}`' for t in cls.imb_terms) or 'none'} | "
                     f"{'`heads.' + cls.evaluated_head + '`' if cls.evaluated_head else 'the TPC'} | "
                     f"{', '.join(needs) or 'none'} |")
    return lines


EPOCH_STEPS_DOC = (f"Steps of USB's epoch (num_train_iter // epoch; {USB_EPOCH_STEPS} in its classic-CV-imb configs); "
                   "0 = one pass over the unlabeled pool.")
