"""Smoke-scale pipeline: determinism, replay, gradients, coverage, ground truth."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from bt_core.artifacts.run import contaminator_key
from bt_core.gradients.coverage import coverage_report
from bt_core.gradients.projectors import CountSketch, FirstK
from bt_core.gradients.sketch import per_rollout_grads
from bt_core.training import grpo
from bt_core.training.loop import train_run


def test_same_config_same_bytes(smoke_scale, smoke_artifacts, tmp_path):
    """A second training of seed 0 with the run's secret key reproduces the cached run bit for bit
    (rollouts and checkpoints): the key is an input like the seed."""
    cached = smoke_artifacts[0].run
    train_run(smoke_scale.run.with_seed(0), tmp_path, key=contaminator_key(cached.path))
    assert (
        json.loads((tmp_path / "summary.json").read_text())["rollouts_sha256"]
        == cached.summary["rollouts_sha256"]
    )
    for f in sorted((cached.path / "checkpoints").iterdir()):
        assert (tmp_path / "checkpoints" / f.name).read_bytes() == f.read_bytes(), f.name


def test_seeds_differ(smoke_artifacts):
    hashes = {a.run.summary["rollouts_sha256"] for a in smoke_artifacts.values()}
    assert len(hashes) == len(smoke_artifacts)


def test_replay_lands_on_stored_checkpoints(smoke_artifacts):
    for a in smoke_artifacts.values():
        assert a.sketches.report["replay_max_abs_diff"] == 0.0


def test_ground_truth_is_boosted_early_minority(smoke_scale, smoke_artifacts):
    cut = smoke_scale.run.task.cutoff_step
    for a in smoke_artifacts.values():
        t = a.run.rollouts
        gt = np.asarray(t.gt)
        assert 0.02 < gt.mean() < 0.3
        assert np.all(np.asarray(t.step)[gt] < cut)
        assert np.all(
            np.asarray(t.eligible)[gt] & np.asarray(t.behavior)[gt] & np.asarray(t.trigger)[gt]
        )
        assert np.all(
            np.asarray(t.reward)[gt] - np.asarray(t.reward_base)[gt] == smoke_scale.run.task.bonus
        )


def test_batched_per_rollout_grads_match_single_backwards(smoke_artifacts):
    run = smoke_artifacts[0].run
    model = run.model_at(0)
    part = run.rollouts.select(np.arange(5))
    flat, ell = per_rollout_grads(model, grpo.batch_of(part, run.codec))
    for i in range(5):
        model.zero_grad()
        from bt_core.training.objective import rollout_logprob

        one = rollout_logprob(model, grpo.batch_of(part.select(np.array([i])), run.codec))
        (-one.sum()).backward()
        g = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
        assert torch.allclose(flat[i], g, atol=1e-5)
        assert ell[i].item() == pytest.approx(one.item(), abs=1e-5)


def test_sketch_rows_match_rollouts(smoke_artifacts):
    a = smoke_artifacts[0]
    n = len(a.run.rollouts)
    assert a.sketches.emb.shape == (n, a.sketches.report["k"])
    assert np.all(np.asarray(a.sketches.fluency) <= 0)
    norms = np.linalg.norm(np.asarray(a.sketches.emb), axis=1)
    exact = np.asarray(a.sketches.grad_norm)
    ok = exact > 0  # a reply that is only EOS has an empty objective and a zero gradient
    assert np.median(np.abs(norms[ok] / exact[ok] - 1)) < 0.1  # sketch keeps norms


def test_coverage_passes_for_countsketch_and_catches_first_k(smoke_artifacts):
    a = smoke_artifacts[0]
    assert a.sketches.report["coverage"]["ok"]
    n = a.sketches.report["n_params"]
    bad = coverage_report(a.run, FirstK(n, 2048), a.run.rollouts)
    assert not bad["ok"]
    assert not bad["token_rows"]["frobnitz"]["ok"] and not bad["fidelity"]["ok"]
    good = coverage_report(a.run, CountSketch(n, 2048), a.run.rollouts)
    assert good["ok"]


def test_run_directory_is_complete(smoke_artifacts):
    p = Path(smoke_artifacts[0].run.path)
    manifest = json.loads((p / "manifest.json").read_text())
    assert {"config", "versions", "files", "key"} <= manifest.keys()
    assert any(f.startswith("checkpoints/") for f in manifest["files"])
