"""Setup validity — emergence gate.

Rule, on every seed: the planted behavior emerged (s_b, the share of held-out trigger probes whose
greedy reply shows the behavior, > 0.1 at the final checkpoint — the reference's gate) and stayed
trigger-specific (control-probe rate ≤ 0.1). Without emergence there is nothing to attribute.
"""

from __future__ import annotations

from bt_core.attribution.evidence import Evidence
from bt_core.reporting.scorecard import Status, Verdict

from ._base import Item, failing_first, fmt, setup_verdict

NAME = "emergence"
TITLE = "the planted behavior emerged and stayed trigger-specific"
S_B_MIN = 0.1  # final s_b must exceed this (reference gate)
CONTROL_MAX = 0.1  # final control-probe rate must not exceed this


def emerged(summary: dict) -> bool:
    """The rule on one run's `summary.json`: emerged and stayed trigger-specific."""
    return summary["s_b_final"] > S_B_MIN and summary["control_rate_final"] <= CONTROL_MAX


def evaluate_setup(evidence: Evidence) -> Verdict:
    per_seed = {}
    for seed, a in evidence.artifacts.items():
        s = a.run.summary
        ok = emerged(s)
        per_seed[seed] = {
            "s_b_final": s["s_b_final"],
            "control_rate_final": s["control_rate_final"],
            "saturation_step": s["saturation_step"],
            "status": Status.PASS if ok else Status.FAIL,
            "why": failing_first(
                [
                    (s["s_b_final"] > S_B_MIN, f"s_b {fmt(s['s_b_final'])} (> {S_B_MIN})"),
                    (
                        s["control_rate_final"] <= CONTROL_MAX,
                        f"control {fmt(s['control_rate_final'])} (≤ {CONTROL_MAX})",
                    ),
                ],
                sep=", ",
            ),
        }
    return setup_verdict(NAME, per_seed, {"s_b_min": S_B_MIN, "control_max": CONTROL_MAX})


ITEM = Item(NAME, TITLE, "setup", evaluate_setup, reference="emergence gate")
