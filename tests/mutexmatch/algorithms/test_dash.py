"""Dash (mutexmatch/algorithms/dash.py): the supervised warm-up, rho_hat measured once at its end by the trainer on
the validation split (without one: the labeled images; never the test split), the per-stage threshold, the switch
to hard pseudo-labels, checkpointed state, no host synchronisation after the warm-up either. Equality with USB step
for step: usb/test_dash_lockstep.py."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from mutexmatch.algorithms import StepInputs, TrainContext, build_algorithm
from mutexmatch.config import parse_config
from mutexmatch.training.ema import ModelEMA
from mutexmatch.models import build_model
from mutexmatch.training import Trainer

from .test_adamatch import Heads

PARAMS = {"warmup_steps": 3, "stage_steps": 5, "gamma": 2.0, "c": 1.0, "rho_min": 0.3}


def _inputs(step, device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed)
    feats = 2 * torch.randn(8 + 32, 4, generator=g)
    return StepInputs(feats=feats.to(device).requires_grad_(), num_lb=8, num_ulb=16, step=step,
                      targets_lb=torch.randint(4, (8,), generator=g).to(device), ulb_idx=torch.arange(16, device=device))


def _measured(loss: float) -> tuple[TrainContext, list, torch.nn.Module]:
    """A context whose reference_loss (the trainer's: validation split) returns ``loss`` and records each model it
    measures, and its EMA model."""
    calls, ema = [], torch.nn.Linear(1, 1)

    def reference_loss(model):
        calls.append(model)
        return loss
    ctx = TrainContext.synthetic(4, 16)
    return TrainContext(**{**ctx.__dict__, "ema_model": ema, "reference_loss": reference_loss,
                           "reference_split": "validation"}), calls, ema


def test_warmup_is_supervised_then_rho_hat_is_measured_once_on_the_reference_split() -> None:
    ctx, calls, ema = _measured(1.2)
    alg = build_algorithm("dash", PARAMS, ctx)
    for step in range(3):
        out = alg.compute(Heads(), _inputs(step))
        x = _inputs(step)
        torch.testing.assert_close(out.loss, F.cross_entropy(x.feats[:8], x.targets_lb))
        assert out.mask.sum() == 0 and out.terms["p"] == 0
        with pytest.raises(RuntimeError, match="rho_hat was never set"):
            alg.rho(3)
        alg.after_step(step)
    assert calls == [ema] and alg.rho_init == 1.2
    alg.after_step(3)
    assert len(calls) == 1                                              # once per run
    # stages of 5 steps from the warm-up's end: 1.2, 0.6, then rho_min 0.3 (hard pseudo-labels)
    assert [alg.rho(s) for s in (3, 7, 8, 12, 13, 30)] == [1.2, 1.2, 0.6, 0.6, 0.3, 0.3]
    soft, hard = alg.compute(Heads(), _inputs(3)), alg.compute(Heads(), _inputs(13))
    assert soft.soft_target is not None and hard.soft_target is None
    assert 0 < soft.mask.mean() < 1 and 0 < hard.mask.mean() < 1


def test_without_a_warmup_rho_hat_is_the_initial_models_loss_on_the_reference_split() -> None:
    """warmup_steps 0: rho_hat is measured once, when the algorithm is built (the initial EMA model), never again."""
    ctx, calls, ema = _measured(0.7)
    alg = build_algorithm("dash", {**PARAMS, "warmup_steps": 0}, ctx)
    assert calls == [ema] and alg.rho_init == 0.7 and alg.rho(0) == 0.7
    out = alg.compute(Heads(), _inputs(0))
    assert out.terms["p"] > 0 and 0 < out.mask.mean() <= 1          # the consistency is on from the first step
    for step in range(3):
        alg.after_step(step)
    assert calls == [ema]


def test_state_round_trips_and_a_missing_trainer_is_named() -> None:
    alg = build_algorithm("dash", PARAMS, TrainContext.synthetic(4, 16))
    with pytest.raises(RuntimeError, match="reference_loss and EMA model"):
        alg.after_step(2)
    alg.set_rho_init(0.9)
    other = build_algorithm("dash", PARAMS, TrainContext.synthetic(4, 16))
    other.load_state_dict(alg.state_dict())
    assert other.rho_init == 0.9
    with pytest.raises(ValueError, match="finite and >= 0"):
        alg.set_rho_init(float("nan"))


@pytest.mark.parametrize("step", [3, 13])          # soft, then hard pseudo-labels
def test_steps_after_the_warmup_read_nothing_from_the_device(step) -> None:
    alg = build_algorithm("dash", PARAMS, TrainContext.synthetic(10, 16))
    alg.set_rho_init(1.2)
    model = build_model("small_cnn", num_classes=10, in_channels=1, image_size=8).to("meta")
    ema = ModelEMA(model, 0.999)
    feats = model(torch.zeros(8 + 32, 1, 8, 8, device="meta"))
    out = alg.compute(model, StepInputs(feats=feats, num_lb=8, num_ulb=16, step=step, ulb_idx=torch.zeros(
        16, dtype=torch.long, device="meta"), targets_lb=torch.zeros(8, dtype=torch.long, device="meta")))
    out.loss.backward()
    ema.update()
    assert out.loss.device.type == "meta" and out.mask.shape == (16,)


def _trainer(tmp_path, val_per_class):
    cfg = parse_config({
        "data": {"dataset": "digits", "num_labels": 20, "val_per_class": val_per_class},
        "model": {"backbone": "small_cnn"},
        "algorithm": {"name": "dash", "warmup_steps": 2, "stage_steps": 2},
        "train": {"iterations": 4, "eval_interval": 4, "batch_size": 4, "mu": 2, "num_threads": 1,
                  "progress": False},
        "output_dir": str(tmp_path / f"run{val_per_class}"),
    })
    return Trainer(cfg)


def _mean_loss(trainer, x, y):
    return sum(F.cross_entropy(logits.float(), yb, reduction="sum").item()
               for logits, yb in trainer.evaluator.logits(trainer.ema.module, x, y)) / len(y)


@pytest.mark.parametrize("val_per_class", [5, 0])
def test_trainer_measures_rho_hat_on_validation_else_labeled_never_test(tmp_path, val_per_class) -> None:
    trainer = _trainer(tmp_path, val_per_class)
    seen = {}
    measure = trainer.algorithm.ctx.reference_loss

    def spy(model):
        seen["step"], seen["loss"] = trainer.step, measure(model)
        x, y = trainer.evaluator.reference_data()
        seen["expected"] = _mean_loss(trainer, x, y)
        test = trainer.bundle.test
        seen["test"] = _mean_loss(trainer, test.x, test.y)
        return seen["loss"]
    object.__setattr__(trainer.algorithm.ctx, "reference_loss", spy)
    trainer.fit()
    split = trainer.algorithm.ctx.reference_split
    assert split == ("validation" if val_per_class else "labeled")
    x, y = trainer.evaluator.reference_data()
    want = trainer.split.val if val_per_class else trainer.split.labeled
    assert len(y) == len(want) and torch.equal(y, trainer.bundle.train.y[torch.from_numpy(want)])
    assert seen["step"] == 1 and trainer.algorithm.rho_init == pytest.approx(seen["expected"], rel=1e-6)
    assert seen["loss"] != pytest.approx(seen["test"], rel=1e-6)     # the test split gives another value


def test_a_warmup_as_long_as_the_run_is_said(recwarn) -> None:
    """Issue 33 (dash-default-warmup): the default 2048 warm-up steps outlast a short run, which then never uses the
    unlabeled data (train/p and mask_ratio 0 at every evaluation) and FINISHED without a word."""
    ctx = TrainContext.synthetic(4, 16, total_steps=2048)
    with pytest.warns(UserWarning, match=r"algorithm.warmup_steps=2048 >= train.iterations=2048: Dash never uses the "
                      r"unlabeled data in this run .*; lower algorithm.warmup_steps"):
        build_algorithm("dash", {}, ctx)
    build_algorithm("dash", {"warmup_steps": 2047}, ctx)
    assert not [w for w in recwarn if "warmup_steps" in str(w.message)]
