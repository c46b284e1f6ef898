"""How the site process allocates memory: bounded, and given back when a call ends.

A site holds a table's columns only while a call reads them; the working memory of a call is
freed when it returns. Two allocator defaults would keep that memory, or reserve far more than is
used, and a site run under a memory limit (``ulimit -v``, RLIMIT_AS, a container's limit) would
fail for space it never touches:

- Arrow (the columns an engine hands over) allocates with mimalloc by default, which reserves
  address space a gigabyte at a time and keeps freed pages; the site uses the C library's
  allocator instead (``pyarrow.system_memory_pool``).
- glibc raises its threshold for serving a block by ``mmap`` each time such a block is freed (up to
  32 MiB), after which column-sized arrays come from the heap and stay resident once freed. The site
  fixes the threshold at :data:`MMAP_THRESHOLD` (``mallopt(M_MMAP_THRESHOLD)``, which also stops the
  adjustment), and caps glibc's per-thread arenas at :data:`ARENAS` (``M_ARENA_MAX``; each reserves
  64 MiB of address space).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

import pyarrow as pa

MMAP_THRESHOLD = 4 << 20  # bytes: a column of 512k float64 values and up is mapped, and unmapped when freed
ARENAS = 2
_M_MMAP_THRESHOLD = -3  # glibc's malloc.h
_M_ARENA_MAX = -8


def bound_allocations() -> None:
    """Set this process's allocators as the module docstring says (glibc's only on Linux)."""
    pa.set_memory_pool(pa.system_memory_pool())
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    if hasattr(libc, "mallopt"):  # glibc; musl has no mallopt
        libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
        libc.mallopt(_M_ARENA_MAX, ARENAS)
