"""Compare a scorecard with a baseline (pytest-benchmark's compare-fail pattern).

A regression is either a status that got worse than the baseline's for the same (item, estimator) —
pass → fail or invalid-setup — or a headline figure that dropped by more than `tolerance` × |baseline|
(relative). Records made with other estimator settings than the baseline's are refused (a regression
line naming the setting): their figures are not comparable. Records missing from either side are listed,
not failed.
"""

from __future__ import annotations

RANK = {"pass": 2, "invalid-setup": 1, "fail": 0}


def settings_difference(now: dict, base: dict) -> str | None:
    """How two records' estimator settings differ ("setting 'target' is 'constructed' here and
    'in_context' in the baseline"), or None when they are the same."""
    for key in sorted(set(now) | set(base)):
        if now.get(key, "(unset)") != base.get(key, "(unset)"):
            return (f"setting {key!r} is {now.get(key, '(unset)')!r} here and {base.get(key, '(unset)')!r} "
                    "in the baseline")
    return None


def compare(current: dict, baseline: dict, tolerance: float) -> dict:
    base = {(r["item"], r["estimator"]): r for r in baseline["records"]}
    cur = {(r["item"], r["estimator"]): r for r in current["records"]}
    regressions, notes = [], []
    for key, r in cur.items():
        b = base.get(key)
        if b is None:
            notes.append(f"{key[0]} × {key[1]}: not in the baseline")
            continue
        diff = settings_difference((r.get("estimator_spec") or {}).get("params") or {},
                                   (b.get("estimator_spec") or {}).get("params") or {})
        if diff:  # figures made with other settings are not comparable: refuse, do not pass silently
            regressions.append(f"{key[0]} × {key[1]}: cannot compare, {diff}")
            continue
        if RANK[r["status"]] < RANK[b["status"]]:
            regressions.append(f"{key[0]} × {key[1]}: status {b['status']} → {r['status']}")
        hb = (b.get("figures", {}).get("headline") or {}).get("value")
        hc = (r.get("figures", {}).get("headline") or {}).get("value")
        if hb is not None and hc is not None and hc < hb - tolerance * abs(hb):
            what = r["figures"]["headline"]["figure"]
            regressions.append(f"{key[0]} × {key[1]}: {what} dropped {hb:.3f} → {hc:.3f} "
                               f"(more than {tolerance:.0%} of the baseline)")
    notes += [f"{k[0]} × {k[1]}: in the baseline but not run now" for k in base if k not in cur]
    return {"tolerance": tolerance, "regressions": regressions, "notes": notes}
