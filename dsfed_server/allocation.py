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

Before a call reads columns, the catalog asks :func:`room` how much this process may still allocate,
and refuses a read that would not fit rather than run the site short.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import re
import resource
import sys
from pathlib import Path

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


def _kib(path: str, field: str) -> int | None:
    """A ``field:  <n> kB`` line of a /proc file, in bytes (None where there is none)."""
    try:
        found = re.search(rf"^{field}:\s+(\d+) kB$", Path(path).read_text(), re.MULTILINE)
    except OSError:
        return None
    return int(found.group(1)) * 1024 if found else None


def room() -> tuple[int, str] | None:
    """The bytes this process may still allocate, and the limit that says so: its address-space limit
    (RLIMIT_AS: ``ulimit -v``, a container's limit) less what it has mapped, or the memory the machine
    has available (``MemAvailable``), whichever is smaller; None where neither is known."""
    found = []
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    mapped = _kib("/proc/self/status", "VmSize")
    if soft != resource.RLIM_INFINITY and mapped is not None:
        found.append((max(soft - mapped, 0), f"the site process's address-space limit (RLIMIT_AS: ulimit -v or the "
                                             f"container's limit) of {soft >> 20:,} MB, {mapped >> 20:,} MB of it "
                                             "mapped"))
    available = _kib("/proc/meminfo", "MemAvailable")
    if available is not None:
        found.append((available, f"the memory this machine has available ({available >> 20:,} MB)"))
    return min(found) if found else None
