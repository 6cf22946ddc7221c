"""DeFixMatch (Schmutz, Humbert & Mattei, "Don't fear the unlabelled: safe semi-supervised learning via
debiasing", ICLR 2023), as USB 0.3.2's ``train_step`` runs it (the lockstep test's reference).

The debiased risk (the paper's Eq. 4 with FixMatch's L_u) subtracts the unlabeled loss measured on the labeled
images, treated as if unlabeled, so that the pseudo-label term is an unbiased estimate of zero in expectation:

    L = 1/2 (H(y, p(x_lb)) + H(y, p(A(x_lb))))                                     L_sup, both labeled views
        + lambda_p (1/muB sum_b 1(max p^w_b >= tau) H(argmax p^w_b, p(A(u_b))))     L_u (FixMatch's Eq. p)
        - lambda_p (1/B sum_i 1(max p(x_i) >= tau) H(argmax p(x_i), p(A(x_i))))     L_anti, the labeled rows

with A the strong augmentation and hard pseudo-labels (USB's default ``hard_label``). One forward of
[labeled weak | labeled strong | unlabeled weak | unlabeled strong] (BatchNorm over all rows, USB's ``use_cat``).
USB's temperature ``T`` is read by no hard pseudo-label (nor by its soft ones, made from probabilities), so it is no
parameter here; its distribution-alignment hook is CReST's (imbalanced learning), so ``dist_align`` is fixed off.
"""
from __future__ import annotations

from torch import nn

from mutexmatch.algorithms.base import StepInputs, StepOutput, StepSpec, register_algorithm
from mutexmatch.algorithms.fixmatch import FixMatch
from mutexmatch.losses import confidence_mask, fixmatch_loss
from mutexmatch.params import FixMatchParams


class DeFixMatchParams(FixMatchParams.without("_DeFixMatchBase", dist_align=False)):
    """DeFixMatch: FixMatch's threshold tau and the weight lambda_p of the debiased unlabeled loss L_u - L_anti.
    Defaults: USB 0.3.2's classic-CV DeFixMatch configs (p_cutoff 0.95, ulb_loss_ratio 1.0)."""


@register_algorithm("defixmatch")
class DeFixMatch(FixMatch):
    """DeFixMatch: FixMatch debiased by its own unlabeled loss on the labeled images (weak and strong views of the
    labeled batch; Schmutz et al. 2023)."""

    terms = ("sup", "p", "anti")
    Params = DeFixMatchParams
    params: DeFixMatchParams
    step = StepSpec(views=("lb", "lb_strong", "weak", "strong"))

    def compute(self, model: nn.Module, inp: StepInputs) -> StepOutput:
        b, u = inp.num_lb, inp.num_ulb
        if inp.feats is None or inp.feats.dim() != 2 or inp.feats.shape[0] != 2 * b + 2 * u:
            raise ValueError(f"StepInputs.feats: shape {None if inp.feats is None else tuple(inp.feats.shape)} is "
                             f"not (2B + 2 muB, D) with B={b}, muB={u} (DeFixMatch's views: {self.step.views})")
        logits_lb, logits_lb_s, logits_w, logits_s = model.tpc(inp.feats).split([b, b, u, u])
        probs_w = logits_w.detach().softmax(dim=1)
        unlabeled = fixmatch_loss(logits_lb=logits_lb, targets_lb=inp.targets_lb, logits_w=logits_w,
                                  logits_s=logits_s, mask=self.confidence_mask(probs_w, inp), probs_w=probs_w)
        # The labeled batch as if unlabeled: its weak view pseudo-labels its strong view (L_anti); the same call's
        # supervised term is H(y, p(A(x_lb))), the second half of L_sup.
        probs_lb = logits_lb.detach().softmax(dim=1)
        labeled = fixmatch_loss(logits_lb=logits_lb_s, targets_lb=inp.targets_lb, logits_w=logits_lb,
                                logits_s=logits_lb_s, mask=confidence_mask(probs_lb, self.threshold),
                                probs_w=probs_lb)
        terms = {"sup": (unlabeled["sup"] + labeled["sup"]) / 2, "p": unlabeled["p"], "anti": labeled["p"]}
        loss = sum(w * terms[t] for t, w in self.term_weights().items())
        return StepOutput(loss=loss, terms=terms, **{f: unlabeled[f] for f in ("mask", "conf", "pseudo_label",
                                                                                 "comp_label")})

    def term_weights(self) -> dict[str, float]:
        """L_sup + lambda_p L_u - lambda_p L_anti: the debiasing term enters with the negative weight."""
        return {"sup": 1.0, "p": self.params.lambda_p, "anti": -self.params.lambda_p}
