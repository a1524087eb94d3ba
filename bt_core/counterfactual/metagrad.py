"""The exact metagradient of the behavior measure through the logged GRPO updates (MAGIC's replay
idea, Ilyas & Engstrom 2025, arXiv 2504.16430, on the RL stream).

Every logged rollout i enters its step's loss with a weight w_i (1 as logged, 0 when a replay
removes it):

    L_s(θ; w) = −Σ_{i ∈ s} w_i c_i A_i ℓ_i(θ)          c_i = 1/(G·B), A_i the logged advantage

**Forward** (what training and `bt_core.counterfactual.replay` do; torch's AdamW and clip_grad_norm_
exactly):

    g_s = ∇_θ L_s(θ_s; w)                               the step's gradient
    κ_s = min(1, C/(‖g_s‖ + δ))                         δ = 1e-6, C = grad_clip;  u_s = κ_s g_s
    m_{s+1} = β₁ m_s + (1−β₁) u_s                       v_{s+1} = β₂ v_s + (1−β₂) u_s²
    d_s = √v_{s+1}/√b₂ + ε                              b₁ = 1−β₁ᵗ, b₂ = 1−β₂ᵗ (t: AdamW's step
                                                        count)
    θ_{s+1} = (1 − ηλ) θ_s − (η/b₁) m_{s+1} / d_s       η = lr, λ = weight decay

and the measure f(θ_T) = behavior NLL on the held-out probes × fixed replies at the measurement step
T (`bt_core.training.behavior.measure_loss`). The metagradient is ∂f/∂w_i at w = 1.

**Reverse** (adjoints x̄ = ∂f/∂x, swept from T down to 0): θ̄_T = ∇f(θ_T), m̄_T = v̄_T = 0; for each
step s, given (θ̄, m̄, v̄) of step s + 1:

    M = m̄ − (η/b₁) θ̄ / d_s                              total adjoint of m_{s+1}
    V = v̄ + (η/b₁) θ̄ m_{s+1} / (2 √b₂ √v_{s+1} d_s²)     total adjoint of v_{s+1} (0 where v_{s+1} =
                                                           0:
                                                         there m_{s+1} = 0 too and θ_{s+1} is flat
                                                         in v)
    ū = (1−β₁) M + 2(1−β₂) u_s ⊙ V                       the second moment's nonlinearity enters
                                                         here
    ḡ = κ ū − [C/((‖g‖+δ)² ‖g‖)] ⟨ū, g⟩ g  when clipping (κ < 1), else ḡ = ū
    θ̄_s = (1 − ηλ) θ̄ + ∇_θ⟨g_s(θ), ḡ⟩ |θ_s               a Hessian-vector product (double backward)
    m̄_s = β₁ M,   v̄_s = β₂ V
    ∂f/∂w_i = ∂⟨g_s, ḡ⟩/∂w_i = −c_i A_i ⟨∇ℓ_i(θ_s), ḡ⟩     for every rollout i of step s

The clip's dependence on w is the ⟨ū, g⟩ term (w moves ‖g‖); θ̄_s and ∂f/∂w come from one autograd
call on ⟨g(θ, w), ḡ⟩ with g built with create_graph and w a leaf (the unrolled-autograd formulation,
one interval's graphs at a time: the Adam and clip adjoints are the closed forms above, only ∇L's
Jacobian is autograd's). A row with A_i = 0 gets exactly 0; rollouts at steps ≥ T never act on θ_T
and get 0.

**Recomputation.** The states (θ_s, m_s, v_s) are recomputed by replay from the stored checkpoints
(with their AdamW state), one checkpoint interval at a time, from the last segment backwards. The
forward sweep builds each step's gradient g_s once, with its graph (`torch.func.functional_call` at
a copy of θ_s, so that AdamW can move the model's parameters on while the graph keeps θ_s), applies
it as training does, and keeps the graph; the reverse sweep differentiates that graph again (the
double backward) and frees it. Rows with A = 0 add exactly 0 to the loss and are left out of both
sweeps. Memory: 3 × n_params × (the checkpoint interval) floats plus the interval's step graphs,
never the whole trajectory. Compute: one forward + backward with graph per step, then one double
backward per step — the recomputation of g_s with its graph in the reverse sweep (a forward +
backward per step, 23% of the CPU time at default seed 1: 17.9 → 13.8 s) is gone
(`benchmarks/bench_metagrad.py` measures it beside a replay).

**Whose trajectory** (`states`). The suite's float64 replays — the truth `counterfactual` judges —
run from step 0 in float64; the stored checkpoints are float32. With `states="replayed"` one forward
sweep from step 0 in `dtype`, without graphs and with the replays' own update
(`counterfactual.replay.partial_update`), keeps a copy of (θ, m, v) at every cut, and each segment
restarts from it: metagrad is then the derivative of the replays' own trajectory. With
`states="stored"` each segment restarts from its stored checkpoint, cast to `dtype`: the derivative
of a trajectory that the float32 rounding of the checkpoints moves. Measured on a sensitive default
seed (issue 47, `benchmarks/bench_linearity.py`): as δ → 0 the stored restart's prediction over the
replayed central difference converged to 1.11 on all 4 subsets probed, the replayed one to 1.002;
the stored one spread 0.94–1.06 over another seed's subsets, enough to reorder subsets with close
effects. The sweep costs one replay's compute (a forward and backward per step, no graph) and
3 × n_params × (the cuts) floats of memory (`state_bytes`); the estimator picks "replayed" when that
fits in 1 GiB (smoke and default: a few MB; real, 135M parameters: 3.2 GB a cut, so "stored").

**Flat adjoints.** θ̄, m̄, v̄ and each step's stored moments m_s, v_s are one flat contiguous vector
each (`_Layout` gives the per-parameter views the autograd calls need), so the closed forms above
are ~20 tensor ops per step instead of ~20 per parameter tensor per step. The norms and ⟨ū, g⟩ are
still reduced parameter block by parameter block, in order, and ⟨g_s, ḡ⟩ is differentiated as a
vector–Jacobian product with ḡ's views as the output gradients, so the scores are bitwise those of
the per-parameter computation (checked on smoke seeds 0–2, float64 and float32).

**Precision.** `dtype=torch.float64` (the default) casts each checkpoint and its AdamW state and
runs both sweeps in float64; the result is then exact to float64 rounding of the float64 replay from
the stored checkpoints (tests/test_metagrad.py checks it against central finite differences through
the replay engine at ≤ 1e-3 relative error). float32 replays the logged trajectory bit-exactly but
the adjoints accumulate float32 rounding over T steps.

It reads only what a method may read (`LoggedStream`): token ids, advantages, steps and groups of
the logged stream, the checkpoints with their optimizer state, the clip norm, and the measure's
examples.
"""

from __future__ import annotations

import contextlib
import copy
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from bt_core.counterfactual.replay import loss_weights, partial_update, step_bounds
from bt_core.training import grpo
from bt_core.training.behavior import measure_loss
from bt_core.training.model import cast_model, torch_threads
from bt_core.training.objective import rollout_logprob

STATES = ("stored", "replayed")
CLIP_DELTA = 1e-6  # torch.nn.utils.clip_grad_norm_: clip_coef = max_norm / (total_norm + 1e-6)


@dataclass(frozen=True)
class LoggedStream:
    """The label-free inputs of the metagradient. `rollouts` (N rows in step order): step, group,
    advantage and the token columns (`RolloutView`); `codec`: pad_id/eos_id; `model_at(step)` and
    `optimizer_at(step, model)` the stored checkpoints (parameters, AdamW state) at
    `checkpoint_steps`."""

    rollouts: Any
    codec: Any
    model_at: Callable[[int], torch.nn.Module]
    optimizer_at: Callable[[int, torch.nn.Module], torch.optim.Optimizer]
    checkpoint_steps: tuple[int, ...]
    grad_clip: float

    def __post_init__(self) -> None:
        if self.grad_clip <= 0:
            raise ValueError(
                f"grad_clip={self.grad_clip} must be > 0 (the run's GRPOConfig.grad_clip)"
            )
        if 0 not in self.checkpoint_steps:
            raise ValueError(
                f"checkpoint_steps={list(self.checkpoint_steps)} lack step 0: the metagradient "
                "replays from the step-0 checkpoint (the SFT model with a fresh AdamW)"
            )


@dataclass
class _State:
    """θ_s, m_s, v_s, each one flat contiguous vector in `model.parameters()` order (`_Layout`
    splits one into per-parameter views), and the AdamW step count t of step s."""

    theta: torch.Tensor | None
    m: torch.Tensor
    v: torch.Tensor
    t: int


class _Layout:
    """Where each parameter lies in a flat vector (`model.parameters()` order)."""

    def __init__(self, params: list[torch.Tensor]):
        self.shapes = [p.shape for p in params]
        self.sizes = [p.numel() for p in params]
        self.offsets = [0, *np.cumsum(self.sizes).tolist()]

    def views(self, flat: torch.Tensor) -> list[torch.Tensor]:
        """Per-parameter views of `flat` (no copy), shaped as the parameters."""
        return [
            flat[a : a + n].view(shape)
            for a, n, shape in zip(self.offsets[:-1], self.sizes, self.shapes, strict=True)
        ]

    def block_sum(self, flat: torch.Tensor) -> float:
        """Σ of `flat`, reduced block by block (one parameter each) and the blocks' sums added in
        order: the reductions of the per-parameter computation, so the result is bitwise the
        same as summing per-parameter tensors."""
        bounds = zip(self.offsets[:-1], self.offsets[1:], strict=True)
        return sum(float(flat[a:b].sum()) for a, b in bounds)


def _flat(tensors) -> torch.Tensor:
    """One flat contiguous copy of `tensors`, concatenated in order."""
    return torch.cat([x.detach().reshape(-1) for x in tensors])


def _hyper(opt: torch.optim.Optimizer) -> dict:
    g = opt.param_groups[0]
    if g.get("amsgrad") or g.get("maximize") or len(opt.param_groups) != 1:
        raise ValueError(
            "the metagradient models AdamW with one parameter group, no amsgrad, no maximize"
        )
    return {
        "lr": float(g["lr"]),
        "b1": float(g["betas"][0]),
        "b2": float(g["betas"][1]),
        "eps": float(g["eps"]),
        "wd": float(g["weight_decay"]),
    }


def _snapshot(model: torch.nn.Module, opt: torch.optim.Optimizer, theta: bool = True) -> _State:
    """The state the next `opt.step()` starts from, as flat copies (m = v = 0 before AdamW's first
    step); θ left out (None) unless `theta` (the reverse sweep never reads it)."""
    params = list(model.parameters())
    st = [opt.state.get(p, {}) for p in params]
    pairs = list(zip(st, params, strict=True))
    m = _flat(s["exp_avg"] if "exp_avg" in s else torch.zeros_like(p) for s, p in pairs)
    v = _flat(s["exp_avg_sq"] if "exp_avg_sq" in s else torch.zeros_like(p) for s, p in pairs)
    t = int(float(st[0]["step"])) + 1 if "step" in st[0] else 1
    return _State(_flat(params) if theta else None, m, v, t)


@dataclass
class _Step:
    """One logged step as the forward sweep left it: the state before it (m, v, t), g_s = ∇L_s(θ_s;
    w) per parameter with its graph (built once, by the forward sweep, and differentiated again by
    the reverse one; None where the step has no row with A ≠ 0: g_s = 0), the leaves θ_s and w it
    depends on, and the live rows."""

    state: _State
    g: list[torch.Tensor] | None
    leaves: list[torch.Tensor] | None
    w: torch.Tensor | None
    live: np.ndarray


def _stored(stream: LoggedStream, a: int, dtype):
    """(model, AdamW) at the stored checkpoint `a`, cast to `dtype`."""
    model = cast_model(stream.model_at(a), dtype)
    return model, stream.optimizer_at(a, model)


def state_bytes(stream: LoggedStream, measure_step: int, dtype: torch.dtype) -> int:
    """Memory the replayed states keep (`metagradient(states="replayed")`): θ, m, v at every cut
    before the measurement step."""
    n = sum(p.numel() for p in stream.model_at(0).parameters())
    cuts = {int(c) for c in stream.checkpoint_steps if c < measure_step}
    return 3 * n * torch.empty((), dtype=dtype).element_size() * len(cuts)


def _replayed(stream: LoggedStream, cuts: list[int], dtype) -> tuple[dict, float]:
    """One forward sweep from step 0 in `dtype`, without graphs, as the suite's float64 replays run
    (`counterfactual.replay.partial_update` on the rows with A ≠ 0): a deep copy of (model, AdamW)
    at every cut — the states the segments restart from — and the max |θ − stored checkpoint| met
    at the cuts."""
    model, opt = _stored(stream, 0, dtype)
    t, bounds = stream.rollouts, step_bounds(stream.rollouts.step, 0, cuts[-1])
    keep, drift = {}, 0.0
    for s in range(cuts[-1] + 1):
        if s in cuts:
            keep[s] = copy.deepcopy((model, opt))  # one memo: the copy's AdamW holds its params
            if s:
                drift = max(drift, _drift(stream, s, model, dtype))
        if s == cuts[-1]:
            break
        part = t.select(np.arange(bounds[s], bounds[s + 1]))
        adv = np.asarray(part.advantage, np.float64)
        partial_update(model, opt, part, adv != 0, adv, stream.codec, stream.grad_clip)
    return keep, drift


def _drift(stream: LoggedStream, b: int, model, dtype) -> float:
    """max |θ − stored checkpoint b| (0 where b is not stored)."""
    if b not in stream.checkpoint_steps:
        return 0.0
    ref = cast_model(stream.model_at(b), dtype)
    pairs = zip(model.parameters(), ref.parameters(), strict=True)
    return max(float((p - q).detach().abs().max()) for p, q in pairs)


def _segment(
    stream: LoggedStream, a: int, b: int, dtype, start=None
) -> tuple[list[_Step], dict, float]:
    """Replay steps [a, b) from `start` ((model, AdamW) at step a; default: the stored checkpoint
    a), each step's gradient built with its graph (`_step_gradient`) and applied as training applies
    it (clip, AdamW): the steps, AdamW's settings, and the max |θ_b − checkpoint b| of the replay
    (float rounding: the rows with A = 0, which add exactly 0 to the loss, are left out, as the
    suite's partial replays leave them out)."""
    model, opt = start if start is not None else _stored(stream, a, dtype)
    names = [n for n, _ in model.named_parameters()]
    t, bounds = stream.rollouts, step_bounds(stream.rollouts.step, a, b)
    steps = []
    for s in range(a, b):
        state = _snapshot(model, opt, theta=False)
        part = t.select(np.arange(bounds[s - a], bounds[s - a + 1]))
        live = np.asarray(part.advantage) != 0
        g, leaves, w = _step_gradient(model, names, part, live, stream.codec, dtype)
        with torch.no_grad():
            for i, p in enumerate(model.parameters()):
                p.grad = torch.zeros_like(p) if g is None else g[i].detach().clone()
        torch.nn.utils.clip_grad_norm_(model.parameters(), stream.grad_clip)
        opt.step()
        steps.append(_Step(state, g, leaves, w, live))
    return steps, _hyper(opt), _drift(stream, b, model, dtype)


def _step_gradient(model, names: list[str], part, live: np.ndarray, codec, dtype):
    """(g_s, leaves θ_s, leaf w): g_s = ∇L_s at θ_s (the model's parameters now, by `names`), built
    with create_graph through `torch.func.functional_call`, so that the model's own parameters can
    move on (AdamW updates them in place) while the graph keeps θ_s; w: the live rows' weights. A
    step without a live row has g_s = 0: (None, None, None)."""
    rows = np.flatnonzero(live)
    if rows.size == 0:
        return None, None, None
    leaves = [p.detach().clone().requires_grad_(True) for p in model.parameters()]
    params = dict(zip(names, leaves, strict=True))
    model.train()
    coef = loss_weights(part.group)[rows] * np.asarray(part.advantage, np.float64)[rows]
    w = torch.ones(rows.size, dtype=dtype, requires_grad=True)

    def functional(**kw):
        return torch.func.functional_call(model, params, (), kw)

    # the fused CPU kernel has no double backward; the math one does
    with sdpa_kernel(SDPBackend.MATH):
        ell = rollout_logprob(functional, grpo.batch_of(part.select(rows), codec))
    loss = -(w * torch.from_numpy(coef).to(dtype) * ell).sum()
    g = torch.autograd.grad(loss, leaves, create_graph=True, allow_unused=True)
    g = [torch.zeros_like(p) if x is None else x for x, p in zip(g, leaves, strict=True)]
    return g, leaves, w


def _adam_adjoint(
    state: _State,
    gd: torch.Tensor,
    kappa: float,
    hp: dict,
    adj,
    momentum: bool = True,
    second_moment: bool = True,
):
    """The closed-form adjoints of AdamW's step s on flat vectors (module docstring): ū (before
    the clip's own term) and (θ̄_s without the Hessian term, m̄_s, v̄_s). `momentum=False` freezes
    the first moment carried from earlier steps (m̄ neither read nor passed on) and
    `second_moment=False` the second (V = 0): the ladder's surrogates
    (`bt_core.counterfactual.ladder`); the ideal takes both."""
    lr, b1, b2, eps, wd = hp["lr"], hp["b1"], hp["b2"], hp["eps"], hp["wd"]
    bc1, bc2 = 1.0 - b1**state.t, 1.0 - b2**state.t
    th_bar, m_bar, v_bar = adj
    u = kappa * gd
    m1, v1 = b1 * state.m + (1 - b1) * u, b2 * state.v + (1 - b2) * u * u
    root = v1.sqrt()
    d = root / math.sqrt(bc2) + eps
    big_m = (m_bar if momentum else 0.0) - (lr / bc1) * th_bar / d
    if not second_moment:
        zero = torch.zeros_like(th_bar)
        return (1 - b1) * big_m, ((1 - lr * wd) * th_bar, b1 * big_m if momentum else zero, zero)
    safe = torch.where(root > 0, root, torch.ones_like(root))
    big_v = v_bar + torch.where(
        root > 0, (lr / bc1) * th_bar * m1 / (2 * math.sqrt(bc2) * safe * d * d), 0.0
    )
    u_bar = (1 - b1) * big_m + 2 * (1 - b2) * u * big_v
    m_out = b1 * big_m if momentum else torch.zeros_like(th_bar)
    return u_bar, ((1 - lr * wd) * th_bar, m_out, b2 * big_v)


def pull_back(
    gd: torch.Tensor,
    state: _State,
    hp: dict,
    clip: float,
    adj,
    layout: _Layout,
    momentum: bool = True,
    second_moment: bool = True,
    clip_live: bool = True,
):
    """(θ̄, m̄, v̄) of step s+1 pulled back through step s's clip and AdamW, without the Hessian
    term: the adjoints of step s (θ̄ still lacking ∇_θ⟨g_s, ḡ⟩) and ḡ_s, the adjoint of the step's
    unclipped gradient g_s (`gd`, flat). `clip_live=False` freezes κ (no ⟨ū, g⟩ term); the flags'
    defaults are the ideal's."""
    norm = math.sqrt(layout.block_sum(gd * gd))
    kappa = min(1.0, clip / (norm + CLIP_DELTA))
    g_bar, out = _adam_adjoint(state, gd, kappa, hp, adj, momentum, second_moment)
    if clip_live and clip / (norm + CLIP_DELTA) < 1.0:  # clipping: κ depends on g (θ and w)
        dot = layout.block_sum(g_bar * gd)
        k2 = clip / ((norm + CLIP_DELTA) ** 2 * norm)
        g_bar = kappa * g_bar - k2 * dot * gd
    else:
        g_bar = kappa * g_bar
    return out, g_bar


def _reverse_step(step: _Step, hp: dict, clip: float, adj, layout: _Layout):
    """Pull (θ̄, m̄, v̄) of step s+1 (flat vectors) back through step s (module docstring). Returns
    the adjoints of step s and ∂f/∂w of the live rows (None when the step has none)."""
    n = layout.offsets[-1]
    gd = _flat(step.g) if step.g is not None else adj[0].new_zeros(n)
    (out_t, out_m, out_v), g_bar = pull_back(gd, step.state, hp, clip, adj, layout)
    if step.w is None:
        return (out_t, out_m, out_v), None
    # ∇_{θ,w}⟨g_s, ḡ⟩: a vector-Jacobian product of g_s's graph with ḡ's per-parameter views
    live = [(x, gb) for x, gb in zip(step.g, layout.views(g_bar), strict=True) if x.requires_grad]
    grads = torch.autograd.grad(
        [x for x, _ in live],
        [*step.leaves, step.w],
        grad_outputs=[gb for _, gb in live],
        allow_unused=True,
    )
    for view, h in zip(layout.views(out_t), grads[:-1], strict=True):
        if h is not None:
            view.add_(h.detach())
    return (out_t, out_m, out_v), grads[-1].detach().double().numpy()


def metagradient(
    stream: LoggedStream,
    examples,
    measure_step: int,
    dtype: torch.dtype = torch.float64,
    threads: int | None = None,
    states: str = "stored",
) -> dict:
    """∂f/∂w_i for every logged rollout (module docstring): ``{"dfdw": (N,) float64, "nll": f(θ_T),
    "forward_s", "reverse_s", "drift": max |replayed − stored| at the checkpoints, "segments",
    "states"}``. `states`: where each segment restarts (module docstring, "Whose trajectory"):
    "stored" (each stored checkpoint, cast to `dtype`) or "replayed" (one sweep from step 0 in
    `dtype`, as the float64 replays run; keeps `state_bytes`)."""
    if states not in STATES:
        raise ValueError(
            f"states={states!r} is unknown; choose one of {', '.join(STATES)} (stored: restart "
            "each segment from its stored checkpoint; replayed: from one sweep from step 0)"
        )
    t = stream.rollouts
    step = np.asarray(t.step)
    cuts = sorted(
        {int(c) for c in stream.checkpoint_steps if c < measure_step} | {int(measure_step)}
    )
    if measure_step not in stream.checkpoint_steps:
        raise ValueError(
            f"measure_step={measure_step} is not a stored checkpoint "
            f"({list(stream.checkpoint_steps)})"
        )
    dfdw = np.zeros(len(step))
    with torch_threads(threads) if threads else contextlib.nullcontext():
        t0 = time.perf_counter()
        kept, drift = _replayed(stream, cuts, dtype) if states == "replayed" else ({}, 0.0)
        sweep = time.perf_counter() - t0
        if kept:
            model = kept.pop(measure_step)[0]
        else:
            model = cast_model(stream.model_at(measure_step), dtype)
        f = measure_loss(model, examples, stream.codec.pad_id)
        params = list(model.parameters())
        layout = _Layout(params)
        th = _flat(torch.autograd.grad(f, params))  # the adjoints: one flat vector each
        adj = (th, torch.zeros_like(th), torch.zeros_like(th))
        fwd, rev = sweep, 0.0
        for a, b in reversed(list(zip(cuts[:-1], cuts[1:], strict=True))):
            t0 = time.perf_counter()
            steps, hp, dr = _segment(stream, a, b, dtype, kept.pop(a, None))
            t1 = time.perf_counter()
            drift = max(drift, dr)
            bounds = step_bounds(step, a, b)
            for s in range(b - 1, a - 1, -1):
                rows = np.arange(bounds[s - a], bounds[s - a + 1])
                adj, gw = _reverse_step(steps[s - a], hp, stream.grad_clip, adj, layout)
                if gw is not None:
                    dfdw[rows[steps[s - a].live]] = gw
                steps[s - a] = None  # its graph is freed as the sweep passes it
            fwd, rev = fwd + t1 - t0, rev + time.perf_counter() - t1
    return {
        "dfdw": dfdw,
        "nll": float(f.detach()),
        "forward_s": fwd,
        "reverse_s": rev,
        "drift": drift,
        "segments": len(cuts) - 1,
        "states": states,
    }
