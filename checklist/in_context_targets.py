"""Setup validity — in-context targets (reference finding P4).

The quantity (`bt_core.targets.token_level`, the reference's `_qtoken_sketch`): for each
behavior-containing response sampled at the analysis checkpoint (temperature 0.9, top-p 0.95, G = 8
per prompt over the explicit prompts and the trigger probes, at most 160 responses), the
whole-parameter gradient of −(mean log-prob over only its behavior-token positions), and its cosine
with each target; CI: percentile bootstrap over responses.

Rule, on every seed and every generation draw, at the draw's analysis checkpoint: that gradient
aligns with the in-context target (the same quantity averaged over one behavior response per prompt
sampled at temperature 1.0): CI lower bound > 0.05 (the reference's bar; it saw +0.230, +0.114,
+0.295).

Grain: every (seed, draw) — the item passes only when the bar holds on every draw of every seed; one
failing target set fails it. Why not "per seed, with a minimum number of valid seeds": every
estimator item pools its evidence over all seeds and draws (the stream problem uses draw 0's
targets, each draw problem its own draw's), and nothing drops an invalid seed from that pool. A
minimum-count gate would therefore vouch for verdicts partly computed on targets measured not to
carry the behavior.
The reference's bar, too, was met on every seed it reported (3 of 3). A per-seed gate becomes right
only together with items that judge on the valid seeds alone; until then the strict grain is the
honest one.

It gates what it can vouch for (`gates="targets"`): when it fails, the items of every estimator that
reads targets report invalid-setup — the targets may not carry the behavior, so neither a pass nor a
fail of a targeted method means what it says — with the item's own figures and status kept in the
record.
Target-free estimators (norm_only, random, fluency, oracle, …) are unaffected.

The constructed half of the reference's bar (the constructed target — the behavior token appended
right after the prompt, where it never occurs — does *not* align: CI upper bound < 0.05) is reported
as a finding per seed and draw, not a gate: whether a target that the method should not use happens
to align says nothing about the targets the methods do use (in-context by default).
"""

from __future__ import annotations

from bt_core.attribution.evidence import Evidence
from bt_core.reporting import present as pr
from bt_core.reporting.scorecard import Status, Verdict

from ._base import Item, failing_first, fmt, setup_verdict

NAME = "in_context_targets"
TITLE = (
    "the in-context target aligns with the behavior-token gradient (gates target-reading "
    "estimators)"
)
IN_CONTEXT_MIN = 0.05  # in-context CI lower bound must exceed this (gate)
# constructed CI upper bound below this is the reference's finding (reported)
CONSTRUCTED_MAX = 0.05
KINDS = ("in_context", "constructed", "minimal_pair")


def evaluate_setup(evidence: Evidence) -> Verdict:
    per_seed, findings = {}, []
    for seed, a in evidence.artifacts.items():
        rows, aligns, why, ok = {}, {}, [], True
        for d, draw in enumerate(a.draws):
            step = draw.analysis_step
            al = {k: a.targets.token_alignment(k, step, draw=d, seed=seed) for k in KINDS}
            rows[d] = {
                k: {"mean": x.mean, "ci_lo": x.ci_lo, "ci_hi": x.ci_hi, "n": x.n}
                for k, x in al.items()
            }
            good = bool(al["in_context"].ci_lo > IN_CONTEXT_MIN)
            aligns[d] = not al["constructed"].ci_hi < CONSTRUCTED_MAX
            findings.append(aligns[d])
            ok &= good
            ic, co = al["in_context"], al["constructed"]
            why.append(
                (
                    good,
                    f"draw {d}: in-context {fmt(ic.mean)} [{fmt(ic.ci_lo)}, {fmt(ic.ci_hi)}]"
                    + ("" if good else f" ✗ (lower bound ≤ {IN_CONTEXT_MIN})")
                    + f"; constructed {fmt(co.mean)} [{fmt(co.ci_lo)}, {fmt(co.ci_hi)}]",
                )
            )
        per_seed[seed] = {
            "alignment": rows[0],
            "per_draw": rows,
            "constructed_aligns": aligns,
            "analysis_step": a.draws[0].analysis_step,
            "status": Status.PASS if ok else Status.FAIL,
            # the draws that failed lead: a one-line reason is cut at its end
            "why": failing_first(why),
        }
    finding = (
        f"finding (not a gate): the constructed target's CI upper bound is ≥ {CONSTRUCTED_MAX} on "
        f"{sum(findings)} of {len(findings)} (seed, draw)"
        if any(findings)
        else (
            f"finding (not a gate): the constructed target stays below {CONSTRUCTED_MAX} on every "
            "seed and draw, as in the reference"
        )
    )
    v = setup_verdict(
        NAME,
        per_seed,
        {
            "in_context_min": IN_CONTEXT_MIN,
            "constructed_max": CONSTRUCTED_MAX,
            "constructed_finding": finding,
        },
    )
    v.reason += f" — {finding}"
    return v


CAPTION = (
    "Each marker is one seed's mean cosine, on draw 0, between the behavior-token gradient and "
    "each target kind, with its 95% CI (colour and shape = seed). Dashed: the in_context_targets "
    "bar — the in-context target must have its CI above it on every seed and draw, or the verdicts "
    "of every estimator that reads targets are held back as invalid-setup."
)


def present(rec: dict) -> dict:
    """The alignment of each target kind per seed (draw 0), beside the setup items' table."""
    per = pr.per_seed(rec)
    if not per:
        return {}
    kinds = list(next(iter(per.values())).get("alignment", {}))
    rows = [
        pr.dot_row(
            k,
            [
                {
                    s: pr.point(a["mean"], a["ci_lo"], a["ci_hi"])
                    for s, f in per.items()
                    for a in [f["alignment"][k]]
                }
            ],
        )
        for k in kinds
    ]
    bar = (rec.get("figures") or {}).get("in_context_min")
    lines = [pr.line(bar), pr.line(0.0, "thin")]
    axis = pr.axis("cos(behavior-token gradient, target)", lines=lines)
    title = "Token-level alignment of the targets (setup)"
    return pr.presentation(pr.dots("alignment", pr.SETUP_SECTION, title, CAPTION, [axis], rows))


ITEM = Item(NAME, TITLE, "setup", evaluate_setup, reference="P4", gates="targets", present=present)
