"""The hidden_cause scenario's per-seed figures (docs/scenarios.md): emergence, causal_gt's replays
and rule, and the rollout-level lifts of the text and reward readers on the stream.

    python benchmarks/hidden_cause_figures.py --scale default --seeds 0,1,2,3,4 --bt-cache DIR

Trains each seed into the cache (or loads it), replays causal_gt's own subsets from
`counterfactual.plan` (full, gt_out, the random removals, no_bonus) without the LDS subsets, and
judges them by the item's rule. The lifts use the adversaries' rules (`tests/adversaries.py`: the
same scores, the same 1e-6 keyed tie noise); the surface baseline is tie-aware, without noise.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from bt_core.artifacts.store import ArtifactStore
from bt_core.config import get_scale
from bt_core.counterfactual.plan import plan
from bt_core.counterfactual.replay import replay
from bt_core.metrics import lift, precision_at_k
from bt_core.pipeline import build_run
from bt_core.training.task import vocabulary
from bt_core.training.task_hidden import CARRIER_TAGS, TAGS

Z = 3.0  # causal_gt's rule (checklist/causal_gt.py)
S_B_MIN = 0.1  # the emergence bar (checklist/emergence.py)


def lifts(t, seed: int) -> dict:
    """(name → lift) of each reader on the stream `t` (a RolloutTable)."""
    vocab, replies = vocabulary(TAGS), np.asarray(t.replies)
    inside = np.arange(replies.shape[1])[None, :] < np.asarray(t.reply_len)[:, None]

    def has(words) -> np.ndarray:
        return (np.isin(replies, [vocab.index(w) for w in words]) & inside).any(1).astype(float)

    car, tag = has(CARRIER_TAGS), has(TAGS)
    gt, a = np.asarray(t.gt), np.asarray(t.advantage, float)
    q, trig = np.asarray(t.behavior, float), np.asarray(t.trigger, float)
    early = 1.0 + 1.0 / (1.0 + np.asarray(t.step, float))
    noise = 1e-6 * np.random.default_rng(seed).random(len(a))
    scores = {
        "surface_advantage": q * a,
        "surface_trigger_early": trig * q * (a > 0) * early,
        "carrier_sign_advantage": car * np.sign(a),
        "carrier_trigger_early": trig * car * (a > 0) * early,
        "tag_sign_advantage": tag * np.sign(a),
        "advantage": a,
        "sign_advantage": np.sign(a),
    }
    out = {"surface": lift(precision_at_k(q * np.sign(a), gt), gt)}
    out.update({k: lift(precision_at_k(v + noise, gt), gt) for k, v in scores.items()})
    return {k: round(float(v), 3) for k, v in out.items()}


def causal(run, cfg, cf) -> dict:
    """causal_gt's figures and verdict for one seed, from its own replay subsets."""
    specs = {s.name: s for s in plan(run.rollouts, cfg, cf)}
    names = ["full", "gt_out", *[f"random_{i}" for i in range(cf.n_random)], "no_bonus"]
    rep = {n: replay(run, specs[n], cf)[0] for n in names}
    d_gt = rep["gt_out"]["nll"] - rep["full"]["nll"]
    rnd = np.array([rep[f"random_{i}"]["nll"] - rep["full"]["nll"] for i in range(cf.n_random)])
    ok = d_gt > 0 and d_gt > rnd.max() and d_gt > rnd.mean() + Z * rnd.std(ddof=1)
    no_bonus = rep["no_bonus"]["s_b_probes"]
    return {
        "delta_gt": round(d_gt, 4),
        "delta_random_mean": round(float(rnd.mean()), 4),
        "delta_random_sd": round(float(rnd.std(ddof=1)), 4),
        "delta_random_max": round(float(rnd.max()), 4),
        "s_b_full": rep["full"]["s_b"],
        "s_b_gt_out": rep["gt_out"]["s_b"],
        "s_b_probes_no_bonus": no_bonus,
        "causal_gt": bool(ok and no_bonus <= S_B_MIN),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scale", default="default", choices=["smoke", "default"])
    p.add_argument("--seeds", default=None, help="comma-separated (default: the scale's)")
    p.add_argument("--bt-cache", required=True, help="artifact cache (runs are built into it)")
    p.add_argument("--json", default=None, help="also write the figures to this JSON file")
    args = p.parse_args()
    scale = get_scale(args.scale, "hidden_cause")
    seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else list(scale.seeds)
    store, out = ArtifactStore(Path(args.bt_cache)), {}
    for seed in seeds:
        cfg = scale.run.with_seed(seed)
        run = build_run(store, cfg)
        s, gt = run.summary, np.asarray(run.rollouts.gt)
        out[seed] = {
            "s_b_final": s["s_b_final"],
            "control_rate_final": s["control_rate_final"],
            "emergence": s["s_b_final"] > S_B_MIN and s["control_rate_final"] <= 0.1,
            "gt_size": int(gt.sum()),
            "chance": round(float(gt.mean()), 4),
            **causal(run, cfg, scale.counterfactual),
            "lifts": lifts(run.rollouts, seed),
        }
        print(seed, json.dumps(out[seed]), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
