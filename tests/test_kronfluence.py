"""The Kronfluence adapter, ``ekfac_kronfluence`` (issue 63), on the test suite's smoke build.

* exactness: with kronfluence's `identity` strategy (no curvature) its score is ⟨∇f(θ_S), ∇L_i(θ_S)⟩
  over the modules kronfluence hooks (the `nn.Linear` weights, `lm_head` standing for the tied
  embedding's output side only), which this test computes itself by autograd on a model whose
  `lm_head` is untied from the embedding;
* the cross-check with the ladder's R0 (the same dot product over every parameter, both sides of the
  tied weight) is reported, with the Spearman of EK-FAC against R0, R4(1) and the ideal;
* EK-FAC with a damping far above the Fisher's eigenvalues is identity's score over λ;
* on the stream it scores the trained window (0 outside it and for A = 0), records its version and
  what it covers.

Skipped, with the install command, where the extra is not installed.
"""

import copy
import importlib.metadata

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr

from bt_core.attribution.adapters import INSTALL
from bt_core.attribution.catalog import get
from bt_core.training import grpo
from bt_core.training.behavior import measure_loss
from bt_core.training.objective import rollout_logprob

pytest.importorskip("kronfluence", reason=INSTALL["kronfluence"])


@pytest.fixture(scope="module")
def draw(smoke_evidence):
    return smoke_evidence.draw_problem(smoke_evidence.seeds[0], 0)


def _kron(problem, **settings) -> np.ndarray:
    spec = get("ekfac_kronfluence")
    return spec.create(**settings).score(problem.handout(spec.needs))


def _linear_dots(problem, step: int, rows: np.ndarray, coef: np.ndarray) -> np.ndarray:
    """⟨∇f, ∇L_i⟩ over the nn.Linear weights at `step`, lm_head untied, by autograd, for each of
    `rows`: L_i = −coef_i ℓ_i."""
    model = copy.deepcopy(problem.model_at(step)).float()
    model.lm_head.weight = torch.nn.Parameter(model.lm_head.weight.detach().clone())
    params = [m.weight for m in model.modules() if type(m) is torch.nn.Linear]
    gf = torch.autograd.grad(
        measure_loss(model, problem.measure.examples, problem.codec.pad_id), params
    )
    model.train()
    out = []
    for i, c in zip(rows, coef, strict=True):
        batch = grpo.batch_of(problem.rollouts.select(np.array([i])), problem.codec)
        gl = torch.autograd.grad(-float(c) * rollout_logprob(model, batch).sum(), params)
        out.append(sum(float((a.double() * b.double()).sum()) for a, b in zip(gf, gl, strict=True)))
    return np.array(out)


def test_identity_is_the_dot_product_over_the_linear_weights(draw, record_property):
    ident = _kron(draw, strategy="identity")
    rows = np.arange(draw.n_units)
    c = np.full(draw.n_units, float(draw.extra["loss_weight"]))
    exact = _linear_dots(draw, int(draw.extra["analysis_step"]), rows, c)
    np.testing.assert_allclose(ident, exact, rtol=2e-3, atol=1e-6 * np.abs(exact).max())
    # the ladder's R0 on a draw: −η c ⟨∇ℓ_i, ∇f⟩ over every parameter, both sides of the tied weight
    r0 = get("ladder_r0").create().score(draw.handout())
    rho = float(spearmanr(ident, r0)[0])
    record_property("spearman_identity_vs_r0", round(rho, 4))
    print(f"\nSpearman(kronfluence identity, ladder R0) on the draw: {rho:.4f}")
    # the suite's sign: on a draw R0 is the same dot product over every parameter, times η
    assert rho > 0.5, rho


def test_identity_on_the_stream_weights_each_rollout_by_its_step(smoke_evidence):
    """On the stream each rollout's train loss carries its own step's c_i A_i: rows of distinct
    steps and advantages, scored at θ_T, against autograd."""
    from bt_core.counterfactual.replay import loss_weights

    p = smoke_evidence.stream_problem(smoke_evidence.seeds[0])
    s = _kron(p, strategy="identity")
    t, m = p.rollouts, p.measure
    step, adv = np.asarray(t.step), np.asarray(t.advantage, np.float64)
    live = np.flatnonzero(np.asarray(m.window, bool) & (adv != 0))
    assert live.size, "the window has no rollout with A ≠ 0"
    rng = np.random.default_rng(0)
    rows = np.sort(
        [rng.choice(live[step[live] == k]) for k in rng.permutation(np.unique(step[live]))[:5]]
    )
    coef = []
    for r in rows:
        same = np.flatnonzero(step == step[r])
        coef.append(loss_weights(np.asarray(t.group)[same])[r - same[0]] * adv[r])
    exact = _linear_dots(p, int(m.step), rows, np.array(coef))
    np.testing.assert_allclose(s[rows], exact, rtol=2e-3, atol=1e-6 * np.abs(exact).max())


def test_ekfac_under_a_large_damping_is_identity_over_the_damping(draw):
    lam = 1e6
    damped, ident = _kron(draw, damping=lam), _kron(draw, strategy="identity")
    np.testing.assert_allclose(damped * lam, ident, rtol=1e-2, atol=1e-3 * np.abs(ident).max())


def test_the_stream_scores_the_window_and_records_what_it_covers(smoke_evidence, record_property):
    p = smoke_evidence.stream_problem(smoke_evidence.seeds[0])
    spec = get("ekfac_kronfluence")
    est = spec.create()
    s = est.score(p.handout(spec.needs))
    window = np.asarray(p.measure.window, bool)
    adv = np.asarray(p.rollouts.advantage)
    assert np.count_nonzero(window & (adv != 0)), "the window has no rollout with A ≠ 0"
    assert s.shape == (p.n_units,) and np.isfinite(s).all()
    assert np.all(s[~window] == 0) and np.all(s[adv == 0] == 0)
    assert np.count_nonzero(s) == np.count_nonzero(window & (adv != 0))
    assert est.params["kronfluence"] == importlib.metadata.version("kronfluence")
    assert "lm_head" in est.params["covers"] and "input side" in est.params["covers"]
    for other in ("ladder_r0", "metagrad"):
        ref = get(other).create().score(p.handout())
        rho = float(spearmanr(s[window], ref[window])[0])
        record_property(f"spearman_ekfac_vs_{other}", round(rho, 4))
        print(f"\nSpearman(ekfac_kronfluence, {other}) on the stream's window: {rho:.4f}")


def test_bad_settings_say_what_to_do():
    spec = get("ekfac_kronfluence")
    with pytest.raises(ValueError, match="strategy='eigen'.*identity, diagonal, kfac, ekfac"):
        spec.create(strategy="eigen")
    with pytest.raises(ValueError, match="fisher='true'.*'policy'.*'empirical'"):
        spec.create(fisher="true")
    with pytest.raises(ValueError, match="damping=-1.*≥ 0"):
        spec.create(damping=-1)


def test_a_layer_too_wide_for_its_factor_is_declined(draw):
    from bt_core.attribution.registry import Declined

    with pytest.raises(Declined, match=r"a side of \d+ \(> max_dim=8\).*strategy='diagonal'"):
        _kron(draw, max_dim=8)
