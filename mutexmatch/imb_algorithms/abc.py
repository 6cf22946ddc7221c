"""ABC, the auxiliary balanced classifier (Lee et al., NeurIPS 2021), as USB 0.3.2 runs it
(``semilearn/imb_algorithms/abc/abc.py``; the lockstep test is its reference).

A linear head ``model.heads["abc"]`` on the backbone features (USB's ``ABCNet.aux_classifier``) trained beside the
base algorithm's loss, L = L_base + lambda_abc (L_abc^lb + L_abc^ulb), with per-class Bernoulli masks that balance it:

- labeled: L_abc^lb = mean_i CE(g(f(x_i)), y_i) M_i, M_i ~ Bernoulli(min_c N_c / N_{y_i}) (the labeled counts);
- unlabeled: q = softmax(g(f(weak))) (no gradient), y^ = argmax q; L_abc^ulb = mean_j CE(g(f(strong_j)), y^_j)
  1(max q_j >= tau_abc) M'_j, M'_j ~ Bernoulli(1 - (e / E) (1 - min_c N_c / N_{y^_j})), e / E the epoch progress
  of USB's loop (e = step // epoch_steps, E = ceil(T / epoch_steps)): the unlabeled mask moves from all-ones to the
  labeled one as training goes.

The masks are drawn from torch's global generator, labeled first, in float64 as USB draws them. Evaluation and
prediction use the auxiliary head (USB's ``evaluate(out_key='logits_aux')``).

Bases: USB's FixMatch and ReMixMatch, and MutexMatch (issue 41 item 4; no USB reference): ABC reads only the backbone
features of the base's views, so L = L_MutexMatch + lambda_abc (L_abc^lb + L_abc^ulb) is defined as with FixMatch
(tests/mutexmatch/imb_algorithms/test_mutexmatch_base.py, docs/longtail.md "MutexMatch as a base").
"""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import Tensor, nn

from mutexmatch.algorithms.base import StepInputs, StepOutput
from mutexmatch.imb_algorithms.base import (EPOCH_STEPS_DOC, EpochNeeds, ImbAlgorithm, ImbParams,
                                            register_imb_algorithm, usb_epoch)
from mutexmatch.params import USB_EPOCH_STEPS, Probability, Steps, Weight


class ABCParams(ImbParams):
    """ABC: the auxiliary head's threshold and loss weight (USB's get_argument defaults, as in its
    config/classic_cv_imb/fixmatch_abc configs), and USB's epoch length."""

    tau: Probability = Field(0.95, description="[τ_abc] ABC: confidence threshold of the auxiliary head's "
                             "pseudo-labels (USB's abc_p_cutoff).")
    lambda_abc: Weight = Field(1.0, description="[λ_abc] ABC: weight of the auxiliary head's loss (USB's "
                               "abc_loss_ratio).")
    epoch_steps: Steps = Field(USB_EPOCH_STEPS, description=f"ABC: {EPOCH_STEPS_DOC}")


@register_imb_algorithm("abc")
class ABC(ImbAlgorithm):
    """ABC (Lee et al., 2021): an auxiliary classifier trained with class-balancing Bernoulli masks; it is the
    head evaluated."""

    imb_params_model = ABCParams
    imb: ABCParams
    imb_terms = ("abc",)
    bases = ("fixmatch", "remixmatch", "mutexmatch")   # USB's two, and MutexMatch (module doc)
    evaluated_head = "abc"
    epoch_needs = EpochNeeds(progress=True)

    @classmethod
    def imb_heads(cls, params: ImbParams, feat_dim: int, num_classes: int) -> dict[str, nn.Module]:
        return {"abc": nn.Linear(feat_dim, num_classes)}

    def imb_init(self) -> None:
        counts = self.ctx.labeled_counts.to(self.ctx.device, torch.float64)
        self.lb_class_dist = counts.min() / counts      # USB: np.min(dist) / dist, float64

    def imb_term_weights(self) -> dict[str, float]:
        return {"abc": self.imb.lambda_abc}

    def compute(self, model: nn.Module, inp: StepInputs) -> StepOutput:
        out = super().compute(model, inp)      # type: ignore[misc]   # the base algorithm's step
        if inp.num_ulb == 0:
            raise ValueError("imb_algorithm.name='abc': needs unlabeled batches (its base draws none)")
        feats = self.view_features(inp, out)
        head = model.heads["abc"]
        terms, diagnostics = self.abc_loss(head(feats["lb"]), inp.targets_lb, head(feats["strong"]),
                                           head(feats["weak"].detach()).detach(), inp.step)
        return self.add_terms(out, terms, diagnostics)

    def abc_loss(self, logits_lb: Tensor, y_lb: Tensor, logits_s: Tensor, logits_w: Tensor, step: int
                 ) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
        """USB's ``compute_abc_loss``: the labeled and unlabeled balanced losses (module doc), their sum the term."""
        mask_lb = torch.bernoulli(self.lb_class_dist[y_lb]).float()
        lb = (F.cross_entropy(logits_lb, y_lb, reduction="none") * mask_lb).mean()
        with torch.no_grad():
            conf, pseudo = torch.softmax(logits_w, dim=1).max(dim=1)
            confident = conf.ge(self.imb.tau).to(logits_w.dtype)
            epoch, epochs = usb_epoch(step, self.imb.epoch_steps or self.ctx.steps_per_epoch, self.ctx.total_steps)
            ulb_class_dist = 1 - (epoch / epochs) * (1 - self.lb_class_dist)
            mask_ulb = confident * torch.bernoulli(ulb_class_dist[pseudo]).float()
        ulb = (F.cross_entropy(logits_s, pseudo, reduction="none") * mask_ulb).mean()
        return {"abc": lb + ulb}, {"abc_mask_lb": mask_lb, "abc_mask": mask_ulb, "abc_pseudo_label": pseudo,
                                   "abc_conf": conf}

    def imb_state_dict(self) -> dict[str, Any]:
        return {}     # lb_class_dist is the labeled set's, rebuilt from the context; the masks are fresh each step
