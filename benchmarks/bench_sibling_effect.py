"""Causal-label benchmark: what the draws' causal label (each sibling's one-step effect,
`bt_core.counterfactual.sibling_effect`) costs per seed, beside the rest of a draw's build.

    python benchmarks/bench_sibling_effect.py --scale smoke --seeds 0 1 2
    python benchmarks/bench_sibling_effect.py --scale default --seeds 0 1 2 3 4 --bt-cache /tmp/bt

For each seed the artifacts are built or loaded through the cache (not timed); then, with one torch
thread, the effects of draw 0's siblings are recomputed (`causal_label`, as the draw build calls it)
and timed in process-CPU and wall seconds, the fastest of `--repeats`. Per seed: the CPU seconds of
one draw, the draws per seed, their product (the label's CPU cost per seed), and the draw build's
own CPU seconds from its manifest (sampling, sketching and the label together) for scale. CPU
seconds are the figure to read on a shared machine: wall time there measures the neighbours. Not a
pytest file: nothing here asserts a timing.
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


def measure(scale: str, seed: int, cache: str, repeats: int) -> dict:
    import numpy as np

    from bt_core.config import get_scale
    from bt_core.draws.build import causal_label
    from bt_core.pipeline import build_scale
    from bt_core.training.model import torch_threads

    s = get_scale(scale)
    a = build_scale(s, cache, [seed])[seed]
    d = a.draws[0]
    cpu, wall = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        with torch_threads(1):
            out = causal_label(a.run, d.analysis_step, d.rollouts, s.counterfactual)
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    same = bool(np.array_equal(out["effect"], np.asarray(d.effect)))
    manifest = json.loads((Path(cache) / "draws" / a.keys["draw0"] / "manifest.json").read_text())
    n_draws = len(a.draws)
    per = 1e3 * min(cpu) / len(d.rollouts)
    return {
        "seed": seed,
        "siblings": len(d.rollouts),
        "cpu_s": round(min(cpu), 3),
        "wall_s": round(min(wall), 3),
        "ms_per_sibling": round(per, 2),
        "draws": n_draws,
        "cpu_s_per_seed": round(n_draws * min(cpu), 2),
        "draw_build_cpu_s": manifest.get("cpu_s"),
        "equals_stored": same,
        "audit": out["audit"]["sign_agreement"],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", default="smoke")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--bt-cache", default=str(default_cache_dir()))
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--json", help="also write the rows to this file")
    args = ap.parse_args(argv)
    rows = [measure(args.scale, s, args.bt_cache, args.repeats) for s in args.seeds]
    print(tabulate([list(r.values()) for r in rows], headers=list(rows[0])))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
