"""Builds (or loads) every artifact of one seed through the cache, stage by stage.

    RunConfig ─► train ─► Run ─► sketch ─► Sketches
                                ─► targets ─► Targets
                                ─► draws  ─► Draw × n_draws
                                ─► replays ─► Replays (counterfactual replays of the logged stream)

Each artifact's key hashes its own config and the key of what it was built from, so a change
anywhere upstream rebuilds everything downstream and nothing from another config is ever reused.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import shutil
import sys
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from pathlib import Path

import numpy as np
from filelock import FileLock

from bt_core.artifacts.draws import Draw
from bt_core.artifacts.keys import (
    CONTROL_VERSION,
    DRAWS_VERSION,
    TARGETS_VERSION,
    control_key,
    draw_measure,
    replay_key,
    replay_set_key,
    run_key,
    seed_keys,
    sketch_key,
)
from bt_core.artifacts.replays import Replay, Replays
from bt_core.artifacts.run import contaminator_key
from bt_core.artifacts.seed import SeedArtifacts
from bt_core.artifacts.sketches import Sketches
from bt_core.artifacts.store import ArtifactStore, discard, lock_path, save_array
from bt_core.artifacts.targets import Targets
from bt_core.atomic import write_text_atomic
from bt_core.config import (
    CounterfactualConfig,
    DrawConfig,
    RunConfig,
    Scale,
    SketchConfig,
    to_dict,
)
from bt_core.counterfactual.plan import ReplaySpec, measure_config, plan, trained_window
from bt_core.counterfactual.replay import build_replay
from bt_core.draws.build import build_draw
from bt_core.gradients.sketch import sketch_run
from bt_core.progress import progress as progress_bar
from bt_core.secret_key import pinned_key
from bt_core.targets.build import build_targets
from bt_core.training.checkpoints import TrainedRun
from bt_core.training.loop import train_run
from bt_core.training.planting import KEY_DRAWS, planted_run
from bt_core.training.resume import JOURNAL

REDRAWN = "redrawn.json"  # in a run's work directory: why each key set aside was (planting.py)

__all__ = [
    "SeedArtifacts",
    "build_all",
    "build_control",
    "build_removal_replay",
    "build_replays",
    "build_run",
    "build_seed",
    "build_sketches",
    "run_key",
    "seed_keys",
]


def build_run(
    store: ArtifactStore,
    cfg: RunConfig,
    progress: bool = False,
    key: bytes | None = None,
    key_draws: int = KEY_DRAWS,
) -> TrainedRun:
    """The run of `cfg`, built (with a fresh secret contaminator key, or `key`) when not cached.
    Unpinned, a run that did not plant the behavior is trained again under a fresh key, up to
    `key_draws` keys (`bt_core.training.planting`: why, and what the manifest's ``redrawn`` says).
    """

    def build(out: Path, work: Path) -> dict:
        # the reasons of the keys set aside, where a killed build finds them; "resetting" is true
        # from before a set-aside run's files are cleared until they are all gone, so a build
        # killed midway clears them again rather than resume the set-aside key's journal
        kept = work / REDRAWN
        state = json.loads(kept.read_text()) if kept.exists() else {"redrawn": []}
        redrawn = state["redrawn"]

        def save(resetting: bool) -> None:
            write_text_atomic(kept, json.dumps({"redrawn": redrawn, "resetting": resetting}))

        def reset() -> None:
            save(resetting=True)
            shutil.rmtree(work / JOURNAL, ignore_errors=True)
            for p in list(out.iterdir()):
                shutil.rmtree(p) if p.is_dir() else p.unlink()
            save(resetting=False)

        if state.get("resetting"):
            reset()

        def note(text: str) -> None:
            if progress:
                print(f"seed {cfg.seed}: {text}", file=sys.stderr, flush=True)

        return planted_run(
            lambda: train_run(cfg, out, progress, work=work, key=key),
            lambda: json.loads((out / "summary.json").read_text()),
            reset,
            redrawn,
            may_redraw=key is None and pinned_key() is None,
            note=note,
            key_draws=key_draws,
        )

    path = store.get_or_build("runs", run_key(cfg), to_dict(cfg), build, resumable=True)
    return TrainedRun(path)


def build_control(
    store: ArtifactStore, run: TrainedRun, cfg: RunConfig, progress: bool = False
) -> TrainedRun:
    """The control run of `run` (built from `cfg`): the same config and seed with the contaminator's
    bonus at 0 (`RunConfig.without_bonus`), trained on its own on-policy samples from the warm-up's
    weights (`run`'s step-0 checkpoint: its SFT is the run's, bit for bit, and is not repeated) with
    `run`'s secret key (hidden_cause's warm-up reads its carrier tags from it; elsewhere the key
    acts only through the bonus, so it changes nothing). "No bonus, no behavior" is read off its
    probes (`checklist.causal_gt`). Cached under `keys.control_key`, so it follows its run."""
    ctl, key = cfg.without_bonus(), contaminator_key(run.path)
    warm = run.path if cfg.grpo.backend == "native" else None  # TRL seeds its own sampling

    def get() -> Path:
        return store.get_or_build(
            "runs",
            control_key(cfg),
            to_dict(ctl),
            lambda d, work: {
                # the warm-up is the run's own (SFT reads no bonus): started from its step-0
                # checkpoint, the same bytes as a control trained from scratch, without the SFT
                **(train_run(ctl, d, progress, work=work, key=key, sft_from=warm) or {}),
                "control_of": {"run": run_key(cfg), "version": CONTROL_VERSION},
            },
            resumable=True,
        )

    path = get()
    if contaminator_key(path) != key:
        # its run was rebuilt under a new key (a damaged run deleted by hand, no rebuild token):
        # under hidden_cause the key draws the warm-up's carrier tags, so this control is stale
        with FileLock(str(lock_path(path))):
            if path.exists() and contaminator_key(path) != key:
                discard(path)
        path = get()
    return TrainedRun(path)


def build_sketches(
    store: ArtifactStore,
    run: TrainedRun,
    run_cfg: RunConfig,
    sketch: SketchConfig,
    progress: bool = False,
) -> tuple[str, Path]:
    """The sketches of `run` (key, directory). A killed sketch build restarts from scratch: it is
    one pass over the stored checkpoints, and its tmp directory is never accepted."""
    rk = run_key(run_cfg)
    sk_key = sketch_key(run_cfg, sketch)
    return sk_key, store.get_or_build(
        "sketches",
        sk_key,
        {"run": rk, "sketch": to_dict(sketch)},
        lambda d: sketch_run(run, sketch, d, progress),
    )


def _replay_specs(
    run: TrainedRun, run_cfg: RunConfig, cf: CounterfactualConfig
) -> dict[str, tuple[str, dict, object]]:
    """name → (cache key, cache config, spec) of every replay of `run`'s plan, in plan order."""
    rk, measure = run_key(run_cfg), measure_config(cf)
    out = {}
    for sp in plan(run.rollouts, run.config, cf):
        ident = sp.identity()
        out[sp.name] = (
            replay_key(rk, ident, measure),
            {"run": rk, "replay": ident, "measure": measure},
            sp,
        )
    return out


def _build_replay_specs(
    store: ArtifactStore, run: TrainedRun, cf: CounterfactualConfig, specs: list
) -> None:
    """Build (or load) the replays `specs` ((key, config, spec) triples) of `run`."""
    for key, config, sp in specs:
        store.get_or_build("replays", key, config, lambda d, sp=sp: build_replay(run, sp, cf, d))


def build_replays(
    store: ArtifactStore,
    run: TrainedRun,
    run_cfg: RunConfig,
    cf: CounterfactualConfig,
    progress: bool = False,
) -> tuple[str, Replays]:
    """Every counterfactual replay of `run` (`bt_core.counterfactual.plan.plan`), each cached under
    its own key (run + subset + measure), and the seed's index of them (key, `Replays`)."""
    rk = run_key(run_cfg)
    set_key = replay_set_key(run_cfg, cf)

    def build_set(out: Path) -> dict:
        specs = _replay_specs(run, run_cfg, cf)
        # a replay already in the cache is loaded (and verified), not replayed: it gets no bar, one
        # line at most that says so (a rebuilding store replays them all)
        every = list(specs.values())
        cached = [] if store.rebuild else [t for t in every if store.path("replays", t[0]).exists()]
        _build_replay_specs(store, run, cf, cached)
        if cached and progress:
            n = len(cached)
            print(
                f"replays seed {run_cfg.seed}: loaded {n} cached replay{'s' if n != 1 else ''}",
                file=sys.stderr,
                flush=True,
            )
        loaded = {t[0] for t in cached}  # replay keys (the specs hold arrays: compare keys)
        todo = [t for t in every if t[0] not in loaded]
        for triple in progress_bar(
            todo,
            desc=f"replays seed {run_cfg.seed}",
            unit="replay",
            enabled=progress and bool(todo),
        ):
            _build_replay_specs(store, run, cf, [triple])
        (out / "plan.json").write_text(
            json.dumps({"keys": {n: k for n, (k, _, _) in specs.items()}}, indent=1)
        )
        save_array(out / "window.npy", trained_window(run.rollouts, run.config))
        return {"summary": {"n_replays": len(specs)}}

    path = store.get_or_build(
        "replaysets", set_key, {"run": rk, "counterfactual": to_dict(cf)}, build_set
    )
    return set_key, Replays(path)


def build_removal_replay(
    replays: Replays, run: TrainedRun, removed, name: str = "removal"
) -> Replay:
    """The replay of `run`'s logged stream without the rows `removed`, measured like the seed's plan
    replays (`replays`) and cached beside them under the same key (run + the removed set's sha256 +
    the measure's config), so a set the plan already holds is the plan's own replay and a different
    set never reuses another's. For sets chosen at judging time (the top-k removal item): the
    counterfactual config and the cache are those `replays` was built with (its manifest), and the
    store's per-key lock makes concurrent sessions (xdist workers) build each set once; a replay set
    rebuilt in this session (its rebuild token) rebuilds these too."""
    manifest = json.loads((replays.path / "manifest.json").read_text())
    cf = CounterfactualConfig(**manifest["config"]["counterfactual"])
    rk = manifest["config"]["run"]
    sp = ReplaySpec(name, "remove", np.unique(np.asarray(removed, np.int64)), replays.measure.step)
    ident, measure = sp.identity(), measure_config(cf)
    rebuild = manifest.get("rebuild_token") or False
    store = ArtifactStore(replays.path.parent.parent, rebuild=rebuild)
    config = {"run": rk, "replay": ident, "measure": measure}
    path = store.get_or_build(
        "replays", replay_key(rk, ident, measure), config, lambda d: build_replay(run, sp, cf, d)
    )
    return Replay(path)


STAGES = ("run", "sketches", "targets", "draws", "replays")  # what build_seed reports, in order
BUILD_HEARTBEAT_S = 30.0  # a parallel build's log gets a line at least this often


def build_seed(
    store: ArtifactStore,
    run_cfg: RunConfig,
    sketch: SketchConfig,
    draws: DrawConfig,
    progress: bool = False,
    report: Callable[[str], None] | None = None,
    counterfactual: CounterfactualConfig | None = None,
    replays_too: bool = True,
) -> SeedArtifacts:
    """Every artifact of one seed, built or loaded; `report(stage)` is called as each of `STAGES` is
    ready.
    The counterfactual replays are built only with a `counterfactual` config and `replays_too`
    (the stage is reported either way); the draws' causal label uses its measure
    (`keys.draw_measure`)."""
    done = report or (lambda stage: None)
    run = build_run(store, run_cfg, progress)
    done("run")
    keys = seed_keys(run_cfg, sketch, draws, counterfactual)
    keys.pop("replays", None)  # added below once they are built
    rk, sk = keys["run"][1], to_dict(sketch)
    _, sk_path = build_sketches(store, run, run_cfg, sketch, progress)
    done("sketches")
    tg_path = store.get_or_build(
        *keys["targets"],
        {"run": rk, "sketch": sk, "n_draws": draws.n_draws, "version": TARGETS_VERSION},
        lambda d: build_targets(run, sketch, d, n_draws=draws.n_draws),
    )
    done("targets")
    draw_objs = []
    for i in range(draws.n_draws):
        dp = store.get_or_build(
            *keys[f"draw{i}"],
            {
                "run": rk,
                "sketch": sk,
                "draws": to_dict(draws),
                "draw": i,
                "version": DRAWS_VERSION,
                "measure": draw_measure(counterfactual),
            },
            lambda d, i=i: build_draw(run, draws, sketch, i, d, counterfactual),
        )
        draw_objs.append(Draw(dp))
    done("draws")
    replays = control = None
    if counterfactual is not None and replays_too:
        _, replays = build_replays(store, run, run_cfg, counterfactual, progress)
        keys["replays"] = ("replaysets", replays.path.name)
        control = build_control(store, run, run_cfg, progress)
    done("replays")
    return SeedArtifacts(
        run,
        Sketches.load(sk_path),
        Targets(tg_path),
        draw_objs,
        {name: key for name, (_, key) in keys.items()},
        replays,
        control,
    )


def _build_paths(
    root: str,
    rebuild: bool | str,
    run_cfg: RunConfig,
    sketch: SketchConfig,
    draws: DrawConfig,
    queue=None,
    counterfactual: CounterfactualConfig | None = None,
    replays_too: bool = True,
) -> None:
    """Worker entry point: build one seed's artifacts (results are read back from the cache); each
    finished stage is put on `queue` as (seed, stage) for the parent's progress bar."""
    report = None if queue is None else (lambda stage: queue.put((run_cfg.seed, stage)))
    build_seed(
        ArtifactStore(root, rebuild=rebuild),
        run_cfg,
        sketch,
        draws,
        report=report,
        counterfactual=counterfactual,
        replays_too=replays_too,
    )


def _build_replay_chunk(
    root: str, rebuild: bool | str, run_cfg: RunConfig, cf: CounterfactualConfig, names: list[str]
) -> int:
    """Worker entry point: build the replays `names` of one seed's plan (its run is already
    cached)."""
    store = ArtifactStore(root, rebuild=rebuild)
    run = build_run(store, run_cfg)
    specs = _replay_specs(run, run_cfg, cf)
    _build_replay_specs(store, run, cf, [specs[n] for n in names])
    return len(names)


def _build_control_task(root: str, rebuild: bool | str, run_cfg: RunConfig) -> int:
    """Worker entry point: build the control run of one seed (its run is already cached)."""
    store = ArtifactStore(root, rebuild=rebuild)
    build_control(store, build_run(store, run_cfg), run_cfg)
    return 1


# replays per parallel task: ~10 CPU-s at the default scale, so the workers stay balanced
REPLAY_CHUNK = 8


def build_all(
    store: ArtifactStore,
    run_cfg: RunConfig,
    sketch: SketchConfig,
    draws: DrawConfig,
    seeds: list[int],
    workers: int = 1,
    progress: bool = False,
    counterfactual: CounterfactualConfig | None = None,
) -> dict[int, SeedArtifacts]:
    """Artifacts of every seed (built in the order of `seeds`); with `workers` > 1 the seeds whose
    artifacts are not all cached yet are built in parallel processes (each torch process
    single-threaded, so results are identical to a serial build), with one progress bar over their
    stages. Safe to call from several processes at once (pytest-xdist workers): the store's per-key
    file locks make each artifact built once, the others wait and load it."""
    missing = [
        s
        for s in seeds
        if store.rebuild
        or not all(
            (store.path(kind, key) / "manifest.json").exists()
            for kind, key in seed_keys(run_cfg.with_seed(s), sketch, draws, counterfactual).values()
        )
    ]
    if workers > 1 and missing:
        _build_parallel(store, run_cfg, sketch, draws, missing, workers, progress, counterfactual)
        # With a rebuild the workers shared this store's token: what they rebuilt is not rebuilt
        # again.
    return {
        s: build_seed(
            store, run_cfg.with_seed(s), sketch, draws, progress, counterfactual=counterfactual
        )
        for s in seeds
    }


def build_scale(
    scale: Scale, cache: Path | str, seeds: list[int], workers: int = 1, replays: bool = True
) -> dict[int, SeedArtifacts]:
    """`build_all` with a scale preset's configs, in the artifact cache at `cache` (the benchmark
    scripts' one way to get a seed's artifacts); `replays=False` leaves the counterfactual replays
    out."""
    return build_all(
        ArtifactStore(Path(cache)),
        scale.run,
        scale.sketch,
        scale.draws,
        seeds,
        workers=workers,
        counterfactual=scale.counterfactual if replays else None,
    )


def _build_parallel(
    store: ArtifactStore,
    run_cfg: RunConfig,
    sketch: SketchConfig,
    draws: DrawConfig,
    seeds: list[int],
    workers: int,
    progress: bool,
    counterfactual: CounterfactualConfig | None = None,
) -> None:
    """One pool of `workers` processes, fed tasks as they become possible: each seed's run,
    sketches, targets and draws (one task), then — once its run exists — its counterfactual replays
    in chunks of `REPLAY_CHUNK`. The replays are most of a cold build's CPU time; chunking them
    keeps every worker busy to the end instead of leaving one idle while another finishes a third
    seed alone.
    The parent then assembles each seed's replay index from the cache."""
    # spawn, not fork: a forked child of a process whose OpenMP pool already ran can deadlock.
    ctx = multiprocessing.get_context("spawn")
    with contextlib.ExitStack() as stack:
        queue = stack.enter_context(ctx.Manager()).Queue() if progress else None
        ex = stack.enter_context(ProcessPoolExecutor(max_workers=workers, mp_context=ctx))
        bar = stack.enter_context(
            progress_bar(
                total=len(seeds) * len(STAGES),
                desc=f"building {len(seeds)} seeds",
                unit="stage",
                enabled=progress,
                leave=True,
                every=0,  # a line per finished stage
                # and, while the workers build, a line at least this often naming what each seed
                # is building (issue 64: the workers' own bars do not reach the parent's log)
                heartbeat=BUILD_HEARTBEAT_S,
            )
        )
        # the replays are chunked below; the base task needs only the measure (the draws' label)
        base = {
            ex.submit(
                _build_paths,
                str(store.root),
                store.rebuild,
                run_cfg.with_seed(s),
                sketch,
                draws,
                queue,
                counterfactual,
                False,
            ): s
            for s in seeds
        }
        pending = set(base)
        try:
            _drive(store, run_cfg, counterfactual, ex, bar, queue, base, pending)
        except BaseException:
            # Ctrl-C or a worker's error: stop now. The pool's own exit would run every queued
            # build to its end first (a Ctrl-C took about 50 s, replays still written 38 s after)
            _stop_pool(ex)
            raise


def _drive(
    store: ArtifactStore,
    run_cfg: RunConfig,
    counterfactual: CounterfactualConfig | None,
    ex: ProcessPoolExecutor,
    bar,
    queue,
    base: dict,
    pending: set,
) -> None:
    """`_build_parallel`'s loop: wait for each task, submit the seed's replay chunks (and its
    control run) once its run exists, and advance the progress bar."""
    chunks: dict = {}  # future → seed
    left: dict[int, int] = {}  # seed → replay chunks not yet done
    on = {s: STAGES[0] for s in base.values()}  # seed → the stage it is building (None: done)

    def report(event: str) -> None:
        """The bar's postfix: what just finished, and what each seed is building now (the
        heartbeat's lines repeat it while nothing finishes)."""
        now = [
            f"seed {s} {st}" + (f" ({left[s]} tasks left)" if st == "replays" and s in left else "")
            for s, st in on.items()
            if st is not None
        ]
        bar.set_postfix_str(event + ("; building: " + ", ".join(now) if now else ""))

    while pending:
        done, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
        for f in done:
            f.result()  # a worker's exception surfaces here
            if f in base:
                seed = base[f]
                names = _missing_replays(store, run_cfg.with_seed(seed), counterfactual)
                parts = [names[i : i + REPLAY_CHUNK] for i in range(0, len(names), REPLAY_CHUNK)]
                left[seed] = len(parts)
                if _control_missing(store, run_cfg.with_seed(seed), counterfactual):
                    # the control run trains beside the replays (a run's worth of CPU)
                    c = ex.submit(
                        _build_control_task,
                        str(store.root),
                        store.rebuild,
                        run_cfg.with_seed(seed),
                    )
                    chunks[c] = seed
                    pending.add(c)
                    left[seed] += 1
                for part in parts:
                    c = ex.submit(
                        _build_replay_chunk,
                        str(store.root),
                        store.rebuild,
                        run_cfg.with_seed(seed),
                        counterfactual,
                        part,
                    )
                    chunks[c] = seed
                    pending.add(c)
                on[seed] = "replays" if left[seed] else None
                if not left[seed]:
                    bar.update(1)  # the replays stage: nothing to build
            else:
                seed = chunks[f]
                left[seed] -= 1
                if left[seed] == 0:
                    on[seed] = None
                    report(f"seed {seed}: replays ready")
                    bar.update(1)
                else:
                    report(f"seed {seed}: a replay task done")
        while queue is not None and not queue.empty():
            seed, stage = queue.get()
            if stage == "replays":
                continue  # counted when its chunks are done
            if on.get(seed) is not None and stage in STAGES:  # a finished seed stays finished
                on[seed] = STAGES[min(STAGES.index(stage) + 1, len(STAGES) - 1)]
            report(f"seed {seed}: {stage} ready")
            bar.update(1)


def _stop_pool(ex: ProcessPoolExecutor) -> None:
    """Cancel every build not yet started and stop the workers now. An artifact is written under a
    temporary name and renamed into place when complete (`ArtifactStore`), so a stopped worker
    leaves a stale temporary folder (`behaviortrace cache clean --stale-only`), never a
    half-written artifact; the next session builds what is missing."""
    procs = list((getattr(ex, "_processes", None) or {}).values())  # shutdown forgets them
    ex.shutdown(wait=False, cancel_futures=True)
    for proc in procs:
        if proc.is_alive():
            proc.terminate()


def _control_missing(
    store: ArtifactStore, run_cfg: RunConfig, cf: CounterfactualConfig | None
) -> bool:
    """Whether the control run of `run_cfg` is still to build (the session builds one with its
    replays; always, under a rebuild: the worker skips what this session already rebuilt)."""
    if cf is None:
        return False
    return (
        store.rebuild or not (store.path("runs", control_key(run_cfg)) / "manifest.json").exists()
    )


def _missing_replays(
    store: ArtifactStore, run_cfg: RunConfig, cf: CounterfactualConfig | None
) -> list[str]:
    """Names of the replays of `run_cfg`'s plan still to build (all of them under a rebuild: the
    workers skip what this session already rebuilt)."""
    if cf is None:
        return []
    run = build_run(store, run_cfg)
    specs = _replay_specs(run, run_cfg, cf)
    return [
        n
        for n, (key, _, _) in specs.items()
        if store.rebuild or not (store.path("replays", key) / "manifest.json").exists()
    ]
