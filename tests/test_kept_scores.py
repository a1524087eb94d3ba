"""Kept scores (`bt_core.attribution.kept`): the counterfactual item's ceiling (metagrad's scores)
is stored in the artifact cache once and read back by later sessions, and nothing from another
config, another estimator setting or another code is ever reused. Uses the session's smoke
artifacts (marked `train` by conftest)."""

from __future__ import annotations

import numpy as np
import pytest

from bt_core.artifacts.store import ArtifactError, ArtifactStore
from bt_core.attribution import kept
from bt_core.attribution.problem import row_norms

KEYS = {"run": "a" * 16, "replays": "b" * 16}


def test_the_key_changes_with_every_input():
    what = (0, "scores", "metagrad", {}, "seed0/stream/rollout")
    base = kept.kept_key(KEYS, what, "f" * 64)
    others = [
        kept.kept_key({**KEYS, "replays": "c" * 16}, what, "f" * 64),
        kept.kept_key(KEYS, (0, "scores", "cosine", {}, "seed0/stream/rollout"), "f" * 64),
        kept.kept_key(KEYS, (0, "scores", "metagrad", {"dtype": "float32"}, what[-1]), "f" * 64),
        kept.kept_key(KEYS, (1, "scores", "metagrad", {}, "seed1/stream/rollout"), "f" * 64),
        kept.kept_key(KEYS, what, "0" * 64),  # another source
    ]
    assert len({base, *others}) == 1 + len(others)


def test_the_fingerprint_covers_every_source_file_of_bt_core(tmp_path, monkeypatch):
    """Editing any .py file of the package changes the fingerprint (here: a copy of the package
    with one file appended to)."""
    import shutil
    from pathlib import Path

    import bt_core

    src = Path(bt_core.__file__).parent
    copy = tmp_path / "bt_core"
    shutil.copytree(src, copy, ignore=shutil.ignore_patterns("__pycache__"))
    fake = copy / "attribution" / "kept.py"

    def fingerprint():
        monkeypatch.setattr(kept, "__file__", str(fake))
        kept.source_fingerprint.cache_clear()
        try:
            return kept.source_fingerprint()
        finally:
            kept.source_fingerprint.cache_clear()

    before = fingerprint()
    with open(copy / "training" / "objective.py", "a") as f:
        f.write("\n# an edit\n")
    assert fingerprint() != before


def test_computed_once_then_read_back_bitwise(tmp_path):
    store = ArtifactStore(tmp_path)
    rng = np.random.default_rng(0)
    scores = rng.standard_normal(37)
    calls = []

    def compute():
        calls.append(1)
        return scores

    first, computed = kept.load_or_compute(store, "d" * 16, {"x": 1}, compute)
    second, again = kept.load_or_compute(store, "d" * 16, {"x": 1}, compute)
    assert (computed, again, len(calls)) == (True, False, 1)
    assert first.dtype == second.dtype == scores.dtype
    np.testing.assert_array_equal(second, scores)


def test_a_failure_keeps_nothing_and_a_damaged_file_is_an_artifact_error(tmp_path):
    store = ArtifactStore(tmp_path)

    def fail():
        raise RuntimeError("estimator failed")

    with pytest.raises(RuntimeError):
        kept.load_or_compute(store, "e" * 16, {}, fail)
    assert not store.path(kept.KIND, "e" * 16).exists()
    kept.load_or_compute(store, "e" * 16, {}, lambda: np.arange(5.0))
    f = store.path(kept.KIND, "e" * 16) / "scores.npy"
    f.chmod(0o644)
    with open(f, "r+b") as fh:
        fh.seek(-8, 2)
        fh.write(b"\x00" * 8)
    from bt_core.artifacts import store as store_mod

    store_mod._VERIFIED.clear()  # a new process: the hashes are checked again
    with pytest.raises(ArtifactError, match="does not match its manifest hash"):
        kept.load_or_compute(store, "e" * 16, {}, lambda: np.arange(5.0))


def _kept(evidence, what: str) -> list[str]:
    """ "kept" / "computed" of each quantity named `what` the session asked for."""
    return [v for (k, _), v in evidence.kept.items() if k.startswith(f"('{what}'")]


def test_the_ceiling_is_kept_across_sessions_and_never_replaces_judging(smoke_artifacts, tmp_path):
    """Session 1 computes metagrad's stream scores for the ceiling and keeps them; session 2 reads
    them back bitwise without scoring metagrad; judging metagrad itself in session 2 still scores
    it (its own timing is recorded), and the counterfactual item's ceiling is the same figure."""
    from bt_core.attribution.catalog import get
    from bt_core.attribution.evidence import Evidence
    from checklist import counterfactual

    spec = get("metagrad")
    store = ArtifactStore(tmp_path / "cache")
    one = Evidence({0: smoke_artifacts[0]}, "smoke", store=store)
    two = Evidence({0: smoke_artifacts[0]}, "smoke", store=store)
    try:
        p1 = one.stream_problem(0)
        s1 = one.kept_scores(spec, p1)
        assert _kept(one, "scores") == ["computed"]
        assert _kept(one, "row_norms") == ["computed"]  # the controls' ‖e‖ (stream_problem)
        p2 = two.stream_problem(0)
        s2 = two.kept_scores(spec, p2)
        assert _kept(two, "scores") == ["kept"] and two.kept.keys() == one.kept.keys()
        assert _kept(two, "row_norms") == ["kept"]
        np.testing.assert_array_equal(  # read back bitwise: what the session would compute
            row_norms(p2.emb), np.sqrt(np.einsum("ij,ij->i", p2.emb, p2.emb, dtype=np.float64))
        )
        assert two.scoring_times(spec) == {}  # read back, not scored
        np.testing.assert_array_equal(s1, s2)
        assert not s2.flags.writeable
        judged = two.scores(spec, p2)  # judging metagrad scores it afresh
        assert p2.name in two.scoring_times(spec)
        np.testing.assert_allclose(judged, s2, rtol=1e-12, atol=0)
        c1 = counterfactual.baseline_figures(one, 0)
        c2 = counterfactual.baseline_figures(two, 0)
        assert c1["ceiling"] == c2["ceiling"] and c1["ceiling_ci"] == c2["ceiling_ci"]
        # another setting is another key: computed again, not read back
        other = Evidence(
            {0: smoke_artifacts[0]},
            "smoke",
            store=store,
            estimator_params={"metagrad": {"dtype": "float32"}},
        )
        try:
            other.kept_scores(spec, other.stream_problem(0))
            assert _kept(other, "scores") == ["computed"]
        finally:
            other.close()
    finally:
        one.close()
        two.close()


def test_without_a_store_or_for_a_plug_in_nothing_is_kept(smoke_artifacts, tmp_path):
    import dataclasses

    from bt_core.attribution.catalog import get
    from bt_core.attribution.evidence import Evidence

    spec = dataclasses.replace(get("cosine"), origin="path:my_method:Cosine")
    store = ArtifactStore(tmp_path / "cache")
    ev = Evidence({0: smoke_artifacts[0]}, "smoke", store=store)
    bare = Evidence({0: smoke_artifacts[0]}, "smoke")
    try:
        ev.kept_scores(spec, ev.stream_problem(0))
        bare.kept_scores(get("cosine"), bare.stream_problem(0))
        # the plug-in's scores are not kept; only the judge's own ‖e‖ of the sketches is
        assert _kept(ev, "scores") == [] and list(ev.kept.values()) == ["computed"]
        assert bare.kept == {}
        held = [p.parent for p in (tmp_path / "cache" / kept.KIND).glob("*/manifest.json")]
        assert len(held) == 1
    finally:
        ev.close()
        bare.close()


def test_magnitude_controls_bootstrap_is_kept_and_the_verdict_is_identical(
    smoke_artifacts, tmp_path
):
    """The controls', the surface baseline's and the ceiling's resampled precision are computed in
    the first session and read back in the second; the judged estimator's own are computed in both;
    the item's figures are identical (the reference view's; the causal view reads the replays)."""
    from bt_core.attribution.catalog import get
    from bt_core.attribution.evidence import Evidence
    from checklist import magnitude_control

    spec = get("dot")
    store = ArtifactStore(tmp_path / "cache")
    one = Evidence({0: smoke_artifacts[0]}, "smoke", store=store)
    two = Evidence({0: smoke_artifacts[0]}, "smoke", store=store)
    bare = Evidence({0: smoke_artifacts[0]}, "smoke")
    try:
        f1 = magnitude_control.reference_seed(spec, one, 0)
        assert one.kept and set(one.kept.values()) == {"computed"}
        f2 = magnitude_control.reference_seed(spec, two, 0)
        assert two.kept.keys() == one.kept.keys() and set(two.kept.values()) == {"kept"}
        assert not any("estimator" in k for k, _ in two.kept)  # the judged one is never kept
        f0 = magnitude_control.reference_seed(spec, bare, 0)
        assert repr(f1) == repr(f2) == repr(f0)
    finally:
        for ev in (one, two, bare):
            ev.close()
