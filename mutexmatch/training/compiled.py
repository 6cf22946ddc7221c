"""The model's compiled forward (``train.compile``, ``train.cuda_graphs``) and what compiling it cost.

``train.compile`` wraps the model in ``torch.compile``: its forward is traced into graphs and their backward built by
AOTAutograd, under whatever autocast precision the step uses (fp32, bf16, fp16). ``train.cuda_graphs`` (CUDA only)
compiles with ``mode="reduce-overhead"``: the compiled forward and backward replay from captured CUDA graphs, their
inputs copied into static buffers, so the host launches one graph instead of hundreds of kernels. The heads, the
losses, SGD and the EMA stay eager (the algorithms take the step number as a Python int: a graph over them would
be re-recorded every step). A resumed run builds a fresh trainer, whose first steps capture again.

:func:`compile_report` counts the graph breaks and recompiles of the process so far (``torch._dynamo``'s counters),
which the benchmarks print beside the step time: a break splits the graph, a recompile re-traces it.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from mutexmatch.algorithms import StepSpec
from mutexmatch.config import ConfigError

__all__ = ["check_cuda_graphs", "check_separate_forwards", "compiled_forward", "compile_report"]


def check_cuda_graphs(cuda_graphs: bool, device: torch.device) -> None:
    """ConfigError (one line, before any work) for ``train.cuda_graphs`` on a device without CUDA graphs."""
    if cuda_graphs and device.type != "cuda":
        raise ConfigError(f"train.cuda_graphs=true: CUDA graphs need a CUDA device, this run's is {device.type!r}; "
                         "set train.device=cuda on a GPU machine, or train.cuda_graphs=false "
                         "(train.compile=true compiles on any device)")


def compiled_forward(model: nn.Module, train: Any, device: torch.device) -> nn.Module | Any:
    """The callable a training step runs the model through: the model itself, or compiled (``train.compile``),
    with CUDA graphs (``train.cuda_graphs``)."""
    check_cuda_graphs(train.cuda_graphs, device)
    if train.cuda_graphs:
        graphed = torch.compile(model, mode="reduce-overhead")

        def forward(x: torch.Tensor) -> torch.Tensor:
            # a new training step: the previous step's graph outputs (its features) may be overwritten now
            torch.compiler.cudagraph_mark_step_begin()
            return graphed(x)
        return forward
    return torch.compile(model) if train.compile else model


def compile_report() -> dict[str, Any]:
    """Graph breaks (total, and by reason), graphs compiled, and recompiles (compiles of a frame after its first;
    None where this PyTorch does not count them) of this process so far."""
    from torch._dynamo import convert_frame
    from torch._dynamo.utils import counters

    breaks = dict(counters["graph_break"])
    per_frame = getattr(convert_frame, "FRAME_COMPILE_COUNTER", None)
    return {"graph_breaks": sum(breaks.values()), "break_reasons": {k[:200]: v for k, v in breaks.items()},
            "graphs": int(counters["stats"].get("unique_graphs", 0)),
            "recompiles": None if per_frame is None else sum(max(0, n - 1) for n in per_frame.values())}


def check_separate_forwards(cuda_graphs: bool, algorithm: str, step: StepSpec) -> None:
    """ConfigError for ``train.cuda_graphs`` with an algorithm that runs its own forwards (StepSpec forward
    'separate'): the graphed forward starts a new graph generation at every call, which would let a step's second
    forward overwrite its first one's outputs, and several forwards per step were never run with CUDA graphs."""
    if cuda_graphs and step.forward == "separate":
        raise ConfigError(f"train.cuda_graphs=true: algorithm {algorithm!r} runs several forwards per step "
                          "(its StepSpec forward is 'separate'), which CUDA graphs do not support here; set "
                          "train.cuda_graphs=false (train.compile=true still compiles its forwards)")
