"""MutexMatch: Algorithm 1 of the paper (TPC + TNC), with its ablation knobs."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mutexmatch.algorithms.base import StepInputs, TrainContext, Views, register_algorithm
from mutexmatch.algorithms.fixmatch import FixMatch
from mutexmatch.losses import complementary_label, mutexmatch_loss, negative_consistency
from mutexmatch.params import MutexMatchParams, resolve_k


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
    terms = ("sup", "sep", "p", "n")
    Params = MutexMatchParams
    params: MutexMatchParams

    def __init__(self, params: Mapping[str, Any], ctx: TrainContext) -> None:
        super().__init__(params, ctx)
        self.k: int = resolve_k(self.params.k, self.num_classes)

    @classmethod
    def setup_model(cls, params: MutexMatchParams, model: nn.Module, ema_decay: float) -> None:
        if params.form == "official":  # the released code's WRN: BatchNorm momentum = 1 - EMA decay
            model.backbone.tie_bn_momentum_to_ema(ema_decay)

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

