"""Fault injection for the reliability tests: SIGKILL this process at a named point.

    BT_FAULT=train.segment@2   → the 2nd time the code passes `fault_point("train.segment")`, the
                               process
                                 kills itself with SIGKILL (no cleanup, no `finally`, no atexit)
    BT_FAULT=a@1,b@3           → several points; the first one reached fires

Named points: ``train.step`` (after a GRPO update), ``train.segment`` (a resume segment written but
not yet committed), ``store.before_rename.<kind>`` (an artifact complete with its manifest, not yet
renamed into place). Unset (the normal case), a point costs one dictionary lookup.
"""

from __future__ import annotations

import os
import signal

ENV = "BT_FAULT"
_hits: dict[str, int] = {}


def _parse(spec: str) -> dict[str, int]:
    out = {}
    for part in spec.split(","):
        name, _, n = part.strip().partition("@")
        if name:
            out[name] = int(n or 1)
    return out


def fault_point(name: str) -> None:
    """Kill the process (SIGKILL) when `BT_FAULT` asks for the n-th pass through `name`."""
    spec = os.environ.get(ENV)
    if not spec:
        return
    want = _parse(spec).get(name)
    if want is None:
        return
    _hits[name] = _hits.get(name, 0) + 1
    if _hits[name] == want:
        os.kill(os.getpid(), signal.SIGKILL)


def run_with_fault(fault: str | None, fn, *args, **kwargs):
    """Call `fn(*args, **kwargs)` with `BT_FAULT=fault` (a process target for the kill tests: a
    forkserver child does not see environment changes made in the parent after the server
    started)."""
    if fault:
        os.environ[ENV] = fault
    else:
        os.environ.pop(ENV, None)
    _hits.clear()
    fn(*args, **kwargs)
