"""The items' shared memo: figures several items read (a control's scores, the LDS subsets, a seed's
setup verdicts) are computed once per `Evidence` and kept for as long as that Evidence lives.

It is the checklist's, not `Evidence`'s: Evidence builds problems, holds labels and validates
scores; what the items derive from them, and under which keys, is the items' business."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar
from weakref import WeakKeyDictionary

from bt_core.attribution.evidence import Evidence

T = TypeVar("T")
_MEMOS: WeakKeyDictionary[Evidence, dict[tuple, object]] = WeakKeyDictionary()


def memo(evidence: Evidence, key: tuple, fn: Callable[[], T]) -> T:
    """`fn()`, computed once per (`evidence`, `key`)."""
    table = _MEMOS.setdefault(evidence, {})
    if key not in table:
        table[key] = fn()
    return table[key]  # type: ignore[return-value]
