"""MutexMatch losses: Algorithm 1 of the paper (``form="paper"``) and the released code (``form="official"``).

Symbols follow Algorithm 1: p^w / p^s are the TPC's probabilities on the weak / strong view of an unlabeled image,
r^w / r^s the TNC's, g the top-k indicator on r^w, \\hat p^w = argmax p^w the pseudo-label and \\hat q^w = argmin p^w
the complementary pseudo-label. Every function returns *unweighted* terms next to the weighted total so a caller can
log them and an ablation can swap one of them. The confidence mask 1(max p^w >= tau) comes in from the algorithm
(``Algorithm.confidence_mask``, the threshold seam), so a per-class or adaptive threshold needs no change here.
Hyper-parameters are validated once, by the algorithm's parameter model (:mod:`mutexmatch.params`), not per call.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

FORMS = ("paper", "official")


# ----------------------------------------------------------------------------------------------------------------------
# Input checks (shapes and types only: they read nothing from the device).
# ----------------------------------------------------------------------------------------------------------------------
def _check_logits(name: str, t: Tensor, rows: int | None, num_classes: int | None) -> None:
    if not isinstance(t, Tensor) or t.dim() != 2 or not t.is_floating_point():
        raise ValueError(f"{name}: must be a 2-D floating-point tensor (rows, C), got "
                         f"{type(t).__name__}{tuple(t.shape) if isinstance(t, Tensor) else ''}")
    if (rows is not None and t.shape[0] != rows) or (num_classes is not None and t.shape[1] != num_classes):
        raise ValueError(f"{name}: shape {tuple(t.shape)} does not match the expected "
                         f"({'*' if rows is None else rows}, {num_classes})")


def _check_tpc_inputs(logits_lb: Tensor, targets_lb: Tensor, logits_w: Tensor, logits_s: Tensor,
                      probs_w: Tensor | None, mask: Tensor) -> tuple[int, int]:
    """Check the TPC tensors and the confidence mask; return (muB, C)."""
    _check_logits("logits_lb", logits_lb, None, None)
    num_lb, num_classes = logits_lb.shape
    if not isinstance(targets_lb, Tensor) or targets_lb.dtype != torch.int64 or tuple(targets_lb.shape) != (num_lb,):
        got = f"{targets_lb.dtype} {tuple(targets_lb.shape)}" if isinstance(targets_lb, Tensor) else type(targets_lb)
        raise ValueError(f"targets_lb: must be an int64 tensor of shape ({num_lb},), got {got}")
    _check_logits("logits_w", logits_w, None, num_classes)
    _check_logits("logits_s", logits_s, logits_w.shape[0], num_classes)
    if probs_w is not None:
        _check_logits("probs_w", probs_w, logits_w.shape[0], num_classes)
    if not isinstance(mask, Tensor) or not mask.is_floating_point() or tuple(mask.shape) != (logits_w.shape[0],):
        got = f"{mask.dtype} {tuple(mask.shape)}" if isinstance(mask, Tensor) else type(mask).__name__
        raise ValueError(f"mask: must be a floating-point tensor of shape ({logits_w.shape[0]},) (1 = confident), "
                         f"got {got}")
    return logits_w.shape[0], num_classes


# ----------------------------------------------------------------------------------------------------------------------
# Building blocks (each used by the two losses below and by the ablation variants in mutexmatch.algorithms).
# ----------------------------------------------------------------------------------------------------------------------
def soft_cross_entropy(target: Tensor, logits: Tensor) -> Tensor:
    """Per-row H(target, softmax(logits)) = -sum_i target_i log softmax(logits)_i; ``target`` need not sum to 1."""
    return -(target * F.log_softmax(logits, dim=1)).sum(dim=1)


def complementary_label(probs: Tensor, m: int = 1) -> Tensor:
    """Class with the m-th smallest probability per row (m = 1: argmin, the paper's \\hat q^w; Figure "arg").

    A stable ascending sort makes ties resolve to the lowest class index, like ``argmin``.
    """
    return probs.detach().sort(dim=1, stable=True).indices[:, m - 1]


def top_k_indicator(r_w: Tensor, k: int) -> Tensor:
    """g_{(i)} = 1(r^w_{(i)} in T_k(r^w)): exactly k ones per row, at the k largest components (Algorithm 1)."""
    return torch.zeros_like(r_w).scatter_(1, r_w.topk(k, dim=1).indices, 1.0)


def negative_consistency(r_w: Tensor, tnc_logits_s: Tensor, *, k: int, form: str, hard: bool = False) -> Tensor:
    """Per-row TNC consistency term l_n of Eq. (ln), before the low-confidence mask and the 1/(muB) average.

    ``r_w`` is the detached TNC weak softmax r^w; ``tnc_logits_s`` the attached TNC strong logits (r^s = softmax).
    paper:    l_n = -(1/k) sum_i g_i r^w_i log r^s_i for k < C, and H(r^w, r^s) (no 1/k) for k = C.
    official: no 1/k; for 0 < k < C the target components with r^w below the k-th largest are zeroed (not
              renormalised) and the strong logits there are replaced by the constant 0 before the log-softmax;
              k = C or 0 means no truncation.
    ``hard=True`` is the ablation "hard labels for the consistency on TNC" (Section "Consistency Regularization on
    TNC", (ii)): the selected components of r^w are set to 1.
    """
    num_classes = r_w.shape[1]
    if form == "paper":
        g = top_k_indicator(r_w, k)                                    # g = 1(r^w in T_k(r^w))
        target = g if hard else g * r_w                                # g_i r^w_i
        return soft_cross_entropy(target, tnc_logits_s) / (k if k < num_classes else 1)  # -(1/k) sum g r^w log r^s
    if 0 < k < num_classes:
        keep = r_w >= r_w.topk(k, dim=1).values[:, -1:]                # classes not below the k-th largest r^w
        target = keep.to(r_w.dtype) if hard else r_w * keep            # zeroed outside, not renormalised
        tnc_logits_s = torch.where(keep, tnc_logits_s, torch.zeros_like(tnc_logits_s))  # logits set to 0, out of place
    else:
        target = torch.ones_like(r_w) if hard else r_w
    return soft_cross_entropy(target, tnc_logits_s)


def confidence_mask(probs_w: Tensor, tau: float) -> Tensor:
    """1(max p^w >= tau) per row, as a float tensor: the fixed-threshold mask of Eq. (p)."""
    return (probs_w.detach().max(dim=1).values >= tau).to(probs_w.dtype)


def _pseudo_labels(logits_w: Tensor, probs_w: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
    """p^w (detached), max p^w and \\hat p^w = argmax p^w."""
    p_w = (torch.softmax(logits_w, dim=1) if probs_w is None else probs_w).detach()
    conf, pseudo_label = p_w.max(dim=1)
    return p_w, conf, pseudo_label


# ----------------------------------------------------------------------------------------------------------------------
# Losses.
# ----------------------------------------------------------------------------------------------------------------------
def fixmatch_loss(*, logits_lb: Tensor, targets_lb: Tensor, logits_w: Tensor, logits_s: Tensor, mask: Tensor,
                  lambda_p: float = 1.0, probs_w: Tensor | None = None) -> dict[str, Tensor]:
    """FixMatch: L_sup (Eq. s) + lambda_p L_p (Eq. p); MutexMatch with lambda_sep = lambda_n = 0 (Table "ab", (vii)).

    ``mask`` (muB,) is the confidence indicator of Eq. (p), 1(max p^w >= tau) for a fixed tau
    (:func:`confidence_mask`). ``probs_w`` overrides p^w = softmax(logits_w) (e.g. distribution-aligned); it is
    detached either way. Returns loss, sup, p and detached diagnostics mask, pseudo_label, comp_label (argmin p^w),
    conf, mask_ratio.
    """
    _check_tpc_inputs(logits_lb, targets_lb, logits_w, logits_s, probs_w, mask)
    p_w, conf, pseudo_label = _pseudo_labels(logits_w, probs_w)                # p^w, max p^w, \hat p^w
    high = mask.detach()                                                         # 1(max p^w >= tau)
    sup = F.cross_entropy(logits_lb, targets_lb)                                    # L_sup
    p = (F.cross_entropy(logits_s, pseudo_label, reduction="none") * high).mean()   # L_p, divided by muB
    return {"loss": sup + lambda_p * p, "sup": sup, "p": p, "mask": high, "pseudo_label": pseudo_label,
            "comp_label": p_w.argmin(dim=1), "conf": conf, "mask_ratio": high.mean()}


def mutexmatch_loss(*, logits_lb: Tensor, targets_lb: Tensor, logits_w: Tensor, logits_s: Tensor,
                    tnc_logits_w: Tensor, tnc_logits_s: Tensor, mask: Tensor, k: int = 10,
                    lambda_sep: float = 1.0, lambda_p: float = 1.0, lambda_n: float = 1.0, form: str = "paper",
                    sep_logits: Tensor | None = None, sep_tnc_logits: Tensor | None = None,
                    probs_w: Tensor | None = None) -> dict[str, Tensor]:
    """MutexMatch loss L = L_sup + lambda_sep L_sep + lambda_p L_p + lambda_n L_n (Eq. allloss, Algorithm 1).

    Inputs: TPC logits ``logits_lb`` (B, C) with int64 ``targets_lb`` (B,), ``logits_w`` / ``logits_s`` (muB, C) on
    the weak / strong unlabeled views; TNC logits ``tnc_logits_w`` computed **on detached features** (caller's
    contract: that is the stop-gradient on theta of Eq. sep, so L_sep trains the TNC only) and ``tnc_logits_s`` on
    attached features (L_n reaches TNC and backbone). p^w, the masks, both pseudo-labels and r^w are detached here.
    ``probs_w`` overrides p^w = softmax(logits_w) (e.g. distribution-aligned). ``mask`` (muB,) is the confidence
    indicator 1(max p^w >= tau) (:func:`confidence_mask` for a fixed tau; per-class or adaptive thresholds give
    another); L_p uses it and L_n its complement.

    form="paper": Eqs. (s), (sep), (p), (ln) as printed: L_sep = mean over the muB weak rows of
    H(argmin p^w, TNC(theta^(x^w))); L_p, L_n divided by muB; L_n with 1/k for k < C and H(r^w, r^s) at k = C.
    form="official": the released code (docs: official-code.md). L_sep over *all* rows [lb | w | s] from
    ``sep_logits`` (TPC logits, detached here) and ``sep_tnc_logits`` (TNC on detached features) -- required;
    L_n without 1/k and with the logits-set-to-0 truncation (see ``negative_consistency``); k = 0 means C.
    Weights are independent of the form: the released code's "L_sup + L_sep + lambda_u (L_p + L_n)" is
    lambda_sep = 1, lambda_p = lambda_n = lambda_u, so with the defaults (all 1) both forms weight as published.

    Returns unweighted scalar terms sup, sep, p, n, the weighted ``loss``, and detached diagnostics: mask (high
    confidence, float), pseudo_label, comp_label (argmin p^w), conf (max p^w), tnc_comp_label (argmax r^w), mask_ratio.
    """
    mu_b, num_classes = _check_tpc_inputs(logits_lb, targets_lb, logits_w, logits_s, probs_w, mask)
    _check_logits("tnc_logits_w", tnc_logits_w, mu_b, num_classes)
    _check_logits("tnc_logits_s", tnc_logits_s, mu_b, num_classes)
    if form not in FORMS:
        raise ValueError(f"form={form!r}: must be one of {FORMS}")
    if form == "official":
        if sep_logits is None or sep_tnc_logits is None:
            raise ValueError("sep_logits and sep_tnc_logits: required by form='official' (its L_sep covers all rows)")
        _check_logits("sep_logits", sep_logits, None, num_classes)
        _check_logits("sep_tnc_logits", sep_tnc_logits, sep_logits.shape[0], num_classes)
    elif sep_logits is not None or sep_tnc_logits is not None:
        raise ValueError("sep_logits / sep_tnc_logits: only used by form='official'; form='paper' takes L_sep "
                         "from the weak rows (tnc_logits_w)")

    p_w, conf, pseudo_label = _pseudo_labels(logits_w, probs_w)                # p^w, max p^w, \hat p^w
    high = mask.detach()                                                       # 1(max p^w >= tau)
    comp_label = p_w.argmin(dim=1)                                             # \hat q^w = argmin p^w
    r_w = torch.softmax(tnc_logits_w.detach(), dim=1)                          # r^w = N^(theta^(x^w)), no gradient
    sup = F.cross_entropy(logits_lb, targets_lb)                                            # L_sup, Eq. (s)
    if form == "paper":
        sep = F.cross_entropy(tnc_logits_w, comp_label)                                     # L_sep, Eq. (sep)
    else:
        sep = F.cross_entropy(sep_tnc_logits, torch.softmax(sep_logits.detach(), 1).argmin(1))  # L_sep, all rows
    p = (F.cross_entropy(logits_s, pseudo_label, reduction="none") * high).mean()  # L_p = 1/muB sum 1 H(\hat p^w, p^s)
    n = ((1.0 - high) * negative_consistency(r_w, tnc_logits_s, k=k, form=form)).mean()  # L_n(g, r^w, r^s), Eq. (ln)
    return {"loss": sup + lambda_sep * sep + lambda_p * p + lambda_n * n, "sup": sup, "sep": sep, "p": p, "n": n,
            "mask": high, "pseudo_label": pseudo_label, "comp_label": comp_label, "conf": conf,
            "tnc_comp_label": r_w.argmax(dim=1), "mask_ratio": high.mean()}
