r"""Sketching past one process: under `torchrun` (torch.distributed), each rank sketches a
contiguous range of replay segments (checkpoint → next checkpoint, each replayed from its stored
checkpoint), writes its shard into ``<out>/.shards/rank<r>/``, and rank 0 assembles the artifact.
Nothing here is home-made cluster code: torch.distributed starts the ranks, its barrier orders them;
the shards travel through the filesystem (a directory every rank can write: local for one machine, a
shared mount for several).

Why the artifact is byte-identical to a single-process build
(`bt_core.gradients.sketch.sketch_run`): every segment starts from its stored checkpoint in both
builds, so a rank computes exactly the rows a single process would; rank 0 concatenates them in
segment order and runs the same coverage check; timings go to the manifest, never into the files.
Every rank must use the run's thread count (`RunConfig.threads`, part of the config hash) — float
reductions depend on it.

    torchrun --nproc_per_node=2 -m bt_core.gradients.distributed --run-dir RUN_DIR \
        --out SKETCH_DIR --scale real

(`--nnodes`/`--rdzv-endpoint` spread the ranks over machines; use backend gloo on CPU, nccl is not
needed.)
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

import numpy as np
import torch.distributed as dist

from bt_core.artifacts.store import load_array, save_array
from bt_core.config import SketchConfig
from bt_core.gradients.sketch import (
    open_emb,
    segment_rows,
    segments,
    sketch_segments,
    write_sketches,
)
from bt_core.training.checkpoints import TrainedRun
from bt_core.training.model import torch_threads

ARRAYS = ("grad_norm", "fluency", "step_emb", "step_norm", "steps")


def rank_segments(segs: list, world: int, rank: int) -> list:
    """The contiguous share of `segs` that `rank` of `world` sketches (sizes differ by at most
    one)."""
    bounds = np.linspace(0, len(segs), world + 1).round().astype(int)
    return segs[bounds[rank] : bounds[rank + 1]]


def sketch_run_distributed(
    run: TrainedRun, cfg: SketchConfig, out: Path, progress: bool = False
) -> dict | None:
    """Sketch `run` into `out` across the ranks of the initialized default process group. Returns
    the result on rank 0 (as `sketch_run` does), None on the others. Every rank must call it."""
    if not dist.is_initialized():
        raise RuntimeError(
            "sketch_run_distributed needs torch.distributed initialized (run under torchrun, then "
            "dist.init_process_group('gloo')); in one process use "
            "bt_core.gradients.sketch.sketch_run"
        )
    rank, world = dist.get_rank(), dist.get_world_size()
    t_start = time.perf_counter()
    mine = rank_segments(segments(run), world, rank)
    shard = out / ".shards" / f"rank{rank}"
    shard.mkdir(parents=True, exist_ok=True)
    with torch_threads(run.config.threads):
        if mine:  # more ranks than segments leaves some idle
            lo, hi = segment_rows(run, mine)
            emb = open_emb(shard / "emb.npy", hi - lo, cfg.k)
            part = sketch_segments(run, cfg, mine, emb, progress and rank == 0)
            emb.flush()
            del emb
            for name in ARRAYS:
                save_array(shard / f"{name}.npy", part[name])
            (shard / "meta.json").write_text(
                json.dumps(
                    {"rows": part["rows"], "replay": part["replay"], "embed_s": part["embed_s"]}
                )
            )
        dist.barrier()  # every shard is on disk
        result = _assemble(run, cfg, out, world, t_start) if rank == 0 else None
        dist.barrier()  # nobody leaves before rank 0 has read the shards
    return result


def _assemble(run: TrainedRun, cfg: SketchConfig, out: Path, world: int, t_start: float) -> dict:
    """Rank 0: concatenate the shards in rank (= segment) order into the artifact's files."""
    parts, shards = [], [out / ".shards" / f"rank{r}" for r in range(world)]
    emb = open_emb(out / "emb.npy", len(run.rollouts), cfg.k)
    for shard in shards:
        if not (shard / "meta.json").exists():
            continue  # a rank with no segment (more ranks than segments)
        meta = json.loads((shard / "meta.json").read_text())
        lo, hi = meta["rows"]
        emb[lo:hi] = load_array(shard / "emb.npy")
        parts.append(
            {
                **{name: np.asarray(load_array(shard / f"{name}.npy")) for name in ARRAYS},
                "replay": meta["replay"],
                "embed_s": meta["embed_s"],
            }
        )
    emb.flush()
    del emb
    shutil.rmtree(out / ".shards")
    res = write_sketches(run, cfg, out, parts, t_start)
    res["timings"]["ranks"] = world
    return res


def main(argv: list[str] | None = None) -> int:
    """Entry point under torchrun: sketch one stored run into a directory (rank 0 writes it)."""
    from bt_core.config import PROJECTORS, get_scale

    p = argparse.ArgumentParser(
        prog="python -m bt_core.gradients.distributed",
        description="sketch a stored run across torchrun ranks (gloo)",
    )
    p.add_argument(
        "--run-dir", required=True, help="a run directory (train --out, or the cache's runs/<key>)"
    )
    p.add_argument(
        "--out", required=True, help="directory for the sketches (created; must be empty)"
    )
    p.add_argument(
        "--scale",
        default=None,
        help="take the sketch config of this scale (default: SketchConfig())",
    )
    p.add_argument("--k", type=int, default=None, help="override the sketch width")
    p.add_argument("--projector", default=None, choices=list(PROJECTORS))
    args = p.parse_args(argv)
    cfg = get_scale(args.scale).sketch if args.scale else SketchConfig()
    if args.k or args.projector:
        import dataclasses

        cfg = dataclasses.replace(cfg, k=args.k or cfg.k, projector=args.projector or cfg.projector)
    out = Path(args.out)
    dist.init_process_group("gloo")
    try:
        if dist.get_rank() == 0:
            if out.exists() and any(p for p in out.iterdir() if p.name != ".shards"):
                raise SystemExit(f"error: --out {out} is not empty; choose a new directory")
            out.mkdir(parents=True, exist_ok=True)
        dist.barrier()
        res = sketch_run_distributed(TrainedRun(Path(args.run_dir)), cfg, out)
        if res is not None:
            print(json.dumps(res))
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
