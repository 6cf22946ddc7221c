"""Test-only algorithms written against the public API, registered for every test in this folder (so the
registry-parametrised tests run them too): FlexMatch-style per-class thresholds through the threshold seam, with a
parameter of its own (``algorithm.warmup``) declared only here; and an extended step with every view and an extra
head (``extended_demo``)."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from pydantic import Field
from torch import Tensor, nn
import torch.nn.functional as F

from mutexmatch.algorithms import (Algorithm, FixMatch, StepInputs, StepOutput, StepSpec, TrainContext,
                                   register_algorithm)
from mutexmatch.params import FixMatchParams


class FlexMatchDemoParams(FixMatchParams):
    """FixMatch's parameters plus FlexMatch's threshold warm-up switch."""

    warmup: bool = Field(False, description="Threshold warm-up: beta(c) = sigma(c) / max(max_c sigma, N - sum sigma) "
                         "(FlexMatch's Eq. 7) instead of sigma(c) / max_c sigma.")


@register_algorithm("flexmatch_demo")
class FlexMatchDemo(FixMatch):
    """FlexMatch-style curriculum pseudo-labelling (Zhang et al., NeurIPS 2021, Eqs. 6-7).

    Class c's threshold is T(c) = M(beta(c)) tau with M(x) = x / (2 - x) and beta(c) = sigma(c) / max_c sigma
    (with ``warmup``: / max(max_c sigma, N - sum_c sigma)), where sigma(c) counts the unlabeled samples whose latest
    prediction was c with max p^w > tau. The latest prediction of each of the N unlabeled samples (-1: none yet) is
    the algorithm's state.
    """

    Params = FlexMatchDemoParams
    params: FlexMatchDemoParams

    def __init__(self, params: Mapping[str, Any], ctx: TrainContext) -> None:
        super().__init__(params, ctx)
        self.selected = torch.full((ctx.num_unlabeled,), -1, dtype=torch.long)

    def confidence_mask(self, probs_w: Tensor, inp: StepInputs) -> Tensor:
        self.selected = self.selected.to(probs_w.device)
        conf, label = probs_w.max(dim=1)
        counts = torch.zeros(self.num_classes + 1, device=probs_w.device, dtype=torch.float).index_add_(
            0, self.selected + 1, torch.ones_like(self.selected, dtype=torch.float))   # slot 0: no prediction yet
        sigma = counts[1:]
        norm = torch.maximum(sigma.max(), counts[0]) if self.params.warmup else sigma.max()
        beta = sigma / norm.clamp_min(1.0)
        thresholds = beta / (2.0 - beta) * self.params.tau                     # T(c) = M(beta(c)) tau
        idx = inp.pool_pos   # position in the unlabeled pool (validation images are not in it)
        self.selected[idx] = torch.where(conf > self.params.tau, label, self.selected[idx])
        return (conf >= thresholds[label]).to(probs_w.dtype)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "selected": self.selected.detach().cpu().clone()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.selected = state["selected"].to(self.selected.device).clone()


@register_algorithm("extended_demo")
class ExtendedDemo(Algorithm):
    """Every view of the extended step in one concatenated forward, and an extra head: L_sup on both labeled views,
    a rotation loss (a head predicting k of the rotated view) and an MSE between the two strong views' predictions
    and the weak one's (a test of the seam, not a method)."""

    terms = ("sup", "rot", "mse")
    step = StepSpec(views=("lb", "lb_strong", "weak", "strong", "strong2", "weak2", "rotated"))

    @classmethod
    def heads(cls, params, feat_dim: int, num_classes: int) -> dict[str, nn.Module]:
        return {"rot": nn.Linear(feat_dim, 4)}

    def compute(self, model, inp: StepInputs) -> StepOutput:
        b, u = inp.num_lb, inp.num_ulb
        lb, lb_s, w, s, s2, w2, rot = inp.feats.split(self.step.rows(b, u))
        sup = (F.cross_entropy(model.tpc(lb), inp.targets_lb) + F.cross_entropy(model.tpc(lb_s), inp.targets_lb)) / 2
        rot_loss = F.cross_entropy(model.heads["rot"](rot), inp.rot_label)
        target = torch.softmax(model.tpc(torch.cat([w, w2])).detach(), 1)
        mse = F.mse_loss(torch.softmax(model.tpc(torch.cat([s, s2])), 1), target)
        return StepOutput(loss=sup + rot_loss + mse, terms={"sup": sup, "rot": rot_loss, "mse": mse},
                          pseudo_label=target[:u].argmax(1))

    def term_weights(self) -> dict[str, float]:
        return {"sup": 1.0, "rot": 1.0, "mse": 1.0}
