"""Retiring an estimator's scoring worker after its last item (`Evidence.retire`, called by the
plugin outside xdist): the process ends, what the session needs of it afterwards (its memoized
scores, its settings) is there without a new worker, and the verdicts do not change. Uses the
session's smoke artifacts (marked `train` by conftest)."""

from __future__ import annotations

import json

import numpy as np

pytest_plugins = ["pytester"]


def test_a_retired_worker_is_gone_and_nothing_the_session_needs_is_lost(smoke_artifacts):
    from bt_core.attribution.catalog import get
    from bt_core.attribution.evidence import Evidence

    spec = get("cosine")
    ev = Evidence({0: smoke_artifacts[0]}, "smoke", scoring="subprocess")
    try:
        p = ev.stream_problem(0)
        s = ev.scores(spec, p)
        proc, _ = ev.scorer._procs[spec.key]
        settings = ev.settings(spec)
        assert ev.retire(spec) is True
        assert proc.p.poll() is not None and spec.key not in ev.scorer._procs
        np.testing.assert_array_equal(ev.scores(spec, p), s)  # memoized: no worker
        assert ev.settings(spec) == settings and spec.key not in ev.scorer._procs
        assert ev.retire(spec) is False  # nothing left to stop
        # asked for a new problem after all, it is scored by a new worker, not refused
        step = ev.scores(spec, ev.stream_problem(0, "step"))
        assert step.shape == (ev.stream_problem(0, "step").n_units,)
        assert spec.key in ev.scorer._procs
    finally:
        ev.close()


def test_the_suite_retires_each_estimator_after_its_last_item_with_the_same_verdicts(
    suite, tmp_path, monkeypatch
):
    """A session of two estimators ends each one's worker after its last item (the plugin's
    teardown hook; counted by wrapping `Evidence.retire`), and its records equal those of a
    session that never retires (`Evidence.retire` made a no-op)."""
    from bt_core.attribution import evidence as evidence_mod

    retired: list[str] = []
    real = evidence_mod.Evidence.retire

    def counting(self, spec):
        retired.append(spec.name)
        return real(self, spec)

    monkeypatch.setattr(evidence_mod.Evidence, "retire", counting)
    args = ("--estimator=cosine,dot", "-k", "magnitude_control or headroom")
    suite(*args, f"--scorecard={tmp_path / 'a.json'}")
    # the session's last item leaves its worker to Evidence.close
    assert retired == ["cosine"]
    monkeypatch.setattr(evidence_mod.Evidence, "retire", lambda self, spec: False)
    suite(*args, f"--scorecard={tmp_path / 'b.json'}")
    a, b = (json.loads((tmp_path / f).read_text())["records"] for f in ("a.json", "b.json"))
    fields = ("item", "estimator", "status", "reason", "figures")
    assert [{k: r[k] for k in fields} for r in a] == [{k: r[k] for k in fields} for r in b]
