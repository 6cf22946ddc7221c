"""DARP, Distribution Aligning Refinery of Pseudo-labels (Kim et al., NeurIPS 2020), as USB 0.3.2 runs it
(``semilearn/imb_algorithms/darp``, after bbuing9/DARP's common.py; the lockstep test is its reference).

Every unlabeled sample n keeps its last weak-view probabilities \\hat q_n (``orig``, (N_u, C)). Once USB's epoch
(step // ``epoch_steps``) is past ``warmup_epochs`` (USB's test: epoch > warmup_epochs), every ``num_refine_iter``
steps the whole pool's \\hat q is refined towards the class sizes m_c = N_u p_lb(c) (the labeled set's class
distribution scaled to the pool):

1. initial solution: for each class c, from the last to the first, the int(alpha m_c) samples with the largest
   \\hat q_{nc} get a one-hot 1 in c, and w_c = (m_c + 1e-6) / (the sum of those \\hat q_{nc} + 1e-6);
   \\hat q <- normalise_rows(\\hat q * onehot * w + 1e-6);
2. the entropy-weighted projection of DARP's Eq. (5) onto {rows sum to 1, columns sum to m}: ``iter_t`` alternating
   steps of row normalisation and, per class, a secant search (``scipy.optimize.newton`` without a derivative,
   tol 0.1, at most 30 iterations) for the column multiplier;

the refined pool is kept, and between refinements each batch reads its rows. The base algorithm's pseudo-label is
argmax of the refined row; its confidence mask stays the base's, on the unrefined probabilities. Before the warm-up
ends nothing changes.

Host work: the refinement runs on the CPU (scipy), with one device-to-host copy of the pool's probabilities, once
every ``num_refine_iter`` steps after the warm-up; every other step only indexes device tensors.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from pydantic import Field
from scipy import optimize
from torch import Tensor, nn

from mutexmatch.algorithms.base import StepInputs, Views
from mutexmatch.imb_algorithms.base import (EPOCH_STEPS_DOC, ImbAlgorithm, ImbParams, register_imb_algorithm,
                                            state_tensor)
from mutexmatch.params import USB_EPOCH_STEPS, Positive, PositiveSteps, Steps


def target_sizes(labeled_counts: Tensor, num_unlabeled: int) -> Tensor:
    """m_c = N_u p_lb(c), float64 (USB: lb_dist * len(ulb) / lb_dist.sum(), in numpy)."""
    dist = labeled_counts.cpu().double().numpy() / labeled_counts.cpu().double().numpy().sum()
    return torch.tensor(dist * num_unlabeled / dist.sum())


@torch.no_grad()
def initial_solution(target: Tensor, saved: Tensor, alpha: float) -> tuple[Tensor, Tensor]:
    """Step 1's one-hot labels (N, C) and class weights w (C,) (USB's ``estimate_pseudo``)."""
    num_classes = saved.shape[1]
    labels, k_probs = torch.zeros(len(saved), num_classes), torch.zeros(num_classes)
    for c in range(num_classes):
        num = int(alpha * target[c])
        sorted_probs, idx = saved[:, c].sort(dim=0, descending=True)
        labels[idx[:num], c] = 1
        k_probs[c] = sorted_probs[:num].sum()
    return labels, (target + 1e-6) / (k_probs + 1e-6)


def _column_gap(x: float, a: np.ndarray, b: np.ndarray, c: np.ndarray, d: float) -> float:
    return np.sum(a * b * np.exp(-1 * x / c)) - d


@torch.no_grad()
def project(probs: Tensor, target: Tensor, num_iter: int, num_newton: int = 30) -> Tensor:
    """Step 2: ``probs`` (N, C, float64) projected onto row sums 1 and column sums ``target`` (USB's ``opt_solver``);
    float32."""
    w = (1 / (-1 * probs * torch.log(probs + 1e-6)).sum(1)).numpy()      # 1 / entropy per row
    a, c = probs.numpy(), target.numpy()
    n, k = a.shape
    a_e = a / math.e
    y_t, prev_y = np.exp(-1 * np.ones(k).reshape(1, -1) / w.reshape(-1, 1)), np.zeros(k)
    for _ in range(num_iter):
        x_t = np.ones(n) / np.sum(a_e * y_t, 1)
        y_t = np.array([optimize.newton(_column_gap, prev_y[i], maxiter=num_newton, args=(a_e[:, i], x_t, w, c[i]),
                                        tol=1.0e-01) for i in range(k)], dtype=np.float64)
        prev_y = y_t
        y_t = np.exp(-1 * y_t.reshape(1, -1) / w.reshape(-1, 1))
    x_t = np.ones(n) / np.sum(a_e * y_t, 1)
    return torch.Tensor(a_e * x_t.reshape(-1, 1) * y_t)


class DarpParams(ImbParams):
    """DARP: USB's get_argument defaults, as in its config/classic_cv_imb/fixmatch_darp configs."""

    warmup_epochs: Steps = Field(200, description="DARP: USB epochs before refining starts (refines once the epoch "
                                 "exceeds it; USB's darp_warmup_epochs).")
    alpha: Positive = Field(2.0, description="[alpha] DARP: the initial solution labels int(alpha m_c) samples of "
                            "each class (USB's darp_alpha).")
    iter_t: PositiveSteps = Field(10, description="[T] DARP: alternating steps of the projection (USB's darp_iter_T).")
    num_refine_iter: PositiveSteps = Field(10, description="DARP: refine the pool every this many steps (USB's "
                                           "darp_num_refine_iter).")
    epoch_steps: Steps = Field(USB_EPOCH_STEPS, description=f"DARP: {EPOCH_STEPS_DOC}")


@register_imb_algorithm("darp")
class DARP(ImbAlgorithm):
    """DARP (Kim et al., 2020): pseudo-labels refined so their class sizes follow the labeled distribution."""

    imb_params_model = DarpParams
    imb: DarpParams
    imb_terms = ()
    bases = ("fixmatch",)

    def imb_init(self) -> None:
        n, c = self.ctx.num_unlabeled, self.num_classes
        if n < 1:
            raise ValueError("imb_algorithm.name='darp': needs an unlabeled pool (TrainContext.unlabeled is empty)")
        self.darp_target = target_sizes(self.ctx.labeled_counts, n)
        self.darp_orig = torch.ones(n, c) / c
        self.darp_refined = torch.ones(n, c) / c

    def imb_term_weights(self) -> dict[str, float]:
        return {}

    def views(self, model: nn.Module, inp: StepInputs) -> Views:
        """The base's views with p^w replaced by the (refined) targets its pseudo-label is the argmax of."""
        v = super().views(model, inp)                                       # type: ignore[misc]
        v.probs_w = self.refine(v.probs_w, inp.pool_pos, inp.step)
        return v

    @torch.no_grad()
    def refine(self, probs_w: Tensor, pool_pos: Tensor, step: int) -> Tensor:
        """Records ``probs_w`` at ``pool_pos``; the batch's rows of the refined pool once past the warm-up (the
        pool refined first on every ``num_refine_iter``-th step), else ``probs_w``."""
        if self.darp_orig.device != probs_w.device:
            self.darp_orig, self.darp_refined = self.darp_orig.to(probs_w.device), self.darp_refined.to(probs_w.device)
        self.darp_orig[pool_pos] = probs_w.detach().to(self.darp_orig.dtype)
        if step // (self.imb.epoch_steps or self.ctx.steps_per_epoch) <= self.imb.warmup_epochs:
            return probs_w
        if step % self.imb.num_refine_iter == 0:
            saved = self.darp_orig.cpu()
            labels, weights = initial_solution(self.darp_target, saved, self.imb.alpha)
            scaled = saved * (labels * weights.reshape(1, -1)) + 1e-6
            refined = project(scaled / scaled.sum(dim=1, keepdim=True), self.darp_target, self.imb.iter_t)
            self.darp_refined = refined.to(probs_w.device)
        return self.darp_refined[pool_pos]

    def imb_state_dict(self) -> dict[str, Any]:
        return {"orig": self.darp_orig.detach().cpu().clone(), "refined": self.darp_refined.detach().cpu().clone()}

    def imb_load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().imb_load_state_dict(state)
        self.darp_orig = state_tensor("darp", state, "orig", self.darp_orig).float()
        self.darp_refined = state_tensor("darp", state, "refined", self.darp_refined).float()
