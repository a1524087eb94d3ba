"""Memory of judging (issue 25): mapped sketch pages are released, TRAK's dual and the group-centred
cosine work in blocks. Each test can fail: it measures resident pages or traced allocations against
the size of what the old code held."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from helpers import peak_mib

from bt_core.artifacts.pages import release, release_seed
from bt_core.artifacts.readonly import readonly
from bt_core.artifacts.store import load_array, save_array
from bt_core.attribution.estimators.cosine import group_centred_cosine
from bt_core.attribution.estimators.trak import trak_dual
from bt_core.attribution.problem import AttributionProblem

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")


def _resident_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


@pytest.fixture
def mapped(tmp_path) -> np.ndarray:
    """A 64 MiB float32 array saved and loaded the way the store loads sketches (a read-only
    map)."""
    save_array(
        tmp_path / "emb.npy",
        np.random.default_rng(0).standard_normal((4096, 4096)).astype(np.float32),
    )
    return load_array(tmp_path / "emb.npy")


@linux
def test_release_drops_a_read_maps_pages_and_keeps_its_values(mapped):
    view = readonly(mapped)[100:]  # what a problem holds: a read-only view of the map
    total = float(np.asarray(view, np.float64).sum())
    before = _resident_mib()
    assert release(view) == 1
    after = _resident_mib()
    # the 64 MiB of pages it had read left the resident set
    assert before - after > 50, (before, after)
    # and the values read back are the same
    assert float(np.asarray(view, np.float64).sum()) == total


def test_release_ignores_arrays_that_are_not_maps():
    assert release(np.zeros(10), readonly(np.ones(3)), None) == 0


@linux
def test_release_seed_releases_stream_and_draw_sketches(mapped, tmp_path):
    class Sk:
        def __init__(self, emb):
            self.emb, self.step_emb = emb, None

    class Draw:
        sketches = Sk(mapped[:10])

    class Seed:
        sketches, draws = Sk(mapped), [Draw()]

    np.asarray(mapped, np.float64).sum()
    before = _resident_mib()
    assert release_seed(Seed()) == 1  # both views share one map: released once
    assert before - _resident_mib() > 50


def test_trak_dual_never_holds_a_float64_copy_of_the_embeddings():
    n, k = 1024, 2048
    p = AttributionProblem.synthetic(n_units=n, k=k, n_ckpt=2, group_size=4, seed=1)
    t = np.asarray(p.targets["in_context"])
    # 16 MiB: what the old dual held, besides the Gram (8 MiB) and its copy
    phi_mib = n * k * 8 / 2**20
    peak = peak_mib(lambda: trak_dual(p, t, chunk=128))
    assert peak < phi_mib, peak  # Gram + two 2 MiB row blocks


def test_group_centred_cosine_works_in_blocks():
    n, k = 2048, 2048
    p = AttributionProblem.synthetic(n_units=n, k=k, n_ckpt=2, group_size=4, seed=2)
    # 32 MiB: one float64 temporary of the old 4096-row chunk (n < 4096: all rows)
    full_mib = n * k * 8 / 2**20
    peak = peak_mib(lambda: group_centred_cosine(p, "in_context", block=128))
    assert peak < full_mib, peak


def test_release_leaves_a_writable_map_alone(tmp_path):
    m = np.lib.format.open_memmap(tmp_path / "w.npy", mode="w+", dtype=np.float32, shape=(8, 8))
    m[:] = 1.0
    assert release(m) == 0  # its unwritten pages would be lost, so it is not advised
    assert float(m.sum()) == 64.0


def test_row_norms_are_computed_once_per_read_only_array(mapped, monkeypatch):
    """A session asked for the same stream sketches' norms three times per seed; they are computed
    once per read-only array, equal the direct sum bit for bit, and a writable array is never
    memoized (its rows can change)."""
    from bt_core.attribution import problem as problem_mod

    want = np.sqrt(np.einsum("ij,ij->i", mapped, mapped, dtype=np.float64))
    calls = []
    real = np.einsum
    monkeypatch.setattr(
        problem_mod.np, "einsum", lambda *a, **k: calls.append(1) or real(*a, **k), raising=True
    )
    a = problem_mod.row_norms(mapped)
    b = problem_mod.row_norms(mapped)
    assert a is b and len(calls) == 1 and a.tobytes() == want.tobytes()
    assert not a.flags.writeable
    w = np.array(mapped[:8])  # writable
    first = problem_mod.row_norms(w)
    w[0] *= 2
    again = problem_mod.row_norms(w)
    assert again[0] == pytest.approx(2 * first[0]) and len(calls) == 3
    other = readonly(np.array(mapped[:8]))
    problem_mod.row_norms(other)
    key = id(other)
    del other
    assert key not in problem_mod._ROW_NORMS  # forgotten with its array


def test_primed_row_norms_are_answered_and_checked(mapped):
    """The judge primes the memo with kept norms: `row_norms` then returns them without reading
    the array; norms of another length are refused, and a writable array is never primed."""
    from bt_core.attribution import problem as problem_mod

    kept = np.arange(mapped.shape[0], dtype=np.float64)  # not the real norms: proves no recompute
    problem_mod.prime_row_norms(mapped, kept)
    got = problem_mod.row_norms(mapped)
    assert got.tobytes() == kept.tobytes() and not got.flags.writeable
    with pytest.raises(ValueError, match="rows"):
        problem_mod.prime_row_norms(mapped, kept[:-1])
    w = np.array(mapped[:4])
    problem_mod.prime_row_norms(w, np.zeros(4))
    assert problem_mod.row_norms(w)[0] > 0
