"""MixMatch and ReMixMatch equal USB's step for step: loss, the logged terms, every gradient (backbone with
BatchNorm, TPC, ReMixMatch's rotation head), BatchNorm's running statistics (only the first mixed chunk updates them;
every other forward leaves them alone) and ReMixMatch's alignment state, with MixUp's lambda (numpy) and permutation
(torch) drawn from the same seeds on both sides, over steps in which the unlabeled weight ramps up. USB keeps every
unlabeled row (no mask) and exposes no guessed labels: the loss and gradients cover them."""
from __future__ import annotations

from torch import nn

from mutexmatch.algorithms.remixmatch import ReMixMatch


class MixMatchLockstep:
    name = usb_name = "mixmatch"
    terms = {"sup": "train/sup_loss", "p": "train/unsup_loss"}
    logit_scale = 2.0
    batchnorm = True
    min_mixed = 0        # no mask
    ours_params = {"lambda_p": 75.0, "temperature": 0.5, "mixup_alpha": 0.5, "unsup_warm_up": 0.5}
    usb_args = {"ulb_loss_ratio": 75.0, "T": 0.5, "mixup_alpha": 0.5, "unsup_warm_up": 0.5}

    def usb_targets(self, rec):
        return None

    def state(self, ours, usb) -> dict:
        return {}


class ReMixMatchLockstep(MixMatchLockstep):
    name = usb_name = "remixmatch"
    second_strong = True
    rotated = True
    ours_params = {"lambda_p": 1.5, "lambda_kl": 0.5, "lambda_rot": 0.5, "temperature": 0.5, "mixup_alpha": 0.75,
                   "unsup_warm_up": 0.5}
    usb_args = {"ulb_loss_ratio": 1.5, "kl_loss_ratio": 0.5, "rot_loss_ratio": 0.5, "T": 0.5, "mixup_alpha": 0.75,
                "unsup_warm_up": 0.5}

    def models(self, ours: nn.Module, usb_backbone: nn.Module):
        from semilearn.algorithms.remixmatch.remixmatch import ReMixMatch_Net
        num_classes = usb_backbone.net.head.out_features
        params = ReMixMatch.Params.parse(self.ours_params, "remixmatch", num_classes)
        ours.heads = nn.ModuleDict(ReMixMatch.heads(params, usb_backbone.num_features, num_classes))
        names = {n: f"backbone.net.{n}" for n in ours.state_dict() if not n.startswith("heads.")}
        names.update({f"heads.rot.{w}": f"rot_classifier.{w}" for w in ("weight", "bias")})
        return ours, ReMixMatch_Net(usb_backbone, use_rot=True), names

    def prepare(self, ours, usb, g) -> None:
        """USB builds its alignment target from a numpy array: float64, which promotes its whole ReMixMatch step to
        float64; as float32 (the same values) both sides compute in float32."""
        da = usb.hooks_dict["DistAlignHook"]
        da.p_target = da.p_target.float()

    def state(self, ours, usb) -> dict:
        da = usb.hooks_dict["DistAlignHook"]
        return {"p_model": (ours.dist_align.running_mean, da.p_model), "p_target": (ours.dist_align.target(),
                                                                                     da.p_target)}


def test_mixmatch_equals_usb_step_for_step(usb_lockstep):
    records = usb_lockstep(MixMatchLockstep())
    assert records[0].usb_log["train/unsup_loss"] > 0 and records[0].ours.loss == records[0].ours.terms["sup"]


def test_remixmatch_equals_usb_step_for_step(usb_lockstep):
    records = usb_lockstep(ReMixMatchLockstep())
    assert all(r.ours.terms["rot"] > 0 and r.ours.terms["kl"] > 0 for r in records)
