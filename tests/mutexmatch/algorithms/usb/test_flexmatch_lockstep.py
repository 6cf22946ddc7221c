"""FlexMatch equals USB's FlexMatch step for step, with and without the threshold warm-up: loss, gradients, masks,
pseudo-labels and the Curriculum Pseudo Labeling state (each sample's selected class, the normalised learning
effects beta_t(c), USB's ``classwise_acc``)."""
from __future__ import annotations

import pytest
import torch


class FlexMatchLockstep:
    name = usb_name = "flexmatch"
    terms = {"sup": "train/sup_loss", "p": "train/unsup_loss"}
    ulb_size = 32          # small, so the selected classes fill and the thresholds move within the steps
    steps = 8

    def __init__(self, warmup: bool) -> None:
        self.ours_params = {"tau": 0.9, "lambda_p": 1.0, "thresh_warmup": warmup}
        self.usb_args = {"p_cutoff": 0.9, "ulb_loss_ratio": 1.0, "hard_label": True, "thresh_warmup": warmup}
        # Scales chosen so the masks are mixed; the warm-up keeps thresholds lower, so one step of its eight passes
        # every sample.
        self.logit_scale, self.min_mixed = (3.5, self.steps - 1) if warmup else (3.0, self.steps)

    def prepare(self, ours, usb, g) -> None:
        """Both sides start mid-run: the unused samples the biggest bucket (so the warm-up matters), the rest selected with skewed class counts, and
        beta_t computed from that (by each side's own update), so the class thresholds differ from the start."""
        selected = torch.multinomial(torch.tensor([6.0, 1.0, 4.0, 2.0, 3.0]), self.ulb_size, True, generator=g) - 1
        hook = usb.hooks_dict["MaskingHook"]
        ours.cpl.selected, hook.selected_label = selected.clone(), selected.clone()
        ours.cpl._update_beta()
        hook.update()

    def state(self, ours, usb) -> dict:
        hook = usb.hooks_dict["MaskingHook"]
        return {"selected": (ours.cpl.selected, hook.selected_label), "beta": (ours.cpl.beta, hook.classwise_acc)}


@pytest.mark.parametrize("warmup", [True, False], ids=["warmup", "no-warmup"])
def test_flexmatch_equals_usb_step_for_step(usb_lockstep, warmup):
    adapter = FlexMatchLockstep(warmup)
    records = usb_lockstep(adapter)
