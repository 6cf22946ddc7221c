"""Dash (Xu et al., "Dash: Semi-Supervised Learning with Dynamic Thresholding", ICML 2021) on FixMatch, as USB
runs it: a supervised warm-up, then unlabeled samples are kept while the loss of their weak view against its own
pseudo-label is below a threshold that decays stage by stage.

    warm-up (``warmup_steps``): L = L_sup only; at its end rho_hat = the EMA model's mean cross-entropy on the
        validation split, or, without one, on the labeled training images (never the test split; USB's ``evaluate``
        reads its test loader)
    rho_t = max(C gamma^{-(t-1)} rho_hat, rho_min), t = 1, 2, ... per ``stage_steps`` steps        (Eq. 5)
    L = L_sup + lambda_p * 1/muB sum 1(H(\\hat y^w, p^w) <= rho_t) H(\\hat y^w, p^s)                  (Eq. 4)

with \\hat y^w = softmax(z^w / T) (soft) until rho_t reaches rho_min and argmax z^w from then on (USB's switch).
USB runs its warm-up *before* its 2^20 steps on labeled batches alone (its LR schedule advancing through it); here
the warm-up is the first ``warmup_steps`` of the run, whose unlabeled views are computed but unused.
"""
from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from mutexmatch.algorithms.base import Algorithm, StepInputs, StepOutput, TrainContext, register_algorithm
from mutexmatch.losses import soft_cross_entropy
from mutexmatch.params import AboveOne, Positive, PositiveConsistencyParams, PositiveSteps, Steps
from mutexmatch.selection import dash_mask, dash_targets, dash_threshold


class DashParams(PositiveConsistencyParams.without("_DashBase", dist_align=False)):
    """Dash: the warm-up, the threshold schedule's gamma, C, rho_min and stage length, T and lambda_p."""

    temperature: Positive = Field(0.5, description="[T] Dash: temperature of the soft pseudo-label "
                               "softmax(z^w / T) used until rho_t reaches rho_min.")
    gamma: AboveOne = Field(1.27, description="[γ] Dash: per-stage decay of the loss threshold rho_t (Eq. 5).")
    c: Positive = Field(1.0001, description="[C] Dash: scale of the first threshold, rho_1 = C rho_hat (Eq. 5).")
    rho_min: Positive = Field(0.05, description="[ρ_min] Dash: floor of the loss threshold; reaching it switches "
                           "to hard pseudo-labels.")
    warmup_steps: Steps = Field(2048, description="Dash: supervised-only steps at the start of the run; rho_hat "
                              "is measured at their end (validation split, else the labeled images; never test).")
    stage_steps: PositiveSteps = Field(10240, description="Dash: steps per threshold stage (USB: 10 epochs of 1024).")


@register_algorithm("dash")
class Dash(Algorithm):
    """Dash: supervised warm-up, then FixMatch's consistency on the unlabeled samples whose own weak-view loss is
    below the decaying threshold rho_t (Xu et al. 2021, Eqs. 4-5)."""

    terms = ("sup", "p")
    Params = DashParams
    params: DashParams

    def __init__(self, params: Mapping[str, Any], ctx: TrainContext) -> None:
        super().__init__(params, ctx)
        self.rho_init: float | None = None     # rho_hat, set once by set_rho_init at the end of the warm-up
        if self.params.warmup_steps >= ctx.total_steps:   # the default 2048 outlasts a short run without a word
            warnings.warn(f"algorithm.warmup_steps={self.params.warmup_steps} >= train.iterations={ctx.total_steps}: "
                          "Dash never uses the unlabeled data in this run (its warm-up is supervised only); lower "
                          "algorithm.warmup_steps or raise train.iterations", stacklevel=2)
        if self.params.warmup_steps == 0 and ctx.reference_loss is not None and ctx.ema_model is not None:
            self.set_rho_init(ctx.reference_loss(ctx.ema_model))   # no warm-up: the initial model's loss

    def after_step(self, step: int) -> None:
        """At the end of the warm-up, rho_hat = the EMA model's mean loss on the validation split (else the labeled
        images; never test): the trainer's ``TrainContext.reference_loss``, one host sync, once per run."""
        if step + 1 != self.params.warmup_steps or self.rho_init is not None:
            return
        if self.ctx.reference_loss is None or self.ctx.ema_model is None:
            raise RuntimeError("Dash: rho_hat needs the trainer's reference_loss and EMA model (TrainContext); "
                               "without a trainer call set_rho_init")
        self.set_rho_init(self.ctx.reference_loss(self.ctx.ema_model))

    def set_rho_init(self, loss: float) -> None:
        if not (loss >= 0.0 and loss < float("inf")):
            raise ValueError(f"Dash rho_hat: the warm-up model's mean loss must be finite and >= 0, got {loss}")
        self.rho_init = float(loss)

    def rho(self, step: int) -> float:
        """rho_t at run step ``step`` (stages count from the warm-up's end)."""
        if self.rho_init is None:
            raise RuntimeError("Dash: rho_hat was never set (it is measured after the warm-up's last step)")
        p = self.params
        return dash_threshold(step - p.warmup_steps, self.rho_init, gamma=p.gamma, c=p.c, rho_min=p.rho_min,
                              steps_per_stage=p.stage_steps)

    def compute(self, model: nn.Module, inp: StepInputs) -> StepOutput:
        b, u = self._split(inp)
        logits_lb, logits_w, logits_s = model.tpc(inp.feats).split([b, u, u])
        sup = F.cross_entropy(logits_lb, inp.targets_lb)
        conf, argmax = torch.softmax(logits_w.detach(), dim=1).max(dim=1)
        if inp.step < self.params.warmup_steps:       # warm-up: labeled data only (diagnostics: no sample kept)
            return StepOutput(loss=sup, terms={"sup": sup, "p": torch.zeros_like(sup)}, mask=torch.zeros_like(conf),
                              conf=conf, pseudo_label=argmax)
        rho = self.rho(inp.step)
        hard = rho == self.params.rho_min
        targets = dash_targets(logits_w, hard=hard, temperature=self.params.temperature)   # \hat y^w
        mask = dash_mask(logits_w, targets, rho)                                           # 1(loss <= rho_t)
        per_row = F.cross_entropy(logits_s, targets, reduction="none") if hard else soft_cross_entropy(targets,
                                                                                                         logits_s)
        p = (per_row * mask).mean()
        return StepOutput(loss=sup + self.params.lambda_p * p, terms={"sup": sup, "p": p}, mask=mask, conf=conf,
                          pseudo_label=targets if hard else targets.argmax(dim=1), soft_target=None if hard else targets)

    def term_weights(self) -> dict[str, float]:
        return {"sup": 1.0, "p": self.params.lambda_p}

    def state_dict(self) -> dict[str, Any]:
        return {"rho_init": self.rho_init}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if set(state) != {"rho_init"}:
            raise ValueError(f"algorithm state for {self.name!r}: keys {sorted(state)} are not ['rho_init']")
        self.rho_init = None if state["rho_init"] is None else float(state["rho_init"])
