"""Resident pages of memory-mapped artifact arrays: drop them when a pass over the arrays is done.

Every artifact array is loaded as a read-only memory map (`bt_core.artifacts.store.load_array`).
Reading a map makes its pages part of the process's resident set, and they stay there as long as the
map is open — for a session's `Evidence`, that is the whole session: five default seeds' rollout
sketches (512 MB each) plus their draws would all count at once. `release` tells the kernel
(``madvise(MADV_DONTNEED)``) that this process no longer needs a map's pages: they leave the
resident set but stay in the page cache, so the next read faults them back in from memory, not from
disk. The arrays' values never change (the maps are read-only); only what counts as this process's
memory does.

Arrays that are not memory maps (or a platform without ``madvise``) are left alone.
"""

from __future__ import annotations

import mmap

import numpy as np

_DONTNEED = getattr(mmap, "MADV_DONTNEED", None)


def _mapping(a) -> mmap.mmap | None:
    """The `mmap.mmap` that `a`'s memory comes from (through views and numpy.memmap), or None — also
    None for a map not opened read-only (``mode="r"``): dropping a copy-on-write map's pages would
    lose writes."""
    seen = 0
    while a is not None and seen < 32:  # a view of a view of … a memmap: walk the bases
        if isinstance(a, mmap.mmap):
            return a
        if isinstance(a, np.memmap) and getattr(a, "mode", "r") != "r":
            return None
        a = getattr(a, "base", None) if isinstance(a, np.ndarray) else None
        seen += 1
    return None


def release(*arrays) -> int:
    """Drop the resident pages of each memory-mapped array in `arrays` (others are ignored); returns
    how many maps were released. Safe at any time: a later read of the array faults its pages back
    in."""
    if _DONTNEED is None:
        return 0
    done = set()
    for a in arrays:
        m = _mapping(a)
        if m is None or id(m) in done or m.closed:
            continue
        try:
            m.madvise(_DONTNEED)
        # a map the kernel refuses to advise: it stays resident, nothing breaks
        except (OSError, ValueError):
            continue
        done.add(id(m))
    return len(done)


def release_seed(artifacts) -> int:
    """`release` every memory-mapped sketch array of one seed's artifacts (`SeedArtifacts`: the
    stream's sketches and each draw's)."""
    sketches = [artifacts.sketches] + [d.sketches for d in getattr(artifacts, "draws", None) or []]
    return release(*(getattr(s, name, None) for s in sketches for name in ("emb", "step_emb")))
