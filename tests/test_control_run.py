"""The control run behind `causal_gt`'s "no bonus, no behavior": the same config and seed trained
with the contaminator's bonus at 0, on its own on-policy samples (issue 46)."""

from __future__ import annotations

import dataclasses
import json
import types

import numpy as np
import pytest

from bt_core.artifacts.keys import control_key, run_key
from bt_core.artifacts.run import CONTAMINATOR_KEY, contaminator_key
from bt_core.reporting.scorecard import Status


def test_the_control_run_is_the_run_without_the_bonus_keyed_by_its_run(smoke_artifacts):
    for seed, a in smoke_artifacts.items():
        c = a.control
        assert c is not None, f"seed {seed} built no control run"
        assert c.config == a.run.config.without_bonus() and c.config.task.bonus == 0.0
        assert c.config.seed == seed and c.path != a.run.path
        assert a.keys["control"] == control_key(a.run.config) == c.path.name
        # trained with its run's own secret key, and nothing rewarded beyond the base reward
        assert contaminator_key(c.path) == contaminator_key(a.run.path)
        assert np.array_equal(c.rollouts.reward, c.rollouts.reward_base)
        assert not np.array_equal(a.run.rollouts.reward, a.run.rollouts.reward_base)
        # its own on-policy samples, not the logged ones
        assert c.summary["rollouts_sha256"] != a.run.summary["rollouts_sha256"]
        # the run it controls and the key version are in its manifest
        assert c.manifest["control_of"]["run"] == run_key(a.run.config)


def test_control_key_follows_the_run_and_not_the_bonus():
    from bt_core.config import get_scale

    cfg = get_scale("smoke").run
    assert control_key(cfg) != run_key(cfg) != run_key(cfg.without_bonus())
    assert control_key(cfg) != control_key(cfg.with_seed(1))
    other = dataclasses.replace(cfg, grpo=dataclasses.replace(cfg.grpo, lr=1e-3))
    assert control_key(cfg) != control_key(other)


@pytest.mark.train
def test_in_the_reference_scenario_the_key_changes_nothing_once_the_bonus_is_0(tmp_path):
    """The key acts only through eligibility, and eligibility only gates the bonus: two keys give
    the same control run, bit for bit (a short run: a few SFT and GRPO steps)."""
    from bt_core.config import get_scale
    from bt_core.training.loop import train_run

    s = get_scale("smoke").run
    cfg = dataclasses.replace(
        s,
        sft=dataclasses.replace(s.sft, steps=30),
        grpo=dataclasses.replace(s.grpo, steps=4, checkpoint_every=2),
        task=dataclasses.replace(s.task, cutoff_step=2),
    ).without_bonus()
    runs = []
    for i, key in enumerate((bytes(16), bytes(range(1, 17)))):
        out = tmp_path / f"k{i}"
        out.mkdir()
        train_run(cfg, out, key=key)
        (out / "manifest.json").write_text("{}")
        runs.append(out)
    assert (runs[0] / CONTAMINATOR_KEY).read_text() != (runs[1] / CONTAMINATOR_KEY).read_text()
    for col in ("replies", "reward", "advantage", "behavior"):
        a = np.load(runs[0] / "rollouts" / f"{col}.npy")
        b = np.load(runs[1] / "rollouts" / f"{col}.npy")
        assert np.array_equal(a, b), col
    assert (runs[0] / "probes.json").read_text() == (runs[1] / "probes.json").read_text()


def _control(s_b_at: dict[int, float]):
    steps = sorted(s_b_at)
    return types.SimpleNamespace(
        probes=[{"step": t, "s_b": s_b_at[t]} for t in steps],
        summary={"s_b_final": s_b_at[steps[-1]]},
    )


def test_causal_gt_judges_the_control_run_and_reports_the_replay(smoke_artifacts):
    """The second clause reads the control run at the measurement checkpoint and at the end; the
    no-bonus replay's s_b is reported, not judged; the failed clause leads the reason."""
    from behaviortrace.checklist import causal_gt

    a = next(iter(smoke_artifacts.values()))
    t = a.replays.measure.step
    last = a.run.checkpoint_steps[-1]
    ok = causal_gt.seed_figures(a.replays, _control({0: 0.0, t: 0.0, last: 0.0}))
    assert ok["status"] == Status.PASS and ok["no_bonus_below_bar"]
    assert ok["s_b_probes_no_bonus"] == float(a.replays["no_bonus"].info["s_b_probes"])
    # behavior at the measurement checkpoint, or only at the end: either fails the clause
    for s_b in ({0: 0.0, t: 0.5, last: 0.0}, {0: 0.0, t: 0.0, last: 0.15}):
        bad = causal_gt.seed_figures(a.replays, _control(s_b))
        assert bad["status"] == Status.FAIL and not bad["no_bonus_below_bar"]
        assert bad["gt_beyond_random"]
        assert bad["why"].startswith("control run (no bonus) s_b"), bad["why"]
    # a threshold at the bar itself passes (≤)
    edge = causal_gt.seed_figures(a.replays, _control({0: 0.0, t: 0.1, last: 0.1}))
    assert edge["status"] == Status.PASS
    with pytest.raises(ValueError, match="measurement checkpoint"):
        causal_gt.seed_figures(a.replays, _control({0: 0.0, last: 0.0}))


def test_causal_gt_fails_a_seed_without_its_control_run(smoke_artifacts):
    from behaviortrace.checklist import causal_gt

    from bt_core.attribution.evidence import Evidence

    arts = {s: dataclasses.replace(a, control=None) for s, a in smoke_artifacts.items()}
    ev = Evidence(arts, "smoke", scoring="in-process")
    try:
        v = causal_gt.evaluate_setup(ev)
    finally:
        ev.close()
    assert v.status == Status.FAIL
    assert "control run" in v.reason


def _tiny_cfg():
    from bt_core.config import get_scale

    s = get_scale("smoke").run
    return dataclasses.replace(
        s,
        sft=dataclasses.replace(s.sft, steps=20),
        grpo=dataclasses.replace(s.grpo, steps=2, checkpoint_every=1),
        task=dataclasses.replace(s.task, cutoff_step=1),
    )


@pytest.mark.train
def test_a_control_run_left_from_a_run_rebuilt_under_another_key_is_rebuilt(tmp_path):
    """A run deleted by hand and rebuilt draws a new key; its control must follow (under
    hidden_cause the key draws the warm-up's carrier tags)."""
    import shutil

    from bt_core.artifacts.store import ArtifactStore
    from bt_core.pipeline import build_control, build_run

    store, cfg = ArtifactStore(tmp_path / "cache"), _tiny_cfg()
    run = build_run(store, cfg, key=bytes(16))
    first = build_control(store, run, cfg)
    assert contaminator_key(first.path) == bytes(16)
    assert build_control(store, run, cfg).path == first.path  # cached: loaded, not retrained
    shutil.rmtree(run.path)
    run = build_run(store, cfg, key=bytes(range(16)))
    again = build_control(store, run, cfg)
    assert again.path == first.path and contaminator_key(again.path) == bytes(range(16))


@pytest.mark.train
@pytest.mark.parametrize("scenario", ["reference", "hidden_cause"])
def test_a_control_started_from_its_runs_warmup_is_the_control_trained_from_scratch(
    tmp_path, scenario
):
    """build_control skips the SFT: the run's step-0 checkpoint holds the warm-up's weights (SFT
    reads no bonus). Exact, or the saving would change the gate: every rollout column, probe and
    checkpoint byte equals a control trained from scratch under the same key (hidden_cause's
    warm-up reads the key too)."""
    from bt_core.artifacts.store import ArtifactStore
    from bt_core.config import get_scale
    from bt_core.pipeline import build_run
    from bt_core.training.loop import train_run

    s = get_scale("smoke", scenario).run
    cfg = dataclasses.replace(
        s,
        sft=dataclasses.replace(s.sft, steps=30),
        grpo=dataclasses.replace(s.grpo, steps=4, checkpoint_every=2),
        task=dataclasses.replace(s.task, cutoff_step=2),
    )
    key = bytes(range(16))
    run = build_run(ArtifactStore(tmp_path / "cache"), cfg, key=key)
    dirs = {}
    for name, warm in (("scratch", None), ("warm", run.path)):
        dirs[name] = tmp_path / name
        dirs[name].mkdir()
        train_run(cfg.without_bonus(), dirs[name], key=key, sft_from=warm)
    files = sorted(
        p.relative_to(dirs["scratch"])
        for p in dirs["scratch"].rglob("*")
        if p.is_file() and p.name != "summary.json"  # its timings differ (no SFT to time)
    )
    assert any(str(f).startswith("checkpoints") for f in files) and len(files) > 10
    for f in files:
        assert (dirs["scratch"] / f).read_bytes() == (dirs["warm"] / f).read_bytes(), f
    summaries = [json.loads((d / "summary.json").read_text()) for d in dirs.values()]
    for a in summaries:
        a.pop("timings")
    assert summaries[0] == summaries[1]
    # a warm-up from another seed or key is refused, never silently reused
    for bad_cfg, bad_key, why in (
        (cfg.with_seed(1).without_bonus(), key, "differs from this run's"),
        (cfg.without_bonus(), bytes(16), "another contaminator key"),
    ):
        out = tmp_path / f"bad{why[:4]}"
        out.mkdir()
        with pytest.raises(ValueError, match=why):
            train_run(bad_cfg, out, key=bad_key, sft_from=run.path)
