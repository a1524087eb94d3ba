"""Compare a scorecard with a baseline (pytest-benchmark's compare-fail pattern): it compares, or
refuses.

`baseline_refusal` is checked before anything trains (a usage error): the baseline must be of the
same scale, config hash and seeds, and hold records of every selected estimator — of the same origin
and settings, or of the baseline estimator it was explicitly mapped to (`compare_as`, from
`--scorecard-compare-as`).

`compare` then judges record by record. A regression is a status that got worse than the baseline's
for the same (item, estimator) — pass → fail — or a headline figure that dropped by more than
`tolerance` × |baseline| (relative). The same comparison in a record's other view (the one that
does not gate, `views`) is *reported* (`other_views`): a regression there is shown, and never sets
the exit code. A record not judged now (invalid-setup, error, declined) is not
compared: it is noted, and the session exits "not judged" for it, never "regression". A record that
cannot be compared (the baseline lacks its item, its estimator settings differ) is *refused*, never
passed silently. Baseline records not run now are listed as notes (a session may select fewer
items).
"""

from __future__ import annotations

from bt_core.reporting.scorecard import RANK, judged


def settings_difference(now: dict, base: dict) -> str | None:
    """How two records' estimator settings differ ("setting 'target' is 'constructed' here and
    'in_context' in the baseline"), or None when they are the same."""
    for key in sorted(set(now) | set(base)):
        if now.get(key, "(unset)") != base.get(key, "(unset)"):
            return (
                f"setting {key!r} is {now.get(key, '(unset)')!r} here and "
                f"{base.get(key, '(unset)')!r} in the baseline"
            )
    return None


def _run_difference(baseline: dict, run: dict) -> str | None:
    view = run.get("gate_view")
    if view is not None and "gate_view" not in baseline:
        return (
            "the baseline was written before the items had views (issue 48): its draw items "
            "required the planted labels and the causal label at once and its stream items judged "
            f"the planted labels, where this version judges each view on its own and gates on the "
            f"{view} view; its statuses and headlines are not comparable. Write a new baseline "
            "with this version (--scorecard=PATH)"
        )
    rules = run.get("rules")
    if view is not None and rules is not None and baseline.get("rules", 1) != rules:
        was = baseline.get("rules", 1)
        return (
            f"the baseline was judged under the checklist's rules {was} and this version judges "
            f"under rules {rules}"
            + (
                " (issue 61: each item now asks its own question, with its own comparison; "
                "docs/items.md#six-questions)"
                if was == 1 and rules == 2
                else ""
            )
            + "; the same scores can get other verdicts, so its statuses are not comparable. "
            "Write a new baseline with this version (--scorecard=PATH)"
        )
    if view is not None and baseline["gate_view"] != view:
        return (
            f"the baseline gated on the {baseline['gate_view']} view and this session on the "
            f"{view} view; its verdicts judge other truth. Rerun with --gate-view "
            f"{baseline['gate_view']}, or write a new baseline"
        )
    for key, what, why in (
        ("scale", "scale", ""),
        (
            "config_hash",
            "config hash",
            " (the run, sketch, draws or replay plan differ: a baseline written by another "
            "version may judge against another truth)",
        ),
    ):
        if baseline.get(key) != run[key]:
            return (
                f"the baseline was made with {what} {baseline.get(key)!r} and this session runs "
                f"{run[key]!r}; its figures are not comparable{why}. Compare with a baseline of "
                f"this {what}, or write one (--scorecard=PATH)"
            )
    if sorted(baseline.get("seeds") or []) != sorted(run["seeds"]):
        return (
            f"the baseline was made on seeds {baseline.get('seeds')} and this session runs seeds "
            f"{run['seeds']}; its figures (min over seeds) are not comparable. Rerun with --seeds "
            f"{','.join(map(str, baseline.get('seeds') or [])) or '…'}, or write a new baseline"
        )
    return None


def baseline_refusal(
    baseline: dict, run: dict, estimators: list[dict], compare_as: dict[str, str]
) -> str | None:
    """Why `baseline` cannot be compared with this session, or None.

    run: {"scale", "config_hash", "seeds", "gate_view"} of the session; estimators: [{"name",
    "origin", "params"}] of each selected estimator; compare_as: {name: baseline estimator name}
    given explicitly."""
    why = _run_difference(baseline, run)
    if why:
        return why
    held: dict[str, dict] = {}
    for r in baseline.get("records", []):
        if r["estimator"] != "setup":
            held.setdefault(r["estimator"], r.get("estimator_spec") or {})
    for e in estimators:
        name, base = e["name"], compare_as.get(e["name"], e["name"])
        if base not in held:
            holds = ", ".join(sorted(held)) or "none"
            return (
                f"the baseline holds no record of estimator {base!r} (it holds: {holds}), so "
                f"there is nothing to compare {name!r} with. Write a baseline of it first "
                "(--scorecard=PATH), or compare it with another estimator's records: "
                f"--scorecard-compare-as {name}=BASELINE_NAME"
            )
        spec = held[base]
        if name not in compare_as and spec.get("origin") not in (None, e["origin"]):
            return (
                f"estimator {name!r} is {e['origin']} here but {spec['origin']} in the baseline: "
                "another estimator of the same name. Compare them anyway with "
                f"--scorecard-compare-as {name}={name}"
            )
        if base == name and spec.get("params") is not None:
            diff = settings_difference(e["params"], spec["params"])
            if diff:
                return (
                    f"cannot compare estimator {name!r}: {diff}. Rerun with the baseline's "
                    "settings (--estimator-param) or write a new baseline"
                )
    return None


def compare(
    current: dict, baseline: dict, tolerance: float, compare_as: dict[str, str] | None = None
) -> dict:
    """Record-by-record comparison: {"tolerance", "compare_as", "compared" (records compared),
    "regressions", "other_views" (the same in each record's view that does not gate: reported,
    never gating), "refused" (records that could not be compared, with why), "notes"}."""
    compare_as = compare_as or {}
    base = {(r["item"], r["estimator"]): r for r in baseline["records"]}
    regressions, other, refused, unjudged, used, compared = [], [], [], [], set(), 0
    for r in current["records"]:
        item, est = r["item"], r["estimator"]
        bkey = (item, compare_as.get(est, est))
        label = f"{item} × {est}" + (f" (vs the baseline's {bkey[1]})" if bkey[1] != est else "")
        b = base.get(bkey)
        if b is None:
            refused.append(f"{label}: the baseline has no record of {bkey[0]} × {bkey[1]}")
            continue
        used.add(bkey)
        diff = (
            None
            if bkey[1] != est
            else settings_difference(
                (r.get("estimator_spec") or {}).get("params") or {},
                (b.get("estimator_spec") or {}).get("params") or {},
            )
        )
        # figures made with other settings are not comparable: refuse, do not pass silently
        if diff:
            refused.append(f"{label}: cannot compare, {diff}")
            continue
        # nor a verdict judged in another view (an item that gained a view since the baseline)
        if r.get("view") != b.get("view"):
            refused.append(
                f"{label}: cannot compare, judged in the {r.get('view')} view here and in the "
                f"{b.get('view')} view in the baseline (the item's rule changed view since); "
                "write a new baseline"
            )
            continue
        if not judged(r["status"]) or (r["estimator"] == "setup" and r["status"] != "pass"):
            # not judged now (a failed setup gate, a crash, a declined problem): nothing to
            # compare, and not a regression of the method — the session's exit (not judged) says so
            unjudged.append(f"{label}: not judged now ({r['status']}), nothing compared")
            continue
        compared += 1
        other += _other_views(label, r, b, tolerance)
        regressions += _regressions(
            label,
            (r["status"], r.get("figures", {}).get("headline")),
            (b["status"], b.get("figures", {}).get("headline")),
            tolerance,
        )
    names = {k[1] for k in used}  # of the estimators compared: the baseline's records not run now
    notes = unjudged + [
        f"{k[0]} × {k[1]}: in the baseline but not run now"
        for k in base
        if k not in used and k[1] in names
    ]
    return {
        "tolerance": tolerance,
        "compare_as": dict(compare_as),
        "compared": compared,
        "regressions": regressions,
        "other_views": other,
        "refused": refused,
        "notes": notes,
    }


def _other_views(label: str, r: dict, b: dict, tolerance: float) -> list[str]:
    """Regressions in the record's views that do not gate (each judged now and in the baseline's
    record), each named by its view: reported, never gating. A baseline written before the views
    kept their headlines has its statuses compared only."""
    out = []
    for w, x in (r.get("views") or {}).items():
        y = (b.get("views") or {}).get(w)
        if w == r.get("view") or y is None or not (judged(x["status"]) and judged(y["status"])):
            continue
        lines = _regressions(
            label, (x["status"], x.get("headline")), (y["status"], y.get("headline")), tolerance
        )
        out += [f"{line} (in the {w} view)" for line in lines]
    return out


def _regressions(label: str, now: tuple, base: tuple, tolerance: float) -> list[str]:
    """A status that got worse, or a headline ({"figure", "value"}) that dropped by more than
    `tolerance` × |baseline|: `now` and `base` are (status, headline)."""
    out = []
    (sc, hc), (sb, hb) = now, base
    if RANK[sc] < RANK[sb]:
        out.append(f"{label}: status {sb} → {sc}")
    vb, vc = (hb or {}).get("value"), (hc or {}).get("value")
    if vb is not None and vc is not None and vc < vb - tolerance * abs(vb):
        out.append(
            f"{label}: {hc['figure']} dropped {vb:.3f} → {vc:.3f} (more than {tolerance:.0%} of "
            "the baseline)"
        )
    return out


def no_regression(cmp: dict) -> str:
    """What a comparison with no gating regression says: "no gating regression" where the views
    that do not gate have some (reported beside it), else "no regression"."""
    return "no gating regression" if cmp.get("other_views") else "no regression"


def listed(cmp: dict) -> list[str]:
    """A comparison's lines for a page or a report: the gating regressions (else that there is
    none), then the regressions in the views that do not gate, each marked as reported."""
    reported = [f"reported, not gating: {x}" for x in cmp.get("other_views") or []]
    return (cmp["regressions"] or [no_regression(cmp)]) + reported
