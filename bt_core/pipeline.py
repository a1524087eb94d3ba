"""Builds (or loads) every artifact of one seed through the cache, stage by stage.

    RunConfig ─► train ─► Run ─► sketch ─► Sketches
                                ─► targets ─► Targets
                                ─► draws  ─► Draw × n_draws

Each artifact's key hashes its own config and the key of what it was built from, so a change anywhere
upstream rebuilds everything downstream and nothing from another config is ever reused.
"""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from bt_core.config import DrawConfig, RunConfig, SketchConfig, config_hash, to_dict
from bt_core.draws import Draw, build_draw
from bt_core.sketch import Sketches, sketch_run
from bt_core.store import ArtifactStore
from bt_core.targets import Targets, build_targets
from bt_core.train import Run, train_run


@dataclass
class SeedArtifacts:
    run: Run
    sketches: Sketches
    targets: Targets
    draws: list[Draw]
    keys: dict[str, str]


def run_key(cfg: RunConfig) -> str:
    return config_hash(cfg)


def build_run(store: ArtifactStore, cfg: RunConfig, progress: bool = False) -> Run:
    key = run_key(cfg)
    path = store.get_or_build("runs", key, to_dict(cfg), lambda d: train_run(cfg, d, progress))
    return Run(path)


def build_seed(store: ArtifactStore, run_cfg: RunConfig, sketch: SketchConfig, draws: DrawConfig,
               progress: bool = False) -> SeedArtifacts:
    run = build_run(store, run_cfg, progress)
    rk = run_key(run_cfg)
    sk_key = config_hash(rk, sketch)
    sk_path = store.get_or_build("sketches", sk_key, {"run": rk, "sketch": to_dict(sketch)},
                                 lambda d: sketch_run(run, sketch, d, progress))
    tg_key = config_hash(rk, sketch, "targets", draws.n_draws)  # one seeded target set per draw
    tg_path = store.get_or_build("targets", tg_key, {"run": rk, "sketch": to_dict(sketch), "n_draws": draws.n_draws},
                                 lambda d: build_targets(run, sketch, d, n_draws=draws.n_draws))
    draw_objs, keys = [], {"run": rk, "sketches": sk_key, "targets": tg_key}
    for i in range(draws.n_draws):
        dk = config_hash(rk, sketch, draws, i)
        dp = store.get_or_build("draws", dk, {"run": rk, "sketch": to_dict(sketch), "draws": to_dict(draws),
                                              "draw": i},
                                lambda d, i=i: build_draw(run, draws, sketch, i, d))
        draw_objs.append(Draw(dp))
        keys[f"draw{i}"] = dk
    return SeedArtifacts(run, Sketches.load(sk_path), Targets(tg_path), draw_objs, keys)


def _build_paths(root: str, rebuild: bool, run_cfg: RunConfig, sketch: SketchConfig, draws: DrawConfig) -> None:
    """Worker entry point: build one seed's artifacts (results are read back from the cache)."""
    build_seed(ArtifactStore(root, rebuild=rebuild), run_cfg, sketch, draws)


def build_all(store: ArtifactStore, run_cfg: RunConfig, sketch: SketchConfig, draws: DrawConfig,
              seeds: list[int], workers: int = 1, progress: bool = False) -> dict[int, SeedArtifacts]:
    """Artifacts of every seed; with `workers` > 1 seeds are built in parallel processes (each torch
    process single-threaded, so results are identical to a serial build)."""
    if workers > 1 and len(seeds) > 1:
        # spawn, not fork: a forked child of a process whose OpenMP pool already ran can deadlock.
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=min(workers, len(seeds)), mp_context=ctx) as ex:
            futs = [ex.submit(_build_paths, str(store.root), store.rebuild, run_cfg.with_seed(s), sketch, draws)
                    for s in seeds]
            for f in futs:
                f.result()
        store = ArtifactStore(Path(store.root))  # rebuilt above if asked; now only load
    return {s: build_seed(store, run_cfg.with_seed(s), sketch, draws, progress) for s in seeds}
