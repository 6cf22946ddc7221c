"""SequenceMatch (Nguyen, "SequenceMatch: Revisiting the design of weak-strong augmentations for Semi-supervised
learning", WACV 2024), as USB's code after 0.3.2 runs it (microsoft/Semi-supervised-learning,
semilearn/algorithms/sequencematch, commit 639cfbf; not in any PyPI release). The golden test
(tests/mutexmatch/algorithms/usb/test_usb_after_032_golden.py) was made by it.

FlexMatch (Curriculum Pseudo Labeling thresholds, :mod:`mutexmatch.algorithms.flexmatch`) with a *medium* view
between the weak and the strong one (the strong augmentation with one RandAugment operation: USB's RandAugment(1, 5)),
one forward of [labeled | weak | medium | strong], and three KL terms on the samples the mask keeps:

    L = L_sup + lambda_p (L_u + L_mw + L_sm + L_sw)
    L_mw = 1/muB sum_b mask_b KL(softmax(p^w_b / T) || p^m_b)      (medium towards weak)
    L_sm = 1/muB sum_b mask_b KL(softmax(p^m_b / T) || p^s_b)      (strong towards medium)
    L_sw = 1/muB sum_b mask_b KL(softmax(p^w_b / T) || p^s_b)      (strong towards weak)

with L_u FlexMatch's hard pseudo-label loss and T = 0.5 (``temperature``, USB's T). As in USB the targets are the
softmax of the *probabilities* p^w, p^m divided by T (USB treats them as logits) and detached, and the predictions
enter as log(softmax(.)). USB's ``train_step`` as published raises NameError at its end (``feat_dict`` is never set
in the concatenated-forward branch); the golden record was made with that name defined, which changes nothing else.
Its distribution-alignment hook is CReST's (imbalanced learning), so ``dist_align`` is fixed off.
"""
from __future__ import annotations

import torch.nn.functional as F
from pydantic import Field
from torch import Tensor, nn

from mutexmatch.algorithms.base import StepInputs, StepOutput, StepSpec, register_algorithm
from mutexmatch.algorithms.flexmatch import FlexMatch, FlexMatchParams
from mutexmatch.losses import fixmatch_loss
from mutexmatch.params import Positive


class SequenceMatchParams(FlexMatchParams.without("_SequenceMatchBase", dist_align=False)):
    """SequenceMatch: FlexMatch's tau and threshold warm-up, lambda_p (weighing L_u and the three KL terms alike, as
    USB's ulb_loss_ratio) and the targets' temperature. Defaults: USB's (p_cutoff 0.95, T 0.5, warm-up on)."""

    temperature: Positive = Field(0.5, description="[T] SequenceMatch: temperature of the KL targets (USB's T).")


def sequence_kl(target_probs: Tensor, logits: Tensor, mask: Tensor, temperature: float) -> Tensor:
    """1/muB sum_b mask_b KL(softmax(target_probs_b / T) || softmax(logits_b)), USB's form."""
    target = F.softmax(target_probs.detach() / temperature, dim=-1)
    return (F.kl_div(F.softmax(logits, dim=-1).log(), target, reduction="none").sum(dim=1) * mask).mean()


@register_algorithm("sequencematch")
class SequenceMatch(FlexMatch):
    """SequenceMatch: FlexMatch plus KL consistency along weak -> medium -> strong views (USB after 0.3.2)."""

    terms = ("sup", "p", "mw", "sm", "sw")
    Params = SequenceMatchParams
    params: SequenceMatchParams
    step = StepSpec(views=("lb", "weak", "medium", "strong"))

    def compute(self, model: nn.Module, inp: StepInputs) -> StepOutput:
        b, u = inp.num_lb, inp.num_ulb
        if inp.feats is None or inp.feats.dim() != 2 or inp.feats.shape[0] != b + 3 * u:
            raise ValueError(f"StepInputs.feats: shape {None if inp.feats is None else tuple(inp.feats.shape)} is "
                             f"not (B + 3 muB, D) with B={b}, muB={u} (SequenceMatch's views: {self.step.views})")
        logits_lb, logits_w, logits_m, logits_s = model.tpc(inp.feats).split([b, u, u, u])
        probs_w, probs_m = logits_w.detach().softmax(dim=1), logits_m.detach().softmax(dim=1)
        out = fixmatch_loss(logits_lb=logits_lb, targets_lb=inp.targets_lb, logits_w=logits_w, logits_s=logits_s,
                            mask=self.confidence_mask(probs_w, inp), probs_w=probs_w)
        t, mask = self.params.temperature, out["mask"]
        terms = {"sup": out["sup"], "p": out["p"], "mw": sequence_kl(probs_w, logits_m, mask, t),
                 "sm": sequence_kl(probs_m, logits_s, mask, t), "sw": sequence_kl(probs_w, logits_s, mask, t)}
        unsup = terms["p"] + terms["mw"] + terms["sm"] + terms["sw"]
        loss = terms["sup"] + self.params.lambda_p * unsup
        return StepOutput(loss=loss, terms=terms, **{f: out[f] for f in ("mask", "conf", "pseudo_label",
                                                                         "comp_label")})

    def term_weights(self) -> dict[str, float]:
        lam = self.params.lambda_p
        return {"sup": 1.0, "p": lam, "mw": lam, "sm": lam, "sw": lam}
