"""FixMatch + DARP equals USB's (``class (DARP, FixMatch)``, as its ``get_imb_algorithm`` composes them) step for step:
loss, terms, every gradient, BatchNorm's running statistics, FixMatch's mask, DARP's pseudo-labels and its state
(the pool's saved probabilities and the refined pool), on a long-tailed labeled pool (8, 4, 2, 1 a class), over
steps that cross DARP's warm-up: USB's epochs of 1,024 steps, ``warmup_epochs`` 0 (refining once the epoch exceeds
it), both sides started at iteration 1021, a refinement every 3 steps: 1021-1023 FixMatch's pseudo-labels, 1024 and
1025 the initial (uniform) refined pool's (USB's rule), 1026 and 1029 refinements, 1027-1028 their rows."""
from __future__ import annotations

import torch

from .test_fixmatch_lockstep import FixMatchLockstep


class DARPFixMatchLockstep(FixMatchLockstep):
    imb_name = usb_imb_name = "darp"
    imb_params = {"warmup_epochs": 0, "alpha": 2.0, "iter_t": 10, "num_refine_iter": 3, "epoch_steps": 1024}
    usb_args = {**FixMatchLockstep.usb_args, "darp_warmup_epochs": 0, "darp_alpha": 2.0, "darp_iter_T": 10,
                "darp_num_refine_iter": 3, "epoch": 4}
    lb_counts = (8, 4, 2, 1)
    total_steps, first_step, steps = 4096, 1021, 9
    batchnorm = True
    logit_scale = 8.0

    def state(self, ours, usb) -> dict:
        hook = usb.hooks_dict["PseudoLabelingHook"]
        return {"saved probabilities": (ours.darp_orig, hook.pseudo_orig),
                "refined pool": (ours.darp_refined, hook.pseudo_refine), "target": (ours.darp_target, hook.target_disb)}


def test_fixmatch_darp_equals_usb_step_for_step(usb_lockstep):
    records = usb_lockstep(DARPFixMatchLockstep())
    probs = [r.usb_hooks["gen_ulb_targets.kwargs"]["logits"] for r in records]   # FixMatch's p^w
    plain = [torch.equal(r.ours.pseudo_label, p.argmax(dim=1)) for r, p in zip(records, probs)]
    assert plain[:3] == [True] * 3                     # the warm-up: FixMatch's pseudo-labels
    assert all(bool(r.ours.pseudo_label.eq(0).all()) for r in records[3:5])   # the uniform pool before a refinement
    assert not all(plain[5:])                          # refined pseudo-labels differ from FixMatch's
