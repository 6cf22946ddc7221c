"""Host memory allocator setting for CPU training.

glibc serves each allocation above its mmap threshold (at most 32 MB) with a fresh ``mmap`` and gives it back to the
kernel on ``free``. A CPU training step allocates and frees dozens of activation tensors of ~100 MB (WRN-28-2 on a
960-image batch), so every step page-faults all of them in again: measured 6.5 s vs 5.2 s per WRN-28-2 step
(B = 64, μ = 7) on 2 cores (``benchmarks/train_step.py``). Keeping freed blocks in the heap removes that cost; the
price is that the process keeps its peak host memory until it exits, which a training process reaches every step
anyway. CUDA memory is not affected (PyTorch's caching allocator already keeps it).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

# <malloc.h> parameter numbers (stable glibc ABI)
_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4


def keep_freed_memory() -> bool:
    """Make glibc keep freed memory in the process: no ``mmap`` for large blocks (``M_MMAP_MAX = 0``), and no
    trimming of the heap top (``M_TRIM_THRESHOLD = -1`` disables it). Process-wide and irreversible; the same as
    starting Python with ``MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=<huge>``. Returns False (and changes nothing)
    where the C library is not glibc."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and other C libraries have no mallopt
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, -1))
