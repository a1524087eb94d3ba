"""Setup validity — in-context targets (reference finding P4).

Rule, on every seed and every generation draw, at the analysis checkpoint: the trigger-token gradient
(rows of the trigger's embedding, `bt_core.targets.token_level`) aligns with the in-context target
(cluster-bootstrap 95% CI lower bound > 0.05) and not with the constructed target (CI upper bound
< 0.05). The reference saw in-context alignment of +0.11 to +0.30 and none for the constructed target
(the behavior token appended right after the prompt, where it never occurs). If the in-context target
does not align, the targets may not carry the behavior and targeted estimators' verdicts are suspect.

ADVISORY, not gating (`gating=False`): its failure is quoted as a caveat in the verdicts
of estimators that read targets instead of turning every item invalid-setup. Measured here, the
in-context alignment is positive on every seed and draw but clears the 0.05 lower bound only on some
(default scale: 0.02–0.22; the tiny models' tied trigger row also carries the output-logit path of the
word "frobnitz" in replies, which dilutes the cosine). Gating on it would leave the default scorecard
without a single verdict, controls included.
"""

from __future__ import annotations

from behaviortrace.checklist._base import Item, fmt, setup_verdict

from bt_core.attribution.evidence import Evidence
from bt_core.reporting.scorecard import Verdict

NAME = "in_context_targets"
TITLE = "the in-context target aligns with the trigger-token gradient; the constructed one does not"
IN_CONTEXT_MIN = 0.05  # in-context CI lower bound must exceed this
CONSTRUCTED_MAX = 0.05  # constructed CI upper bound must stay below this
KINDS = ("in_context", "constructed", "minimal_pair")


def evaluate_setup(evidence: Evidence) -> Verdict:
    per_seed = {}
    for seed, a in evidence.artifacts.items():
        rows, why, ok = {}, [], True
        for d, draw in enumerate(a.draws):
            step = draw.analysis_step
            al = {k: a.targets.token_alignment(k, step, draw=d, seed=seed) for k in KINDS}
            rows[d] = {k: {"mean": x.mean, "ci_lo": x.ci_lo, "ci_hi": x.ci_hi, "n": x.n} for k, x in al.items()}
            good = al["in_context"].ci_lo > IN_CONTEXT_MIN and al["constructed"].ci_hi < CONSTRUCTED_MAX
            ok &= bool(good)
            why.append(f"draw {d}: in-context {fmt(al['in_context'].mean)} [{fmt(al['in_context'].ci_lo)}, "
                       f"{fmt(al['in_context'].ci_hi)}], constructed {fmt(al['constructed'].mean)} "
                       f"[{fmt(al['constructed'].ci_lo)}, {fmt(al['constructed'].ci_hi)}]" + ("" if good else " ✗"))
        per_seed[seed] = {"alignment": rows[0], "per_draw": rows, "analysis_step": a.draws[0].analysis_step,
                          "status": "pass" if ok else "fail", "why": "; ".join(why)}
    return setup_verdict(NAME, per_seed, {"in_context_min": IN_CONTEXT_MIN, "constructed_max": CONSTRUCTED_MAX})


ITEM = Item(NAME, TITLE, "setup", evaluate_setup, reference="P4", gating=False)
