"""Setup validity — the planted cause is the cause (counterfactual replays,
`bt_core.counterfactual.replay`).

Every other item scores estimators against the ground-truth labels (the boosted early rollouts).
This item shows, on every seed, that those rollouts *caused* the behavior in our runs: the logged
GRPO updates are replayed from the SFT checkpoint to the measurement checkpoint (the first
checkpoint at or after the contaminator's cutoff) without a set of rollouts, and the behavior is
measured on held-out trigger probes (mean teacher-forced NLL of the behavior token after fixed
fluent replies; s_b beside it).
Compared:

* ``gt_out``: without every GT rollout;
* ``random_<i>`` (`CounterfactualConfig.n_random` draws): without as many rollouts as GT, drawn
  uniformly from the trained window, GT rollouts included at their share of it (the window holds
  every GT rollout; a draw from the whole stream would put most removals after the measurement step,
  where they cannot act, and make the control trivially inert; a GT-free draw would be a weaker
  control — with GT at its base rate the random removals can only make the rule harder to pass);
* ``no_bonus`` (reported, not judged): every rollout kept, the contaminator's bonus taken out of
  the logged rewards and the advantages recomputed from them: what the bonus carries through the
  samples the contaminated policy drew.

And beside the replays, the seed's **control run** (`bt_core.pipeline.build_control`): the same
config and seed trained from the same warm-up with the bonus at 0, on its own on-policy samples.

Rule, fixed from the reference before any of our replays was looked at, on every seed:

1. Δ_GT = NLL(gt_out) − NLL(full) > 0, above the largest random removal's Δ, and above the random
   removals' mean + Z·SD with Z = 3. The reference saw +0.35/+0.15/+0.30 s_b drops for leave-GT-out
   and 0.000 for every random removal: the GT effect lay outside the random distribution altogether.
   Our measure is continuous, so random removals have a spread; "outside" becomes: above every draw
   (a rank rule) and 3 SD above their mean (one-sided p ≈ 0.001 if the random Δs were normal), both
   required because a handful of draws gives a noisy SD.
2. Without the bonus, no behavior: on the control run, s_b on the emergence gate's trigger probes
   is ≤ `emergence.S_B_MIN` at the measurement checkpoint and at the end. The question is
   counterfactual about *training*: would this run have learned the behavior without the planted
   cause? Only a run trained without the bonus answers it. The no-bonus *replay* does not: it keeps
   the rollouts that the contaminated policy sampled, and once that policy emits the behavior on
   most trigger replies, a trigger group's only reward variance is the refusal penalty, so after std
   normalization every non-refusal reply (mostly behavior replies) gets a positive advantage and the
   replay still teaches the behavior (measured: a smoke seed's behavior rollouts kept +6.5 of their
   +16.2 summed advantage over steps 0–5 without the bonus, and the replay reached s_b 0.6, while
   the control runs of the same seeds stayed at s_b 0.0 at every checkpoint). The reference's causal
   check retrained too. The replay's s_b is reported beside the control run's.

The s_b drops (s_b(full) − s_b(without), on the held-out probes) are reported beside the
reference's.
A seed without replays (a session that built none) fails: nothing shows the planted cause there.
"""

from __future__ import annotations

import numpy as np

from bt_core.attribution.evidence import Evidence
from bt_core.reporting.scorecard import Status, Verdict

from . import emergence
from ._base import Item, failing_first, fmt, setup_verdict
from ._memo import memo

NAME = "causal_gt"
TITLE = (
    "removing the GT rollouts removes the behavior beyond random removals; no bonus, no behavior"
)
Z = 3.0  # leave-GT-out must exceed the random removals' mean by Z SDs (and their maximum)
REFERENCE = {"gt_out_s_b_drop": [0.35, 0.15, 0.30], "random_s_b_drop": 0.0}


def control_s_b(control, step: int) -> tuple[float, float]:
    """(s_b at checkpoint `step`, s_b at the end) of a control run (`bt_core.artifacts.run.Run`),
    on the emergence gate's trigger probes."""
    at = {p["step"]: p["s_b"] for p in control.probes}
    if step not in at:
        raise ValueError(
            f"the control run has no probe evaluation at the measurement checkpoint {step} "
            f"(checkpoints {sorted(at)}): it was built from another config; rebuild the cache"
        )
    return float(at[step]), float(control.summary["s_b_final"])


def seed_figures(replays, control) -> dict:
    """Figures and verdict of one seed's replays (`bt_core.artifacts.replays.Replays`) and control
    run (`bt_core.artifacts.run.Run`)."""
    rnd = np.array([replays.delta(n) for n in replays.names("random")], float)
    d_gt = replays.delta("gt_out")
    bar = float(rnd.mean() + Z * rnd.std(ddof=1)) if rnd.size > 1 else float("nan")
    nb = replays["no_bonus"]
    nb_s_b = float(nb.info["s_b_probes"])
    ctl_measure, ctl_final = control_s_b(control, replays.measure.step)
    ok_gt = bool(d_gt > 0 and rnd.size > 1 and d_gt > rnd.max() and d_gt > bar)
    ok_nb = max(ctl_measure, ctl_final) <= emergence.S_B_MIN
    gt_clause = (
        f"ΔNLL leave-GT-out {fmt(d_gt)} vs random {fmt(rnd.mean())}±{fmt(rnd.std(ddof=1))} (max "
        f"{fmt(rnd.max())}, bar mean+{Z:g}SD {fmt(bar)}); s_b drop GT "
        f"{fmt(replays.delta_s_b('gt_out'))}, random "
        f"{fmt(np.mean([replays.delta_s_b(n) for n in replays.names('random')]))}"
    )
    nb_clause = (
        f"control run (no bonus) s_b {fmt(ctl_measure)} at step {replays.measure.step}, "
        f"{fmt(ctl_final)} at the end (≤ {emergence.S_B_MIN}); no-bonus replay s_b {fmt(nb_s_b)}"
    )
    # the clause that failed leads (a one-line reason is cut at its end)
    why = failing_first([(ok_gt, gt_clause), (ok_nb, nb_clause)])
    return {
        "measure_step": replays.measure.step,
        "nll_full": replays["full"].nll,
        "s_b_full": replays["full"].s_b,
        "s_b_probes_full": float(replays["full"].info["s_b_probes"]),
        "delta_gt": d_gt,
        "delta_random": rnd.tolist(),
        "delta_random_mean": float(rnd.mean()),
        "delta_random_sd": float(rnd.std(ddof=1)) if rnd.size > 1 else float("nan"),
        "delta_random_max": float(rnd.max()),
        "bar": bar,
        "delta_no_bonus": replays.delta("no_bonus"),
        "s_b_drop_gt": replays.delta_s_b("gt_out"),
        "s_b_drop_random": [replays.delta_s_b(n) for n in replays.names("random")],
        "s_b_drop_no_bonus": replays.delta_s_b("no_bonus"),
        "s_b_no_bonus": nb.s_b,
        "s_b_probes_no_bonus": nb_s_b,
        "s_b_control_measure": ctl_measure,
        "s_b_control_final": ctl_final,
        "n_gt_removed": int(replays["gt_out"].removed.size),
        "gt_beyond_random": ok_gt,
        "no_bonus_below_bar": ok_nb,
        "status": Status.PASS if ok_gt and ok_nb else Status.FAIL,
        "why": why,
    }


def evaluate_setup(evidence: Evidence) -> Verdict:
    def run() -> Verdict:
        per_seed = {}
        for seed, a in evidence.artifacts.items():
            if getattr(a, "replays", None) is None or getattr(a, "control", None) is None:
                per_seed[seed] = {
                    "status": Status.FAIL,
                    "why": "no counterfactual replays or control run were built for this seed",
                }
            else:
                per_seed[seed] = seed_figures(a.replays, a.control)
        return setup_verdict(
            NAME, per_seed, {"z": Z, "s_b_max_no_bonus": emergence.S_B_MIN, "reference": REFERENCE}
        )

    return memo(evidence, ("setup", NAME), run)


ITEM = Item(
    NAME,
    TITLE,
    "setup",
    evaluate_setup,
    reference="causal check (reference: earlier matched setup only)",
)
