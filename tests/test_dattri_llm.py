"""The dattri-llm adapters, ``adamw_influence_dattri`` and ``dvemb_dattri`` (issue 63), on the test
suite's smoke build: each is checked where its mathematics meets a quantity the suite computes
itself.

* On a draw (one update, from the empty step) AdamW-influence's push is emitted before any
  transition: it is exactly `metagrad`'s draw score. DVEmb is η⟨g_i(θ_S), ∇f(θ'_∅)⟩.
* On the stream, with every per-sample gradient scaled by ε and the scores divided by ε, the
  Gauss-Newton terms (quadratic in the gradients) vanish: AdamW-influence is then the ladder's R2
  (momentum and the second moment carried to T, no curvature; the clip never acts here), and DVEmb
  is η⟨g_i(θ_s), ∇f(θ_T)⟩ at the replayed θ_s of each rollout's step.
* The full methods' Spearman against R2, R0, R4(1) and the ideal is reported.

Skipped, with the install command, where the extra is not installed.
"""

import importlib.metadata

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr

from bt_core.attribution.adapters import INSTALL
from bt_core.attribution.catalog import get

pytest.importorskip("dattri_llm", reason=INSTALL["dattri_llm"])

from bt_core.attribution.adapters import dattri_llm_adapter  # noqa: E402

EPS = 1e-4  # the gradients' scale that makes the curvature terms vanish (ε² against ε)


@pytest.fixture(scope="module")
def draw(smoke_evidence):
    return smoke_evidence.draw_problem(smoke_evidence.seeds[0], 0)


@pytest.fixture(scope="module")
def stream(smoke_evidence):
    return smoke_evidence.stream_problem(smoke_evidence.seeds[0])


_SCORED: dict = {}


def _score(name, problem, **settings) -> np.ndarray:
    key = (name, problem.name, tuple(sorted(settings.items())))
    if key not in _SCORED:
        spec = get(name)
        _SCORED[key] = spec.create(**settings).score(problem.handout(spec.needs))
    return _SCORED[key]


def _linearized(name, problem, monkeypatch, **settings) -> np.ndarray:
    """The adapter's score with every per-sample gradient scaled by ε, over ε."""
    real = dattri_llm_adapter.per_sample_grads
    monkeypatch.setattr(dattri_llm_adapter, "per_sample_grads", lambda *a: real(*a) * EPS)
    spec = get(name)
    out = spec.create(**settings).score(problem.handout(spec.needs)) / EPS
    monkeypatch.undo()
    return out


def _close(a, b, rel: float) -> None:
    np.testing.assert_allclose(a, b, rtol=0, atol=rel * np.abs(b).max())


def test_adamw_influence_on_a_draw_is_the_ideal(draw):
    # float32 in the library against metagrad's float64: measured 3e-7 of the largest score
    _close(_score("adamw_influence_dattri", draw), _score("metagrad", draw), 1e-5)


def test_dvemb_on_a_draw_is_the_one_step_dot_product(draw, record_property):
    from bt_core.counterfactual.ladder import rollout_dots
    from bt_core.counterfactual.metagrad import _hyper, _Layout
    from bt_core.counterfactual.metagrad_draws import empty_step_grad
    from bt_core.training.model import cast_model

    s = int(draw.extra["analysis_step"])
    model = cast_model(draw.model_at(s), torch.float64)
    opt = draw.optimizer_at(s, model)
    _, grad_f, _ = empty_step_grad(model, opt, draw.measure.examples, draw.codec.pad_id)
    params = list(model.parameters())
    dots = rollout_dots(
        model,
        [p.detach() for p in params],
        _Layout(params).views(grad_f),
        draw.rollouts,
        draw.codec,
    )
    exact = -_hyper(opt)["lr"] * float(draw.extra["loss_weight"]) * dots
    dv = _score("dvemb_dattri", draw)
    _close(dv, exact, 1e-5)
    rho = float(spearmanr(dv, _score("ladder_r0", draw))[0])
    record_property("draw_spearman_dvemb_vs_r0", round(rho, 4))
    # R0 takes ∇f at the checkpoint, DVEmb after the empty step: the same ranking to first order
    assert rho > 0.9, rho


def test_adamw_influence_without_its_curvature_is_r2(stream, monkeypatch, record_property):
    lin = _linearized("adamw_influence_dattri", stream, monkeypatch)
    r2 = _score("ladder_r2", stream)
    # the push uses the unclipped g_i where R2 carries κ_s g_i: equal where the clip never acts
    np.testing.assert_array_equal(r2, _score("ladder_r3", stream))
    _close(lin, r2, 1e-5)  # measured 5.5e-7 (float32 against float64)
    window = np.asarray(stream.measure.window, bool)
    full = _score("adamw_influence_dattri", stream)
    for other in ("ladder_r2", "ladder_r4", "metagrad"):
        rho = float(spearmanr(full[window], _score(other, stream)[window])[0])
        record_property(f"spearman_adamw_influence_vs_{other}", round(rho, 4))
        print(f"\nSpearman(adamw_influence_dattri, {other}) on the window: {rho:.4f}")


def test_dvemb_without_its_curvature_is_each_steps_dot_product(
    stream, monkeypatch, record_property
):
    """η⟨∇L_i(θ_s), ∇f(θ_T)⟩ for 5 rollouts with A ≠ 0 of distinct steps, at their replayed θ_s;
    the per-sample gradients of each such step sum to the replay's own batch gradient."""
    lin = _linearized("dvemb_dattri", stream, monkeypatch)
    spec = get("dvemb_dattri")
    source, _, query, _, _, _ = spec.create()._stream_source(stream.handout(spec.needs))
    step, adv = np.asarray(stream.rollouts.step), np.asarray(stream.rollouts.advantage)
    live = np.flatnonzero(np.asarray(stream.measure.window, bool) & (adv != 0))
    rng = np.random.default_rng(0)
    for s in rng.choice(np.unique(step[live]), 5, replace=False):
        r = source._record(int(s))
        theta = source.layout.views(r["theta"])
        g = dattri_llm_adapter.per_sample_grads(
            source.model, theta, r["part"], r["weight"], stream.codec
        )
        # the library's rows are the replay's batch gradient, split by rollout
        np.testing.assert_allclose(
            g.double().sum(0).numpy(), r["g"].numpy(), rtol=0, atol=1e-5 * float(r["g"].abs().max())
        )
        row = int(rng.choice(live[step[live] == s]))
        i = int(np.flatnonzero(r["rows"] == row)[0])
        exact = r["hp"]["lr"] * float((g[i].double() * query.double()).sum())
        assert exact != 0
        assert lin[row] == pytest.approx(exact, rel=1e-4)
    window = np.asarray(stream.measure.window, bool)
    full = _score("dvemb_dattri", stream)
    for other in ("ladder_r0", "metagrad"):
        rho = float(spearmanr(full[window], _score(other, stream)[window])[0])
        record_property(f"spearman_dvemb_vs_{other}", round(rho, 4))
        print(f"\nSpearman(dvemb_dattri, {other}) on the window: {rho:.4f}")


def test_the_curvature_acts_and_its_scale_is_the_mean_losss(stream, monkeypatch):
    """The Gauss-Newton term changes AdamW-influence's scores (the linearized ones differ), and
    its "mean" scale (the step's row count n) is "sum"'s with every gradient scaled by √n: then
    the push scales by √n and the curvature is the same."""
    lin = _linearized("adamw_influence_dattri", stream, monkeypatch)
    full = _score("adamw_influence_dattri", stream)
    assert np.abs(full - lin).max() > 1e-2 * np.abs(lin).max()
    counts = np.unique(np.bincount(np.asarray(stream.rollouts.step)))
    assert counts.size == 1, counts  # one row count per step: √n is one number
    root = float(np.sqrt(counts[0]))
    real = dattri_llm_adapter.per_sample_grads
    monkeypatch.setattr(dattri_llm_adapter, "per_sample_grads", lambda *a: real(*a) * root)
    spec = get("adamw_influence_dattri")
    summed = spec.create(loss_reduction="sum").score(stream.handout(spec.needs)) / root
    monkeypatch.undo()
    _close(summed, full, 1e-4)


def test_every_setting_runs_and_moves_the_scores_as_it_should(stream):
    window = np.asarray(stream.measure.window, bool)

    def rho(a, b):
        return float(spearmanr(a[window], b[window])[0])

    dv = _score("dvemb_dattri", stream)
    est = get("dvemb_dattri").create()
    source = est._stream_source(stream.handout(get("dvemb_dattri").needs))[0]
    lr = source.lr(0)
    # the logged learning rate, given as a number: the same sweep
    np.testing.assert_array_equal(_score("dvemb_dattri", stream, learning_rate=lr), dv)
    assert rho(_score("dvemb_dattri", stream, hessian_mode="diagonal"), dv) > 0.9
    aw = _score("adamw_influence_dattri", stream)
    # the stored checkpoints instead of the float64 replay, float32 instead of float64: drift
    assert rho(_score("adamw_influence_dattri", stream, states="stored"), aw) > 0.99
    assert rho(_score("adamw_influence_dattri", stream, dtype="float32"), aw) > 0.99


def test_each_segment_is_replayed_once(stream):
    spec = get("adamw_influence_dattri")
    est = spec.create()
    est.score(stream.handout(spec.needs))
    T = int(stream.measure.step)
    segments = len({int(c) for c in stream.checkpoint_steps if c < T})
    assert est.figures[stream.name]["segments_replayed"] == segments


@pytest.mark.parametrize("name", ["adamw_influence_dattri", "dvemb_dattri"])
def test_the_stream_scores_the_window_and_records_the_version(stream, name):
    spec = get(name)
    est = spec.create()
    s = _score(name, stream, window_only=False)
    window = np.asarray(stream.measure.window, bool)
    before = np.asarray(stream.rollouts.step) < int(stream.measure.step)
    assert s.shape == (stream.n_units,) and np.isfinite(s).all()
    live = before & (np.asarray(stream.rollouts.advantage) != 0)
    # every rollout before T with A ≠ 0 is scored (the window is a setting), none at or after T
    assert np.all(s[~before] == 0) and np.all(s[live] != 0)
    np.testing.assert_array_equal(_score(name, stream), np.where(window, s, 0.0))
    assert est.params["dattri_llm"] == importlib.metadata.version("dattri-llm")
    assert spec.opt_in


def test_a_sweep_over_its_memory_is_declined(draw):
    from bt_core.attribution.registry import Declined

    spec = get("adamw_influence_dattri")
    est = spec.create()
    est.score(draw.handout(spec.needs))
    gb = est.figures[draw.name]["memory_gb"]
    assert 0 < gb < 4
    with pytest.raises(Declined, match=r"about [\d.]+ GiB \(p = [\d,]+ parameters.*max_gb="):
        spec.create(max_gb=gb * 0.9).score(draw.handout(spec.needs))
    spec.create(max_gb=gb * 1.1).score(draw.handout(spec.needs))


def test_bad_settings_say_what_to_do():
    with pytest.raises(ValueError, match="loss_reduction='avg'.*'mean'.*'sum'"):
        get("adamw_influence_dattri").create(loss_reduction="avg")
    with pytest.raises(ValueError, match="hessian_mode='block'.*'full'.*'diagonal'"):
        get("dvemb_dattri").create(hessian_mode="block")
    with pytest.raises(ValueError, match="learning_rate=-1.*'logged'.*positive"):
        get("dvemb_dattri").create(learning_rate=-1)
    with pytest.raises(ValueError, match="max_gb=0.*positive"):
        get("dvemb_dattri").create(max_gb=0)


def test_it_scores_in_the_sandboxed_worker(smoke_evidence, draw):
    """Through the suite's own scoring path (the sandboxed worker where bubblewrap is installed):
    the same scores as in this process."""
    spec = get("adamw_influence_dattri")
    np.testing.assert_allclose(
        smoke_evidence.scores(spec, draw), _score("adamw_influence_dattri", draw), rtol=1e-6
    )
