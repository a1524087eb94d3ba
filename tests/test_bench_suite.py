"""benchmarks/bench_suite.py's process-tree sampler: the memory of a suite whose estimators score
in worker processes is the tree's, not only the pytest process's."""

from __future__ import annotations

import subprocess
import sys

import pytest
from behaviortrace.benchmarks.bench_suite import TreeSampler

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def _holding(mib: int, then: str = "pass") -> str:
    """Python source that touches `mib` MiB, runs `then`, and sleeps."""
    return (
        f"import subprocess, sys, time; b = bytearray({mib} * 2**20); b[::4096] = b'x' * "
        f"len(b[::4096]); {then}; time.sleep(2)"
    )


@linux
def test_the_sampler_sees_a_grandchilds_memory():
    # a parent holding 20 MiB starts a child holding 150 MiB: the child is the largest process and
    # the tree's sums hold both
    child = f"subprocess.run([sys.executable, '-c', {_holding(150)!r}])"
    with subprocess.Popen([sys.executable, "-c", _holding(20, child)]) as p:
        tree = TreeSampler(p.pid, period=0.1)
        tree.start()
        p.wait()
    peak = tree.stop()
    assert peak["procs"] >= 2, peak
    assert 150 <= peak["max_process_mib"] < 400, peak
    assert peak["sum_rss_mib"] >= peak["max_process_mib"] + 20, peak
    assert peak["sum_pss_mib"] >= 170, peak
