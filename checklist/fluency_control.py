"""Checklist item 5 — fluency control (reference pitfall P5).

Rule (the reference's pre-registered rollout-level pass rule), on every seed, on fresh sibling
groups sampled at the saturated checkpoint (draw 0): after residualizing the scores on fluency
within groups (pooled linear slope), the within-group AUC for behavior vs non-behavior siblings must
have a cluster-bootstrap 95% CI lower bound > 0.5, a CI width ≤ 0.15, and exceed the norm-only
control's residualized AUC (on draws every sibling has weight 1, so norm-only is the only
target-free control that is not constant: `controls.DRAW_CONTROL`). And, before any residualization,
the estimator's within-group AUC must beat fluency's own — the strongest fluency-only score, since
every monotone function of fluency has the same within-group AUC (the better of fluency and its
negation is used) — by the paired rule: the 95% CI of AUC(estimator) − AUC(fluency), groups
resampled together, lies above 0.

Why both. The linear residualization removes only the part of a score that is linear in fluency: a
rank (or any nonlinear) transform of fluency survives it and can clear the residualized bar while
knowing nothing but fluency. Beating fluency's own AUC closes that door without assuming a
functional form; the residualized bar keeps the reference's pre-registered rule.

**A paired comparison the label itself cannot win is reported, not judged** (issue 64's finding;
`magnitude_control`'s rule for a control at the ceiling, applied here). On a draw where fluency
alone ranks the label almost perfectly within the mixed groups, the label itself (a perfect ranking,
AUC 1) does not beat fluency's AUC by the paired rule: nothing can, and the clause would fail every
method on that draw for a property of the draw. Measured on the committed smoke key's fixture as an
AMD EPYC machine builds it (2026-12-07): seed 5, draw 1, where the reference view's answer key (the
behavior flag) failed "does not beat fluency itself" while the same key built on the machine of the
earlier sessions passed it (the fixture's bytes depend on the CPU's floating point). So each paired
comparison (fluency itself; the surface baseline in the causal view) is judged only where the label
beats it (`room_above`); otherwise the line says "n/a: the label itself does not beat it" and the
comparison is left out of the seed's `versus`. The other clauses are unchanged: a draw without room
above fluency still needs the residualized AUC's CI above 0.5 and above norm-only's, which a linear
score of fluency does not reach (residualization removes it). A nonlinear transform of fluency can
pass such a draw: there fluency ranks the label as well as the label itself, and nothing on that
draw can tell it from a method. It is still judged on every other draw and seed, where the paired
clause holds (the adversary `fluency_rank` fails the item, `tests/test_meta.py`), and a pass needs
every draw of every seed.

Reported beside it: fluency-matched pairs (|Δfluency| ≤ 0.10 nats; judged by nobody, shown when ≥ 30
pairs), a nonlinear control (residualizing on quantile bins of fluency) and the surface baseline's
residualized AUC — on draws it is the behavior flag, the reference's label itself, so nothing beats
it there (see `controls`); hence the second label below.

Rationale: at a saturated checkpoint (most samples show the behavior) behavior replies are the
model's most fluent ones, so fluency alone predicts the label (reference AUC 0.72–0.80, at or above
every gradient method). Only signal that survives the fluency control is attribution. A checkpoint
that is not saturated (sampled behavior rate < 0.8) or has no mixed group cannot test this:
invalid-setup. The mixed-group check reads only the labels and runs before the estimator is asked,
so a draw where no group mixes either label is invalid for every estimator alike (a constant score
is then no defect); where only the causal label mixes, the estimator is asked and the reference view
alone is invalid-setup.

**Two labels, one per view** (issue 21, req. 7; issue 48). The bar below was written, with its
reasons, before any estimator was scored against the causal label, and is not moved. The causal
view (`_base.CAUSAL`, gating by default) judges the causal label alone; the reference view
(`_base.REFERENCE`) judges the behavior flag alone, as the reference did. The two labels can part:
on some seeds they are nearly unrelated (`cosine`: AUC 1.000 on the flag, 0.491 on the causal label
on one default build), so a rule that required both (the rule before issue 48) could be passed on
one build and not on the next by no fault of the method.

Against the causal label the same pre-registered readout applies, unchanged and for the same reasons
— residualized within-group AUC with CI lower bound > 0.5 and width ≤ 0.15, above norm-only's, and
the raw AUC beating fluency's own (better direction) by the paired rule — plus one comparison that
only this label makes possible: **the raw AUC must beat the surface baseline's** (its better
direction) by the same paired rule (95% CI of AUC(estimator) − AUC(surface), groups resampled
together, above 0). On the reference label the surface baseline *is* the label, so nothing could
beat it and it is only reported; on the causal label it is the strongest reading of the text, as on
the stream, where magnitude_control gates on it for the same reason: a method that is right only
where the text is right has shown the text, not the cause. A draw with no group whose siblings'
effects differ in sign cannot test the causal view, and one with no group mixing the behavior flag
cannot test the reference view: that view is invalid-setup; an unsaturated checkpoint is
invalid-setup in both. The estimator is asked whenever either label mixes. Each view has its own
``margin`` and ``chance_margin`` (read by draw_variance and seed_variance in the same view).

**Why ranks in the causal view** (issue 48; fixed from `metagrad`'s figures, fluency's and the
reasoning below, before any other estimator was scored under it). In the causal view the scores are
residualized through their within-group ranks (`bt_core.metrics.within_group_ranks`, each group's
order scaled to [0, 1]), then by the same pooled linear fit on fluency; every other clause is
unchanged, and the norm-only control and the surface baseline pass through the same transform. The
reason: the linear fit pools every group, so a score whose scale differs between groups (the
causal ideal's draw score is a one-step effect, heavy-tailed across groups) has its fit decided by
the few largest groups, and subtracting it reorders the others. On the committed smoke key, seed 0,
draw 0, `metagrad` ranks the causal label perfectly within every group (raw AUC 1.000; fluency
alone 0.575, its better direction) and its linearly residualized AUC is 0.736 [0.636, 0.837], CI
width 0.201 > 0.15: a fluency control that makes the exact ideal fail is measuring the score's
scale, not a fluency confound. Residualizing its ranks gives 0.990, and the fluency-matched pairs
(|Δfluency| ≤ 0.10, 99 pairs; no functional form at all) give 1.000. Over that key's 9 draws
(seeds 0, 2, 5) the linear form ranged 0.736–1.000 and the rank form 0.964–1.000, matched pairs
0.971–1.000. The within-group AUC itself only reads order, so the ranks keep what it reads. The
residualized clause is weaker against one kind of score: one that is mostly a function of fluency
plus a small signal has ranks that are a nonlinear function of fluency, which the linear fit does
not remove; such a score, like any monotone transform of fluency, is caught by the paired clause
(its raw AUC must beat fluency's own), not by this one. The reference view keeps the reference's
linear form on the raw scores, unchanged: the reference's GAS scores are cosines, bounded and on one
scale across groups, where a pooled fit is not decided by a few groups (not measured here).

**The causal view's margin** (read by seed_variance and draw_variance): the residualized AUC's share
of the room between its bar, max(0.5, norm-only's residualized AUC), and a perfect ranking:
(AUC − bar) / (1 − bar). Not AUC − bar, the reference view's margin: the norm-only control's causal
AUC moves from seed to seed with the fixture (0.808, 0.357 and 0.383 on the committed smoke key's
seeds 0, 2 and 5), so the difference spread with the control, and its 3-seed t-interval held 0 for
the exact ideal itself ([−0.05, 0.83], AUC 0.990, 0.980, 0.996). In units of the room the ideal's
margin is near 1 on every seed. The unit still moves with the seed's control (a drop of 0.05 AUC is
0.26 of the room at a bar of 0.808 and 0.10 at 0.5), and below the bar the share is unbounded: it
removes the control's level from the spread, not its effect on the scale. NaN where the bar is 1
(no room): seed_variance then does not judge the spread (invalid-setup).

Reported beside it, not judged: each method's within-group Spearman ρ with the effect itself (mean
over groups, cluster-bootstrap CI), the surface baseline's causal AUC, and the causal label's
positive rate.
"""

from __future__ import annotations

import numpy as np

from bt_core.attribution.evidence import Evidence
from bt_core.attribution.problem import AttributionProblem
from bt_core.attribution.registry import EstimatorSpec
from bt_core.config import SATURATION  # sampled behavior rate that makes a checkpoint "saturated"
from bt_core.metrics import (
    cluster_bootstrap_mean_ci,
    group_bootstrap_ci,
    matched_pair_auc,
    paired_group_auc_diff,
    residualize,
    residualize_bins,
    within_group_auc,
    within_group_ranks,
    within_group_spearman,
)
from bt_core.reporting import present as pr
from bt_core.reporting.scorecard import Status, Verdict

from . import controls
from ._base import CAUSAL, REFERENCE, Item, fmt
from ._common import seed_verdict

NAME = "fluency_control"
TITLE = (
    "survives the fluency control (residualized within-group AUC) and beats fluency's own "
    "AUC, on the causal label (causal view) or the behavior label (reference view)"
)
HEADLINE = "auc"  # figure compared against a baseline scorecard (--scorecard-compare)
HEADLINES = {CAUSAL: "causal_auc", REFERENCE: HEADLINE}  # the headline figure per view
CI_LOWER = 0.5  # CI lower bound must exceed this
CI_MAX_WIDTH = 0.15  # and the CI must be at most this wide
CALIPER = 0.10  # nats: fluency-matched pairs
MIN_MATCHED = 30  # matched-pair AUC is shown only when this many pairs exist
N_BOOT = 10_000  # cluster-bootstrap resamples of the AUC (groups resampled; vectorized)
CONTROL = controls.DRAW_CONTROL
MARGIN = "Δ within-group AUC (residualized; raw vs fluency itself) over the comparison"
# the causal label's figures: ``figures["per_seed"][s]["causal"]``


def auc_with_ci(scores: np.ndarray, labels: np.ndarray, groups: np.ndarray, seed: int) -> dict:
    auc, pairs = within_group_auc(scores, labels, groups)
    lo, hi = group_bootstrap_ci(scores, labels, groups, n_boot=N_BOOT, seed=seed)
    return {"auc": auc, "ci_lo": lo, "ci_hi": hi, "pairs": pairs}


def better_direction(
    x: np.ndarray, labels: np.ndarray, groups: np.ndarray
) -> tuple[np.ndarray, float]:
    """`x` or −`x`, whichever ranks `labels` better within groups, and that AUC (every monotone
    function of a score has its AUC or its complement's)."""
    x = np.asarray(x, float)
    auc = within_group_auc(x, labels, groups)[0]
    return (-x, 1.0 - auc) if auc < 0.5 else (x, auc)


def judge_label(
    raw: np.ndarray,
    labels: np.ndarray,
    p: AttributionProblem,
    ctrl: np.ndarray,
    surface: np.ndarray,
    seed: int,
    gate_surface: bool,
    ranks: bool = False,
) -> dict:
    """The readout of `raw` against one label (module docstring): figures, ``versus`` and
    ``problems`` (why it fails; empty when it passes). `gate_surface`: the surface baseline is one
    of the bars. `ranks`: residualize each score's within-group rank, not its value (the causal
    view; module docstring, "Why ranks in the causal view")."""
    g, flu = p.group, p.fluency

    def resid(x):
        return residualize(within_group_ranks(x, g) if ranks else x, flu, g)

    est = auc_with_ci(resid(raw), labels, g, seed)
    ctrl_auc, _ = within_group_auc(resid(ctrl), labels, g)
    surface_auc, _ = within_group_auc(resid(surface), labels, g)
    flu_dir, flu_auc = better_direction(flu, labels, g)
    vs_flu = paired_group_auc_diff(raw, flu_dir, labels, g, n_boot=N_BOOT, seed=seed)
    flu_room = room_above(flu_dir, labels, g, seed)
    versus = {
        f"AUC {CI_LOWER}": {
            "value": est["auc"] - CI_LOWER,
            "ci": [est["ci_lo"] - CI_LOWER, est["ci_hi"] - CI_LOWER],
        },
        CONTROL: {"value": est["auc"] - ctrl_auc, "ci": None},
    }
    if flu_room:
        versus["fluency itself"] = {
            "value": vs_flu["diff"],
            "ci": [vs_flu["ci_lo"], vs_flu["ci_hi"]],
        }
    out = {
        **est,
        "control_auc": ctrl_auc,
        "surface_auc": surface_auc,
        "fluency_auc": flu_auc,
        "vs_fluency": vs_flu,
        "fluency_judged": flu_room,  # False: the label itself does not beat fluency (reported)
        "raw_auc": within_group_auc(raw, labels, g)[0],
        "margin": est["auc"] - max(CI_LOWER, ctrl_auc),
        "chance_margin": est["auc"] - 0.5,
    }
    why = []
    if not est["ci_lo"] > CI_LOWER:
        why.append(f"CI lower ≤ {CI_LOWER}")
    if not est["ci_hi"] - est["ci_lo"] <= CI_MAX_WIDTH:
        why.append(f"CI width {fmt(est['ci_hi'] - est['ci_lo'])} > {CI_MAX_WIDTH}")
    if not est["auc"] > ctrl_auc:
        why.append(f"not above {CONTROL}")
    if flu_room and not vs_flu["ci_lo"] > 0:
        why.append("does not beat fluency itself")
    if gate_surface:
        surf_dir, surf_auc = better_direction(surface, labels, g)
        vs_s = paired_group_auc_diff(raw, surf_dir, labels, g, n_boot=N_BOOT, seed=seed)
        surf_room = room_above(surf_dir, labels, g, seed)
        out.update(surface_raw_auc=surf_auc, vs_surface=vs_s, surface_judged=surf_room)
        if surf_room:
            versus[controls.SURFACE] = {
                "value": vs_s["diff"],
                "ci": [vs_s["ci_lo"], vs_s["ci_hi"]],
            }
            if not vs_s["ci_lo"] > 0:
                why.append("does not beat the surface baseline")
    return {**out, "versus": versus, "problems": why}


def room_above(other: np.ndarray, labels: np.ndarray, groups: np.ndarray, seed: int) -> bool:
    """Whether the label itself, a perfect ranking, beats `other` by the paired rule (95% CI of the
    AUC difference above 0). Where even it does not, no ranking can, and the comparison with
    `other` is reported, not judged: `magnitude_control`'s rule for a control at the ceiling."""
    ceiling = np.asarray(labels, float)
    d = paired_group_auc_diff(ceiling, other, labels, groups, n_boot=N_BOOT, seed=seed)
    return bool(d["ci_lo"] > 0)


def _spearman(raw: np.ndarray, effect: np.ndarray, groups: np.ndarray, seed: int) -> dict:
    """Mean within-group Spearman ρ of the raw score with the effect over groups, with a
    cluster-bootstrap CI."""
    rho = within_group_spearman(raw, effect, groups)
    rho = rho[np.isfinite(rho)]
    lo, hi = cluster_bootstrap_mean_ci(rho, np.arange(rho.size), n_boot=N_BOOT, seed=seed)
    mean = float(rho.mean()) if rho.size else float("nan")
    return {"mean": mean, "ci": [lo, hi], "groups": int(rho.size)}


def _causal_half(raw, effect, p, ctrl, surface, seed) -> tuple[dict, Status]:
    causal = np.asarray(effect) > 0
    c = judge_label(raw, causal, p, ctrl, surface, seed, gate_surface=True, ranks=True)
    # the margin seed_variance and draw_variance spread, in units of the room between the bar and
    # a perfect ranking (module docstring, "The causal view's margin")
    bar = max(CI_LOWER, c["control_auc"])
    c["margin"] = (c["auc"] - bar) / (1.0 - bar) if bar < 1.0 else float("nan")
    c.update(spearman=_spearman(raw, effect, p.group, seed), positive_rate=float(np.mean(causal)))
    status = (
        Status.INVALID_SETUP if c["pairs"] == 0 else Status.FAIL if c["problems"] else Status.PASS
    )
    return c, status


UNMIXED = "no sibling group holds both behavior and non-behavior replies"
# a paired comparison the label itself does not win (`room_above`): reported, not judged
NO_ROOM = "; n/a: the label itself does not beat it"


def _mixes(labels: np.ndarray, groups: np.ndarray) -> bool:
    """Whether some sibling group holds both values of `labels` (reads only the labels)."""
    return within_group_auc(np.zeros(labels.size), labels, groups)[1] > 0


def evaluate_seed(spec: EstimatorSpec, evidence: Evidence, seed: int, draw: int = 0) -> dict:
    """The seed's figures under both labels, and its verdict in each view (``views``): the causal
    view judges the causal label alone, the reference view the behavior flag alone."""
    p = evidence.draw_problem(seed, draw)
    labels = evidence.labels(p)
    effect = evidence.effect(p)
    # with no sibling group mixing either label there is nothing to rank: the estimator is not
    # asked (its constant score — the label reader's, rightly — would fail the item as "ranks
    # nothing"); the figures below come out empty and the seed is invalid-setup like every other
    # estimator's
    mixed = _mixes(labels, p.group) or _mixes(np.asarray(effect) > 0, p.group)
    raw = evidence.scores(spec, p) if mixed else np.zeros(labels.size)
    ctrl = controls.draw_scores(evidence, seed, draw, CONTROL)
    surface = controls.draw_scores(evidence, seed, draw, controls.SURFACE)
    ref = judge_label(raw, labels, p, ctrl, surface, seed, gate_surface=False)
    cau, cau_status = _causal_half(raw, effect, p, ctrl, surface, seed)
    binned = auc_with_ci(residualize_bins(raw, p.fluency, p.group), labels, p.group, seed)
    m_auc, m_pairs = matched_pair_auc(raw, labels, p.group, p.fluency, CALIPER)
    probes = {q["step"]: q for q in evidence.artifacts[seed].run.probes}
    rate = probes[p.extra["analysis_step"]]["sampled_rate"]
    out = {
        **{k: v for k, v in ref.items() if k not in ("problems", "versus")},
        CAUSAL: {k: v for k, v in cau.items() if k != "problems"},
        "binned_auc": binned["auc"],
        "binned_ci": [binned["ci_lo"], binned["ci_hi"]],
        "matched_auc": m_auc if m_pairs >= MIN_MATCHED else None,
        "matched_pairs": m_pairs,
        "analysis_step": p.extra["analysis_step"],
        "sampled_rate": rate,
        "behavior_rate": float(np.mean(labels)),
        "draw": draw,
    }
    ref_head = (
        f"AUC {fmt(ref['auc'])} [{fmt(ref['ci_lo'])}, {fmt(ref['ci_hi'])}] vs {CONTROL} "
        f"{fmt(ref['control_auc'])}; raw AUC {fmt(ref['raw_auc'])} vs fluency's "
        f"{fmt(ref['fluency_auc'])} (Δ CI lower {fmt(ref['vs_fluency']['ci_lo'])}"
        f"{'' if ref['fluency_judged'] else NO_ROOM}); surface "
        f"{fmt(ref['surface_auc'])} (the label, reported)"
    )
    cau_head = (
        f"causal AUC {fmt(cau['auc'])} [{fmt(cau['ci_lo'])}, {fmt(cau['ci_hi'])}] vs {CONTROL} "
        f"{fmt(cau['control_auc'])}; raw AUC {fmt(cau['raw_auc'])} vs fluency's "
        f"{fmt(cau['fluency_auc'])} (Δ CI lower {fmt(cau['vs_fluency']['ci_lo'])}"
        f"{'' if cau['fluency_judged'] else NO_ROOM}), vs the "
        f"surface baseline's {fmt(cau['surface_raw_auc'])} (Δ CI lower "
        f"{fmt(cau['vs_surface']['ci_lo'])}{'' if cau['surface_judged'] else NO_ROOM}); "
        f"behavior-label AUC {fmt(ref['auc'])} (reported)"
    )
    unsaturated = (
        f"checkpoint {p.extra['analysis_step']} is not saturated "
        f"(sampled rate {fmt(rate)} < {SATURATION})"
    )

    def view(status, head, res, empty):
        entry = {
            "margin": res["margin"],
            "chance_margin": res["chance_margin"],
            "versus": res["versus"],
        }
        if rate < SATURATION:
            return {**entry, "status": Status.INVALID_SETUP, "why": unsaturated}
        if status is Status.INVALID_SETUP:
            return {**entry, "status": status, "why": empty}
        why = ", ".join(res["problems"])
        return {
            **entry,
            "status": status,
            "why": head + (" — " + why if why else ""),
            "short": why,
        }

    ref_status = (
        Status.INVALID_SETUP
        if ref["pairs"] == 0
        else Status.FAIL
        if ref["problems"]
        else Status.PASS
    )
    views = {
        CAUSAL: {
            **view(cau_status, cau_head, cau, "no sibling group holds effects of both signs"),
            "causal_auc": cau["auc"],
        },
        REFERENCE: view(ref_status, ref_head, ref, UNMIXED),
    }
    # the reference's rule alone (docs/fidelity.md's P6 row), under its old name
    return {**out, "reference_status": views[REFERENCE]["status"], "views": views}


def evaluate(spec: EstimatorSpec, evidence: Evidence, view: str = CAUSAL) -> Verdict:
    return seed_verdict(
        NAME,
        evaluate_seed,
        spec,
        evidence,
        headline=HEADLINES,
        margin=MARGIN,
        view=view,
        extra={
            "ci_lower": CI_LOWER,
            "ci_max_width": CI_MAX_WIDTH,
            "saturation": SATURATION,
            "n_boot": N_BOOT,
        },
    )


FIGURE = "auc"  # the figure's key: draw_variance adds each estimator's other draws to it
CAPTION = (
    "Filled markers: an estimator's within-group AUC on {label} (siblings of the same prompt), "
    "after removing what fluency explains, on draw 0 of each seed (colour and shape = seed), with "
    "its 95% cluster-bootstrap CI; hollow circles: the same on the other draws. The grey band "
    "holds the norm-only control and the surface baseline{surface}. Dashed: 0.5, no better than "
    "a coin within a group; a pass needs the CI above it. The {other} view's figures are in the "
    "table."
)
CAPTION_PARTS = {
    CAUSAL: {
        "label": "the causal label (each sibling's one-step effect)",
        "surface": " (the reply's text, which a pass must beat by the paired rule)",
        "other": "reference",
    },
    REFERENCE: {
        "label": "the behavior label",
        "surface": " (on draws it is the behavior label itself, so nothing beats it there)",
        "other": "causal",
    },
}
REFERENCES = (
    ("control_auc", f"control: {CONTROL}", f"{CONTROL} (control)"),  # figure, table, plot
    ("surface_auc", "surface baseline (the behavior text)", "surface baseline"),
)


def _label_figures(f: dict, view: str) -> tuple[dict, dict | None]:
    """(the figures of the view's label, the other label's) of one seed's record."""
    c = f.get(CAUSAL) if isinstance(f.get(CAUSAL), dict) else None
    if view == CAUSAL and c is not None:
        return c, f
    return f, c


def _cell(f: dict, view: str, show) -> str:
    """A table cell: the view's label's figure, then the other label's, named."""
    mine, other = _label_figures(f, view)
    if other is None:
        return show(mine)
    name = "behavior label" if view == CAUSAL else "causal"
    return f"{show(mine)} · {name} {show(other)}"


def present(rec: dict) -> dict:
    """The estimator's residualized AUC [CI] per seed (draw 0) on the label of the view its verdict
    is judged in — a row of the AUC table, a figure category — with the other label's beside it in
    the table, and the draw control's and the surface baseline's AUC as the shared rows."""
    per = pr.per_seed(rec)
    if not per:
        return {}
    view = rec.get("view") or REFERENCE
    seeds = list(per)
    lab = {s: _label_figures(per[s], view)[0] for s in seeds}
    auc = {s: (lab[s].get("auc"), lab[s].get("ci_lo"), lab[s].get("ci_hi")) for s in seeds}
    ci = lambda c: pr.ci_cell(c.get("auc"), c.get("ci_lo"), c.get("ci_hi"))  # noqa: E731
    row = [pr.estimator_label(rec), *(_cell(per[s], view, ci) for s in seeds)]
    shared = [
        [shown, *(_cell(per[s], view, lambda c, key=key: pr.cell(c.get(key))) for s in seeds)]
        for key, shown, _ in REFERENCES
    ]
    dot = pr.dot_row(rec["estimator"], [{s: pr.point(*a) for s, a in auc.items()}])
    bands = [
        pr.dot_row(name, [{s: pr.point(lab[s].get(key)) for s in seeds}], band=True)
        for key, _, name in REFERENCES
    ]
    parts = CAPTION_PARTS[view if view in CAPTION_PARTS else REFERENCE]
    on = "the causal label" if view == CAUSAL else "the behavior label"
    title = f"Fluency-residualized within-group AUC on {on} (draw 0, saturated checkpoint)"
    other = "behavior label" if view == CAUSAL else "causal label"
    columns = pr.seed_columns(f"fluency-residualized AUC [95% CI] · on the {other}", seeds)
    axis = pr.axis(f"residualized within-group AUC on {on}", lines=[pr.line(0.5)])
    return pr.presentation(
        pr.table("auc", "auc", title, columns, [row], shared, terminal=False),
        pr.dots(
            FIGURE,
            "auc",
            f"Fluency-residualized within-group AUC on {on}",
            CAPTION.format(**parts),
            [axis],
            [dot],
            bands,
            wide=True,
        ),
        sections={"auc": {"title": "Fluency control (AUC)"}},
    )


ITEM = Item(
    NAME,
    TITLE,
    "estimator",
    evaluate,
    reference="P5",
    headline=HEADLINES,
    present=present,
    views=(CAUSAL, REFERENCE),
)
