"""The scoring worker keeps every problem of a session open; after each scoring pass it drops the
pages of the problem's memory-mapped arrays (issue 25), so one worker does not hold every seed's
embeddings resident by the end of a session. Each test can fail: it reads the resident set."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from bt_core.attribution.problem import AttributionProblem
from bt_core.attribution.scratch import write_problem
from bt_core.attribution.worker import Worker

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")


def _resident_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


@linux
def test_the_worker_releases_a_problems_pages_after_scoring(tmp_path):
    p = AttributionProblem.synthetic(n_units=4096, k=4096, n_ckpt=2, group_size=4, seed=5)
    write_problem(p, tmp_path / "problems" / "p")  # emb: 64 MiB float32, mapped by the worker
    (tmp_path / "out").mkdir()
    w = Worker(tmp_path / "problems", tmp_path / "out")
    init = {"ref": "bt_core.attribution.estimators.dot:Dot", "name": "dot", "origin": "builtin"}
    assert w.init({**init, "params": {}, "needs": None, "cwd": str(tmp_path)}) == {"ok": True}
    before = _resident_mib()
    reply = w.score({"id": 1, "problem": "p"})
    after = _resident_mib()
    assert reply["outcome"].get("error") is None, reply
    # dot read all 64 MiB of the map; without the release they would still be resident here
    assert after - before < 32, (before, after)
    scores = np.load(tmp_path / "out" / reply["scores"])
    again = np.load(tmp_path / "out" / w.score({"id": 2, "problem": "p"})["scores"])
    assert np.array_equal(scores, again)  # the pages fault back in with the same bytes
