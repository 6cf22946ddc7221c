"""The training loop: exact resume, run folder, callbacks, bad input, non-finite losses."""

from __future__ import annotations

import json
import math
import os

import pytest
import torch

from mutexmatch import metrics as M
from mutexmatch.algorithms import ALGORITHMS, StepOutput
from mutexmatch.training.callbacks import Callback
from mutexmatch.training.checkpoint import list_checkpoints
from mutexmatch.config import ConfigError, parse_config
from mutexmatch.training import NonFiniteLossError, Trainer, main


def _cfg(tmp_path, name="run", algorithm="mutexmatch", **alg):
    return parse_config({
        "data": {"dataset": "digits", "num_labels": 20, "fold": 1},
        "model": {"backbone": "small_cnn"},
        "algorithm": {"name": algorithm, **alg},
        "train": {"iterations": 8, "eval_interval": 2, "batch_size": 4, "mu": 2, "num_threads": 1,
                  "progress": False, "keep_checkpoints": 10},
        "output_dir": str(tmp_path / name),
    })


def _tensors(trainer: Trainer) -> dict[str, torch.Tensor]:
    out = {f"model.{k}": v for k, v in trainer.model.state_dict().items()}
    out.update({f"ema.{k}": v for k, v in trainer.ema.state_dict().items()})
    for key, value in trainer.algorithm.state_dict().items():   # DA history, the demo's per-sample predictions
        out.update({f"alg.{key}.{k}": v for k, v in value.items() if torch.is_tensor(v)} if isinstance(value, dict)
                   else {f"alg.{key}": value})
    for i, s in trainer.optimizer.state_dict()["state"].items():
        out.update({f"opt.{i}.{k}": v for k, v in s.items() if torch.is_tensor(v)})
    return out


@pytest.mark.parametrize("alg", [{"form": "paper", "k": 3}, {"form": "official", "dist_align": True},
                                 {"algorithm": "flexmatch_demo", "tau": 0.5},    # per-sample threshold state (conftest)
                                 {"algorithm": "meanteacher", "unsup_warm_up": 0.25},   # a teacher (the EMA model)
                                 {"algorithm": "vat"},                  # noise from the global generator
                                 {"algorithm": "extended_demo"},        # every view, rotations, an extra head
                                 # a second strong view, a projection head, its memory bank (full, and smoothing,
                                 # from step 2; it wraps every step) and alignment queue
                                 {"algorithm": "comatch", "tau": 0.5, "queue_batch": 1},
                                 {"algorithm": "remixmatch"},   # MixUp's draws (global generators), rotation head
                                 {"algorithm": "simmatch", "tau": 0.5}])   # the labeled bank by lb_pos
def test_stop_and_resume_is_bit_identical(tmp_path, alg):
    full = Trainer(_cfg(tmp_path, "full", **alg))
    full.fit()
    half = Trainer(_cfg(tmp_path, "half", **alg))
    half.fit(stop_at=4)
    assert half.step == 4
    resumed = Trainer(_cfg(tmp_path, "half", **alg), resume=True)
    assert resumed.step == 4
    resumed.fit()
    assert resumed.step == 8
    a, b = _tensors(full), _tensors(resumed)
    assert a.keys() == b.keys() and len(a) > 10
    for k in a:
        assert torch.equal(a[k], b[k]), k
    if "alg.selected" in a:   # the state is not trivial, so its equality above means it was checkpointed
        assert (a["alg.selected"] >= 0).sum() > 8
    if "alg.bank.emb" in a:   # CoMatch, SimMatch: the bank and the projection head are in the compared state
        assert a["alg.bank.emb"].abs().sum(1).gt(0).all() and "model.heads.proj.fc1.weight" in a
    lines = [json.loads(x) for x in (tmp_path / "half" / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == [2, 4, 6, 8]


@pytest.fixture
def restore_determinism():
    before = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    yield
    torch.use_deterministic_algorithms(before[0], warn_only=before[1])


def test_deterministic_is_set_by_every_trainer_and_keeps_cpu_results(tmp_path, monkeypatch, restore_determinism):
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    runs = {}
    for on in (True, False):
        cfg = _cfg(tmp_path, f"det{on}")
        cfg.train.deterministic = on
        trainer = Trainer(cfg)
        assert torch.are_deterministic_algorithms_enabled() is on
        if on:
            # warn-only: an op without a deterministic CUDA kernel must not kill a long run
            assert torch.is_deterministic_algorithms_warn_only_enabled()
            assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
        trainer.fit()
        runs[on] = _tensors(trainer)
    for k in runs[True]:
        assert torch.equal(runs[True][k], runs[False][k]), k


def test_run_folder_and_callbacks(tmp_path):
    events = []

    class Recorder(Callback):
        def on_eval(self, event):
            events.append(event)

    summary = Trainer(_cfg(tmp_path), [Recorder()]).fit()
    out = tmp_path / "run"
    for name in ("config.yaml", "split.json", "run.json", "metrics.jsonl", "best_model.pt", "final_model.pt"):
        assert (out / name).is_file(), name
    assert [e.step for e in events] == [2, 4, 6, 8]
    assert all(e.checkpoint is not None and e.checkpoint.is_file() for e in events)
    m = events[-1].metrics
    for key in ("test/acc", "test/best_acc", "test/median_acc", "train/sep", "train/n", "train/pl_acc_all",
                "train/cpa", "train/mask_ratio", "perf/img_per_s"):
        assert key in m, key
    counts = events[-1].class_counts
    assert counts["pseudo_label_counts"].shape == (10, 10)
    assert counts["pseudo_label_counts"].sum() == 2 * 4 * 2  # μB unlabeled samples per step × 2 steps
    assert counts["comp_label_counts"].sum() == 16
    assert summary.final_weights is not None and summary.step == 8


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_every_algorithm_logs_exactly_its_declared_terms(tmp_path, name):
    """Issue 22: a run logs train/loss and train/<term> for the terms its algorithm declares, no other (FixMatch no
    train/sep or train/n; the ablations their ab1 / nce), in the evaluation event (what MLflow gets) and in
    metrics.jsonl; two steps on digits."""
    cfg = parse_config({"data": {"dataset": "digits", "num_labels": 20}, "model": {"backbone": "small_cnn"},
                        "algorithm": {"name": name},
                        "train": {"iterations": 2, "eval_interval": 2, "batch_size": 2, "mu": 1, "num_threads": 1,
                                  "progress": False}, "output_dir": str(tmp_path / "run")})
    events = []

    class Recorder(Callback):
        def on_eval(self, event):
            events.append(event)

    Trainer(cfg, [Recorder()]).fit()
    declared = {M.term_metric(t) for t in ALGORITHMS[name].terms}
    (event,) = events
    assert {k for k in event.metrics if k not in M.FIXED and not M.is_recall_metric(k)} == declared
    assert M.term_metric(M.TOTAL) in event.metrics
    assert all(math.isfinite(event.metrics[k]) for k in declared)
    (line,) = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert {k for k in json.loads(line) if k.startswith("train/") and k not in M.FIXED} == declared


def _cpa_after(trainer: Trainer, ulb: torch.Tensor, **diagnostics) -> float:
    trainer._reset_accumulators()
    zero = torch.zeros(())
    trainer.stats.add(StepOutput(loss=zero, terms=dict.fromkeys(trainer.algorithm.terms, zero), **diagnostics), trainer.batches.ulb_y[ulb], step=0)
    return trainer.evaluate().metrics["train/cpa"]


def test_cpa_scores_the_complementary_labels_the_algorithm_returns(tmp_path):
    """One complementary label per sample (argmin / TNC): the fraction that is not the true class. Several (UPS
    negative labels, ``neg_mask``): sum neg*[c != y] / sum neg over every selected (sample, class) pair."""
    trainer = Trainer(_cfg(tmp_path))
    ulb = torch.tensor([0, 1])
    y0, y1 = trainer.batches.ulb_y[ulb].tolist()
    other0, other1 = [c for c in range(10) if c != y0][:2], (y1 + 1) % 10
    base = {"pseudo_label": torch.tensor([y0, y1]), "mask": torch.tensor([True, True])}
    # comp labels: sample 0's is its true class (wrong), sample 1's is not (right) -> 1/2
    assert _cpa_after(trainer, ulb, **base, comp_label=torch.tensor([y0, other1])) == pytest.approx(0.5)
    neg = torch.zeros(2, 10)
    neg[0, [y0, *other0]] = 1.0  # 2 of 3 negative labels right
    neg[1, other1] = 1.0         # 1 of 1 right
    assert _cpa_after(trainer, ulb, **base, neg_mask=neg, comp_label=torch.tensor([y0, y1])) == pytest.approx(0.75)


def test_best_weights_are_written_by_the_loop_not_by_evaluate(tmp_path):
    alone = Trainer(_cfg(tmp_path, "alone"))
    alone.evaluate()
    assert not (tmp_path / "alone" / "best_model.pt").exists()

    class CheckBest(Callback):
        bests = 0

        def on_eval(self, event):
            saved = torch.load(tmp_path / "run" / "best_model.pt", weights_only=True)
            is_best = event.metrics["test/acc"] == event.metrics["test/best_acc"]
            if is_best:  # written before the callbacks run: the EMA weights of this evaluation
                ema = trainer.ema.state_dict()
                assert saved.keys() == ema.keys() and all(torch.equal(saved[k], ema[k]) for k in ema)
            self.bests += is_best

    check = CheckBest()
    trainer = Trainer(_cfg(tmp_path), [check])
    trainer.fit()
    assert check.bests >= 1


@pytest.mark.parametrize("form,ema,momentum", [("official", 0.99, 0.01), ("official", 0.999, 0.001),
                                               ("paper", 0.99, 0.001)])
def test_official_form_ties_wrn_batchnorm_momentum_to_the_ema(tmp_path, form, ema, momentum):
    """The released code's WRN uses BatchNorm momentum 1 - ema (0.001 exactly at the default 0.999, so default runs
    are unchanged); the paper form keeps 0.001."""
    cfg = _cfg(tmp_path, form=form).model_copy(deep=True)
    cfg.model.backbone, cfg.train.ema = "wrn28_2", ema
    bns = [m for m in Trainer(cfg).model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert len(bns) == 25 and all(bn.momentum == momentum for bn in bns)


def test_callback_can_stop_after_a_checkpoint(tmp_path):
    class StopAt4(Callback):
        def on_eval(self, event):
            return event.step >= 4

    Trainer(_cfg(tmp_path), [StopAt4()]).fit()
    assert [s for s, _ in list_checkpoints(tmp_path / "run" / "checkpoints")] == [2, 4]


def test_fresh_run_refuses_existing_checkpoints(tmp_path):
    Trainer(_cfg(tmp_path)).fit(stop_at=2)
    with pytest.raises(FileExistsError, match="--resume"):
        Trainer(_cfg(tmp_path))


def test_resume_refuses_another_config(tmp_path):
    Trainer(_cfg(tmp_path)).fit(stop_at=2)
    from mutexmatch.training.checkpoint import CheckpointError

    # issue 33 (resume-edit-algo): the line named two config hashes; it names the fields and the fix
    with pytest.raises(CheckpointError, match=r"another configuration \(algorithm.tau 0.95 → 0.5\); restore the "
                                              r"run's config.yaml as it was, or start a new run in another output_dir"):
        Trainer(_cfg(tmp_path, tau=0.5), resume=True)


def test_non_finite_loss_names_step_and_term(tmp_path):
    trainer = Trainer(_cfg(tmp_path))
    compute = trainer.algorithm.compute

    def poisoned(model, inp):
        out = compute(model, inp)
        if inp.step == 1:
            out.terms["n"] = out.terms["n"] * float("nan")
        return out

    trainer.algorithm.compute = poisoned
    with pytest.raises(NonFiniteLossError, match=r"'n' at step 1"):
        trainer.fit()


def test_cli_resume_errors(tmp_path, capsys):
    assert main(["--resume", str(tmp_path / "nope")]) == 2
    assert "nope: directory not found" in capsys.readouterr().err
    (tmp_path / "foreign").mkdir()
    assert main(["--resume", str(tmp_path / "foreign")]) == 2
    assert "not a mutexmatch run directory" in capsys.readouterr().err


def test_cli_config_error_exit_code(tmp_path, capsys):
    assert main(["--set", "algorithm.tau=1.5", "--set", f"output_dir={tmp_path}/x"]) == 2
    assert "algorithm.tau=1.5: must be in (0, 1]" in capsys.readouterr().err


def test_cli_trains_and_resumes(tmp_path, capsys):
    args = ["--set", "train.iterations=4", "--set", "train.eval_interval=2", "--set", "train.batch_size=4",
            "--set", "train.mu=2", "--set", "train.progress=false", "--set", f"output_dir={tmp_path}/cli"]
    assert main(args + ["--stop-at", "2"]) == 0
    assert main(["--resume", str(tmp_path / "cli")]) == 0
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert last["step"] == 4


def test_cli_trains_with_numbers_as_people_write_them(tmp_path, capsys):
    """Issue 40 item 4: `--set optim.lr=3e-4` and `lr: 1E-5` in a file (YAML 1.1 reads both as text) train."""
    (tmp_path / "run.yaml").write_text("optim: {lr: 1E-5, weight_decay: 5.e-4}\nalgorithm: {tau: .95}\n")
    args = ["--config", str(tmp_path / "run.yaml"), "--set", "train.iterations=2", "--set", "train.eval_interval=2",
            "--set", "train.batch_size=4", "--set", "train.mu=2", "--set", "train.progress=false"]
    assert main(args + ["--set", f"output_dir={tmp_path}/file"]) == 0
    assert main(args + ["--set", "optim.lr=3e-4", "--set", f"output_dir={tmp_path}/set"]) == 0, capsys.readouterr().err
    from mutexmatch.yamlfile import read_yaml_mapping
    trained = {name: read_yaml_mapping(tmp_path / name / "config.yaml") for name in ("file", "set")}
    assert (trained["file"]["optim"]["lr"], trained["set"]["optim"]["lr"]) == (1e-5, 3e-4)
    assert trained["set"]["optim"]["weight_decay"] == 5e-4 and trained["set"]["algorithm"]["tau"] == 0.95


def _ahead(trainer: Trainer) -> Trainer:
    trainer.prefetcher.ahead = True  # what CUDA does (on a side stream): each step also makes the next batch
    return trainer


def test_batches_made_ahead_give_the_same_run_and_resume_exactly(tmp_path):
    """Making the next batch ahead (the CUDA default) changes no batch; a checkpoint written while a batch is made
    ahead holds the batch state from before it, so the stopped run resumes bit-identically."""
    plain = Trainer(_cfg(tmp_path, "plain"))
    plain.fit()
    ahead = _ahead(Trainer(_cfg(tmp_path, "ahead")))
    ahead.fit()
    half = _ahead(Trainer(_cfg(tmp_path, "half")))
    half.fit(stop_at=4)
    assert half.prefetcher._pending is not None  # step 5's batch was made before the checkpoint of step 4
    resumed = _ahead(Trainer(_cfg(tmp_path, "half"), resume=True))
    resumed.fit()
    a = _tensors(plain)
    for other in (ahead, resumed):
        b = _tensors(other)
        assert a.keys() == b.keys()
        for k in a:
            assert torch.equal(a[k], b[k]), k


def test_bf16_autocast_keeps_batchnorm_losses_and_thresholds_in_fp32(tmp_path, monkeypatch):
    import mutexmatch.algorithms.mutexmatch as algorithms

    cfg = _cfg(tmp_path, form="official")
    cfg.train.precision = "bf16"
    trainer = Trainer(cfg)
    seen = {}
    loss = algorithms.mutexmatch_loss

    def recording_loss(**kwargs):
        seen.update({k: v.dtype for k, v in kwargs.items() if torch.is_tensor(v) and v.is_floating_point()})
        return loss(**kwargs)

    monkeypatch.setattr(algorithms, "mutexmatch_loss", recording_loss)
    conv = next(m for m in trainer.model.modules() if isinstance(m, torch.nn.Conv2d))
    conv_dtypes = []
    conv.register_forward_hook(lambda m, i, o: conv_dtypes.append(o.dtype))
    trainer.fit(stop_at=2)
    assert conv_dtypes and set(conv_dtypes) == {torch.bfloat16}  # the backbone did run in bf16
    assert {"logits_lb", "logits_w", "logits_s", "tnc_logits_w", "tnc_logits_s", "probs_w"} <= seen.keys()
    assert set(seen.values()) == {torch.float32}, seen
    for name, t in [*trainer.model.named_buffers(), *trainer.model.named_parameters()]:
        assert t.dtype in (torch.float32, torch.long), name  # BN running stats and weights stay fp32
    assert all(torch.isfinite(p).all() for p in trainer.model.parameters())


def test_sgd_is_foreach_on_cpu_and_equals_the_per_parameter_loop(tmp_path):
    trainer = Trainer(_cfg(tmp_path))
    assert all(g["foreach"] and not g["fused"] for g in trainer.optimizer.param_groups)
    ref = Trainer(_cfg(tmp_path, "loop"))
    for group in ref.optimizer.param_groups:
        group["foreach"] = False  # SGD reads it at every step: the per-parameter loop
    trainer.fit(stop_at=3)
    ref.fit(stop_at=3)
    for (name, p), q in zip(trainer.model.named_parameters(), ref.model.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.slow
def test_compiled_backbone_trains_like_eager_on_cpu(tmp_path):
    """train.compile (torch.compile of the backbone; ~30 s of compilation on 2 cores): the same run up to the
    float rounding of fused kernels."""
    runs = {}
    for on in (False, True):
        cfg = _cfg(tmp_path, f"compile{on}")
        cfg.train.compile = on
        trainer = Trainer(cfg)
        trainer.fit(stop_at=3)
        runs[on] = trainer
    assert runs[True].forward is not runs[True].model  # the compiled module ran
    for (name, p), q in zip(runs[False].model.named_parameters(), runs[True].model.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-3, atol=1e-4, msg=name)


def test_public_timing_and_parameter_groups(tmp_path):
    """What cost estimates and benchmarks use instead of the trainer's internals."""
    from mutexmatch.training import param_groups

    cfg = _cfg(tmp_path)
    cfg.data.val_per_class = 2
    trainer = Trainer(cfg)
    assert trainer.time_step() > 0 and trainer.step == 1
    assert trainer.time_steps(2) > 0 and trainer.step == 3  # free-running: two more steps, one sync (issue 24)
    assert trainer.evaluator.eval_images == 2 * len(trainer.bundle.test.y) + 20
    assert trainer.time_evaluation(16) > 0 and trainer.time_evaluation() > 0
    decay, no_decay = param_groups(trainer.model, 5e-4)
    bn = {id(p) for m in trainer.model.modules() if isinstance(m, torch.nn.BatchNorm2d) for p in m.parameters()}
    assert bn and {id(p) for p in no_decay["params"]} == bn and no_decay["weight_decay"] == 0.0
    assert decay["weight_decay"] == 5e-4 and len(decay["params"]) + len(bn) == len(list(trainer.model.parameters()))
    trainer.close()


def test_the_algorithm_gets_the_real_pool_through_its_context(tmp_path, monkeypatch):
    """Issue 22's seam: with a validation split the pool excludes the validation images (num_unlabeled is no longer
    an index range), the labeled histogram, schedule and EMA model come from the trainer, and every step's
    positions index the pool (``unlabeled[ulb_pos] == ulb_idx``)."""
    cfg = _cfg(tmp_path, algorithm="fixmatch")
    cfg.data.val_per_class = 2
    trainer = Trainer(cfg)
    ctx, split = trainer.algorithm.ctx, trainer.split
    assert len(split.val) == 20 and not set(split.val.tolist()) & set(ctx.unlabeled.tolist())
    assert torch.equal(ctx.unlabeled, torch.from_numpy(split.unlabeled)) and ctx.num_unlabeled == len(split.unlabeled)
    assert trainer.algorithm.num_unlabeled == ctx.num_unlabeled < len(trainer.bundle.train.y)
    assert ctx.labeled_counts.tolist() == [2] * 10 and torch.equal(ctx.labeled, torch.from_numpy(split.labeled))
    assert ctx.total_steps == 8 and ctx.steps_per_epoch == -(-len(split.unlabeled) // 8)
    assert ctx.ema_model is trainer.ema.module and ctx.device == trainer.device
    seen, after = [], []
    compute = trainer.algorithm.compute
    monkeypatch.setattr(trainer.algorithm, "compute", lambda model, inp: seen.append(inp) or compute(model, inp))
    monkeypatch.setattr(trainer.algorithm, "after_step", after.append)
    trainer.fit(stop_at=3)
    assert [inp.step for inp in seen] == after == [0, 1, 2]
    for inp in seen:
        assert torch.equal(ctx.unlabeled[inp.ulb_pos], inp.ulb_idx) and torch.equal(inp.pool_pos, inp.ulb_pos)


@pytest.mark.parametrize("algorithm", ["fixmatch", "mutexmatch"])
def test_an_in_flight_run_of_the_code_before_issue_22_resumes(tmp_path, algorithm):
    """Migration: a run folder written before each algorithm owned its config section — config.yaml with every
    legacy algorithm parameter, checkpoints carrying the legacy config hash — resumes under the current rule;
    a checkpoint of another configuration is still refused."""
    import yaml

    from mutexmatch.training.checkpoint import CheckpointError, latest_checkpoint, load_checkpoint, save_checkpoint
    from mutexmatch.config import LEGACY_ALGORITHM_SECTION, config_hash, legacy_config_hash, load_config

    cfg = _cfg(tmp_path, algorithm=algorithm)
    first = Trainer(cfg)
    first.fit(stop_at=4)
    legacy = legacy_config_hash(cfg)
    assert legacy is not None and legacy != config_hash(cfg)
    old = cfg.to_dict()
    old["algorithm"] = {"name": algorithm, **LEGACY_ALGORITHM_SECTION,
                        **{k: v for k, v in old["algorithm"].items() if k in LEGACY_ALGORITHM_SECTION}}
    first.run.config.write_text(yaml.safe_dump(old, sort_keys=False))
    path, state = latest_checkpoint(first.ckpt_dir)
    save_checkpoint({**state, "config_hash": legacy}, first.ckpt_dir, state["step"])
    reloaded = load_config(first.run.config)
    assert config_hash(reloaded) == config_hash(cfg) and reloaded.to_dict()["algorithm"] == cfg.to_dict()["algorithm"]
    resumed = Trainer(reloaded, resume=True)
    assert resumed.resumed_from == path and resumed.step == 4
    resumed.fit()
    assert resumed.step == 8 and load_checkpoint(resumed.last_checkpoint)["config_hash"] == config_hash(cfg)
    save_checkpoint({**load_checkpoint(resumed.last_checkpoint), "config_hash": "0123456789abcdef"},
                    first.ckpt_dir, 8)
    with pytest.raises(CheckpointError, match="another configuration"):
        Trainer(reloaded, resume=True)


def test_an_algorithms_extra_head_is_trained_averaged_and_checkpointed(tmp_path):
    """Issue 23: Algorithm.heads are attached before the optimiser, the EMA and checkpoints see the model."""
    trainer = Trainer(_cfg(tmp_path, algorithm="extended_demo"))
    head = trainer.model.heads["rot"]
    assert {id(p) for p in head.parameters()} <= {id(p) for g in trainer.optimizer.param_groups for p in g["params"]}
    before = head.weight.detach().clone()
    trainer.fit(stop_at=2)
    assert not torch.equal(before, head.weight) and "heads.rot.weight" in trainer.ema.state_dict()
    assert not torch.equal(trainer.ema.module.heads["rot"].weight, before)
    assert "heads.rot.weight" in torch.load(trainer.last_checkpoint, weights_only=True)["model"]
    assert "heads.rot.weight" not in Trainer(_cfg(tmp_path, "plain", algorithm="fixmatch")).model.state_dict()


def test_cuda_graphs_are_refused_for_separate_forwards(tmp_path):
    """One line before any work: the graphed forward marks a new graph generation per call (issue 23)."""
    cfg = parse_config({**_cfg(tmp_path, algorithm="pimodel").to_dict(), "train": {
        **_cfg(tmp_path).train.model_dump(), "cuda_graphs": True, "device": "cpu"}})
    with pytest.raises(ConfigError, match=r"train.cuda_graphs=true: algorithm 'pimodel' runs several forwards"):
        Trainer(cfg)
    assert not (tmp_path / "run").exists()
