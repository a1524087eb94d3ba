"""The scoring worker keeps every problem of a session open; after each scoring pass it drops the
pages of the problem's memory-mapped arrays (issue 25), so one worker does not hold every seed's
embeddings resident by the end of a session. Each test can fail: it reads the resident set."""

from __future__ import annotations

import subprocess
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


TRIMMED = """
from bt_core.attribution.worker import _TRIM, trim_heap
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20
if _TRIM is None:
    print("no-trim")
    raise SystemExit
import ctypes
libc = ctypes.CDLL(None)
# glibc keeps freed heap below its trim threshold and serves blocks below its map threshold from the
# heap; both adapt to what a process allocated. Fix them as a long session leaves them.
libc.mallopt(-1, 1 << 30)  # M_TRIM_THRESHOLD: never shrink the heap's top by itself
libc.mallopt(-3, 32 << 20)  # M_MMAP_THRESHOLD: 1 MB blocks come from the heap
blocks, pins = [], []
for _ in range(300):  # 300 MB from the heap, each block below a small live one
    blocks.append(bytearray(2**20))
    pins.append(bytearray(600))
del blocks  # freed, but inside the heap: still resident
before = rss()
trim_heap()
print(before - rss())
"""


@linux
def test_trim_heap_returns_freed_heap_to_the_system():
    out = subprocess.run(
        [sys.executable, "-c", TRIMMED], capture_output=True, text=True, check=True
    ).stdout.split()
    if out == ["no-trim"]:
        pytest.skip("no glibc malloc_trim here")
    assert float(out[-1]) > 200, out  # of the 300 MB freed but still resident
