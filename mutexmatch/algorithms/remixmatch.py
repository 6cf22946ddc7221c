"""ReMixMatch (Berthelot et al., ICLR 2020), as USB 0.3.2's ``train_step`` runs it (the lockstep test's reference).

Per step, with the views [labeled | weak | strong | strong2 | strong rotated by k x 90 degrees]:

- distribution alignment of the weak view's prediction towards the labeled set's class distribution (Sec. 3.2):
  p~ <- Normalize(p^w (p(y) + eps) / (E[p^w] + eps)), E an EMA (momentum 0.999) of the batch means, USB's form
  (the alignment piece with estimate ``ema``, target ``labeled``, ratio ``usb``; the paper's running average over
  128 batches is ``da_estimate: queue``, ``da_window: 128``), then q = Sharpen(p~, T) (MixMatch's Eq. 7);
- MixUp (:mod:`mutexmatch.algorithms.mixmatch`) of [labeled | strong | strong2 | weak] with targets
  [one-hot | q | q | q], the mixed batch forwarded in chunks of B rows (only the first updates BatchNorm);
- L = H(y'_x, p(x'_x)) + lambda_kl w(t) H(q, p(strong)) + lambda_U w(t) H(y'_u, p(x'_u)) + lambda_rot H(k,
  r(strong rotated)), with w(t) = min(t / (``unsup_warm_up`` T), 1) and r the rotation head on the backbone
  features (``model.heads["rot"]``, Linear(D, 4)). H(q, p(strong)) is the paper's pre-mixup loss L_U1 (USB's
  ``kl_loss_ratio``; the paper's KL and this cross-entropy differ by q's entropy, a constant of the weights).

The weak view's forward runs without gradient, and every forward but the first mixed chunk outside BatchNorm's
running statistics, as USB's ``bn_controller`` does. USB also forwards the labeled batch and the second strong view
alone and never uses their outputs; those forwards are left out (no effect on the loss, the gradients or the
statistics).
"""
from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import Tensor, nn

from mutexmatch.algorithms.base import Algorithm, StepInputs, StepOutput, StepSpec, register_algorithm
from mutexmatch.algorithms.mixmatch import draw_mixup, mixed_logits, mixup, sharpen
from mutexmatch.losses import soft_cross_entropy
from mutexmatch.params import DistAlignParams, Fraction, Positive, Weight
from mutexmatch.selection import rampup_weight


class ReMixMatchParams(DistAlignParams.without("_ReMixMatchAlignment", dist_align=True)):
    """ReMixMatch: the weights of the mixed unlabeled loss, the pre-mixup loss and the rotation loss, their ramp-up,
    the sharpening temperature, MixUp's Beta parameter and distribution alignment (always on; towards the labeled
    distribution with USB's EMA by default). Defaults: USB 0.3.2's classic-CV ReMixMatch config
    (config/classic_cv/remixmatch/remixmatch_cifar10_40_0.yaml)."""

    da_estimate: Literal["queue", "ema"] = Field("ema", description="ReMixMatch alignment estimate: USB's EMA "
                                                 "(`ema`) or the paper's queue of `da_window` batch means.")
    da_target: Literal["uniform", "labeled", "model"] = Field("labeled", description="ReMixMatch alignment target: "
                                                              "the labeled set's class histogram.")
    da_ratio: Literal["filled", "usb"] = Field("usb", description="Form of p(y) / p~(y) (docs/training.md); USB's "
                                               "(p(y) + 1e-6) / (p~(y) + 1e-6) by default.")
    lambda_p: Weight = Field(1.5, description="[λ_U] ReMixMatch: weight of the mixed unlabeled rows' cross-entropy.")
    lambda_kl: Weight = Field(0.5, description="[λ_U1] ReMixMatch: weight of the pre-mixup loss H(q, p(strong)).")
    lambda_rot: Weight = Field(0.5, description="[λ_r] ReMixMatch: weight of the rotation loss (0: no rotation head).")
    temperature: Positive = Field(0.5, description="[T] sharpening temperature of the guessed labels.")
    mixup_alpha: Positive = Field(0.75, description="[α] MixUp: λ ~ Beta(α, α), λ' = max(λ, 1 − λ).")
    unsup_warm_up: Fraction = Field(1 / 64, description="Fraction of the run over which the unlabeled weights ramp "
                                    "up linearly from 0 (USB's `unsup_warm_up`).")


@register_algorithm("remixmatch")
class ReMixMatch(Algorithm):
    """ReMixMatch: distribution alignment towards the labeled distribution, sharpened guesses, MixUp of labeled and
    strong views, the pre-mixup loss on the first strong view and rotation prediction."""

    terms = ("sup", "p", "kl", "rot")
    Params = ReMixMatchParams
    params: ReMixMatchParams
    step = StepSpec(views=("lb", "weak", "strong", "strong2", "rotated"), forward="separate")

    @classmethod
    def heads(cls, params: ReMixMatchParams, feat_dim: int, num_classes: int) -> dict[str, nn.Module]:
        """The rotation head (``model.heads["rot"]``: 4 rotations), unless ``lambda_rot`` is 0."""
        return {"rot": nn.Linear(feat_dim, 4)} if params.lambda_rot > 0 else {}

    def compute(self, model: nn.Module, inp: StepInputs) -> StepOutput:
        p, b = self.params, inp.num_lb
        x_lb, x_w, x_s0, x_s1, x_rot = (inp.view(v) for v in self.step.views)
        with torch.no_grad():
            feats_w = inp.forward(x_w, update_bn=False)
            probs_w = torch.softmax(model.tpc(feats_w), dim=1)
            # da_target=model aligns towards the model's running mean on labeled data: one more forward of the
            # labeled view, statistics untouched (issue 33: it crashed at step 0); the other targets skip it.
            probs_lb = (torch.softmax(model.tpc(inp.forward(x_lb, update_bn=False)), dim=1)
                        if p.da_target == "model" else None)
            guess = sharpen(self.dist_align(probs_w, probs_lb), p.temperature)
        feats_s0 = inp.forward(x_s0, update_bn=False)
        logits_s0 = model.tpc(feats_s0)
        targets = torch.cat([F.one_hot(inp.targets_lb, self.num_classes).to(guess.dtype), guess, guess, guess])
        inputs = torch.cat([x_lb, x_s0, x_s1, x_w])
        mixed_x, mixed_y = mixup(inputs, targets, *draw_mixup(len(inputs), p.mixup_alpha))
        logits = mixed_logits(model, inp, mixed_x)
        sup = self.soft_loss("sup", mixed_y[:b], logits[0])
        unsup = self.soft_loss("p", mixed_y[b:], torch.cat(logits[1:]))
        kl = self.soft_loss("kl", guess, logits_s0)
        rot = (F.cross_entropy(model.heads["rot"](inp.forward(x_rot, update_bn=False)), inp.rot_label)
               if p.lambda_rot > 0 else torch.zeros_like(sup))
        w = rampup_weight(inp.step, self.ctx.total_steps, p.unsup_warm_up)
        loss = sup + p.lambda_kl * w * kl + p.lambda_p * w * unsup + p.lambda_rot * rot
        conf, pseudo_label = guess.max(dim=1)
        # Composed with an imbalance algorithm: USB's feat dict, its labeled batch forwarded alone (BatchNorm frozen)
        view_feats = ({"lb": inp.forward(x_lb, update_bn=False), "weak": feats_w, "strong": feats_s0}
                      if self.wants_view_feats else None)
        return StepOutput(loss=loss, terms={"sup": sup, "p": unsup, "kl": kl, "rot": rot}, conf=conf,
                          pseudo_label=pseudo_label, soft_target=guess, view_feats=view_feats)

    def soft_loss(self, term: str, targets: Tensor, logits: Tensor) -> Tensor:
        """Term ``term`` (``sup``, ``p``, ``kl``): the mean soft cross-entropy H(targets, softmax(logits)) over the
        rows; the seam an imbalance algorithm weighs per row (SAW, as USB's SAW losses replace ce/consistency)."""
        return soft_cross_entropy(targets, logits).mean()

    def term_weights(self) -> dict[str, float]:
        p = self.params
        return {"sup": 1.0, "p": p.lambda_p, "kl": p.lambda_kl, "rot": p.lambda_rot}
