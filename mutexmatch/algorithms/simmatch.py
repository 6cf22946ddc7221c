"""SimMatch (Zheng et al., CVPR 2022, "SimMatch: Semi-supervised Learning with Similarity Matching"), as USB 0.3.2's
``train_step`` runs it for CIFAR, SVHN and the other datasets USB gives no EMA teacher (the lockstep test's
reference).

One forward of [labeled | weak | strong] (the default step) with a projection head g beside the TPC (``heads["proj"]``,
Linear-ReLU-Linear, l2-normalised). A labeled memory bank holds one embedding per labeled image (by its position in
the labeled set) and its label. Per step, with p^w the weak view's probabilities aligned towards uniform over the last
``da_window`` batch means, z^w / z^s the weak / strong embeddings and t the temperature:

- q_bk = softmax_k(z^w_b . z_k / t), the weak view's similarity to every labeled embedding;
- unfolding (Sec. 3.3): q^u_bk = q_bk p^w_b[y_k] / sum_k' q_bk' p^w_b[y_k'], the instance target;
- aggregation: p^a_b = alpha p^w_b + (1 - alpha) sum_k q_bk onehot(y_k), the class target;
- L_in = mean_b H(q^u_b, softmax(z^s_b . Z / t)); L_u = mean_b 1(max p^a_b >= tau) H(p^a_b, p^s_b);
- L = L_sup + lambda_p L_u + lambda_in L_in; in the first epoch L_in is 0 and p^a = p^w (USB's warm-up), an epoch
  being ``epoch_steps`` steps: USB's 1,024 (num_train_iter // epoch in its classic-CV configs), not a pass over the
  unlabeled pool (~112 steps on CIFAR-10 at B 64, mu 7), which would switch ~9x earlier than the reference;
- then each labeled row's bank entry becomes normalise(0.7 z + 0.3 z^lb) (USB's ``ema_bank`` 0.7), its label y.
  USB 0.3.2 normalises that (d, batch) matrix with F.normalize's default dim 1, i.e. each coordinate across the
  batch's rows, so its bank rows are not unit vectors; ``bank_norm: usb`` reproduces that for the lockstep test,
  the default normalises each embedding (the bank the similarities assume; the released SimMatch code, ImageNet
  with an EMA teacher, replaces each entry by the teacher's unit embedding).

The bank starts as unit Gaussian vectors (USB and the released code draw them from the global generator; here from a
generator of its own, so building the algorithm draws nothing) with labels 0 until a labeled image is seen.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import Tensor, nn

from mutexmatch.algorithms.base import StepInputs, StepOutput, TrainContext, register_algorithm
from mutexmatch.algorithms.comatch import ProjectionHead
from mutexmatch.algorithms.fixmatch import FixMatch
from mutexmatch.losses import soft_cross_entropy
from mutexmatch.params import (USB_EPOCH_STEPS, EmbeddingSize, FixMatchParams, Fraction, Positive, QueueLength, Steps,
                               Weight, earlier)

BANK_MOMENTUM = 0.7   # USB's ema_bank for the datasets without an EMA teacher


class SimMatchParams(FixMatchParams):
    """SimMatch: the threshold, L_u's and L_in's weights, the temperature, the aggregation weight alpha, the
    projection size and distribution alignment (on: towards uniform over 32 batch means). Defaults: USB 0.3.2's
    classic-CV config (config/classic_cv/simmatch/simmatch_cifar10_40_0.yaml)."""

    dist_align: bool = Field(True, description="Distribution alignment of p^w before label propagation (SimMatch "
                             "aligns towards uniform).")
    da_window: QueueLength = Field(32, description="Queue length of the `queue` estimate, in batches (SimMatch: "
                                     "32).")
    lambda_in: Weight = Field(1.0, description="[λ_in] weight of L_in, SimMatch's instance similarity loss.")
    temperature: Positive = Field(0.1, description="[t] SimMatch temperature of the embedding similarities.")
    alpha: Fraction = Field(0.9, description="[α] SimMatch aggregation: p = α p^w + (1 − α) (propagated labels).")
    proj_dim: EmbeddingSize = Field(128, description="SimMatch embedding size (the projection head's output).")
    bank_norm: Literal["embedding", "usb"] = Field(
        "embedding", description="SimMatch bank update normalise(0.7 old + 0.3 new): per embedding (`embedding`), "
        "or as USB 0.3.2 does, F.normalize's default dim 1 of its (d, batch) matrix, i.e. each coordinate across "
        "the batch's rows (`usb`).")
    epoch_steps: Steps = Field(USB_EPOCH_STEPS, description="Steps of SimMatch's first epoch, without L_in and label "
                               "propagation: USB's 1024 (num_train_iter // epoch, classic CV); 0 = one pass over the "
                               "unlabeled pool, ceil(N_u / muB) (the rule before issue 32).",
                               json_schema_extra=earlier(0))


class LabeledBank:
    """One l2-normalised embedding (K, d) and one label (K,) per labeled image, indexed by its position."""

    def __init__(self, size: int, dim: int) -> None:
        g = torch.Generator().manual_seed(0)
        self.emb = F.normalize(torch.randn(dim, size, generator=g), dim=0).t().contiguous()   # USB's column draw
        self.labels = torch.zeros(size, dtype=torch.long)

    def to(self, device: torch.device) -> None:
        if self.emb.device != device:
            self.emb, self.labels = self.emb.to(device), self.labels.to(device)

    def update(self, pos: Tensor, emb: Tensor, labels: Tensor, momentum: float, norm: str = "embedding") -> None:
        """Rows ``pos`` <- normalise(momentum old + (1 - momentum) emb), their labels <- ``labels``; ``norm``
        ``usb`` normalises each coordinate over the batch's rows instead (USB 0.3.2)."""
        mixed = F.normalize(momentum * self.emb[pos] + (1 - momentum) * emb.detach().float(),
                            dim=1 if norm == "embedding" else 0)
        self.emb = self.emb.index_copy(0, pos, mixed)
        self.labels = self.labels.index_copy(0, pos, labels)

    def state_dict(self) -> dict[str, Any]:
        return {"emb": self.emb.detach().cpu().clone(), "labels": self.labels.detach().cpu().clone()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        emb, labels = state["emb"], state["labels"]
        if not isinstance(emb, Tensor) or emb.shape != self.emb.shape or getattr(labels, "shape", None) != (
                len(self.emb),):
            raise ValueError(f"SimMatch labeled bank state: shape {tuple(getattr(emb, 'shape', ()))} is not "
                             f"{tuple(self.emb.shape)} (labeled images, proj_dim)")
        self.emb = emb.to(self.emb.device, torch.float32).clone()
        self.labels = labels.to(self.labels.device, torch.long).clone()


def propagate(probs_w: Tensor, emb_w: Tensor, bank: LabeledBank, *, temperature: float,
              alpha: float) -> tuple[Tensor, Tensor]:
    """(q^u, p^a): label unfolding and aggregation (module docstring)."""
    q = torch.softmax(emb_w @ bank.emb.t() / temperature, dim=1)
    labels = bank.labels.expand(len(q), -1)
    unfolded = q * probs_w.gather(1, labels)
    unfolded = unfolded / unfolded.sum(dim=1, keepdim=True)
    aggregated = torch.zeros_like(probs_w).scatter_add(1, labels, q)
    return unfolded, alpha * probs_w + (1 - alpha) * aggregated


@register_algorithm("simmatch")
class SimMatch(FixMatch):
    """SimMatch: L_sup + lambda_p L_u (labels aggregated from a labeled memory bank) + lambda_in L_in (instance
    similarities to the labeled bank, unfolded by the class prediction)."""

    terms = ("sup", "p", "in")
    Params = SimMatchParams
    params: SimMatchParams

    @classmethod
    def heads(cls, params: SimMatchParams, feat_dim: int, num_classes: int) -> dict[str, nn.Module]:
        """The projection head g (``model.heads["proj"]``), Linear-ReLU-Linear as USB's and the released code's."""
        return {"proj": ProjectionHead(feat_dim, params.proj_dim, "relu")}

    def __init__(self, params: Mapping[str, Any], ctx: TrainContext) -> None:
        super().__init__(params, ctx)
        self.bank = LabeledBank(len(ctx.labeled), self.params.proj_dim)

    def compute(self, model: nn.Module, inp: StepInputs) -> StepOutput:
        b, u = self._split(inp)
        p = self.params
        logits_lb, logits_w, logits_s = model.tpc(inp.feats).split([b, u, u])
        emb_lb, emb_w, emb_s = model.heads["proj"](inp.feats).split([b, u, u])
        self.bank.to(emb_s.device)
        sup = F.cross_entropy(logits_lb, inp.targets_lb)
        first_epoch = inp.step < (p.epoch_steps or self.ctx.steps_per_epoch)
        with torch.no_grad():
            probs_w = self.align(torch.softmax(logits_w.detach(), dim=1), logits_lb)
            unfolded, aggregated = propagate(probs_w, emb_w.detach(), self.bank, temperature=p.temperature,
                                             alpha=p.alpha)
            targets = probs_w if first_epoch else aggregated
            mask = self.confidence_mask(targets, inp)
        student = torch.log_softmax(emb_s @ self.bank.emb.t() / p.temperature, dim=1)
        inst = -(unfolded * student).sum(dim=1).mean() * (0.0 if first_epoch else 1.0)
        unsup = (soft_cross_entropy(targets, logits_s) * mask).mean()
        self.bank.update(inp.lb_pos, emb_lb, inp.targets_lb, BANK_MOMENTUM, p.bank_norm)
        conf, pseudo_label = targets.max(dim=1)
        return StepOutput(loss=sup + p.lambda_p * unsup + p.lambda_in * inst, terms={"sup": sup, "p": unsup,
                          "in": inst}, mask=mask, conf=conf, pseudo_label=pseudo_label, soft_target=targets)

    def term_weights(self) -> dict[str, float]:
        return {"sup": 1.0, "p": self.params.lambda_p, "in": self.params.lambda_in}

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "bank": self.bank.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.bank.load_state_dict(state["bank"])
