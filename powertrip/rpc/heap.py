"""Keep a service's large, short-lived buffers on the heap (glibc `mallopt`).

Why: every message of a few hundred KB (a 10,000-site SelectSites is 0.6 MB) is serialised
into a fresh protobuf buffer. glibc serves allocations above its mmap threshold with a new
`mmap`, and it trims freed memory at the top of the heap back to the kernel; either way the
next buffer's pages fault in again, and serialising costs about ten times what it does
from a warm heap (figures in docs/benchmarks.md at 291b5ac2).

Setting the thresholds turns off glibc's own adaptive threshold, so the mmap threshold is set
to that adaptation's ceiling (32 MiB on 64-bit): model-sized arrays keep coming from the heap
as they did once glibc had adapted. The trim threshold bounds how much freed memory a process
keeps. Elsewhere than glibc this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

#: mallopt parameter numbers from glibc's malloc.h
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3

MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024
TRIM_THRESHOLD_BYTES = 128 * 1024 * 1024


def keep_buffers_on_heap(
    mmap_threshold: int = MMAP_THRESHOLD_BYTES, trim_threshold: int = TRIM_THRESHOLD_BYTES
) -> bool:
    """Set glibc's mmap and trim thresholds; False (and no change) where there is no mallopt."""
    name = ctypes.util.find_library("c")
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError, TypeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    done = bool(mallopt(M_MMAP_THRESHOLD, mmap_threshold)) and bool(
        mallopt(M_TRIM_THRESHOLD, trim_threshold)
    )
    if not done:
        log.debug("mallopt refused the heap thresholds; keeping the allocator's defaults")
    return done
