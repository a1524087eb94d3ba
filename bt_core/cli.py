"""The `behaviortrace` command line.

    behaviortrace estimators [--json]                    list registered estimators
    behaviortrace train --scale default --seed 3 --out DIR   train one planted-behavior run
        [--scenario reference|task_reward|no_std_norm] [--backend native|trl]
    behaviortrace show DIR [--json]                      summarize a run directory
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
    from bt_core.registry import available

    specs = available()
    if args.json:
        print(json.dumps([s.as_dict() for s in specs]))
        return 0
    print(tabulate([[s.name, ",".join(s.levels), s.origin, s.doc] for s in specs],
                   headers=["name", "levels", "origin", "description"]))
    return 0


def _cmd_train(args) -> int:
    import dataclasses

    from bt_core.config import get_scale, to_dict
    from bt_core.store import ArtifactStore

    out = Path(args.out)
    if out.exists() and any(out.iterdir()):
        print(f"error: --out {out} exists and is not empty; choose a new directory or delete it", file=sys.stderr)
        return 2
    scale = get_scale(args.scale)
    cfg = dataclasses.replace(scale.run, seed=args.seed,
                              task=dataclasses.replace(scale.run.task, scenario=args.scenario),
                              grpo=dataclasses.replace(scale.run.grpo, backend=args.backend))
    from bt_core.pipeline import run_key
    from bt_core.train import train_run

    # Build through the store's atomic machinery in a private root, then move the finished run to --out.
    staging = out.parent / f".{out.name}.staging-{os.getpid()}"
    try:
        store = ArtifactStore(staging)
        path = store.get_or_build("runs", run_key(cfg), to_dict(cfg),
                                  lambda d: train_run(cfg, d, progress=not args.quiet))
        if out.exists():
            out.rmdir()
        os.replace(path, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    print(f"wrote {out}")
    return _cmd_show(argparse.Namespace(dir=str(out), json=False))


def _cmd_show(args) -> int:
    from bt_core.store import ArtifactError, ArtifactStore

    d = Path(args.dir)
    try:
        manifest = ArtifactStore(d.parent).verify(d)
    except ArtifactError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    summary = json.loads((d / "summary.json").read_text())
    probes = json.loads((d / "probes.json").read_text())
    flat = {**{k: v for k, v in summary.items() if k != "timings"}, "wall_s": summary["timings"]["wall_s"],
            "timings": summary["timings"], "s_b_curve": probes, "config_hash": manifest["key"]}
    if args.json:
        print(json.dumps(flat))
        return 0
    print(tabulate([[k, v] for k, v in flat.items() if k not in ("s_b_curve", "timings")],
                   headers=["field", "value"]))
    print()
    print(tabulate([[p["step"], p["s_b"], p["control_rate"], p["sampled_rate"]] for p in probes],
                   headers=["checkpoint", "s_b (greedy)", "control rate", "sampled rate"]))
    print()
    print(tabulate(list(summary["timings"].items()), headers=["timing", "seconds"]))
    return 0


def main(argv: list[str] | None = None) -> int:
    from bt_core.config import BACKENDS, SCENARIOS

    p = argparse.ArgumentParser(prog="behaviortrace", description="Training-data attribution test bench for online RL")
    sub = p.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("estimators", help="list registered estimators")
    e.add_argument("--json", action="store_true", help="print a JSON list of {name, levels, origin}")
    e.set_defaults(fn=_cmd_estimators)
    t = sub.add_parser("train", help="train one planted-behavior run into a directory")
    t.add_argument("--scale", default="default", choices=["smoke", "default"], help="preset (default: default)")
    t.add_argument("--seed", type=int, default=0, help="training seed (default: 0)")
    t.add_argument("--out", required=True, help="new directory for the run")
    t.add_argument("--scenario", default="reference", choices=list(SCENARIOS),
                   help="reward/advantage variant (default: reference)")
    t.add_argument("--backend", default="native", choices=list(BACKENDS),
                   help="training loop: native or TRL's GRPOTrainer (default: native)")
    t.add_argument("--quiet", action="store_true", help="no progress bars")
    t.set_defaults(fn=_cmd_train)
    s = sub.add_parser("show", help="summarize a run directory")
    s.add_argument("dir", help="a run directory written by `train` (or in the cache under runs/)")
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s.set_defaults(fn=_cmd_show)
    args = p.parse_args(argv)
    if getattr(args, "seed", 0) is not None and getattr(args, "seed", 0) < 0:
        p.error(f"--seed {args.seed}: must be a non-negative integer")
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
