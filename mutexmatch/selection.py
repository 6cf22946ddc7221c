"""Which samples a loss keeps, and with what weight, step by step: the selection rules of AdaMatch, UDA, Pseudo-Label
and Dash, as pure functions the algorithms call (each names its paper's equation).

Schedules take the step as a Python int and return Python floats; masks are tensor comparisons against tensors or
floats. Nothing here reads a value back from the device (no ``.item()``, no tensor in an ``if``), so a step that
uses them stays free of host synchronisation.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from mutexmatch.losses import soft_cross_entropy

TSA_SCHEDULES = ("none", "linear", "log", "exp")


# ----------------------------------------------------------------------------------------------------------------------
# AdaMatch (Berthelot et al., ICLR 2022): relative confidence threshold.
# ----------------------------------------------------------------------------------------------------------------------
def relative_confidence_mask(probs_lb: Tensor, probs_ulb: Tensor, tau: float) -> Tensor:
    """AdaMatch's relative threshold (Section 3.2, "Relative confidence threshold"): c_tau = tau * mean_b max_c
    p_lb[b, c] over the labeled (weakly augmented) batch, then 1(max p^w >= c_tau) per unlabeled row, as a float.
    Both inputs are probabilities; they are detached."""
    c_tau = tau * probs_lb.detach().max(dim=1).values.mean()
    return (probs_ulb.detach().max(dim=1).values >= c_tau).to(probs_ulb.dtype)


# ----------------------------------------------------------------------------------------------------------------------
# UDA (Xie et al., NeurIPS 2020): training signal annealing and sharpening.
# ----------------------------------------------------------------------------------------------------------------------
def tsa_threshold(schedule: str, step: int, total_steps: int, num_classes: int) -> float:
    """eta_t of Training Signal Annealing (Section 3.3): alpha_t * (1 - 1/K) + 1/K with, at progress t/T,
    linear alpha_t = t/T, log 1 - exp(-5 t/T), exp exp(5 (t/T - 1)); ``none`` = 1 (every example kept)."""
    if schedule not in TSA_SCHEDULES:
        raise ValueError(f"tsa_schedule={schedule!r}: must be one of {', '.join(TSA_SCHEDULES)}")
    if schedule == "none":
        return 1.0
    progress = step / total_steps
    alpha = {"linear": progress, "log": 1.0 - math.exp(-5.0 * progress),
             "exp": math.exp(5.0 * (progress - 1.0))}[schedule]
    return alpha * (1.0 - 1.0 / num_classes) + 1.0 / num_classes


def tsa_mask(logits_lb: Tensor, targets_lb: Tensor, eta: float) -> Tensor:
    """UDA's TSA mask (Section 3.3): keep a labeled example while the model's probability of its *correct* class is
    at most eta_t, 1(p(y*|x) <= eta_t), as a float and detached."""
    p_true = torch.softmax(logits_lb.detach(), dim=1).gather(1, targets_lb[:, None]).squeeze(1)
    return (p_true <= eta).to(logits_lb.dtype)


def sharpen(logits: Tensor, temperature: float) -> Tensor:
    """UDA's softmax temperature controlling (Section 3.2, "Sharpening Predictions"): the consistency target
    softmax(z^w / T) of the weak view's logits, detached; T = 1 is the unsharpened p^w."""
    return torch.softmax(logits.detach() / temperature, dim=1)


# ----------------------------------------------------------------------------------------------------------------------
# Pseudo-Label (Lee, ICML-W 2013): ramped-up weight of the unlabeled loss.
# ----------------------------------------------------------------------------------------------------------------------
def rampup_weight(step: int, total_steps: int, warmup_fraction: float) -> float:
    """alpha(t) of Lee (2013), Eq. (16), with T_1 = 0 and T_2 = warmup_fraction * T: t / T_2 until T_2, then 1
    (alpha_f = 1; the loss weight lambda multiplies it). warmup_fraction 0 gives 1 from the first step."""
    if warmup_fraction <= 0.0:
        return 1.0
    return min(max(step / (warmup_fraction * total_steps), 0.0), 1.0)


# ----------------------------------------------------------------------------------------------------------------------
# Dash (Xu et al., ICML 2021): dynamic loss threshold.
# ----------------------------------------------------------------------------------------------------------------------
def dash_threshold(step: int, rho_init: float, *, gamma: float, c: float, rho_min: float,
                   steps_per_stage: int) -> float:
    """rho_t = max(C gamma^{-(t-1)} rho_hat, rho_min) of Dash's Eq. (5) (Algorithm 1), where t = 1, 2, ... counts
    stages of ``steps_per_stage`` steps after the warm-up (``step`` counts from the warm-up's end)."""
    stage = step // steps_per_stage
    return max(c * gamma ** (-stage) * rho_init, rho_min)


def dash_targets(logits_w: Tensor, *, hard: bool, temperature: float) -> Tensor:
    """Dash's pseudo-labels: softmax(logits_w / T) (detached), or argmax once rho_t has reached rho_min."""
    logits_w = logits_w.detach()
    return logits_w.argmax(dim=1) if hard else torch.softmax(logits_w / temperature, dim=1)


def dash_mask(logits_w: Tensor, targets: Tensor, rho: float) -> Tensor:
    """Dash's selection (Eq. 4): 1(l(x^w, \\hat y) <= rho_t), the loss of the weak view against its own
    pseudo-label (hard: cross-entropy of the class; soft: H(target, softmax(logits_w))). Float, detached."""
    logits_w = logits_w.detach()
    hard = targets.dim() == 1
    loss = F.cross_entropy(logits_w, targets, reduction="none") if hard else soft_cross_entropy(targets, logits_w)
    return (loss <= rho).to(logits_w.dtype)
