"""Per-evaluation training diagnostics: a named accumulator of the algorithms' step outputs.

:class:`StepAccumulator` sums every step's :class:`~mutexmatch.algorithms.StepOutput` on the training device (no
host synchronisation per step) and is read once per evaluation by :meth:`StepAccumulator.metrics`:

- ``train/loss`` and ``train/<term>``: the mean weighted loss L and the means of the unweighted terms the algorithm
  declares (``Algorithm.terms``: L_sup, L_p, L_sep, ...) over the steps, nothing for a term it does not compute;
- ``train/mask_ratio``: the fraction of unlabeled samples above the confidence threshold;
- ``train/pl_acc`` / ``train/pl_acc_all``: pseudo-label (\\hat p^w) accuracy on the confident / all samples;
- ``train/cpa``: complementary-label precision, the fraction of complementary labels that are not the true class
  (with several per sample, UPS negative labels: sum neg [c != y] / sum neg); ``train/tnc_cpa`` the same for the
  TNC's argmax r^w;
- the class-count matrices (true class x pseudo / TNC complementary label) of the paper's heat maps.
Samples without a true label (STL-10's extra unlabeled images, label -1) are not scored.
"""
from __future__ import annotations

import time

import torch
from torch import Tensor

from mutexmatch import metrics as M
from mutexmatch.algorithms import StepOutput
from mutexmatch.metrics import TOTAL, term_metric

__all__ = ["StepAccumulator"]

# The summed terms of a checkpoint written before terms were the algorithm's (issue 22): this order, every algorithm.
_LEGACY_TERMS = (TOTAL, "sup", "sep", "p", "n")
# Counts summed over the unlabeled samples with a true label (the mask sum over all of them).
_COUNTS = ("confident", "labeled", "pl_correct_confident", "pl_correct", "comp_correct", "tnc_comp_correct",
           "tnc_scored", "comp_scored")


class StepAccumulator:
    """Sums of the step diagnostics since the last evaluation, on ``device``; ``terms`` are the algorithm's loss
    terms (``Algorithm.terms``), summed beside the weighted total."""

    def __init__(self, num_classes: int, device: torch.device, terms: tuple[str, ...]) -> None:
        self.num_classes = num_classes
        self.names = (TOTAL, *terms)
        self.terms = torch.zeros(len(self.names), device=device)
        self.first_bad = torch.full((len(self.names),), -1, dtype=torch.long, device=device)  # step it was not finite
        self.counts = torch.zeros(len(_COUNTS), device=device)
        self.pl_counts = torch.zeros(num_classes * num_classes, dtype=torch.long, device=device)
        self.comp_counts = torch.zeros(num_classes * num_classes, dtype=torch.long, device=device)
        self.steps = 0
        self.ulb_seen = 0
        self.t_data = 0.0
        self.t_compute = 0.0
        self.t_start = time.perf_counter()

    _SUMS = ("terms", "first_bad", "counts", "pl_counts", "comp_counts")

    def state_dict(self) -> dict:
        """The sums of the steps since the last evaluation (a checkpoint between evaluations keeps them, so the next
        evaluation of a resumed run averages the same steps as an uninterrupted run); timings are not kept."""
        return {**{k: getattr(self, k).clone() for k in self._SUMS}, "names": list(self.names), "steps": self.steps,
                "ulb_seen": self.ulb_seen}

    def load_state_dict(self, state: dict) -> None:
        """Restore the sums; the term sums by name (a checkpoint of the code before named terms summed every
        algorithm's in :data:`_LEGACY_TERMS` order): a term the checkpoint lacks is NaN in the next evaluation if
        steps were summed without it (its mean over those steps is unknown), else 0."""
        for k in self._SUMS[2:]:
            getattr(self, k).copy_(state[k])
        self.steps, self.ulb_seen = int(state["steps"]), int(state["ulb_seen"])
        saved = dict(zip(state.get("names", _LEGACY_TERMS), zip(state["terms"], state["first_bad"])))
        unknown = (float("nan") if self.steps else 0.0, -1)
        for i, name in enumerate(self.names):
            total, bad = saved.get(name, unknown)
            self.terms[i], self.first_bad[i] = total, bad

    @torch.no_grad()
    def add(self, out: StepOutput, y_ulb: Tensor, step: int) -> None:
        """Add one step: ``out`` and the true labels ``y_ulb`` (muB,) of its unlabeled samples (-1: unknown)."""
        terms = torch.stack([out.loss.detach().float()] + [out.terms[t].detach().float() for t in self.names[1:]])
        self.terms += terms
        bad = ~torch.isfinite(terms) & (self.first_bad < 0)
        self.first_bad = torch.where(bad, torch.full_like(self.first_bad, step), self.first_bad)
        self.steps += 1
        if not y_ulb.numel() or out.pseudo_label is None:
            return
        counts = self._sample_counts(out, y_ulb)
        self.counts += torch.stack([counts[c].float() for c in _COUNTS])
        self.ulb_seen += len(y_ulb)

    def _sample_counts(self, out: StepOutput, y: Tensor) -> dict[str, Tensor]:
        """This step's counts by name; also adds to the class-count matrices. index_add_ of 0/1 weights instead of
        bincount over known rows: the boolean selection and CUDA's bincount (which reads its input's maximum) would
        each make the host wait for the device every step."""
        C, zero = self.num_classes, self.terms.new_zeros(())
        known = y >= 0
        yk = y.clamp_min(0)
        mask = out.mask.float() if out.mask is not None else torch.ones_like(y, dtype=torch.float)
        correct = (out.pseudo_label == y) & known
        counts = {"confident": mask.sum(), "labeled": known.sum(),
                  "pl_correct_confident": (correct.float() * mask).sum(), "pl_correct": correct.sum(),
                  "tnc_comp_correct": zero, "tnc_scored": zero}
        if out.neg_mask is not None:
            neg = out.neg_mask.float() * known.unsqueeze(1)
            not_true = torch.ones_like(neg).scatter_(1, yk.unsqueeze(1), 0.0)
            counts.update(comp_correct=(neg * not_true).sum(), comp_scored=neg.sum())
        elif out.comp_label is not None:
            counts.update(comp_correct=((out.comp_label != y) & known).sum(), comp_scored=known.sum())
        else:
            counts.update(comp_correct=zero, comp_scored=zero)
        self.pl_counts.index_add_(0, yk * C + out.pseudo_label, known.long())
        if out.tnc_comp_label is not None:
            tcl = out.tnc_comp_label
            counts.update(tnc_comp_correct=((tcl != y) & known).sum(), tnc_scored=known.sum())
            self.comp_counts.index_add_(0, yk * C + tcl, known.long())
        return counts

    def non_finite(self) -> list[tuple[str, int]]:
        """(term, first step) of every term that was not finite at some step (one read of the device)."""
        return [(t, s) for t, s in zip(self.names, self.first_bad.tolist()) if s >= 0]

    def term_means(self) -> dict[str, float]:
        """``train/loss`` and ``train/<term>`` of each term: the means over the steps (one read of the device)."""
        return {term_metric(t): v for t, v in zip(self.names, (self.terms / max(1, self.steps)).tolist())}

    def sample_metrics(self) -> dict[str, float]:
        """The unlabeled-sample ratios (one read of the device); NaN without samples to score, none without
        unlabeled samples, ``train/tnc_cpa`` only with a TNC."""
        if not self.ulb_seen:
            return {}
        c = dict(zip(_COUNTS, self.counts.tolist()))
        nan = float("nan")
        out = {
            M.MASK_RATIO: c["confident"] / self.ulb_seen,
            M.PL_ACC: c["pl_correct_confident"] / c["confident"] if c["confident"] else nan,
            M.PL_ACC_ALL: c["pl_correct"] / c["labeled"] if c["labeled"] else nan,
            M.CPA: c["comp_correct"] / c["comp_scored"] if c["comp_scored"] else nan,
        }
        if c["tnc_scored"]:
            out[M.TNC_CPA] = c["tnc_comp_correct"] / c["tnc_scored"]
        return out

    def class_counts(self, with_tnc: bool) -> dict:
        """The paper's heat-map data: (true class, pseudo label) counts and, with a TNC, (true class, argmax r^w)."""
        C = self.num_classes
        counts = {"pseudo_label_counts": self.pl_counts.view(C, C).cpu().numpy()}
        if with_tnc:
            counts["comp_label_counts"] = self.comp_counts.view(C, C).cpu().numpy()
        return counts


def divergence_message(bad: list[tuple[str, int]], term_means: dict[str, float], weights: dict[str, float],
                       algorithm: str, lr: float) -> str:
    """The one line a non-finite loss stops a run with (issue 33 item 6): the first non-finite *term* at the first
    bad step (the total only when every term stayed finite there), and what to lower. A total that overflows from finite terms names the term
    whose weighted mean is largest, with its weight; the learning rate is always a suspect."""
    # the earliest step (what follows a non-finite step is its consequence); there, a term before the total
    term, step = min(bad, key=lambda ts: (ts[1], ts[0] == TOTAL))
    hint = f"lower optim.lr ({lr:g})"
    if term == TOTAL and weights:
        def size(t: str) -> tuple[float, float]:  # a mean made NaN by the steps after: ranked by its weight
            value = abs(weights[t] * term_means.get(term_metric(t), 0.0))
            return (value if value == value else float("inf"), abs(weights[t]))
        top = max(weights, key=size)
        hint = (f"its terms are finite; the largest weighted one is {top!r} (weight {weights[top]:g}): lower that "
                f"weight, or {hint}")
    elif term != TOTAL:
        weight = f" (weight {weights[term]:g})" if term in weights else ""
        hint = f"lower the settings that scale term {term!r}{weight} (its weight, a temperature), or {hint}"
    return (f"non-finite loss term {term!r} at step {step} (algorithm {algorithm}); the run is stopped: {hint}; a "
            "divergence is deterministic, so a retry fails the same way")
