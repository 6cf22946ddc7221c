"""Training algorithms as registered pieces: supervised, FixMatch, MutexMatch and the paper's ablations.

An algorithm turns the backbone features of one step's concatenated batch [labeled B | weak muB | strong muB] into
a :class:`StepOutput` (the loss and named diagnostics). ``compute`` is the same for all of them:

    views (p^w, confidence mask) -> base_terms (FixMatch / Algorithm 1: terms and L = sum_t lambda_t L_t)
        -> variant_terms (what an ablation swaps or adds; only then is L re-weighted, from term_weights)

so a paper ablation is a small subclass that replaces the term it ablates and nothing else. Each class declares its
hyper-parameters once, as its typed parameter model ``Params`` (:mod:`mutexmatch.params`: defaults, ranges, docs);
unknown or out-of-range values raise ``ValueError`` naming ``algorithm.<param>``, and the loss calls read
``self.params.<name>``. A variant drops parameters of its parent with ``Params.without(...)``, which fixes them.

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
import torch.nn.functional as F
from torch import Tensor, nn

from mutexmatch.losses import (complementary_label, confidence_mask, fixmatch_loss, mutexmatch_loss,
                               negative_consistency, soft_cross_entropy)
from mutexmatch.params import (AlgorithmParams, FixMatchParams, LowConfidenceParams, MutexMatchParams, NCEParams,
                               resolve_k, section_conflicts)
from mutexmatch.params import markdown as params_markdown
from mutexmatch.checks import check_int


@dataclass
class StepInputs:
    """What the trainer hands an algorithm each step."""

    feats: Tensor            # backbone features of [lb B | weak muB | strong muB], (B + 2 muB, D)
    num_lb: int              # B
    num_ulb: int             # muB (0 for algorithms with uses_unlabeled False)
    targets_lb: Tensor       # (B,) int64
    ulb_idx: Tensor          # (muB,) int64 dataset indices of the unlabeled images
    step: int


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


class DistributionAlignment:
    """ReMixMatch distribution alignment: p^w <- Normalize(p^w * p(y) / p~(y)).

    p(y), the labeled class prior, is taken as uniform: every split in this project draws num_labels / C labels per
    class. p~(y) is the mean over the last ``window`` batches (the current one included: it is recorded before
    aligning) of the batch-mean p^w. Works on detached probabilities; applied before threshold, pseudo-label, argmin.
    """

    def __init__(self, num_classes: int, window: int = 128) -> None:
        self.window = check_int("dist_align window", window, low=1, high=1 << 20)
        self.prior = torch.full((num_classes,), 1.0 / num_classes)
        self.history = torch.zeros(window, num_classes)
        self.count = 0

    @property
    def running_mean(self) -> Tensor:
        """p~(y); uniform before the first batch."""
        if self.count == 0:
            return self.prior.clone()
        return self.history[: min(self.count, self.window)].mean(dim=0)

    def __call__(self, probs: Tensor) -> Tensor:
        probs = probs.detach()
        if self.history.device != probs.device:
            self.history, self.prior = self.history.to(probs.device), self.prior.to(probs.device)
        self.history[self.count % self.window] = probs.float().mean(dim=0)
        self.count += 1
        # The floor only matters for a class whose probability underflowed to 0 in every recent batch.
        aligned = probs.float() * self.prior / self.running_mean.clamp_min(1e-12)
        return (aligned / aligned.sum(dim=1, keepdim=True)).to(probs.dtype)

    def state_dict(self) -> dict[str, Any]:
        return {"history": self.history.detach().cpu().clone(), "count": self.count}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        history = state["history"]
        if not isinstance(history, Tensor) or history.shape != self.history.shape:
            raise ValueError(f"dist_align state: history of shape {tuple(getattr(history, 'shape', ()))} does not "
                             f"match (window, C) = {tuple(self.history.shape)}")
        self.history = history.to(self.history.device, torch.float32).clone()
        self.count = check_int("dist_align state count", state["count"], low=0, high=1 << 62)


class Algorithm:
    """Base class: typed hyper-parameters ``params``, optional distribution alignment, the shared ``compute``.

    ``params`` holds the algorithm's parameters by name (missing ones take their defaults); ``num_unlabeled`` is the
    size of the unlabeled pool that ``StepInputs.ulb_idx`` indexes (0 when unknown), for per-sample state.
    """

    name: ClassVar[str] = "<unregistered>"
    uses_tnc: ClassVar[bool] = False         # False: the model is built without a TNC and no TNC work is done
    uses_unlabeled: ClassVar[bool] = True    # False: the trainer builds no unlabeled batches
    Params: ClassVar[type[AlgorithmParams]] = AlgorithmParams

    def __init__(self, params: Mapping[str, Any], num_classes: int, num_unlabeled: int = 0) -> None:
        self.num_classes = check_int("num_classes", num_classes, low=2, high=1 << 20)
        self.num_unlabeled = check_int("num_unlabeled", num_unlabeled, low=0, high=1 << 40)
        self.params = self.Params.parse(params, self.name, num_classes)
        self.dist_align = DistributionAlignment(num_classes) if getattr(self.params, "dist_align", False) else None

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
        weights = self.term_weights()
        loss = out["loss"] if swapped.keys().isdisjoint(weights) else sum(w * out[t] for t, w in weights.items())
        return StepOutput(loss=loss, terms={t: out[t] for t in weights}, **{
            f: out.get(f) for f in ("mask", "conf", "pseudo_label", "comp_label", "tnc_comp_label", "neg_mask")})

    def views(self, model: nn.Module, inp: StepInputs) -> Views:
        raise NotImplementedError

    def base_terms(self, v: Views) -> dict[str, Tensor]:
        raise NotImplementedError

    def variant_terms(self, out: dict[str, Tensor], v: Views) -> dict[str, Tensor]:
        """Terms (and diagnostics) an ablation replaces or adds; none by default."""
        return {}

    def term_weights(self) -> dict[str, float]:
        """lambda_t of every term, in the order the loss function sums them (its total is used unless an ablation
        swaps or adds a term)."""
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
        if name in ALGORITHMS:
            raise ValueError(f"algorithm.name={name!r}: already registered by {ALGORITHMS[name].__qualname__}")
        if not (isinstance(cls.Params, type) and issubclass(cls.Params, AlgorithmParams)):
            raise ValueError(f"{cls.__qualname__}.Params: must be a mutexmatch.params.AlgorithmParams model")
        redeclared = section_conflicts(cls.Params)
        if redeclared:
            raise ValueError(f"{cls.__qualname__}.Params: {redeclared} declared differently from the config's "
                             "algorithm section (inherit the shared declaration from a mutexmatch.params model)")
        if "Params" in cls.__dict__ and cls.Params.pinned:  # made by Params.without: picklable as <algorithm>.Params
            cls.Params.__module__, cls.Params.__qualname__ = cls.__module__, f"{cls.__qualname__}.Params"
        cls.name = name
        ALGORITHMS[name] = cls
        return cls
    return register


def algorithms_markdown() -> list[str]:
    """The registered algorithms and the parameters each reads, as a Markdown table (for docs/config.md)."""
    lines = ["Registered algorithms (`algorithm.name`) and the parameters each reads (its parameter model; a field "
             "it does not read may not be set):", "", "| `algorithm.name` | method | parameters = default (allowed) |",
             "| --- | --- | --- |"]
    for name, cls in ALGORITHMS.items():
        summary = " ".join((cls.__doc__ or "").strip().split("\n\n")[0].split())
        lines.append(f"| `{name}` | {summary} | {params_markdown(cls.Params)} |")
    return lines


def build_algorithm(name: str, params: Mapping[str, Any], num_classes: int, num_unlabeled: int = 0) -> Algorithm:
    if name not in ALGORITHMS:
        raise ValueError(f"algorithm.name={name!r}: must be one of {sorted(ALGORITHMS)}")
    return ALGORITHMS[name](params, num_classes, num_unlabeled)


# ----------------------------------------------------------------------------------------------------------------------
# Methods.
# ----------------------------------------------------------------------------------------------------------------------
@register_algorithm("supervised")
class Supervised(Algorithm):
    """Labeled data only: L_sup of Eq. (s)."""

    uses_unlabeled = False

    def views(self, model: nn.Module, inp: StepInputs) -> Views:
        b, _ = self._split(inp)
        return Views(num_lb=b, targets_lb=inp.targets_lb, logits_lb=model.tpc(inp.feats[:b]))

    def base_terms(self, v: Views) -> dict[str, Tensor]:
        sup = F.cross_entropy(v.logits_lb, v.targets_lb)
        return {"loss": sup, "sup": sup}

    def term_weights(self) -> dict[str, float]:
        return {"sup": 1.0}


@register_algorithm("fixmatch")
class FixMatch(Algorithm):
    """FixMatch: L_sup + lambda_p L_p (Eqs. s, p); ``dist_align`` gives the papers' "FixMatch w. DA" baseline."""

    Params = FixMatchParams
    params: FixMatchParams

    @property
    def threshold(self) -> float:
        return self.params.tau

    def confidence_mask(self, probs_w: Tensor, inp: StepInputs) -> Tensor:
        """The threshold seam: per unlabeled row (``inp.ulb_idx``) 1 where p^w is confident enough, else 0 (float,
        detached): here 1(max p^w >= tau) of Eq. (p). Override for per-class or adaptive thresholds, keeping any
        state in ``state_dict``."""
        return confidence_mask(probs_w, self.threshold)

    def views(self, model: nn.Module, inp: StepInputs) -> Views:
        b, u = self._split(inp)
        logits_lb, logits_w, logits_s = model.tpc(inp.feats).split([b, u, u])
        probs_w = torch.softmax(logits_w.detach(), dim=1)
        probs_w = probs_w if self.dist_align is None else self.dist_align(probs_w)
        _, feats_w, feats_s = inp.feats.split([b, u, u])
        return Views(num_lb=b, targets_lb=inp.targets_lb, logits_lb=logits_lb, logits_w=logits_w,
                     logits_s=logits_s, probs_w=probs_w, mask=self.confidence_mask(probs_w, inp), feats_w=feats_w,
                     feats_s=feats_s)

    def base_terms(self, v: Views) -> dict[str, Tensor]:
        return fixmatch_loss(logits_lb=v.logits_lb, targets_lb=v.targets_lb, logits_w=v.logits_w,
                             logits_s=v.logits_s, mask=v.mask, lambda_p=self.params.lambda_p, probs_w=v.probs_w)

    def term_weights(self) -> dict[str, float]:
        return {"sup": 1.0, "p": self.params.lambda_p}


@register_algorithm("mutexmatch")
class MutexMatch(FixMatch):
    """MutexMatch, Algorithm 1 / Eq. (allloss) (``form`` "paper") or the released code (``form`` "official").

    k: `C` by default (the paper's, Section "Consistency Regularization on TNC"), resolved to an integer here.
    Ablation knobs, defaults = MutexMatch:
    - sep_stop_grad: False restores the gradient on theta in Eq. (sep) (Table "ab", rows (i), (ii)).
    - tnc_consistency: "all" applies L_n to every unlabeled sample, not only 1(max p^w < tau) ones (Section
      "Consistency Regularization on TNC", (i), Table "crt").
    - tnc_target: "hard" sets r^w_i = 1 where g_i = 1 in Eq. (ln) (same section, (ii)): a multi-hot top-k target.
    - comp_rank m: the complementary label is the class with the m-th smallest p^w (Figure "arg"; m = 1: argmin).
    Turning L_sep / L_n / L_p off is lambda_sep / lambda_n / lambda_p = 0 (Table "ab", rows (iii)-(viii)).
    """

    uses_tnc = True
    Params = MutexMatchParams
    params: MutexMatchParams

    def __init__(self, params: Mapping[str, Any], num_classes: int, num_unlabeled: int = 0) -> None:
        super().__init__(params, num_classes, num_unlabeled)
        self.k: int = resolve_k(self.params.k, num_classes)

    def views(self, model: nn.Module, inp: StepInputs) -> Views:
        v = super().views(model, inp)
        if getattr(model, "tnc", None) is None:
            raise ValueError(f"algorithm {self.name!r} needs a TNC head, but model.tnc is None")
        b, u = v.num_lb, inp.num_ulb
        sep_feats = inp.feats.detach() if self.params.sep_stop_grad else inp.feats  # theta^ of Eq. (sep)
        if self.params.form == "official":
            v.sep_tnc = model.tnc(sep_feats)
            v.tnc_w = v.sep_tnc[b:b + u]
            # L_sep's complementary labels come from softmax(sep_logits); log p^w keeps the weak rows aligned.
            weak = v.logits_w if self.dist_align is None else v.probs_w.log()
            v.sep_logits = torch.cat([v.logits_lb, weak, v.logits_s]).detach()
        else:
            v.tnc_w = model.tnc(sep_feats[b:b + u])
        v.tnc_s = model.tnc(inp.feats[b + u:])
        return v

    def base_terms(self, v: Views) -> dict[str, Tensor]:
        p = self.params
        return mutexmatch_loss(logits_lb=v.logits_lb, targets_lb=v.targets_lb, logits_w=v.logits_w,
                               logits_s=v.logits_s, tnc_logits_w=v.tnc_w, tnc_logits_s=v.tnc_s, mask=v.mask,
                               k=self.k, lambda_sep=p.lambda_sep, lambda_p=p.lambda_p, lambda_n=p.lambda_n,
                               form=p.form, sep_logits=v.sep_logits, sep_tnc_logits=v.sep_tnc, probs_w=v.probs_w)

    def term_weights(self) -> dict[str, float]:
        p = self.params
        return {"sup": 1.0, "sep": p.lambda_sep, "p": p.lambda_p, "n": p.lambda_n}

    def variant_terms(self, out: dict[str, Tensor], v: Views) -> dict[str, Tensor]:
        new: dict[str, Tensor] = {}
        if self.params.comp_rank != 1:
            probs, tnc_logits, weak = self.sep_rows(v)
            comp = complementary_label(probs, self.params.comp_rank)
            new.update(sep=F.cross_entropy(tnc_logits, comp), comp_label=comp[weak])
        if self.params.tnc_consistency != "low" or self.params.tnc_target != "soft":
            ell = negative_consistency(self.r_w(v), v.tnc_s, k=self.k, form=self.params.form,
                                       hard=self.params.tnc_target == "hard")
            new["n"] = (self.tnc_weight(out) * ell).mean()
        return new

    # Helpers for the variants.
    def sep_rows(self, v: Views) -> tuple[Tensor, Tensor, slice]:
        """(detached TPC probabilities, TNC logits, weak-row slice) over the rows L_sep covers: weak rows (paper),
        all rows (official)."""
        if v.sep_logits is None:
            return v.probs_w, v.tnc_w, slice(None)
        return torch.softmax(v.sep_logits, dim=1), v.sep_tnc, slice(v.num_lb, v.num_lb + v.probs_w.shape[0])

    @staticmethod
    def r_w(v: Views) -> Tensor:
        return torch.softmax(v.tnc_w.detach(), dim=1)

    def tnc_weight(self, out: dict[str, Tensor]) -> Tensor:
        """Per-row weight of the TNC consistency: 1(max p^w < tau), or 1 for every sample with tnc_consistency=all."""
        return torch.ones_like(out["mask"]) if self.params.tnc_consistency == "all" else 1.0 - out["mask"]


@register_algorithm("mutexmatch_hard_hard")
class MutexMatchHardHard(MutexMatch):
    """Hard-Hard TNC scheme (Section "Ablation Study on the Learning Scheme of TNC", (i); Table "nce"): L_sep as in
    MutexMatch, L_n replaced by L_ab2 = 1/muB sum 1(max p^w < tau) H(argmax r^w, r^s) (top-1 hard target, no k)."""

    Params = MutexMatchParams.without("MutexMatchHardHardParams", k="C", tnc_target="soft")

    def variant_terms(self, out: dict[str, Tensor], v: Views) -> dict[str, Tensor]:
        new = super().variant_terms(out, v)
        ell = F.cross_entropy(v.tnc_s, self.r_w(v).argmax(dim=1), reduction="none")   # H(\hat r^w, r^s)
        return {**new, "n": (self.tnc_weight(out) * ell).mean()}


def random_complementary_label(probs: Tensor) -> Tensor:
    """\\hat gamma^w: a class drawn uniformly among those other than argmax p (the standard complementary label).
    Uses the global torch RNG, which the trainer seeds and checkpoints."""
    top = probs.argmax(dim=1)
    draw = torch.randint(probs.shape[1] - 1, top.shape, device=probs.device)
    return draw + (draw >= top).long()


@register_algorithm("mutexmatch_rand_soft")
class MutexMatchRandSoft(MutexMatch):
    """Rand-Soft TNC scheme (Section "Ablation Study on the Learning Scheme of TNC", (ii)): L_sep trained on a random
    non-argmax class \\hat gamma^w instead of argmin p^w; the soft TNC consistency L_n is unchanged."""

    Params = MutexMatchParams.without("MutexMatchRandSoftParams", comp_rank=1)

    def variant_terms(self, out: dict[str, Tensor], v: Views) -> dict[str, Tensor]:
        new = super().variant_terms(out, v)
        probs, tnc_logits, weak = self.sep_rows(v)
        gamma = random_complementary_label(probs)
        return {**new, "sep": F.cross_entropy(tnc_logits, gamma), "comp_label": gamma[weak]}


@register_algorithm("mutexmatch_rev_norm")
class MutexMatchRevNorm(MutexMatch):
    """Rev-Norm TNC scheme (Section "Ablation Study on the Learning Scheme of TNC", (iii)): no L_sep; L_n replaced by
    L_ab2 = 1/muB sum 1(max p^w < tau) H(q^w, r^s) with q^w = Norm(1 - r^w).

    Norm is read as L1 normalisation, q^w = (1 - r^w) / (C - 1): 1 - r^w already lies in [0, 1], and H needs a
    distribution. The TNC then learns only from this consistency (loss L_sup + L_p + L_ab2)."""

    Params = MutexMatchParams.without("MutexMatchRevNormParams", form="paper", k="C", lambda_sep=0.0,
                                      sep_stop_grad=True, tnc_target="soft", comp_rank=1)

    def variant_terms(self, out: dict[str, Tensor], v: Views) -> dict[str, Tensor]:
        new = super().variant_terms(out, v)
        q_w = 1.0 - self.r_w(v)
        q_w = q_w / q_w.sum(dim=1, keepdim=True)                                       # q^w = Norm(1 - r^w)
        return {**new, "sep": out["sep"].new_zeros(()),
                "n": (self.tnc_weight(out) * soft_cross_entropy(q_w, v.tnc_s)).mean()}


class _LowConfidence(FixMatch):
    """FixMatch plus lambda_ab1 L_ab1 on the low-confidence samples (Section "Utilization of Low-confidence
    Samples"; Table "r1" varies lambda_ab1, 0 = FixMatch). Subclasses give the per-row loss."""

    Params = LowConfidenceParams
    params: LowConfidenceParams

    def term_weights(self) -> dict[str, float]:
        return {**super().term_weights(), "ab1": self.params.lambda_ab1}

    def variant_terms(self, out: dict[str, Tensor], v: Views) -> dict[str, Tensor]:
        return {"ab1": ((1.0 - out["mask"]) * self.per_row(out, v)).mean()}

    def per_row(self, out: dict[str, Tensor], v: Views) -> Tensor:
        raise NotImplementedError


@register_algorithm("lowconf_full")
class LowConfFull(_LowConfidence):
    """FULL, setting (i): H(\\hat p^w, p^s) with the hard pseudo-label on low-confidence samples too."""

    def per_row(self, out: dict[str, Tensor], v: Views) -> Tensor:
        return F.cross_entropy(v.logits_s, out["pseudo_label"], reduction="none")


@register_algorithm("lowconf_soft")
class LowConfSoft(_LowConfidence):
    """SOFT, setting (ii): H(p^w, p^s) with the (detached) soft p^w as target."""

    def per_row(self, out: dict[str, Tensor], v: Views) -> Tensor:
        return soft_cross_entropy(v.probs_w, v.logits_s)


@register_algorithm("lowconf_mse")
class LowConfMSE(_LowConfidence):
    """MSE, setting (iii): E(z^w, z^s), the mean squared difference of the backbone features (mean over the feature
    dimension). The paper writes z^w = theta(x^w) without a stop-gradient, so both views receive gradient."""

    def per_row(self, out: dict[str, Tensor], v: Views) -> Tensor:
        return F.mse_loss(v.feats_w, v.feats_s, reduction="none").mean(dim=1)


@register_algorithm("fixmatch_nce")
class FixMatchNCE(FixMatch):
    """FixMatch with UPS's negative cross-entropy, no TNC (Section "Utilization of Low-confidence Samples", (iv), (v);
    Table "nce").

    Positive part: L_p with threshold tau_p. Negative labels (UPS): every class c with p^w_c <= tau_n,
    on every unlabeled sample. NCE per sample: -(1/s) sum_{negative c} log(1 - q_c), s = its number of negative
    labels, averaged over the muB samples, with
      nce_variant 1, 2 ("F w. NCE (1)/(2)"): q = softmax(logits_w), NCE learns the complementary labels directly;
                                             the two differ only in tau_p (table: 0.95 and 0.7);
      nce_variant 3 ("F w. NCE (3)"): q = p^s, the strong view, i.e. consistency between p^w and p^s by NCE.
    tau_p None takes the table's value for the variant; tau_n defaults to the table's 0.05. The NCE term has weight
    1 (the paper gives it none). UPS's uncertainty-based selection is not part of these ablations (the text selects
    by the two thresholds only)."""

    Params = NCEParams
    params: NCEParams
    TABLE_TAU_P: ClassVar[dict[int, float]] = {1: 0.95, 2: 0.7, 3: 0.95}

    @property
    def threshold(self) -> float:
        tau_p = self.params.tau_p
        return self.TABLE_TAU_P[self.params.nce_variant] if tau_p is None else tau_p

    def term_weights(self) -> dict[str, float]:
        return {**super().term_weights(), "nce": 1.0}

    def variant_terms(self, out: dict[str, Tensor], v: Views) -> dict[str, Tensor]:
        negative = (v.probs_w <= self.params.tau_n).to(v.probs_w.dtype)         # UPS negative labels, no gradient
        q = torch.softmax(v.logits_w if self.params.nce_variant in (1, 2) else v.logits_s, dim=1)
        # 1 - q is floored so a fully confident wrong prediction gives a large finite loss, not inf.
        ell = -(negative * (1.0 - q).clamp_min(1e-6).log()).sum(dim=1) / negative.sum(dim=1).clamp_min(1.0)
        return {"nce": ell.mean(), "neg_mask": negative}
