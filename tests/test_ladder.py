"""The ladder's rungs (`bt_core.counterfactual.ladder`, estimators `ladder_r0` … `ladder_r4`): each
is the exact derivative of its own surrogate of the logged updates, checked against central finite
differences of that surrogate written out forward here, step by step, on the smoke build's seed 0
(the tiny problem: a 64-wide model, the window's dozen steps). The surrogate's forward recursion is
AdamW's, with the rung's frozen quantities held at their logged values; the rung computes the same
derivative by the reverse sweep and forward-mode products, so the two share no code but the
trajectory's replay. Uses the session's smoke artifacts (marked `train` by conftest)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
import pytest
import torch

N_CHECKED = 6  # window rollouts with A ≠ 0 per rung, over distinct steps
# w_i = 1 ± EPS (and ± EPS/2, for Richardson's extrapolation). Small, because AdamW's first update
# (step 0, v = 0) is u/(|u| + ε') per coordinate, nearly a sign: the surrogate is linear in w only
# within about |u_j| / |∂u_j/∂w_i| of w = 1, narrow where |u_j| is small. Measured on the step-0
# rollout checked here (R2, plain central difference): relative error 0.15 at ε = 1e-4, 1.3e-3 at
# 1e-5, 1.3e-5 at 1e-6 and 1.6e-7 at 1e-7 (it converges); on later steps 1e-8 from 1e-3 to 1e-6
EPS = 1e-6
EPS_CHECKPOINT = 1e-4  # R0, R0c: f along a line, smooth (at 1e-6 rounding reaches 9e-5)
MAX_REL_ERR = 1e-4
RUNG_NAMES = ("R0", "R0c", "R1", "R2", "R3")


@dataclass
class _At:
    """The replayed trajectory before step s: θ_s, m_s, v_s (flat float64), AdamW's step count t
    and the step's unclipped gradient g_s."""

    theta: torch.Tensor
    m: torch.Tensor
    v: torch.Tensor
    t: int
    g: torch.Tensor


def _flat(xs) -> torch.Tensor:
    return torch.cat([x.detach().reshape(-1) for x in xs])


def _step_loss(model, part, codec) -> torch.Tensor:
    from bt_core.counterfactual.replay import loss_weights
    from bt_core.training import grpo
    from bt_core.training.objective import rollout_logprob

    live = np.flatnonzero(np.asarray(part.advantage) != 0)
    coef = loss_weights(part.group)[live] * np.asarray(part.advantage, np.float64)[live]
    ell = rollout_logprob(model, grpo.batch_of(part.select(live), codec))
    return -(torch.from_numpy(coef) * ell).sum()


def _rollout_grad(model, table, i: int, codec) -> torch.Tensor:
    """∇ℓ_i at the model's parameters, from a batch of row i alone."""
    from bt_core.training import grpo
    from bt_core.training.objective import rollout_logprob

    model.train()
    ell = rollout_logprob(model, grpo.batch_of(table.select(np.array([i])), codec))[0]
    return _flat(torch.autograd.grad(ell, list(model.parameters())))


# the clip of the clipped variant: the run's (1.0) never acts at smoke, where every step's gradient
# norm is 0.15–0.47 on seed 0, so R3's clip term is checked on the same run replayed under this
# clip, which cuts about half its steps
LOW_CLIP = 0.27
# the weight decay of the decayed variant: the run's is 0, so the (1 − ηλ) factors are checked on
# the same run replayed under this λ (ηλ = 1.5e-3 a step: 1.7% over the window's 11 steps)
WD = 1.0
# what each rung's surrogate lets move with w, written here rather than read from the code under
# test, so that a flag set wrong there changes one side of the comparison only
FLAG_NAMES = ("replay", "target_at_checkpoint", "momentum", "second_moment", "clip")
FLAGS = {
    "R0": {},
    "R0c": {"target_at_checkpoint": True},
    "R1": {"replay": True},
    "R2": {"replay": True, "momentum": True, "second_moment": True},
    "R3": {"replay": True, "momentum": True, "second_moment": True, "clip": True},
    "R4": {"replay": True, "momentum": True, "second_moment": True, "clip": True},
}


@pytest.fixture(scope="module")
def tiny(smoke_evidence):
    return _trajectory(smoke_evidence)


@pytest.fixture(scope="module")
def tiny_clipped(smoke_evidence):
    return _trajectory(smoke_evidence, clip=LOW_CLIP)


@pytest.fixture(scope="module")
def tiny_decayed(smoke_evidence):
    return _trajectory(smoke_evidence, wd=WD)


def _decayed(optimizer_at, wd: float | None):
    """`optimizer_at` with the AdamW weight decay set to `wd` (None: as stored)."""
    if wd is None:
        return optimizer_at

    def at(step, model):
        opt = optimizer_at(step, model)
        opt.param_groups[0]["weight_decay"] = wd
        return opt

    return at


def _trajectory(smoke_evidence, clip: float | None = None, wd: float | None = None) -> dict:
    """Seed 0's run, measure and replayed float64 trajectory from step 0 to the measurement step
    (`counterfactual.replay.partial_update`, as the suite's float64 replays and the rungs run),
    under the run's clip or `clip` and the run's weight decay or `wd`."""
    from bt_core.counterfactual.replay import partial_update, step_bounds
    from bt_core.training.model import cast_model, torch_threads

    a = smoke_evidence.artifacts[0]
    run, measure = a.run, a.replays.measure
    clip = run.config.grpo.grad_clip if clip is None else clip
    t, T = run.rollouts, int(measure.step)
    traj = []
    with torch_threads(1):
        model = cast_model(run.model_at(0), torch.float64)
        opt = _decayed(run.optimizer_at, wd)(0, model)
        params = list(model.parameters())
        bounds = step_bounds(t.step, 0, T)
        for s in range(T):
            part = t.select(np.arange(bounds[s], bounds[s + 1]))
            st = [opt.state.get(p, {}) for p in params]
            zeros = [torch.zeros_like(p) for p in params]
            m = _flat([x.get("exp_avg", z) for x, z in zip(st, zeros, strict=True)])
            v = _flat([x.get("exp_avg_sq", z) for x, z in zip(st, zeros, strict=True)])
            count = int(float(st[0]["step"])) + 1 if "step" in st[0] else 1
            model.train()
            g = _flat(torch.autograd.grad(_step_loss(model, part, run.codec), params))
            traj.append(_At(_flat(params), m, v, count, g))
            adv = np.asarray(part.advantage, np.float64)
            partial_update(model, opt, part, adv != 0, adv, run.codec, clip)
    g0 = opt.param_groups[0]
    hp = {"lr": g0["lr"], "b1": g0["betas"][0], "b2": g0["betas"][1], "eps": g0["eps"]}
    hp["wd"] = g0["weight_decay"]
    out = {"a": a, "run": run, "measure": measure, "T": T, "traj": traj, "hp": hp, "clip": clip}
    out["clipped_steps"] = sum(float(x.g.norm()) + 1e-6 > clip for x in traj)
    out["f_T"] = _f_at(run, measure, _flat(model.parameters()))
    return out


def _f_at(run, measure, theta: torch.Tensor) -> float:
    """f(θ): the behavior NLL at the flat parameters θ."""
    from bt_core.training.behavior import behavior_nll
    from bt_core.training.model import cast_model

    model = cast_model(run.model_at(0), torch.float64)
    torch.nn.utils.vector_to_parameters(theta, model.parameters())
    return behavior_nll(model, measure.examples, run.codec.pad_id)


def _surrogate_theta_T(
    tiny, rung, s: int, dg: torch.Tensor, curved_from: int | None = None
) -> torch.Tensor:
    """θ_T of rung `rung`'s surrogate when step s's gradient moves by dg: AdamW's recursion from
    the logged state of step s, every later gradient frozen at its logged value (no curvature)
    except from step `curved_from` on (R4), where it is taken afresh at the moved θ; per rung the
    clip (R1, R2), the second moment (R1) and the carried first moment (R1) frozen."""
    from bt_core.counterfactual.replay import step_bounds
    from bt_core.training.model import cast_model

    hp, clip, traj, run = tiny["hp"], tiny["clip"], tiny["traj"], tiny["run"]
    lr, b1, b2, eps, wd = hp["lr"], hp["b1"], hp["b2"], hp["eps"], hp["wd"]
    theta, m, v = traj[s].theta.clone(), traj[s].m.clone(), traj[s].v.clone()
    model = cast_model(run.model_at(0), torch.float64)
    bounds = step_bounds(run.rollouts.step, 0, tiny["T"])
    for r in range(s, tiny["T"]):
        at = traj[r]
        g = at.g + dg if r == s else at.g
        if curved_from is not None and r > s and r >= curved_from:
            torch.nn.utils.vector_to_parameters(theta, model.parameters())
            model.train()
            part = run.rollouts.select(np.arange(bounds[r], bounds[r + 1]))
            g = _flat(torch.autograd.grad(_step_loss(model, part, run.codec), model.parameters()))
        k_logged = min(1.0, clip / (float(at.g.norm()) + 1e-6))
        kappa = min(1.0, clip / (float(g.norm()) + 1e-6)) if rung.clip else k_logged
        u, u_logged = kappa * g, k_logged * at.g
        m = b1 * (m if rung.momentum else at.m) + (1 - b1) * u
        v = b2 * v + (1 - b2) * u * u if rung.second_moment else b2 * at.v + (1 - b2) * u_logged**2
        bc1, bc2 = 1 - b1**at.t, 1 - b2**at.t
        theta = (1 - lr * wd) * theta - (lr / bc1) * m / (v.sqrt() / math.sqrt(bc2) + eps)
    return theta


def _curved_from(tiny, k: int) -> int | None:
    """The first step of the last `k` checkpoint intervals before T (None for k = 0)."""
    T = tiny["T"]
    cuts = sorted({int(c) for c in tiny["run"].checkpoint_steps if c < T} | {T})
    return None if k == 0 else cuts[max(0, len(cuts) - 1 - k)]


def _fd(tiny, name: str, i: int, k: int = 0) -> float:
    """(f(w_i = 1 + ε) − f(w_i = 1 − ε)) / 2ε through rung `name`'s surrogate, written forward (R4:
    with the curvature of the last `k` checkpoint intervals)."""
    from bt_core.counterfactual.replay import loss_weights, step_bounds
    from bt_core.training.model import cast_model

    r = SimpleNamespace(**{f: FLAGS[name].get(f, False) for f in FLAG_NAMES})
    run, measure, T = tiny["run"], tiny["measure"], tiny["T"]
    t = run.rollouts
    s = int(np.asarray(t.step)[i])
    lo, hi = step_bounds(t.step, s, s + 1)
    coef = float(loss_weights(t.select(np.arange(lo, hi)).group)[i - lo] * t.advantage[i])
    if not r.replay:  # plain gradient steps of size η at the stored checkpoint c ≤ s
        c = max(int(x) for x in run.checkpoint_steps if x <= s)
        model_c = cast_model(run.model_at(c), torch.float64)
        step = tiny["hp"]["lr"] * coef * _rollout_grad(model_c, t, i, run.codec)
        base = (
            _flat(model_c.parameters())
            if r.target_at_checkpoint
            else _flat(cast_model(run.model_at(T), torch.float64).parameters())
        )
        e = EPS_CHECKPOINT
        return (_f_at(run, measure, base + e * step) - _f_at(run, measure, base - e * step)) / (
            2 * e
        )
    model = cast_model(run.model_at(0), torch.float64)
    torch.nn.utils.vector_to_parameters(tiny["traj"][s].theta, model.parameters())
    dg = -coef * _rollout_grad(model, t, i, run.codec)  # ∂g_s/∂w_i
    cf = _curved_from(tiny, k)

    def central(e: float) -> float:
        plus = _f_at(run, measure, _surrogate_theta_T(tiny, r, s, e * dg, cf))
        minus = _f_at(run, measure, _surrogate_theta_T(tiny, r, s, -e * dg, cf))
        return (plus - minus) / (2 * e)

    # Richardson's extrapolation of the central difference: its ε² term cancels, which is the
    # error that AdamW's near-sign first step leaves at ε (see EPS)
    return (4 * central(EPS / 2) - central(EPS)) / 3


def _checked_rows(tiny) -> np.ndarray:
    t, a = tiny["run"].rollouts, tiny["a"]
    adv, step = np.asarray(t.advantage), np.asarray(t.step)
    live = np.flatnonzero(np.asarray(a.replays.window) & (adv != 0) & (step < tiny["T"]))
    rng = np.random.default_rng(0)
    firsts = [rng.choice(live[step[live] == s]) for s in np.unique(step[live])]
    return np.sort(rng.permutation(firsts)[:N_CHECKED])


_SCORED: dict[tuple, np.ndarray] = {}  # this module's rung scores, each computed once per worker


def _rung_scores(
    smoke_evidence, name: str, clip: float | None = None, wd: float | None = None
) -> np.ndarray:
    """Rung `name`'s scores on seed 0's stream, through the estimator (handed only its `needs`),
    or under another clip or weight decay through `rung_gradient` on the same handout (the states
    replayed, as the estimator's `auto` picks at smoke). Computed once per (rung, clip, decay): a
    copy each time."""
    key = (name, clip, wd)
    if key not in _SCORED:
        _SCORED[key] = _score_rung(smoke_evidence, name, clip, wd)
    return _SCORED[key].copy()


def _score_rung(smoke_evidence, name: str, clip: float | None, wd: float | None) -> np.ndarray:
    from bt_core.attribution.catalog import get
    from bt_core.counterfactual.ladder import rung_gradient
    from bt_core.counterfactual.metagrad import LoggedStream

    spec = get(f"ladder_{name.lower()}")
    assert set(spec.needs) == set(get("metagrad").needs)
    p = smoke_evidence.stream_problem(0).handout(spec.needs)
    if clip is None and wd is None:
        return spec.create().score(p)
    steps = tuple(int(c) for c in np.asarray(p.checkpoint_steps))
    clip = float(p.grad_clip) if clip is None else clip
    stream = LoggedStream(
        p.rollouts, p.codec, p.model_at, _decayed(p.optimizer_at, wd), steps, clip
    )
    out = rung_gradient(
        stream, p.measure.examples, int(p.measure.step), name, threads=1, states="replayed"
    )
    return -out["dfdw"]


def _assert_matches(got, fd, rows, tiny, what: str, eps: float) -> None:
    """The rung's −score equals the central difference to `MAX_REL_ERR` relative, beyond the
    difference's own rounding (4 float64 ulps of f over 2ε, for ε/2 and tripled by Richardson's
    combination: about 1e-10 · f at ε = 1e-6), and at least
    all but one checked rollout has a derivative far above that rounding (a real derivative is
    compared, not noise; a rollout late in the window can move f by less)."""
    # (Richardson's combination of two differences triples it for the replayed rungs; bounded
    # here by the same factor for all)
    noise = 3 * 4 * np.finfo(np.float64).eps * abs(tiny["f_T"]) / eps
    err = np.abs(got - fd)
    rel = err / np.maximum(np.abs(fd), np.abs(got))
    print(
        f"{what} vs its surrogate's central FD: worst relative error {rel.max():.3g}; smallest "
        f"|derivative| {np.abs(fd).min():.3g} (rounding {noise:.2g})"
    )
    assert (np.abs(fd) > 100 * noise).sum() >= len(fd) - 1, fd
    assert np.all(err <= MAX_REL_ERR * np.maximum(np.abs(fd), np.abs(got)) + noise), {
        int(i): (g, d) for i, g, d in zip(rows, got, fd, strict=True)
    }


@pytest.mark.parametrize(
    "name, variant",
    [(n, "logged") for n in RUNG_NAMES]
    + [("R2", "clipped"), ("R3", "clipped"), ("R1", "decayed"), ("R3", "decayed")],
)
def test_each_rung_is_the_derivative_of_its_surrogate(
    smoke_evidence, tiny, tiny_clipped, tiny_decayed, name, variant
):
    """−score_i = ∂f_rung/∂w_i equals the central difference of the rung's surrogate, written
    forward (`_surrogate_theta_T`), on rollouts of distinct steps of the window: under the run's
    own settings, for R2 and R3 under a clip that acts on some checked rollout's step
    (`LOW_CLIP`), where R3's clip term is live, and for R1 and R3 under a weight decay (`WD`)."""
    from bt_core.training.model import torch_threads

    t = {"logged": tiny, "clipped": tiny_clipped, "decayed": tiny_decayed}[variant]
    rows = _checked_rows(t)
    assert rows.size == N_CHECKED
    if variant == "clipped":
        steps = np.asarray(t["run"].rollouts.step)[rows]
        clipped = [s for s in steps if float(t["traj"][s].g.norm()) + 1e-6 > t["clip"]]
        assert 2 <= len(clipped) <= N_CHECKED - 2, (clipped, steps)
    settings = {"clipped": {"clip": LOW_CLIP}, "decayed": {"wd": WD}}.get(variant, {})
    scores = _rung_scores(smoke_evidence, name, **settings)
    with torch_threads(1):
        fd = np.array([_fd(t, name, int(i)) for i in rows])
    eps = EPS if FLAGS[name].get("replay") else EPS_CHECKPOINT
    _assert_matches(-scores[rows], fd, rows, t, f"{name} ({variant})", eps)
    if variant == "logged":
        window = np.asarray(t["a"].replays.window)
        assert np.all(scores[~window] == 0.0)


def test_each_rung_moves_the_scores_where_what_it_adds_acts(smoke_evidence, tiny, tiny_clipped):
    """No two rungs give the same scores on the window, with one exception that the fixture
    explains: R3 adds the clip's dependence on w, and the run's clip never acts at smoke, so R3 is
    R2 there exactly; under a clip that acts they differ."""
    window = np.asarray(tiny["a"].replays.window)
    got = {n: _rung_scores(smoke_evidence, n)[window] for n in RUNG_NAMES}
    assert tiny["clipped_steps"] == 0
    assert np.array_equal(got["R2"], got["R3"])
    for x in RUNG_NAMES:
        for y in RUNG_NAMES:
            if x < y and (x, y) != ("R2", "R3"):
                assert not np.allclose(got[x], got[y], rtol=1e-6, atol=0), (x, y)
    low = {n: _rung_scores(smoke_evidence, n, LOW_CLIP)[window] for n in ("R2", "R3")}
    gap = np.abs(low["R2"] - low["R3"]) / np.maximum(np.abs(low["R2"]), np.abs(low["R3"]))
    # far beyond the finite-difference tolerance, so that the clipped check above tells them apart
    print(f"R2 against R3 under a clip that acts: largest relative gap {np.nanmax(gap):.3g}")
    assert np.nanmax(gap) > 100 * MAX_REL_ERR


def test_an_unknown_rung_names_them_all():
    from bt_core.attribution.catalog import get

    with pytest.raises(ValueError, match=r"rung='R9' is unknown; choose one of R0: .*R3: "):
        get("ladder_r1").create(rung="R9")


def test_r4_is_the_derivative_of_its_surrogate_and_spans_r3_to_the_ideal(smoke_evidence, tiny):
    """R4(k): the curvature of the last k checkpoint intervals. k = 1 matches the central difference
    of its surrogate written forward (each gradient of the last interval taken afresh at the moved
    θ), on rollouts before and inside that interval; k = 0 is R3 exactly; k at least the number of
    intervals is the exact ideal, `metagrad` (the same reverse sweep, so equal to rounding)."""
    from bt_core.attribution.catalog import get
    from bt_core.training.model import torch_threads

    T = tiny["T"]
    n_intervals = len({int(c) for c in tiny["run"].checkpoint_steps if c < T})
    assert n_intervals >= 2, "the ladder's R4 needs two intervals to lie strictly between R3 and R5"
    p = smoke_evidence.stream_problem(0)
    r4 = get("ladder_r4").create(k=1).score(p.handout())
    rows = _checked_rows(tiny)
    step = np.asarray(tiny["run"].rollouts.step)
    cut = _curved_from(tiny, 1)
    assert (step[rows] < cut).any() and (step[rows] >= cut).any(), (step[rows], cut)
    with torch_threads(1):
        fd = np.array([_fd(tiny, "R4", int(i), k=1) for i in rows])
    _assert_matches(-r4[rows], fd, rows, tiny, "R4(1)", EPS)

    r3 = _rung_scores(smoke_evidence, "R3")
    assert np.array_equal(get("ladder_r4").create(k=0).score(p.handout()), r3)
    assert not np.allclose(r4, r3, rtol=1e-6, atol=0)
    ideal = get("metagrad").create().score(p.handout())
    for k in (n_intervals, n_intervals + 5):
        full = get("ladder_r4").create(k=k).score(p.handout())
        np.testing.assert_allclose(full, ideal, rtol=1e-9, atol=1e-15 * np.abs(ideal).max())


def test_k_is_r4s_alone_and_a_whole_number():
    from bt_core.attribution.catalog import get

    with pytest.raises(ValueError, match=r"k=-1 must be a whole number ≥ 0"):
        get("ladder_r4").create(k=-1)
    with pytest.raises(ValueError, match=r"k=2 is R4's setting .* rung R2 propagates no curvature"):
        get("ladder_r2").create(k=2)
