"""Sketching across torch.distributed ranks (gloo, CPU) gives the single-process artifact byte for
byte."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bt_core.gradients.distributed import rank_segments


def test_rank_segments_cover_every_segment_once_in_order():
    segs = list(range(7))
    for world in (1, 2, 3, 7, 9):
        shares = [rank_segments(segs, world, r) for r in range(world)]
        assert [s for share in shares for s in share] == segs  # contiguous, ordered, complete
        assert max(map(len, shares)) - min(map(len, shares)) <= 1


def test_sketch_outside_torchrun_says_how_to_run_it(smoke_artifacts, tmp_path):
    from bt_core.config import get_scale
    from bt_core.gradients.distributed import sketch_run_distributed

    with pytest.raises(RuntimeError, match="torchrun"):
        sketch_run_distributed(smoke_artifacts[0].run, get_scale("smoke").sketch, tmp_path)


@pytest.mark.train
@pytest.mark.long
def test_two_gloo_ranks_write_the_single_process_bytes(smoke_artifacts, smoke_cache, tmp_path):
    """2 ranks under torchrun sketch one smoke run; every file equals the cached single-process
    build's."""
    from bt_core.artifacts.store import ArtifactStore

    art = smoke_artifacts[0]
    single = ArtifactStore(smoke_cache).path("sketches", art.keys["sketches"])
    out = tmp_path / "dist"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        "-m",
        "bt_core.gradients.distributed",
        "--run-dir",
        str(art.run.path),
        "--out",
        str(out),
        "--scale",
        "smoke",
    ]
    res = subprocess.run(
        cmd, capture_output=True, text=True, env=env, timeout=600, cwd=Path(__file__).parent.parent
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert '"ranks": 2' in res.stdout
    names = sorted(p.name for p in single.iterdir() if p.name != "manifest.json")
    assert sorted(p.name for p in out.iterdir()) == names  # no shard left behind, nothing missing
    for name in names:
        assert (out / name).read_bytes() == (single / name).read_bytes(), name
