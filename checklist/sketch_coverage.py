"""Setup validity — sketch coverage (reference pitfall P3).

Rule, on every seed: the gradient embedding covers the behavior's parameters (the trigger's and the
behavior token's embedding rows feed the sketch: a gradient supported on them keeps its norm) and
preserves inner products of real rollout gradients within the JL tolerance for its k; and the
replayed parameters that produced each rollout match the stored checkpoints (max |Δθ| ≤ 1e-6). The
reference's first capture kept only the first 65,536 parameters and never saw the trigger tokens.
"""

from __future__ import annotations

from bt_core.attribution.evidence import Evidence
from bt_core.reporting.scorecard import Status, Verdict

from ._base import Item, failing_first, setup_verdict

NAME = "sketch_coverage"
TITLE = "the gradient sketch covers the trigger and behavior parameters"
REPLAY_TOL = 1e-6


def evaluate_setup(evidence: Evidence) -> Verdict:
    per_seed = {}
    for seed, a in evidence.artifacts.items():
        rep = a.sketches.report
        cov = rep["coverage"]
        rows = ", ".join(
            f"{w} ‖S g‖²/‖g‖² {r['norm2_ratio']}" for w, r in cov["token_rows"].items()
        )
        fid = cov["fidelity"]
        ok = cov["ok"] and rep["replay_max_abs_diff"] <= REPLAY_TOL
        per_seed[seed] = {
            "coverage_ok": cov["ok"],
            "token_rows": cov["token_rows"],
            "fidelity": fid,
            "replay_max_abs_diff": rep["replay_max_abs_diff"],
            "status": Status.PASS if ok else Status.FAIL,
            "why": f"{cov['projector']} k={cov['k']}: "
            + failing_first(
                [
                    (
                        cov["ok"],
                        f"{rows}; mean |Δcos| {fid['mean_abs_cos_err']} (tol {fid['tolerance']})",
                    ),
                    (
                        rep["replay_max_abs_diff"] <= REPLAY_TOL,
                        f"replay max |Δθ| {rep['replay_max_abs_diff']:.1e} (≤ {REPLAY_TOL:g})",
                    ),
                ]
            ),
        }
    return setup_verdict(NAME, per_seed, {"replay_tol": REPLAY_TOL})


ITEM = Item(NAME, TITLE, "setup", evaluate_setup, reference="P3")
