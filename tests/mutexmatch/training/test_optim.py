"""The optimiser choice (issue 42 item 3): USB's AdamW recipe in a run, its one-line config errors, and a layer decay
that would do nothing refused. Equality of the groups and the schedule with semilearn's own code:
tests/mutexmatch/algorithms/usb/test_optim_usb.py."""
from __future__ import annotations

import pytest
import torch

from mutexmatch.config import ConfigError, parse_config
from mutexmatch.training import Trainer
from mutexmatch.training.layer_decay import LayerDecayError, usb_param_groups


def _cfg(tmp_path, **optim):
    return parse_config({
        "data": {"dataset": "digits", "num_labels": 20, "fold": 1},
        "model": {"backbone": "small_cnn"},
        "algorithm": {"name": "fixmatch"},
        "optim": {"name": "adamw", "lr": 5e-4, **optim},
        "train": {"iterations": 8, "eval_interval": 4, "batch_size": 4, "mu": 2, "num_threads": 1, "ema": 0.0,
                  "progress": False},
        "output_dir": str(tmp_path / "run"),
    })


def test_an_adamw_run_warms_up_and_ema_zero_is_the_model(tmp_path):
    trainer = Trainer(_cfg(tmp_path, warmup=4))
    assert isinstance(trainer.optimizer, torch.optim.AdamW)
    no_decay, decay = trainer.optimizer.param_groups
    assert no_decay["weight_decay"] == 0.0 and decay["weight_decay"] == 5e-4
    # 1-D parameters (biases, BatchNorm's) undecayed, every weight matrix and kernel decayed: USB's rule, by shape
    assert {p.ndim for p in no_decay["params"]} == {1} and all(p.ndim > 1 for p in decay["params"])
    assert trainer.scheduler.get_last_lr() == [0.0, 0.0]   # warm-up starts at 0
    trainer.fit(stop_at=4)
    assert trainer.scheduler.get_last_lr() == [5e-4, 5e-4]  # and ends at lr
    for (name, p), q in zip(trainer.model.named_parameters(), trainer.ema.module.parameters()):
        assert torch.equal(p, q), name                       # train.ema 0: the evaluated model is the trained one


@pytest.mark.parametrize(("optim", "train", "line"), [
    ({"layer_decay": 0.65}, {}, "optim.layer_decay=0.65: applies to optim.name adamw only"),
    ({"name": "adamw", "warmup": -1}, {}, "optim.warmup=-1: must be >= 0"),
    ({"name": "adamw", "layer_decay": 1.5}, {}, "optim.layer_decay=1.5: must be in (0, 1]"),
    ({"name": "adam"}, {}, "optim.name='adam': Input should be 'sgd' or 'adamw'"),
])
def test_bad_recipe_is_one_line(optim, train, line):
    with pytest.raises(ConfigError) as err:
        parse_config({"optim": optim, "train": train})
    assert "\n" not in str(err.value) and str(err.value).startswith(line)


def test_earlier_configs_leave_the_new_fields_out():
    """At their defaults the new fields are not in the resolved config (and so not in its hash)."""
    assert not {"name", "layer_decay", "warmup"} & parse_config({}).to_dict()["optim"].keys()
    assert parse_config({"optim": {"name": "adamw", "warmup": 5}}).to_dict()["optim"]["warmup"] == 5


def test_layer_decay_on_a_backbone_without_layers_is_refused(tmp_path):
    from mutexmatch.models import build_model

    model = build_model("small_cnn", num_classes=10, image_size=16)
    with pytest.raises(LayerDecayError, match=r"optim.layer_decay=0.65: backbone SmallCNN declares no layers"):
        usb_param_groups(model, 1e-3, 0.05, 0.65)


def test_an_adamw_run_stopped_in_its_warmup_resumes_bit_identically(tmp_path):
    """AdamW's moments and the warm-up's step are checkpointed: a run stopped at step 2 of a 4-step warm-up and
    resumed ends where the uninterrupted run does, tensor for tensor (CPU)."""
    full = Trainer(_cfg(tmp_path / "full", warmup=4))
    full.fit()
    half = Trainer(_cfg(tmp_path / "half", warmup=4))
    half.fit(stop_at=2)
    resumed = Trainer(_cfg(tmp_path / "half", warmup=4), resume=True)
    assert resumed.step == 2 and resumed.scheduler.get_last_lr() == [2.5e-4, 2.5e-4]   # 2/4 of lr
    resumed.fit()
    for (name, p), q in zip(full.model.named_parameters(), resumed.model.parameters()):
        assert torch.equal(p, q), name
    moments = [(s["exp_avg"], r["exp_avg"]) for s, r in zip(full.optimizer.state.values(),
                                                            resumed.optimizer.state.values())]
    assert moments and all(torch.equal(a, b) for a, b in moments)
