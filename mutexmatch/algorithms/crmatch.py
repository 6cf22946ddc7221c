"""CRMatch (Fan, Kukleva, Dai & Schiele, "Revisiting Consistency Regularization for Deep Semi-supervised
Learning", IJCV 2022), as USB 0.3.2's ``train_step`` runs it (the lockstep test's reference).

One forward of [labeled | weak | strong | rotated] (BatchNorm over all rows, USB's ``use_cat``), then

    L = L_sup + lambda_p L_u + lambda_fd L_fd + lambda_rot L_rot

- L_u: FixMatch's thresholded hard pseudo-label loss (Eq. p), 1/muB sum_b 1(max p^w_b >= tau) H(argmax p^w_b, p^s_b);
- L_fd, the feature distance loss: a linear head h (``model.heads["ds"]``) maps the weak and the strong view's
  features, and 1/muB sum_b 1(max p^w_b >= tau) max(0, cos(h(f^s_b), h(f^w_b))) pushes the two apart (torch's
  cosine embedding loss with target -1, margin 0), while L_u keeps their predictions equal; the gradient reaches
  both views (neither is detached, as in USB);
- L_rot: cross-entropy of the rotation head r (``model.heads["rot"]``: Linear(D, D), ReLU, Linear(D, 4)) on the
  rotated view against its rotation k.

USB fixes every weight at 1 (its ``train_step`` reads neither ``ulb_loss_ratio`` nor the value of
``rot_loss_ratio``, which only switches the rotation head on): the defaults here. Where ours differs from USB, on
purpose (docs/training.md, DeFixMatch and CRMatch):

- h reads the pooled features, USB's form for ViT/BERT backbones; for a WRN/ResNet USB's h reads the flattened
  final feature map (8 x 8 x D on CIFAR), which the trainer's step does not hand an algorithm;
- the rotated rows are the trainer's ``rotated`` view, the muB strong views each rotated by a random k x 90 degrees
  (ReMixMatch's), where USB rotates B weakly augmented images of a separate unlabeled draw by all four k (4B rows).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from mutexmatch.algorithms.base import StepInputs, StepOutput, StepSpec, register_algorithm
from mutexmatch.algorithms.fixmatch import FixMatch
from mutexmatch.losses import fixmatch_loss
from mutexmatch.params import FixMatchParams, Weight

ROTATIONS = 4


class CRMatchParams(FixMatchParams.without("_CRMatchBase", dist_align=False)):
    """CRMatch: FixMatch's tau and L_u weight, the weights of the feature distance and rotation losses. Defaults:
    USB 0.3.2's classic-CV CRMatch configs (p_cutoff 0.95; every weight 1, as its ``train_step`` fixes them)."""

    lambda_fd: Weight = Field(1.0, description="[λ_fd] CRMatch: weight of the feature distance loss L_fd.")
    lambda_rot: Weight = Field(1.0, description="[λ_rot] CRMatch: weight of the rotation loss (0: no rotation "
                               "head; the rotated view is still made).")


@register_algorithm("crmatch")
class CRMatch(FixMatch):
    """CRMatch: FixMatch plus a feature distance loss between the weak and strong views' projected features and a
    rotation prediction loss (Fan et al. 2022)."""

    terms = ("sup", "p", "fd", "rot")
    Params = CRMatchParams
    params: CRMatchParams
    step = StepSpec(views=("lb", "weak", "strong", "rotated"))

    @classmethod
    def heads(cls, params: CRMatchParams, feat_dim: int, num_classes: int) -> dict[str, nn.Module]:
        """h (``ds``, USB's ``ds_classifier``) and, unless ``lambda_rot`` is 0, r (``rot``, its ``rot_classifier``)."""
        heads: dict[str, nn.Module] = {"ds": nn.Linear(feat_dim, feat_dim)}
        if params.lambda_rot > 0:
            heads["rot"] = nn.Sequential(nn.Linear(feat_dim, feat_dim), nn.ReLU(), nn.Linear(feat_dim, ROTATIONS))
        return heads

    def compute(self, model: nn.Module, inp: StepInputs) -> StepOutput:
        b, u = inp.num_lb, inp.num_ulb
        if inp.feats is None or inp.feats.dim() != 2 or inp.feats.shape[0] != b + 3 * u:
            raise ValueError(f"StepInputs.feats: shape {None if inp.feats is None else tuple(inp.feats.shape)} is "
                             f"not (B + 3 muB, D) with B={b}, muB={u} (CRMatch's views: {self.step.views})")
        feats_lb, feats_w, feats_s, feats_rot = inp.feats.split([b, u, u, u])
        logits_lb, logits_w, logits_s = model.tpc(torch.cat([feats_lb, feats_w, feats_s])).split([b, u, u])
        probs_w = logits_w.detach().softmax(dim=1)
        out = fixmatch_loss(logits_lb=logits_lb, targets_lb=inp.targets_lb, logits_w=logits_w, logits_s=logits_s,
                            mask=self.confidence_mask(probs_w, inp), probs_w=probs_w)
        proj_w, proj_s = model.heads["ds"](torch.cat([feats_w, feats_s])).chunk(2)
        apart = F.cosine_embedding_loss(proj_s, proj_w, -torch.ones(u, device=proj_s.device), reduction="none")
        fd = (apart * out["mask"]).mean()
        rot = (F.cross_entropy(model.heads["rot"](feats_rot), inp.rot_label) if self.params.lambda_rot > 0
               else torch.zeros_like(fd))
        terms = {"sup": out["sup"], "p": out["p"], "fd": fd, "rot": rot}
        loss = sum(w * terms[t] for t, w in self.term_weights().items())
        return StepOutput(loss=loss, terms=terms, **{f: out[f] for f in ("mask", "conf", "pseudo_label",
                                                                         "comp_label")})

    def term_weights(self) -> dict[str, float]:
        p = self.params
        return {"sup": 1.0, "p": p.lambda_p, "fd": p.lambda_fd, "rot": p.lambda_rot}
