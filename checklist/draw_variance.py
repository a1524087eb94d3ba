"""Checklist item 6b — generation-draw variance (reference finding P6).

Rule, on every seed, over the seeded generation draws at the analysis checkpoint (≥ 2 draws needed
to judge; the default scale has 5), with the fluency control's per-draw figures (`fluency_control`):

1. the fluency-control verdict holds on every draw, in the view judged: the causal view on the
   causal label (each sibling's one-step effect), the reference view on the reference's behavior
   flag (`fluency_control` says what each tests and why a text reader passes the second and not the
   first); the two labels are never AND-ed (issue 48);
2. the spread is judged: the 95% Student-t CI of the across-draw mean margin (fluency_control's
   margin in the view: residualized AUC − max(0.5, norm-only's residualized AUC) in the reference
   view, that difference's share of the room up to 1 in the causal view) lies above 0;
3. no draw sits at or below chance (residualized AUC > 0.5 on every draw, on the view's label).

An invalid-setup draw stays invalid-setup (never fail). Reported: the residualized AUC per draw and
its spread per seed — the reference saw 0.486, 0.446, 0.624, 0.526, 0.629 across five draws of one
seed, and the verdict flipped.
"""

from __future__ import annotations

from bt_core.attribution.evidence import EstimatorFailure, Evidence
from bt_core.attribution.registry import EstimatorSpec
from bt_core.reporting import present as pr
from bt_core.reporting.scorecard import Status, Verdict, worst_status

from . import fluency_control
from ._base import CAUSAL, REFERENCE, Item, failure_verdict, fmt, spec_record, spread
from ._common import in_view, judged, seed_results, spread_margin, spread_short
from .seed_variance import judge_spread

NAME = "draw_variance"
TITLE = (
    "fluency-control verdict holds on every draw, and the across-draw mean clears the bar with "
    "its spread"
)
MIN_DRAWS = 2


def evaluate(spec: EstimatorSpec, evidence: Evidence, view: str = CAUSAL) -> Verdict:
    return judged(NAME, spec, evidence, lambda: _evaluate(spec, evidence, view))


def _evaluate(spec: EstimatorSpec, evidence: Evidence, view: str) -> Verdict:
    rec = spec_record(spec, evidence)
    n_draws = min(len(a.draws) for a in evidence.artifacts.values())
    if n_draws < MIN_DRAWS:
        return Verdict(
            NAME,
            spec.name,
            Status.INVALID_SETUP,
            f"{n_draws} draw(s) per seed; needs ≥ {MIN_DRAWS}",
            {},
            rec,
        )
    per_draw = {}
    try:
        for d in range(n_draws):
            per_draw[d] = seed_results(
                fluency_control.NAME, fluency_control.evaluate_seed, spec, evidence, draw=d
            )
    except EstimatorFailure as e:
        return failure_verdict(NAME, spec, evidence, e)
    per_seed = {}
    for s in evidence.seeds:
        rows = {d: in_view(per_draw[d][s], view) for d in range(n_draws)}
        f = judge_spread(
            {d: r["status"] for d, r in rows.items()},
            {d: r["margin"] for d, r in rows.items()},
            {d: r["chance_margin"] for d, r in rows.items()},
            unit="draw",
        )
        # why each failed draw failed, in fluency_control's words (which clause), inside the line
        # the grid shows: "does not hold on draw 2" alone leaves a reader, and a campaign whose
        # caches are gone, guessing. A failed spread's first problem is that line (judge_spread)
        why = {
            d: r["short"] for d, r in rows.items() if r["status"] == Status.FAIL and r.get("short")
        }
        if why and f["judged"] == Status.FAIL:
            each = (
                list(why.values()) if len(why) == 1 else [f"draw {d}: {w}" for d, w in why.items()]
            )
            f["problems"][0] += " — " + "; ".join(each)
        auc = {d: r["auc"] for d, r in rows.items()}
        causal = {d: r[fluency_control.CAUSAL]["auc"] for d, r in rows.items()}
        per_seed[s] = {
            **f,
            "auc": auc,
            "auc_spread": spread(list(auc.values())),
            "causal_auc": causal,
            "causal_auc_spread": spread(list(causal.values())),
            "reference_status": {d: r["reference_status"] for d, r in rows.items()},
        }
    key = "causal_auc" if view == CAUSAL else "auc"
    all_auc = [a for f in per_seed.values() for a in f[key].values() if a == a]
    figures = {
        "per_seed": per_seed,
        "n_draws": n_draws,
        "headline": {
            "figure": f"min {'causal ' if view == CAUSAL else ''}AUC over seeds and draws",
            "value": min(all_auc) if all_auc else None,
        },
    }

    def line(s, f):
        rng = (
            f"AUC {fmt(f['auc_spread']['min'])}–{fmt(f['auc_spread']['max'])}, causal "
            f"{fmt(f['causal_auc_spread']['min'])}–{fmt(f['causal_auc_spread']['max'])}"
        )
        ci = f"mean margin CI [{fmt(f['mean_margin_ci'][0])}, {fmt(f['mean_margin_ci'][1])}]"
        return f"seed {s}: {rng}, {ci}" + (
            f" — {'; '.join(f['problems'])}" if f["problems"] else ""
        )

    summary = "; ".join(line(s, f) for s, f in per_seed.items())
    judgements = {f["judged"] for f in per_seed.values()}
    shown = (
        spread_short(per_seed, lambda s: f"seed {s} draws"),
        spread_margin(
            per_seed,
            "mean fluency-control margin over draws (t 95% CI)",
            "max(0.5, norm_only)" if view == REFERENCE else "max(0.5, norm_only), share of room",
        ),
    )
    status = worst_status(judgements)
    if status is Status.INVALID_SETUP:
        return Verdict(
            NAME,
            spec.name,
            Status.INVALID_SETUP,
            f"unusable draws — {summary}",
            figures,
            rec,
            *shown,
        )
    if status is Status.FAIL:
        return Verdict(NAME, spec.name, Status.FAIL, summary, figures, rec, *shown)
    return Verdict(
        NAME,
        spec.name,
        Status.PASS,
        f"holds on all {n_draws} draws of every seed — {summary}",
        figures,
        rec,
        *shown,
    )


def present(rec: dict) -> dict:
    """The AUC of the draws other than 0, as hollow markers beside the estimator's draw-0 AUC in
    fluency_control's figure (where that estimator has a category)."""
    per = pr.per_seed(rec)
    key = "causal_auc" if rec.get("view") == CAUSAL else "auc"  # the view's label, as in the figure
    extra = {
        s: [a for d, a in (f.get(key) or {}).items() if str(d) != "0" and a is not None]
        for s, f in per.items()
    }
    if not any(extra.values()):
        return {}
    row = pr.dot_row(rec["estimator"], [{}], extra=[extra], join=True)
    return pr.presentation(pr.dots(fluency_control.FIGURE, "auc", "", "", [{}], [row]))


ITEM = Item(
    NAME, TITLE, "estimator", evaluate, reference="P6", present=present, views=(CAUSAL, REFERENCE)
)
