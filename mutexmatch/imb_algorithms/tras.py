"""TRAS, Transfer and Share (Wei, Liu, Shi, Tu & Guo, "Transfer and Share: Semi-Supervised Learning from Long-Tailed
Data", Machine Learning 2022), in two forms. FixMatch only (USB's rule).

- ``form: usb``: semilearn 0.3.2's ``imb_algorithms/tras`` (the lockstep test is its reference). Its prior is
  pi_c = min_c' n_c' / n_c, the *inverse* of the class frequency, so every logit adjustment below has the opposite
  sign of the authors' (la = -log of the frequency + a constant): the TPC's pseudo-labels and the head's targets
  favour the head classes, and so does the evaluated head (measured: docs/longtail.md, "Long-tailed digits").
- ``form: official``: the authors' released code (Stomach-ache/TRAS@c62ec01, ``train.py``: ``compute_adjustment``,
  ``balanced_softmax_loss``, ``KL``; golden values in tests/mutexmatch/imb_algorithms/test_tras_official.py):
  pi_c = n_c / sum n (the labeled frequency), and the head's unlabeled target is the TPC's logits on the strong
  view (the teacher: "transfer"), not the head's own on the weak view.

la = log(pi^tro + 1e-12) (float64, as USB's numpy-derived prior); T = A softmax(-la) + B, the class-wise transfer
strength. FixMatch's probabilities are logit-adjusted from the first step (USB's compute_prob, the official
``targets_u2``): p^w = softmax(z^w - la), its mask and pseudo-labels read them.

From USB's epoch ``warmup_epochs`` on (epoch = step // ``epoch_steps``), an auxiliary linear head g
(``model.heads["tras"]``, USB's ``TRASNet.aux_classifier``) on the backbone features adds, unweighted,

  L_tras = CE(g(f_lb) + la, y_lb)
           - 1/muB sum_j mask_j sum_c softmax((t_j - T_{\\hat y_j} la) / 2)_c log softmax(g(f^s_j))_c

with q = softmax(g(f^w)) (no gradient), mask = 1(max q >= tau) (FixMatch's tau; the official code's 0.95), \\hat y =
argmax q, and the teacher t_j = g(f^w_j) (usb) or the TPC's z^s_j (official), no gradient (USB's TRASKLLoss, the
official KL, at temperature 1: the target softened by 2). Before, the head takes no part (``train/tras`` logs 0).
Evaluation and prediction use the auxiliary head. USB and the official code evaluate the TPC during the warm-up and
the head after it; ours evaluates the head throughout, so evaluations in the warm-up (10 of USB's 256 epochs) read
an untrained head. The official code's FixMatch draws two strong views (its L_u and L_tras average over both); ours
one.
"""
from __future__ import annotations

from typing import Any, Literal

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import Tensor, nn

from mutexmatch.algorithms.base import StepInputs, StepOutput
from mutexmatch.imb_algorithms.base import EPOCH_STEPS_DOC, ImbAlgorithm, ImbParams, register_imb_algorithm
from mutexmatch.params import USB_EPOCH_STEPS, Positive, Steps, Weight, earlier


class TrasParams(ImbParams):
    """TRAS: USB's get_argument defaults (USB ships no classic_cv_imb config for it)."""

    form: Literal["usb", "official"] = Field("usb", description="TRAS: `usb` = semilearn 0.3.2 (prior min n / n_c: "
                                             "every adjustment sign-reversed, favouring the head classes); "
                                             "`official` = the authors' code (prior n_c / sum n, the TPC's strong "
                                             "logits as the head's teacher); docs/longtail.md.",
                                             json_schema_extra=earlier("usb"))
    warmup_epochs: Steps = Field(10, description="TRAS: USB epochs before the auxiliary head trains and is "
                                 "evaluated (USB's tras_warmup_epochs).")
    a: Weight = Field(2.0, description="[A] TRAS: scale of the transfer strength T = A softmax(-la) + B (USB's tras_A).")
    b: Weight = Field(2.0, description="[B] TRAS: offset of the transfer strength (USB's tras_B).")
    tro: Positive = Field(1.0, description="[tro] TRAS: exponent of the prior in la = log(pi^tro) (USB's tras_tro).")
    epoch_steps: Steps = Field(USB_EPOCH_STEPS, description=f"TRAS: {EPOCH_STEPS_DOC}")


@register_imb_algorithm("tras")
class TRAS(ImbAlgorithm):
    """TRAS (Wei et al., 2022): a logit-adjusted auxiliary head distilled from the TPC's adjusted predictions; it is
    the head evaluated after the warm-up; `form` usb (USB's, sign-reversed prior) or official (the authors')."""

    imb_params_model = TrasParams
    imb: TrasParams
    imb_terms = ("tras",)
    bases = ("fixmatch",)
    evaluated_head = "tras"

    @classmethod
    def imb_heads(cls, params: ImbParams, feat_dim: int, num_classes: int) -> dict[str, nn.Module]:
        return {"tras": nn.Linear(feat_dim, num_classes)}

    def imb_init(self) -> None:
        counts = self.ctx.labeled_counts.to(self.ctx.device, torch.float64)
        prior = counts.min() / counts if self.imb.form == "usb" else counts / counts.sum()
        self.tras_la = torch.log(prior ** self.imb.tro + 1e-12)
        self.tras_strength = self.imb.a * torch.softmax(-self.tras_la / 1, dim=0) + self.imb.b

    def imb_term_weights(self) -> dict[str, float]:
        return {"tras": 1.0}

    def align(self, probs_w: Tensor, logits_lb: Tensor) -> Tensor:
        """USB's TRAS.compute_prob: FixMatch's probabilities logit-adjusted, softmax(z^w - la), written as
        softmax(log p^w - la) (log softmax differs from z by a per-row constant, which softmax ignores); float64 as
        USB's; then the base's alignment."""
        adjusted = torch.softmax(torch.log(probs_w) - self.tras_la.to(probs_w.device), dim=1)
        return super().align(adjusted, logits_lb)                           # type: ignore[misc]

    def _warming(self, step: int) -> bool:
        return step // (self.imb.epoch_steps or self.ctx.steps_per_epoch) < self.imb.warmup_epochs

    def compute(self, model: nn.Module, inp: StepInputs) -> StepOutput:
        out = super().compute(model, inp)                                   # type: ignore[misc]
        if inp.num_ulb == 0:
            raise ValueError("imb_algorithm.name='tras': needs unlabeled batches (its base draws none)")
        if self._warming(inp.step):
            return self.add_terms(out, {"tras": torch.zeros((), device=out.loss.device)}, {})
        feats = self.view_features(inp, out)
        head = model.heads["tras"]
        logits_w = head(feats["weak"].detach()).detach()
        # the teacher t (module doc): the head's own weak logits (usb) or the TPC's strong logits (official)
        teacher = logits_w if self.imb.form == "usb" else model.tpc(feats["strong"]).detach()
        terms, diagnostics = self.tras_loss(head(feats["lb"]), inp.targets_lb, head(feats["strong"]), logits_w,
                                            teacher)
        return self.add_terms(out, terms, diagnostics)

    def tras_loss(self, logits_lb: Tensor, y_lb: Tensor, logits_s: Tensor, logits_w: Tensor, teacher: Tensor
                  ) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
        """L_tras (module doc) on the auxiliary head's logits g(f) and the teacher's t, and its mask and
        pseudo-labels (from the head's weak logits)."""
        la = self.tras_la.to(logits_lb.device)
        sup = F.cross_entropy(logits_lb + la, y_lb)
        conf, pseudo = torch.softmax(logits_w, dim=-1).max(dim=-1)
        mask = conf.ge(self.params.tau).to(conf.dtype)
        la_u = la.expand(len(logits_s), -1) * self.tras_strength.to(la.device)[pseudo][:, None]
        target = F.softmax((teacher - la_u) / 2, dim=1)
        unsup = -torch.mean(torch.sum(target * F.log_softmax(logits_s, dim=1), dim=1) * mask)
        return {"tras": sup + unsup}, {"tras_mask": mask, "tras_pseudo_label": pseudo, "tras_conf": conf}

    def imb_state_dict(self) -> dict[str, Any]:
        return {}     # la and T are the labeled set's, rebuilt from the context
