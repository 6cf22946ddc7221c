"""The paper's TNC learning-scheme ablations (Section "Ablation Study on the Learning Scheme of TNC"; Table "nce"):
Hard-Hard, Rand-Soft and Rev-Norm, each a MutexMatch that swaps one term."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from mutexmatch.algorithms.base import Views, register_algorithm
from mutexmatch.algorithms.mutexmatch import MutexMatch
from mutexmatch.losses import soft_cross_entropy
from mutexmatch.params import MutexMatchParams


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
    distribution. The TNC then learns only from this consistency (loss L_sup + L_p + L_ab2): its terms are sup, p and
    n (= L_ab2); there is no sep to log."""

    terms = ("sup", "p", "n")
    Params = MutexMatchParams.without("MutexMatchRevNormParams", form="paper", k="C", lambda_sep=0.0,
                                      sep_stop_grad=True, tnc_target="soft", comp_rank=1)

    def variant_terms(self, out: dict[str, Tensor], v: Views) -> dict[str, Tensor]:
        new = super().variant_terms(out, v)
        q_w = 1.0 - self.r_w(v)
        q_w = q_w / q_w.sum(dim=1, keepdim=True)                                       # q^w = Norm(1 - r^w)
        return {**new, "n": (self.tnc_weight(out) * soft_cross_entropy(q_w, v.tnc_s)).mean()}

    def term_weights(self) -> dict[str, float]:
        return {"sup": 1.0, "p": self.params.lambda_p, "n": self.params.lambda_n}

