"""Results files: every benchmark run that backs a figure writes ``benchmarks/results/<name>.json`` headed by the
machine, the versions, the date and the exact command, so a figure in a README can be traced to (and checked
against) the run that produced it."""

from __future__ import annotations

import datetime
import json
import platform
import shlex
import sys
from pathlib import Path

import torch

RESULTS = Path(__file__).resolve().parent / "results"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def header(device: str) -> dict:
    """``{"device", "torch", "cuda", "date", "command"}``: the GPU's name (or the CPU model), torch's and CUDA's
    versions (``cuda`` null for a CPU build), the UTC date and the command line that ran."""
    name = torch.cuda.get_device_name(torch.device(device)) if device.startswith("cuda") else _cpu_model()
    return {"device": name, "torch": torch.__version__, "cuda": torch.version.cuda,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": shlex.join(["python", *sys.argv])}


def write(path: str | Path | None, default_name: str, record: dict) -> Path:
    """Write ``record`` as JSON to ``path`` (default: ``benchmarks/results/<default_name>.json``); return the path."""
    out = Path(path) if path else RESULTS / f"{default_name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"results: {out}")
    return out
