"""The scoring worker: a separate process that imports one estimator and scores the problems the
judge wrote into a scratch directory (`bt_core.attribution.scratch`). Started by
`bt_core.attribution.sandbox`, under bubblewrap where it can run; it is given no cache path, no
judge object and an environment without BehaviorTrace's variables.

    python -m bt_core.attribution.worker PROBLEMS_DIR OUT_DIR

Protocol: one JSON request per line on stdin, one JSON reply per line on the original stdout (the
plug-in's own prints go to stderr). Requests:

    {"op": "init", "ref": "module:qualname", "name", "origin", "params", "needs": [..] | null,
     "cwd"}
    {"op": "score", "id": N, "problem": "<directory under PROBLEMS_DIR>"}
                                   → {"id": N, "outcome": {...}, "scores": "N.npy" | null}
    {"op": "params"}               → {"params": the built estimator's `params` (JSON) | null}

The estimator is built once, on the first score (as in-process scoring builds it once per session),
and scores every problem of the session; a failure to import it fails every score with the reason.
"""

from __future__ import annotations

import ctypes
import gc
import importlib
import json
import os
import sys
from dataclasses import fields, is_dataclass
from pathlib import Path

import numpy as np

from bt_core.artifacts.pages import release
from bt_core.attribution import frames
from bt_core.attribution.frames import raised_at
from bt_core.attribution.outcome import Outcome, call_score
from bt_core.attribution.problem import ARRAY_FIELDS
from bt_core.attribution.registry import EstimatorSpec
from bt_core.attribution.scratch import read_problem


def resolve(ref: str):
    """The object `module:qualname` names (a class or a factory defined at module level)."""
    module, _, qual = ref.partition(":")
    obj = importlib.import_module(module)
    for part in qual.split("."):
        obj = getattr(obj, part)
    return obj


class Worker:
    def __init__(self, problems: Path, out: Path):
        self.problems, self.out = problems, out
        self.spec: EstimatorSpec | None = None
        self.init_error: str | None = None
        self.params: dict = {}
        self.needs: tuple[str, ...] | None = None
        self.est = None
        self._loaded: dict[str, object] = {}

    def init(self, req: dict) -> dict:
        self.params, self.needs = (
            req["params"],
            None if req["needs"] is None else tuple(req["needs"]),
        )
        frames.BASE = Path(req["cwd"])  # where it raised is said as the judge would say it
        try:
            factory = resolve(req["ref"])
        except Exception as e:
            self.init_error = (
                f" could not be imported in the scoring worker: {raised_at(e)} (a plug-in runs "
                "in a sandbox that sees the Python environment, its own module and the files it "
                "declares in `files`; see docs/sandbox.md)"
            )
            return {"error": self.init_error}
        self.spec = EstimatorSpec(req["name"], factory, (), req["origin"], "", self.needs or ())
        return {"ok": True}

    def build(self):
        if self.est is None:
            self.est = self.spec.create(**self.params)
        return self.est

    def problem(self, name: str):
        if name not in self._loaded:
            self._loaded[name] = read_problem(self.problems / name)
        return self._loaded[name]

    def score(self, req: dict) -> dict:
        if self.init_error is not None:
            return {
                "id": req["id"],
                "outcome": Outcome(error=self.init_error).as_json(),
                "scores": None,
            }
        problem = self.problem(req["problem"])
        given = problem.handout(self.needs)
        out = call_score(self.build, self.spec.factory, given)
        release_problem(problem)
        trim_heap()
        name = None
        if out.scores is not None:
            name = f"{req['id']}.npy"
            np.save(self.out / name, out.scores, allow_pickle=False)
        return {"id": req["id"], "outcome": out.as_json(), "scores": name}

    def own_params(self) -> dict:
        try:
            own = getattr(self.build(), "params", None)
            json.dumps(own)
        except Exception:
            return {"params": None}
        return {"params": own if isinstance(own, dict) else None}


def release_problem(problem) -> int:
    """Drop the resident pages of a problem's memory-mapped arrays (`bt_core.artifacts.pages`)
    after a scoring pass. The worker keeps every problem of the session open, so without this the
    pages an estimator read (512 MB of embeddings per default stream seed) would stay in its
    resident set for the whole session, seed after seed; a later read faults them back in from the
    page cache, with the same bytes."""
    view = problem.rollouts
    arrays = [getattr(problem, n, None) for n in ARRAY_FIELDS] + list(problem.targets.values())
    if view is not None and is_dataclass(view):
        arrays += [getattr(view, f.name) for f in fields(view)]
    return release(*arrays)


def _malloc_trim():
    """glibc's ``malloc_trim``, or None (another C library, another platform)."""
    try:
        return getattr(ctypes.CDLL(None), "malloc_trim", None)
    except OSError:
        return None


_TRIM = _malloc_trim()


def trim_heap() -> None:
    """Give the heap an estimator freed back to the system after a scoring pass. glibc keeps freed
    blocks below its (adaptive, up to 32 MB) map threshold in the process's heap, so a worker whose
    estimator once peaked stays that large all session: metagrad's worker held 1.16 GB after scoring
    a default seed, 0.40 GB after ``malloc_trim(0)``. Only memory already freed is returned; nothing
    the estimator holds is touched."""
    gc.collect()
    if _TRIM is not None:
        _TRIM(0)


def main(argv: list[str]) -> int:
    problems, out = Path(argv[0]), Path(argv[1])
    reply = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # whatever the plug-in prints goes to stderr, not into the replies
    w = Worker(problems, out)
    for line in sys.stdin:
        req = json.loads(line)
        op = req["op"]
        res = w.init(req) if op == "init" else w.score(req) if op == "score" else w.own_params()
        reply.write(json.dumps(res) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
