r"""Metagradient benchmark: what the exact metagradient (`metagrad`) costs per seed, beside one
replay of the trained window measured in the same run.

    python benchmarks/bench_metagrad.py --scale smoke --seeds 0 1 2
    python benchmarks/bench_metagrad.py --scale default --seeds 0 1 2 3 4 --bt-cache /tmp/bt \
        --json out.json

For each seed the run and its replays are built or loaded through the cache (not timed). Then, each
in its own fresh process with one torch thread (so that its peak memory is its own): one replay of
the window — the seed's first local subset (`local_0`: 5% of the window removed, every step from 0
replayed, float32, as the suite's removals; `replay_model` and the behavior NLL, without the s_b
generations the suite's replay adds; a half-window subset, the comparator before, replays half the
window's rows and made the ratio look worse than it is against a replay of the logged stream) — the
same replay in float64 (as the judged reweightings run), and the metagradient in float64 (the
estimator's default) and in float32. Figures: process-CPU and wall seconds (the fastest of
`--repeats`), the ratio of metagrad's CPU seconds to the replay's, the split into forward
recomputation and reverse sweep, and the peak resident memory (VmHWM) of the process and its rise
over the RSS after loading the run. Not a pytest file: nothing here asserts a timing.
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


def _mem_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return -1


def _job(scale: str, seed: int, cache: str, what: str, repeats: int, q) -> None:
    """One measurement in a fresh process: `what` = replay | replay64 | float64 | float32."""
    import numpy as np
    import torch

    from bt_core.config import get_scale
    from bt_core.counterfactual.metagrad import LoggedStream, metagradient
    from bt_core.counterfactual.plan import plan
    from bt_core.counterfactual.replay import replay_model
    from bt_core.pipeline import build_scale
    from bt_core.training.behavior import behavior_nll
    from bt_core.training.model import torch_threads

    s = get_scale(scale)
    a = build_scale(s, cache, [seed])[seed]
    run, measure = a.run, a.replays.measure
    rss0 = _mem_kb("VmRSS")
    out = {"cpu": [], "wall": []}
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        if what in ("replay", "replay64"):  # the engine's replay of local_0 and its NLL (no s_b)
            specs = plan(run.rollouts, run.config, s.counterfactual)
            spec = next(sp for sp in specs if sp.name == "local_0")
            keep = np.ones(len(run.rollouts), bool)
            keep[spec.removed] = False
            dt = torch.float64 if what == "replay64" else None
            adv = np.asarray(run.rollouts.advantage, np.float64 if dt else np.float32)
            with torch_threads(run.config.threads):
                model = replay_model(run, keep, adv, 0, measure.step, dtype=dt)
                behavior_nll(model, measure.examples, run.codec.pad_id)
            out["steps"] = measure.step
        else:
            stream = LoggedStream(
                run.rollouts,
                run.codec,
                run.model_at,
                run.optimizer_at,
                tuple(run.checkpoint_steps),
                run.config.grpo.grad_clip,
            )
            with torch_threads(1):
                r = metagradient(stream, measure.examples, measure.step, dtype=getattr(torch, what))
            out.update(
                forward_s=round(r["forward_s"], 3),
                reverse_s=round(r["reverse_s"], 3),
                drift=r["drift"],
                segments=r["segments"],
            )
        out["wall"].append(time.perf_counter() - t0)
        out["cpu"].append(time.process_time() - c0)
    out.update(
        peak_mb=round(_mem_kb("VmHWM") / 1024, 1),
        rise_mb=round((_mem_kb("VmHWM") - rss0) / 1024, 1),
        n_params=sum(p.numel() for p in run.model_at(0).parameters()),
    )
    q.put(out)


def measure(scale: str, seed: int, cache: str, what: str, repeats: int) -> dict:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_job, args=(scale, seed, cache, what, repeats, q))
    p.start()
    out = q.get()
    p.join()
    return out


def bench_seed(
    scale: str, seed: int, cache: str, repeats: int, dtypes: tuple[str, ...]
) -> list[dict]:
    rep = measure(scale, seed, cache, "replay", repeats)
    rep64 = measure(scale, seed, cache, "replay64", repeats)
    rows = []
    for what in dtypes:
        mg = measure(scale, seed, cache, what, repeats)
        rows.append(
            {
                "scale": scale,
                "seed": seed,
                "dtype": what,
                "n_params": mg["n_params"],
                "steps": rep["steps"],
                "replay_cpu_s": round(min(rep["cpu"]), 3),
                "replay_f64_cpu_s": round(min(rep64["cpu"]), 3),
                "metagrad_cpu_s": round(min(mg["cpu"]), 3),
                "metagrad_wall_s": round(min(mg["wall"]), 3),
                "ratio": round(min(mg["cpu"]) / min(rep["cpu"]), 2),
                "forward_s": mg["forward_s"],
                "reverse_s": mg["reverse_s"],
                "drift": mg["drift"],
                "peak_mb": mg["peak_mb"],
                "rise_mb": mg["rise_mb"],
                "replay_peak_mb": rep["peak_mb"],
                "replay_rise_mb": rep["rise_mb"],
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
        "--repeats", type=int, default=2, help="runs of each; the fastest counts (default: 2)"
    )
    p.add_argument(
        "--bt-cache",
        default=str(default_cache_dir()),
        help="artifact cache for the runs (default: $BEHAVIORTRACE_CACHE, else the per-user cache)",
    )
    p.add_argument(
        "--dtypes",
        nargs="+",
        default=["float64", "float32"],
        choices=["float64", "float32"],
        help="metagrad precisions to time (default: float64 float32)",
    )
    p.add_argument("--json", metavar="PATH", default=None, help="also write the rows as JSON here")
    args = p.parse_args(argv)
    rows = [
        r
        for seed in args.seeds
        for r in bench_seed(args.scale, seed, args.bt_cache, args.repeats, tuple(args.dtypes))
    ]
    cols = list(rows[0])
    print(tabulate([[r[k] for k in cols] for r in rows], headers=cols))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
