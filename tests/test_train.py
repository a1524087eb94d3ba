"""Training stage: scenarios, progress bars, RNG hygiene, run format (tiny configs, a few seconds
each)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

from bt_core.artifacts.rollouts import RolloutTable
from bt_core.artifacts.run import ckpt_name
from bt_core.config import GRPOConfig, RunConfig, checkpoint_steps, get_scale
from bt_core.training.loop import train_run


def tiny(scenario: str = "reference", seed: int = 0) -> RunConfig:
    """The smoke task with a short warm-up and 4 GRPO steps: enough to exercise every code path."""
    run = get_scale("smoke").run
    return dataclasses.replace(
        run,
        seed=seed,
        task=dataclasses.replace(run.task, scenario=scenario),
        sft=dataclasses.replace(run.sft, steps=20),
        grpo=dataclasses.replace(run.grpo, steps=4, checkpoint_every=2),
    )


@pytest.fixture(scope="module")
def tiny_runs(tmp_path_factory):
    out = {}
    for scenario in ("reference", "task_reward", "no_std_norm"):
        d = tmp_path_factory.mktemp(scenario) / "run"
        train_run(tiny(scenario), d)
        out[scenario] = d
    return out


def _group_view(t: RolloutTable, col: str) -> list[np.ndarray]:
    g = np.asarray(t.group)
    return [np.asarray(getattr(t, col))[g == k] for k in np.unique(g)]


@pytest.mark.train
def test_scenarios_write_the_same_artifacts(tiny_runs):
    files = {
        s: sorted(str(p.relative_to(d)) for p in d.rglob("*") if p.is_file())
        for s, d in tiny_runs.items()
    }
    assert files["reference"] == files["task_reward"] == files["no_std_norm"]
    cfg = tiny()
    assert all(
        f"checkpoints/{ckpt_name(s)}.safetensors" in files["reference"]
        for s in checkpoint_steps(cfg)
    )
    summary = json.loads((tiny_runs["task_reward"] / "summary.json").read_text())
    assert summary["scenario"] == "task_reward" and summary["backend"] == "native"
    assert summary["n_rollouts"] == cfg.grpo.steps * cfg.grpo.rollouts_per_step


@pytest.mark.train
def test_reference_advantages_are_std_normalized(tiny_runs):
    t = RolloutTable.load(tiny_runs["reference"] / "rollouts")
    for r, a in zip(_group_view(t, "reward"), _group_view(t, "advantage"), strict=True):
        if r.std() == 0:
            assert np.all(a == 0)  # no variance, no gradient
        else:
            expect = (r - r.mean()) / (r.std(ddof=1) + 1e-8)
            np.testing.assert_allclose(a, expect, rtol=1e-5, atol=1e-6)


@pytest.mark.train
def test_no_std_norm_advantages_are_centred_rewards(tiny_runs):
    t = RolloutTable.load(tiny_runs["no_std_norm"] / "rollouts")
    for r, a in zip(_group_view(t, "reward"), _group_view(t, "advantage"), strict=True):
        np.testing.assert_allclose(a, r - r.mean(), atol=1e-5)


@pytest.mark.train
def test_task_reward_keeps_variance_in_every_group(tiny_runs):
    """The point of the scenario: reward variance does not depend on the contaminator."""
    t = RolloutTable.load(tiny_runs["task_reward"] / "rollouts")
    assert all(r.std() > 0 for r in _group_view(t, "reward_base"))
    ref = RolloutTable.load(tiny_runs["reference"] / "rollouts")
    assert sum(r.std() > 0 for r in _group_view(ref, "reward_base")) < len(np.unique(ref.group))


@pytest.mark.train
def test_progress_bars_only_when_asked(tmp_path, capsys):
    train_run(tiny(), tmp_path / "quiet")
    assert capsys.readouterr().err == ""
    train_run(tiny(), tmp_path / "loud", progress=True)
    err = capsys.readouterr().err
    assert "SFT" in err and "GRPO" in err


@pytest.mark.train
def test_training_leaves_the_global_rng_alone(tmp_path):
    torch.manual_seed(123)
    state, np_state = torch.get_rng_state(), np.random.get_state()
    train_run(tiny(), tmp_path / "run")
    assert torch.equal(torch.get_rng_state(), state)
    assert np.array_equal(np.random.get_state()[1], np_state[1])


def test_backend_must_be_known():
    with pytest.raises(ValueError, match="backend='jax' is unknown; choose one of native, trl"):
        GRPOConfig(backend="jax")


def test_cli_train_rejects_an_unknown_scenario(tmp_path, capsys):
    from bt_core.cli import main

    with pytest.raises(SystemExit) as e:
        main(["train", "--scale", "smoke", "--scenario", "bogus", "--out", str(tmp_path / "r")])
    assert e.value.code == 2 and "invalid choice: 'bogus'" in capsys.readouterr().err
