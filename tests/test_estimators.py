"""Built-in estimators: their formulas on synthetic problems, TRAK's exact primal/dual equivalence,
target selection, levels and inputs, and a run of every built-in on the smoke evidence."""

import dataclasses

import numpy as np
import pytest

from bt_core.attribution.catalog import get
from bt_core.attribution.estimators.cosine import group_centred_cosine
from bt_core.attribution.estimators.trak import trak_dual, trak_primal
from bt_core.attribution.evidence import EstimatorFailure, Evidence
from bt_core.attribution.problem import AttributionProblem, UnknownTargetError

BUILTINS = (
    "random",
    "norm_only",
    "fluency",
    "cosine",
    "cosine_centred",
    "local_buffer",
    "dot",
    "tracincp",
    "trak",
    "oracle",
)
TARGETED = ("cosine", "cosine_centred", "local_buffer", "dot", "tracincp", "trak")


def _contrib(p: AttributionProblem) -> np.ndarray:
    return p.weight[:, None] * np.asarray(p.emb, np.float64)


def _t(p: AttributionProblem, kind: str = "in_context") -> np.ndarray:
    return np.asarray(p.targets[kind], np.float64)[p.ckpt_index]


def _cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.einsum("ij,ij->i", a, b) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def test_every_builtin_is_registered_with_levels_and_needs():
    for name in BUILTINS:
        spec = get(name)
        assert spec.origin == "builtin" and spec.levels and set(spec.levels) <= {"rollout", "step"}
        given = AttributionProblem.synthetic(labelled=spec.reads_labels)  # what the suite hands it
        assert all(hasattr(given, f) for f in spec.needs), name
        assert spec.reads_labels == (name == "oracle"), name  # the one built-in label reader


def test_dot_tracincp_cosine_formulas():
    p = AttributionProblem.synthetic(seed=1)
    dot = np.einsum("ij,ij->i", _contrib(p), _t(p))
    assert np.allclose(get("dot").create().score(p), dot)
    assert np.allclose(get("tracincp").create().score(p), p.lr * dot)
    assert np.allclose(get("cosine").create().score(p), p.lr * _cos(_contrib(p), _t(p)))
    assert np.allclose(
        get("dot").create(target="constructed").score(p),
        np.einsum("ij,ij->i", _contrib(p), _t(p, "constructed")),
    )


def test_sign_convention_unit_that_lowers_the_target_loss_ranks_first():
    """A unit whose update contribution A·e points along t (its SGD step −ηA·e lowers the target
    loss) scores positive, one pointing against it negative, whatever the sign of A."""
    p = AttributionProblem.synthetic(seed=2)
    t = p.targets["in_context"][p.ckpt_index[0]]
    emb = np.array(p.emb)
    emb[0], emb[1] = -t, t  # unit 0 gets a negative advantage below: A·e = +|A|·t
    weight = np.array(p.weight)
    weight[0], weight[1] = -2.0, -2.0
    q = dataclasses.replace(p, emb=emb, weight=weight)
    for name in ("dot", "tracincp", "cosine", "trak"):
        s = get(name).create().score(q)
        assert s[0] > 0 > s[1], name


def test_group_centred_cosine_matches_direct_computation():
    p = AttributionProblem.synthetic(seed=3, n_units=40, group_size=5)
    c = _contrib(p)
    means = np.stack([c[p.group == g].mean(0) for g in p.group])
    assert np.allclose(group_centred_cosine(p, "in_context", chunk=7), _cos(c - means, _t(p)))
    # the registered variant is the reference's GAS group-centred: the minimal-pair target by
    # default
    assert np.allclose(
        get("cosine_centred").create().score(p), p.lr * _cos(c - means, _t(p, "minimal_pair"))
    )
    s = get("cosine").create(centre="scores").score(p)
    assert np.allclose([s[p.group == g].mean() for g in np.unique(p.group)], 0)


def test_centring_refuses_the_step_level():
    p = AttributionProblem.synthetic(level="step")
    with pytest.raises(ValueError, match="each unit is its own group"):
        get("cosine").create(centre="embeddings").score(p)
    assert get("cosine_centred").levels == ("rollout",)


@pytest.mark.parametrize("n_units, k, n_ckpt", [(12, 16, 1), (24, 8, 3), (40, 40, 2)])
def test_trak_primal_equals_dual_equals_definition(n_units, k, n_ckpt):
    """Push-through identity: (ΦΦᵀ+λI)⁻¹Φ = Φ(ΦᵀΦ+λI)⁻¹, on problems with n < k, n > k and n = k."""
    p = AttributionProblem.synthetic(
        n_units=n_units, k=k, n_ckpt=n_ckpt, group_size=4, seed=n_units
    )
    t = p.targets["in_context"]
    phi = _contrib(p)
    lam = 0.1 * (phi**2).sum() / k
    direct = np.linalg.inv(phi @ phi.T + lam * np.eye(n_units)) @ phi @ t.astype(np.float64).T
    assert np.allclose(trak_dual(p, t), direct, rtol=1e-7, atol=1e-10)
    # chunked Gram accumulation
    assert np.allclose(trak_primal(p, t, chunk=5), direct, rtol=1e-7, atol=1e-10)
    scores = {form: get("trak").create(form=form).score(p) for form in ("auto", "primal", "dual")}
    expect = direct[np.arange(n_units), p.ckpt_index]
    for form, s in scores.items():
        assert np.allclose(s, expect, rtol=1e-7, atol=1e-10), form


def test_trak_on_all_zero_embeddings_says_why():
    p = AttributionProblem.synthetic()
    with pytest.raises(ValueError, match="nothing to attribute"):
        get("trak").create().score(dataclasses.replace(p, emb=np.zeros_like(p.emb)))


def test_local_buffer_scores_only_the_last_window():
    # steps 0..19, checkpoints 0 and 10
    p = AttributionProblem.synthetic(n_units=80, group_size=4, seed=4)
    est = get("local_buffer").create(window=5)
    lo, end = est.window_of(p)
    assert (lo, end) == (5, 10)
    s = est.score(p)
    inside = (p.step >= lo) & (p.step <= end)
    assert np.allclose(s[inside], get("cosine").create().score(p)[inside])
    assert np.unique(s[~inside]).size == 1 and s[~inside][0] < s[inside].min()
    # default: 10% of the analysis point, ≥ 1
    assert get("local_buffer").create().window_of(p) == (9, 10)
    draw = dataclasses.replace(
        p,
        kind="draw",
        step=np.full(p.n_units, 10),
        ckpt_index=np.ones(p.n_units, int),
        extra={"analysis_step": 10},
    )
    assert np.allclose(get("local_buffer").create().score(draw), get("cosine").create().score(draw))
    with pytest.raises(ValueError, match="holds no unit"):
        get("local_buffer").create(window=1).score(dataclasses.replace(p, step=p.step - 100))


@pytest.mark.parametrize("name", TARGETED)
def test_target_kwarg_selects_and_rejects_kinds(name):
    p = AttributionProblem.synthetic(seed=5)
    a = get(name).create(target="in_context").score(p)
    b = get(name).create(target="minimal_pair").score(p)
    assert not np.allclose(a, b)
    with pytest.raises(
        UnknownTargetError, match="target='behaviour'.*constructed, in_context, minimal_pair"
    ):
        get(name).create(target="behaviour")


def test_problem_without_a_kind_names_the_ones_it_has():
    p = AttributionProblem.synthetic(kinds=("constructed",))
    with pytest.raises(UnknownTargetError, match="choose one of constructed"):
        p.dot("in_context")


def test_every_builtin_scores_every_smoke_problem(smoke_evidence_in_process: Evidence):
    # in this process: that sandboxed scores equal in-process ones is tests/test_sandbox.py's, and
    # .ci/run's smoke suite scores the default built-ins through the sandbox (30 workers here cost
    # 20 s)
    smoke_evidence = smoke_evidence_in_process
    seed = smoke_evidence.seeds[0]
    problems = [
        smoke_evidence.stream_problem(seed, "rollout"),
        smoke_evidence.stream_problem(seed, "step"),
        smoke_evidence.draw_problem(seed, 0),
    ]
    for name in BUILTINS:
        spec = get(name)
        for p in problems:
            if p.level not in spec.levels:
                with pytest.raises(EstimatorFailure, match="supports levels"):
                    smoke_evidence.scores(spec, p)
                continue
            s = smoke_evidence.scores(spec, p)
            assert s.shape == (p.n_units,) and np.isfinite(s).all(), (name, p.name)


def test_trak_on_the_smoke_stream_is_the_same_in_primal_and_dual(smoke_evidence: Evidence):
    # n = 864 < k = 2048: auto is dual
    p = smoke_evidence.stream_problem(smoke_evidence.seeds[0], "rollout")
    dual = get("trak").create(form="dual").score(p)
    primal = get("trak").create(form="primal", chunk=200).score(p)
    assert np.allclose(primal, dual, rtol=1e-6, atol=1e-9 * np.abs(dual).max())
