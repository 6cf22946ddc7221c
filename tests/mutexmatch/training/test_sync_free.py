"""A steady-state training step makes the host wait for the device nowhere: every algorithm's forward, loss,
backward, the SGD step, the EMA update and the trainer's diagnostics accumulator run on the meta device (an
extended step's separate forwards, teacher and VAT's adversarial direction included) (shapes
without data), where any read of a device value — ``item``/``tolist``, ``nonzero``, boolean indexing,
data-dependent shapes — raises. (The augmentation path
has its own such test in test_augment.py; on CUDA, benchmarks/profile_step.py counts the synchronisations.)"""

from __future__ import annotations

import pytest
import torch

from mutexmatch.algorithms import ALGORITHMS, TrainContext
from mutexmatch.training.diagnostics import StepAccumulator
from mutexmatch.training.ema import ModelEMA
from mutexmatch.training.extended_step import features_forward, step_inputs, teacher_forward
from mutexmatch.models import build_model

B, MU_B, C = 4, 8, 10


VARIANTS = ({}, {"dist_align": True}, {"form": "official"}, {"form": "official", "k": 3})
CASES = [(name, params) for name in sorted(ALGORITHMS) for params in VARIANTS
         if set(params) <= set(ALGORITHMS[name].Params.model_fields)]


@pytest.mark.parametrize("name,params", CASES)
def test_forward_loss_backward_sgd_and_ema_read_nothing_from_the_device(name, params):
    cls = ALGORITHMS[name]
    alg = cls(params, TrainContext.synthetic(C, 2 * MU_B))
    model = build_model("small_cnn", num_classes=C, in_channels=1, image_size=8, with_tnc=cls.uses_tnc)
    model.add_heads(cls.heads(alg.params, model.feat_dim, C))
    model = model.to("meta")
    ema = ModelEMA(model, 0.999)
    sgd = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-4, foreach=True)
    u = MU_B if cls.uses_unlabeled else 0
    x = torch.zeros(sum(cls.step.rows(B, u)), 1, 8, 8, device="meta")   # the algorithm's views, as the trainer
    rot = torch.zeros(u, dtype=torch.long, device="meta") if "rotated" in cls.step.views else None
    inp = step_inputs(cls.step, x, num_lb=B, num_ulb=u, features=features_forward(model, model),
                      teacher=teacher_forward(ema.module), step=0, rot_label=rot,
                      targets_lb=torch.zeros(B, dtype=torch.long, device="meta"),
                      ulb_idx=torch.zeros(u, dtype=torch.long, device="meta"),
                      lb_pos=torch.zeros(B, dtype=torch.long, device="meta"))
    out = alg.compute(model, inp)
    out.loss.backward()
    sgd.step()
    ema.update()
    stats = StepAccumulator(C, torch.device("meta"), alg.terms)
    stats.add(out, torch.zeros(u, dtype=torch.long, device="meta"), step=0)
    assert out.loss.device.type == "meta" and out.loss.shape == ()
    assert stats.counts.device.type == "meta" and stats.ulb_seen == u
