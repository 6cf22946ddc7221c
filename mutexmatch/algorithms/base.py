"""The algorithm contract: step inputs and outputs, the :class:`Algorithm` base, the registry.

Every module of the package :mod:`mutexmatch.algorithms` holds one method family and registers it with
:func:`register_algorithm`; importing the package imports every module in it, so a new module is registered
without touching any other file.

An algorithm turns the backbone features of one step's concatenated batch [labeled B | weak muB | strong muB] into
a :class:`StepOutput` (the loss and named diagnostics). ``compute`` is the same for all of them:

    views (p^w, confidence mask) -> base_terms (FixMatch / Algorithm 1: terms and L = sum_t lambda_t L_t)
        -> variant_terms (what an ablation swaps or adds; only then is L re-weighted, from term_weights)

so a paper ablation is a small subclass that replaces the term it ablates and nothing else. Each class declares its
hyper-parameters once, as its typed parameter model ``Params`` (:mod:`mutexmatch.params`: defaults, ranges, docs);
unknown or out-of-range values raise ``ValueError`` naming ``algorithm.<param>``, and the loss calls read
``self.params.<name>``. A variant drops parameters of its parent with ``Params.without(...)``, which fixes them.

Writing a new method (one module ``mutexmatch/algorithms/<name>.py``, nothing else):

- a class with ``@register_algorithm("<name>")`` and ``Params``, its parameter model (a subclass of
  :class:`~mutexmatch.params.AlgorithmParams`; inherit e.g. ``FixMatchParams`` for tau, lambda_p, dist_align);
- ``__init__(self, params, ctx)``: call ``super().__init__(params, ctx)``; :class:`TrainContext` ``ctx`` is all it
  gets from the trainer: ``num_classes``, the unlabeled pool ``unlabeled`` / ``num_unlabeled`` (validation
  excluded), ``labeled`` / ``labeled_counts`` / ``labeled_prior``, ``total_steps``, ``steps_per_epoch``, ``device``,
  ``ema_model``. Per-sample state has ``ctx.num_unlabeled`` rows indexed by ``StepInputs.pool_pos``;
- ``terms``: the loss terms it computes, by name (a class attribute, e.g. ``("sup", "p")``; inherited from its parent
  unless it adds or drops one): ``compute`` reports exactly these, each logged as ``train/<term>`` beside the weighted
  total ``train/loss``, and ``term_weights`` gives lambda_t for each;
- hooks: ``views`` / ``base_terms`` / ``variant_terms`` / ``term_weights`` (the step), ``align`` (distribution
  alignment, :mod:`mutexmatch.algorithms.alignment`), ``confidence_mask`` (thresholds, on each unlabeled batch; the
  step index is ``inp.step``), ``after_step(step)`` (after the optimiser and EMA updates);
- state in ``state_dict`` / ``load_state_dict`` (saved in checkpoints, restored bit for bit on resume); no host
  synchronisation in a step (``tests/mutexmatch/training/test_sync_free.py`` runs every registered algorithm on the
  meta device).

The step is declared too (:class:`StepSpec`, the class attribute ``step``). The default is the released code's: one
forward of the concatenation [labeled weak | unlabeled weak | unlabeled strong] (BatchNorm over all rows) whose
features arrive as ``StepInputs.feats``. An algorithm may declare other views (a second weak or strong view, the
strong view rotated with its rotation label, a strong view of the labeled batch, no strong view), made by the
trainer from the same generators (a batch stays a pure function of the generator state) and counted in its memory
check; with ``forward="separate"`` it gets the normalised views (``StepInputs.images``) and the forward function
``StepInputs.forward(x, update_bn=...)`` and runs its own forwards (separate batches, mixup, VAT's adversarial
direction), choosing per forward whether BatchNorm updates its running statistics; with ``teacher=True`` also
``StepInputs.teacher(x)``, features by the EMA weights without gradient and without touching any running
statistics (Mean Teacher). Extra heads (projection MLPs, a rotation head) come from the classmethod ``heads``: the
trainer attaches them to the model (``model.heads[name]``) before the optimiser, the EMA, ``train.compile`` and
checkpoints see it. The machinery is :mod:`mutexmatch.training.extended_step`.

The confidence threshold is a seam: :meth:`FixMatch.confidence_mask` turns p^w into the high-confidence mask
1(max p^w >= tau) of Eq. (p), with access to the unlabeled indices and the algorithm's own state
(:meth:`Algorithm.state_dict`, saved in checkpoints); an algorithm with per-class or adaptive thresholds overrides
only it. The losses take the mask, not tau.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

import torch
from torch import Tensor, nn

from mutexmatch.algorithms.alignment import DistributionAlignment
from mutexmatch.checks import check_int
from mutexmatch.metrics import term_name_errors
from mutexmatch.params import AlgorithmParams
from mutexmatch.params import markdown as params_markdown
from mutexmatch.registry import register_class


LABELED_VIEWS = ("lb", "lb_strong")                                     # of the labeled batch
UNLABELED_VIEWS = ("weak", "strong", "weak2", "strong2", "rotated", "medium")   # of the unlabeled batch
FORWARDS = ("concat", "separate")


@dataclass(frozen=True)
class StepSpec:
    """What the trainer makes and runs for one step of an algorithm (``Algorithm.step``), declared once.

    ``views``, in the order they are made (the augmentation generators' draw order) and concatenated: ``lb`` (the
    labeled batch, weak; always first), ``lb_strong`` (the labeled batch, strong), ``weak``, ``strong``, ``weak2``,
    ``strong2`` (independent augmentations of the unlabeled batch) and ``rotated`` (the ``strong`` view rotated by
    k x 90 degrees, k uniform in 0..3 per image: ``StepInputs.rot_label``) and ``medium`` (the strong augmentation
    with one RandAugment operation instead of three: SequenceMatch's, USB's RandAugment(1, 5)). ``forward``: ``concat`` (the trainer
    forwards all views as one batch; ``StepInputs.feats``) or ``separate`` (``StepInputs.images`` and ``.forward``:
    the algorithm runs its forwards). ``teacher``: ``StepInputs.teacher`` (EMA weights). ``extra_forwards``: further
    forwards of an unlabeled batch whose activations the step keeps (VAT's x + r_adv), for the memory check."""

    views: tuple[str, ...] = ("lb", "weak", "strong")
    forward: str = "concat"
    teacher: bool = False
    extra_forwards: int = 0

    def errors(self, owner: str) -> list[str]:
        """One line per problem with the declaration (checked at registration)."""
        v, known = self.views, LABELED_VIEWS + UNLABELED_VIEWS
        errors = [f"{owner}.step.views: {n!r} is not a view; views are {', '.join(known)}" for n in v if n not in known]
        if not v or v[0] != "lb":
            errors.append(f"{owner}.step.views={v!r}: must start with 'lb' (the labeled batch)")
        if len(set(v)) != len(v):
            errors.append(f"{owner}.step.views={v!r}: a view is named twice")
        if [n for n in v if n in LABELED_VIEWS] != list(v[:sum(n in LABELED_VIEWS for n in v)]):
            errors.append(f"{owner}.step.views={v!r}: the labeled views (lb, lb_strong) come first")
        if "rotated" in v and ("strong" not in v or v.index("strong") > v.index("rotated")):
            errors.append(f"{owner}.step.views={v!r}: 'rotated' rotates the 'strong' view, which must come before it")
        if self.forward not in FORWARDS:
            errors.append(f"{owner}.step.forward={self.forward!r}: must be one of {', '.join(FORWARDS)}")
        if self.teacher and self.forward != "separate":
            errors.append(f"{owner}.step.teacher=True: needs forward='separate' (the algorithm runs the teacher)")
        if not isinstance(self.extra_forwards, int) or self.extra_forwards < 0:
            errors.append(f"{owner}.step.extra_forwards={self.extra_forwards!r}: must be an integer >= 0")
        return errors

    def made(self, with_unlabeled: bool) -> tuple[str, ...]:
        """The views a step makes (without unlabeled data: the labeled ones)."""
        return self.views if with_unlabeled else tuple(n for n in self.views if n in LABELED_VIEWS)

    def rows(self, num_lb: int, num_ulb: int) -> list[int]:
        """Rows of each made view, in order."""
        return [num_lb if n in LABELED_VIEWS else num_ulb for n in self.made(num_ulb > 0)]

    def images_per_step(self, batch_size: int, mu: int, with_unlabeled: bool, forwards: bool = True) -> int:
        """Images one step makes (``forwards``: plus the extra forwards' batches, what its activations hold)."""
        ulb = batch_size * mu if with_unlabeled else 0
        extra = self.extra_forwards * ulb if forwards else 0
        return sum(self.rows(batch_size, ulb)) + extra


@dataclass
class StepInputs:
    """What the trainer hands an algorithm each step."""

    feats: Tensor | None     # concat step: backbone features of the views concatenated ([lb B | weak muB | strong
                             # muB] by default), (B + k muB, D); None for a separate step
    num_lb: int              # B
    num_ulb: int             # muB (0 for algorithms with uses_unlabeled False)
    targets_lb: Tensor       # (B,) int64
    ulb_idx: Tensor          # (muB,) int64 dataset indices of the unlabeled images
    step: int                # 0-based step about to be taken (the step count before it)
    ulb_pos: Tensor | None = None   # (muB,) int64 positions in the pool TrainContext.unlabeled, 0..N_u-1: the index
                                    # of per-sample state; None: the pool is the whole dataset (ulb_pos = ulb_idx)
    lb_pos: Tensor | None = None    # (B,) int64 positions of the labeled rows in TrainContext.labeled: the index of
                                    # per-labeled-image state (SimMatch's bank); None where there is no labeled set
    # A separate step (StepSpec.forward "separate"): the normalised views by name, and the forward functions.
    images: Mapping[str, Tensor] | None = None
    forward: Callable[..., Tensor] | None = None    # forward(x, update_bn=True) -> fp32 features (the model's)
    teacher: Callable[[Tensor], Tensor] | None = None   # teacher(x) -> fp32 features by the EMA weights, no grad
    rot_label: Tensor | None = None                 # (muB,) int64 k of the 'rotated' view (k x 90 degrees)

    def view(self, name: str) -> Tensor:
        """The normalised images of view ``name`` (a separate step)."""
        if self.images is None or name not in self.images:
            raise ValueError(f"StepInputs.images: no view {name!r} (this step has "
                             f"{sorted(self.images or {})}); declare it in the algorithm's StepSpec views")
        return self.images[name]

    @property
    def pool_pos(self) -> Tensor:
        """Positions of this batch's unlabeled images in the pool (the index for per-sample state)."""
        return self.ulb_idx if self.ulb_pos is None else self.ulb_pos


@dataclass(frozen=True)
class TrainContext:
    """What an algorithm gets from the trainer, once, when it is built: the seam (never the trainer itself).

    The unlabeled pool is the images unlabeled batches are drawn from, validation images excluded; per-sample state
    has ``num_unlabeled`` rows indexed by ``StepInputs.pool_pos``. ``ema_model`` is the EMA of the model (the
    evaluated one), built before the algorithm; it is None where there is no trainer (unit tests)."""

    num_classes: int
    unlabeled: Tensor                # (N_u,) int64 dataset indices of the unlabeled pool
    labeled: Tensor                  # (N_l,) int64 dataset indices of the labeled set
    labeled_counts: Tensor           # (C,) int64 class histogram of the labeled set
    total_steps: int                 # train.iterations
    steps_per_epoch: int             # steps of one pass over the unlabeled pool: ceil(N_u / muB) (labeled: / B)
    device: torch.device = torch.device("cpu")
    ema_model: nn.Module | None = None
    # A model's mean cross-entropy on the validation split, or on the labeled images where there is none (never the
    # test split); ``reference_split`` names which. One host sync per call: for a one-off measurement (Dash's rho).
    reference_loss: Callable[[nn.Module], float] | None = None
    reference_split: str = "none"
    # A model's logits on the whole unlabeled pool, in the pool's order (``unlabeled``): its evaluated head in eval mode
    # on the un-augmented images. Imbalance algorithms read it at USB's epoch boundaries (Adsh, SAW: USB's
    # evaluate('eval_ulb')); one forward over the pool per call. None where there is no trainer.
    pool_logits: Callable[[nn.Module], Tensor] | None = None

    @property
    def num_unlabeled(self) -> int:
        return len(self.unlabeled)

    @property
    def labeled_prior(self) -> Tensor:
        """The labeled set's class distribution p(y) (float, sums to 1)."""
        return self.labeled_counts.float() / self.labeled_counts.sum().clamp_min(1)

    @classmethod
    def synthetic(cls, num_classes: int, num_unlabeled: int = 0, *, num_labeled_per_class: int = 1,
                  total_steps: int = 1000, steps_per_epoch: int = 100) -> "TrainContext":
        """A context without a trainer (tests, benchmarks): pool = dataset indices 0..num_unlabeled-1, a balanced
        labeled set of ``num_labeled_per_class`` per class."""
        check_int("num_classes", num_classes, low=2, high=1 << 20)
        check_int("num_unlabeled", num_unlabeled, low=0, high=1 << 40)
        counts = torch.full((num_classes,), num_labeled_per_class, dtype=torch.long)
        return cls(num_classes, torch.arange(num_unlabeled), torch.arange(int(counts.sum())), counts, total_steps,
                   steps_per_epoch)


@dataclass
class StepOutput:
    """One step of an algorithm: the loss to minimise and named diagnostics (detached, None where an algorithm
    has no such thing); the trainer accumulates them per evaluation."""

    loss: Tensor                            # L = sum_t lambda_t L_t (Eq. allloss), weighted once
    terms: dict[str, Tensor]                # unweighted scalar terms by name: sup, sep, p, n, ab1, nce
    mask: Tensor | None = None              # (muB,) float 1(max p^w >= tau): the confidence mask
    conf: Tensor | None = None              # (muB,) max p^w
    pseudo_label: Tensor | None = None      # (muB,) \hat p^w = argmax p^w
    comp_label: Tensor | None = None        # (muB,) the complementary label L_sep trains the TNC on (weak rows)
    tnc_comp_label: Tensor | None = None    # (muB,) argmax r^w: the TNC's "what it is not"
    neg_mask: Tensor | None = None          # (muB, C) UPS negative labels, several per row (fixmatch_nce)
    soft_target: Tensor | None = None       # (muB, C) a soft consistency target (UDA's sharpened p^w, Dash)
    # For a composed imbalance algorithm (mutexmatch.imb_algorithms): a separate-forward base's backbone features by
    # view name (USB's out_dict['feat']), reported where the class sets wants_view_feats; the imbalance algorithm's
    # own diagnostics (its head's masks, pseudo-labels) by name.
    view_feats: dict[str, Tensor] | None = None
    extra: dict[str, Tensor] | None = None


@dataclass
class Views:
    """The per-step tensors the loss terms read; fields an algorithm does not need stay None."""

    num_lb: int
    targets_lb: Tensor
    logits_lb: Tensor
    logits_w: Tensor | None = None
    logits_s: Tensor | None = None
    probs_w: Tensor | None = None         # p^w, detached, distribution-aligned when dist_align is on
    mask: Tensor | None = None            # 1(max p^w >= tau) per unlabeled row, float: Algorithm.confidence_mask
    feats_w: Tensor | None = None
    feats_s: Tensor | None = None
    tnc_w: Tensor | None = None           # TNC logits on the weak view (detached features unless sep_stop_grad off)
    tnc_s: Tensor | None = None           # TNC logits on the strong view, attached
    sep_logits: Tensor | None = None      # official form: detached TPC logits of all rows (weak block aligned)
    sep_tnc: Tensor | None = None         # official form: TNC logits of all rows on detached features




class Algorithm:
    """Base class: typed hyper-parameters ``params``, optional distribution alignment, the shared ``compute``.

    Built once per run from its parameters by name (missing ones take their defaults) and the trainer's
    :class:`TrainContext` ``ctx`` (also kept as ``self.ctx``). Hooks a subclass may override, all called without
    the trainer: ``compute`` per step (``views`` -> ``base_terms`` -> ``variant_terms``), ``align`` (distribution
    alignment of p^w, FixMatch family), ``confidence_mask`` (the threshold, FixMatch family, on each unlabeled
    batch) and ``after_step`` (after the optimiser and EMA updates). State goes through ``state_dict``.
    """

    name: ClassVar[str] = "<unregistered>"
    uses_tnc: ClassVar[bool] = False         # False: the model is built without a TNC and no TNC work is done
    uses_unlabeled: ClassVar[bool] = True    # False: the trainer builds no unlabeled batches
    # The loss terms compute() reports (StepOutput.terms), each logged as train/<term> beside train/loss: the one
    # declaration the step accumulator, the metric names, the docs and the registry tests read.
    terms: ClassVar[tuple[str, ...]] = ()
    Params: ClassVar[type[AlgorithmParams]] = AlgorithmParams
    step: ClassVar[StepSpec] = StepSpec()    # the views and forwards of a step (the default: one concatenated forward)
    # Set in a class composed with an imbalance algorithm (mutexmatch.imb_algorithms): a separate-forward step
    # reports StepOutput.view_feats, and the terms it adds after this class's compute are not this compute's.
    wants_view_feats: ClassVar[bool] = False
    imb_terms: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def heads(cls, params: AlgorithmParams, feat_dim: int, num_classes: int) -> dict[str, nn.Module]:
        """Extra heads by name (projection MLPs, a rotation head), built from the algorithm's parameters: the
        trainer attaches them as ``model.heads[name]`` before the optimiser, the EMA, ``train.compile`` and
        checkpoints see the model (their weights are drawn right after the model's). None by default."""
        return {}

    @classmethod
    def setup_model(cls, params: AlgorithmParams, model: nn.Module, ema_decay: float) -> None:
        """Adjust the built model (its heads attached) before it moves to the training device and the optimiser,
        the EMA, ``train.compile`` and checkpoints see it; ``ema_decay`` is ``train.ema``. It must draw no random
        numbers. Nothing by default (MutexMatch's ``form: official`` ties the WRN's BatchNorm momentum to it)."""

    @classmethod
    def state_memory(cls, params: AlgorithmParams, batch_size: int, mu: int, num_classes: int
                     ) -> tuple[int, str, str]:
        """Bytes of the state the algorithm allocates on the training device beside the model and the batch (a
        memory bank), what it is in words and the field that sizes it, for the run's memory check
        (:func:`mutexmatch.training.memory.check_memory`); ``(0, "", "")`` by default."""
        return 0, "", ""

    def __init__(self, params: Mapping[str, Any], ctx: TrainContext) -> None:
        if not isinstance(ctx, TrainContext):
            raise TypeError(f"{type(self).__name__}: ctx must be a TrainContext, got {type(ctx).__name__}")
        self.ctx = ctx
        self.num_classes = check_int("num_classes", ctx.num_classes, low=2, high=1 << 20)
        self.num_unlabeled = ctx.num_unlabeled
        self.params = self.Params.parse(params, self.name, self.num_classes)
        self.dist_align = DistributionAlignment.from_params(self.params, ctx)

    def after_step(self, step: int) -> None:
        """Called after step ``step``'s optimiser and EMA updates (``self.ctx.ema_model`` is current); nothing by
        default."""

    @classmethod
    def params_from(cls, section: Any) -> dict[str, Any]:
        """This algorithm's parameters read off a config section (any object with them as attributes)."""
        return {name: getattr(section, name) for name in cls.Params.model_fields}

    def compute(self, model: nn.Module, inp: StepInputs) -> StepOutput:
        """One step's loss and named diagnostics: views -> the loss function (its terms and its weighted total
        L = sum_t lambda_t L_t, Eq. allloss) -> an ablation's swapped or added terms, re-weighted only then."""
        views = self.views(model, inp)
        out = self.base_terms(views)
        swapped = self.variant_terms(out, views)
        out.update(swapped)
        weights = {t: w for t, w in self.term_weights().items() if t not in self.imb_terms}
        loss = out["loss"] if swapped.keys().isdisjoint(weights) else sum(w * out[t] for t, w in weights.items())
        return StepOutput(loss=loss, terms={t: out[t] for t in self.terms if t not in self.imb_terms}, **{
            f: out.get(f) for f in ("mask", "conf", "pseudo_label", "comp_label", "tnc_comp_label", "neg_mask")})

    def views(self, model: nn.Module, inp: StepInputs) -> Views:
        raise NotImplementedError

    def base_terms(self, v: Views) -> dict[str, Tensor]:
        raise NotImplementedError

    def variant_terms(self, out: dict[str, Tensor], v: Views) -> dict[str, Tensor]:
        """Terms (and diagnostics) an ablation replaces or adds; none by default."""
        return {}

    def term_weights(self) -> dict[str, float]:
        """lambda_t of every term of ``terms``, in the order the loss function sums them (its total is used unless an
        ablation swaps or adds a term)."""
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        return {} if self.dist_align is None else {"dist_align": self.dist_align.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if set(state) != set(self.state_dict()):
            raise ValueError(f"algorithm state for {self.name!r}: keys {sorted(state)} do not match "
                             f"{sorted(self.state_dict())} (was dist_align changed since the checkpoint?)")
        if self.dist_align is not None:
            self.dist_align.load_state_dict(state["dist_align"])

    def _split(self, inp: StepInputs) -> tuple[int, int]:
        b, u = inp.num_lb, inp.num_ulb
        if inp.feats is None:
            raise ValueError(f"StepInputs.feats: None; algorithm {self.name!r} takes the concatenated forward's "
                             "features (its StepSpec forward is 'concat')")
        if inp.feats.dim() != 2 or inp.feats.shape[0] != b + 2 * u:
            raise ValueError(f"StepInputs.feats: shape {tuple(inp.feats.shape)} is not (B + 2 muB, D) with "
                             f"B={b}, muB={u}")
        if inp.targets_lb.dtype != torch.int64 or tuple(inp.targets_lb.shape) != (b,):
            raise ValueError(f"StepInputs.targets_lb: must be int64 of shape ({b},), got "
                             f"{inp.targets_lb.dtype} {tuple(inp.targets_lb.shape)}")
        return b, u


A = TypeVar("A", bound=type[Algorithm])
ALGORITHMS: dict[str, type[Algorithm]] = {}


def register_algorithm(name: str) -> Callable[[A], A]:
    """Class decorator: register under ``name`` (the ``algorithm.name`` config value)."""
    def register(cls: A) -> A:
        register_class(ALGORITHMS, name, cls, field="algorithm.name", name_attr="name", params_attr="Params",
                       params_base=AlgorithmParams, params_rule="a mutexmatch.params.AlgorithmParams model",
                       declaration_errors=_declaration_errors)
        if "Params" in cls.__dict__ and cls.Params.pinned:  # made by Params.without: picklable as <algorithm>.Params
            cls.Params.__module__, cls.Params.__qualname__ = cls.__module__, f"{cls.__qualname__}.Params"
        return cls
    return register


def _declaration_errors(cls: type[Algorithm]) -> list[str]:
    """The problems of an algorithm's loss terms and its step, one line each."""
    return term_name_errors(cls.__qualname__, cls.terms) + (
        cls.step.errors(cls.__qualname__) if isinstance(cls.step, StepSpec) else
        [f"{cls.__qualname__}.step: must be a StepSpec, got {type(cls.step).__name__}"])


def declared_terms() -> frozenset[str]:
    """Every loss term a registered algorithm declares (``Algorithm.terms``); with the imbalance algorithms' terms:
    :func:`mutexmatch.imb_algorithms.declared_terms`."""
    return frozenset(t for cls in ALGORITHMS.values() for t in cls.terms)


def algorithms_markdown() -> list[str]:
    """The registered algorithms, the parameters each reads and the loss terms each logs, as a Markdown table (for
    docs/config.md)."""
    lines = ["Registered algorithms (`algorithm.name`), the parameters each reads (its parameter model; a field "
             "it does not read may not be set) and the loss terms each logs (`train/<term>`, beside the weighted "
             "total `train/loss`):", "",
             "| `algorithm.name` | method | parameters = default (allowed) | terms |", "| --- | --- | --- | --- |"]
    for name, cls in sorted(ALGORITHMS.items()):
        summary = " ".join((cls.__doc__ or "").strip().split("\n\n")[0].split())
        terms = ", ".join(f"`{t}`" for t in cls.terms)
        lines.append(f"| `{name}` | {summary} | {params_markdown(cls.Params)} | {terms} |")
    return lines


def build_algorithm(name: str, params: Mapping[str, Any], ctx: TrainContext) -> Algorithm:
    if name not in ALGORITHMS:
        raise ValueError(f"algorithm.name={name!r}: must be one of {sorted(ALGORITHMS)}")
    return ALGORITHMS[name](params, ctx)


