"""UDA equals USB's UDA step for step where we compute the same thing (the harness is conftest.py), and the two
deliberate deviations are asserted against USB's own outputs (docs/training.md, UDA):

- USB never applies its temperature T (its pseudo-labelling hook gets probabilities with ``softmax=False`` and
  returns them unchanged): with USB at its T = 0.4, our ``temperature: 1.0`` equals it step for step, and our
  ``temperature: 0.4`` gives USB's target sharpened, softmax(z^w / 0.4), with everything else equal;
- USB's TSA keeps a labeled example by its *largest* probability, ours (the paper's, Google's code) by its *correct*
  class's: with a TSA schedule, every term but L_sup equals USB's, and each side's L_sup is its own formula.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from mutexmatch.selection import tsa_threshold


class UDALockstep:
    name = usb_name = "uda"
    # USB's T = 0.4 is never applied: our unsharpened target (temperature 1.0) is the one that equals USB's.
    ours_params = {"tau": 0.8, "temperature": 1.0, "tsa_schedule": "none", "lambda_p": 1.0}
    usb_args = {"p_cutoff": 0.8, "T": 0.4, "tsa_schedule": "none", "ulb_loss_ratio": 1.0}
    terms = {"sup": "train/sup_loss", "p": "train/unsup_loss"}
    logit_scale = 4.0

    def state(self, ours, usb) -> dict:
        return {}      # a fixed threshold and a step-indexed schedule: no state on either side


class Sharpened(UDALockstep):
    ours_params = {**UDALockstep.ours_params, "temperature": 0.4}


class Annealed(UDALockstep):
    ours_params = {**UDALockstep.ours_params, "tsa_schedule": "linear"}
    usb_args = {**UDALockstep.usb_args, "tsa_schedule": "linear"}


def test_uda_equals_usb_step_for_step(usb_lockstep):
    records = usb_lockstep(UDALockstep())
    assert len(records) >= 5
    assert 0 < torch.cat([r.ours.mask for r in records]).mean() < 1


def test_uda_sharpens_where_usb_does_not(usb_side_by_side):
    """Deliberate deviation: at T = 0.4 on both sides our target is USB's p^w sharpened, p^(1/T) / sum p^(1/T),
    never USB's; the mask (on the unsharpened p^w), the pseudo-labels and L_sup stay equal."""
    _, steps = usb_side_by_side(Sharpened())
    for step, (_, rec) in enumerate(steps):
        theirs = rec.usb_hooks["gen_ulb_targets"]
        sharpened = theirs ** 2.5 / (theirs ** 2.5).sum(dim=1, keepdim=True)
        torch.testing.assert_close(rec.ours.soft_target, sharpened, msg=lambda m: f"step {step}: target\n{m}")
        assert (rec.ours.soft_target.max(dim=1).values > theirs.max(dim=1).values + 1e-3).all(), step
        torch.testing.assert_close(rec.ours.mask, rec.usb_hooks["masking"])
        assert torch.equal(rec.ours.pseudo_label, theirs.argmax(dim=1))
        torch.testing.assert_close(rec.ours.terms["sup"].item(), rec.usb_log["train/sup_loss"])
        if rec.ours.mask.any():
            assert abs(rec.ours.terms["p"].item() - rec.usb_log["train/unsup_loss"]) > 1e-4, step
    assert sum(bool(r.ours.mask.any()) for _, r in steps) >= 3


def test_uda_anneals_by_the_correct_class_where_usb_uses_the_largest(usb_side_by_side):
    """Deliberate deviation: with TSA (linear, eta_t from 1/C over the run), ours keeps a labeled example while
    p(y*|x) <= eta_t, USB while max_c p(c|x) <= eta_t; both divide by B. Everything else equals USB's; the two L_sup
    differ in at least one step (an example the model gets wrong with max p > eta_t >= p(y*))."""
    adapter = Annealed()
    net, steps = usb_side_by_side(adapter)
    differ = 0
    for step, (v, rec) in enumerate(steps):
        with torch.no_grad():
            logits_lb = net.tpc(net(v.x_lb))
        probs, ce = torch.softmax(logits_lb, 1), F.cross_entropy(logits_lb, v.y_lb, reduction="none")
        eta = tsa_threshold("linear", step, len(steps), probs.shape[1])
        ours = (ce * (probs.gather(1, v.y_lb[:, None]).squeeze(1) <= eta)).mean()
        usb = (ce * (probs.max(dim=1).values <= eta)).mean()
        torch.testing.assert_close(rec.ours.terms["sup"], ours)
        torch.testing.assert_close(rec.usb_log["train/sup_loss"], usb.item())
        torch.testing.assert_close(rec.ours.terms["p"].item(), rec.usb_log["train/unsup_loss"])
        torch.testing.assert_close(rec.ours.mask, rec.usb_hooks["masking"])
        torch.testing.assert_close(rec.ours.soft_target, rec.usb_hooks["gen_ulb_targets"])
        differ += not torch.isclose(ours, usb)
    assert differ >= 1
