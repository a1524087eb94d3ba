r"""Suite cost benchmark: the sketch's throughput, the suite's peak memory and time, the cold build
per stage.

    python benchmarks/bench_suite.py --bt-cache .bt_cache  # sketch + stages + cosine warm
    python benchmarks/bench_suite.py --bt-cache .bt_cache --suite all  # every built-in (minutes)
    python benchmarks/bench_suite.py --bt-cache /tmp/empty --suite all \
        --cold  # the cold build (~20 CPU-min)

What it measures (issue 25's four figures), each against a reference measured in the same run where
one exists, and against its target otherwise:

1. **sketch**: `behaviortrace bench-sketch`'s CountSketch ÷ bare per-rollout backward,
   `--sketch-runs` times (each run interleaves the two on the same batches; the CPU clock); the
   median and the spread.
   Target ≥ 0.9.
2. **suite memory**: `pytest benchmarks` in a child process on `--bt-cache`; its peak resident set
   (the largest process's ``ru_maxrss``, what ``/usr/bin/time -v`` reports). Target < 2 GB (2048
   MiB). Estimators score in worker processes (one per estimator, alive all session), so the
   process tree is also sampled (`/proc`, every 0.25 s): the largest process, and the peak of the
   tree's summed RSS and summed PSS (shared pages, such as one sketch map read by several workers,
   counted once). On a warm cache this is the memory of judging; on a cold one, of building too.
3. **suite time**: the same child's wall time and CPU seconds (user + sys). CPU seconds do not
   depend on how busy the machine is; wall does — so the load average before and after is printed
   with it.
   Target for ``--suite cosine`` on a warm cache: ≤ 20 s wall on 2 idle cores.
4. **stages**: the cache's build log (``builds.jsonl``: CPU s, wall s and peak RSS of every build,
   written by the store) summed per artifact kind, counting only builds whose artifact is in the
   cache now.
   On 2 idle cores the build keeps both busy (`bt_core.pipeline`), so CPU s ÷ 2 is the floor of its
   wall time.
   Target for the cold default ≤ 10 min on 2 idle cores.

Not a pytest file: nothing here asserts a timing; it prints a table (and ``--json PATH`` writes it).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from tabulate import tabulate

from bt_core.artifacts.cacheroot import default_cache_dir

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SUITES = {"cosine": ["--estimator=cosine"], "trak": ["--estimator=trak"], "all": []}
TARGETS = {
    "sketch_ratio": 0.9,
    "peak_rss_mib": 2048,
    "cosine_warm_wall_s": 20.0,
    "cold_wall_s": 600.0,
}


def load() -> float:
    """The 1-minute load average (how many runnable processes shared the cores)."""
    return round(os.getloadavg()[0], 2)


def _tree(root: int) -> list[int]:
    """`root` and its descendants (from /proc/*/stat)."""
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):  # it ended while being read
                continue
            kids.setdefault(ppid, []).append(int(d))
    out, todo = [], [root]
    while todo:
        out.append(todo.pop())
        todo += kids.get(out[-1], [])
    return out


def _kib(path: str, field: str) -> int:
    try:
        with open(path) as f:
            return next((int(ln.split()[1]) for ln in f if ln.startswith(field)), 0)
    except OSError:
        return 0


class TreeSampler(threading.Thread):
    """Peak resident memory of a process tree, sampled every `period` s from /proc (Linux): the
    largest process's RSS, the tree's summed RSS and summed PSS (proportional set size: a page
    shared by m processes counts 1/m in each), and how many processes it had at most."""

    def __init__(self, root: int, period: float = 0.25):
        super().__init__(daemon=True)
        self.root, self.period, self.done = root, period, threading.Event()
        self.peak = {"max_process_mib": 0.0, "sum_rss_mib": 0.0, "sum_pss_mib": 0.0, "procs": 0}

    def run(self) -> None:
        while not self.done.is_set() and os.path.exists(f"/proc/{self.root}"):
            pids = _tree(self.root)
            rss = [_kib(f"/proc/{p}/status", "VmRSS") / 1024 for p in pids]
            pss = sum(_kib(f"/proc/{p}/smaps_rollup", "Pss:") for p in pids) / 1024
            for key, v in (
                ("max_process_mib", max(rss, default=0.0)),
                ("sum_rss_mib", sum(rss)),
                ("sum_pss_mib", pss),
                ("procs", len(pids)),
            ):
                self.peak[key] = max(self.peak[key], round(v, 1))
            self.done.wait(self.period)

    def stop(self) -> dict:
        self.done.set()
        self.join()
        return dict(self.peak)


def sketch_ratios(runs: int, k: int, batches: int) -> dict:
    """CountSketch ÷ bare of `runs` bench-sketch runs (each interleaved, CPU clock): median and
    spread."""
    from bt_core.gradients.bench import bench_sketch

    ratios, projection = [], []
    for _ in range(runs):
        r = bench_sketch(k=k, n_batches=batches, slow=False)
        ratios.append(round(r["countsketch"] / r["bare_backward"], 3))
        projection.append(r["ratios"]["countsketch_projection_time_over_bare"])
    return {
        "ratios": ratios,
        "median": statistics.median(ratios),
        "min": min(ratios),
        "max": max(ratios),
        "projection_only_over_bare": statistics.median(projection),
        "k": k,
        "n_params": r["n_params"],
        "target": TARGETS["sketch_ratio"],
        "load": load(),
    }


def suite_cost(cache: str, suite: str, scale: str, out: Path) -> dict:
    """Run `pytest benchmarks` (the `suite`'s estimators) in a child process: wall, CPU s, peak
    RSS. On a cache that already holds runs this is judging's cost ("warm"); else building too."""
    warm = (Path(cache) / "runs").is_dir() and any((Path(cache) / "runs").iterdir())
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        str(ROOT / "benchmarks"),
        "-q",
        "-p",
        "no:cacheprovider",
        f"--bt-cache={cache}",
        # the suite's own default build workers (one per core, at most one per seed): a cold
        # measurement is of what `pytest benchmarks` does (with one worker it took twice as long)
        f"--scale={scale}",
        f"--scorecard={out / 'scorecard.json'}",
        *SUITES[suite],
    ]
    before, t0 = load(), time.perf_counter()
    with subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT
    ) as child:
        tree = TreeSampler(child.pid) if os.path.isdir("/proc") else None
        if tree is not None:
            tree.start()
        stdout, _ = child.communicate()
    wall = time.perf_counter() - t0
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)  # this process waits for no other child
    tail = [line for line in stdout.splitlines() if line.strip()][-1:]
    return {
        "suite": suite,
        "scale": scale,
        "cache": "warm: judging only" if warm else "cold: building and judging",
        "exit": child.returncode,
        "wall_s": round(wall, 1),
        "cpu_s": round(ru.ru_utime + ru.ru_stime, 1),
        "peak_rss_mib": round(ru.ru_maxrss / 1024, 1),
        "tree": tree.stop() if tree is not None else None,
        "load_before": before,
        "load_after": load(),
        "summary": tail[0] if tail else "",
        "scorecard": str(out / "scorecard.json"),
    }


def stage_table(cache: str) -> list[dict]:
    """Per artifact kind: builds, CPU s, wall s (summed) and the highest peak RSS, from
    `builds.jsonl`, counting only builds whose artifact directory exists (a rebuilt key's earlier
    lines are not double counted: the last line of a key wins)."""
    log = Path(cache) / "builds.jsonl"
    if not log.exists():
        raise SystemExit(
            f"{log} does not exist: build the cache first (pytest benchmarks --bt-cache {cache})"
        )
    last: dict[tuple, dict] = {}
    for line in log.read_text().splitlines():
        b = json.loads(line)
        if (Path(cache) / b["kind"] / b["key"]).is_dir():
            last[(b["kind"], b["key"])] = b
    rows: dict[str, dict] = {}
    for b in last.values():
        r = rows.setdefault(
            b["kind"],
            {"stage": b["kind"], "builds": 0, "cpu_s": 0.0, "wall_s": 0.0, "peak_rss_mib": 0.0},
        )
        r["builds"] += 1
        r["cpu_s"] += b.get("cpu_s", 0.0)
        r["wall_s"] += b.get("build_s", 0.0)
        r["peak_rss_mib"] = max(r["peak_rss_mib"], b.get("peak_rss_mb", 0.0))
    total = {
        "stage": "total",
        "builds": sum(r["builds"] for r in rows.values()),
        "cpu_s": sum(r["cpu_s"] for r in rows.values()),
        "wall_s": sum(r["wall_s"] for r in rows.values()),
        "peak_rss_mib": max((r["peak_rss_mib"] for r in rows.values()), default=0.0),
    }
    out = [*rows.values(), total]
    for r in out:
        r["cpu_s"], r["wall_s"] = round(r["cpu_s"], 1), round(r["wall_s"], 1)
        r["idle_2core_floor_s"] = round(r["cpu_s"] / 2, 1)
    return out


def report(res: dict) -> str:
    """The figures as tables, each with its target."""
    parts = []
    if "sketch" in res:
        s = res["sketch"]
        parts.append(
            f"sketch: CountSketch ÷ bare = {s['median']} (median of {len(s['ratios'])}: "
            f"{s['ratios']}; projection alone {s['projection_only_over_bare']} of bare; k = "
            f"{s['k']}, {s['n_params']:,} parameters; load {s['load']}) — target ≥ {s['target']}"
        )
    if "suite" in res:
        s = res["suite"]
        parts.append(
            f"suite {s['suite']} ({s['scale']}, {s['cache']}): {s['wall_s']} s wall, "
            f"{s['cpu_s']} CPU-s, peak "
            f"RSS {s['peak_rss_mib']} MiB ({s['peak_rss_mib'] / TARGETS['peak_rss_mib']:.2f} of "
            f"the 2 GiB target); load {s['load_before']} → {s['load_after']}; exit {s['exit']}: "
            f"{s['summary']}"
        )
        if s.get("tree"):
            t = s["tree"]
            parts.append(
                f"suite {s['suite']} process tree (sampled): largest process {t['max_process_mib']}"
                f" MiB, summed RSS {t['sum_rss_mib']} MiB, summed PSS {t['sum_pss_mib']} MiB "
                f"({t['sum_pss_mib'] / TARGETS['peak_rss_mib']:.2f} of the target), up to "
                f"{t['procs']} processes"
            )
    if "stages" in res:
        cols = list(res["stages"][0])
        parts.append(
            "build stages (builds.jsonl):\n"
            + tabulate([[r[c] for c in cols] for r in res["stages"]], headers=cols)
        )
    return "\n\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--bt-cache",
        default=str(default_cache_dir()),
        help="artifact cache the suite runs on (default: $BEHAVIORTRACE_CACHE, else per-user)",
    )
    p.add_argument(
        "--suite",
        choices=[*SUITES, "none"],
        default="cosine",
        help="which estimators the timed pytest session judges (default: cosine; none: skip it)",
    )
    p.add_argument("--scale", default="default", help="the suite's scale (default: default)")
    p.add_argument(
        "--cold", action="store_true", help="refuse a cache that already holds runs (a cold build)"
    )
    p.add_argument(
        "--sketch-runs",
        type=int,
        default=3,
        metavar="N",
        help="bench-sketch runs for the ratio, 0 to skip (default: 3)",
    )
    p.add_argument("--k", type=int, default=8192, help="bench-sketch width (default: 8192)")
    p.add_argument("--batches", type=int, default=2, help="bench-sketch batches of 64 (default: 2)")
    p.add_argument(
        "--out", default="bench_suite_out", help="folder for the timed session's scorecard"
    )
    p.add_argument(
        "--json", metavar="PATH", default=None, help="also write the figures as JSON here"
    )
    args = p.parse_args(argv)
    if args.cold and (Path(args.bt_cache) / "runs").exists():
        raise SystemExit(
            f"--cold: {args.bt_cache} already holds runs; give an empty or new directory"
        )
    res: dict = {}
    if args.sketch_runs > 0:
        res["sketch"] = sketch_ratios(args.sketch_runs, args.k, args.batches)
    if args.suite != "none":
        res["suite"] = suite_cost(args.bt_cache, args.suite, args.scale, Path(args.out).resolve())
    if (Path(args.bt_cache) / "builds.jsonl").exists():
        res["stages"] = stage_table(args.bt_cache)
    print(report(res))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
