"""Training benchmark: emergence, ground truth and speed per seed, scenario and backend.

    python benchmarks/bench_train.py --scale default --seeds 0 1 2 3 4
    python benchmarks/bench_train.py --scale smoke --backends native trl --json out.json

Each (scenario, backend, seed) trains once into a fresh temporary directory (no cache) with the
preset's thread count, and the table reports the run's own figures: final s_b, control rate, the
first checkpoint whose sampled behavior rate reaches 0.8 (saturation), the step where greedy s_b
first reached 0.5, |GT|, N, |GT|/N, the wall time and its split (SFT, generation, update, probes;
seconds per GRPO step), and the process CPU time (on a loaded machine it estimates the quiet wall
time of a `threads=1` run).
Ratios between backends are taken within one invocation, so machine load affects both sides alike
(run it on a quiet machine for absolute figures). Not a pytest file: nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path

from tabulate import tabulate

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bt_core.config import SCENARIOS, get_scale  # noqa: E402
from bt_core.training.loop import train_run  # noqa: E402


def bench_one(scale: str, scenario: str, backend: str, seed: int, threads: int | None) -> dict:
    run = get_scale(scale).run.with_seed(seed)
    run = dataclasses.replace(
        run,
        task=dataclasses.replace(run.task, scenario=scenario),
        grpo=dataclasses.replace(run.grpo, backend=backend),
        threads=threads or run.threads,
    )
    with tempfile.TemporaryDirectory() as tmp:
        t0, c0 = time.perf_counter(), time.process_time()
        s = train_run(run, Path(tmp) / "run")["summary"]
        outer, cpu = time.perf_counter() - t0, time.process_time() - c0
    t = s["timings"]
    return {
        "scale": scale,
        "scenario": scenario,
        "backend": backend,
        "seed": seed,
        "s_b_final": s["s_b_final"],
        "control_rate_final": s["control_rate_final"],
        "saturation_step": s["saturation_step"],
        "s_b_crossed_half_step": s["s_b_crossed_half_step"],
        "gt_size": s["gt_size"],
        "n_rollouts": s["n_rollouts"],
        "gt_fraction": s["gt_fraction"],
        "steps": run.grpo.steps,
        "wall_s": round(outer, 2),
        "cpu_s": round(cpu, 2),
        "sft_s": t["sft_s"],
        "generation_s": t["generation_s"],
        "update_s": t["update_s"],
        "probe_s": t["probe_s"],
        "s_per_step_generation": t["s_per_step_generation"],
        "s_per_step_update": t["s_per_step_update"],
        "rollouts_sha256": s["rollouts_sha256"][:12],
    }


COLUMNS = (
    "scenario",
    "backend",
    "seed",
    "s_b_final",
    "control_rate_final",
    "saturation_step",
    "s_b_crossed_half_step",
    "gt_size",
    "n_rollouts",
    "gt_fraction",
    "wall_s",
    "cpu_s",
    "sft_s",
    "s_per_step_generation",
    "s_per_step_update",
)


def _ratios(rows: list[dict]) -> list[list]:
    """TRL / native wall-time and GRPO-time ratios for every (scenario, seed) run with both
    backends."""
    out = []
    by = {(r["scenario"], r["seed"], r["backend"]): r for r in rows}
    for (scen, seed, backend), r in by.items():
        nat = by.get((scen, seed, "native"))
        if backend == "trl" and nat:
            grpo = lambda x: x["generation_s"] + x["update_s"]  # noqa: E731
            out.append(
                [scen, seed, round(r["wall_s"] / nat["wall_s"], 2), round(grpo(r) / grpo(nat), 2)]
            )
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--scale", default="default", choices=["smoke", "default"], help="preset (default: default)"
    )
    p.add_argument(
        "--seeds", type=int, nargs="+", default=None, help="seeds (default: the preset's)"
    )
    p.add_argument(
        "--scenarios",
        nargs="+",
        default=["reference"],
        choices=SCENARIOS,
        help="scenarios (default: reference)",
    )
    p.add_argument(
        "--backends",
        nargs="+",
        default=["native"],
        choices=["native", "trl"],
        help="backends (default: native)",
    )
    p.add_argument(
        "--threads", type=int, default=None, help="torch threads (default: the preset's)"
    )
    p.add_argument("--json", metavar="PATH", default=None, help="also write the rows as JSON here")
    args = p.parse_args(argv)
    seeds = args.seeds if args.seeds is not None else list(get_scale(args.scale).seeds)
    rows = []
    for scenario in args.scenarios:
        for seed in seeds:
            for backend in args.backends:
                rows.append(bench_one(args.scale, scenario, backend, seed, args.threads))
                print(" ".join(f"{k}={rows[-1][k]}" for k in COLUMNS), file=sys.stderr, flush=True)
    print(tabulate([[r[k] for k in COLUMNS] for r in rows], headers=list(COLUMNS)))
    ratios = _ratios(rows)
    if ratios:
        print()
        print(tabulate(ratios, headers=["scenario", "seed", "wall trl/native", "GRPO trl/native"]))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
