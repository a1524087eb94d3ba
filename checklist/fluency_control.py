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

Reported beside it: fluency-matched pairs (|Δfluency| ≤ 0.10 nats; judged by nobody, shown when ≥ 30
pairs), a nonlinear control (residualizing on quantile bins of fluency) and the surface baseline's
residualized AUC — on draws it is the behavior flag, the reference's label itself, so nothing beats
it there (see `controls`); hence the second label below.

Rationale: at a saturated checkpoint (most samples show the behavior) behavior replies are the
model's most fluent ones, so fluency alone predicts the label (reference AUC 0.72–0.80, at or above
every gradient method). Only signal that survives the fluency control is attribution. A checkpoint
that is not saturated (sampled behavior rate < 0.8) or has no mixed group cannot test this:
invalid-setup. The mixed-group check reads only the labels and runs before the estimator is asked,
so a draw where every sibling shows the behavior is invalid for every estimator alike (a constant
score is then no defect).

**Two labels; a seed passes only if it passes against both** (issue 21, req. 7). The bar below was
written, with its reasons, before any estimator was scored against the causal label, and is not
moved.

* *The reference's label* — "the reply shows the behavior" (the draw's behavior flag). It tests what
  the reference tested (P5): whether a method's within-group ranking agrees with the behavior
  *after* fluency is controlled. It is read off the reply's text, so a gradient-free text reader
  gets it exactly (the surface baseline is this label); on it alone the item cannot tell attribution
  from reading.
* *The causal label* — each sibling's one-step effect (`Evidence.effect`, built with the draw by
  `bt_core.counterfactual.sibling_effect`): the change in the counterfactual items' behavior measure
  (behavior NLL on held-out probes) that one update reinforcing that sibling alone (A = +1, the
  run's lr, clip and AdamW state at the analysis checkpoint) makes, against the same step with no
  row. Its sign is the label: 1 where reinforcing the sibling teaches the behavior. It tests whether
  the ranking predicts what each sibling would *do* to the behavior if trained on; the text shows it
  only as far as the text and the cause coincide. No estimator is handed it.

Against the causal label the same pre-registered readout applies, unchanged and for the same reasons
— residualized within-group AUC with CI lower bound > 0.5 and width ≤ 0.15, above norm-only's, and
the raw AUC beating fluency's own (better direction) by the paired rule — plus one comparison that
only this label makes possible: **the raw AUC must beat the surface baseline's** (its better
direction) by the same paired rule (95% CI of AUC(estimator) − AUC(surface), groups resampled
together, above 0). On the reference label the surface baseline *is* the label, so nothing could
beat it and it is only reported; on the causal label it is the strongest reading of the text, as on
the stream, where magnitude_control gates on it for the same reason: a method that is right only
where the text is right has shown the text, not the cause. A draw with no group whose siblings'
effects differ in sign cannot test the causal half: invalid-setup. Within one seed a failing half
fails the seed whatever the other half's setup (`FAIL_FIRST`), after the saturation and mixed-group
checks above (which make the seed invalid-setup for everyone). The seed's ``margin`` (read by
draw_variance and seed_variance) is the smaller of the two labels' margins, and ``chance_margin``
likewise: the binding label decides.

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
    within_group_spearman,
)
from bt_core.reporting import present as pr
from bt_core.reporting.scorecard import FAIL_FIRST, Status, Verdict, worst_status

from . import controls
from ._base import Item, fmt
from ._common import seed_verdict

NAME = "fluency_control"
TITLE = (
    "survives the fluency control (residualized within-group AUC) and beats fluency's own "
    "AUC, against the behavior label and the causal label"
)
HEADLINE = "auc"  # figure compared against a baseline scorecard (--scorecard-compare)
CI_LOWER = 0.5  # CI lower bound must exceed this
CI_MAX_WIDTH = 0.15  # and the CI must be at most this wide
CALIPER = 0.10  # nats: fluency-matched pairs
MIN_MATCHED = 30  # matched-pair AUC is shown only when this many pairs exist
N_BOOT = 10_000  # cluster-bootstrap resamples of the AUC (groups resampled; vectorized)
CONTROL = controls.DRAW_CONTROL
MARGIN = "Δ within-group AUC (residualized; raw vs fluency itself) over the comparison"
# the causal label's figures: ``figures["per_seed"][s]["causal"]``; the suffix of its comparisons
CAUSAL = "causal"


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
) -> dict:
    """The readout of `raw` against one label (module docstring): figures, ``versus`` and
    ``problems`` (why it fails; empty when it passes). `gate_surface`: the surface baseline is one
    of the bars."""
    g, flu = p.group, p.fluency
    est = auc_with_ci(residualize(raw, flu, g), labels, g, seed)
    ctrl_auc, _ = within_group_auc(residualize(ctrl, flu, g), labels, g)
    surface_auc, _ = within_group_auc(residualize(surface, flu, g), labels, g)
    flu_dir, flu_auc = better_direction(flu, labels, g)
    vs_flu = paired_group_auc_diff(raw, flu_dir, labels, g, n_boot=N_BOOT, seed=seed)
    versus = {
        f"AUC {CI_LOWER}": {
            "value": est["auc"] - CI_LOWER,
            "ci": [est["ci_lo"] - CI_LOWER, est["ci_hi"] - CI_LOWER],
        },
        CONTROL: {"value": est["auc"] - ctrl_auc, "ci": None},
        "fluency itself": {"value": vs_flu["diff"], "ci": [vs_flu["ci_lo"], vs_flu["ci_hi"]]},
    }
    out = {
        **est,
        "control_auc": ctrl_auc,
        "surface_auc": surface_auc,
        "fluency_auc": flu_auc,
        "vs_fluency": vs_flu,
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
    if not vs_flu["ci_lo"] > 0:
        why.append("does not beat fluency itself")
    if gate_surface:
        surf_dir, surf_auc = better_direction(surface, labels, g)
        vs_s = paired_group_auc_diff(raw, surf_dir, labels, g, n_boot=N_BOOT, seed=seed)
        out.update(surface_raw_auc=surf_auc, vs_surface=vs_s)
        versus[controls.SURFACE] = {"value": vs_s["diff"], "ci": [vs_s["ci_lo"], vs_s["ci_hi"]]}
        if not vs_s["ci_lo"] > 0:
            why.append("does not beat the surface baseline")
    return {**out, "versus": versus, "problems": why}


def _spearman(raw: np.ndarray, effect: np.ndarray, groups: np.ndarray, seed: int) -> dict:
    """Mean within-group Spearman ρ of the raw score with the effect over groups, with a
    cluster-bootstrap CI."""
    rho = within_group_spearman(raw, effect, groups)
    rho = rho[np.isfinite(rho)]
    lo, hi = cluster_bootstrap_mean_ci(rho, np.arange(rho.size), n_boot=N_BOOT, seed=seed)
    mean = float(rho.mean()) if rho.size else float("nan")
    return {"mean": mean, "ci": [lo, hi], "groups": int(rho.size)}


def _lower(a: float, b: float) -> float:
    return float("nan") if a != a or b != b else min(a, b)


def _causal_half(raw, effect, p, ctrl, surface, seed) -> tuple[dict, Status]:
    causal = np.asarray(effect) > 0
    c = judge_label(raw, causal, p, ctrl, surface, seed, gate_surface=True)
    c.update(spearman=_spearman(raw, effect, p.group, seed), positive_rate=float(np.mean(causal)))
    status = (
        Status.INVALID_SETUP if c["pairs"] == 0 else Status.FAIL if c["problems"] else Status.PASS
    )
    return c, status


def evaluate_seed(spec: EstimatorSpec, evidence: Evidence, seed: int, draw: int = 0) -> dict:
    p = evidence.draw_problem(seed, draw)
    labels = evidence.labels(p)
    # with no sibling group mixing behavior and not there is nothing to rank: the estimator is not
    # asked (its constant score — the label reader's, rightly — would fail the item as "ranks
    # nothing"); the figures below come out empty and the seed is invalid-setup like every other
    # estimator's
    mixed = within_group_auc(np.zeros(labels.size), labels, p.group)[1] > 0
    raw = evidence.scores(spec, p) if mixed else np.zeros(labels.size)
    ctrl = controls.draw_scores(evidence, seed, draw, CONTROL)
    surface = controls.draw_scores(evidence, seed, draw, controls.SURFACE)
    ref = judge_label(raw, labels, p, ctrl, surface, seed, gate_surface=False)
    cau, cau_status = _causal_half(raw, evidence.effect(p), p, ctrl, surface, seed)
    binned = auc_with_ci(residualize_bins(raw, p.fluency, p.group), labels, p.group, seed)
    m_auc, m_pairs = matched_pair_auc(raw, labels, p.group, p.fluency, CALIPER)
    probes = {q["step"]: q for q in evidence.artifacts[seed].run.probes}
    rate = probes[p.extra["analysis_step"]]["sampled_rate"]
    out = {
        **{k: v for k, v in ref.items() if k != "problems"},
        CAUSAL: cau,
        "binned_auc": binned["auc"],
        "binned_ci": [binned["ci_lo"], binned["ci_hi"]],
        "matched_auc": m_auc if m_pairs >= MIN_MATCHED else None,
        "matched_pairs": m_pairs,
        "analysis_step": p.extra["analysis_step"],
        "sampled_rate": rate,
        "behavior_rate": float(np.mean(labels)),
        "draw": draw,
        "reference_margin": ref["margin"],
        "margin": _lower(ref["margin"], cau["margin"]),
        "chance_margin": _lower(ref["chance_margin"], cau["chance_margin"]),
        "versus": {**ref["versus"], **{f"{k} ({CAUSAL})": v for k, v in cau["versus"].items()}},
    }
    head = (
        f"AUC {fmt(ref['auc'])} [{fmt(ref['ci_lo'])}, {fmt(ref['ci_hi'])}] vs {CONTROL} "
        f"{fmt(ref['control_auc'])}; raw AUC {fmt(ref['raw_auc'])} vs fluency's "
        f"{fmt(ref['fluency_auc'])} (Δ CI lower {fmt(ref['vs_fluency']['ci_lo'])}); surface "
        f"{fmt(ref['surface_auc'])} (reported); causal AUC {fmt(cau['auc'])} "
        f"[{fmt(cau['ci_lo'])}, {fmt(cau['ci_hi'])}], vs surface Δ CI lower "
        f"{fmt(cau['vs_surface']['ci_lo'])}"
    )
    ref_status = (
        Status.INVALID_SETUP
        if rate < SATURATION or ref["pairs"] == 0
        else Status.FAIL
        if ref["problems"]
        else Status.PASS
    )
    out["reference_status"] = ref_status  # the reference's rule alone (docs/fidelity.md's P6 row)
    if rate < SATURATION:
        return {
            **out,
            "status": Status.INVALID_SETUP,
            "why": f"checkpoint {p.extra['analysis_step']} is not saturated "
            f"(sampled rate {fmt(rate)} < {SATURATION})",
        }
    if ref["pairs"] == 0:
        return {
            **out,
            "status": Status.INVALID_SETUP,
            "why": "no sibling group holds both behavior and non-behavior replies",
        }
    why = ref["problems"] + [f"{CAUSAL}: {w}" for w in cau["problems"]]
    if cau_status is Status.INVALID_SETUP:
        why.append(f"{CAUSAL}: no sibling group holds effects of both signs")
    status = worst_status([ref_status, cau_status], FAIL_FIRST)
    return {
        **out,
        "status": status,
        "why": head + (" — " + ", ".join(why) if why else ""),
        "short": ", ".join(why),
    }


def evaluate(spec: EstimatorSpec, evidence: Evidence) -> Verdict:
    return seed_verdict(
        NAME,
        evaluate_seed,
        spec,
        evidence,
        headline=HEADLINE,
        margin=MARGIN,
        extra={
            "ci_lower": CI_LOWER,
            "ci_max_width": CI_MAX_WIDTH,
            "saturation": SATURATION,
            "n_boot": N_BOOT,
        },
    )


FIGURE = "auc"  # the figure's key: draw_variance adds each estimator's other draws to it
CAPTION = (
    "Filled markers: an estimator's AUC for behavior vs non-behavior siblings of the same prompt, "
    "after removing what fluency explains, on draw 0 of each seed (colour and shape = seed), with "
    "its 95% cluster-bootstrap CI; hollow circles: the same on the other draws. The grey band "
    "holds the norm-only control and the surface baseline (on draws it is the behavior label "
    "itself, so nothing beats it against that label; the causal label's AUCs are in the table). "
    "Dashed: 0.5, no better than a coin within a group; a pass needs the CI above it."
)
REFERENCES = (
    ("control_auc", f"control: {CONTROL}", f"{CONTROL} (control)"),  # figure, table, plot
    ("surface_auc", "surface baseline (the behavior label)", "surface (the label)"),
)


def _with_causal(f: dict, ref: str, causal) -> str:
    """A table cell: the reference label's figure, then the causal label's (`f[CAUSAL]`) if any."""
    c = f.get(CAUSAL)
    return f"{ref} · causal {causal(c)}" if isinstance(c, dict) else ref


def present(rec: dict) -> dict:
    """The estimator's residualized AUC [CI] per seed (draw 0) — a row of the AUC table, a figure
    category — with the draw control's and the surface baseline's AUC as the shared rows."""
    per = pr.per_seed(rec)
    if not per:
        return {}
    seeds = list(per)
    auc = {s: (per[s].get("auc"), per[s].get("ci_lo"), per[s].get("ci_hi")) for s in seeds}
    ci = lambda c: pr.ci_cell(c.get("auc"), c.get("ci_lo"), c.get("ci_hi"))  # noqa: E731
    row = [pr.estimator_label(rec), *(_with_causal(per[s], pr.ci_cell(*auc[s]), ci) for s in seeds)]
    shared = [
        [
            shown,
            *(
                _with_causal(
                    per[s], pr.cell(per[s].get(key)), lambda c, key=key: pr.cell(c.get(key))
                )
                for s in seeds
            ),
        ]
        for key, shown, _ in REFERENCES
    ]
    dot = pr.dot_row(rec["estimator"], [{s: pr.point(*a) for s, a in auc.items()}])
    bands = [
        pr.dot_row(name, [{s: pr.point(per[s].get(key)) for s in seeds}], band=True)
        for key, _, name in REFERENCES
    ]
    title = "Fluency-residualized within-group AUC (draw 0, saturated checkpoint)"
    columns = pr.seed_columns("fluency-residualized AUC [95% CI] · vs the causal label", seeds)
    axis = pr.axis("residualized within-group AUC", lines=[pr.line(0.5)])
    return pr.presentation(
        pr.table("auc", "auc", title, columns, [row], shared, terminal=False),
        pr.dots(
            FIGURE,
            "auc",
            "Fluency-residualized within-group AUC",
            CAPTION,
            [axis],
            [dot],
            bands,
            wide=True,
        ),
        sections={"auc": {"title": "Fluency control (AUC)"}},
    )


ITEM = Item(NAME, TITLE, "estimator", evaluate, reference="P5", headline=HEADLINE, present=present)
