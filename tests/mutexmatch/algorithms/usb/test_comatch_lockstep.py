"""CoMatch equals USB's CoMatch step for step: loss, the three terms, every gradient (backbone with BatchNorm, TPC,
projection head), BatchNorm's running statistics, the mask, the memory-smoothed pseudo-labels and the state (memory
bank and its pointer, distribution alignment's queue), over 8 steps in which the bank wraps around and memory
smoothing starts (USB's rule: after queue_batch steps and not in the first epoch), at a real run's epoch length
(USB's classic CV: 2^20 iterations in epochs of 1024, both sides started at iteration 1021; ours' epoch is its
``epoch_steps``, default 1024, not the trainer's pool pass of 4 steps here, which fails this test). Our
options set to USB's choices: ReLU in the projection head, smoothing_start usb, the DA quotient usb; the defaults
(salesforce/CoMatch's: LeakyReLU, smoothing once the bank is full, the released prob_list alignment) are checked
against the released code's formulas in tests/mutexmatch/algorithms/test_comatch.py."""
from __future__ import annotations

import torch
from torch import nn

from mutexmatch.algorithms.comatch import CoMatch


class CoMatchLockstep:
    name = usb_name = "comatch"
    terms = {"sup": "train/sup_loss", "p": "train/unsup_loss", "c": "train/contrast_loss"}
    logit_scale = 3.0
    steps = 8
    total_steps, first_step = 2**20, 1021
    batchnorm = True
    second_strong = True
    min_mixed = 6
    proj_dim = 8
    ours_params = {"tau": 0.8, "lambda_p": 1.0, "lambda_c": 0.5, "temperature": 0.3, "contrast_tau": 0.6,
                   "alpha": 0.7, "queue_batch": 2, "proj_dim": proj_dim, "proj_activation": "relu",
                   "smoothing_start": "usb", "da_window": 3, "da_ratio": "usb"}
    usb_args = {"p_cutoff": 0.8, "ulb_loss_ratio": 1.0, "contrast_loss_ratio": 0.5, "T": 0.3,
                "contrast_p_cutoff": 0.6, "smoothing_alpha": 0.7, "queue_batch": 2, "proj_size": proj_dim,
                "da_len": 3, "uratio": 4, "batch_size": 4, "epoch": 1024}

    def models(self, ours: nn.Module, usb_backbone: nn.Module):
        from semilearn.algorithms.comatch.comatch import CoMatch_Net
        num_classes = usb_backbone.net.head.out_features
        params = CoMatch.Params.parse(self.ours_params, "comatch", num_classes)
        ours.heads = nn.ModuleDict(CoMatch.heads(params, usb_backbone.num_features, num_classes))
        usb = CoMatch_Net(usb_backbone, proj_size=self.proj_dim)
        names = {n: f"backbone.{n}" if not n.startswith("heads.") else n for n in ours.state_dict()}
        for ours_layer, usb_layer in (("fc1", "0"), ("fc2", "2")):
            for what in ("weight", "bias"):
                names[f"heads.proj.{ours_layer}.{what}"] = f"mlp_proj.{usb_layer}.{what}"
        names = {n: u.replace("backbone.", "backbone.net.", 1) if u.startswith("backbone.") else u
                 for n, u in names.items()}
        return ours, usb, names

    def usb_targets(self, rec):
        """USB's pseudo-labels: the (smoothed) probabilities its masking hook thresholds."""
        return rec.usb_hooks["masking.kwargs"]["logits_x_ulb"]

    def state(self, ours, usb) -> dict:
        da = usb.hooks_dict["DistAlignHook"]
        return {"bank embeddings": (ours.bank.emb, usb.queue_feats), "bank probabilities": (ours.bank.probs,
                usb.queue_probs), "bank pointer": (ours.bank.ptr, usb.queue_ptr),
                "p_model": (ours.dist_align.running_mean, da.p_model.mean(dim=0))}


def test_comatch_equals_usb_step_for_step(usb_lockstep):
    adapter = CoMatchLockstep()
    records = usb_lockstep(adapter)
    smoothed = [r.usb_hooks["masking.kwargs"]["logits_x_ulb"] for r in records]
    aligned = [r.usb_hooks["dist_align"] for r in records]
    # memory smoothing is exercised: from iteration 1024 (epoch >= 1; it > queue_batch = 2) the targets differ
    assert all(torch.equal(s, a) for s, a in zip(smoothed[:3], aligned[:3]))
    assert all(not torch.allclose(s, a) for s, a in zip(smoothed[3:], aligned[3:]))
    assert all(r.ours.terms["c"] > 0 for r in records)
