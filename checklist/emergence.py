"""Setup validity — emergence gate.

Rule, on every seed: the planted behavior emerged (s_b, the share of held-out trigger probes whose
greedy reply shows the behavior, > 0.1 at the final checkpoint — the reference's gate) and stayed
trigger-specific (control-probe rate ≤ 0.1). Without emergence there is nothing to attribute.
The rule's one home is `bt_core.training.planting`, where an unpinned build also redraws the key of
a run that did not plant the behavior; each seed's line says when its run is on a later key draw,
and why the earlier ones were set aside (``redrawn``).
"""

from __future__ import annotations

from bt_core.attribution.evidence import Evidence
from bt_core.reporting.scorecard import Status, Verdict
from bt_core.training.planting import CONTROL_MAX, S_B_MIN, emerged, redrawn

from ._base import Item, failing_first, fmt, setup_verdict

NAME = "emergence"
TITLE = "the planted behavior emerged and stayed trigger-specific"
__all__ = ["CONTROL_MAX", "ITEM", "S_B_MIN", "emerged"]


def evaluate_setup(evidence: Evidence) -> Verdict:
    per_seed = {}
    for seed, a in evidence.artifacts.items():
        s = a.run.summary
        ok = emerged(s)
        set_aside = redrawn(a.run)
        per_seed[seed] = {
            "s_b_final": s["s_b_final"],
            "control_rate_final": s["control_rate_final"],
            "saturation_step": s["saturation_step"],
            "redrawn": set_aside,
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
            )
            + _on_key_draw(set_aside),
        }
    return setup_verdict(NAME, per_seed, {"s_b_min": S_B_MIN, "control_max": CONTROL_MAX})


def _on_key_draw(redrawn: list[str]) -> str:
    """After a seed's figures (the failing clause leads the line: issue 39), which key draw its run
    is on and why each key before it was set aside ("" on its first key)."""
    if not redrawn:
        return ""
    return f"; on key draw {len(redrawn) + 1} (set aside: {'; '.join(redrawn)})"


ITEM = Item(NAME, TITLE, "setup", evaluate_setup, reference="emergence gate")
