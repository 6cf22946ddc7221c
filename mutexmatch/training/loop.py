"""The training loop: :class:`Trainer` builds a run from its config and trains it, step by step, evaluating,
logging and checkpointing as it goes. Read top to bottom: set-up, the step, evaluation, the loop, state.

One step, as the released code: one forward over the concatenation [labeled weak | unlabeled weak | unlabeled strong]
(BatchNorm over all rows), the algorithm's loss, SGD (Nesterov) with the cos(7πt/16T) factor, then the EMA update. An
algorithm may declare other views and run its own forwards (its StepSpec, :mod:`.extended_step`). Augmentation runs
batched on the training device (:mod:`.batches`). Metrics accumulate on the device (:mod:`.diagnostics`) and are
read once per evaluation, so the loop does not synchronise with the host every step.
"""

from __future__ import annotations

import io
import json
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Sequence

import torch

from mutexmatch import metrics as M
from mutexmatch.algorithms import Algorithm, TrainContext
from mutexmatch.atomic import atomic_write
from mutexmatch.config import RunConfig, config_difference, config_hash, config_hashes
from mutexmatch.imb_algorithms import algorithm_class
from mutexmatch.data.load import DatasetBundle, load_dataset
from mutexmatch.data.splits import Split, make_split
from mutexmatch.training.batches import BatchSource
from mutexmatch.training.callbacks import TEST_CONFUSION, Callback, EvalEvent, RunSummary, StartEvent
from mutexmatch.training.checkpoint import CheckpointError, latest_checkpoint, load_checkpoint, prune_checkpoints
from mutexmatch.training.checkpoint import save_checkpoint as write_checkpoint
from mutexmatch.training.compiled import check_cuda_graphs, check_separate_forwards
from mutexmatch.training.device import autocast_factory, configure_process, resolve_device, synchronize
from mutexmatch.training.diagnostics import StepAccumulator, divergence_message
from mutexmatch.training.distributed import DataParallel, join_process_group
from mutexmatch.training.evaluation import Evaluator
from mutexmatch.training.extended_step import step_inputs
from mutexmatch.training.generations import restore_generation, schedule_config, start_due_generation
from mutexmatch.training.memory import check_batch_memory, check_memory, step_memory_error
from mutexmatch.training.network import build_network
from mutexmatch.training.optim import grad_scaler, lr_schedule, optimizer
from mutexmatch.training import preemption
from mutexmatch.training.rng import rng_state, seed_everything, set_rng_state
from mutexmatch.training.run_files import check_resumed_files, write_run_files
from mutexmatch.training.runfolder import RunFolder, RunFolderError, checkpoint_step
from mutexmatch.training.teacher_streams import attach_teacher_streams

__all__ = ["Trainer", "NonFiniteLossError"]

# How much train/loss may grow over a run before it is called a divergence: a training loss that falls, or rises
# a few-fold at a learning-rate restart, is far below it; 7e26 from 41 (issue 33's lr=10 run) is far above.
EXPLOSION = 1e6


class NonFiniteLossError(FloatingPointError):
    pass


class Trainer:
    """Trains one run described by a :class:`RunConfig`, reporting through :class:`Callback` objects.

    ``resume``: ``False`` starts fresh in an empty ``output_dir`` (``overwrite`` replaces the run files of a
    non-empty one), ``True`` continues from the newest usable checkpoint (error if there is none), ``"auto"``
    continues if a checkpoint exists and starts fresh otherwise (what a restarted Tune trial wants), a path
    continues from that checkpoint file. The run folder is locked from here until :meth:`fit` returns (or
    :meth:`close`): a second trainer on it raises :class:`~mutexmatch.training.runfolder.RunFolderLocked`.

    Data parallel (:mod:`.distributed`): in an initialised ``torch.distributed`` process group, or under torchrun
    (``WORLD_SIZE`` > 1: the trainer then initialises the group and destroys it when :meth:`fit` returns or on
    :meth:`close`), every rank builds this trainer with the same config and trains the config's global batch, each
    rank forwarding its share. Rank 0 alone locks and writes the run folder and reads the checkpoint it resumes
    (handed to the other ranks), and calls the callbacks; a callback with ``all_ranks = True`` is called on every
    rank with the same events (``checkpoint`` None off rank 0), and rank 0's ``on_eval`` answer stops every rank.
    """

    # ---------------------------------------------------------------- set-up
    def __init__(self, cfg: RunConfig, callbacks: Sequence[Callback] = (), *,
                 resume: bool | str | Path = False, bundle: DatasetBundle | None = None, overwrite: bool = False):
        self.cfg = cfg
        self.callbacks = list(callbacks)
        self.run = RunFolder(cfg.output_dir)
        self.out = self.run.path
        self.ckpt_dir = self.run.checkpoints
        self.dp = join_process_group(resolve_device(cfg.train.device))
        self.device = self.dp.device(resolve_device(cfg.train.device))
        alg_cls = algorithm_class(cfg)   # the base algorithm, with the imbalance algorithm composed in if any
        check_separate_forwards(cfg.train.cuda_graphs, cfg.algorithm.name, alg_cls.step)  # before any work
        check_cuda_graphs(cfg.train.cuda_graphs, self.device)
        self.dp.check(cfg.train.batch_size, cfg.train.batch_size * cfg.train.mu * alg_cls.uses_unlabeled,
                      cfg.train.compile or cfg.train.cuda_graphs)
        configure_process(cfg, self.device)
        resume_state = self.dp.from_main(lambda: self._check_folder(resume, overwrite))

        seed_everything(cfg.train.seed)
        if bundle is None:
            check_memory(cfg, self.device, self.dp.world_size)
        self.bundle = bundle or load_dataset(cfg.data.dataset, cfg.data.root, download=cfg.data.download,
                                             svhn_extra=cfg.data.svhn_extra, image_size=cfg.data.image_size,
                                             normalization=cfg.data.normalization)
        self.num_classes = self.bundle.info.num_classes
        self.split = self._make_split()
        check_batch_memory(cfg, tuple(self.bundle.train.x.shape[1:]), self.device)
        self._build(alg_cls, from_file=resume_state is None)   # resumed: the checkpoint holds the weights
        self.step = 0
        self.history: list[float] = []   # EMA test accuracy at every evaluation
        self.best_acc = -1.0
        self.best_val = -1.0
        self._loss_reference: tuple[int, float] | None = None   # (step, train/loss) of the first evaluation
        self._explosion_said = False                               # the divergence warning is given once a run
        self.resumed_from: Path | None = None
        self.last_checkpoint: Path | None = None
        self._reset_accumulators()
        self._open_run_folder(resume_state, fresh_overwrites=overwrite or resume == "auto")

    def _build(self, alg_cls: type[Algorithm], from_file: bool = True) -> None:
        """The network, the algorithm, optimiser, schedule, the evaluator and the batch pipeline, on the device."""
        cfg, x = self.cfg, self.bundle.train.x
        self.autocast = autocast_factory(self.device, cfg.train.precision)
        self.evaluator = Evaluator(cfg, self.bundle, self.split, self.device, self.autocast, self.dp)
        # draws the weights (the model's, then its extra heads'); the algorithm draws nothing
        build_network(cfg, alg_cls, self.num_classes, self.bundle.info.channels, x.shape[-1], self.device,
                      self.autocast, self.dp, from_file=from_file).install(self)
        self.algorithm = alg_cls(alg_cls.params_from(cfg.algorithm), self._context(alg_cls.uses_unlabeled))
        self.optimizer = optimizer(self.model, cfg, self.device)
        self.scheduler = lr_schedule(self.optimizer, schedule_config(cfg, self.algorithm))   # CReST: a generation
        self.scaler = grad_scaler(cfg, self.device)
        self.batches = BatchSource(cfg, self.bundle, self.split, alg_cls.step, alg_cls.uses_unlabeled, self.device)
        self.prefetcher = self.batches.prefetcher
        attach_teacher_streams(self)   # CoSSL: its teacher's batch streams and optimiser (teacher_streams.py)

    def _warn_if_exploding(self, loss: float) -> None:
        """A loss grown :data:`EXPLOSION` times since this process's first evaluation without turning non-finite
        (7e26 at optim.lr=10, issue 33 item 6: the run FINISHED at chance without a word) is said once."""
        if self._loss_reference is None:
            self._loss_reference = (self.step, loss)
        step, first = self._loss_reference
        if 0 < first and loss > EXPLOSION * first and not self._explosion_said:
            self._explosion_said = True
            warnings.warn(f"train/loss rose from {first:.3g} (step {step}) to {loss:.3g} (step {self.step}), over "
                          f"{EXPLOSION:.0e} times: the run diverged and its accuracy means nothing; lower optim.lr "
                          f"({self.optimizer.param_groups[0]['lr']:g}) or the loss weights", RuntimeWarning,
                          stacklevel=2)

    def _term_weights(self) -> dict[str, float]:
        """lambda_t of each term, for a divergence's message (an algorithm may declare none)."""
        try:
            return dict(self.algorithm.term_weights())
        except NotImplementedError:
            return {}

    def _context(self, uses_unlabeled: bool) -> TrainContext:
        """What the algorithm gets from the trainer (the seam): the pool, the labeled set, the schedule, the EMA."""
        t, split = self.cfg.train, self.split
        labeled = torch.from_numpy(split.labeled)
        per_step = t.batch_size * t.mu if uses_unlabeled else t.batch_size
        return TrainContext(
            num_classes=self.num_classes, unlabeled=torch.from_numpy(split.unlabeled), labeled=labeled,
            labeled_counts=torch.bincount(self.bundle.train.y[labeled], minlength=self.num_classes),
            total_steps=t.iterations,
            steps_per_epoch=-(-len(split.unlabeled if uses_unlabeled else split.labeled) // per_step),
            device=self.device, ema_model=self.ema.module, reference_loss=self.evaluator.reference_loss,
            reference_split="validation" if self.evaluator.val_data() is not None else "labeled",
            pool_logits=self.evaluator.pool_logits)

    def _make_split(self) -> Split:
        d = self.cfg.data
        extra = self.bundle.extra_unlabeled
        return make_split(self.bundle.train.y.numpy(), dataset=d.dataset, num_labels=d.num_labels,
                          num_classes=self.num_classes, fold=d.fold, rule=d.split_rule,
                          val_per_class=d.val_per_class, unlabeled_includes_labeled=d.unlabeled_includes_labeled,
                          num_extra_unlabeled=0 if extra is None else len(extra.y),
                          predefined_folds=self.bundle.predefined_folds, imbalance=d.imbalance)

    def _check_folder(self, resume: bool | str | Path, overwrite: bool) -> tuple[Path, dict] | None:
        """Before any work: a fresh run's folder may be used; a resumed run's checkpoint (rank 0's, data parallel)."""
        if resume is False:
            self.run.check_fresh(overwrite)  # checked again under the lock
        return self._find_resume_state(resume)

    def _find_resume_state(self, resume: bool | str | Path) -> tuple[Path, dict] | None:
        if resume is False:
            return None
        if isinstance(resume, (str, Path)) and resume != "auto":
            path = Path(resume)
            return path, load_checkpoint(path)
        found = latest_checkpoint(self.ckpt_dir)
        if found is None and resume is True:
            raise CheckpointError(f"{self.out}: no checkpoint to resume from")
        return found

    def _open_run_folder(self, resume_state: tuple[Path, dict] | None, fresh_overwrites: bool) -> None:
        """Lock the run folder, then continue the checkpoint's state or write a fresh run's files (data parallel:
        rank 0; the other ranks load the state rank 0 read, once rank 0 has opened the folder)."""
        if not self.dp.is_main:
            self.dp.from_main(lambda: None)
            if resume_state is not None:
                self._load_state(*resume_state)
            return
        self.dp.from_main(lambda: self._open_main_folder(resume_state, fresh_overwrites))

    def _open_main_folder(self, resume_state: tuple[Path, dict] | None, fresh_overwrites: bool) -> None:
        self.run.lock()
        try:
            if resume_state is not None:
                self._load_state(*resume_state)
            else:
                self.run.require_empty(overwrite=fresh_overwrites)
                write_run_files(self.run, self.cfg, self.bundle, self.split)
        except BaseException:
            self.run.unlock()
            raise

    def close(self) -> None:
        """Release the run folder and a process group the trainer initialised (:meth:`fit` does when it returns)."""
        if self.dp.is_main:
            self.run.unlock()
        self.dp.release()

    # ---------------------------------------------------------------- the step
    def train_step(self) -> None:
        """One step: batch (made ahead on CUDA, :class:`Prefetcher`), backbone forward under ``train.precision``'s
        autocast, then the heads, softmax thresholds and losses on the features cast to fp32, backward, SGD, EMA.
        BatchNorm keeps fp32 weights and running statistics under autocast (its buffers are never cast)."""
        start_due_generation(self)   # CReST's re-initialisation at a generation's first step (generations.py)
        t0 = time.perf_counter()
        x, y_lb, ulb, ulb_pos, num_ulb, rot, lb_pos = self.prefetcher.next()
        t1 = time.perf_counter()
        self.model.train()
        inp = step_inputs(self.algorithm.step, x, num_lb=len(y_lb), num_ulb=num_ulb, features=self.features,
                          teacher=self.teacher, targets_lb=y_lb, ulb_idx=ulb, step=self.step, ulb_pos=ulb_pos,
                          rot_label=rot, lb_pos=lb_pos)
        out = self.algorithm.compute(self.model, inp)
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(out.loss).backward()
        self.dp.average_gradients(self.model)   # data parallel: every rank the single process's gradient
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.scheduler.step()
        if not self.cfg.train.sync_bn:
            self.dp.broadcast_buffers(self.model)   # per-rank BatchNorm: rank 0's running statistics everywhere
        self.ema.update()
        self.algorithm.after_step(self.step)
        self.stats.add(out, self.batches.ulb_y[ulb], self.step)
        self.step += 1
        self.stats.t_data += t1 - t0
        self.stats.t_compute += time.perf_counter() - t1

    def _checked_step(self) -> None:
        """:meth:`train_step`, with running out of device memory turned into :class:`StepMemoryError`."""
        try:
            self.train_step()
        except Exception as e:
            error = step_memory_error(e, self.cfg, tuple(self.bundle.train.x.shape[1:]), self.device)
            if error is None:
                raise
            raise error from None

    def _reset_accumulators(self) -> None:
        self.stats = StepAccumulator(self.num_classes, self.device, self.algorithm.terms)

    # ---------------------------------------------------------------- evaluation
    def evaluate(self) -> EvalEvent:
        """Test (and validation) accuracy and class-wise scores of the EMA model and the accumulated training
        diagnostics since the last evaluation; raises :class:`NonFiniteLossError` if a loss term was not finite."""
        st, ev = self.stats, self.evaluator
        n = max(1, st.steps)
        terms = st.term_means()
        bad = st.non_finite()
        if bad:
            raise NonFiniteLossError(divergence_message(bad, terms, self._term_weights(), self.cfg.algorithm.name,
                                                        self.optimizer.param_groups[0]["lr"]))
        self._warn_if_exploding(terms[M.term_metric(M.TOTAL)])
        synchronize(self.device)
        elapsed = time.perf_counter() - st.t_start
        test = self.bundle.test
        scores, confusion = ev.test_scores(self.ema.module)   # test/acc and the class-wise scores
        acc = scores[M.TEST_ACC]
        acc_raw = ev.accuracy(self.model, test.x, test.y)
        self.history.append(acc)
        self.best_acc = max(self.best_acc, acc)
        window = self.history[-self.cfg.train.median_window:]
        per_step_imgs = sum(self.algorithm.step.rows(self.cfg.train.batch_size, st.ulb_seen / n))  # the views made
        metrics = {
            **terms, M.TEST_ACC: acc, M.TEST_ACC_RAW: acc_raw, M.TEST_BEST_ACC: self.best_acc,
            M.TEST_MEDIAN_ACC: float(statistics.median(window)),
            M.TRAIN_LR: max(self.scheduler.get_last_lr()),
            M.PERF_IMG_PER_S: per_step_imgs * n / max(elapsed, 1e-9),
            M.PERF_DATA_S: st.t_data / n, M.PERF_COMPUTE_S: st.t_compute / n,
            **st.sample_metrics(), **scores,
        }
        val_data = ev.val_data()
        if val_data is not None:
            val = ev.val_scores(self.ema.module, *val_data)
            self.best_val = max(self.best_val, val[M.VAL_ACC])
            metrics.update({**val, M.VAL_BEST_ACC: self.best_val})
        counts = {**st.class_counts(self.model.tnc is not None), TEST_CONFUSION: confusion}
        return EvalEvent(step=self.step, metrics=metrics, class_counts=counts)

    def _evaluate_and_log(self, with_checkpoint: bool) -> EvalEvent:
        """Evaluate, keep the best weights, log the metrics line, then (if asked) write the checkpoint.

        The line is appended before the checkpoint is written: a trainer killed between the two resumes from the
        previous checkpoint, which drops the line and redoes the evaluation, so every evaluation is logged once."""
        event = self.evaluate()
        self._reset_accumulators()  # before the checkpoint: it holds the sums of the steps since this evaluation
        if event.metrics[M.TEST_ACC] >= self.best_acc and self.dp.is_main:  # a new best (ties: the latest)
            self._save_weights(self.run.best_weights)
        if self.dp.is_main:
            self.run.append_metrics(self.step, event.metrics)
            conf = self.evaluator.confusion_record(self.step, event.class_counts[TEST_CONFUSION])
            atomic_write(self.run.confusion, json.dumps(conf).encode())
        if with_checkpoint:
            event.checkpoint = self.save_checkpoint()
        return event

    # ---------------------------------------------------------------- the loop
    def fit(self, stop_at: int | None = None) -> RunSummary:
        """Train to ``train.iterations`` (or stop early at step ``stop_at``, keeping the schedule of the full run).
        The run folder stays locked until this returns or raises."""
        cfg = self.cfg.train
        end = cfg.iterations if stop_at is None else min(stop_at, cfg.iterations)
        if self.dp.is_main:
            self.run.lock()
        try:
            start = StartEvent(step=self.step, iterations=cfg.iterations, run=self.run,
                               config_hash=config_hash(self.cfg), split_digest=self.split.digest(),
                               resumed_from=self.resumed_from)
            for cb in self._callbacks():
                cb.on_start(start)
            last_event, last_ckpt = self._train_until(end)
            final_weights = (self._save_weights(self.run.final_weights)
                             if self.step >= cfg.iterations and self.dp.is_main else None)
            best = self.run.best_weights
            summary = RunSummary(step=self.step, metrics=last_event.metrics if last_event else {},
                                 output_dir=self.out, final_checkpoint=last_ckpt,
                                 best_weights=best if best.exists() else None, final_weights=final_weights)
            for cb in self._callbacks():
                cb.on_end(summary)
            return summary
        finally:
            self.close()

    def _callbacks(self) -> list[Callback]:
        """This rank's callbacks: all on rank 0 (the single process), those with ``all_ranks`` True elsewhere."""
        return [cb for cb in self.callbacks if self.dp.is_main or getattr(cb, "all_ranks", False)]

    def _train_until(self, end: int) -> tuple[EvalEvent | None, Path | None]:
        """Steps with an evaluation every ``train.eval_interval`` and at the last step; the last event and checkpoint.

        A stop (``end``) between evaluations writes a checkpoint without evaluating: an evaluation there would be
        one an uninterrupted run does not have (it moved ``test/best_acc``), and the steps since the last
        evaluation are kept in the checkpoint for the next one."""
        cfg = self.cfg.train
        bar = self._progress_bar()
        last_event: EvalEvent | None = None
        last_ckpt: Path | None = None
        evals_since_ckpt = 0
        stop = False
        self.stats.t_start = time.perf_counter()  # the throughput of this call's steps
        try:
            while self.step < end and not stop:
                self._checked_step()
                if bar is not None:
                    bar.update(1)
                if self.step == end and self.step % cfg.eval_interval and self.step < cfg.iterations:
                    last_ckpt = self.save_checkpoint()
                elif self.step % cfg.eval_interval == 0 or self.step == end:
                    evals_since_ckpt += 1
                    event = self._evaluate_and_log(evals_since_ckpt >= cfg.checkpoint_every or self.step == end)
                    evals_since_ckpt = 0 if event.checkpoint is not None else evals_since_ckpt
                    if bar is not None:
                        m = event.metrics
                        bar.set_postfix(loss=f"{m['train/loss']:.3f}", acc=f"{m['test/acc']:.4f}",
                                        best=f"{m['test/best_acc']:.4f}", img_s=f"{m['perf/img_per_s']:.0f}")
                    for cb in self._callbacks():
                        stop |= bool(cb.on_eval(event))
                    stop = self.dp.from_main(lambda: stop)   # rank 0's callbacks decide for every rank
                    if stop and event.checkpoint is None:
                        event.checkpoint = self.save_checkpoint()
                    last_event, last_ckpt = event, event.checkpoint or last_ckpt
                # A signal's flag, between steps (preemption.py); the ranks stop together at the same step.
                if self.step < end and self.dp.any_rank(preemption.requested() is not None):
                    raise self._preempted(last_ckpt)
        finally:
            if bar is not None:
                bar.close()
        return last_event, last_ckpt

    def _preempted(self, last_ckpt: Path | None) -> preemption.Preempted:
        """A SIGTERM/SIGUSR1 arrived: this step's checkpoint (written now unless this step wrote one), then the
        stop. Like a stop between evaluations, the checkpoint keeps the steps since the last evaluation."""
        written = last_ckpt is not None and checkpoint_step(last_ckpt.name) == self.step
        ckpt = last_ckpt if written else self.save_checkpoint()
        return preemption.Preempted(self.step, ckpt, preemption.requested() or "SIGTERM")

    def _progress_bar(self):
        """``train.progress``: a tqdm bar on stderr from the current step; None when off."""
        if not self.cfg.train.progress or not self.dp.is_main:
            return None
        from tqdm import tqdm

        return tqdm(total=self.cfg.train.iterations, initial=self.step, dynamic_ncols=True, file=sys.stderr,
                    desc=f"{self.cfg.algorithm.name}")

    # ---------------------------------------------------------------- state
    def state_dict(self) -> dict:
        return {
            "step": self.step, "model": self.model.state_dict(), "ema": self.ema.state_dict(),
            "optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(), **self.prefetcher.state(), "algorithm": self.algorithm.state_dict(),
            "rng": rng_state(), "history": list(self.history), "best_acc": self.best_acc,
            "best_val": self.best_val, "config_hash": config_hash(self.cfg), "split_digest": self.split.digest(),
            "stats": self.stats.state_dict(), "config": self.cfg.to_dict(),   # names the fields a resume changed
        }

    def _load_state(self, path: Path, state: dict) -> None:
        if state.get("config_hash") not in config_hashes(self.cfg):
            changed = config_difference(state["config"], self.cfg) if isinstance(state.get("config"), dict) else ""
            raise CheckpointError(f"{path}: written by a run with another configuration ("
                                  f"{changed or 'config hash ' + str(state.get('config_hash'))}); restore the run's "
                                  "config.yaml as it was, or start a new run in another output_dir")
        if state.get("split_digest") != self.split.digest():
            raise CheckpointError(f"{path}: written with another labeled split")
        if self.dp.is_main:
            self._check_resumed_folder()
        self.model.load_state_dict(state["model"])
        self.ema.load_state_dict(state["ema"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.scaler.load_state_dict(state["scaler"])
        self.algorithm.load_state_dict(state["algorithm"])
        restore_generation(self)   # CReST: the batches of the checkpoint's generation
        self.batches.set_state(state)
        set_rng_state(state["rng"])
        self.step = int(state["step"])
        self.history = list(state["history"])
        self.best_acc = float(state["best_acc"])
        self.best_val = float(state["best_val"])
        if "stats" in state:  # the steps since the last evaluation (a stop between evaluations)
            self.stats.load_state_dict(state["stats"])
        if self.dp.is_main:
            self.run.keep_metrics_until(self.step)  # evaluations logged after this checkpoint are redone
            check_resumed_files(self.run, self.cfg, self.split, self.step)
        self.resumed_from = self.last_checkpoint = path

    def _check_resumed_folder(self) -> None:
        try:
            self.split.check_file(self.run.split)  # a missing or corrupt split.json is rewritten with a warning
        except ValueError as e:
            raise RunFolderError(str(e)) from None

    def _save_weights(self, path: Path) -> Path:
        buf = io.BytesIO()
        torch.save(self.ema.state_dict(), buf)
        atomic_write(path, buf.getvalue())
        return path

    def save_checkpoint(self) -> Path | None:
        """Write the checkpoint of this step (data parallel: rank 0; None on the other ranks)."""
        if not self.dp.is_main:
            return None
        path = write_checkpoint(self.state_dict(), self.ckpt_dir, self.step)
        prune_checkpoints(self.ckpt_dir, self.cfg.train.keep_checkpoints)
        self.last_checkpoint = path
        return path

    # ---------------------------------------------------------------- timing (cost estimates, benchmarks)
    def time_step(self) -> float:
        """Run one training step and return its seconds, the device's queued work included."""
        synchronize(self.device)
        t0 = time.perf_counter()
        self.train_step()
        synchronize(self.device)
        return time.perf_counter() - t0

    def time_steps(self, steps: int) -> float:
        """Mean seconds per step of ``steps`` training steps run back to back with one synchronisation at the end,
        as training runs them (a synchronisation after every step would stall the launch queue)."""
        synchronize(self.device)
        t0 = time.perf_counter()
        for _ in range(steps):
            self.train_step()
        synchronize(self.device)
        return (time.perf_counter() - t0) / steps

    def time_evaluation(self, images: int | None = None) -> float:
        """Seconds of one whole evaluation, timed on the first ``images`` test images (all by default) scored by
        the EMA model as :meth:`evaluate` does, and scaled to the images an evaluation scores."""
        test = self.bundle.test
        n = max(1, len(test.y) if images is None else min(images, len(test.y)))
        synchronize(self.device)
        t0 = time.perf_counter()
        self.evaluator.accuracy(self.ema.module, test.x[:n], test.y[:n])
        seconds = time.perf_counter() - t0  # accuracy() reads its result on the host: the device is done
        return seconds / n * self.evaluator.eval_images
