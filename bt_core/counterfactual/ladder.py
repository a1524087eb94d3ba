"""The ladder from cheap to exact (issue 62): rungs that each differentiate the **same** f as
the exact ideal (`bt_core.counterfactual.metagrad`: the behavior NLL at the measurement step T)
through a surrogate of the logged updates in which some dependencies on the rollout weights w are
frozen (stop-gradient). Each rung is then the exact derivative of its surrogate, checked against
finite differences of that surrogate (tests/test_ladder.py), and adds one thing the ideal
propagates:

    R0   ⟨∇ℓ_i(θ_c), ∇f(θ_T)⟩ at the stored checkpoint c ≤ the rollout's step, no replay: the
         surrogate takes plain gradient steps of size η at the checkpoints,
         θ_T(w) = θ_T + η Σ_i (w_i − 1) c_i A_i ∇ℓ_i(θ_c)
    R0c  the same with ∇f(θ_c), the measure's gradient at the rollout's own checkpoint: it isolates
         where the target is taken
    R1   a float64 replay's θ_s at the rollout's own step s, through that step's AdamW update with
         its preconditioner 1/d_s, the clip κ_s, the first moment carried from earlier steps and
         the second moment all frozen (m_{s+1} = β₁ sg(m_s) + (1−β₁) u_s): only the update of step
         s itself moves, and weight decay carries it to T
    R2   plus momentum and the second moment carried to T (m and v of every later step move with
         w_i), the clip frozen and no curvature (every later gradient is taken at its logged θ):
         AdamW-influence's structure (Deng et al. 2026)
    R3   plus the clip's dependence on w (κ_s = min(1, C/(‖g_s‖ + δ)) moves with w_i)
    R4(k) plus the curvature in the last k checkpoint intervals before T: there each gradient is
         taken at the θ that w moved (the Hessian-vector products of `metagrad`'s reverse sweep,
         by its own code); earlier gradients stay at their logged θ. k = 0 is R3; k at least the
         number of intervals is the exact ideal, `metagrad`

The nested form (the last k intervals, for every rollout) costs the curved intervals' share of
`metagrad`'s reverse work; a horizon of k intervals after each rollout's own step would cost about
k × `metagrad`'s. With the adjoints of
`bt_core.counterfactual.metagrad` (θ̄, m̄, v̄ swept from T down), R1–R3 are that sweep with the
Hessian term dropped (θ̄_s = (1 − ηλ) θ̄_{s+1}) and, per rung, m̄ (R1: 0), V (R1: 0) and the clip's
⟨ū, g⟩ term (R1, R2: none) dropped; ∂f/∂w_i = −c_i A_i ⟨∇ℓ_i(θ_s), ḡ_s⟩ for every rollout i of
step s. From R1 up the rungs are nested: each one's surrogate freezes a subset of what the one
below freezes (R0 and R0c, at the checkpoints without a replay, sit below R1 but are not nested in
it; R0c, the side branch, also takes f at the rollout's checkpoint instead of at T).

**Cost.** R0 and R0c need no replay: one forward-mode product (a JVP, `torch.func.jvp`) of each
step's rollouts at its stored checkpoint along one target per checkpoint, and the measure's
gradient. R1–R4 follow the ideal's trajectory (`states`, as `metagrad`): a float64 sweep from step 0
keeping (θ, m, v) at the cuts, then per checkpoint segment one replay that keeps each step's θ_s,
gradient and moments, the closed-form adjoints (vector operations) and one JVP per step — no graph
is kept and no double backward is taken, where the ideal takes one per step. R4(k) does the same
outside its k curved intervals and runs the ideal's own segment inside them.

It reads what `metagrad` reads (`LoggedStream`): token ids, advantages, steps and groups of the
logged stream, the checkpoints with their AdamW state, the clip norm and the measure's examples.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

import numpy as np
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from bt_core.counterfactual.metagrad import (
    STATES,
    LoggedStream,
    _flat,
    _hyper,
    _Layout,
    _replayed,
    _reverse_step,
    _segment,
    _snapshot,
    _State,
    _stored,
    pull_back,
)
from bt_core.counterfactual.replay import step_bounds, step_coef
from bt_core.training import grpo
from bt_core.training.behavior import measure_loss
from bt_core.training.model import cast_model, torch_threads
from bt_core.training.objective import rollout_logprob


@dataclass(frozen=True)
class Rung:
    """What one rung propagates (module docstring); each flag adds one dependency on w."""

    name: str
    sentence: str
    replay: bool = False  # θ_s and AdamW's state at every step (else: the stored checkpoints)
    target_at_checkpoint: bool = False  # ∇f(θ_c) (R0c) instead of ∇f(θ_T)
    momentum: bool = False  # m carried from the rollout's step to T
    second_moment: bool = False  # v (hence d) moves with w
    clip: bool = False  # κ moves with w
    curvature: bool = False  # the later gradients move with θ in the last k checkpoint intervals


_R2 = {"replay": True, "momentum": True, "second_moment": True}
RUNGS = {
    r.name: r
    for r in (
        Rung(
            "R0",
            "⟨∇ℓ_i(θ_c), ∇f(θ_T)⟩ at the stored checkpoint before the rollout's step, no replay",
        ),
        Rung(
            "R0c",
            "⟨∇ℓ_i(θ_c), ∇f(θ_c)⟩: R0 with the measure's gradient at the rollout's own checkpoint",
            target_at_checkpoint=True,
        ),
        Rung(
            "R1",
            "the rollout's own step on the replayed trajectory, through its AdamW preconditioner, "
            "clip and moments frozen",
            replay=True,
        ),
        Rung(
            "R2",
            "R1 plus momentum and the second moment carried to T, no curvature (AdamW-influence's "
            "structure)",
            **_R2,
        ),
        Rung("R3", "R2 plus the clip's dependence on the weights", **_R2, clip=True),
        Rung(
            "R4",
            "R3 plus the exact curvature (Hessian-vector products) in the last k checkpoint "
            "intervals before T: k = 0 is R3, every interval is metagrad",
            **_R2,
            clip=True,
            curvature=True,
        ),
    )
}
# rows per forward-mode product (their tangents are held at once)
BATCH = 64


def rung(name: str) -> Rung:
    """The rung called `name`, or a ValueError that lists them."""
    if name not in RUNGS:
        raise ValueError(
            f"rung={name!r} is unknown; choose one of "
            + "; ".join(f"{r.name}: {r.sentence}" for r in RUNGS.values())
        )
    return RUNGS[name]


def check_k(r: Rung, k) -> None:
    """A clear error for an R4 `k` that is not a whole number ≥ 0, or a `k` given another rung."""
    if not isinstance(k, int) or isinstance(k, bool) or k < 0:
        raise ValueError(
            f"k={k!r} must be a whole number ≥ 0: R4's checkpoint intervals before the "
            "measurement step with curvature (0: R3; all of them: metagrad)"
        )
    if k and not r.curvature:
        raise ValueError(
            f"k={k} is R4's setting (its checkpoint intervals with curvature); rung {r.name} "
            "propagates no curvature: use ladder_r4, or leave k out"
        )


def rollout_dots(model, theta: list[torch.Tensor], direction: list[torch.Tensor], part, codec):
    """⟨∇ℓ_i(θ), direction⟩ for every row of `part` (a rollout view), (n,) float64: one
    forward-mode product per `BATCH` rows (`torch.func.jvp` through `model` called at θ; the fused
    attention kernel, which has no forward-mode derivative here, off)."""
    names = [n for n, _ in model.named_parameters()]
    model.train()
    out = []
    for a in range(0, len(part), BATCH):
        batch = grpo.batch_of(part.select(np.arange(a, min(a + BATCH, len(part)))), codec)

        def ell(*ps, batch=batch):
            params = dict(zip(names, ps, strict=True))
            return rollout_logprob(
                lambda **kw: torch.func.functional_call(model, params, (), kw), batch
            )

        with sdpa_kernel(SDPBackend.MATH):
            _, tangent = torch.func.jvp(ell, tuple(theta), tuple(direction))
        out.append(tangent.detach().double().numpy())
    return np.concatenate(out) if out else np.zeros(0)


def _measure_grad(model, examples, pad_id: int) -> tuple[float, list[torch.Tensor]]:
    f = measure_loss(model, examples, pad_id)
    return float(f.detach()), [g.detach() for g in torch.autograd.grad(f, list(model.parameters()))]


def _checkpoint_rung(stream: LoggedStream, examples, measure_step: int, r: Rung, dtype) -> dict:
    """R0 and R0c: ∂f/∂w_i = η c_i A_i ⟨∇ℓ_i(θ_c), ∇f(θ_T or θ_c)⟩ (module docstring)."""
    t = stream.rollouts
    step = np.asarray(t.step)
    cps = sorted(int(c) for c in stream.checkpoint_steps if c < measure_step)
    dfdw = np.zeros(len(step))
    nll, target = None, None
    if not r.target_at_checkpoint:
        nll, target = _measure_grad(
            cast_model(stream.model_at(measure_step), dtype), examples, stream.codec.pad_id
        )
    for c, nxt in zip(cps, [*cps[1:], measure_step], strict=True):
        model, opt = _stored(stream, c, dtype)
        lr = _hyper(opt)["lr"]
        theta = [p.detach() for p in model.parameters()]
        direction = target
        if r.target_at_checkpoint:
            _, direction = _measure_grad(model, examples, stream.codec.pad_id)
        rows = np.flatnonzero((step >= c) & (step < nxt) & (np.asarray(t.advantage) != 0))
        if rows.size == 0:
            continue
        bounds = step_bounds(step, c, nxt)
        for s in range(c, nxt):
            idx = rows[(rows >= bounds[s - c]) & (rows < bounds[s - c + 1])]
            if idx.size == 0:
                continue
            part = t.select(idx)
            dots = rollout_dots(model, theta, direction, part, stream.codec)
            dfdw[idx] = (
                lr
                * step_coef(t.select(np.arange(bounds[s - c], bounds[s - c + 1])))[
                    idx - bounds[s - c]
                ]
                * dots
            )
    return {"dfdw": dfdw, "nll": nll}


@dataclass
class _Kept:
    """One replayed step: the state before it, θ_s and g_s (flat), its live rows."""

    state: _State
    g: torch.Tensor
    live: np.ndarray


def _replay_segment(stream: LoggedStream, a: int, b: int, dtype, start) -> tuple[list, dict]:
    """Replay steps [a, b) from `start` ((model, AdamW) at step a) as the suite's replays do
    (`counterfactual.replay.partial_update`: the live rows, their logged loss weights, torch's clip
    and AdamW), keeping each step's state, θ_s and unclipped gradient g_s."""
    model, opt = start if start is not None else _stored(stream, a, dtype)
    params = list(model.parameters())
    t, bounds = stream.rollouts, step_bounds(stream.rollouts.step, a, b)
    kept = []
    for s in range(a, b):
        state = _snapshot(model, opt, theta=True)
        part = t.select(np.arange(bounds[s - a], bounds[s - a + 1]))
        live = np.asarray(part.advantage) != 0
        rows = np.flatnonzero(live)
        model.train()
        opt.zero_grad(set_to_none=True)
        if rows.size:
            ell = rollout_logprob(model, grpo.batch_of(part.select(rows), stream.codec))
            coef = torch.from_numpy(step_coef(part)[rows]).to(ell.dtype)
            (-(coef * ell).sum()).backward()
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        g = _flat(p.grad for p in params)
        torch.nn.utils.clip_grad_norm_(params, stream.grad_clip)
        opt.step()
        kept.append(_Kept(state, g, live))
    return kept, _hyper(opt)


def _stepwise_rung(
    stream: LoggedStream, examples, measure_step: int, r: Rung, dtype, states: str, k: int = 0
) -> dict:
    """R1–R4 (module docstring), on the trajectory `states` names (as `metagrad.metagradient`):
    the last `k` checkpoint intervals (R4) through `metagrad`'s own segment replay and reverse step,
    the Hessian term included; the others without it."""
    t = stream.rollouts
    step = np.asarray(t.step)
    cuts = sorted(
        {int(c) for c in stream.checkpoint_steps if c < measure_step} | {int(measure_step)}
    )
    kept, drift = _replayed(stream, cuts, dtype) if states == "replayed" else ({}, 0.0)
    model = kept.pop(measure_step)[0] if kept else cast_model(stream.model_at(measure_step), dtype)
    nll, grad = _measure_grad(model, examples, stream.codec.pad_id)
    layout = _Layout(list(model.parameters()))
    th = _flat(grad)
    adj = (th, torch.zeros_like(th), torch.zeros_like(th))
    dfdw = np.zeros(len(step))
    for j, (a, b) in enumerate(reversed(list(zip(cuts[:-1], cuts[1:], strict=True)))):
        start = kept.pop(a, None)
        bounds = step_bounds(step, a, b)
        if j < k:  # curvature: the ideal's own sweep over this interval
            curved, hp, _ = _segment(stream, a, b, dtype, start)
            for s in range(b - 1, a - 1, -1):
                rows = np.arange(bounds[s - a], bounds[s - a + 1])
                adj, gw = _reverse_step(curved[s - a], hp, stream.grad_clip, adj, layout)
                if gw is not None:
                    dfdw[rows[curved[s - a].live]] = gw
                curved[s - a] = None
            continue
        steps, hp = _replay_segment(stream, a, b, dtype, start)
        for s in range(b - 1, a - 1, -1):
            kp = steps[s - a]
            adj, g_bar = pull_back(
                kp.g,
                kp.state,
                hp,
                stream.grad_clip,
                adj,
                layout,
                r.momentum,
                r.second_moment,
                r.clip,
            )
            rows = np.arange(bounds[s - a], bounds[s - a + 1])[kp.live]
            if rows.size:
                part = t.select(rows)
                dots = rollout_dots(
                    model, layout.views(kp.state.theta), layout.views(g_bar), part, stream.codec
                )
                dfdw[rows] = (
                    -step_coef(t.select(np.arange(bounds[s - a], bounds[s - a + 1])))[kp.live]
                    * dots
                )
            steps[s - a] = None
    return {"dfdw": dfdw, "nll": nll, "drift": drift, "curved_intervals": min(k, len(cuts) - 1)}


def rung_gradient(
    stream: LoggedStream,
    examples,
    measure_step: int,
    name: str,
    dtype: torch.dtype = torch.float64,
    threads: int | None = None,
    states: str = "stored",
    k: int = 0,
) -> dict:
    """∂f/∂w_i of every logged rollout under rung `name`'s surrogate (module docstring):
    ``{"dfdw": (N,) float64, "nll": f(θ_T) (None for R0c), "seconds", "rung"}``. `states` as
    `metagrad.metagradient` (R1–R4; R0 and R0c read the stored checkpoints, their point being no
    replay). `k`: R4's checkpoint intervals with curvature, counted back from T (more than there
    are: all of them, the ideal)."""
    r = rung(name)
    check_k(r, k)
    if states not in STATES:
        raise ValueError(f"states={states!r} is unknown; choose one of {', '.join(STATES)}")
    if measure_step not in stream.checkpoint_steps:
        raise ValueError(
            f"measure_step={measure_step} is not a stored checkpoint "
            f"({list(stream.checkpoint_steps)})"
        )
    t0 = time.perf_counter()
    with torch_threads(threads) if threads else contextlib.nullcontext():
        if r.replay:
            out = _stepwise_rung(stream, examples, measure_step, r, dtype, states, k)
        else:
            out = _checkpoint_rung(stream, examples, measure_step, r, dtype)
    return {**out, "seconds": time.perf_counter() - t0, "rung": r.name}
