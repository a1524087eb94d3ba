"""Setup validity — ground truth is a minority.

Rule, on every seed: 0 < |GT| / N < 0.5 over the training rollouts (the reference had ≈ 0.09). If
most rollouts were GT, precision@|GT| could not separate a method from chance.
"""

from __future__ import annotations

from bt_core.attribution.evidence import Evidence
from bt_core.reporting.scorecard import Status, Verdict

from ._base import Item, fmt, setup_verdict

NAME = "gt_minority"
TITLE = "the ground truth is a nonempty minority of the rollouts"
MAX_FRACTION = 0.5


def evaluate_setup(evidence: Evidence) -> Verdict:
    per_seed = {}
    for seed, a in evidence.artifacts.items():
        n, gt = a.run.summary["n_rollouts"], a.run.summary["gt_size"]
        frac = gt / n
        ok = 0 < gt and frac < MAX_FRACTION
        per_seed[seed] = {
            "gt_size": gt,
            "n_rollouts": n,
            "gt_fraction": frac,
            "status": Status.PASS if ok else Status.FAIL,
            "why": f"|GT| {gt} of {n} ({fmt(frac)})",
        }
    return setup_verdict(NAME, per_seed, {"max_fraction": MAX_FRACTION})


ITEM = Item(NAME, TITLE, "setup", evaluate_setup)
