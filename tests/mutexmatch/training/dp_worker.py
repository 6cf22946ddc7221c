"""One rank of the data-parallel equality tests (``test_distributed.py`` starts two of them with torchrun's
environment: ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``).

``python dp_worker.py OUT CONFTEST NAME[,NAME...] [extras]``: joins a gloo group itself (as Ray Train does, so the
trainer uses a group it did not make) and, for every named algorithm, trains :data:`STEPS` free-running steps at the
global batch of :func:`config` in float64 (:func:`float64`), with a single-process trainer beside it on rank 0: after
each step both trainers' weights, BatchNorm statistics, EMA, optimiser buffers, algorithm state and loss sums are
saved (``OUT/<name>.rank0.pt``), then both evaluations' metrics. With ``extras``, then (in float32, the production
precision) a 2-rank run stopped at step 3 and resumed beside the uninterrupted one (``OUT/resume.rank<r>.pt``) and
a signal that reached rank 1 only (``OUT/preempt.rank<r>.pt``), the evaluation split over the ranks
(:func:`sharded_accuracy`, ``OUT/eval.rank<r>.pt``); in float64 the deliberate break, a
distribution-alignment mean over each rank's rows only (``OUT/broken.rank0.pt``), and ``train.sync_bn: false``
beside its one-process reference, :class:`PerShareBatchNorm2d` (``OUT/perrank.rank<r>.pt``).
"""
from __future__ import annotations

import contextlib
import functools
import importlib.util
import shutil
import signal
import sys
from pathlib import Path

import torch
import torch.distributed as dist

STEPS = 5
BREAK_ALGORITHM = "fixmatch"   # with dist_align: the break's per-rank mean changes its state and loss
PER_RANK_NAMES = ("fixmatch", "meanteacher")   # train.sync_bn false: one forward of every view; a teacher's too


def config(name: str, out: Path, iterations: int = STEPS, tau: float = 0.5, **train):
    """The tiny run every equality test trains: digits, small_cnn, global batch B 4 and muB 8 (even: two ranks),
    thresholds low enough to select rows, distribution alignment on where the algorithm has it."""
    from mutexmatch.algorithms import ALGORITHMS
    from mutexmatch.config import parse_config

    fields = ALGORITHMS[name].Params.model_fields
    alg = {"name": name, **({"tau": tau} if "tau" in fields else {}),
           **({"dist_align": True} if "dist_align" in fields else {})}
    return parse_config({
        "data": {"dataset": "digits", "num_labels": 20, "fold": 1}, "model": {"backbone": "small_cnn"},
        "algorithm": alg,
        "train": {"iterations": iterations, "eval_interval": iterations, "batch_size": 4, "mu": 2,
                  "num_threads": 1, "progress": False, "keep_checkpoints": 10, **train},
        "output_dir": str(out / name),
    })


def tensors(trainer) -> dict[str, torch.Tensor]:
    """Every weight, BatchNorm statistic, EMA weight, optimiser buffer and tensor of the algorithm's state, by
    name."""
    out = {f"model.{k}": v.detach().clone() for k, v in trainer.model.state_dict().items()}
    out.update({f"ema.{k}": v.detach().clone() for k, v in trainer.ema.state_dict().items()})

    def walk(prefix, value):
        if isinstance(value, dict):
            for k, v in value.items():
                walk(f"{prefix}.{k}", v)
        elif torch.is_tensor(value):
            out[prefix] = value.detach().clone()
        elif isinstance(value, (int, float)):
            out[prefix] = torch.tensor(value)
    walk("optim", trainer.optimizer.state_dict()["state"])   # momentum buffers, by parameter index
    walk("alg", trainer.algorithm.state_dict())
    walk("stats", trainer.stats.state_dict())   # the loss terms' and diagnostics' sums since the last evaluation
    return out


def record(trainer) -> dict:
    """:func:`tensors` and the names of the trained parameters among them."""
    return {"tensors": tensors(trainer), "params": [f"model.{k}" for k, _ in trainer.model.named_parameters()]}


def train(cfg, bundle, stop_at=None, resume=False):
    """The trainer after fit; its tensors and last evaluation's metrics."""
    from mutexmatch.training import Trainer
    from mutexmatch.training.callbacks import Callback

    events = []

    class Everywhere(Callback):
        all_ranks = True

        def on_eval(self, event):
            events.append(event.metrics)

    trainer = Trainer(cfg, [Everywhere()], bundle=bundle, resume=resume)
    trainer.fit(stop_at=stop_at)
    return {"tensors": tensors(trainer), "metrics": events[-1] if events else {}, "step": trainer.step}


def side_by_side(cfg, out: Path, bundle, tamper=None, reference=None) -> list[dict]:
    """:data:`STEPS` free-running steps of a 2-rank trainer and, on rank 0, of a single-process one (``dp``
    inactive) beside it, each from its own state: per step both trainers' tensors (rank 0; rank 1: its own), then the
    evaluation's metrics of both. The single process draws the global generators (MixMatch's permutation, VAT's
    noise) as the 2-rank trainer found them, so both see the draws a run alone would. ``tamper(trainer)`` changes
    the 2-rank trainer only (the deliberate break), ``reference(trainer)`` the single process only (per-rank
    BatchNorm's)."""
    from mutexmatch.training import Trainer, loop
    from mutexmatch.training.distributed import DataParallel
    from mutexmatch.training.rng import rng_state, set_rng_state

    two = Trainer(cfg, bundle=bundle)
    if tamper is not None:
        tamper(two)
    one = None
    if two.dp.is_main:
        joined, loop.join_process_group = loop.join_process_group, lambda device: DataParallel()
        try:
            one = Trainer(cfg.model_copy(update={"output_dir": str(out / "one" / cfg.algorithm.name)}), bundle=bundle)
        finally:
            loop.join_process_group = joined
        if reference is not None:
            reference(one)
    rows = []
    for _ in range(STEPS):
        before = rng_state()
        two.train_step()
        row = {"two": record(two)}
        if one is not None:
            after = rng_state()
            set_rng_state(before)
            one.train_step()
            row["one"] = record(one)
            set_rng_state(after)
        rows.append(row)
    rows.append({"two": {"metrics": two.evaluate().metrics},
                 **({"one": {"metrics": one.evaluate().metrics}} if one is not None else {})})
    for trainer in (one, two):
        if trainer is not None:
            trainer.close()
    return rows


@contextlib.contextmanager
def float64():
    """Models, batches and losses in float64 meanwhile (the equality comparisons). In float32 this tiny network at
    a small batch amplifies rounding: a 1e-7 relative nudge of ReMixMatch's initial weights moved its 5-step
    weights by 6e-3, and a max-pool window whose two largest inputs are within rounding of each other routes a
    gradient either way, so 2 ranks' other summation order drifted as far. In float64 both rounding and such near
    ties are ~1e-16, far below the 1e-5 compared; exact ties (ReLU zeros) are resolved alike on both sides."""
    from mutexmatch.training import batches, evaluation

    was, normalize = torch.get_default_dtype(), (batches.normalize, evaluation.normalize)
    torch.set_default_dtype(torch.float64)   # parameters, buffers and optimiser state are made in it
    batches.normalize = evaluation.normalize = functools.partial(normalize[0], dtype=torch.float64)
    try:
        yield
    finally:
        torch.set_default_dtype(was)
        batches.normalize, evaluation.normalize = normalize


class PerShareBatchNorm2d(torch.nn.BatchNorm2d):
    """What ``train.sync_bn: false`` should be, in one process: each of the W contiguous shares of a forward's rows
    (a rank's rows) normalised with its own statistics, the running statistics updated from the first share's
    (rank 0's, copied to every rank after each step). Test-only: the reference of the per-rank comparison."""

    world = 2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return super().forward(x)
        shares = x.chunk(self.world)
        first = super().forward(shares[0])   # updates the running statistics unless bn_frozen turned them off
        rest = [torch.nn.functional.batch_norm(s, None, None, self.weight, self.bias, True, 0.0, self.eps)
                for s in shares[1:]]
        return torch.cat([first, *rest])


def per_share_batchnorm(trainer) -> None:
    """``trainer``'s (the single process's) backbone and EMA backbone BatchNorm as :class:`PerShareBatchNorm2d`."""
    for module in (trainer.model.backbone, trainer.ema.module.backbone):
        for m in module.modules():
            if type(m) is torch.nn.BatchNorm2d:
                m.__class__ = PerShareBatchNorm2d


def sharded_accuracy(cfg, bundle) -> tuple[float, float, float]:
    """The 2-rank evaluator's accuracy against labels its model gets right on exactly the first quarter of the
    test images (and wrong elsewhere), that quarter's share, and the same accuracy read off its confusion matrix
    (the class-wise scores' counts): every rank scores its share and the counts are summed, so the three are equal;
    a rank's share alone, or a share scored twice, gives another number."""
    from mutexmatch.training import Trainer

    trainer = Trainer(cfg, bundle=bundle)
    test, ev = bundle.test, trainer.evaluator
    preds = torch.cat([logits.argmax(1) for logits, _ in ev.logits(trainer.model, test.x, test.y)]).cpu()
    quarter = len(preds) // 4
    labels = torch.cat([preds[:quarter], (preds[quarter:] + 1) % trainer.num_classes])
    acc = ev.accuracy(trainer.model, test.x, labels)
    conf = ev.confusion(trainer.model, test.x, labels)
    trainer.close()
    return acc, quarter / len(preds), int(conf.trace()) / len(preds)


def per_rank_alignment(trainer) -> None:
    """The deliberate break: ``trainer``'s distribution alignment takes its running mean from this rank's rows only
    (what a naive DDP port computes)."""
    from mutexmatch.algorithms.alignment import DistributionAlignment

    rank, world = trainer.dp.rank, trainer.dp.world_size

    class PerRank(DistributionAlignment):
        def __call__(self, probs, probs_lb=None):
            share = len(probs) // world
            update = self.model.update
            self.model.update = lambda mean: update(probs[rank * share:(rank + 1) * share].detach().float().mean(0))
            try:
                return super().__call__(probs, probs_lb)
            finally:
                del self.model.update
    trainer.algorithm.dist_align.__class__ = PerRank


def main(out: Path, conftest: Path, names: list[str], extras: bool) -> None:
    spec = importlib.util.spec_from_file_location("dp_conftest", conftest)   # the test-only algorithms
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
    from mutexmatch.data.load import load_dataset

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    bundle = load_dataset("digits", "data")
    with float64():
        for name in names:
            torch.save(side_by_side(config(name, out), out, bundle), out / f"{name}.rank{rank}.pt")
    if extras:
        resume_and_break(out, bundle, rank)
        torch.save(signal_on_one_rank(out, bundle, rank), out / f"preempt.rank{rank}.pt")
        torch.save(sharded_accuracy(config(BREAK_ALGORITHM, out / "evaluation"), bundle), out / f"eval.rank{rank}.pt")
        with float64():
            torch.save({name: side_by_side(config(name, out / "perrank", sync_bn=False), out / "perrank", bundle,
                                           reference=per_share_batchnorm) for name in PER_RANK_NAMES},
                       out / f"perrank.rank{rank}.pt")
    dist.destroy_process_group()


def signal_on_one_rank(out: Path, bundle, rank: int) -> dict | None:
    """SIGUSR1 reaches rank 1 only (a scheduler signals one node first): both ranks stop after the same step,
    rank 0 writing the checkpoint; a rank that went on alone would wait in the next step's gather until the timeout."""
    from mutexmatch.training import preemption

    if rank == 1:
        preemption.request(signal.SIGUSR1)
    try:
        train(config(BREAK_ALGORITHM, out / "preempt", iterations=6, eval_interval=3), bundle)
        return None
    except preemption.Preempted as e:
        return {"step": e.step, "checkpoint": str(e.checkpoint)}
    finally:
        preemption.clear()


def resume_and_break(out: Path, bundle, rank: int) -> None:
    """A 2-rank run stopped at step 3 and resumed beside the uninterrupted one; then the deliberate break."""
    resume_out = out / "resume"
    full = train(config(BREAK_ALGORITHM, resume_out / "full", iterations=6, eval_interval=3), bundle)
    half_cfg = config(BREAK_ALGORITHM, resume_out / "half", iterations=6, eval_interval=3)
    train(half_cfg, bundle, stop_at=3)
    if rank == 0:   # for the parent: a 2-rank checkpoint resumed by one process
        shutil.copytree(Path(half_cfg.output_dir), out / "half_at_3")
    dist.barrier()
    resumed = train(half_cfg, bundle, resume=True)
    torch.save({"full": full, "resumed": resumed}, out / f"resume.rank{rank}.pt")
    # every row above tau = 0.1 (of 10 classes): the aligned pseudo-labels all enter the loss
    broken = config(BREAK_ALGORITHM, out / "broken", tau=0.1)
    with float64():
        torch.save(side_by_side(broken, out / "broken", bundle, per_rank_alignment), out / f"broken.rank{rank}.pt")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3].split(","), sys.argv[4:] == ["extras"])
