"""Counterfactual replays (bt_core.counterfactual.replay, bt_core.artifacts.replays) and the two
items built on them.

Replay-building tests use the session's smoke artifacts (marked `train` by conftest)."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from bt_core.artifacts.keys import replay_key
from bt_core.config import CounterfactualConfig, get_scale
from bt_core.counterfactual.plan import (
    ReplaySpec,
    local_pool,
    measure_config,
    measure_step,
    plan,
    trained_window,
)


def _fake_rollouts(n_steps: int = 10, per_step: int = 8, seed: int = 0):
    rng = np.random.default_rng(seed)
    step = np.repeat(np.arange(n_steps), per_step)
    adv = rng.standard_normal(step.size).astype(np.float32)
    adv[step == 3] = 0.0  # a step without reward variance: outside the trained window
    gt = (rng.random(step.size) < 0.1) & (step < 6)
    return SimpleNamespace(step=step, advantage=adv, gt=gt)


def test_plan_is_deterministic_and_sized():
    s = get_scale("smoke")
    cf = dataclasses.replace(s.counterfactual, n_lds=16)  # opted in: the half-window subsets too
    cfg = s.run
    t = _fake_rollouts(n_steps=cfg.grpo.steps)
    a, b = plan(t, cfg, cf), plan(t, cfg, cf)
    assert [x.name for x in a] == [x.name for x in b]
    assert all(np.array_equal(x.removed, y.removed) for x, y in zip(a, b, strict=True))
    window = trained_window(t, cfg)
    assert (
        not window[np.asarray(t.step) == 3].any()
        and not window[np.asarray(t.step) >= cfg.task.cutoff_step].any()
    )
    by = {x.name: x for x in a}
    n_gt = int(np.asarray(t.gt).sum())
    assert by["gt_out"].removed.size == n_gt and by["full"].removed.size == 0
    lds = [x for x in a if x.name.startswith("lds_")]
    assert len(lds) == cf.n_lds
    assert {x.removed.size for x in lds} == {round(cf.lds_fraction * window.sum())}
    for x in lds + [by[f"random_{i}"] for i in range(cf.n_random)]:
        assert window[x.removed].all() and np.all(np.diff(x.removed) > 0)
    assert len({x.identity()["removed_sha256"] for x in lds}) == len(lds)  # distinct subsets
    local = [x for x in a if x.name.startswith("local_")]
    pool = local_pool(t, window)
    first = np.asarray(t.step)[window].min()
    assert len(local) == cf.n_local and not pool[np.asarray(t.step) == first].any()
    assert pool.sum() == window.sum() - (window & (np.asarray(t.step) == first)).sum()
    assert {x.removed.size for x in local} == {round(cf.local_fraction * window.sum())}
    assert all(pool[x.removed].all() and np.all(np.diff(x.removed) > 0) for x in local)
    assert len({x.identity()["removed_sha256"] for x in local}) == len(local)
    rew = [x for x in a if x.name.startswith("reweight_")]
    assert len(rew) == cf.n_reweight and by["full_f64"].dtype == "float64"
    assert by["full_f64"].removed.size == 0
    for i, x in enumerate(rew):  # the local subsets' own draws, kept at weight 1 − δ, in float64
        assert x.weight == pytest.approx(1 - cf.reweight_delta)
        assert x.dtype == "float64"
        if i < len(local):
            assert np.array_equal(x.removed, local[i].removed)
    # the ladder: the first judged subsets again, at each larger δ
    lin = [x for x in a if x.name.startswith("linear_")]
    assert len(lin) == cf.n_linearity * len(cf.linearity_deltas) > 0
    for k, d in enumerate(cf.linearity_deltas):
        for i in range(cf.n_linearity):
            x = by[f"linear_{k}_{i}"]
            assert x.weight == pytest.approx(1 - d) and d > cf.reweight_delta
            assert np.array_equal(x.removed, rew[i].removed) and x.dtype == "float64"
    other = plan(t, cfg.with_seed(1), cf)  # another seed draws other subsets
    assert not np.array_equal(other[-1].removed, a[-1].removed)
    assert all(x.measure_step == measure_step(cfg) >= cfg.task.cutoff_step for x in a)


def test_replay_key_is_keyed_by_subset():
    cf = CounterfactualConfig()
    one = ReplaySpec("x", "remove", np.array([1, 2, 3]), 12)
    other = ReplaySpec("y", "remove", np.array([1, 2, 4]), 12)
    same = ReplaySpec("z", "remove", np.array([1, 2, 3]), 12)  # the name is no part of the identity
    k = lambda sp: replay_key("run", sp.identity(), measure_config(cf))  # noqa: E731
    assert k(one) != k(other) and k(one) == k(same)
    assert k(one) != replay_key("other-run", one.identity(), measure_config(cf))
    assert k(one) != k(ReplaySpec("b", "no_bonus", np.array([1, 2, 3]), 12))
    with pytest.raises(ValueError, match="mode"):
        ReplaySpec("bad", "regenerate", np.array([], np.int64), 12)
    # a float32 removal keeps the identity it had before reweightings existed (cache stays valid)
    assert set(one.identity()) == {"mode", "n_removed", "measure_step", "removed_sha256"}
    tilt = ReplaySpec("t", "remove", np.array([1, 2, 3]), 12, weight=0.99, dtype="float64")
    f64 = ReplaySpec("d", "remove", np.array([1, 2, 3]), 12, dtype="float64")
    assert len({k(one), k(tilt), k(f64)}) == 3
    with pytest.raises(ValueError, match="weight"):
        ReplaySpec("bad", "remove", np.array([1]), 12, weight=1.0)
    with pytest.raises(ValueError, match="dtype"):
        ReplaySpec("bad", "remove", np.array([1]), 12, dtype="float16")


def test_counterfactual_config_checks():
    with pytest.raises(ValueError, match="lds_fraction"):
        CounterfactualConfig(lds_fraction=1.0)
    with pytest.raises(ValueError, match="n_random"):
        CounterfactualConfig(n_random=1)
    with pytest.raises(ValueError, match="local_fraction"):
        CounterfactualConfig(local_fraction=0.0)
    with pytest.raises(ValueError, match="n_local"):
        CounterfactualConfig(n_local=4)
    with pytest.raises(ValueError, match="n_reweight"):
        CounterfactualConfig(n_reweight=4)
    with pytest.raises(ValueError, match="reweight_delta"):
        CounterfactualConfig(reweight_delta=1.0)
    with pytest.raises(ValueError, match=r"linearity_deltas=\(0\.5, 1e-05\) must each lie in"):
        CounterfactualConfig(reweight_delta=1e-4, linearity_deltas=(0.5, 1e-5))
    with pytest.raises(ValueError, match="n_linearity=40 must lie in"):
        CounterfactualConfig(n_reweight=32, n_linearity=40)
    with pytest.raises(ValueError, match="repeats a δ"):
        CounterfactualConfig(linearity_deltas=(1e-2, 1e-2))
    with pytest.raises(ValueError, match="n_lds=4 must be 0"):
        CounterfactualConfig(n_lds=4)
    assert CounterfactualConfig(n_lds=0, n_linearity=0).n_lds == 0  # both are opt-outs


# --------------------------------------------------------------------------- replays of real runs
def test_replay_removing_nothing_reproduces_every_checkpoint(smoke_artifacts):
    """Bit-exact on CPU: the replay calls training's own update on the logged batch."""
    from bt_core.counterfactual.replay import replay_model
    from bt_core.training.model import torch_threads

    run = smoke_artifacts[0].run
    n = len(run.rollouts)
    seen = []

    def check(step, model, opt):
        if step + 1 in run.checkpoint_steps:
            ref = run.model_at(step + 1)
            pairs = zip(model.parameters(), ref.parameters(), strict=True)
            diff = max(float((p - q).detach().abs().max()) for p, q in pairs)
            seen.append((step + 1, diff))

    with torch_threads(run.config.threads):
        replay_model(
            run,
            np.ones(n, bool),
            np.asarray(run.rollouts.advantage, np.float32),
            0,
            run.config.grpo.steps,
            on_step=check,
        )
    assert [s for s, _ in seen] == run.checkpoint_steps[1:]
    assert all(d == 0.0 for _, d in seen), seen


def test_removed_rows_leave_exactly_their_terms(smoke_artifacts):
    """One partial step's gradient is the logged gradient minus the removed rollouts' terms
    A_i∇ℓ_i/(G·B): the logged advantages and the loss weights of the kept rows do not change
    (first-order additivity)."""
    from bt_core.counterfactual.replay import partial_update
    from bt_core.training import grpo

    run = smoke_artifacts[0].run
    t = run.rollouts
    step = int(np.asarray(t.step)[np.flatnonzero(np.asarray(t.advantage) != 0)[0]])
    rows = np.flatnonzero(np.asarray(t.step) == step)
    part = t.select(rows)
    adv = np.asarray(part.advantage, np.float32)
    live = np.ones(len(rows), bool)
    live[::3] = False

    def grad_of(keep):
        model = run.model_at(step if step in run.checkpoint_steps else 0)
        opt = torch.optim.SGD(model.parameters(), lr=0.0)  # lr 0: read the gradient only
        partial_update(model, opt, part, keep, adv, run.codec, grad_clip=1e9)
        return torch.cat([p.grad.flatten() for p in model.parameters()])

    model = run.model_at(step if step in run.checkpoint_steps else 0)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    grpo.update(model, opt, part, run.codec, grad_clip=1e9)
    full = torch.cat([p.grad.flatten() for p in model.parameters()])
    kept, removed = grad_of(live), grad_of(~live)
    assert torch.allclose(kept + removed, full, atol=1e-6, rtol=1e-4)
    assert not torch.allclose(kept, full)


def test_replay_artifacts_hold_the_plan(smoke_artifacts, smoke_scale):
    for a in smoke_artifacts.values():
        r = a.replays
        specs = plan(a.run.rollouts, a.run.config, smoke_scale.counterfactual)
        assert list(r.by_name) == [sp.name for sp in specs]
        assert len(set(r.keys.values())) == len(specs)  # every subset has its own artifact
        for sp in specs:
            assert np.array_equal(r[sp.name].removed, sp.removed)
        # nothing removed: the stored checkpoint is measured
        assert r["full"].info["steps_replayed"] == 0
        ind = r.indicators("reweight")
        assert ind.shape == (smoke_scale.counterfactual.n_reweight, len(a.run.rollouts))
        assert not ind[:, ~r.window].any()
        assert r.delta("full") == 0.0


def test_reweightings_are_first_order_for_the_exact_influence(smoke_evidence):
    """The judged perturbation (weights 1 − δ on a local subset, float64 replays from step 0 beside
    `full_f64`) is where the first-order term dominates: the typical reweight_<i>'s measured Δ is
    δ·Σ metagrad over its subset to 2%, and their rank correlation (metagrad's LDS) is ≥ 0.95 on
    every smoke seed. (Not every subset: on seed 0 those holding rollouts of the window's second
    step, AdamW's second update, depart by up to ~40% at δ = 0.01 and reach the derivative only at
    δ ≈ 1e-4: checklist/counterfactual.py.) `full_f64` replays every step and differs from the
    stored float32 trajectory's measure by rounding only."""
    from scipy.stats import spearmanr

    from bt_core.attribution.catalog import get

    ev = smoke_evidence
    for seed, a in ev.artifacts.items():
        r = a.replays
        f64 = r["full_f64"]
        assert f64.info["steps_replayed"] == r.measure.step and f64.info["dtype"] == "float64"
        assert abs(f64.nll - r["full"].nll) < 1e-4
        score = ev.scores(get("metagrad"), ev.stream_problem(seed))
        names = r.names("reweight")
        delta = 1 - r[names[0]].info["weight"]
        measured = np.array([r.delta(n) for n in names])
        predicted = delta * r.indicators("reweight").astype(float) @ score
        assert np.median(np.abs(measured - predicted) / np.abs(measured)) < 0.02, seed
        assert spearmanr(predicted, measured)[0] >= 0.95, seed


def test_full_replay_measures_the_stored_checkpoint(smoke_artifacts):
    from bt_core.training.behavior import behavior_nll

    a = smoke_artifacts[0]
    r = a.replays
    model = a.run.model_at(r.measure.step)
    assert behavior_nll(model, r.measure.examples, a.run.codec.pad_id) == pytest.approx(
        r["full"].nll, abs=1e-6
    )


# --------------------------------------------------------------------------- tracin_adam
def test_tracin_adam_reads_no_labels_and_reduces_to_tracincp_without_adam(smoke_evidence):
    """With P ≡ 1 the preconditioned target, rebuilt in parameter space and sketched, is the stored
    sketched target: tracin_adam then equals tracincp (so the parameter-space path is the same
    target)."""
    import dataclasses

    from bt_core.attribution.catalog import get
    from bt_core.training.checkpoints import adam_preconditioner

    spec = get("tracin_adam")
    assert "labels" not in spec.needs and "truth" not in spec.needs
    p = smoke_evidence.stream_problem(0)
    n_params = int(smoke_evidence.artifacts[0].sketches.report["n_params"])
    ones = dataclasses.replace(p, preconditioner=lambda c: np.ones(n_params, np.float32))
    a, b = spec.create().score(ones), smoke_evidence.scores(get("tracincp"), p)
    assert np.allclose(a, b, atol=1e-9 * np.abs(b).max())
    s = smoke_evidence.scores(spec, p)
    assert np.isfinite(s).all() and not np.allclose(s / np.abs(s).max(), b / np.abs(b).max())
    run = smoke_evidence.artifacts[0].run
    assert adam_preconditioner(run, 0) is None  # saved before the first GRPO update
    pc = adam_preconditioner(run, run.checkpoint_steps[1])
    assert pc.shape == (n_params,) and (pc >= 0).all() and (pc > 0).mean() > 0.5


# --------------------------------------------------------------------------- LDS metrics (unit)
def test_spearman_rows_matches_scipy_and_bootstrap_is_paired():
    from scipy.stats import spearmanr

    from bt_core.metrics import lds_bootstrap, percentile_ci, spearman_rows

    rng = np.random.default_rng(0)
    y = rng.standard_normal(40)
    preds = np.stack([y + rng.standard_normal(40), np.round(rng.standard_normal(40)), -y])
    lds, boot = lds_bootstrap(preds, y, n_boot=500, seed=1)
    assert np.allclose(lds, [spearmanr(p, y)[0] for p in preds])
    assert np.allclose(spearman_rows(preds, y), lds)
    assert boot.shape == (3, 500)
    # same resamples: a sign flip is the exact mirror in every resample
    assert np.allclose(boot[2], -1.0)
    assert percentile_ci(boot[0])[0] > 0 and percentile_ci(boot[0] - boot[2])[0] > 0
    assert np.isnan(spearman_rows(np.ones(5), np.arange(5.0)))


def test_datamodel_ceiling_recovers_a_linear_effect_and_not_noise():
    from bt_core.metrics import datamodel_ceiling

    rng = np.random.default_rng(0)
    x = rng.random((100, 20))
    assert datamodel_ceiling(x, x @ rng.standard_normal(20) + 0.05 * rng.standard_normal(100)) > 0.9
    assert abs(datamodel_ceiling(x, rng.standard_normal(100))) < 0.4


# --------------------------------------------------------------------------- the items at smoke
def test_causal_gt_passes_at_smoke_with_figures(smoke_evidence):
    from behaviortrace.checklist import causal_gt

    from bt_core.config import get_scale

    v = causal_gt.evaluate_setup(smoke_evidence)
    assert v.status == "pass", v.reason
    n_random = get_scale("smoke").counterfactual.n_random
    for s, f in v.figures["per_seed"].items():
        assert f["delta_gt"] > f["delta_random_max"] and f["delta_gt"] > f["bar"]
        assert f["s_b_control_measure"] <= 0.1 and f["s_b_control_final"] <= 0.1
        assert len(f["delta_random"]) == n_random
        # the no-bonus replay's figures (reported, not judged) are that replay's own, and the bonus
        # acted: taking it out of the logged rewards moved the behavior measure
        replays = smoke_evidence.artifacts[int(s)].replays
        nb, full = replays["no_bonus"], replays["full"]
        assert f["s_b_probes_no_bonus"] == float(nb.info["s_b_probes"])
        assert f["delta_no_bonus"] == pytest.approx(nb.nll - full.nll) and f["delta_no_bonus"] != 0
        assert f"no-bonus replay s_b {f['s_b_probes_no_bonus']:.3f}" in f["why"]


class _Flipped:
    """The sign-flipped scores of another estimator."""

    def __init__(self, inner):
        self.inner = inner

    def score(self, problem):
        return -np.asarray(self.inner.score(problem))


def _flipped_spec(name: str):
    from bt_core.attribution.catalog import get
    from bt_core.attribution.registry import EstimatorSpec

    base = get(name)
    return EstimatorSpec(
        f"{name}_flipped", lambda: _Flipped(base.create()), base.levels, "test", "", base.needs
    )


def test_counterfactual_discriminates(smoke_evidence_in_process):
    """random fails; a sign-flipped method fails with exactly the negated LDS; the oracle's labels
    carry counterfactual signal (mean LDS over seeds > 0 and above random's) though they need not
    pass: the item's docstring says why the GT count of a subset is not a perfect LDS predictor."""
    from behaviortrace.checklist import counterfactual as cf

    from bt_core.attribution.catalog import get

    ev = smoke_evidence_in_process
    assert cf.evaluate(get("random"), ev).status == "fail"
    flipped, base = _flipped_spec("tracincp"), get("tracincp")
    # invalid-setup where in_context_targets fails (it reads targets): the rule's
    v = cf.evaluate(flipped, ev)
    assert v.figures.get("ungated_status", v.status) == "fail"  # own status is kept in the record
    for s in ev.seeds:
        a, b = cf.evaluate_seed(base, ev, s), cf.evaluate_seed(flipped, ev, s)
        assert b["lds"] == pytest.approx(-a["lds"]) and b["ci"][1] < 0 < a["ci"][0]
    oracle = [cf.evaluate_seed(get("oracle"), ev, s)["lds"] for s in ev.seeds]
    rnd = [cf.evaluate_seed(get("random"), ev, s)["lds"] for s in ev.seeds]
    assert np.mean(oracle) > 0 and np.mean(oracle) > np.mean(rnd)
    # counterfactual's one comparison is the LDS against chance (issue 61): its verdict is the sign
    # of its CI's lower bound, whatever the controls' LDS
    for s in ev.seeds:
        f = cf.evaluate_seed(base, ev, s)
        assert (f["status"] == "pass") == (f["ci"][0] > 0)
        assert list(f["versus"]) == [cf.CHANCE]


def test_magnitude_controls_causal_form_is_its_own_paired_comparison(smoke_evidence_in_process):
    """magnitude_control's causal view compares the LDS with each control's over the same
    resamples: a control never beats itself (paired difference ≡ 0), and the verdict is that
    comparison's, whatever counterfactual's (issue 61)."""
    from behaviortrace.checklist import counterfactual as cf
    from behaviortrace.checklist import magnitude_control as mc
    from behaviortrace.checklist._base import CAUSAL

    from bt_core.attribution.catalog import get

    ev = smoke_evidence_in_process
    norm = mc.evaluate(get("norm_only"), ev, CAUSAL)
    assert norm.status == "fail"
    for f in norm.figures["per_seed"].values():
        assert f["diff_ci"]["norm_only"] == [0.0, 0.0]
        assert set(f["versus"]) == set(cf.BASELINES)
    for s in ev.seeds:
        f = mc.evaluate_seed(get("tracincp"), ev, s)["views"][CAUSAL]
        assert (f["status"] == "pass") == all(lo > 0 for lo, _ in f["diff_ci"].values())


def test_the_items_lds_table_row_and_shared_rows():
    from behaviortrace.checklist import counterfactual as cf

    from bt_core.reporting.present import table_rows

    f = {
        "lds": 0.5,
        "ci": [0.2, 0.7],
        "baselines_lds": {"advantage": 0.1, "surface": 0.3},
        "baselines_ci": {"advantage": [0.0, 0.2], "surface": [0.1, 0.4]},
        "ceiling": 0.4,
    }
    rec = {
        "item": "counterfactual",
        "estimator": "x",
        "status": "pass",
        "figures": {"per_seed": {"0": f}},
        "estimator_spec": {"name": "x"},
    }
    table = next(p for p in cf.present(rec)["panels"] if p["kind"] == "table")
    rows = table_rows(table)
    assert table["columns"] == ["LDS [95% CI]", "seed 0"]
    assert [r[0] for r in rows][1:] == [
        "control: advantage",
        "surface baseline",
        "ceiling (step-count datamodel)",
    ]
    assert rows[0][1].startswith("0.5") and rows[-1][1].startswith("0.4")


def test_a_judge_that_loads_cached_replays_says_loaded_in_one_line(
    smoke_artifacts, smoke_cache, smoke_scale, tmp_path, capsys
):
    """Issue 64: a session whose replays are all in the cache loads them; it does not say it
    replayed them ("started (68 replay)", "done 68/68 replay in 0.5 s"), only, in one line, that it
    loaded them. Here the seed's index of its replays is absent and every replay cached."""
    from bt_core.artifacts.store import ArtifactStore
    from bt_core.counterfactual.plan import plan
    from bt_core.pipeline import build_replays

    (tmp_path / "replays").symlink_to(smoke_cache / "replays", target_is_directory=True)
    a, cfg = smoke_artifacts[0], smoke_scale.run.with_seed(0)
    capsys.readouterr()
    _, replays = build_replays(
        ArtifactStore(tmp_path), a.run, cfg, smoke_scale.counterfactual, progress=True
    )
    n = len(plan(a.run.rollouts, a.run.config, smoke_scale.counterfactual))
    assert capsys.readouterr().err.splitlines() == [f"replays seed 0: loaded {n} cached replays"]
    assert replays.names("reweight") == a.replays.names("reweight")
