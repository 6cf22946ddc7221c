"""CoMatch's pieces (Li, Xiong & Hoi, ICCV 2021, "Semi-supervised Learning with Contrastive Graph Regularization"),
as pure functions and one state holder, so the algorithm module (:mod:`mutexmatch.algorithms.comatch`) only wires
them to the step.

With p^w the (distribution-aligned) class probabilities of the weak view, z the l2-normalised embeddings of the
projection head g and t the temperature:

- memory-smoothed pseudo-label (Eq. 5): q_b = alpha p^w_b + (1 - alpha) sum_k a_bk p_k^bank, with
  a_bk = exp(z^w_b . z_k^bank / t) / sum_k' exp(z^w_b . z_k'^bank / t), over a memory bank of the embeddings and
  (unsmoothed) probabilities of the last ``queue_batch`` steps' weak unlabeled and labeled rows (labeled rows carry
  their one-hot label);
- pseudo-label graph (Eq. 7): W^q_bc = q_b . q_c, 1 on the diagonal, entries below the threshold T zeroed, rows
  normalised;
- embedding graph (Eq. 8-9): W^z_bc = exp(z_b . z'_c / t) row-normalised, on the two strong views;
- contrastive graph loss (Eq. 10): L_c = 1/muB sum_b H(W^q_b, W^z_b) = -1/muB sum_b sum_c W^q_bc log W^z_bc
  (log(W^z + 1e-7) as in both released codes).

Both references (salesforce/CoMatch and USB 0.3.2) compute a_bk and W^z as exp(.) / sum exp(.); here they are a
softmax (the same values up to float rounding, within the lockstep test's tolerance), which cannot overflow at a
small temperature.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import Tensor, nn

from mutexmatch.algorithms.base import StepInputs, StepOutput, StepSpec, TrainContext, register_algorithm
from mutexmatch.algorithms.fixmatch import FixMatch
from mutexmatch.checks import check_int
from mutexmatch.losses import soft_cross_entropy
from mutexmatch.params import (MAX_QUEUE, USB_EPOCH_STEPS, EmbeddingSize, FixMatchParams, Fraction, Positive,
                               Probability, QueueLength, Steps, Weight, earlier)

ACTIVATIONS = ("leaky_relu", "relu")


class CoMatchParams(FixMatchParams):
    """CoMatch: the FixMatch threshold and L_u weight, the graph loss's weight and threshold, memory smoothing, the
    projection head and distribution alignment (on by default: both references align towards uniform over a
    32-batch window). Defaults: salesforce/CoMatch's CIFAR script (Train_CoMatch.py), which USB 0.3.2's classic-CV
    CoMatch configs repeat (T 0.2, proj_size 64, queue_batch 5, smoothing_alpha 0.9, contrast_p_cutoff 0.8,
    da_len 32)."""

    dist_align: bool = Field(True, description="Distribution alignment of p^w before memory smoothing (CoMatch "
                             "aligns towards uniform: p^w / p~(y), normalised).")
    da_window: QueueLength = Field(
        32, description="Queue length of the `queue` estimate, in batches (CoMatch: 32).")
    lambda_c: Weight = Field(1.0, description="[λ_c] weight of L_c, CoMatch's contrastive graph loss.")
    temperature: Positive = Field(
        0.2, description="[t] CoMatch temperature of the embedding similarities (memory smoothing and L_c).")
    contrast_tau: Probability = Field(0.8, description="[T] CoMatch pseudo-label graph threshold: edges with "
                                      "q_b . q_c below it are dropped.")
    alpha: Fraction = Field(0.9, description="[α] CoMatch memory smoothing: q = α p^w + (1 - α) A p^bank.")
    queue_batch: QueueLength = Field(
        5, description="CoMatch memory bank length, in steps of B + muB rows (weak unlabeled and labeled).")
    proj_dim: EmbeddingSize = Field(
        64, description="CoMatch embedding size d (the projection head's output).")
    proj_activation: Literal["leaky_relu", "relu"] = Field(
        "leaky_relu", description="CoMatch projection head activation: `leaky_relu` (slope 0.1, salesforce/CoMatch) "
        "or `relu` (USB 0.3.2).")
    smoothing_start: Literal["queue_full", "usb"] = Field(
        "queue_full", description="When memory smoothing starts: `queue_full` = from step queue_batch + 1, once the "
        "bank is full (salesforce/CoMatch); `usb` = also not before the second epoch (USB 0.3.2).")
    epoch_steps: Steps = Field(USB_EPOCH_STEPS, description="Steps of the epoch `smoothing_start: usb` waits: USB's "
                               "1024 (num_train_iter // epoch, classic CV); 0 = one pass over the unlabeled pool, "
                               "ceil(N_u / muB) (the rule before issue 32). Not read by `queue_full`.",
                               json_schema_extra=earlier(0))

    def stored_before(self) -> tuple[str, ...] | None:
        """``queue_full`` reads no epoch: any ``epoch_steps`` computes what the code before issue 32 did."""
        same = self if self.smoothing_start == "usb" else self.model_copy(update={"epoch_steps": 0})
        return super(CoMatchParams, same).stored_before()


def l2_normalize(x: Tensor) -> Tensor:
    """x / ||x||_2 per row (the references' ``l2norm``; the floor only guards an all-zero row)."""
    return x / x.pow(2).sum(dim=1, keepdim=True).sqrt().clamp_min(1e-12)


class ProjectionHead(nn.Module):
    """g: Linear(D, D) -> activation -> Linear(D, d) -> l2-normalise (CoMatch's projection MLP; SimMatch's too).
    ``activation``: ``leaky_relu`` (slope 0.1, salesforce/CoMatch's WideResNet) or ``relu`` (USB 0.3.2)."""

    def __init__(self, in_dim: int, out_dim: int, activation: str = "leaky_relu") -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"projection activation={activation!r}: must be one of {', '.join(ACTIVATIONS)}")
        self.fc1 = nn.Linear(in_dim, in_dim)
        self.act = nn.LeakyReLU(0.1) if activation == "leaky_relu" else nn.ReLU()
        self.fc2 = nn.Linear(in_dim, out_dim)

    def forward(self, feats: Tensor) -> Tensor:
        return l2_normalize(self.fc2(self.act(self.fc1(feats))))


def memory_smoothed_probs(probs: Tensor, emb_w: Tensor, bank_emb: Tensor, bank_probs: Tensor, *, alpha: float,
                          temperature: float) -> Tensor:
    """Eq. 5: alpha p^w + (1 - alpha) A p^bank with A = row-normalised exp(z^w Z_bank^T / t)."""
    affinity = torch.softmax(emb_w @ bank_emb.t() / temperature, dim=1)
    return alpha * probs + (1 - alpha) * affinity @ bank_probs


def pseudo_label_graph(probs: Tensor, threshold: float) -> Tensor:
    """Eq. 7: W^q = q q^T with self-loops (diagonal 1), entries < T dropped, rows normalised (detached input)."""
    graph = probs @ probs.t()
    graph.fill_diagonal_(1.0)
    graph = graph * (graph >= threshold).to(graph.dtype)
    return graph / graph.sum(dim=1, keepdim=True)


def graph_contrastive_loss(emb_s0: Tensor, emb_s1: Tensor, target_graph: Tensor, temperature: float) -> Tensor:
    """Eq. 10: mean_b H(W^q_b, W^z_b), W^z = row-normalised exp(z^s0 z^s1^T / t) (Eq. 8-9)."""
    sim = torch.softmax(emb_s0 @ emb_s1.t() / temperature, dim=1)
    return -(torch.log(sim + 1e-7) * target_graph).sum(dim=1).mean()


class MemoryBank:
    """A ring buffer of (embedding, class distribution) rows: CoMatch's memory of the last ``queue_batch`` steps'
    weak unlabeled and labeled rows. Its size is ``queue_batch`` times the rows pushed per step, known at the first
    push (B + muB; both references: queue_batch (mu + 1) B); a host pointer, so pushing reads nothing from the
    device."""

    def __init__(self, queue_batch: int, dim: int, num_classes: int) -> None:
        self.queue_batch = check_int("queue_batch", queue_batch, low=1, high=MAX_QUEUE)
        self.dim, self.num_classes = dim, num_classes
        self.emb = torch.zeros(0, dim)
        self.probs = torch.zeros(0, num_classes)
        self.ptr = 0

    @property
    def size(self) -> int:
        return len(self.emb)

    def push(self, emb: Tensor, probs: Tensor) -> None:
        """Write the rows at the pointer (wrapping) and advance it; allocates the bank at the first push."""
        n = len(emb)
        if self.size == 0:
            self.emb = torch.zeros(self.queue_batch * n, self.dim, device=emb.device, dtype=torch.float32)
            self.probs = torch.zeros(self.queue_batch * n, self.num_classes, device=emb.device, dtype=torch.float32)
        if n > self.size:
            raise ValueError(f"CoMatch memory bank: {n} rows pushed at once, more than its {self.size} rows")
        rows = (torch.arange(n, device=self.emb.device) + self.ptr) % self.size
        self.emb = self.emb.index_copy(0, rows, emb.detach().float())
        self.probs = self.probs.index_copy(0, rows, probs.detach().float())
        self.ptr = (self.ptr + n) % self.size

    def state_dict(self) -> dict[str, Any]:
        return {"emb": self.emb.detach().cpu().clone(), "probs": self.probs.detach().cpu().clone(), "ptr": self.ptr}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        emb, probs = state["emb"], state["probs"]
        if (not isinstance(emb, Tensor) or not isinstance(probs, Tensor) or emb.dim() != 2 or probs.dim() != 2
                or emb.shape[1] != self.dim or probs.shape != (len(emb), self.num_classes)):
            raise ValueError(f"CoMatch memory bank state: shapes {tuple(getattr(emb, 'shape', ()))} and "
                             f"{tuple(getattr(probs, 'shape', ()))} are not (N, {self.dim}) and (N, "
                             f"{self.num_classes}) (was proj_dim or the dataset changed since the checkpoint?)")
        device = self.emb.device
        self.emb, self.probs = emb.to(device, torch.float32).clone(), probs.to(device, torch.float32).clone()
        self.ptr = check_int("CoMatch memory bank ptr", state["ptr"], low=0, high=max(len(emb) - 1, 0))


def one_hot(targets: Tensor, num_classes: int) -> Tensor:
    return F.one_hot(targets, num_classes).float()


@register_algorithm("comatch")
class CoMatch(FixMatch):
    """CoMatch: L_sup + lambda_p L_u (memory-smoothed pseudo-labels) + lambda_c L_c (contrastive graph loss)."""

    terms = ("sup", "p", "c")
    Params = CoMatchParams
    params: CoMatchParams
    step = StepSpec(views=("lb", "weak", "strong", "strong2"))   # one forward of the four, as both references

    @classmethod
    def heads(cls, params: CoMatchParams, feat_dim: int, num_classes: int) -> dict[str, nn.Module]:
        """The projection head g (``model.heads["proj"]``)."""
        return {"proj": ProjectionHead(feat_dim, params.proj_dim, params.proj_activation)}

    @classmethod
    def state_memory(cls, params: CoMatchParams, batch_size: int, mu: int, num_classes: int
                     ) -> tuple[int, str, str]:
        """The memory bank: ``queue_batch`` steps of B + muB rows of d + C float32 (:class:`MemoryBank`)."""
        rows = params.queue_batch * batch_size * (1 + mu)
        return (rows * (params.proj_dim + num_classes) * 4,
                f"CoMatch's memory bank of {rows:,} rows", "algorithm.queue_batch")

    def __init__(self, params: Mapping[str, Any], ctx: TrainContext) -> None:
        super().__init__(params, ctx)
        self.bank = MemoryBank(self.params.queue_batch, self.params.proj_dim, self.num_classes)

    def smoothing_on(self, step: int) -> bool:
        """Memory smoothing from step queue_batch + 1 (the bank is full); ``usb``: also not in the first epoch
        (``epoch_steps`` steps)."""
        started = step > self.params.queue_batch
        epoch = self.params.epoch_steps or self.ctx.steps_per_epoch
        return started and (self.params.smoothing_start != "usb" or step >= epoch)

    def compute(self, model: nn.Module, inp: StepInputs) -> StepOutput:
        """One forward's features of [labeled | weak | strong 0 | strong 1] -> TPC logits and embeddings -> the
        loss (:meth:`comatch_terms`)."""
        b, u = inp.num_lb, inp.num_ulb
        if inp.feats.dim() != 2 or inp.feats.shape[0] != b + 3 * u:
            raise ValueError(f"StepInputs.feats: shape {tuple(inp.feats.shape)} is not (B + 3 muB, D) with B={b}, "
                             f"muB={u} (CoMatch's blocks: labeled, weak, two strong)")
        names = ("lb", "w", "s0", "s1")
        logits = dict(zip(names, model.tpc(inp.feats[:b + 2 * u]).split([b, u, u])))
        emb = dict(zip(names, model.heads["proj"](inp.feats).split([b, u, u, u])))
        out = self.comatch_terms(logits, emb, inp.targets_lb, inp)
        return StepOutput(loss=out.pop("loss"), terms={t: out.pop(t) for t in self.terms}, **out)

    def comatch_terms(self, logits: Mapping[str, Tensor], emb: Mapping[str, Tensor], targets_lb: Tensor,
                      inp: StepInputs) -> dict[str, Tensor]:
        """One step from the TPC logits (``lb``, ``w``, ``s0``) and embeddings (``lb``, ``w``, ``s0``, ``s1``)."""
        p = self.params
        sup = F.cross_entropy(logits["lb"], targets_lb)
        with torch.no_grad():
            probs_orig = self.align(torch.softmax(logits["w"].detach(), dim=1), logits["lb"])
            emb_w = emb["w"].detach()
            probs = probs_orig
            if self.smoothing_on(inp.step) and self.bank.size:
                probs = memory_smoothed_probs(probs_orig, emb_w, self.bank.emb, self.bank.probs, alpha=p.alpha,
                                              temperature=p.temperature)
            mask = self.confidence_mask(probs, inp)
            self.bank.push(torch.cat([emb_w, emb["lb"].detach()]),
                           torch.cat([probs_orig, one_hot(targets_lb, self.num_classes)]))
            graph = pseudo_label_graph(probs, p.contrast_tau)
        unsup = (soft_cross_entropy(probs, logits["s0"]) * mask).mean()
        contrast = graph_contrastive_loss(emb["s0"], emb["s1"], graph, p.temperature)
        conf, pseudo_label = probs.max(dim=1)
        return {"loss": sup + p.lambda_p * unsup + p.lambda_c * contrast, "sup": sup, "p": unsup, "c": contrast,
                "mask": mask, "conf": conf, "pseudo_label": pseudo_label, "soft_target": probs}

    def term_weights(self) -> dict[str, float]:
        return {"sup": 1.0, "p": self.params.lambda_p, "c": self.params.lambda_c}

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "bank": self.bank.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)    # checks the keys (the bank's included) and loads the alignment
        self.bank.load_state_dict(state["bank"])
