"""MixMatch (Berthelot et al., NeurIPS 2019) and the pieces ReMixMatch reuses: sharpening and MixUp.

- Sharpen(p, T)_c = p_c^(1/T) / sum_c' p_c'^(1/T) (Eq. 7);
- MixUp (Eq. 8-11): lambda ~ Beta(alpha, alpha), lambda' = max(lambda, 1 - lambda), and with a permutation pi of
  the concatenated batch, x' = lambda' x + (1 - lambda') x_pi, y' likewise, so each mixed row stays closer to its
  own row (lambda' >= 0.5). MixMatch and ReMixMatch mix labeled and unlabeled rows together (one permutation over
  all of them, as the released codes and USB do).

The draws (lambda' and pi) come from :func:`draw_mixup` (the global generators USB draws from, which the trainer
checkpoints) and :func:`mixup` is a pure function of them, so a test can feed both sides the same draws.

MixMatch (USB 0.3.2's ``train_step``, the reference of the lockstep test): guessed labels q = Sharpen((p(weak) +
p(weak2)) / 2, T), each weak view its own forward without gradient and outside BatchNorm's running statistics;
MixUp of [labeled | weak | weak2] with targets [one-hot | q | q]; the mixed batch forwarded in chunks of B rows
(only the first updates BatchNorm's running statistics); L = H(y'_x, p(x'_x)) + lambda_U w(t) mean ||y'_u -
p(x'_u)||^2 / C, w(t) = min(t / (``unsup_warm_up`` T), 1).
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field
from torch import Tensor, nn

from mutexmatch.algorithms.base import Algorithm, StepInputs, StepOutput, StepSpec, register_algorithm
from mutexmatch.losses import soft_cross_entropy
from mutexmatch.params import AlgorithmParams, Fraction, Positive, Weight
from mutexmatch.selection import rampup_weight


def sharpen(probs: Tensor, temperature: float) -> Tensor:
    """Eq. 7: p^(1/T), renormalised per row. A row whose powers all underflow to 0 (T near its documented edge 0;
    in float32 from T ~ 0.01 on) takes the same value computed in log space, softmax(log p / T), whose limit is the
    one-hot argmax, instead of 0/0 = NaN (issue 33: MixMatch and ReMixMatch stopped at step 0). ``torch.where``
    keeps every other row bit-identical and adds no host sync."""
    p = probs ** (1.0 / temperature)
    total = p.sum(dim=-1, keepdim=True)
    in_log_space = torch.softmax(torch.log(probs.clamp_min(torch.finfo(probs.dtype).tiny)) / temperature, dim=-1)
    return torch.where(total > 0, p / total, in_log_space)


def draw_mixup(rows: int, alpha: float) -> tuple[float, Tensor]:
    """(lambda', pi) as USB's ``mixup_one_target`` draws them: lambda ~ Beta(alpha, alpha) from numpy's global
    generator on the host, lambda' = max(lambda, 1 - lambda), pi = torch.randperm(rows) from torch's global CPU
    generator (both in the trainer's checkpointed RNG state, so a resumed run draws the same); nothing is read
    back from the device."""
    lam = float(np.random.beta(alpha, alpha))
    return max(lam, 1.0 - lam), torch.randperm(rows)


def mixup(x: Tensor, y: Tensor, lam: float, perm: Tensor) -> tuple[Tensor, Tensor]:
    """Eq. 8-11 with the draws given: (lambda' x + (1 - lambda') x_pi, lambda' y + (1 - lambda') y_pi)."""
    perm = perm.to(x.device, non_blocking=True)
    return lam * x + (1 - lam) * x[perm], lam * y + (1 - lam) * y[perm]


class MixMatchParams(AlgorithmParams):
    """MixMatch: the unlabeled loss weight and its ramp-up, the sharpening temperature and MixUp's Beta parameter.
    Defaults: USB 0.3.2's classic-CV MixMatch config (config/classic_cv/mixmatch/mixmatch_cifar10_40_0.yaml)."""

    lambda_p: Weight = Field(75.0, description="[λ_U] MixMatch: weight of the mixed unlabeled rows' squared error.")
    temperature: Positive = Field(0.5, description="[T] sharpening temperature of the guessed labels.")
    mixup_alpha: Positive = Field(0.5, description="[α] MixUp: λ ~ Beta(α, α), λ' = max(λ, 1 − λ).")
    unsup_warm_up: Fraction = Field(0.4, description="Fraction of the run over which the unlabeled weights ramp up "
                                    "linearly from 0 (USB's `unsup_warm_up`).")


def mixed_logits(model: nn.Module, inp: StepInputs, mixed_x: Tensor) -> list[Tensor]:
    """TPC logits of the mixed batch in chunks of B rows, each its own forward; only the first chunk's statistics
    enter BatchNorm's running averages (USB's MixMatch and ReMixMatch)."""
    return [model.tpc(inp.forward(chunk, update_bn=i == 0)) for i, chunk in enumerate(mixed_x.split(inp.num_lb))]


@register_algorithm("mixmatch")
class MixMatch(Algorithm):
    """MixMatch: labels guessed from two weak views, sharpened; MixUp of labeled and unlabeled rows; cross-entropy
    on the mixed labeled rows + lambda_U w(t) squared error on the mixed unlabeled rows."""

    terms = ("sup", "p")
    Params = MixMatchParams
    params: MixMatchParams
    step = StepSpec(views=("lb", "weak", "weak2"), forward="separate")

    def compute(self, model: nn.Module, inp: StepInputs) -> StepOutput:
        p, b = self.params, inp.num_lb
        x_lb, x_w, x_w2 = (inp.view(v) for v in self.step.views)
        with torch.no_grad():   # the guess: each weak view its own forward, BatchNorm's statistics untouched
            probs = [torch.softmax(model.tpc(inp.forward(x, update_bn=False)), dim=1) for x in (x_w, x_w2)]
            guess = sharpen((probs[0] + probs[1]) / 2, p.temperature)
        targets = torch.cat([F.one_hot(inp.targets_lb, self.num_classes).to(guess.dtype), guess, guess])
        inputs = torch.cat([x_lb, x_w, x_w2])
        mixed_x, mixed_y = mixup(inputs, targets, *draw_mixup(len(inputs), p.mixup_alpha))
        logits = mixed_logits(model, inp, mixed_x)
        sup = soft_cross_entropy(mixed_y[:b], logits[0]).mean()
        unsup = F.mse_loss(torch.softmax(torch.cat(logits[1:]), dim=1), mixed_y[b:], reduction="none").mean(1).mean()
        weight = p.lambda_p * rampup_weight(inp.step, self.ctx.total_steps, p.unsup_warm_up)
        conf, pseudo_label = guess.max(dim=1)
        return StepOutput(loss=sup + weight * unsup, terms={"sup": sup, "p": unsup}, conf=conf,
                          pseudo_label=pseudo_label, soft_target=guess)

    def term_weights(self) -> dict[str, float]:
        return {"sup": 1.0, "p": self.params.lambda_p}
