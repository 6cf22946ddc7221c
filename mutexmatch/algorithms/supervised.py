"""Labeled data only: the supervised baseline."""
from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from mutexmatch.algorithms.base import Algorithm, StepInputs, Views, register_algorithm


@register_algorithm("supervised")
class Supervised(Algorithm):
    """Labeled data only: L_sup of Eq. (s)."""

    uses_unlabeled = False
    terms = ("sup",)

    def views(self, model: nn.Module, inp: StepInputs) -> Views:
        b, _ = self._split(inp)
        return Views(num_lb=b, targets_lb=inp.targets_lb, logits_lb=model.tpc(inp.feats[:b]))

    def base_terms(self, v: Views) -> dict[str, Tensor]:
        sup = F.cross_entropy(v.logits_lb, v.targets_lb)
        return {"loss": sup, "sup": sup}

    def term_weights(self) -> dict[str, float]:
        return {"sup": 1.0}

