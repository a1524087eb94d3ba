"""Machinery of the estimator items: per-seed results → one verdict, the scores of each level, setup
gating and the refusal of label readers.

An estimator item evaluates each seed with ``evaluate_seed(spec, evidence, seed, draw=0) -> dict``,
returning the seed's figures plus ``status`` (a `Status`), ``why`` (a short reason quoting the
figures), ``margin`` (the headline figure minus the item's bar: > 0 clears it) and ``chance_margin``
(the figure minus its chance level: > 0 is above chance), which `seed_variance` and `draw_variance`
judge across seeds and draws. `seed_verdict` turns those per-seed results into the item's `Verdict`:
every seed must pass.

For the report an item may also return ``versus``: every comparison its rule makes on the seed, as
``{name: {"value": figure − the compared one's, "ci": [lo, hi] or None}}`` (a seed clears a
comparison when the CI's lower end — the value, without a CI — exceeds 0). Given a `margin` label,
`seed_verdict` writes the deciding one per seed (the lowest lower end) into `Verdict.margin` and a
one-line `Verdict.short` ("loses to advantage (step) by 0.43, seed 1"); a seed's own ``short`` is
used where the seed fails for a reason no comparison shows.

An item whose rule has two views (`_base.VIEWS`) returns, beside the shared figures, ``views``:
``{view: {status, why, margin, chance_margin, versus, ...}}``, each view's verdict on the seed;
`in_view` lays one view's entries over the shared ones, which is what `seed_verdict(view=…)`,
`seed_variance` and `draw_variance` judge.

Every estimator item's verdict passes through `judged`: gating setup failures, the target gate,
advisory caveats, and the refusal of label readers that are not built-in validation estimators.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from bt_core.attribution import catalog
from bt_core.attribution.evidence import EstimatorFailure, Evidence
from bt_core.attribution.registry import EstimatorSpec
from bt_core.reporting.scorecard import Status, Verdict, num, worst_status

from ._base import failure_verdict, spec_record
from ._memo import memo
from .setup import attach_caveats, gate, gate_targets

SeedFn = Callable[[EstimatorSpec, Evidence, int, int], dict]


def level_scores(
    spec: EstimatorSpec, evidence: Evidence, seed: int, level: str
) -> tuple[np.ndarray, str]:
    """The estimator's scores on seed's stream at `level`, broadcast to rollouts (n_rollouts,), and
    how they were obtained. Every estimator is judged at both levels:

    * rollout level: its rollout scores ("native"), or its step scores broadcast to the step's
      rollouts ("broadcast": all rollouts of a step tie) when it has no rollout level;
    * step level: its step scores ("native"), or its rollout scores summed per step ("summed") when
      it has no step level — the step's share of what the method attributes to its rollouts.

    Raises EstimatorFailure."""
    pr, ps = evidence.stream_problem(seed, "rollout"), evidence.stream_problem(seed, "step")
    native = pr if level == "rollout" else ps
    if level in spec.levels:
        return native.to_rollouts(evidence.scores(spec, native)), "native"
    if level == "rollout":
        return ps.to_rollouts(evidence.scores(spec, ps)), "broadcast"
    summed = np.bincount(
        ps.unit_of_rollout, weights=evidence.scores(spec, pr), minlength=ps.n_units
    )
    return ps.to_rollouts(summed), "summed"


def seed_result(
    name: str,
    evaluate_seed: SeedFn,
    spec: EstimatorSpec,
    evidence: Evidence,
    seed: int,
    draw: int = 0,
) -> dict:
    """`evaluate_seed` on one seed, memoized per (item, estimator, seed, draw): an item that reads
    another's per-seed result shares its computation; raises EstimatorFailure."""
    return memo(
        evidence, (name, spec.key, seed, draw), lambda: evaluate_seed(spec, evidence, seed, draw)
    )


def seed_results(
    name: str, evaluate_seed: SeedFn, spec: EstimatorSpec, evidence: Evidence, draw: int = 0
) -> dict[int, dict]:
    """`seed_result` on every seed; raises EstimatorFailure."""
    return {s: seed_result(name, evaluate_seed, spec, evidence, s, draw) for s in evidence.seeds}


def in_view(result: dict, view: str) -> dict:
    """A seed's result as judged in `view`: its ``views[view]`` entries over the shared figures (the
    result itself where the item's rule has one view)."""
    views = result.get("views")
    if not views:
        return result
    return {**result, **views[view], "view": view}


def judged(
    name: str, spec: EstimatorSpec, evidence: Evidence, inner: Callable[[], Verdict]
) -> Verdict:
    """The verdict of estimator item `name`: invalid-setup when a gating setup item failed (without
    running `inner`); else `inner()`, gated on the targets for target readers, with advisory
    caveats, and refused when the estimator reads the labels without being a built-in validation
    estimator."""
    v = gate(name, spec, evidence)
    if v is None:
        v = attach_caveats(gate_targets(inner(), spec, evidence), spec, evidence)
    return refuse_label_reader(v, spec)


def refuse_label_reader(v: Verdict, spec: EstimatorSpec) -> Verdict:
    """A label reader that is not a built-in validation estimator cannot pass a gate: its verdict
    fails, quoting what the item's rule gives (`rule_status`)."""
    if not spec.reads_labels or spec.builtin_validation:
        return v
    admitted = [s.name for s in catalog.available() if s.builtin_validation]
    return Verdict(
        v.item,
        v.estimator,
        Status.FAIL,
        f"refused: {spec.name!r} reads the labels (needs {list(spec.needs)}) — validation only, it "
        f"cannot pass a gate; only the built-in validation estimator(s) {admitted} "
        f"may. The item's rule gives {str(v.status).upper()}: {v.reason}",
        {**v.figures, "rule_status": str(v.status), "refused": "reads labels"},
        v.estimator_spec,
        f"refused: reads labels; rule {str(v.status).upper()}: {v.short}",
        v.margin,
    )


def seed_verdict(
    name: str,
    evaluate_seed: SeedFn,
    spec: EstimatorSpec,
    evidence: Evidence,
    *,
    headline: str | dict[str, str] | None = None,
    extra: dict | None = None,
    margin: str | None = None,
    view: str | None = None,
) -> Verdict:
    """The item's verdict: invalid-setup if the setup failed or any seed's evidence is unusable;
    fail if any seed fails; else pass (see `judged` for gating and refusal). `margin` names what the
    seeds' ``versus`` comparisons measure (an axis label; see the module docstring). `view`: judge
    each seed in that view (`in_view`); `headline` may then name a figure per view."""
    return judged(
        name,
        spec,
        evidence,
        lambda: _seed_verdict(name, evaluate_seed, spec, evidence, headline, extra, margin, view),
    )


def _seed_verdict(name, evaluate_seed, spec, evidence, headline, extra, margin, view) -> Verdict:
    rec = spec_record(spec, evidence)
    try:
        per_seed = seed_results(name, evaluate_seed, spec, evidence)
    except EstimatorFailure as e:
        return failure_verdict(name, spec, evidence, e)
    if view is not None:
        per_seed = {s: in_view(r, view) for s, r in per_seed.items()}
    figures = {"per_seed": per_seed, **(extra or {})}
    if isinstance(headline, dict):  # a headline figure per view
        headline = headline.get(view)
    if headline:
        vals = [
            r[headline]
            for r in per_seed.values()
            if isinstance(r.get(headline), (int, float)) and r[headline] == r[headline]
        ]
        figures["headline"] = {
            "figure": f"min {headline} over seeds",
            "value": min(vals) if vals else None,
        }
    summary = "; ".join(f"seed {s}: {r['why']}" for s, r in per_seed.items())
    invalid = [s for s, r in per_seed.items() if r["status"] == Status.INVALID_SETUP]
    failing = [s for s, r in per_seed.items() if r["status"] != Status.PASS]
    status = worst_status(r["status"] for r in per_seed.values())
    m = margin_record(per_seed, margin) if margin else {}
    short = seed_short(status, per_seed, m)
    if invalid:
        return Verdict(
            name,
            spec.name,
            status,
            f"unusable evidence on seed(s) {invalid} — {summary}",
            figures,
            rec,
            short,
            m,
        )
    if failing:
        return Verdict(
            name,
            spec.name,
            status,
            f"fails on seed(s) {failing} — {summary}",
            figures,
            rec,
            short,
            m,
        )
    return Verdict(
        name, spec.name, status, f"holds on every seed — {summary}", figures, rec, short, m
    )


def _low(c: dict) -> float:
    """A comparison's lower end: its CI's lower bound, or its value without a CI; NaN sorts last."""
    x = c["ci"][0] if c.get("ci") and c["ci"][0] is not None else c.get("value")
    return x if isinstance(x, (int, float)) and x == x else float("inf")


def margin_record(per_seed: dict, figure: str) -> dict:
    """`Verdict.margin` from per-seed results carrying ``versus``: each seed's deciding comparison
    (the one with the lowest lower end — the control it loses to worst, or beats least); {} if no
    seed has one."""
    out = {}
    for s, r in per_seed.items():
        vs = {n: c for n, c in (r.get("versus") or {}).items() if _low(c) != float("inf")}
        best = min(vs, key=lambda n: _low(vs[n])) if vs else None
        c = vs.get(best, {})
        out[str(s)] = {
            "value": c.get("value"),
            "ci": list(c["ci"]) if c.get("ci") else None,
            "versus": best,
            "status": str(r["status"]),
        }
    if not any(m["versus"] for m in out.values()):
        return {}
    return {"figure": figure, "bar": 0.0, "per_seed": out}


def margin_phrase(m: dict) -> str:
    """One comparison in words: "beats advantage by 0.12", "loses to advantage by 0.43", or, when
    the value is above 0 but its CI is not, "not clear of advantage (CI lower -0.02)"."""
    v, lo = m["value"], _low(m)
    if lo > 0:
        return f"beats {m['versus']} by {num(v)}"
    if v is not None and v > 0:
        return f"not clear of {m['versus']} (CI lower {num(lo)})"
    return f"loses to {m['versus']} by {num(-v)}" if v else f"ties {m['versus']}"


def seed_short(status: str, per_seed: dict, margin: dict) -> str:
    """The verdict in one line: the deciding comparison of its worst seed (pass: the one it beats
    least; fail: the one it loses to worst), or the worst seed's own reason where no comparison
    shows it or the item was not judged (invalid-setup: why the evidence is unusable leads)."""
    bad = (
        [s for s, r in per_seed.items() if r["status"] == status]
        if status != Status.PASS
        else list(per_seed)
    )
    seeds = (margin or {}).get("per_seed", {})
    ranked = sorted(bad, key=lambda s: _low(seeds.get(str(s), {"value": None})))
    worst = ranked[0] if ranked else None
    m = seeds.get(str(worst)) if worst is not None else None
    tag = f", seed {worst}" if len(per_seed) > 1 else ""
    # not judged: its own reason leads (a comparison it lost is not what decided it)
    if (
        m
        and m["versus"]
        and status != Status.INVALID_SETUP
        and (status == Status.PASS or _low(m) <= 0)
    ):
        return margin_phrase(m) + (
            tag if status != Status.PASS else f" (worst seed {worst})" if tag else ""
        )
    if worst is None:
        return ""
    r = per_seed[worst]
    return (r.get("short") or r.get("why", "")) + tag


def _mean(values) -> float | None:
    v = [x for x in values if isinstance(x, (int, float)) and x == x]
    return sum(v) / len(v) if v else None


def spread_margin(spreads: dict, figure: str, versus: str | None = None) -> dict:
    """`Verdict.margin` of a spread item (`seed_variance.judge_spread` results keyed by what was
    spread).

    Given `versus` (draw_variance: one spread per seed, against that comparison): each seed's mean
    margin over its draws with the t-CI. Without (seed_variance: one spread per item): the deciding
    item's (lowest mean-margin CI lower bound) per-seed margins, and their mean with the t-CI as
    ``pooled``."""

    def entry(f, versus, value=None, ci=None, status=None):
        return {"value": value, "ci": ci, "versus": versus, "status": status or f["judged"]}

    if versus:
        return {
            "figure": figure,
            "bar": 0.0,
            "per_seed": {
                str(u): entry(f, versus, _mean(f["margin"].values()), list(f["mean_margin_ci"]))
                for u, f in spreads.items()
            },
        }
    name = min(spreads, key=lambda n: _low({"ci": spreads[n]["mean_margin_ci"], "value": None}))
    f = spreads[name]
    return {
        "figure": figure,
        "bar": 0.0,
        "per_seed": {
            str(s): entry(f, name, m, None, str(f["status"][s])) for s, m in f["margin"].items()
        },
        "pooled": entry(f, name, _mean(f["margin"].values()), list(f["mean_margin_ci"])),
    }


def spread_short(spreads: dict, label: Callable[[object], str]) -> str:
    """A spread item in one line: the first problem of the spread that decides it (one that could
    not be judged before one that failed: an unjudged item is what makes the verdict
    invalid-setup), or its lowest mean-margin CI when it holds."""
    order = {Status.INVALID_SETUP: 0, Status.FAIL: 1}
    for u in sorted(spreads, key=lambda u: order.get(spreads[u].get("judged"), 2)):
        f = spreads[u]
        if f.get("problems"):
            return f"{label(u)}: {f['problems'][0]}"
    u = min(spreads, key=lambda n: _low({"ci": spreads[n]["mean_margin_ci"], "value": None}))
    lo, hi = spreads[u]["mean_margin_ci"]
    return f"lowest mean margin CI [{num(lo)}, {num(hi)}] ({label(u)})"
