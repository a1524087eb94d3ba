r"""The ladder's cost–quality curve (issue 62): every rung from cheap to exact and the cheap
built-ins, judged on one build, with what each costs beside a float64 replay of the window measured
in the same run.

    python benchmarks/bench_ladder.py --scale smoke --out ladder-smoke
    python benchmarks/bench_ladder.py --scale default --bt-cache /tmp/bt --out ladder-default
    python benchmarks/bench_ladder.py --scale default --bt-cache /tmp/bt --rungs --cheap \
        --methods ekfac_kronfluence adamw_influence_dattri dvemb_dattri \
        --with ladder-default/ladder.jsonl --out methods-default

1. **Judged.** One checklist session (`pytest benchmarks`, a subprocess, sandboxed scoring as a
   user gets it) judges `metagrad`, the rungs (`ladder_r0` … `ladder_r4`, R4 with `--k`) and the
   cheap built-ins (`--cheap`) and the field's methods (`--methods`: the library adapters that
   score the stream) on the build in `--bt-cache` (built there first if missing, with the
   user's key), writing `OUT/scorecard.json`.
2. **Costed.** Per seed, each estimator scores the seed's stream in its own fresh process with one
   torch thread, in-process scoring (so that its CPU seconds are its own; its peak memory, VmHWM, is
   the whole process's, torch and the seed's artifacts included: `dot`'s is about that floor);
   beside it, one float64 replay of the window from step 0 (every logged
   rollout kept, as the judged reweightings run) in its own process.
3. **Written.** One JSON line per estimator in `OUT/ladder.jsonl` (appended as each is costed, so a
   cut-off run keeps what it measured): per seed the causal-view LDS with its CI, the share of the
   ideal (LDS / `metagrad`'s LDS), CPU seconds and peak MB, the replay's CPU seconds; the items it
   passed; its cost as a share of `metagrad`'s. And the figure `OUT/ladder.png`: CPU seconds on a
   log axis, share of the ideal on y, one marker per estimator and seed, the replay's cost as a
   line. `--with` adds the rows of an earlier run on the same build (its `ladder.jsonl`) to the
   figure, each placed at its cost as a share of `metagrad`'s in its own run times `metagrad`'s CPU
   seconds in this one: CPU seconds differ from run to run (a busier machine), the in-run share
   does not.

Not a pytest file: nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import subprocess
import sys
import time
from pathlib import Path

from tabulate import tabulate

from bt_core.artifacts.cacheroot import default_cache_dir

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

RUNGS = ("ladder_r0", "ladder_r0c", "ladder_r1", "ladder_r2", "ladder_r3", "ladder_r4")
IDEAL = "metagrad"
CHEAP = ("dot", "tracin_adam")
ITEMS = (
    "magnitude_control",
    "fluency_control",
    "headroom",
    "counterfactual",
    "seed_variance",
    "draw_variance",
)


def _mem_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return -1


def _job(scale: str, seed: int, cache: str, what: str, params: dict, repeats: int, q) -> None:
    """One measurement in a fresh process: `what` an estimator's name, or "replay64"; the fastest
    of `repeats` runs counts (the first pays torch's first-call costs: at smoke, 5–6 CPU-s of
    `metagrad`'s first call against about 1.2 s after it)."""
    import numpy as np
    import torch

    from bt_core.attribution.catalog import get
    from bt_core.attribution.evidence import Evidence
    from bt_core.config import get_scale
    from bt_core.counterfactual.replay import replay_model
    from bt_core.pipeline import build_scale
    from bt_core.training.behavior import behavior_nll
    from bt_core.training.model import torch_threads

    arts = build_scale(get_scale(scale), cache, [seed])
    a = arts[seed]
    cpu = []
    for _ in range(repeats):
        if what == "replay64":
            run, m = a.run, a.replays.measure
            t0 = time.process_time()
            with torch_threads(1):
                adv = np.asarray(run.rollouts.advantage, np.float64)
                keep = np.ones(len(run.rollouts), bool)
                model = replay_model(run, keep, adv, 0, int(m.step), dtype=torch.float64)
                behavior_nll(model, m.examples, run.codec.pad_id)
        else:
            spec = get(what)
            problem = Evidence(arts, scale, scoring="in-process").stream_problem(seed)
            problem = problem.handout(spec.needs)
            est = spec.create(**params)
            t0 = time.process_time()
            with torch_threads(1):
                est.score(problem)
        cpu.append(time.process_time() - t0)
    q.put({"cpu_s": min(cpu), "peak_mb": round(_mem_kb("VmHWM") / 1024, 1)})


def measure(scale: str, seed: int, cache: str, what: str, params: dict, repeats: int = 2) -> dict:
    """`_job` in a fresh spawned process; a process that dies (an exception, the memory killer)
    ends the run with its exit code instead of a wait for ever."""
    import queue

    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_job, args=(scale, seed, cache, what, params, repeats, q))
    p.start()
    while True:
        try:
            out = q.get(timeout=5)
            break
        except queue.Empty:
            if not p.is_alive():
                raise SystemExit(
                    f"costing {what} on seed {seed}: its process ended with exit {p.exitcode} "
                    "before reporting (see its traceback above; -9: killed, often for memory)"
                ) from None
    p.join()
    return out


def judge(scale: str, cache: str, names: list[str], k: int, out: Path, seeds) -> dict:
    """Run the checklist on `names`; the scorecard's records by (estimator, item)."""
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        str(ROOT / "benchmarks"),
        f"--scale={scale}",
        f"--bt-cache={cache}",
        f"--scorecard={out / 'scorecard.json'}",
        "-q",
        "-p",
        "no:cacheprovider",
        *([f"--estimator-param=ladder_r4.k={k}"] if "ladder_r4" in names else []),
        *(f"--estimator={n}" for n in names),
    ]
    if seeds:
        cmd.append("--seeds=" + ",".join(map(str, seeds)))
    print("judging:", " ".join(cmd), file=sys.stderr, flush=True)
    res = subprocess.run(cmd, cwd=ROOT)
    # 1: items failed (the checklist working); 11: some item not judged (its record says why)
    if res.returncode not in (0, 1, 11):
        raise SystemExit(f"the checklist session ended with exit {res.returncode}; see above")
    card = json.loads((out / "scorecard.json").read_text())
    return {(r["estimator"], r["item"]): r for r in card["records"]}


def row(name: str, recs: dict, costs: dict, replay: dict, ideal_cpu: dict) -> dict:
    """One JSON line: the estimator's LDS per seed, share of the ideal, items passed and cost."""
    cf = recs[(name, "counterfactual")]
    spec = cf.get("estimator_spec") or {}
    per = {}
    for s, f in (cf.get("figures") or {}).get("per_seed", {}).items():
        share = f.get("share")
        c = costs.get(int(s), {})
        per[s] = {
            "lds": f.get("lds"),
            "ci": f.get("ci"),
            # the checklist's own share (NaN, here None, where the ideal's LDS is not > 0)
            "share_of_ideal": share if share is not None and share == share else None,
            "cpu_s": round(c["cpu_s"], 3) if c else None,  # None: not costed (--cost-seeds)
            "peak_mb": c.get("peak_mb"),
            "replay_f64_cpu_s": round(replay[int(s)]["cpu_s"], 3) if int(s) in replay else None,
            "cost_share_of_ideal": round(c["cpu_s"] / ideal_cpu[int(s)], 3) if c else None,
        }
    return {
        "estimator": name,
        "params": spec.get("params", {}),
        "items_passed": [i for i in ITEMS if recs.get((name, i), {}).get("status") == "pass"],
        "statuses": {i: recs.get((name, i), {}).get("status") for i in ITEMS},
        "per_seed": per,
    }


def figure(rows: list[dict], replay: dict, path: Path, title: str) -> Path:
    """The ladder's figure (`bt_core.reporting.ladder.plot`, the one the scorecard page draws),
    with the CPU seconds measured here and the float64 replay's median as a line; a seed judged
    but not costed (`--cost-seeds`) is drawn hollow at a costed seed's cost (the middle one)."""
    from bt_core.reporting.ladder import plot, rung_label

    drawn = []
    for r in rows:
        label = rung_label(r["estimator"], r["params"])
        pts = {s: (p["cpu_s"], p["share_of_ideal"]) for s, p in r["per_seed"].items()}
        costed = sorted(x for x, _ in pts.values() if x is not None and x == x)
        # a seed judged but not costed (--cost-seeds): hollow, at a costed seed's cost
        hollow = [s for s, (x, _) in pts.items() if x is None or x != x] if costed else []
        for s in hollow:
            pts[s] = (costed[len(costed) // 2], pts[s][1])
        drawn.append(
            {"label": label or r["estimator"], "rung": label is not None, "points": pts,
             "hollow": hollow}
        )  # fmt: skip
    rep = sorted(v["cpu_s"] for v in replay.values())
    return plot(
        drawn,
        path,
        title,
        "CPU seconds per seed (one core, its own process)",
        vline=(rep[len(rep) // 2], "float64 replay of the window (median)"),
    )


def _prior(p, path: Path | None, seeds, names) -> list[dict]:
    """The rows of an earlier run's `ladder.jsonl` (`--with`) not judged in this one, after checking
    that it judged the same seeds (a clear error otherwise)."""
    if path is None:
        return []
    if not path.is_file():
        p.error(f"--with {path}: no such file (an earlier run's ladder.jsonl)")
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    bad = [r["estimator"] for r in rows if sorted(r.get("seeds", [])) != sorted(seeds)]
    if bad:
        p.error(f"--with {path}: {', '.join(bad)} judged other seeds than {sorted(seeds)}")
    return [r for r in rows if r["estimator"] not in names]


def _rescaled(prior: list[dict], ideal_cpu: dict) -> list[dict]:
    """`prior`'s rows with each seed's CPU seconds its in-run share of `metagrad`'s times this run's
    `metagrad` CPU seconds (`--with`); a seed this run did not cost has none (drawn hollow)."""
    out = []
    for r in prior:
        per = {}
        for s, v in r["per_seed"].items():
            share = v.get("cost_share_of_ideal")
            cpu = ideal_cpu.get(int(s))
            per[s] = {**v, "cpu_s": None if share is None or cpu is None else share * cpu}
        out.append({**r, "per_seed": per})
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--scale", default="smoke", choices=["smoke", "default"])
    p.add_argument("--seeds", type=int, nargs="+", default=None, help="default: the scale's")
    p.add_argument(
        "--bt-cache",
        default=str(default_cache_dir()),
        help="artifact cache (default: $BEHAVIORTRACE_CACHE, else the per-user cache)",
    )
    p.add_argument("--k", type=int, default=1, help="R4's curved checkpoint intervals (default 1)")
    p.add_argument(
        "--rungs", nargs="*", default=list(RUNGS), choices=RUNGS, help="rungs (default: all)"
    )
    p.add_argument(
        "--cheap", nargs="*", default=list(CHEAP), help=f"cheap built-ins (default: {CHEAP})"
    )
    p.add_argument(
        "--methods",
        nargs="*",
        default=[],
        help="the field's methods (library adapters that score the stream), e.g. "
        "ekfac_kronfluence adamw_influence_dattri dvemb_dattri (default: none)",
    )
    p.add_argument(
        "--with",
        dest="prior",
        type=Path,
        default=None,
        help="an earlier run's ladder.jsonl on the same build: its other rows join the figure",
    )
    p.add_argument("--out", type=Path, default=Path("ladder"), help="folder for what it writes")
    p.add_argument(
        "--cost-seeds",
        type=int,
        nargs="+",
        default=None,
        help="seeds to cost, a subset of those judged (default: every judged seed); at default "
        "each seed's costs take about 5 minutes",
    )
    p.add_argument(
        "--repeats", type=int, default=2, help="runs of each cost; the fastest counts (default 2)"
    )
    p.add_argument(
        "--judged",
        type=Path,
        default=None,
        help="a scorecard.json this tool wrote before on the same build: costed, not judged again",
    )
    args = p.parse_args(argv)
    if args.k < 0:
        p.error(f"--k={args.k}: R4's curved intervals are a whole number ≥ 0")
    from bt_core.config import get_scale

    seeds = args.seeds or list(get_scale(args.scale).seeds)
    costed = sorted(set(args.cost_seeds)) if args.cost_seeds else sorted(seeds)
    if not set(costed) <= set(seeds):
        p.error(f"--cost-seeds {costed}: cost only seeds this run judges ({sorted(seeds)})")
    args.out.mkdir(parents=True, exist_ok=True)
    names = [IDEAL, *args.rungs, *args.cheap, *args.methods]
    if args.methods:
        from bt_core.attribution.adapters import ESTIMATORS, INSTALL, installed

        for n in args.methods:
            lib = ESTIMATORS.get(n)
            if lib is not None and not installed(lib):
                p.error(f"--methods {n}: its library is not installed ({INSTALL[lib]})")
    prior = _prior(p, args.prior, seeds, names)
    if args.judged is not None:
        card = json.loads(args.judged.read_text())
        recs = {(r["estimator"], r["item"]): r for r in card["records"]}
    else:
        recs = judge(args.scale, args.bt_cache, names, args.k, args.out, args.seeds)
    where = args.judged or args.out / "scorecard.json"
    missing = sorted({n for n in names if (n, "counterfactual") not in recs})
    if missing:
        p.error(f"{where} has no counterfactual record of {', '.join(missing)}")
    judged = sorted(int(s) for s in recs[(IDEAL, "counterfactual")]["figures"].get("per_seed", {}))
    if judged != sorted(seeds):
        p.error(f"{where} judged seeds {judged}, and this run costs seeds {sorted(seeds)}")
    if "ladder_r4" in names:
        k = (recs[("ladder_r4", "counterfactual")].get("estimator_spec") or {}).get("params", {})
        if k.get("k") != args.k:
            p.error(
                f"{where} judged ladder_r4 with k={k.get('k')}, and this run costs --k {args.k}"
            )
    rep_n = args.repeats
    replay = {s: measure(args.scale, s, args.bt_cache, "replay64", {}, rep_n) for s in costed}
    lines = args.out / "ladder.jsonl"
    rows, ideal_cpu = [], None
    for n in names:  # the ideal first: every line's cost share is against it
        params = {"k": args.k} if n == "ladder_r4" else {}
        costs = {}
        for s in costed:
            costs[s] = measure(args.scale, s, args.bt_cache, n, params, rep_n)
            print(f"{n} seed {s}: {costs[s]}", file=sys.stderr, flush=True)
        ideal_cpu = ideal_cpu or {s: costs[s]["cpu_s"] for s in costed}
        rows.append(row(n, recs, costs, replay, ideal_cpu))
        with lines.open("a") as f:  # as each is costed: a cut-off run keeps what it measured
            line = {"scale": args.scale, "seeds": seeds, "cost_seeds": costed, **rows[-1]}
            f.write(json.dumps(line) + "\n")
    table = [
        [
            r["estimator"],
            " ".join(
                f"{p['lds']:.3f}" if p["lds"] is not None else "—" for p in r["per_seed"].values()
            ),
            " ".join(f"{p['cpu_s']:.2f}" for p in r["per_seed"].values() if p["cpu_s"] is not None),
            " ".join(
                "—" if p["cost_share_of_ideal"] is None else f"{p['cost_share_of_ideal']:.2f}"
                for p in r["per_seed"].values()
            ),
            len(r["items_passed"]),
        ]
        for r in rows
    ]
    print(tabulate(table, headers=["estimator", "LDS per seed", "CPU s", "cost / ideal", "items"]))
    rep = " ".join(f"{replay[s]['cpu_s']:.2f}" for s in costed)
    print(f"float64 replay of the window, CPU s per seed: {rep}")
    fig = figure(
        rows + _rescaled(prior, ideal_cpu),
        replay,
        args.out / "ladder.png",
        f"The ladder at {args.scale}, seeds {seeds}",
    )
    print(f"lines: {lines}\nfigure: {fig}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
