"""The `behaviortrace` command line.

behaviortrace check [--estimator=NAME|module:Class] [--scale smoke|default] [any pytest/suite
    option]
                                                     run the installed checklist suite (the gate's
                                                     exit code)
behaviortrace estimators [--json]                    list registered estimators
behaviortrace train --scale default --seed 3 --out DIR   train one planted-behavior run
    [--scenario reference|task_reward|no_std_norm|hidden_cause] [--backend native|trl]
behaviortrace show DIR [--json]                      summarize a run directory
behaviortrace bench-sketch [--k 8192] [--json]       rollouts/s of per-rollout gradients ±
                                                     projection
behaviortrace cache info|clean [--bt-cache DIR] ...  cache size report / safe cleaning
                                                     (cache_admin.py)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

from tabulate import tabulate


def _cmd_estimators(args) -> int:
    from bt_core.attribution.catalog import available

    specs = available()
    if args.json:
        print(json.dumps([s.as_dict() for s in specs]))
        return 0
    print(
        tabulate(
            [[s.name, ",".join(s.levels), s.origin, s.doc] for s in specs],
            headers=["name", "levels", "origin", "description"],
        )
    )
    opt_in = [s.name for s in specs if s.opt_in]
    if opt_in:
        print(f"opt-in (judged only where named with --estimator): {', '.join(opt_in)}")
    from bt_core.attribution.catalog import not_installed

    for name, install in not_installed().items():
        print(f"not installed: {name} ({install})")
    return 0


def _cmd_train(args) -> int:
    import dataclasses

    from bt_core.artifacts.store import ArtifactStore
    from bt_core.config import get_scale, to_dict

    out = Path(args.out)
    if out.exists() and any(out.iterdir()):
        print(
            f"error: --out {out} exists and is not empty; choose a new or empty directory (the "
            "run is written there; nothing in an existing folder is replaced)",
            file=sys.stderr,
        )
        return 2
    try:
        scale = get_scale(args.scale, args.scenario)
        grpo = dataclasses.replace(scale.run.grpo, backend=args.backend or scale.run.grpo.backend)
        if args.steps is not None:  # a quick check: fewer GRPO steps, checkpoints clamped to fit
            grpo = dataclasses.replace(
                grpo, steps=args.steps, checkpoint_every=min(grpo.checkpoint_every, args.steps)
            )
        cfg = dataclasses.replace(scale.run, seed=args.seed, grpo=grpo)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    from bt_core.artifacts.keys import run_key
    from bt_core.training.loop import train_run

    # Build through the store's atomic machinery in a private root, then move the finished run to
    # --out.
    staging = out.parent / f".{out.name}.staging-{os.getpid()}"
    try:
        store = ArtifactStore(staging)
        path = store.get_or_build(
            "runs", run_key(cfg), to_dict(cfg), lambda d: train_run(cfg, d, progress=not args.quiet)
        )
        if out.exists():
            out.rmdir()
        os.replace(path, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    print(f"wrote {out}")
    return _cmd_show(argparse.Namespace(dir=str(out), json=False))


def _not_a_run(d: Path) -> str | None:
    """Why `d` is not a run directory, with what to pass instead (None: it is one, whole or
    damaged)."""
    from bt_core.artifacts.cacheroot import describe, looks_like_cache

    manifest = d / "manifest.json"
    if manifest.is_file():
        try:
            kind = json.loads(manifest.read_text()).get("kind")
        except (OSError, json.JSONDecodeError, AttributeError):
            # a run whose manifest is damaged
            kind = "runs" if (d / "summary.json").is_file() else None
        if kind == "runs":
            return None
    elif d.parent.name == "runs" and looks_like_cache(d.parent.parent):
        return None  # a run folder of a cache without a manifest: damaged, verify_dir says so
    root = next((p for p in (d, d.parent, d.parent.parent) if looks_like_cache(p)), None)
    runs = (
        sorted(p for p in (root / "runs").glob("*") if p.is_dir() and not p.name.startswith("."))
        if root
        else []
    )
    if runs:
        shown = "\n  ".join(str(p) for p in runs[:5]) + ("\n  …" if len(runs) > 5 else "")
        instead = f"pass one of the cache's runs:\n  {shown}"
    else:
        instead = (
            "pass a run directory: one written by `behaviortrace train --out DIR`, or one under a "
            "cache's runs/ folder (e.g. .bt_cache/runs/<key>)"
        )
    return f"{d} {describe(d)}, not a run; {instead}"


def _cmd_show(args) -> int:
    from bt_core.artifacts.store import ArtifactError, verify_dir

    d = Path(args.dir)
    why = _not_a_run(d)
    if why:
        print(f"error: {why}", file=sys.stderr)
        return 2
    try:
        manifest = verify_dir(d)
    except ArtifactError as e:
        print(f"error: {e}", file=sys.stderr)
        return ArtifactError.exit_code
    summary = json.loads((d / "summary.json").read_text())
    probes = json.loads((d / "probes.json").read_text())
    flat = {
        **{k: v for k, v in summary.items() if k != "timings"},
        "model": _model_of(d, manifest),
        "wall_s": summary["timings"]["wall_s"],
        "timings": summary["timings"],
        "s_b_curve": probes,
        "config_hash": manifest["key"],
    }
    if args.json:
        print(json.dumps(flat))
        return 0
    print(
        tabulate(
            [[k, v] for k, v in flat.items() if k not in ("s_b_curve", "timings", "model")]
            + [[f"model.{k}", v] for k, v in flat["model"].items()],
            headers=["field", "value"],
        )
    )
    print()
    print(
        tabulate(
            [[p["step"], p["s_b"], p["control_rate"], p["sampled_rate"]] for p in probes],
            headers=["checkpoint", "s_b (greedy)", "control rate", "sampled rate"],
        )
    )
    print()
    print(tabulate(list(summary["timings"].items()), headers=["timing", "seconds"]))
    return 0


def _model_of(d: Path, manifest: dict) -> dict:
    """The model a run names: what its summary recorded, else (older runs) what its config
    describes."""
    summary = json.loads((d / "summary.json").read_text())
    if "model" in summary:
        return summary["model"]
    cfg = manifest.get("config", {}).get("model", {})
    return {
        "name": cfg.get("path") or "tiny-llama (built from config)",
        "path": cfg.get("path"),
        "gguf_file": cfg.get("gguf_file"),
        "package": cfg.get("package"),
    }


def _cmd_bench_sketch(args) -> int:
    from bt_core.gradients.bench import bench_sketch

    big = args.scale in ("real", "paper")  # a pretrained model: small batches, fewer passes
    res = bench_sketch(
        k=args.k,
        batch_size=args.batch_size or (4 if big else 64),
        n_batches=args.batches,
        repeats=args.repeats or (2 if big else 5),
        run_dir=args.run,
        slow=not args.no_slow,
        clock=args.clock,
        scale=args.scale,
    )
    if args.json:
        print(json.dumps(res))
        return 0
    keys = ["bare_backward", "countsketch", "dense", "traker", "vmap_backward", "loop_backward"]
    print(
        tabulate(
            [
                [
                    key,
                    res[key],
                    None if res[key] is None else round(res[key] / res["bare_backward"], 3),
                ]
                for key in keys
            ],
            headers=["method", "rollouts/s", "÷ bare_backward"],
        )
    )
    print()
    print(tabulate(list(res["ratios"].items()), headers=["ratio", "value"]))
    print(f"\nCountSketch scatter: {res['scatter_kernel']} (bt_core/gradients/scatter.py)")
    if res.get("dense_extrapolated_from_coords"):
        print(
            "\ndense and traker: projection timed on the first "
            f"{res['dense_extrapolated_from_coords']:,} of {res['n_params']:,} coordinates and "
            "scaled linearly (gradients timed whole)"
        )
    return 0


def _add_bench_sketch(sub) -> None:
    b = sub.add_parser(
        "bench-sketch",
        help="rollouts/s of per-rollout gradients: bare, +CountSketch, +dense, "
        "+traker BasicProjector (same batches)",
    )
    b.add_argument(
        "--k", type=int, default=8192, metavar="K", help="projection width (default: 8192)"
    )
    b.add_argument(
        "--scale",
        default="default",
        choices=["smoke", "default", "real"],
        help=(
            "whose model and prompts (default: default; real = SmolLM2-135M, needs the [real] "
            "extra)"
        ),
    )
    b.add_argument(
        "--batch-size",
        type=int,
        default=None,
        metavar="B",
        help="rollouts per batch (default: 64; 4 at the real scale)",
    )
    b.add_argument(
        "--batches", type=int, default=2, metavar="N", help="batches in the workload (default: 2)"
    )
    b.add_argument(
        "--repeats",
        type=int,
        default=None,
        metavar="R",
        help="passes of the fast methods; the best is reported (default: 5; 2 at the real scale)",
    )
    b.add_argument(
        "--run",
        default=None,
        metavar="DIR",
        help=(
            "use this run's checkpoint-0 model and first rollouts (default: the default-scale "
            "model at init with sampled replies)"
        ),
    )
    b.add_argument(
        "--no-slow", action="store_true", help="skip dense and traker (seconds per batch)"
    )
    b.add_argument(
        "--clock",
        default="cpu",
        choices=["cpu", "wall"],
        help="cpu: the process's CPU time, robust to a shared machine's load; wall (default: cpu)",
    )
    b.add_argument("--json", action="store_true", help="print one JSON object")
    b.set_defaults(fn=_cmd_bench_sketch)


CHECK_USAGE = """usage: behaviortrace check [--estimator=NAME|module:factory] [--scale NAME]
                           [--scenario reference|task_reward|no_std_norm|hidden_cause] [options]

Runs the installed BehaviorTrace checklist suite through pytest, from any directory, and exits with
the gate's code: 0 every selected item judged and passed, 1 an item failed, 4 a usage error (a bad \
option
value, a baseline that cannot be compared, a plug-in that fails to import, a --bt-cache that is \
not a cache),
7 the artifact cache is damaged, 10 a regression against --scorecard-compare's baseline, 11 not \
judged (an
item skipped: a built-in adapter's extra is absent).
Every pytest option works (-x, -k, -n 2, --junitxml=…), and every suite option: see the
"BehaviorTrace checklist suite" group of `behaviortrace check --help-pytest`. A module:factory \
path is
imported from the current directory. Examples:

    behaviortrace check --estimator=my_method:MyMethod --scale smoke
    behaviortrace check --estimator=cosine --scale smoke --scenario hidden_cause
    behaviortrace check --estimator=cosine --estimator-param cosine.target=constructed \
--junitxml=junit.xml
"""


def suite_module() -> Path:
    """The installed suite's test module (`behaviortrace.benchmarks`; a checkout's benchmarks/ when
    editable)."""
    from behaviortrace.fixtures.suite import SuiteMissing, suite_module

    try:
        return suite_module()
    except SuiteMissing as e:
        raise SystemExit(f"error: {e}") from None


def check(argv: list[str]) -> int:
    """`behaviortrace check ARGS`: pytest on the installed suite with ARGS; returns its exit code
    (the gate's)."""
    if argv[:1] in (["-h"], ["--help"]):
        print(CHECK_USAGE)
        return 0
    argv = ["--help" if a == "--help-pytest" else a for a in argv]
    import pytest

    module = suite_module()
    # rootdir = the suite's package directory: test ids read "benchmarks/test_checklist.py::…"
    # (JUnit XML included) wherever the command runs. pytest's cache would then be written inside
    # the installed package, so the cache plugin is off unless asked for. importlib import mode: the
    # module is imported by path and nothing of site-packages is put on sys.path.
    rootdir = (
        []
        if any(a.startswith("--rootdir") for a in argv)
        else [f"--rootdir={module.parent.parent}"]
    )
    cache = [] if any("cacheprovider" in a for a in argv) else ["-p", "no:cacheprovider"]
    # pytest-benchmark's plugin creates its storage folder (./.benchmarks) in every session it
    # loads in; the suite times with its Stats alone, so the plugin stays off unless asked for
    if not any(a.startswith("--benchmark") or a.endswith(":benchmark") for a in argv):
        cache += ["-p", "no:benchmark"]
    # the plugin is an installed module imported before pytest could mark it for assertion
    # rewriting (it asserts nothing): pytest's warning about it is noise in a user's gate
    cache += ["-W", "ignore::pytest.PytestAssertRewriteWarning"]
    return int(pytest.main([str(module), "--import-mode=importlib", *rootdir, *cache, *argv]))


def main(argv: list[str] | None = None) -> int:
    from bt_core.config import BACKENDS, SCALES, SCENARIOS

    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["check"]:  # everything after `check` belongs to pytest and the suite
        return check(argv[1:])

    p = argparse.ArgumentParser(
        prog="behaviortrace", description="Training-data attribution test bench for online RL"
    )
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser(
        "check",
        help="run the installed checklist suite on an estimator (pytest options pass through; "
        "`behaviortrace check -h`)",
        add_help=False,
    )
    e = sub.add_parser("estimators", help="list registered estimators")
    e.add_argument(
        "--json", action="store_true", help="print a JSON list of {name, levels, origin}"
    )
    e.set_defaults(fn=_cmd_estimators)
    t = sub.add_parser("train", help="train one planted-behavior run into a directory")
    t.add_argument(
        "--scale",
        default="default",
        choices=list(SCALES),
        help="preset (default: default; real needs the [real] extra, paper a local model)",
    )
    t.add_argument("--seed", type=int, default=0, help="training seed (default: 0)")
    t.add_argument("--out", required=True, help="new directory for the run")
    t.add_argument(
        "--scenario",
        default="reference",
        choices=list(SCENARIOS),
        help="reward/advantage variant; hidden_cause: docs/scenarios.md (default: reference)",
    )
    t.add_argument(
        "--backend",
        default=None,
        choices=list(BACKENDS),
        help=(
            "training loop: native or TRL's GRPOTrainer (default: the scale's; native except paper)"
        ),
    )
    t.add_argument(
        "--steps",
        type=int,
        default=None,
        metavar="N",
        help="GRPO steps instead of the scale's (a quick check, e.g. --steps 2)",
    )
    t.add_argument("--quiet", action="store_true", help="no progress bars")
    t.set_defaults(fn=_cmd_train)
    s = sub.add_parser("show", help="summarize a run directory")
    s.add_argument("dir", help="a run directory written by `train` (or in the cache under runs/)")
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s.set_defaults(fn=_cmd_show)
    _add_bench_sketch(sub)
    from bt_core.artifacts import cache_admin

    cache_admin.add_subparser(sub)
    args = p.parse_args(argv)
    if getattr(args, "seed", 0) is not None and getattr(args, "seed", 0) < 0:
        p.error(f"--seed {args.seed}: must be a non-negative integer")
    if getattr(args, "steps", None) is not None and args.steps < 1:
        p.error(f"--steps {args.steps}: must be ≥ 1 (GRPO steps to train)")
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
