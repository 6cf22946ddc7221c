"""The trainer's generation boundary (CReST, CReST+: issue 41 item 3; mutexmatch/training/generations.py) on a
long-tailed digits split: at the first step of generation g the EMA model's pool logits choose the picks (USB's rule,
crest_selection, which the lockstep test checks against USB), the model restarts from the weights the global
generator draws there (as USB's set_model), with a fresh EMA, optimiser and schedule, and the labeled batches come
from the original labeled set plus the picks with their pseudo-labels; a run stopped at a boundary resumes
bit-identical."""
from __future__ import annotations

import pytest
import torch

from mutexmatch.config import parse_config
from mutexmatch.imb_algorithms.crest import crest_selection
from mutexmatch.training import Trainer
from mutexmatch.training.generations import start_due_generation
from mutexmatch.training.network import build_network
from mutexmatch.training.optim import lr_factor


def _raw(tmp_path, name: str = "run", iterations: int = 6, imb: dict | None = None) -> dict:
    return {"data": {"dataset": "digits", "num_labels": 78, "fold": 1, "unlabeled_includes_labeled": False,
                     "imbalance": {"labeled_head": 20, "labeled_ratio": 10}},
            "model": {"backbone": "small_cnn"}, "algorithm": {"name": "fixmatch"},
            "imb_algorithm": imb or {"name": "crest+", "num_gens": 3},
            "train": {"iterations": iterations, "eval_interval": 2, "batch_size": 8, "mu": 2, "num_threads": 1,
                      "progress": False, "keep_checkpoints": 10},
            "output_dir": str(tmp_path / name)}


def test_a_generation_restarts_the_model_on_the_grown_labeled_set(tmp_path):
    t = Trainer(parse_config(_raw(tmp_path)))
    alg = t.algorithm
    assert (alg.generation_steps, alg.num_generations, alg.ctx.total_steps) == (2, 3, 2)
    t.train_step()
    start_due_generation(t)
    assert alg.gen == 0 and alg.picks is None                    # step 1 is no boundary; step 2 is
    t.train_step()
    expected = crest_selection(t.evaluator.pool_logits(t.ema.module), alg.ctx.labeled_counts, alg.imb.alpha)
    rng = torch.get_rng_state()
    fresh = build_network(t.cfg, type(alg), t.num_classes, 1, t.bundle.train.x.shape[-1], t.device, t.autocast).model
    torch.set_rng_state(rng)
    old_model, old_lr = t.model, t.scheduler.get_last_lr()
    start_due_generation(t)
    assert alg.gen == 1 and alg.dist_align.t == pytest.approx(1 - 0.5 * 0.5)          # t_1 with G = 3
    assert torch.equal(alg.picks[0], expected.positions) and torch.equal(alg.picks[1], expected.labels)
    assert 0 < len(expected.positions) < len(t.split.unlabeled)
    assert t.model is not old_model and alg.ctx.ema_model is t.ema.module
    for (n, w), (_, f), (_, e) in zip(t.model.state_dict().items(), fresh.state_dict().items(),
                                      t.ema.module.state_dict().items()):
        assert torch.equal(w, f) and torch.equal(w, e), n        # USB's set_model: fresh weights, the EMA from them
    assert not t.optimizer.state and t.scheduler.last_epoch == 0 and t.scheduler.get_last_lr() != old_lr
    one_generation = lr_factor(parse_config(_raw(tmp_path, iterations=2, imb={"name": "crest+", "num_gens": 1})))
    assert [t.scheduler.lr_lambdas[0](s) for s in range(3)] == [one_generation(s) for s in range(3)]   # T = 2
    assert [g["params"][0] for g in t.optimizer.param_groups][0] is next(t.model.parameters())
    b = t.batches
    n_lb, n_train = len(t.split.labeled), len(t.bundle.train.y)
    assert len(b.sampler.labeled) == n_lb + len(expected.positions)
    picked = torch.from_numpy(t.split.unlabeled)[expected.positions]
    assert torch.equal(b.lb_x[n_train:], b.ulb_x[picked]) and torch.equal(b.lb_y[n_train:], expected.labels)
    assert not torch.equal(b.lb_y[n_train:], b.ulb_y[picked])   # pseudo-labels, not the true ones
    t.train_step()                                               # generation 1's first step runs
    assert t.step == 3 and alg.gen == 1


def test_a_run_stopped_at_a_boundary_resumes_bit_identical(tmp_path):
    full = Trainer(parse_config(_raw(tmp_path, "full")))
    full.fit()
    assert full.algorithm.gen == 2 and full.algorithm.picks is not None
    half = Trainer(parse_config(_raw(tmp_path, "half")))
    half.fit(stop_at=4)                                          # generation 2 starts at step 4's train_step
    assert half.algorithm.gen == 1
    resumed = Trainer(parse_config(_raw(tmp_path, "half")), resume=True)
    assert resumed.step == 4 and resumed.algorithm.gen == 1
    assert len(resumed.batches.sampler.labeled) == len(half.batches.sampler.labeled)   # generation 1's batches
    resumed.fit()
    a = {**full.model.state_dict(), **{f"ema.{k}": v for k, v in full.ema.state_dict().items()}}
    b = {**resumed.model.state_dict(), **{f"ema.{k}": v for k, v in resumed.ema.state_dict().items()}}
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert torch.equal(full.algorithm.picks[0], resumed.algorithm.picks[0])


def test_more_generations_than_steps_is_one_line(tmp_path):
    with pytest.raises(ValueError, match=r"imb_algorithm.num_gens=8: more generations than train.iterations=6"):
        Trainer(parse_config(_raw(tmp_path, imb={"name": "crest", "num_gens": 8})))


def test_a_pool_holding_the_labeled_images_is_said(tmp_path):
    raw = _raw(tmp_path)
    raw["data"]["unlabeled_includes_labeled"] = True
    with pytest.warns(UserWarning, match="USB's CReST draws its pool without them"):
        Trainer(parse_config(raw))


def test_one_generation_of_crest_is_fixmatch_bit_for_bit(tmp_path):
    """CReST without a generation boundary adds nothing to FixMatch's step: the weights, the EMA and the metrics are
    FixMatch's exactly (what rules out the step itself when short generations land at chance, docs/longtail.md)."""
    crest = Trainer(parse_config(_raw(tmp_path, "crest", imb={"name": "crest", "num_gens": 1})))
    crest.fit()
    raw = _raw(tmp_path, "fixmatch")
    del raw["imb_algorithm"]
    fixmatch = Trainer(parse_config(raw))
    fixmatch.fit()
    a = {**crest.model.state_dict(), **{f"ema.{k}": v for k, v in crest.ema.state_dict().items()}}
    b = {**fixmatch.model.state_dict(), **{f"ema.{k}": v for k, v in fixmatch.ema.state_dict().items()}}
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    last = [(tmp_path / n / "metrics.jsonl").read_text().splitlines()[-1] for n in ("crest", "fixmatch")]
    assert '"test/acc"' in last[0] and last[0].split('"test/acc"')[1][:12] == last[1].split('"test/acc"')[1][:12]
