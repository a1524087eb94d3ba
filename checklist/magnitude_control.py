"""Checklist item 1 — magnitude control (reference pitfall P1).

The question: does the method predict what taught the behavior better than gradient size and the
other target-free controls? It has two views (issue 48; `_base.VIEWS`).

**The question** (issue 61: one question per item, each with its own comparison): *does the
method predict what taught the behavior better than every score it could have without the target
or the gradient's direction — the advantage, the gradient's size and the reply's text?*

**The causal view** (gating by default). The truth is the replayed counterfactual on the stream:
the LDS that `counterfactual` measures (its per-seed measurement is shared, not recomputed). The
comparison is this item's alone: on every seed, the 95% CI of LDS(estimator) − LDS(control) over
the same subset resamples lies above 0 for every target-free control (advantage, signed_norm,
norm_only) and the surface baseline. `counterfactual` asks only whether the LDS lies above 0 (it
reports these controls' LDS, it does not judge them), and `headroom` how much of the room between
the strongest of them and the ideal the method takes; until issue 61 `counterfactual` also made
this paired comparison, and the two columns could not disagree.
The margin that seed_variance spreads is the share of the room the method takes: (LDS − the
strongest control's LDS) ÷ (the ceiling's LDS − the strongest control's),
the ceiling being `metagrad` on the same subsets; NaN where the controls leave no room. Not the raw
LDS difference: the controls' LDS moves from seed to seed (−0.36 to 0.55 on one smoke build) while
the ceiling's stays at 1.0, so the raw difference spreads with the fixture, not the method, and its
3-seed t-interval held 0 for the exact ideal itself ([−0.12, 1.56] on a smoke build where it beat
every control on every seed by paired CI). In units of the room, the ideal's margin is 1 on every
seed by construction where the controls leave room and the ceiling exists; the unit still moves
with the seed's strongest control, so it removes that control's level from the spread, not its
effect on the scale. A seed without room or ceiling has a NaN margin, and seed_variance does not
judge the spread there (invalid-setup).

**The reference view** (the planted labels; the rule the reference's P1 asked, kept unchanged).
Rule, on every seed, on the real training rollouts scored against the planted GT: the estimator's
precision@|GT| must exceed that of EACH target-free control (`behaviortrace.checklist.controls`: the
advantage A, the signed update size A·‖e‖, the reference's norm-only |A|·‖e‖, and the surface
baseline 1[reply shows the behavior] × sign(A), which reads the reply's text), with the 95% paired
cluster-bootstrap CI of the difference (steps resampled, `N_BOOT` resamples) above 0 — at rollout
level and at step level. Every estimator is judged at both levels: one without a step level is
judged on its rollout scores summed per step, one without a rollout level on its step scores
broadcast to the rollouts (`_common.level_scores`). A comparison is judged only where the level
leaves room above the control: the ceiling ranking itself (rollouts ordered by their label at
rollout level; steps by their GT share at step level, all rollouts of a step tied) must beat the
control by the same paired-bootstrap rule.
Where even the ceiling cannot, no method can, and the comparison is reported ("n/a: no room above
it" — the P1/P2 situation of a control at or near the ceiling), not judged. Reported beside it, per
seed and level: precision, lift, chance and ceiling (the reference's tables).

Why the surface baseline gates here, and not in `fluency_control` (issue 61 asked which). The
stream's GT is visible in the text (an early, rewarded reply that shows the behavior): "behavior
string present × sign(A)", with no gradient and no target, reaches lift 11–12× at rollout level on
the default fixture, above every gradient method. It is a score of the training rollouts built from
what the trainer logged — the reply and the sign of its advantage — so it is one more target-free
reading of the stream, of the same kind as the advantage (whose sign it carries) and the gradient's
size, and it is compared with the method in the same unit (the LDS, paired over the same
resamples). Kept here, each view of this item asks one question of the same set of readings; moved
to a stream clause of `fluency_control`, that item would ask two unrelated things (the draws'
fluency confound, among siblings that share a prompt and an advantage, and a stream comparison no
draw figure enters) and its reason could not name one comparison. `fluency_control` keeps the text
where the text is its confound: on draws, where it gates on the surface baseline against the causal
label. A method that does not rank the planted cause better than that reading of the reply has not
shown attribution on this item (the product's rule: every item is judged against the strongest
control a method could have without the target or the gradient — the advantage, the gradient's
size, the reply's text). On draws the surface baseline is the reference's label itself and cannot
gate there (nothing beats it); `fluency_control` reports it. A smarter text heuristic (trigger
∧ behavior ∧ rewarded, earliest first) comes close to the ceiling on this fixture: label-scored
items cannot tell such reading from attribution, which is why the causal check scores methods
against retraining.

Rationale: with std-normalized advantages a step's gradient size tracks how many groups had reward
variance, which the contamination creates, so ‖gradient‖ alone "finds" the contaminated steps; and
the advantage itself carries the planted +8 reward (A alone reaches precision 0.93–0.97 at rollout
level on the default fixture). A targeted method that cannot beat what it would score without its
target has shown nothing about the target.

Resamples: `N_BOOT` = 10,000. The decision is the sign of the 2.5th percentile of the resampled
difference; with B resamples that percentile rests on its 0.025·B-th order statistic (5 at the old
B = 200, so a close call flipped with the bootstrap seed). At 10,000 it rests on the 250th, and its
Monte Carlo error (≈ √(0.025·0.975/B) in probability, 0.0016) is small beside the CI itself: a test
reruns a borderline case under 5 bootstrap seeds and the verdict holds (`tests/test_bootstrap.py`).
The vectorized bootstrap (`bt_core.metrics.precision_resamples`) makes that affordable: one resample
matrix per seed is shared by the estimator, every control and the surface baseline.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bt_core.attribution.evidence import Evidence
from bt_core.attribution.registry import EstimatorSpec
from bt_core.metrics import (
    ceiling_precision,
    chance,
    percentile_ci,
    precision_at_k,
    precision_resamples,
    resample_counts,
)
from bt_core.reporting import present as pr
from bt_core.reporting.scorecard import Status, Verdict, clean

from . import controls, counterfactual
from ._base import CAUSAL, REFERENCE, Item, fmt
from ._common import level_scores, seed_verdict
from ._memo import memo

NAME = "magnitude_control"
TITLE = (
    "beats every target-free control (advantage, signed and unsigned gradient size, reply text): "
    "on the replayed truth (causal view), or at both levels on the planted labels (reference)"
)
HEADLINE = "lift"  # figure compared against a baseline scorecard (--scorecard-compare)
HEADLINES = {CAUSAL: "causal_lds", REFERENCE: HEADLINE}  # the headline figure per view
N_BOOT = 10_000  # paired cluster-bootstrap resamples (see the module docstring)
_PACKAGE = Path(__file__).resolve().parent  # the checklist's source, in the kept arrays' key
ALPHA = 0.05  # two-sided; the CI's lower bound of (estimator − control) must exceed 0
LEVELS = ("rollout", "step")
MARGIN = "Δ precision@|GT| over the control (paired bootstrap 95% CI)"
CAUSAL_MARGIN = "Δ LDS over the control (paired bootstrap 95% CI over subsets)"


def _setup(evidence: Evidence, seed: int) -> dict:
    """Labels, resample multiplicities (steps as clusters) and the ceilings of a seed (memoized)."""

    def run() -> dict:
        pr, ps = evidence.stream_problem(seed, "rollout"), evidence.stream_problem(seed, "step")
        labels = np.asarray(evidence.labels(pr), bool)
        inv, counts = resample_counts(pr.step, N_BOOT, seed)
        return {
            "labels": labels,
            "inv": inv,
            "counts": counts,
            "chance": chance(labels),
            "ceiling": {"rollout": 1.0, "step": ceiling_precision(ps.unit_of_rollout, labels)},
        }

    return memo(evidence, ("magnitude-setup", seed), run)


def _resampled(evidence: Evidence, seed: int, key: tuple, scores: np.ndarray) -> np.ndarray:
    s = _setup(evidence, seed)

    def compute() -> np.ndarray:
        return precision_resamples(scores, s["labels"], s["inv"], s["counts"])

    if key[0] not in ("control", "ceiling"):  # the judged estimator's: computed every session
        return memo(evidence, ("magnitude-resampled", seed, *key), compute)
    # target-free rankings, the same in every session: kept in the artifact cache (keyed by the
    # seed's artifacts and the code of bt_core and of this package)
    return memo(
        evidence,
        ("magnitude-resampled", seed, *key),
        lambda: evidence.kept_array(
            seed, ("magnitude-resampled", *key, N_BOOT), compute, sources=(_PACKAGE,)
        ),
    )


def _ceiling_boot(evidence: Evidence, seed: int, level: str) -> np.ndarray:
    """Resampled precision of the ceiling ranking: the labels (rollout level) or each step's GT
    share."""
    s = _setup(evidence, seed)
    if level == "rollout":
        best = s["labels"].astype(float)
    else:
        ps = evidence.stream_problem(seed, "step")
        best = ps.to_rollouts(evidence.truth(ps))
    return _resampled(evidence, seed, ("ceiling", level), best)


def _versus(
    prec: float, boot: np.ndarray, other: np.ndarray, other_boot: np.ndarray, labels, ch: float
) -> dict:
    p = precision_at_k(other, labels)
    lo, hi = percentile_ci(boot - other_boot, ALPHA)
    return {
        "precision": p,
        "lift": p / ch,
        "diff": prec - p,
        "ci_lo": lo,
        "ci_hi": hi,
        "beats": bool(lo > 0),
    }


def level_figures(spec: EstimatorSpec, evidence: Evidence, seed: int, level: str) -> dict:
    s = _setup(evidence, seed)
    labels, ch, ceil = s["labels"], s["chance"], s["ceiling"][level]
    est, how = level_scores(spec, evidence, seed, level)
    prec = precision_at_k(est, labels)
    boot = _resampled(evidence, seed, ("estimator", spec.key, level), est)
    vs = {}
    for name in (*controls.CONTROL_NAMES, controls.SURFACE):
        other = controls.stream_scores(evidence, seed, level, name)
        vs[name] = _versus(
            prec,
            boot,
            other,
            _resampled(evidence, seed, ("control", name, level), other),
            labels,
            ch,
        )
    top = _ceiling_boot(evidence, seed, level)
    for name, c in vs.items():
        other = _resampled(evidence, seed, ("control", name, level), None)
        c["room_ci_lo"] = percentile_ci(top - other, ALPHA)[0]
        c["judged"] = bool(ceil - c["precision"] > 1e-9 and c["room_ci_lo"] > 0)
    strongest = max(vs, key=lambda n: vs[n]["precision"])
    return {
        "precision": prec,
        "lift": prec / ch,
        "scores": how,
        "chance": ch,
        "ceiling": ceil,
        "ceiling_lift": ceil / ch,
        "controls": vs,
        "strongest_control": strongest,
        "control_lift": vs[strongest]["lift"],
        "surface": vs[controls.SURFACE],
    }


def _level_why(level: str, f: dict) -> str:
    parts = ", ".join(
        f"{n} {fmt(c['lift'])}×" + ("" if c["judged"] else " (n/a: no room above it)")
        for n, c in f["controls"].items()
    )
    lost = [n for n, c in f["controls"].items() if c["judged"] and not c["beats"]]
    worst = min(f["controls"].values(), key=lambda c: c["ci_lo"] if c["judged"] else np.inf)
    verdict = f"FAILS vs {', '.join(lost)}" if lost else "beats every control"
    return (
        f"{level} lift {fmt(f['lift'])}× ({f['scores']}) vs {parts}; min Δprecision CI lower "
        f"{fmt(worst['ci_lo'])}: {verdict}"
    )


def _causal_view(spec: EstimatorSpec, evidence: Evidence, seed: int) -> dict:
    """The seed's verdict in the causal view: the paired bootstrap CI of LDS(estimator) −
    LDS(control), over the same subset resamples, against every target-free control and the surface
    baseline (module docstring). The LDS is `counterfactual`'s measurement (shared, not recomputed);
    the comparison is this item's own."""
    nan = float("nan")
    bad = counterfactual.unjudged(evidence, seed)
    if bad is not None:
        return {**bad, "margin": nan, "chance_margin": nan, "versus": {}}
    e = counterfactual.estimator_lds(spec, evidence, seed)
    if e["lds"] != e["lds"]:  # a constant prediction: no LDS, nothing to compare
        return {
            "causal_lds": nan,
            "status": Status.FAIL,
            "why": counterfactual.constant(e),
            "margin": nan,
            "chance_margin": nan,
            "versus": {},
        }
    base = counterfactual.baseline_figures(evidence, seed)
    names = counterfactual.BASELINES
    diffs = {n: percentile_ci(e["boot"] - base["boot"][i], ALPHA) for i, n in enumerate(names)}
    vs = {n: {"value": e["lds"] - base["lds"][n], "ci": list(diffs[n])} for n in names}
    lost = [n for n in names if not diffs[n][0] > 0]
    best = float(np.nanmax([base["lds"][n] for n in names]))  # the strongest control's LDS
    room = base["ceiling"] - best
    return {
        "causal_lds": e["lds"],
        "versus": vs,
        "diff_ci": {n: list(d) for n, d in diffs.items()},
        "status": Status.FAIL if lost else Status.PASS,
        # the share of the room between the strongest control and the ceiling that the method
        # takes (seed_variance spreads it; module docstring, "The causal view")
        "margin": (e["lds"] - best) / room if room > 0 else nan,
        "room": room,
        "chance_margin": e["lds"],
        "why": (
            f"LDS {fmt(e['lds'])} on the replayed truth vs "
            + ", ".join(f"{n} {fmt(base['lds'][n])}" for n in names)
            + (
                f": not beaten (paired CI of the difference): {', '.join(lost)}"
                if lost
                else ": beats every control (paired CI of the difference above 0)"
            )
        ),
        "short": f"not beaten on replayed truth: {', '.join(lost)}" if lost else "",
    }


def evaluate_seed(spec: EstimatorSpec, evidence: Evidence, seed: int, draw: int = 0) -> dict:
    """The seed's planted-label figures and its verdict in both views (``views``)."""
    r = reference_seed(spec, evidence, seed)
    r["views"][CAUSAL] = _causal_view(spec, evidence, seed)
    return r


def reference_seed(spec: EstimatorSpec, evidence: Evidence, seed: int) -> dict:
    """The planted-label figures and the reference view's verdict alone (no replay is read)."""
    r = level_figures(spec, evidence, seed, "rollout")
    r["step"] = level_figures(spec, evidence, seed, "step")
    judged = [c for f in (r, r["step"]) for c in f["controls"].values() if c["judged"]]
    ok = all(c["beats"] for c in judged)
    reference = {
        "status": Status.PASS if ok else Status.FAIL,
        "margin": min((c["diff"] for c in judged), default=float("nan")),
        "versus": {
            f"{n} ({lv})": {"value": c["diff"], "ci": [c["ci_lo"], c["ci_hi"]]}
            for lv, f in zip(LEVELS, (r, r["step"]), strict=True)
            for n, c in f["controls"].items()
            if c["judged"]
        },
        "chance_margin": r["precision"] - r["chance"],
        "why": f"{_level_why('rollout', r)}. {_level_why('step', r['step'])}",
    }
    return {**r, "views": {REFERENCE: reference}}


def evaluate(spec: EstimatorSpec, evidence: Evidence, view: str = CAUSAL) -> Verdict:
    return seed_verdict(
        NAME,
        evaluate_seed,
        spec,
        evidence,
        headline=HEADLINES,
        margin={CAUSAL: CAUSAL_MARGIN, REFERENCE: MARGIN}[view],
        view=view,
        extra={
            "n_boot": N_BOOT,
            "alpha": ALPHA,
            "controls": {
                c.name: {"rollout": c.rollout_rule, "step": c.step_rule} for c in controls.CONTROLS
            },
        },
    )


LIFT = "lift: precision@|GT| ÷ chance"
LIFT_CAPTION = (
    "The planted labels' view (reference). Each marker is one seed (colour and shape = seed) of an "
    "estimator's precision among its top |GT| rollouts divided by chance, at rollout level (left) "
    "and step level (right). The grey band holds the target-free controls and the surface baseline "
    "that decide magnitude_control in the reference view: a method passes it only where it sits "
    "above every one of them on every seed (the paired CI decides). In the causal view the same "
    "controls are compared on the replayed truth instead: the LDS figure. Dashed: chance (1×); "
    "dotted, in the seed's colour: that seed's ceiling."
)
# the planted labels' figures: magnitude_control's causal view is drawn by its margin figure and
# counterfactual's LDS figure (the same replayed truth), so this section names its view
SECTION = {"title": "Lift beside the controls (planted labels: the reference view)"}
SURFACE_NOTE = (
    "The surface baseline reads only the reply text and the advantage: 1 if the reply contains the "
    "behavior token × sign(A); on draws it is the behavior flag, i.e. the label. A method that "
    "does not beat it on the stream has not shown more than text matching of the rewarded behavior "
    "and fails magnitude_control (in either view: on the planted labels or on the replayed truth); "
    "on draws it is the behavior label, beaten only on the causal label."
)


def _at(f: dict, level: str) -> dict:
    return f if level == "rollout" else f.get("step") or {}


def _lift_panels(seeds: list[str], rows: dict, dots: list[dict], ceiling: dict) -> list[dict]:
    """The lift tables (`rows`: {level: rows}) and figure (`ceiling`: {level: {seed: lift}})."""
    title = "{}-level lift (precision@|GT| ÷ chance; planted labels, reference view)"
    tables = [
        pr.table(
            f"lift-{lv}",
            "lift",
            title.format(lv.capitalize()),
            pr.seed_columns("lift", seeds),
            rows[lv],
        )
        for lv in LEVELS
    ]
    axes = [
        pr.axis(
            LIFT,
            f"{lv} level",
            [pr.line(1.0), *(pr.line(c, "dotted", s) for s, c in ceiling[lv].items())],
        )
        for lv in LEVELS
    ]
    figure = pr.dots(
        "lift",
        "lift",
        "Lift per estimator and seed, beside the controls",
        LIFT_CAPTION,
        axes,
        dots,
        wide=True,
        band_label="target-free controls",
    )
    return [*tables, figure]


def present(rec: dict) -> dict:
    """The estimator's lift per seed at both levels: a row of each lift table, a figure category."""
    per = pr.per_seed(rec)
    if not per:
        return {}
    seeds = list(per)
    lift = {lv: {s: _at(per[s], lv).get("lift") for s in seeds} for lv in LEVELS}
    rows = {lv: [[pr.estimator_label(rec), *map(pr.cell, lift[lv].values())]] for lv in LEVELS}
    dot = pr.dot_row(
        rec["estimator"], [{s: pr.point(v) for s, v in lift[lv].items()} for lv in LEVELS]
    )
    # a built-in control judged as an estimator (norm_only) is already drawn in the controls' band
    # (`present_controls`): one row of dots, not two of the same scores (issue 39)
    spec = rec.get("estimator_spec") or {}
    drawn = (
        rec["estimator"] in controls.CONTROL_NAMES and spec.get("origin", "builtin") == "builtin"
    )
    ceiling = {lv: {s: _at(per[s], lv).get("ceiling_lift") for s in seeds} for lv in LEVELS}
    return pr.presentation(
        *_lift_panels(seeds, rows, [] if drawn else [dot], ceiling), sections={"lift": SECTION}
    )


def present_controls(baselines: dict) -> dict:
    """The scorecard's own presentation (of `controls.baselines`): the rows of the controls, the
    surface baseline, chance and the ceiling in the lift tables and figure — shown even where no
    estimator was judged — and the section's note, which says what each control is."""
    baselines = clean(baselines)  # the JSON's form: seeds as strings, NaN as None
    base = baselines.get("per_seed") or {}
    seeds = list(base)
    if not seeds:
        return {}
    get = lambda s, lv, *keys: pr.dig(base[s].get(lv), *keys)  # noqa: E731
    names = [*baselines.get("controls", {}), controls.SURFACE]
    shown = {n: "surface baseline" if n == controls.SURFACE else f"control: {n}" for n in names}
    drawn = {n: "surface baseline" if n == controls.SURFACE else f"{n} (control)" for n in names}
    rows = {
        lv: [[shown[n], *(pr.cell(get(s, lv, n, "lift")) for s in seeds)] for n in names]
        + [
            ["chance (precision)", *(pr.cell(get(s, lv, "chance")) for s in seeds)],
            ["ceiling (lift)", *(pr.cell(get(s, lv, "ceiling_lift")) for s in seeds)],
        ]
        for lv in LEVELS
    }
    dots = [
        pr.dot_row(
            drawn[n],
            [{s: pr.point(get(s, lv, n, "lift")) for s in seeds} for lv in LEVELS],
            band=True,
        )
        for n in names
    ]
    ceiling = {lv: {s: get(s, lv, "ceiling_lift") for s in seeds} for lv in LEVELS}
    note = "; ".join(
        f"{n} = {c.get('rollout')} (step: {c.get('step')})"
        for n, c in (baselines.get("controls") or {}).items()
    )
    section = {**SECTION, "note": f"Controls: {note}. {SURFACE_NOTE}"}
    return pr.presentation(*_lift_panels(seeds, rows, dots, ceiling), sections={"lift": section})


ITEM = Item(
    NAME,
    TITLE,
    "estimator",
    evaluate,
    reference="P1",
    headline=HEADLINES,
    present=present,
    views=(CAUSAL, REFERENCE),
)
