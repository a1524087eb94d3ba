"""Progress for long stages: a tqdm bar on a terminal, a few plain lines anywhere else.

    for step in progress(range(n), desc="GRPO seed 0", unit="step", enabled=show): ...
    bar = progress(total=n, desc="sketch seed 0", enabled=show); bar.update(1); bar.close()

Written to a log file or a pipe, a tqdm bar is one line per redraw (hundreds for one training run).
There `progress` returns a `PlainProgress` instead: one line when the stage starts, one every
`every` seconds while it runs (count and elapsed time; a heartbeat thread writes it even while one
unit takes longer), one when it ends — "GRPO seed 0: done
40/40 step in 12.3 s". Whether the stream is a terminal decides (`stream.isatty()`; the stream is
stderr, tqdm's).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any

from tqdm.auto import tqdm

# one callable run once, before the next progress line or bar is written (`before_first_line`)
_PREAMBLE: list[Callable[[], None]] = []


def before_first_line(fn: Callable[[], None] | None) -> None:
    """Run `fn` once, right before the next progress output (None: forget it). The pytest plugin
    ends pytest's half-written line ("benchmarks/test_checklist.py ") with it, so a build's first
    line starts a line of its own in a terminal or a log; a warm session, which shows no progress,
    leaves pytest's line alone."""
    _PREAMBLE[:] = [] if fn is None else [fn]


def _preamble() -> None:
    while _PREAMBLE:
        _PREAMBLE.pop()()


def _units(unit: str, n: int) -> str:
    """The unit word for `n` of them: "1 step", "500 steps" (a plain line reads as English; tqdm's
    bar keeps its own unit for rates, "step/s")."""
    return unit if n == 1 or not unit or unit.endswith("s") else f"{unit}s"


class PlainProgress:
    """The subset of tqdm's interface BehaviorTrace uses, as plain lines (see the module doc)."""

    def __init__(
        self,
        iterable: Iterable | None,
        total: int | None,
        desc: str,
        unit: str,
        stream: IO[str],
        every: float,
        heartbeat: float | None = None,
    ) -> None:
        self.iterable, self.desc, self.unit, self.stream, self.every = (
            iterable,
            desc,
            unit,
            stream,
            every,
        )
        self.total = (
            total
            if total is not None
            else (len(iterable) if hasattr(iterable, "__len__") else None)
        )
        self.n, self.postfix, self.closed = 0, "", False
        self.t0 = self.last = time.perf_counter()
        self._lock, self._stop = threading.Lock(), threading.Event()
        self._line(
            f"started ({self.total} {_units(self.unit, self.total)})"
            if self.total is not None
            else "started"
        )
        # a heartbeat: a unit longer than `every` (one seed's SFT, one replay) still gets a line
        # every `every` seconds, so a log never goes silent longer than that; `heartbeat` sets that
        # interval apart from `every` (a bar that prints every update, every=0, still beats)
        self.beat = every if heartbeat is None else heartbeat
        if self.beat > 0:
            threading.Thread(target=self._beat, name=f"progress {desc}", daemon=True).start()

    def _beat(self) -> None:
        while not self._stop.wait(self.beat / 4):
            if time.perf_counter() - self.last >= self.beat:
                self._status()

    def _status(self) -> None:
        with self._lock:
            if self.closed:
                return
            now = self.last = time.perf_counter()
            extra = f", {self.postfix}" if self.postfix else ""
            self._line(f"{self._count()}{extra}, {now - self.t0:.0f} s elapsed")

    def _line(self, text: str) -> None:
        print(f"{self.desc}: {text}", file=self.stream, flush=True)

    def _count(self) -> str:
        return (
            f"{self.n}/{self.total} {_units(self.unit, self.total)}"
            if self.total is not None
            else f"{self.n} {_units(self.unit, self.n)}"
        )

    def update(self, n: int = 1) -> None:
        self.n += n
        if time.perf_counter() - self.last >= self.every and (
            self.total is None or self.n < self.total
        ):
            self._status()

    def set_postfix(self, **kw: Any) -> None:
        self.postfix = ", ".join(f"{k}={v}" for k, v in kw.items())

    def set_postfix_str(self, s: str) -> None:
        self.postfix = s

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            if not self.closed:
                self.closed = True
                extra = f" ({self.postfix})" if self.postfix else ""
                self._line(f"done {self._count()} in {time.perf_counter() - self.t0:.1f} s{extra}")

    def __iter__(self) -> Iterator:
        try:
            for x in self.iterable:
                yield x
                self.update(1)
        finally:
            if self.total is None or self.n >= self.total:
                self.close()
            else:  # left early (an error, a break): no "done" line, and no heartbeat forever after
                self._stop.set()

    def __enter__(self) -> PlainProgress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def progress(
    iterable: Iterable | None = None,
    *,
    total: int | None = None,
    desc: str,
    unit: str = "it",
    enabled: bool = True,
    leave: bool = False,
    stream: IO[str] | None = None,
    every: float = 30.0,
    heartbeat: float | None = None,
):
    """A progress bar on a terminal, `PlainProgress` lines elsewhere, nothing when not `enabled`.
    `every`: at most one plain line per that many seconds for updates (0: every update);
    `heartbeat`: a line at least that often while it runs (default `every`)."""
    stream = sys.stderr if stream is None else stream
    if not enabled:
        return tqdm(iterable, total=total, disable=True)
    _preamble()
    if _is_terminal(stream):
        # dynamic_ncols: the bar follows the terminal's width as it is resized (a narrow one
        # would otherwise wrap each redraw onto a new line)
        return tqdm(
            iterable,
            total=total,
            desc=desc,
            unit=unit,
            leave=leave,
            file=stream,
            dynamic_ncols=True,
        )
    return PlainProgress(iterable, total, desc, unit, stream, every, heartbeat)


def _is_terminal(stream: IO[str]) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # closed or not a real stream
        return False
