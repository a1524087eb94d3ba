"""Read-only inputs: arrays and mappings that an estimator cannot write, and cannot make writable
again.

Every array handed to an estimator passes through `readonly`. numpy lets the owner of a buffer flip
its ``WRITEABLE`` flag back on (``a.setflags(write=True)``), so clearing the flag is not enough for
an array that owns its memory. `readonly` therefore returns

* a non-writeable view when writes cannot be re-enabled on it (a memory map opened with mode
  ``"r"``, as the store loads every artifact array, or a view of an immutable buffer);
* otherwise a copy backed by an immutable ``bytes`` object: a write raises ``ValueError: assignment
  destination is read-only`` and ``setflags(write=True)`` raises ``ValueError`` as well.

The copy is made once per array per problem (small per-unit vectors; the large embeddings are memory
maps).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

import numpy as np


def _can_reenable_writes(a: np.ndarray) -> bool:
    probe = a.view()
    try:
        probe.setflags(write=True)
    except ValueError:
        return False
    return True


def readonly(a) -> np.ndarray:
    """`a` as an array no one can write, whose ``WRITEABLE`` flag cannot be set again (see the
    module)."""
    a = np.asanyarray(a)
    if not _can_reenable_writes(a):
        v = a.view()
        v.setflags(write=False)
        return v
    c = np.ascontiguousarray(a)
    return np.frombuffer(c.tobytes(), dtype=c.dtype).reshape(c.shape)


def is_readonly(a: np.ndarray) -> bool:
    """True when `a` cannot be written and its writes cannot be re-enabled."""
    return not a.flags.writeable and not _can_reenable_writes(a)


def readonly_mapping(d: Mapping) -> Mapping:
    """A read-only mapping (`types.MappingProxyType`) whose array values are `readonly`."""
    return MappingProxyType(
        {k: readonly(v) if isinstance(v, np.ndarray) else v for k, v in d.items()}
    )
