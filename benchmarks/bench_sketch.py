r"""Sketch-stage benchmark script (not a pytest module): throughput, inner-product error, coverage,
scale.

    python benchmarks/bench_sketch.py  # throughput + error table on the default model at init
    python benchmarks/bench_sketch.py --run RUN_DIR \
        --sketch-out /tmp/sk  # + coverage and the full-seed sketch

Sections (all printed as tables, all written to --out as JSON):

1. throughput (`bt_core.gradients.bench.bench_sketch`): rollouts/s of the bare batched per-rollout
   backward,
   + CountSketch,
   + dense projection, + traker's BasicProjector, on the same batches; ratios against the targets
   (CountSketch ≥ 20× traker at k = 8192; projection overhead ≤ 25% of the bare backward).
2. inner-product error vs exact on real per-rollout gradients, CountSketch and dense at each k of
   --ks.
3. coverage (needs --run): CountSketch must pass; the broken first-k projector and the broken
   Linear-only hook path must fail.
4. full-seed sketch (needs --run and --sketch-out): `sketch_run` of every rollout at --k in a child
   process; wall time and the child's peak resident memory.

Absolute rates depend on the machine and its load; read the ratios.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import resource
import shutil
import sys
import time
from pathlib import Path

from tabulate import tabulate

from bt_core.gradients.bench import bench_sketch, workload
from bt_core.gradients.coverage import coverage_report, fidelity, format_report
from bt_core.gradients.pergrad import HookGrads, LinearOnlyHooks
from bt_core.gradients.projectors import CountSketch, DenseProjector, FirstK
from bt_core.training.model import torch_threads

TARGET_CS_OVER_TRAKER, TARGET_OVERHEAD = 20.0, 0.25


def throughput(args) -> dict:
    res = bench_sketch(
        k=args.k,
        batch_size=args.batch_size,
        n_batches=args.batches,
        repeats=args.repeats,
        run_dir=args.run,
        clock=args.clock,
    )
    bare = res["bare_backward"]
    print(
        f"\n## Throughput at k = {args.k} (rollouts/s by {res['clock']} clock, "
        f"{res['n_rollouts']} rollouts, n_params = {res['n_params']})"
    )
    print(
        tabulate(
            [
                [m, res[m], None if res[m] is None else round(res[m] / bare, 4)]
                for m in (
                    "bare_backward",
                    "countsketch",
                    "dense",
                    "traker",
                    "vmap_backward",
                    "loop_backward",
                )
            ],
            headers=["method", "rollouts/s", "÷ bare"],
            tablefmt="github",
        )
    )
    r = res["ratios"]
    print(
        tabulate(
            [
                [
                    "countsketch ÷ traker",
                    r["countsketch_over_traker"],
                    f"≥ {TARGET_CS_OVER_TRAKER}",
                ],
                [
                    "countsketch overhead vs bare",
                    r["countsketch_overhead_vs_bare"],
                    f"≤ {TARGET_OVERHEAD}",
                ],
                ["countsketch ÷ dense", r["countsketch_over_dense"], ""],
                ["hooks ÷ vmap (bare engines)", r["hooks_over_vmap"], ""],
                ["hooks ÷ loop of single backwards", r["hooks_over_loop"], ""],
                [
                    "CountSketch alone: time ÷ bare time",
                    r["countsketch_projection_time_over_bare"],
                    "",
                ],
            ],
            headers=["ratio", "measured", "target"],
            tablefmt="github",
        )
    )
    return res


def error_table(args) -> list[dict]:
    with torch_threads(1):
        model, batches = workload(64, 1, args.run)
        flat, _ = HookGrads()(model, batches[0])
        n = flat.shape[1]
        rows = []
        for k in args.ks:
            for proj in (CountSketch(n, k, 0), DenseProjector(n, k, 0)):
                rows.append({"projector": proj.name, "k": k, **fidelity(flat, proj)})
    print(
        f"\n## Inner-product error vs exact ({rows[0]['n_rollouts']} real rollout gradients, all "
        "pairs)"
    )
    cols = [
        "projector",
        "k",
        "median_norm2_rel_err",
        "mean_abs_cos_err",
        "max_abs_cos_err",
        "mean_ip_err",
        "max_ip_err",
        "tolerance",
        "ok",
    ]
    print(tabulate([[r[c] for c in cols] for r in rows], headers=cols, tablefmt="github"))
    return rows


def coverage(args) -> dict:
    from bt_core.training.checkpoints import TrainedRun as Run

    run = Run(Path(args.run))
    n = sum(p.numel() for p in run.model_at(0).parameters())
    cases = {
        "countsketch + hooks": (CountSketch(n, args.k), HookGrads()),
        "first_k + hooks (broken)": (FirstK(n, args.k), HookGrads()),
        "countsketch + linear-only hooks (broken)": (CountSketch(n, args.k), LinearOnlyHooks()),
    }
    out = {}
    with torch_threads(1):
        for name, (proj, engine) in cases.items():
            out[name] = coverage_report(run, proj, run.rollouts, engine=engine)
            print(f"\n## Coverage: {name}\n{format_report(out[name])}")
    print(
        tabulate(
            [
                [
                    c,
                    r["ok"],
                    all(t["ok"] for t in r["token_rows"].values()),
                    r["parameters"]["ok"],
                    r["gradient_path"]["ok"],
                    r["fidelity"]["ok"],
                ]
                for c, r in out.items()
            ],
            headers=["case", "ok", "token rows", "parameter tensors", "gradient path", "fidelity"],
            tablefmt="github",
        )
    )
    return out


def _sketch_child(run_dir: str, out: str, k: int, q) -> None:
    from bt_core.config import SketchConfig
    from bt_core.gradients.sketch import sketch_run
    from bt_core.training.checkpoints import TrainedRun as Run

    t0 = time.perf_counter()
    res = sketch_run(Run(Path(run_dir)), SketchConfig(k=k), Path(out))
    q.put(
        {"wall_s": round(time.perf_counter() - t0, 2), **res["summary"], "timings": res["timings"]}
    )


def full_sketch(args) -> dict:
    out = Path(args.sketch_out)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    ctx = mp.get_context("spawn")  # a fresh process, so its peak memory is the sketch stage's own
    q = ctx.Queue()
    p = ctx.Process(target=_sketch_child, args=(args.run, str(out), args.k, q))
    p.start()
    res = q.get()
    p.join()
    res["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1)
    print(f"\n## Full-seed sketch at k = {args.k}")
    print(
        tabulate(
            [[k, v] for k, v in res.items() if k != "timings"] + list(res["timings"].items()),
            headers=["field", "value"],
            tablefmt="github",
        )
    )
    return res


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--k",
        type=int,
        default=8192,
        metavar="K",
        help="width for throughput/coverage (default 8192)",
    )
    p.add_argument(
        "--ks",
        type=int,
        nargs="+",
        default=[512, 2048, 8192],
        metavar="K",
        help="widths of the error table (default: 512 2048 8192)",
    )
    p.add_argument(
        "--batch-size", type=int, default=64, metavar="B", help="rollouts per batch (default 64)"
    )
    p.add_argument(
        "--batches",
        type=int,
        default=2,
        metavar="N",
        help="batches in the throughput run (default 2)",
    )
    p.add_argument(
        "--repeats", type=int, default=5, metavar="R", help="passes of the fast methods (default 5)"
    )
    p.add_argument(
        "--clock", default="cpu", choices=["cpu", "wall"], help="timing clock (default cpu)"
    )
    p.add_argument(
        "--run",
        default=None,
        metavar="DIR",
        help="a trained run (default: the default model at init)",
    )
    p.add_argument(
        "--sketch-out",
        default=None,
        metavar="DIR",
        help="sketch the whole run into DIR (needs --run)",
    )
    p.add_argument("--out", default=None, metavar="FILE", help="write all results as JSON")
    args = p.parse_args(argv)
    results = {"throughput": throughput(args), "errors": error_table(args)}
    if args.run:
        results["coverage"] = coverage(args)
        if args.sketch_out:
            results["full_sketch"] = full_sketch(args)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
