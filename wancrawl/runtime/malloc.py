"""The C allocator's heap trimming, set once per process (glibc's mallopt; a no-op elsewhere).

Why (issue 24): lexbor builds each page's tree in malloc'd blocks (~200 KB for a 24 KB lab page)
and frees them all when the tree goes. With glibc's default M_TRIM_THRESHOLD (128 KiB, raised
only by its own heuristics) that free leaves the top of the heap over the threshold, so glibc
gives the pages back to the kernel (brk down), and the next page's parse takes them again: ~54
page faults per lab page, lexbor's parse 200 us instead of 81 (bench/parts/link_extraction.py,
docs/benchmarks.md "Session 11, branch cpu"). Keeping up to `trim_bytes` of free heap at the top
makes the parse reuse the same pages; the cost is at most that much resident memory the process
is not using at the moment (the agent's budget, docs/agent-fetching.md "Memory", has room).

Setting M_TRIM_THRESHOLD turns off glibc's dynamic mmap threshold, so M_MMAP_THRESHOLD is set
beside it: blocks up to `mmap_bytes` come from the heap (reused), bigger ones are mapped and
unmapped as they come and go (a huge body's parse pieces, bounded by memory.parse_piece_bytes).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

# mallopt's parameter numbers (glibc's malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
# glibc caps M_MMAP_THRESHOLD at HEAP_MAX_SIZE / 2: 32 MiB on 64-bit.
MMAP_THRESHOLD_MAX = 32 * 1024 * 1024


def keep_heap(trim_bytes: int, mmap_bytes: int) -> bool:
    """Keep up to `trim_bytes` of free memory at the top of the heap, and serve blocks up to
    `mmap_bytes` from it. True when glibc took both; False where there is no glibc mallopt
    (musl, macOS: their allocators behave differently, nothing to set) or it refused."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    mmap_bytes = min(mmap_bytes, MMAP_THRESHOLD_MAX)
    # mallopt returns 1 on success, 0 on error.
    return bool(mallopt(M_MMAP_THRESHOLD, mmap_bytes)) and bool(mallopt(M_TRIM_THRESHOLD, trim_bytes))


__all__ = ["keep_heap"]
