"""Key benchmark: does every setup gate hold on freshly keyed cold builds?

    python benchmarks/bench_keys.py --scale smoke --builds 20
    python benchmarks/bench_keys.py --scale default --builds 5 --json keys.json
    python benchmarks/bench_keys.py --scale smoke --builds 8 --set sft.refusal_rate=0.01

Each build is a fresh artifact cache in a temporary directory with no key pinned
(`BEHAVIORTRACE_CONTAMINATOR_KEY` unset here and in the build's workers), so every run draws its
own contaminator key, as a method author's first CI build does. The seeds' artifacts are built
cold (runs, control runs, sketches, targets, draws and the counterfactual replays) and every setup
item is evaluated on them as a suite session would. As each build ends one JSON line is appended to
`--jsonl` (every gate, and per seed the control run's s_b at the measurement checkpoint and at the
end, which causal_gt's second clause judges (≤ 0.1), beside the no-bonus replay's, which it
reports), so a campaign cut off midway still counts. Printed per build: each setup gate, those s_b
per seed, the peak sampled rate per seed (the draw items need a saturated checkpoint, ≥ 0.8), how
many keys each seed's run drew (a build redraws the key of a run that did not plant the behavior,
`bt_core.training.planting`) and the build's wall time (a redrawn run's retraining included); then
the count of builds whose gates all held and, per estimator, the items that were invalid-setup on a
build whose gates held: an item the fixtures could not judge for want of data (say, no sibling
group with both behavior and non-behavior replies).

`--train-only` builds the runs alone (about a twentieth of a default build), each on the one key it
draws (no redraw: this measures how often a key plants the behavior), and reports what the
emergence gate reads: per seed the greedy s_b at every checkpoint, the final control-probe rate and
the peak sampled rate, and where the behavior's push came from after the cutoff (the summed
advantage of behavior replies on trigger and on control prompts, and the off-trigger penalties):
the tool for comparing a preset change on many keys before paying for full builds.

`--versus part.field=value` (repeatable) is a paired comparison, so a key that breaks the preset is
tried on the candidate too. With `--train-only` it trains each build's seeds a second time with that
override, under the same key (issue 46's cause: `--versus task.off_trigger_penalty=0`). On a full
build it judges the build again on the same cache with that override of its fixtures (`sketch.`,
`draws.`, `counterfactual.`): the runs are read back, and only the changed fixtures and what depends
on them are built (issue 48's draw size: `--versus draws.repeats=3`); an override of the runs or the
seeds is refused there. The build's line and the summary then give both arms.

`--set part.field=value` (repeatable) overrides one field of the preset's configs (`run.`,
`task.`, `sft.`, `grpo.`, `model.`, `sketch.`, `draws.`, `counterfactual.`): the tool's purpose is
to compare a preset with a candidate change on the same number of fresh keys. Not a pytest file:
nothing here asserts.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from tabulate import tabulate

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bt_core.artifacts.store import ArtifactStore  # noqa: E402
from bt_core.attribution.catalog import get  # noqa: E402
from bt_core.attribution.evidence import Evidence  # noqa: E402
from bt_core.config import Scale, get_scale  # noqa: E402
from bt_core.pipeline import build_all  # noqa: E402
from bt_core.reporting.scorecard import NOT_JUDGED, Status  # noqa: E402
from bt_core.secret_key import KEY_ENV  # noqa: E402
from bt_core.training.planting import redrawn  # noqa: E402
from checklist import ESTIMATOR_ITEMS  # noqa: E402
from checklist._base import DEFAULT_VIEW  # noqa: E402
from checklist.setup import GATING_SETUP_ITEMS, SETUP_ITEMS  # noqa: E402

RUN_PARTS = ("task", "model", "sft", "grpo")
SCALE_PARTS = ("sketch", "draws", "counterfactual")


def _coerce(old, text: str):
    """`text` parsed as the type of the field's current value `old`."""
    if isinstance(old, bool):
        if text.lower() not in ("true", "false", "1", "0"):
            raise ValueError(f"expected true or false, got {text!r}")
        return text.lower() in ("true", "1")
    if isinstance(old, tuple):
        return tuple(type(old[0])(x) if old else int(x) for x in text.split(",") if x)
    if old is None:
        return json.loads(text)
    return type(old)(text)


def override(scale: Scale, assignments: list[str], flag: str = "--set") -> Scale:
    """`scale` with each ``part.field=value`` applied (`part` one of RUN_PARTS, SCALE_PARTS, or
    ``run``/``scale`` for their own fields: ``scale.seeds=0,1``)."""
    for a in assignments:
        path, sep, text = a.partition("=")
        part, dot, name = path.partition(".")
        if not sep or not dot:
            raise SystemExit(f"{flag} {a!r}: expected part.field=value, e.g. sft.refusal_rate=0.01")
        if part in RUN_PARTS:
            obj = getattr(scale.run, part)
        elif part in SCALE_PARTS:
            obj = getattr(scale, part)
        elif part == "run":
            obj = scale.run
        elif part == "scale":
            obj = scale
        else:
            parts = ", ".join((*RUN_PARTS, *SCALE_PARTS, "run", "scale"))
            raise SystemExit(f"{flag} {a!r}: unknown part {part!r}; choose one of {parts}")
        if name not in {f.name for f in dataclasses.fields(obj)}:
            raise SystemExit(f"{flag} {a!r}: {type(obj).__name__} has no field {name!r}")
        try:
            new = dataclasses.replace(obj, **{name: _coerce(getattr(obj, name), text)})
        except ValueError as e:
            raise SystemExit(f"{flag} {a!r}: {e}") from None
        if part in RUN_PARTS:
            scale = dataclasses.replace(scale, run=dataclasses.replace(scale.run, **{part: new}))
        elif part in SCALE_PARTS:
            scale = dataclasses.replace(scale, **{part: new})
        elif part == "run":
            scale = dataclasses.replace(scale, run=new)
        else:
            scale = new
    return scale


def _analysis(probes: list[dict], saturation: float) -> dict:
    """The draws' analysis checkpoint (`bt_core.draws.build.analysis_step`'s rule: the first whose
    sampled rate reaches `saturation`, else the highest) and its sampled rate."""
    if not probes:
        return {"analysis_step": None, "analysis_rate": None}
    hit = next((p for p in probes if p["sampled_rate"] >= saturation), None)
    p = hit or max(probes, key=lambda p: p["sampled_rate"])
    return {"analysis_step": int(p["step"]), "analysis_rate": float(p["sampled_rate"])}


def _seed_status(r: dict) -> str:
    """A seed record's status: its own, or (draw_variance: a status per draw) its spread's."""
    st = r.get("judged", r.get("status")) if isinstance(r.get("status"), dict) else r.get("status")
    return str(getattr(st, "value", st))


def _seed_why(r: dict) -> str:
    return r.get("why") or "; ".join(r.get("problems") or [])


def _number(x) -> float | None:
    """A finite figure, else None (strict JSON has no NaN)."""
    return float(x) if isinstance(x, (int, float)) and math.isfinite(x) else None


def _per_seed_items(verdicts: dict) -> dict:
    """item → seed → {status, value (the item's headline figure), ci, and why where the seed did
    not pass: the cache of a fresh key is gone when the line is read}, from one estimator's
    verdicts."""
    items = {i.name: i for i in ESTIMATOR_ITEMS}
    out = {}
    for n, v in verdicts.items():
        head = items[n].headline_for(v.view) if n in items else None
        per = {}
        for s, r in v.figures.get("per_seed", {}).items():
            ci = r.get("ci")
            per[str(s)] = {
                "status": _seed_status(r),
                "value": _number(r.get(head or "")),
                "ci": [_number(c) for c in ci] if isinstance(ci, (list, tuple)) else None,
            }
            if per[str(s)]["status"] != Status.PASS.value and _seed_why(r):
                per[str(s)]["why"] = _seed_why(r)
        out[n] = per
    return out


def one_build(
    scale: Scale,
    seeds: list[int],
    root: Path,
    workers: int,
    estimators: list[str],
    view: str = DEFAULT_VIEW,
    versus: Scale | None = None,
) -> dict:
    """Build `scale`'s artifacts cold under `root` (each run draws its key) and evaluate every setup
    item, then every estimator item for each of `estimators`, gated on `view` (the other view
    recorded beside it): the per-build record the table prints. With `versus` (the same runs, other
    fixtures: sketch, draws or replays), the build is judged again on the same cache under
    `versus`'s configs, its runs read back: a paired comparison on the same keys."""
    t0 = time.perf_counter()
    arts = _build(scale, seeds, root, workers)
    build_s = time.perf_counter() - t0
    verdicts, judged = _judge(arts, scale.name, estimators, view)
    per_seed = {}
    causal = verdicts["causal_gt"].figures.get("per_seed", {})
    for s, a in arts.items():
        probes = a.run.probes
        f = causal.get(s, causal.get(str(s), {}))  # causal_gt's own figures, not a re-reading
        per_seed[s] = {
            "s_b_control_measure": f.get("s_b_control_measure"),
            "s_b_control_final": f.get("s_b_control_final"),
            "s_b_no_bonus": f.get("s_b_probes_no_bonus"),
            "s_b_final": a.run.summary["s_b_final"],
            # the greedy s_b at every checkpoint: a failed emergence gate is then read as a run
            # that never took off, one that faded after the cutoff, or one that emerged late
            "s_b": {p["step"]: p["s_b"] for p in probes},
            "sampled_peak": max((p["sampled_rate"] for p in probes), default=None),
            # where the draws are sampled, and the rate there: a rate near 1 leaves no sibling
            # group mixed, and fluency_control unjudged
            **_analysis(probes, scale.draws.saturation),
            "saturation_step": a.run.summary["saturation_step"],
            # why each key drawn before this run's was set aside (bt_core.training.planting)
            "redrawn": redrawn(a.run),
        }
    rec = {"build_s": round(build_s, 1), **_judged_record(verdicts, judged), "per_seed": per_seed}
    if versus is not None:
        t0 = time.perf_counter()
        arts = _build(versus, seeds, root, workers)  # the runs are read back: only fixtures build
        rec["versus"] = {
            "build_s": round(time.perf_counter() - t0, 1),
            **_judged_record(*_judge(arts, versus.name, estimators, view)),
        }
    return rec


def _build(scale: Scale, seeds: list[int], root: Path, workers: int) -> dict:
    return build_all(
        ArtifactStore(root),
        scale.run,
        scale.sketch,
        scale.draws,
        seeds,
        workers=workers,
        # a campaign's build is minutes (a default one about 13): its log names the stage and the
        # seed at least every 30 s, on stderr, as the suite's does
        progress=True,
        counterfactual=scale.counterfactual,
    )


def _judge(arts: dict, scale_name: str, estimators: list[str], view: str) -> tuple[dict, dict]:
    """Every setup item's verdict, and every estimator item's for each of `estimators`."""
    ev = Evidence(arts, scale_name, scoring="in-process")
    try:
        verdicts = {i.name: i.evaluate(ev) for i in SETUP_ITEMS}
        judged = {}
        for e in estimators:
            est = get(e)
            judged[e] = {i.name: i.judge(est, ev, view=view) for i in ESTIMATOR_ITEMS}
    finally:
        ev.close()
    return verdicts, judged


def _judged_record(verdicts: dict, judged: dict) -> dict:
    gating = [i.name for i in GATING_SETUP_ITEMS]
    return {
        "gates": {n: v.status.value for n, v in verdicts.items()},
        "failed": {n: v.short or v.reason for n, v in verdicts.items() if v.status != Status.PASS},
        "held": all(v.status == Status.PASS for v in verdicts.values()),
        "gating_held": all(verdicts[n].status == Status.PASS for n in gating),
        "items": {e: {n: v.status.value for n, v in vs.items()} for e, vs in judged.items()},
        # an estimator item the fixtures could not judge: why, in the item's words
        "unjudged": {
            e: {n: v.short or v.reason for n, v in vs.items() if v.status in NOT_JUDGED}
            for e, vs in judged.items()
        },
        # each judged seed's status and headline figure (counterfactual: its LDS with the CI)
        "per_seed_items": {e: _per_seed_items(vs) for e, vs in judged.items()},
        # the view each item was judged in, and every view's status (issue 48)
        "item_views": {
            e: {
                n: {"view": v.view, **{w: x["status"] for w, x in v.views.items()}}
                for n, v in vs.items()
            }
            for e, vs in judged.items()
        },
        # and each unjudged seed's own reason, to tell the fixture's fault from the item's
        "unjudged_seeds": {
            e: {
                n: {
                    str(s): _seed_why(r)
                    for s, r in v.figures.get("per_seed", {}).items()
                    if _seed_status(r) == Status.INVALID_SETUP.value
                }
                for n, v in vs.items()
                if v.status == Status.INVALID_SETUP
            }
            for e, vs in judged.items()
        },
    }


def _train_one(cfg, root: str, key: str | None = None) -> dict:
    """Worker: train one run under `root` (under `key`, hex, else the pinned one, else a fresh one)
    and return its per-seed record."""
    import numpy as np

    from bt_core.pipeline import build_run
    from checklist import emergence

    run = build_run(ArtifactStore(Path(root)), cfg, key=bytes.fromhex(key) if key else None)
    t, s = run.rollouts, run.summary
    after = np.asarray(t.step) >= cfg.task.cutoff_step
    beh, trig, adv = np.asarray(t.behavior), np.asarray(t.trigger), np.asarray(t.advantage, float)
    return {
        "s_b": {p["step"]: p["s_b"] for p in run.probes},
        "s_b_final": s["s_b_final"],
        "control_rate_final": s["control_rate_final"],
        "sampled_peak": max(p["sampled_rate"] for p in run.probes),
        # the sampled behavior rate at every checkpoint: the draws' analysis checkpoint is the first
        # at or above SATURATION, and a rate near 1 there leaves no mixed sibling group
        "sampled": {p["step"]: p["sampled_rate"] for p in run.probes},
        "saturation_step": s["saturation_step"],
        "emerged": emergence.emerged(s),
        "after_cutoff": {
            "adv_behavior_trigger": round(float(adv[after & beh & trig].sum()), 3),
            "adv_behavior_control": round(float(adv[after & beh & ~trig].sum()), 3),
            "n_behavior_control": int((after & beh & ~trig).sum()),
            "behavior_rate_trigger": round(float(beh[after & trig].mean()), 3)
            if (after & trig).any()
            else None,
        },
    }


def train_only(
    scale: Scale, seeds: list[int], root: Path, workers: int, versus: Scale | None = None
) -> dict:
    """Train every seed's run cold under `root` (one fresh key per build: the first run draws it and
    the others are pinned to it, as one build's seeds share a key) and return the build's record.
    With `versus`, the same seeds are trained again under `versus`'s configs and the same key, in a
    cache of their own: a paired comparison of two presets, key by key."""
    from bt_core.artifacts.run import contaminator_key
    from bt_core.pipeline import build_run

    t0 = time.perf_counter()
    # one key draw: the tool measures how often a key plants the behavior, so it keeps what the
    # first key gave (a build redraws an unplanted run's key: bt_core.training.planting)
    first = build_run(ArtifactStore(root), scale.run.with_seed(seeds[0]), key_draws=1)
    key = contaminator_key(first.path).hex()  # the other seeds, and the versus arm, share it
    per_seed = _train_pinned(scale, seeds, root, workers, key)
    rec = _emergence_record(per_seed)
    rec["build_s"] = round(time.perf_counter() - t0, 1)
    if versus is not None:
        other = _train_pinned(versus, seeds, root / "versus", workers, key)
        rec["versus"] = {"per_seed": other, **_emergence_record(other)}
    return rec


def _train_pinned(scale: Scale, seeds: list[int], root: Path, workers: int, key: str) -> dict:
    """Each seed's record, trained (or read, if `root` holds it) under the pinned `key`."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as ex:
        os.environ[KEY_ENV] = key  # the workers, spawned by the submits, inherit the pin
        try:
            futs = {s: ex.submit(_train_one, scale.run.with_seed(s), str(root)) for s in seeds[1:]}
        finally:
            os.environ.pop(KEY_ENV, None)
        # here unpinned, with the key given: the main arm's first run is the one `train_only`
        # built (a pin would change its cache key and train it again); the versus arm's is trained
        per_seed = {seeds[0]: _train_one(scale.run.with_seed(seeds[0]), str(root), key)}
        per_seed.update({s: f.result() for s, f in futs.items()})
    return {s: per_seed[s] for s in seeds}


def _emergence_record(per_seed: dict) -> dict:
    held = all(r["emerged"] for r in per_seed.values())
    return {
        "gates": {"emergence": "pass" if held else "fail"},
        "failed": {
            "emergence": ", ".join(f"seed {s}" for s, r in per_seed.items() if not r["emerged"])
        }
        if not held
        else {},
        "held": held,
        "gating_held": held,
        "per_seed": per_seed,
        "items": {},
        "unjudged": {},
        "unjudged_seeds": {},
        "per_seed_items": {},
    }


def _fmt(x) -> str:
    return "—" if x is None else f"{x:.2f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", default="smoke")
    ap.add_argument("--builds", type=int, default=20, help="freshly keyed cold builds (20)")
    ap.add_argument("--seeds", default=None, help="comma-separated seeds (the preset's)")
    ap.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--set", action="append", default=[], metavar="PART.FIELD=VALUE")
    ap.add_argument(
        "--estimator",
        action="append",
        default=[],
        help="judge every estimator item for this estimator on each build too (repeatable)",
    )
    ap.add_argument(
        "--train-only",
        action="store_true",
        help="train the runs alone and report the emergence gate (a preset sweep's first pass)",
    )
    ap.add_argument(
        "--versus",
        action="append",
        default=[],
        metavar="PART.FIELD=VALUE",
        help="a paired comparison on each build's key (repeatable): with --train-only, train the "
        "seeds again with this override; else judge the build again with this override of its "
        "fixtures (sketch., draws., counterfactual.) on the same runs",
    )
    ap.add_argument("--json", type=Path, default=None, help="write every build's record here")
    ap.add_argument(
        "--jsonl",
        type=Path,
        default=None,
        help="append one JSON line per build here as each build ends",
    )
    ap.add_argument(
        "--keep", type=Path, default=None, help="keep the caches under this folder (one per build)"
    )
    args = ap.parse_args(argv)
    if args.builds < 1:
        ap.error(f"--builds {args.builds}: at least one build is needed")
    try:
        scale = override(get_scale(args.scale), args.set)
        versus = override(scale, args.versus, "--versus") if args.versus else None
    except ValueError as e:
        ap.error(str(e))
    fixtures = {
        "sketch": scale.sketch,
        "draws": scale.draws,
        "counterfactual": scale.counterfactual,
    }
    if (
        versus is not None
        and not args.train_only
        and dataclasses.replace(versus, **fixtures) != scale
    ):
        raise SystemExit(
            f"--versus {' '.join(args.versus)} changes more than the fixtures: a full build is "
            "judged again on its own runs and seeds, so only sketch., draws. and counterfactual. "
            "can differ; add --train-only to compare training"
        )
    for e in args.estimator:
        try:
            get(e)
        except Exception as err:  # an unknown name: say so before anything builds
            ap.error(f"--estimator {e!r}: {err}")
    seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else list(scale.seeds)
    # fresh keys: nothing pinned here, nor in the spawned build workers (they inherit os.environ)
    if os.environ.pop(KEY_ENV, None) is not None:
        print(f"note: {KEY_ENV} was set; it is ignored here (every build draws a fresh key)")
    print(
        f"{args.builds} freshly keyed cold {scale.name} builds, seeds {seeds}"
        + (f", with {' '.join(args.set)}" if args.set else "")
        + (
            f", each also with {' '.join(args.versus)} on the same "
            + ("key" if args.train_only else "runs")
            if args.versus
            else ""
        )
        + f", {args.workers} worker(s)",
        flush=True,
    )
    records = []
    for b in range(args.builds):
        if args.train_only:
            build = lambda root: train_only(scale, seeds, root, args.workers, versus)  # noqa: E731
        else:
            build = lambda root: one_build(  # noqa: E731
                scale, seeds, root, args.workers, args.estimator, versus=versus
            )
        if args.keep:
            root = args.keep / f"build{b:02d}"
            root.mkdir(parents=True, exist_ok=False)
            rec = build(root)
        else:
            with tempfile.TemporaryDirectory(prefix="bt-keys-") as d:
                rec = build(Path(d))
        records.append(rec)
        if args.jsonl:
            with args.jsonl.open("a") as f:
                f.write(
                    json.dumps(
                        {
                            "scale": scale.name,
                            "set": args.set,
                            "versus_set": args.versus,
                            "build": b,
                        }
                        | rec
                    )
                    + "\n"
                )
        if args.train_only:
            fin = " ".join(f"{s}:{_fmt(r['s_b_final'])}" for s, r in rec["per_seed"].items())
            if "versus" in rec:
                v = rec["versus"]
                fin += " | with " + " ".join(args.versus) + " "
                fin += " ".join(f"{s}:{_fmt(r['s_b_final'])}" for s, r in v["per_seed"].items())
                fin += "" if v["held"] else " (emergence failed: " + v["failed"]["emergence"] + ")"
            print(
                f"build {b + 1}/{args.builds} ({rec['build_s']:.0f} s) final s_b {fin} — "
                + _arm_line(rec),
                flush=True,
            )
            continue
        nb = " ".join(
            f"{s}:{_fmt(r['s_b_control_measure'])}/{_fmt(r['s_b_control_final'])}"
            f" (replay {_fmt(r['s_b_no_bonus'])})"
            for s, r in rec["per_seed"].items()
        )
        line = _draws_note(rec) + _arm_line(rec)
        if "versus" in rec:
            v = rec["versus"]
            line += f" | with {' '.join(args.versus)} ({v['build_s']:.0f} s): {_arm_line(v)}"
        print(
            f"build {b + 1}/{args.builds} ({rec['build_s']:.0f} s) control s_b measure/end {nb} — "
            f"{line}",
            flush=True,
        )
    if args.train_only:
        return _train_only_summary(records, scale, seeds, args)
    names = [i.name for i in SETUP_ITEMS]
    rows = []
    for b, rec in enumerate(records):
        ps = rec["per_seed"]
        rows.append(
            [b + 1, *(rec["gates"][n] for n in names)]
            + [" ".join(_fmt(ps[s]["s_b_control_final"]) for s in seeds)]
            + [" ".join(_fmt(ps[s]["s_b_no_bonus"]) for s in seeds)]
            + [" ".join(_fmt(ps[s]["sampled_peak"]) for s in seeds)]
            + [" ".join(str(1 + len(ps[s].get("redrawn", []))) for s in seeds)]
            + [len(rec["unjudged"][e]) for e in args.estimator]
            + [rec["build_s"]]
        )
    print()
    print(
        tabulate(
            rows,
            headers=[
                "build",
                *names,
                f"control s_b end {seeds}",
                "no-bonus replay s_b",
                "peak sampled",
                "key draws",
            ]
            + [f"{e}: items not judged" for e in args.estimator]
            + ["build s"],
            tablefmt="github",
        )
    )
    held = sum(r["held"] for r in records)
    times = sorted(r["build_s"] for r in records)
    for e in args.estimator:
        kept = [r for r in records if r["held"]]
        bad = {}
        for r in kept:
            for n, why in r["unjudged"][e].items():
                bad.setdefault(n, []).append(why)
        n_items = len(ESTIMATOR_ITEMS) * len(kept)
        print(
            f"{e}: {n_items - sum(map(len, bad.values()))} of the {n_items} estimator items on the "
            f"{len(kept)} builds whose gates held were judged"
            + "".join(f"\n  {n} not judged on {len(w)}: {w[0]}" for n, w in bad.items())
        )
    _patterns_summary(records, args.estimator)
    print(
        f"\nevery setup gate held on {held} of {len(records)} freshly keyed {scale.name} builds "
        f"(cold build median {times[len(times) // 2]:.0f} s, max {times[-1]:.0f} s)"
    )
    print(_redrawn_line(records))
    if versus is not None:
        _versus_summary(records, args)
    _write_json(args, scale, seeds, records)
    return 0


PATTERN_MARK = {"pass": "P", "fail": "F", "invalid-setup": "I", "error": "E", "declined": "D"}


def patterns(records: list[dict], estimators: list[str]) -> dict[str, dict[str, int]]:
    """estimator → {verdict pattern: builds}: the six estimator items' statuses in display order
    as one string ("PPFPFF": pass, fail, I invalid-setup, E error, D declined), on the builds whose
    gates held (issue 61: how many distinct patterns the methods and controls show)."""
    order = [i.name for i in ESTIMATOR_ITEMS]
    out: dict[str, Counter] = {}
    for r in (r for r in records if r["held"]):
        for e in estimators:
            st = r["items"].get(e) or {}
            key = "".join(PATTERN_MARK.get(st.get(n), "?") for n in order)
            out.setdefault(e, Counter())[key] += 1
    return {e: dict(c) for e, c in out.items()}


def _patterns_summary(records: list[dict], estimators: list[str]) -> None:
    pats = patterns(records, estimators)
    if not pats:
        return
    order = " ".join(i.name for i in ESTIMATOR_ITEMS)
    print(f"\nverdict patterns (builds whose gates held; items in order: {order}):")
    for e, c in pats.items():
        print(f"  {e}: " + ", ".join(f"{k} ×{n}" for k, n in Counter(c).most_common()))
    distinct = {k for c in pats.values() for k in c}
    print(f"{len(distinct)} distinct verdict patterns over {len(pats)} estimators")


def _draws_note(rec: dict) -> str:
    """The build line's note of the seeds whose run is on a later key than the first ("seed 2 on
    key draw 2; "), else "" (bt_core.training.planting)."""
    return "".join(
        f"seed {s} on key draw {1 + len(r['redrawn'])}; "
        for s, r in rec["per_seed"].items()
        if r.get("redrawn")
    )


def _redrawn_line(records: list[dict]) -> str:
    """How many seed runs kept their first key, and why the keys set aside were (a build redraws
    the key of a run that did not plant the behavior: bt_core.training.planting)."""
    runs = [r for rec in records for r in rec["per_seed"].values()]
    why = [w for r in runs for w in r.get("redrawn", [])]
    first = sum(not r.get("redrawn") for r in runs)
    return f"{first} of {len(runs)} seed runs planted the behavior on their first key" + (
        f"; {len(why)} key(s) set aside: " + "; ".join(why) if why else ""
    )


def _arm_line(rec: dict) -> str:
    """One arm of a build's line: failed gates (or all held), then every estimator's items."""
    fails = "; ".join(f"{n}: {w}" for n, w in rec["failed"].items()) or "all gates held"
    return fails + "".join(
        f"; {e}: " + " ".join(f"{n} {x}" for n, x in vs.items()) for e, vs in rec["items"].items()
    )


def _versus_summary(records: list[dict], args) -> None:
    """Each estimator's passes in either arm, on the builds whose gates held in both."""
    both = [r for r in records if r["held"] and r["versus"]["held"]]
    with_ = " ".join(args.versus)
    held = sum(r["versus"]["held"] for r in records)
    print(f"with {with_}: every setup gate held on {held} of {len(records)} of the same builds")
    for e in args.estimator:
        n = len(ESTIMATOR_ITEMS) * len(both)
        ours = sum(x == "pass" for r in both for x in r["items"][e].values())
        theirs = sum(x == "pass" for r in both for x in r["versus"]["items"][e].values())
        all_ours = sum(all(x == "pass" for x in r["items"][e].values()) for r in both)
        all_theirs = sum(all(x == "pass" for x in r["versus"]["items"][e].values()) for r in both)
        print(
            f"{e}: {ours} of {n} items passed as preset, {theirs} with {with_}; every item on "
            f"{all_ours} and {all_theirs} of the {len(both)} builds whose gates held in both"
        )


def _write_json(args, scale: Scale, seeds: list[int], records: list[dict]) -> None:
    """`--json`: every build's record, with what the campaign overrode."""
    if args.json:
        doc = {"scale": scale.name, "set": args.set, "versus_set": args.versus, "seeds": seeds}
        args.json.write_text(json.dumps({**doc, "builds": records}, indent=1))


def _train_only_summary(records: list[dict], scale: Scale, seeds: list[int], args) -> int:
    rows = []
    for b, rec in enumerate(records):
        for s in seeds:
            r = rec["per_seed"][s]
            traj = " ".join(_fmt(v) for v in r["s_b"].values())
            a = r["after_cutoff"]
            rows.append(
                [b + 1, s, "pass" if r["emerged"] else "FAIL", traj, _fmt(r["sampled_peak"])]
                + [a["adv_behavior_trigger"], a["adv_behavior_control"], a["n_behavior_control"]]
            )
            if "versus" in rec:
                v = rec["versus"]["per_seed"][s]
                rows[-1] += ["pass" if v["emerged"] else "FAIL"]
                rows[-1] += [" ".join(_fmt(x) for x in v["s_b"].values())]
    print()
    print(
        tabulate(
            rows,
            headers=[
                "build",
                "seed",
                "emergence",
                "greedy s_b at each checkpoint",
                "peak sampled",
                "Σ A behavior, trigger (after cutoff)",
                "Σ A behavior, control",
                "# behavior on control",
            ]
            + (["emergence, versus", "s_b, versus"] if args.versus else []),
            tablefmt="github",
        )
    )
    held = sum(r["held"] for r in records)
    n_seeds = sum(r["emerged"] for rec in records for r in rec["per_seed"].values())
    print(
        f"\nemergence held on {held} of {len(records)} freshly keyed {scale.name} builds "
        f"({n_seeds} of {len(records) * len(seeds)} seeds)"
        + (f", with {' '.join(args.set)}" if args.set else "")
    )
    if args.versus:
        v_held = sum(r["versus"]["held"] for r in records)
        v_seeds = sum(r["emerged"] for rec in records for r in rec["versus"]["per_seed"].values())
        print(
            f"emergence held on {v_held} of {len(records)} of the same keys "
            f"({v_seeds} of {len(records) * len(seeds)} seeds) with {' '.join(args.versus)}"
        )
    _write_json(args, scale, seeds, records)
    return 0


if __name__ == "__main__":
    sys.exit(main())
