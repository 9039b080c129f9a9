"""Two settings of the process that the drivers share: BLAS threads and freed memory.

Neither changes a number; both change how long the same arithmetic takes. They belong to the
process that runs a driver (`python bilinear_numpy.py ...`, `python -m experiments.X`), never to
`import bilinear_numpy`, which leaves the process as it found it.

- one_blas_thread(): one BLAS (and OpenMP) thread unless the caller set a count. It must run
  before NumPy loads its BLAS. Our matrices are small, so threads cost more than they save,
  and on a busy machine threads that wait for each other spin: training measured 8 to 15
  times slower on 2 shared cores.
- keep_freed_memory(): glibc's malloc keeps the memory of a freed array for the next one
  instead of giving it back to the kernel. A forward + backward pass makes about ten (N, m)
  arrays; by default glibc returns them at the end of the pass (a float64 one, above its 32 MiB
  threshold, on every free), so the next pass pays the kernel again to find and zero every
  page: 6,300 to 7,600 page faults a pass at the benchmark's sizes, and 20 to 80 % of the pass's
  time, varying from pass to pass. Kept, the faults go to 0 (docs/speed.md has the figures).
  PyTorch's CPU allocator calls the same malloc, so it gains in the same way.
"""

from __future__ import annotations

import ctypes
import os
import sys

BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                         "VECLIB_MAXIMUM_THREADS")

# glibc's mallopt parameters (malloc.h): free memory at the heap's top kept up to this size,
# and allocations up to this size taken from the heap (above it: mmap, returned on free).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
KEPT_BYTES = 256 * 2**20        # arrays up to 256 MiB from the heap; up to 512 MiB kept when free
_kept = []                      # the kept_bytes that glibc took, once it has (for reports)


def one_blas_thread():
    """Set each BLAS thread variable to 1 where the caller has not set it.

    Call it before NumPy (or torch) is first imported; afterwards it changes nothing.
    Returns: None. Raises: nothing.
    """
    for name in BLAS_THREAD_VARIABLES:
        os.environ.setdefault(name, "1")


def keep_freed_memory(kept_bytes=KEPT_BYTES):
    """Tell glibc's malloc to reuse freed arrays' memory rather than return it to the kernel.

    mallopt(M_MMAP_THRESHOLD, kept_bytes): an allocation up to kept_bytes comes from the heap,
    whose freed memory is reused; mallopt(M_TRIM_THRESHOLD, 2 kept_bytes): up to twice that
    stays with the process when free. The cost: the process keeps its peak memory (plus at most
    2 kept_bytes) until it ends.

    Args: kept_bytes: int > 0, at most 2**30.
    Returns: True where glibc took both settings; False elsewhere (macOS, Windows, musl:
        nothing changes there).
    Raises: ValueError for kept_bytes outside (0, 2**30].
    Source: mallopt(3), the GNU C library manual, "Memory Allocation Tunables".
    """
    if not 0 < kept_bytes <= 2**30:
        raise ValueError(f"kept_bytes: expected an int in (0, 2**30], got {kept_bytes!r}")
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    took = (mallopt(_M_MMAP_THRESHOLD, kept_bytes) == 1
            and mallopt(_M_TRIM_THRESHOLD, 2 * kept_bytes) == 1)
    if took:
        _kept[:] = [kept_bytes]
    return took


def freed_memory_setting():
    """What keep_freed_memory set in this process, as one line for a report: str."""
    if not _kept:
        return "the C library's default"
    return f"kept (glibc mallopt: arrays up to {_kept[0] // 2**20} MiB from the heap)"
