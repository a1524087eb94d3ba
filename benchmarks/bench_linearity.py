r"""Linearity probe: is the truth that `counterfactual` judges first order in the subsets' weights?

    python benchmarks/bench_linearity.py --scale smoke
    python benchmarks/bench_linearity.py --scale default --bt-cache DIR --json out.json

The item judges Δ_m = NLL(subset m at weight 1 − δ) − NLL(logged stream), replayed in float64, and
scores an estimator by how its summed scores rank the Δ_m. A sum of per-rollout scores is a first-
order (additive) model of that response, whose exact answer is `metagrad` (∂NLL/∂w). This probe
measures, per seed, how far from first order the response is at each δ of a ladder:

for each of the first `--subsets` judged subsets (the plan's `reweight_<i>` rows) and each δ, two
float64 replays from step 0, at weights 1 − δ and 1 + δ, beside one of the logged stream (f₀):

* the central difference c = (f(1 − δ) − f(1 + δ)) / 2, the first-order part of the response to
  1 − δ (its error is third order);
* the second-order part s = (f(1 − δ) + f(1 + δ)) / 2 − f₀, and the **ratio |s| / |c|**: 0 where the
  response is linear; 1 where curvature is as large as the slope's whole effect;
* metagrad's prediction p = −δ Σ_{i ∈ m} ∂f/∂w_i over c: 1 where the exact derivative predicts the
  replays.

metagrad differentiates the trajectory its segments restart from (`--states`): by default, as the
estimator does at smoke and default, one float64 sweep from step 0, the replays' own trajectory
("replayed"); with `--states stored`, each stored float32 checkpoint cast to float64, as the
estimator did before issue 47 and still does at real scale. On a sensitive seed the two differ
(default, one fresh key: metagrad / central converged to 1.11 on seed 4 as δ went to 1e-6 with the
stored restart, to 1.002 from step 0): with `stored` the probe then measures that restart's effect,
not a curvature.

Printed per seed and δ: the median and largest ratio and the range of p / c over the subsets, and
the seed's **linearity radius**: the largest δ of the ladder up to which every rung has every probed
subset's ratio ≤ `RATIO_BAR` (0.1: curvature at most a tenth of the first-order effect).

The probe needs only each seed's run, built or loaded through the cache (a cold default run is about
a minute); it does not build the replays, sketches or draws. Each seed runs in its own process with
one torch thread; `--workers` run at once. With `--jsonl` each seed's record is appended as it ends,
so a cut-off probe keeps what it measured. Not a pytest file: nothing here asserts a figure.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
import time
from pathlib import Path

from tabulate import tabulate

from bt_core.artifacts.cacheroot import default_cache_dir

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

LADDER = (1e-2, 1e-3, 1e-4)
RATIO_BAR = 0.1  # second-order part ≤ a tenth of the central difference: "first order" here


def radius(per_delta: list[dict], bar: float = RATIO_BAR) -> float | None:
    """The largest δ up to which every rung (from the smallest up) has every probed subset's ratio
    ≤ `bar`: the counterfactual item's rule (None: the smallest rung already departs)."""
    from checklist.counterfactual import first_order_radius

    return first_order_radius([(r["delta"], r["max_ratio"]) for r in per_delta], bar)


def subset_figures(f0: float, f_minus: float, f_plus: float, delta: float, pred: float) -> dict:
    """One subset at one δ: its response at 1 − δ, central difference, second-order part and the
    ratios above (f are the behavior NLLs; `pred` = metagrad's −δ Σ ∂f/∂w over the subset)."""
    central = (f_minus - f_plus) / 2
    second = (f_minus + f_plus) / 2 - f0
    return {
        "delta": delta,
        "response": f_minus - f0,
        "central": central,
        "second": second,
        "ratio": abs(second) / abs(central) if central else float("inf"),
        "pred": pred,
        "pred_over_central": pred / central if central else float("nan"),
    }


def summarize(rows: list[dict], ladder: tuple[float, ...]) -> list[dict]:
    """Per δ: median and largest ratio, and the range and median of metagrad / central."""
    import numpy as np

    out = []
    for d in ladder:
        at = [r for r in rows if r["delta"] == d]
        ratio = np.array([r["ratio"] for r in at])
        pc = np.array([r["pred_over_central"] for r in at])
        out.append(
            {
                "delta": d,
                "median_ratio": float(np.median(ratio)),
                "max_ratio": float(ratio.max()),
                "pred_over_central_median": float(np.nanmedian(pc)),
                "pred_over_central_min": float(np.nanmin(pc)),
                "pred_over_central_max": float(np.nanmax(pc)),
            }
        )
    return out


def probe_seed(
    scale: str,
    seed: int,
    cache: str,
    ladder: tuple[float, ...],
    n_subsets: int,
    states: str = "replayed",
) -> dict:
    """Every figure of one seed (module docstring). Runs in a worker process. `states`: where
    metagrad's segments restart (see `--states`)."""
    import numpy as np
    import torch

    from bt_core.artifacts.store import ArtifactStore
    from bt_core.config import get_scale
    from bt_core.counterfactual.metagrad import LoggedStream, metagradient
    from bt_core.counterfactual.plan import measure_step, plan
    from bt_core.counterfactual.replay import replay_model
    from bt_core.pipeline import build_run
    from bt_core.training.behavior import behavior_nll, measure_examples
    from bt_core.training.model import torch_threads

    t0 = time.perf_counter()
    s = get_scale(scale)
    cfg = s.run.with_seed(seed)
    run = build_run(ArtifactStore(Path(cache)), cfg)
    cf = s.counterfactual
    t_measure = measure_step(run.config)
    ex = measure_examples(run.task, run.codec, cf)
    judged = [sp for sp in plan(run.rollouts, run.config, cf) if sp.name.startswith("reweight_")]
    judged = judged[:n_subsets]
    logged = np.asarray(run.rollouts.advantage, np.float64)
    keep = np.ones(len(run.rollouts), bool)

    def nll(rows: np.ndarray | None = None, w: float = 1.0) -> float:
        adv = logged.copy()
        if rows is not None:
            adv[rows] *= w
        model = replay_model(run, keep, adv, 0, t_measure, dtype=torch.float64)
        return behavior_nll(model, ex, run.codec.pad_id)

    with torch_threads(1):
        t1 = time.perf_counter()
        stream = LoggedStream(
            run.rollouts,
            run.codec,
            run.model_at,
            run.optimizer_at,
            tuple(run.checkpoint_steps),
            run.config.grpo.grad_clip,
        )
        dfdw = metagradient(stream, ex, t_measure, dtype=torch.float64, states=states)["dfdw"]
        t2 = time.perf_counter()
        f0 = nll()
        rows = []
        for sp in judged:
            g = float(dfdw[sp.removed].sum())
            for d in ladder:
                fig = subset_figures(f0, nll(sp.removed, 1 - d), nll(sp.removed, 1 + d), d, -d * g)
                rows.append({"subset": sp.name, **fig})
        t3 = time.perf_counter()
    summary = summarize(rows, ladder)
    return {
        "scale": scale,
        "seed": seed,
        "measure_step": t_measure,
        "n_subsets": len(judged),
        "subset_size": int(judged[0].removed.size) if judged else 0,
        "f0": f0,
        "per_delta": summary,
        "radius": radius(summary),
        "ratio_bar": RATIO_BAR,
        "states": states,
        "subsets": rows,
        "replays": 1 + 2 * len(judged) * len(ladder),
        "seconds": {
            "load": round(t1 - t0, 1),
            "metagrad": round(t2 - t1, 1),
            "replays": round(t3 - t2, 1),
            "total": round(time.perf_counter() - t0, 1),
        },
    }


def _job(args: tuple) -> dict:
    return probe_seed(*args)


def table(records: list[dict]) -> str:
    """One row per seed and δ."""
    rows = []
    for r in sorted(records, key=lambda r: r["seed"]):
        for d in r["per_delta"]:
            rows.append(
                [
                    r["seed"],
                    f"{d['delta']:g}",
                    f"{d['median_ratio']:.4f}",
                    f"{d['max_ratio']:.4f}",
                    f"{d['pred_over_central_median']:.3f}",
                    f"[{d['pred_over_central_min']:.3f}, {d['pred_over_central_max']:.3f}]",
                    "-" if r["radius"] is None else f"{r['radius']:g}",
                ]
            )
    head = [
        "seed",
        "δ",
        "median |2nd|/|central|",
        "largest",
        "metagrad/central (median)",
        "(range)",
        f"radius (ratio ≤ {RATIO_BAR:g})",
    ]
    return tabulate(rows, headers=head)


def _delta(text: str) -> float:
    d = float(text)
    if not 0 < d < 1:
        raise argparse.ArgumentTypeError(f"δ={text} must lie in (0, 1): the weights are 1 ± δ")
    return d


def main(argv: list[str] | None = None) -> int:
    from bt_core.config import SCALES, get_scale

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--scale", default="smoke", choices=sorted(SCALES), help="preset (smoke)")
    p.add_argument("--seeds", type=int, nargs="+", default=None, help="seeds (the preset's)")
    p.add_argument(
        "--subsets",
        type=int,
        default=4,
        help="judged subsets probed per seed, the plan's first (4)",
    )
    p.add_argument(
        "--ladder", type=_delta, nargs="+", default=list(LADDER), help="δ values (1e-2 1e-3 1e-4)"
    )
    p.add_argument("--workers", type=int, default=2, help="seeds probed at once (2)")
    p.add_argument(
        "--states",
        choices=("replayed", "stored"),
        default="replayed",
        help="where metagrad's segments restart: replayed (one float64 sweep from step 0, as the "
        "replays run and the estimator does at smoke and default) or stored (each stored float32 "
        "checkpoint, as at real scale) (replayed)",
    )
    p.add_argument(
        "--bt-cache",
        default=str(default_cache_dir()),
        help="artifact cache for the runs (default: $BEHAVIORTRACE_CACHE, else the per-user cache)",
    )
    p.add_argument("--json", type=Path, default=None, help="write every seed's record here")
    p.add_argument("--jsonl", type=Path, default=None, help="append each seed's record as it ends")
    args = p.parse_args(argv)
    if args.subsets < 1:
        p.error(f"--subsets={args.subsets}: probe at least one subset per seed")
    if args.workers < 1:
        p.error(f"--workers={args.workers}: at least one process is needed")
    seeds = args.seeds if args.seeds is not None else list(get_scale(args.scale).seeds)
    ladder = tuple(sorted(set(args.ladder), reverse=True))
    n = 1 + 2 * args.subsets * len(ladder)
    print(
        f"linearity probe: {args.scale}, seeds {seeds}, {args.subsets} subsets × δ "
        f"{', '.join(f'{d:g}' for d in ladder)} × (1 ± δ): {n} float64 replays and one metagrad "
        f"per seed, {args.workers} process(es)",
        flush=True,
    )
    jobs = [(args.scale, s, args.bt_cache, ladder, args.subsets, args.states) for s in seeds]
    records = []
    ctx = mp.get_context("spawn")
    with ctx.Pool(min(args.workers, len(jobs))) as pool:
        for rec in pool.imap_unordered(_job, jobs):
            records.append(rec)
            print(
                f"seed {rec['seed']} done in {rec['seconds']['total']} s "
                f"(metagrad {rec['seconds']['metagrad']} s, {rec['replays']} replays "
                f"{rec['seconds']['replays']} s); radius "
                f"{'below the ladder' if rec['radius'] is None else format(rec['radius'], 'g')}",
                flush=True,
            )
            if args.jsonl:
                with args.jsonl.open("a") as f:
                    f.write(json.dumps(rec) + "\n")
    print(table(records))
    if args.json:
        args.json.write_text(json.dumps(records, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
