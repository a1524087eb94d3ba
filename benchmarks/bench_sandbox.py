"""Sandbox benchmark: what scoring in a worker process costs, per estimator and seed, against
in-process.

    python benchmarks/bench_sandbox.py --scale smoke
    python benchmarks/bench_sandbox.py --scale default --bt-cache /tmp/bt --json out.json

One run, one process: the seeds' artifacts are built or loaded through the cache (not timed; the
replays only with `--replays`), then two
sessions score the same problems (each seed's stream at rollout and step level and every draw): an
in-process one and a sandboxed one (bubblewrap where it runs, else the plain subprocess: the table
says which). Each session first scores `random` on every problem ("scratch write": the sandboxed
session writes each problem into its scratch directory then, once; the in-process one only builds
the problems), then each estimator in turn. The figures are wall seconds per estimator and seed (its
first seed includes starting its worker and importing it there) and the ratio sandboxed ÷
in-process; every sandboxed score is checked to be bit-identical to the in-process one. Not a pytest
file: nothing here asserts a timing.
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

from bt_core.attribution.catalog import get  # noqa: E402
from bt_core.attribution.evidence import EstimatorFailure, Evidence  # noqa: E402
from bt_core.config import get_scale  # noqa: E402
from bt_core.pipeline import build_scale  # noqa: E402

ESTIMATORS = (
    "random",
    "norm_only",
    "cosine",
    "dot",
    "tracincp",
    "tracin_adam",
    "trak",
    "local_buffer",
)


def _problems(ev: Evidence, seed: int, n_draws: int) -> list:
    return [
        ev.stream_problem(seed),
        ev.stream_problem(seed, "step"),
        *[ev.draw_problem(seed, d) for d in range(n_draws)],
    ]


def _session(ev: Evidence, names: list[str], seeds: list[int], n_draws: int) -> tuple[dict, dict]:
    """(name → seed → wall s, (name, problem) → score bytes or the failure)."""
    times, scores = {}, {}
    for name in ["random", *names]:
        spec = get(name)
        for seed in seeds:
            t = time.perf_counter()
            for p in _problems(ev, seed, n_draws):
                if p.level not in spec.levels:
                    continue
                try:
                    scores[(name, p.name)] = ev.scores(spec, p).tobytes()
                except EstimatorFailure as e:
                    scores[(name, p.name)] = str(e).split(" (at ")[0]
            times.setdefault(name, {})[seed] = time.perf_counter() - t
    return times, scores


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scale", default="smoke")
    ap.add_argument("--seeds", type=int, nargs="*", default=None)
    ap.add_argument("--estimators", default=",".join(ESTIMATORS))
    ap.add_argument("--bt-cache", default=str(default_cache_dir()))
    ap.add_argument("--json", default=None)
    ap.add_argument(
        "--replays",
        action="store_true",
        help="also build the counterfactual replays (only metagrad reads their measure)",
    )
    args = ap.parse_args(argv)
    s = get_scale(args.scale)
    seeds = args.seeds if args.seeds is not None else list(s.seeds)
    arts = build_scale(s, args.bt_cache, seeds, replays=args.replays)
    names = [n for n in args.estimators.split(",") if n and n != "random"]
    here = Evidence(arts, s.name, scoring="in-process")
    t_in, sc_in = _session(here, names, seeds, s.draws.n_draws)
    there = Evidence(arts, s.name, scoring="sandbox")
    mode = there.scorer.scoring
    try:
        t_sb, sc_sb = _session(there, names, seeds, s.draws.n_draws)
    finally:
        there.close()
    differ = sorted(k for k in sc_in if sc_in[k] != sc_sb.get(k))
    rows, out = (
        [],
        {"scale": s.name, "scoring": mode.record(), "per_estimator": {}, "not_identical": differ},
    )
    for name in ["random", *names]:
        per = {
            seed: {
                "in_process_s": t_in[name][seed],
                "sandboxed_s": t_sb[name][seed],
                "ratio": t_sb[name][seed] / max(t_in[name][seed], 1e-9),
            }
            for seed in seeds
        }
        tot_in, tot_sb = sum(t_in[name].values()), sum(t_sb[name].values())
        out["per_estimator"][name] = {"per_seed": per, "ratio": tot_sb / max(tot_in, 1e-9)}
        label = "random (scratch write)" if name == "random" else name
        rows.append(
            [
                label,
                *[
                    f"{per[x]['in_process_s']:.2f} / {per[x]['sandboxed_s']:.2f} "
                    f"(×{per[x]['ratio']:.1f})"
                    for x in seeds
                ],
                f"×{tot_sb / max(tot_in, 1e-9):.2f}",
            ]
        )
    print(f"scale {s.name}, seeds {seeds}; sandboxed = {mode.mode} ({mode.why})")
    print(
        tabulate(
            rows, headers=["estimator", *[f"seed {x}: in / sandboxed s" for x in seeds], "ratio"]
        )
    )
    print(
        f"bit-identical: {len(sc_in) - len(differ)} of {len(sc_in)} (estimator, problem) scores"
        + (f"; differ: {differ}" if differ else "")
    )
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
