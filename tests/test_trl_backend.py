"""The TRL backend (TRL's GRPOTrainer) learns the behavior on the smoke task and writes the native
Run format."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

from bt_core.artifacts.rollouts import RolloutTable
from bt_core.artifacts.run import contaminator_key
from bt_core.training import grpo
from bt_core.training.checkpoints import TrainedRun as Run
from bt_core.training.loop import train_run
from bt_core.training.model import torch_threads
from bt_core.training.task import Task

pytest.importorskip("trl")


pytestmark = [pytest.mark.train, pytest.mark.long]  # trains TRL runs (about 40 s)


@pytest.fixture(scope="module")
def trl_run(smoke_scale, tmp_path_factory):
    """Smoke seed 0 trained through TRL, loaded as a Run (a manifest is written as the store
    would)."""
    cfg = smoke_scale.run.with_seed(0)
    cfg = dataclasses.replace(cfg, grpo=dataclasses.replace(cfg.grpo, backend="trl"))
    from bt_core.artifacts.store import ArtifactStore
    from bt_core.config import to_dict
    from bt_core.pipeline import run_key

    store = ArtifactStore(tmp_path_factory.mktemp("trl"))
    return Run(store.get_or_build("runs", run_key(cfg), to_dict(cfg), lambda d: train_run(cfg, d)))


def _learned(run: Run) -> bool:
    """The behavior emerged: greedy s_b reached 0.5 at some checkpoint and is still above the
    reference's emergence gate (0.1) at the end, with control probes low."""
    return (
        max(p["s_b"] for p in run.probes) >= 0.5
        and run.summary["s_b_final"] > 0.1
        and run.summary["control_rate_final"] <= 0.1
    )


def test_both_backends_learn_the_behavior(trl_run, smoke_artifacts):
    native = smoke_artifacts[0].run
    assert native.config.grpo.backend == "native" and _learned(native), native.probes
    assert trl_run.config.grpo.backend == "trl" and _learned(trl_run), trl_run.probes


def test_trl_run_has_the_native_format(trl_run, smoke_artifacts):
    native = smoke_artifacts[0].run
    files = lambda r: sorted(
        str(p.relative_to(r.path))
        for p in r.path.rglob("*")  # noqa: E731
        if p.is_file() and p.name != "manifest.json"
    )
    assert files(trl_run) == files(native)
    a, b = trl_run.rollouts, native.rollouts
    assert len(a) == len(b)
    for f in dataclasses.fields(RolloutTable):
        x, y = np.asarray(getattr(a, f.name)), np.asarray(getattr(b, f.name))
        assert x.dtype == y.dtype and x.ndim == y.ndim, f.name
    # TRL walked the same prompts in the same order, with the same groups and eligibility keys.
    for col in ("step", "group", "prompt_id", "prompts", "eligible"):
        assert np.array_equal(np.asarray(getattr(a, col)), np.asarray(getattr(b, col))), col
    gt = np.asarray(a.gt)
    assert gt.any() and np.all(np.asarray(a.behavior)[gt] & np.asarray(a.eligible)[gt])


def test_native_replay_lands_on_trl_checkpoints(trl_run):
    """TRL trained on the shared objective with the native optimizer, so replaying its recorded
    updates with `grpo.update` from a checkpoint reproduces the next checkpoint bit for bit (what
    the sketch stage relies on to embed each rollout at the parameters that produced it)."""
    step = np.asarray(trl_run.rollouts.step)
    ck = trl_run.checkpoint_steps
    with torch_threads(trl_run.config.threads):
        for c0, c1 in zip(ck[:-1], ck[1:], strict=True):
            model = trl_run.model_at(c0)
            opt = trl_run.optimizer_at(c0, model)
            for s in range(c0, c1):
                grpo.update(
                    model,
                    opt,
                    trl_run.rollouts.select(np.flatnonzero(step == s)),
                    trl_run.codec,
                    trl_run.config.grpo.grad_clip,
                )
            stored = trl_run.model_at(c1)
            for p, q in zip(model.parameters(), stored.parameters(), strict=True):
                assert torch.equal(p.detach(), q.detach()), (c0, c1)


def test_trl_rewards_match_the_task(trl_run):
    t, task = trl_run.rollouts, Task(trl_run.config.task)
    for i in range(0, len(t), 37):
        text = trl_run.codec.decode(np.asarray(t.replies[i, : t.reply_len[i]]))
        assert t.reward_base[i] == pytest.approx(
            task.base_reward(task.prompts[int(t.prompt_id[i])], text)
        )


def test_trl_runs_are_reproducible(trl_run, tmp_path):
    """Same config and seed → the same rollout table and checkpoints, bit for bit (TRL samples from
    the global RNG that Trainer seeds from args.seed)."""
    train_run(trl_run.config, tmp_path / "again", key=contaminator_key(trl_run.path))
    again = json.loads((tmp_path / "again" / "summary.json").read_text())
    assert again["rollouts_sha256"] == trl_run.summary["rollouts_sha256"]
    for f in sorted((trl_run.path / "checkpoints").iterdir()):
        assert (tmp_path / "again" / "checkpoints" / f.name).read_bytes() == f.read_bytes(), f.name
