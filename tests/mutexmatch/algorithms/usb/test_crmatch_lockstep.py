"""CRMatch equals USB's CRMatch step for step: loss, every term (USB logs L_sup and L_u; its feature distance and
rotation losses are recorded from its own calls of torch's cosine embedding loss and of its cross-entropy), every
gradient (backbone with BatchNorm, TPC, the feature-distance head h and the rotation head r), BatchNorm's running
statistics over one forward of [labeled | weak | strong | rotated], the mask and the pseudo-labels, over 8 steps.

USB's ``CRMatch_Net`` is built for a non-convolutional backbone (``net`` bert: h on the pooled features, the form
ours has for every backbone); its rotated rows are fed our ``rotated`` view (the step's arithmetic is compared;
which images are rotated is the trainer's, docs/training.md)."""
from __future__ import annotations

import sys
import types
from argparse import Namespace

import torch
import torch.nn.functional as F
from torch import nn

from mutexmatch.algorithms.crmatch import CRMatch


class CRMatchLockstep:
    name = usb_name = "crmatch"
    ours_params = {"tau": 0.8, "lambda_p": 1.0, "lambda_fd": 1.0, "lambda_rot": 1.0}
    usb_args = {"p_cutoff": 0.8, "rot_loss_ratio": 1.0, "hard_label": True, "net": "bert_base_uncased",
                "dataset": "cifar10"}
    terms = {"sup": "train/sup_loss", "p": "train/unsup_loss"}
    logit_scale = 3.0
    steps = 8
    batchnorm = True
    rotated = True

    def __init__(self) -> None:
        self.usb_apart: list[torch.Tensor] = []   # USB's unreduced cosine embedding loss, per step
        self.usb_ce: list[torch.Tensor] = []      # every value its ce_loss returned, in order

    def models(self, ours: nn.Module, usb_backbone: nn.Module):
        from semilearn.algorithms.crmatch.crmatch import CRMatch_Net
        num_classes = usb_backbone.net.head.out_features
        params = CRMatch.Params.parse(self.ours_params, "crmatch", num_classes)
        ours.heads = nn.ModuleDict(CRMatch.heads(params, usb_backbone.num_features, num_classes))
        usb = CRMatch_Net(usb_backbone, Namespace(**self.usb_args), use_rot=True)
        names = {n: f"backbone.net.{n}" for n in ours.state_dict() if not n.startswith("heads.")}
        names.update({n: n.replace("heads.ds.", "ds_classifier.").replace("heads.rot.", "rot_classifier.")
                      for n in ours.state_dict() if n.startswith("heads.")})
        return ours, usb, names

    def prepare(self, ours, usb, g) -> None:
        """Record USB's Ld (before its mask) and its cross-entropies (Lrot is the last of a step)."""
        ce = usb.ce_loss

        def recording_ce(*args, **kwargs):
            value = ce(*args, **kwargs)
            self.usb_ce.append(value.detach())
            return value
        usb.ce_loss = recording_ce

    def recording_functional(self) -> types.SimpleNamespace:
        def cosine_embedding_loss(*args, **kwargs):
            value = F.cosine_embedding_loss(*args, **kwargs)
            self.usb_apart.append(value.detach())
            return value
        return types.SimpleNamespace(cosine_embedding_loss=cosine_embedding_loss)

    def usb_targets(self, rec):
        return rec.usb_hooks["masking.kwargs"]["logits_x_ulb"].argmax(dim=1)   # y_ulb, made without a hook

    def state(self, ours, usb) -> dict:
        return {}     # a fixed threshold keeps no state on either side


def test_crmatch_equals_usb_step_for_step(usb_lockstep, monkeypatch):
    adapter = CRMatchLockstep()
    usb_module = sys.modules["semilearn.algorithms.crmatch.crmatch"]
    monkeypatch.setattr(usb_module, "F", adapter.recording_functional())
    records = usb_lockstep(adapter)
    assert len(adapter.usb_apart) == len(records) and len(adapter.usb_ce) == 3 * len(records)
    for step, rec in enumerate(records):
        usb_fd = (adapter.usb_apart[step] * rec.usb_hooks["masking"]).mean()
        torch.testing.assert_close(rec.ours.terms["fd"], usb_fd, msg=lambda m: f"step {step}: L_fd\n{m}")
        torch.testing.assert_close(rec.ours.terms["rot"], adapter.usb_ce[3 * step + 2],
                                   msg=lambda m: f"step {step}: L_rot\n{m}")
    assert all(r.ours.terms["fd"] > 0 for r in records[-4:]) and all(r.ours.terms["rot"] > 0 for r in records)
