r"""Replay benchmark: counterfactual replays per minute per core, and what a seed's replays cost.

    python benchmarks/bench_replay.py --scale smoke
    python benchmarks/bench_replay.py --scale default --seeds 0 --repeats 3 --bt-cache /tmp/bt \
        --json out.json

For each seed the run is built or loaded through the cache (training is not timed), then `--repeats`
replays of each kind in the seed's plan (`bt_core.counterfactual.plan.plan`) are run in this process
with the preset's thread count (1): a local subset (5% of the trained window removed, float32, every
step from 0 replayed), a judged reweighting (the same rows at weight 1 − δ, float64 from step 0),
leave-GT-out, one equal-size random removal and no-bonus (advantages recomputed). The figures are
the process CPU seconds per replay (on a loaded machine the quiet wall time of a single-threaded
run) and replays/min/core = 60 / CPU s; the seed's total (on the reweighting's row) prices each
float32 replay of the plan at the local subset's cost and each float64 one at the reweighting's
(the plan is dominated by those two kinds). The replay ÷
logged-training-update ratio compares a replay's CPU time with the run's own GRPO update time over
the same steps (from its summary). Not a pytest file: nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from tabulate import tabulate

from bt_core.artifacts.cacheroot import default_cache_dir

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bt_core.artifacts.store import ArtifactStore  # noqa: E402
from bt_core.config import get_scale  # noqa: E402
from bt_core.counterfactual.plan import plan  # noqa: E402
from bt_core.counterfactual.replay import replay  # noqa: E402
from bt_core.pipeline import build_run  # noqa: E402

KINDS = ("local_0", "reweight_0", "gt_out", "random_0", "no_bonus")


def bench_seed(scale: str, seed: int, cache: str, repeats: int) -> list[dict]:
    s = get_scale(scale)
    run = build_run(ArtifactStore(cache), s.run.with_seed(seed))
    specs = {sp.name: sp for sp in plan(run.rollouts, run.config, s.counterfactual)}
    upd_per_step = run.summary["timings"]["s_per_step_update"]
    n64 = sum(sp.dtype == "float64" for sp in specs.values())
    rows, cost = [], {}
    for kind in KINDS:
        cpu, wall = [], []
        for _ in range(repeats):
            t0, c0 = time.perf_counter(), time.process_time()
            fig, _ = replay(run, specs[kind], s.counterfactual)
            wall.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        c = cost[kind] = min(cpu)  # the least disturbed repeat
        total = (len(specs) - n64) * cost.get("local_0", 0.0) + n64 * c
        rows.append(
            {
                "scale": scale,
                "seed": seed,
                "replay": kind,
                "removed": int(specs[kind].removed.size),
                "steps": fig["steps_replayed"],
                "cpu_s": round(c, 3),
                "wall_s": round(min(wall), 3),
                "replays_per_min_core": round(60.0 / c, 1),
                "replay/update": round(
                    c / max(upd_per_step * max(fig["steps_replayed"], 1), 1e-9), 2
                ),
                "plan_replays": len(specs),
                "seed_total_cpu_s": round(total, 1) if kind == "reweight_0" else None,
            }
        )
        print(" ".join(f"{k}={v}" for k, v in rows[-1].items()), file=sys.stderr, flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--scale", default="smoke", choices=["smoke", "default"], help="preset (default: smoke)"
    )
    p.add_argument("--seeds", type=int, nargs="+", default=[0], help="seeds (default: 0)")
    p.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="replays of each kind; the fastest counts (default: 3)",
    )
    p.add_argument(
        "--bt-cache",
        default=str(default_cache_dir()),
        help="artifact cache for the runs (default: $BEHAVIORTRACE_CACHE, else the per-user cache)",
    )
    p.add_argument("--json", metavar="PATH", default=None, help="also write the rows as JSON here")
    args = p.parse_args(argv)
    rows = [
        r for seed in args.seeds for r in bench_seed(args.scale, seed, args.bt_cache, args.repeats)
    ]
    cols = list(rows[0])
    print(tabulate([[r[k] for k in cols] for r in rows], headers=cols))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
