"""The trainer's generation boundary, for an algorithm that trains in generations (CReST, CReST+: issue 41 item 3).

Such an algorithm sets ``generation_steps`` (steps of a generation; USB's num_train_iter per generation) and
``num_generations`` (the last one runs to ``train.iterations``), keeps its
generation ``gen`` and the pool images it added to the labeled set with their pseudo-labels (``picks``: pool
positions and labels, None in the first generation) in its state, and has ``end_generation(pool_logits)``. At the
first step of generation g (step g·L) the trainer does what USB's ``CReST.train`` does between generations: the EMA
model's logits on the pool (:meth:`Evaluator.pool_logits`, USB's ``evaluate('eval_ulb')``) go to
``end_generation``, then the model is re-initialised (new weights drawn from the global generator, as USB's
``set_model``; ``model.pretrained`` read again), with a new EMA, optimiser and learning-rate schedule (over one
generation, as USB's restarts) and the batches drawn from the original labeled set plus the picks. A resumed run
rebuilds those batches from the checkpointed picks; its weights come from the checkpoint.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from mutexmatch.training.batches import BatchSource
from mutexmatch.training.network import build_network
from mutexmatch.training.optim import lr_schedule, optimizer

# The sampler's and augmentations' seed offset of generation g (g * this): fresh draws each generation, as USB's
# new loaders draw them.
GENERATION_SEED_STRIDE = 7919


def generation_steps(algorithm: Any) -> int | None:
    """Steps of one generation, or None for an algorithm without generations."""
    return getattr(algorithm, "generation_steps", None)


def schedule_config(cfg: Any, algorithm: Any) -> Any:
    """``cfg`` with ``train.iterations`` one generation long where the algorithm has generations (the schedule's T)."""
    steps = generation_steps(algorithm)
    if steps is None:
        return cfg
    return cfg.model_copy(update={"train": cfg.train.model_copy(update={"iterations": steps})})


def batch_source(trainer: Any) -> BatchSource:
    """The batches of the algorithm's current generation: the labeled set grown by its picks."""
    cfg, alg = trainer.cfg, trainer.algorithm
    picks = getattr(alg, "picks", None)
    if picks is not None:
        seed = cfg.train.seed + GENERATION_SEED_STRIDE * alg.gen
        cfg = cfg.model_copy(update={"train": cfg.train.model_copy(update={"seed": seed})})
    return BatchSource(cfg, trainer.bundle, trainer.split, alg.step, alg.uses_unlabeled, trainer.device, grown=picks)


def start_due_generation(trainer: Any) -> None:
    """Before a step: at the first step of a generation the algorithm has not started yet, end the last one (the
    picks) and re-initialise (the module docstring)."""
    alg, steps = trainer.algorithm, generation_steps(trainer.algorithm)
    if (steps is None or trainer.step % steps or trainer.step // steps <= alg.gen
            or alg.gen + 1 >= alg.num_generations):     # the last generation runs to train.iterations
        return
    alg.end_generation(trainer.evaluator.pool_logits(trainer.ema.module))
    cfg, x = trainer.cfg, trainer.bundle.train.x
    build_network(cfg, type(alg), trainer.num_classes, trainer.bundle.info.channels, x.shape[-1], trainer.device,
                  trainer.autocast, trainer.dp).install(trainer)
    alg.ctx = dataclasses.replace(alg.ctx, ema_model=trainer.ema.module)
    trainer.optimizer = optimizer(trainer.model, cfg, trainer.device)
    trainer.scheduler = lr_schedule(trainer.optimizer, schedule_config(cfg, alg))
    restore_generation(trainer)


def restore_generation(trainer: Any) -> None:
    """The batches of the algorithm's generation (a resumed run, after its algorithm state is loaded)."""
    if getattr(trainer.algorithm, "picks", None) is not None:
        trainer.batches = batch_source(trainer)
        trainer.prefetcher = trainer.batches.prefetcher
