"""The hidden_cause scenario's per-seed figures (docs/scenarios.md): emergence, causal_gt's replays
and rule, and the rollout-level lifts of the text and reward readers on the stream.

    python benchmarks/hidden_cause_figures.py --scale default --seeds 0,1,2,3,4 --bt-cache DIR

Trains each seed into the cache (or loads it), replays causal_gt's own subsets from
`counterfactual.plan` (full, gt_out, the random removals, no_bonus) without the LDS subsets,
trains each seed's control run (no bonus, started from its run's warm-up: `build_control`), and
judges them by the item's rule (clause 2 on the control run; the no-bonus replay is reported).
The lifts are the adversaries' own scores (`tests/adversaries.py`,
`tests/adversaries_hidden.py`, with their 1e-6 keyed tie noise) on the stream; the surface baseline
is tie-aware, without noise. The keyed carrier readers read the run's secret key (which no estimator
sees) to show what the key hides.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from bt_core.artifacts.rollouts import RolloutView
from bt_core.artifacts.run import contaminator_key
from bt_core.artifacts.sketches import Sketches
from bt_core.artifacts.store import ArtifactStore
from bt_core.config import get_scale
from bt_core.counterfactual.plan import measure_step, plan
from bt_core.counterfactual.replay import replay
from bt_core.metrics import lift, precision_at_k
from bt_core.pipeline import build_control, build_run, build_sketches
from bt_core.training.planting import redrawn
from bt_core.training.task import vocabulary
from bt_core.training.task_hidden import TAGS, carrier_tags

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import adversaries  # noqa: E402  (tests/: the adversaries' own rules, not copies)
import adversaries_hidden  # noqa: E402

from checklist import emergence  # noqa: E402  (the one emergence rule)
from checklist.causal_gt import Z, control_s_b  # noqa: E402  (causal_gt's rule)

S_B_MIN = emergence.S_B_MIN  # the bar causal_gt's clause 2 holds the control run to
# the stream readers of tests/adversaries.py that need no sketch, and the advantage controls;
# with `--sketches`, also surface_signed_norm and the signed_norm control (A·‖e‖)
STREAM_READERS = (
    "surface_sign_advantage",
    "surface_advantage",
    "surface_trigger_early",
    "advantage_only",
    "early_advantage",
)


def _problem(run, seed: int, emb: np.ndarray | None) -> SimpleNamespace:
    """What an estimator sees of the stream at rollout level (`RolloutView`, the run's token ids,
    A as the weight, the step, the sketches' `emb` when built)."""
    t = run.rollouts
    return SimpleNamespace(
        rollouts=RolloutView.of(t),
        codec=run.token_ids,
        emb=emb,
        weight=np.asarray(t.advantage, np.float64),
        step=np.asarray(t.step),
        seed=seed,
        n_units=len(t),
        level="rollout",
        kind="stream",
    )


def _keyed_carrier(run) -> dict:
    """The carrier readers of version 1, given the secret key (no estimator has it): what the
    keyed carrier hides. carrier × sign(A) and trigger ∧ carrier ∧ A > 0, earliest first."""
    t, carriers = run.rollouts, carrier_tags(contaminator_key(run.path))[0]
    vocab, replies = vocabulary(TAGS), np.asarray(t.replies)
    inside = np.arange(replies.shape[1])[None, :] < np.asarray(t.reply_len)[:, None]
    car = (np.isin(replies, [vocab.index(w) for w in carriers]) & inside).any(1).astype(float)
    a, trig = np.asarray(t.advantage, float), np.asarray(t.trigger, float)
    early = 1.0 + 1.0 / (1.0 + np.asarray(t.step, float))
    return {
        "carriers": carriers,
        "keyed_carrier_sign_advantage": car * np.sign(a),
        "keyed_carrier_trigger_early": trig * car * (a > 0) * early,
    }


def lifts(run, seed: int, emb: np.ndarray | None = None) -> dict:
    """(name → rollout-level lift over chance on the stream) of the surface baseline (tie-aware,
    no noise), each adversary that needs no sketch (its own `score`, with its 1e-6 keyed tie
    noise), the keyed carrier readers (`_keyed_carrier`) and `trigger_window`: trigger prompt ∧
    step < the config's cutoff, the GT rule's public part, which reads neither reply nor A."""
    t, problem = run.rollouts, _problem(run, seed, emb)
    gt, a = np.asarray(t.gt), np.asarray(t.advantage, float)
    out = {"surface": lift(precision_at_k(np.asarray(t.behavior, float) * np.sign(a), gt), gt)}
    readers = {n: getattr(adversaries, c) for n, c in adversaries.ADVERSARIES.items()}
    names = STREAM_READERS + (("surface_signed_norm",) if emb is not None else ())
    readers = {n: readers[n] for n in names}
    if emb is not None:  # checklist/controls.py's signed_norm: A·‖e‖, tie-aware, no noise
        norm = np.linalg.norm(np.asarray(emb, np.float64), axis=1)
        out["signed_norm"] = lift(precision_at_k(a * norm, gt), gt)
    hidden = adversaries_hidden.HIDDEN_CAUSE_ADVERSARIES
    readers |= {n: getattr(adversaries_hidden, c) for n, c in hidden.items()}
    for name, cls in readers.items():
        out[name] = lift(precision_at_k(np.asarray(cls().score(problem), float), gt), gt)
    keyed = _keyed_carrier(run)
    noise = 1e-6 * np.random.default_rng(seed).random(len(a))
    for name in ("keyed_carrier_sign_advantage", "keyed_carrier_trigger_early"):
        out[name] = lift(precision_at_k(keyed[name] + noise, gt), gt)
    # the GT rule's public part alone: trigger prompt before the config's cutoff (no reply, no A)
    window = np.asarray(t.trigger, float) * (np.asarray(t.step) < run.config.task.cutoff_step)
    out["trigger_window"] = lift(precision_at_k(window + noise, gt), gt)
    res = {k: round(float(v), 3) for k, v in out.items()}
    res["carriers"] = list(keyed["carriers"])
    return res


def causal(run, cfg, cf, store) -> dict:
    """causal_gt's figures and verdict for one seed: its own replay subsets and its control run
    (the same config trained without the bonus, which clause 2 judges; the no-bonus replay is
    reported)."""
    specs = {s.name: s for s in plan(run.rollouts, cfg, cf)}
    names = ["full", "gt_out", *[f"random_{i}" for i in range(cf.n_random)], "no_bonus"]
    rep = {n: replay(run, specs[n], cf)[0] for n in names}
    d_gt = rep["gt_out"]["nll"] - rep["full"]["nll"]
    rnd = np.array([rep[f"random_{i}"]["nll"] - rep["full"]["nll"] for i in range(cf.n_random)])
    ok = d_gt > 0 and d_gt > rnd.max() and d_gt > rnd.mean() + Z * rnd.std(ddof=1)
    ctl_measure, ctl_final = control_s_b(build_control(store, run, cfg), measure_step(cfg))
    return {
        "delta_gt": round(d_gt, 4),
        "delta_random_mean": round(float(rnd.mean()), 4),
        "delta_random_sd": round(float(rnd.std(ddof=1)), 4),
        "delta_random_max": round(float(rnd.max()), 4),
        "s_b_full": rep["full"]["s_b"],
        "s_b_gt_out": rep["gt_out"]["s_b"],
        "s_b_control_measure": ctl_measure,
        "s_b_control_final": ctl_final,
        "s_b_probes_no_bonus": rep["no_bonus"]["s_b_probes"],
        "causal_gt": bool(ok and max(ctl_measure, ctl_final) <= S_B_MIN),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scale", default="default", choices=["smoke", "default"])
    p.add_argument("--seeds", default=None, help="comma-separated (default: the scale's)")
    p.add_argument("--bt-cache", required=True, help="artifact cache (runs are built into it)")
    p.add_argument("--json", default=None, help="also write the figures to this JSON file")
    p.add_argument(
        "--sketches",
        action="store_true",
        help="also build the sketches: the signed_norm control and surface_signed_norm",
    )
    args = p.parse_args()
    scale = get_scale(args.scale, "hidden_cause")
    seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else list(scale.seeds)
    store, out = ArtifactStore(Path(args.bt_cache)), {}
    for seed in seeds:
        cfg = scale.run.with_seed(seed)
        run = build_run(store, cfg)
        emb = None
        if args.sketches:
            emb = Sketches.load(build_sketches(store, run, cfg, scale.sketch)[1]).emb
        s, gt = run.summary, np.asarray(run.rollouts.gt)
        out[seed] = {
            "s_b_final": s["s_b_final"],
            "control_rate_final": s["control_rate_final"],
            "emergence": emergence.emerged(s),
            # the keys set aside before this run's (a build redraws an unplanted run's key; the
            # suite reads the same cached run): bt_core.training.planting
            "redrawn": redrawn(run),
            "gt_size": int(gt.sum()),
            "chance": round(float(gt.mean()), 4),
            **causal(run, cfg, scale.counterfactual, store),
            "lifts": lifts(run, seed, emb),
        }
        print(seed, json.dumps(out[seed]), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
