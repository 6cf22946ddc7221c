"""Data-parallel training (issue 30): one run's global batch split over the ranks of a ``torch.distributed``
process group, with the single process's numbers.

The design, which makes every algorithm exact without any per-algorithm communication:

- Every rank makes the FULL global batch exactly as the single process does (the same sampler, generators and
  augmentation draws, so the generators advance identically on every rank). Augmenting is a small share of a step
  next to the forward and backward; it is paid W times over the ranks (W = world size) and buys exactness.
- Each forward (the concatenated step's, every ``StepInputs.forward`` and ``StepInputs.teacher`` call) runs on
  this rank's contiguous 1/W of the rows it is given, and the features are all-gathered back in rank order
  (:class:`_GatherRows`, differentiable), which is the rows' original order. An algorithm's ``compute`` thus sees
  the single process's features and computes the same loss, state (distribution-alignment means, per-class
  thresholds, queues) and diagnostics on every rank.
- Gradients: the loss being the same on every rank, the gather's backward (a reduce-scatter SUM of the W equal
  feature gradients) gives each rank W times the gradient of its own rows; parameters used after the gather (TPC,
  TNC, heads) get the whole gradient on every rank. :meth:`DataParallel.average_gradients` (one all-reduce of the
  gradients, divided by W, after backward) gives every rank the single process's gradient: sum_r W g_r / W = g for
  the backbone, W g / W = g after the gather. (For W a power of two the division is exact.)
- Evaluation: each rank scores its contiguous share of the test (and validation) images and the correct counts
  are summed over the ranks (:meth:`DataParallel.shard`, :meth:`DataParallel.sum_over_ranks`): the single
  process's accuracy (whole counts), each rank scoring 1/W of the images.
- BatchNorm (``train.sync_bn``, default on): :class:`SyncedBatchNorm2d` normalises with the mean and variance of
  the global rows of each forward (two differentiable all-reduces), the single process's statistics, also in a
  forward that leaves the running statistics alone (``bn_frozen``). torch's own ``SyncBatchNorm`` refuses CPU
  tensors, hence this one. Off: each rank normalises with its own rows' statistics (what TorchSSL and USB do under
  DDP) and rank 0's running statistics are broadcast after each step (DDP's ``broadcast_buffers``); results then
  differ from the single process's.

The process group: :func:`join_process_group` uses one that is already initialised (Ray Train, a caller's own),
else initialises one from torchrun's environment (``WORLD_SIZE`` > 1, ``RANK``, ``LOCAL_RANK``,
``MASTER_ADDR``/``MASTER_PORT``) with gloo on the CPU and NCCL on CUDA and :data:`TIMEOUT`, and destroys only a
group it initialised. A collective that fails (a rank died, or stalled past the timeout) raises
:class:`DataParallelError`, one line.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

from mutexmatch.training.extended_step import at_least_fp32

__all__ = ["DataParallel", "DataParallelError", "SyncedBatchNorm2d", "TIMEOUT", "join_process_group",
           "sync_batchnorm"]

TIMEOUT = timedelta(minutes=10)   # a rank waiting longer for the others fails the run (a dead or stalled rank)


class DataParallelError(RuntimeError):
    """A data-parallel run cannot go on: a collective with the other ranks failed, or its batch does not split."""


def _collective(what: str, fn: Callable[[], Any]) -> Any:
    """``fn()``, a collective; its failure (a rank gone, a timeout) as one :class:`DataParallelError` line."""
    try:
        return fn()
    except RuntimeError as e:
        if isinstance(e, DataParallelError):
            raise
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        rank, world = ((dist.get_rank(), dist.get_world_size()) if dist.is_initialized()
                       else (os.environ.get("RANK", "?"), os.environ.get("WORLD_SIZE", "?")))
        raise DataParallelError(f"rank {rank} of {world}: {what} with the other ranks "
                                f"failed ({first}); a rank died, or stalled past the "
                                f"{TIMEOUT.total_seconds():.0f} s timeout: the run is stopped") from None


class _RankRows(torch.autograd.Function):
    """This rank's contiguous share of the rows. Backward (only for an input that needs a gradient, VAT's
    adversarial direction): every rank's share of the gradient gathered and divided by W, which undoes the factor W
    of :class:`_GatherRows`'s backward, so the input's gradient is the single process's on every rank."""

    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:
        world, rank = dist.get_world_size(), dist.get_rank()
        share = x.shape[0] // world
        return x[rank * share:(rank + 1) * share].clone()

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        return _gather(grad) / dist.get_world_size()


def _gather(local: Tensor) -> Tensor:
    out = local.new_empty((dist.get_world_size() * local.shape[0], *local.shape[1:]))
    _collective("gathering rows", lambda: dist.all_gather_single(out, local.contiguous()))
    return out


class _GatherRows(torch.autograd.Function):
    """The rows of every rank concatenated in rank order; backward: the reduce-scatter SUM of the gradient."""

    @staticmethod
    def forward(ctx, local: Tensor) -> Tensor:
        return _gather(local)

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        world, rank = dist.get_world_size(), dist.get_rank()
        grad = grad.contiguous()
        rows = grad.shape[0] // world
        if dist.get_backend() == dist.Backend.NCCL:
            mine = grad.new_empty((rows, *grad.shape[1:]))
            _collective("reduce-scattering gradients", lambda: dist.reduce_scatter_tensor(mine, grad))
            return mine
        total = grad.clone()   # gloo has no reduce-scatter: all-reduce, keep this rank's rows
        _collective("reducing gradients", lambda: dist.all_reduce(total))
        return total[rank * rows:(rank + 1) * rows]


class _SumRanks(torch.autograd.Function):
    """All-reduce SUM; backward: all-reduce SUM of the gradient (each rank's partial gradient of the sum)."""

    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:
        out = x.clone()
        _collective("summing BatchNorm statistics", lambda: dist.all_reduce(out))
        return out

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        out = grad.clone()
        _collective("summing BatchNorm gradients", lambda: dist.all_reduce(out))
        return out


class SyncedBatchNorm2d(nn.BatchNorm2d):
    """BatchNorm2d whose training-mode statistics are those of the rows of every rank (equal shares), on CPU and
    CUDA: mean = sum_ranks sum x / N, var = sum_ranks sum (x - mean)^2 / N (biased, for normalising), the running
    variance updated with the unbiased N / (N - 1) as ``F.batch_norm`` does (Ioffe & Szegedy 2015, Alg. 1). In eval
    mode, or outside a process group, it is ``nn.BatchNorm2d``. Statistics in fp32 (as BatchNorm under autocast), in
    float64 for a float64 input."""

    def forward(self, x: Tensor) -> Tensor:
        if not (self.training and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
            return super().forward(x)
        self._check_input_dim(x)
        dims, shape = [0, 2, 3], (1, -1, 1, 1)
        x32 = at_least_fp32(x)
        count = x32.numel() // x32.shape[1] * dist.get_world_size()
        mean = _SumRanks.apply(x32.sum(dims)) / count
        centred = x32 - mean.view(shape)
        var = _SumRanks.apply(centred.square().sum(dims)) / count
        y = centred * torch.rsqrt(var + self.eps).view(shape)
        if self.affine:
            y = y * self.weight.view(shape) + self.bias.view(shape)
        if self.track_running_stats:   # False inside bn_frozen: normalise, leave the running statistics alone
            self._update_running(mean.detach(), var.detach(), count)
        return y.to(x.dtype)

    @torch.no_grad()
    def _update_running(self, mean: Tensor, var: Tensor, count: int) -> None:
        self.num_batches_tracked.add_(1)
        factor = 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum
        self.running_mean.mul_(1 - factor).add_(mean, alpha=factor)
        self.running_var.mul_(1 - factor).add_(var * (count / max(count - 1, 1)), alpha=factor)


def sync_batchnorm(module: nn.Module) -> int:
    """Turn every ``nn.BatchNorm2d`` of ``module`` into a :class:`SyncedBatchNorm2d` in place (same parameters,
    buffers and state-dict keys; the optimiser still finds them as BatchNorm); the count converted."""
    layers = [m for m in module.modules() if type(m) is nn.BatchNorm2d]
    for m in layers:
        m.__class__ = SyncedBatchNorm2d
    return len(layers)


class DataParallel:
    """This process's place in a data-parallel run: ``rank`` of ``world_size`` (1: the single process, every
    method then a no-op that leaves the single-process path bit-identical)."""

    def __init__(self, rank: int = 0, world_size: int = 1, local_rank: int = 0, owns_group: bool = False):
        self.rank, self.world_size, self.local_rank, self._owns_group = rank, world_size, local_rank, owns_group
        self._control: Any = None   # made by the first any_rank (a call every rank makes at the same point)

    @property
    def active(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        """Rank 0: the one that writes the run folder and calls the callbacks."""
        return self.rank == 0

    def device(self, device: torch.device) -> torch.device:
        """A CUDA device without an index becomes this rank's GPU, ``cuda:LOCAL_RANK`` (modulo the visible GPUs)."""
        if not self.active or device.type != "cuda" or device.index is not None:
            return device
        device = torch.device("cuda", self.local_rank % max(1, torch.cuda.device_count()))
        torch.cuda.set_device(device)   # NCCL's object collectives use the current device
        return device

    def check(self, batch_size: int, num_ulb: int, compile_: bool) -> None:
        """Refuse, before any work, a global batch that does not split evenly over the ranks."""
        if not self.active:
            return
        for field, rows in (("train.batch_size", batch_size), ("train.batch_size x train.mu", num_ulb)):
            if rows % self.world_size:
                raise DataParallelError(f"{field}={rows}: must be divisible by the world size {self.world_size} "
                                        "(each rank forwards an equal share of the global batch); change it or "
                                        "the number of processes")
        if compile_:
            raise DataParallelError(f"train.compile=True: not supported under data parallelism (world size "
                                    f"{self.world_size}) yet; set train.compile=false")

    def check_model(self, name: str, backbone: nn.Module) -> None:
        """Refuse a backbone with dropout: each rank would draw its rows' masks from the same generator state, so
        the masks would repeat across ranks and differ from the single process's."""
        if self.active and any(isinstance(m, nn.Dropout) and m.p > 0 for m in backbone.modules()):
            raise DataParallelError(f"model.backbone={name!r}: has dropout, which data-parallel training does not "
                                    f"support yet (world size {self.world_size}); train it in one process")

    def sliced(self, run: Callable[[Tensor], Tensor]) -> Callable[[Tensor], Tensor]:
        """``run`` on this rank's contiguous share of the rows, the outputs gathered back into all rows."""
        if not self.active:
            return run

        def forward(x: Tensor) -> Tensor:
            rows, world = x.shape[0], self.world_size
            if rows % world:
                raise DataParallelError(f"a forward of {rows} rows does not split over {world} ranks; the batch "
                                        f"sizes (train.batch_size, train.mu) must make every forward divisible")
            share = rows // world
            mine = _RankRows.apply(x) if x.requires_grad else x[self.rank * share:(self.rank + 1) * share]
            return _GatherRows.apply(run(mine))
        return forward

    def average_gradients(self, model: nn.Module) -> None:
        """Every parameter's gradient replaced by its mean over the ranks: one all-reduce of one flat buffer."""
        if not self.active:
            return
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        if not grads:
            return
        flat = torch.cat([g.reshape(-1) for g in grads])
        _collective("averaging gradients", lambda: dist.all_reduce(flat))
        flat.div_(self.world_size)
        torch._foreach_copy_(grads, [v.view_as(g) for v, g in zip(flat.split([g.numel() for g in grads]), grads)])

    def shard(self, rows: int) -> slice:
        """This rank's contiguous share of ``rows`` (evaluation: shares may differ by one row; all of them for the
        single process)."""
        return slice(self.rank * rows // self.world_size, (self.rank + 1) * rows // self.world_size)

    def sum_over_ranks(self, t: Tensor) -> Tensor:
        """``t`` summed over the ranks, on every rank (one all-reduce; ``t`` itself for the single process)."""
        if self.active:
            t = t.clone()
            _collective("summing evaluation counts", lambda: dist.all_reduce(t))
        return t

    def any_rank(self, flag: bool) -> bool:
        """True on every rank when ``flag`` is true on any rank (one all-reduce of one integer, on the CPU): a
        decision every rank must take at the same step, such as stopping on a signal that reached only some
        ranks, or reached them between different steps."""
        if not self.active:
            return flag
        if self._control is None:
            # Control messages on the CPU: on NCCL a flag read back each step would be a host synchronisation.
            self._control = (dist.group.WORLD if dist.get_backend() == "gloo" else
                             _collective("making the control group", lambda: dist.new_group(backend="gloo")))
        t = torch.tensor([int(flag)])
        _collective("agreeing on a stop", lambda: dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self._control))
        return bool(t.item())

    def broadcast_buffers(self, model: nn.Module) -> None:
        """Rank 0's buffers (BatchNorm running statistics) on every rank (per-rank BatchNorm, ``sync_bn`` off)."""
        if self.active:
            for b in model.buffers():
                _collective("broadcasting buffers", lambda b=b: dist.broadcast(b, 0))

    def from_main(self, fn: Callable[[], Any]) -> Any:
        """``fn()`` run on rank 0 and its result handed to every rank (pickled); an error there is raised on rank 0
        and, as one line naming it, on every other rank, so no rank waits for a rank that failed."""
        if not self.active:
            return fn()
        box: list[Any] = [None]
        if self.is_main:
            try:
                box[0] = ("ok", fn())
            except Exception as e:
                _collective("sharing rank 0's result", lambda: dist.broadcast_object_list([("error", repr(e))], 0))
                raise
        _collective("sharing rank 0's result", lambda: dist.broadcast_object_list(box, 0))
        kind, value = box[0]
        if kind == "error":
            raise DataParallelError(f"rank {self.rank}: rank 0 failed: {value}")
        return value

    def release(self) -> None:
        """Destroy the process group if :func:`join_process_group` initialised it (else the caller owns it)."""
        if self._owns_group and dist.is_initialized():
            dist.destroy_process_group()
        self._owns_group = False


def join_process_group(device: torch.device) -> DataParallel:
    """This process's :class:`DataParallel`: from an initialised process group, else from torchrun's environment
    (``WORLD_SIZE`` > 1: a group is initialised, gloo on the CPU, NCCL on CUDA, :data:`TIMEOUT`), else the single
    process."""
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if dist.is_available() and dist.is_initialized():
        return DataParallel(dist.get_rank(), dist.get_world_size(), local_rank)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DataParallel()
    if not dist.is_available():
        raise DataParallelError(f"WORLD_SIZE={world}: this torch build has no torch.distributed")
    if device.type == "cuda":
        torch.cuda.set_device(local_rank % max(1, torch.cuda.device_count()))
    _collective("joining the process group", lambda: dist.init_process_group(
        "nccl" if device.type == "cuda" else "gloo", timeout=TIMEOUT))
    return DataParallel(dist.get_rank(), dist.get_world_size(), local_rank, owns_group=True)
