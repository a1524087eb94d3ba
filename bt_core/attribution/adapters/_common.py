"""What the library adapters share: the inputs they need, the checkpoint grouping, and the tensors
they feed their library, all built from the shared per-rollout objective.

Every adapter computes its own gradients: the model of a checkpoint comes from
`problem.model_at(step)`, the training rows from `grpo.batch_of(problem.rollouts…)`, the target rows
from `problem.target_examples(kind, step)`, and the per-example function each library differentiates
is

    f_i(θ) = w_i · ℓ_i(θ)       (`bt_core.training.objective.rollout_logprob`, the function training
                                used)

with w_i = A_i for training rollouts (1 on draws) and w_j = coef_j for target rows, so that a
library's "loss" −f_i has gradient w_i·e_i for a rollout and Σ_j over the target rows gives exactly
the target t = Σ_j coef_j ∇(−m_j). Libraries that evaluate the training gradient at checkpoints see
each rollout at the greatest checkpoint ≤ its step (the same assignment as `tracincp`), one library
call per checkpoint.

Scale: these run per-example gradients through a library on CPU, within seconds on a draw (a few
hundred siblings). On the training stream they would take gradients of every rollout at its
checkpoint — about a minute per seed at smoke on 2 cores, far more at the default scale (9,600
rollouts) — so by default they *decline* stream problems (`bt_core.attribution.registry.Declined`;
the checklist reports the item as failed with `declined=True` and this reason) and score draws only.
`stream=True` lifts that; `max_units` (default 2,000) still refuses anything larger with
`ProblemTooLarge`. Use the built-in counterpart on the stream.
"""

from __future__ import annotations

import functools

import numpy as np
import torch

from bt_core.attribution.registry import Declined
from bt_core.targets.examples import examples_batch
from bt_core.training import grpo
from bt_core.training.model import torch_threads
from bt_core.training.objective import Batch, rollout_logprob

NEEDS = ("rollouts", "model_at", "codec", "target_examples", "weight", "lr", "ckpt_index")
MAX_UNITS = 2000


class ProblemTooLarge(Declined, ValueError):
    """The adapter declines a problem above its unit budget (see the module docstring)."""


def check_problem(problem, name: str, max_units: int, stream: bool = False) -> None:
    missing = [f for f in NEEDS if getattr(problem, f, None) is None]
    if missing:
        raise ValueError(
            f"{name} computes its own gradients and needs problem.{', problem.'.join(missing)}; "
            f"{problem.name or 'this problem'} lacks them (Evidence's rollout-level problems have "
            "them)"
        )
    if problem.level != "rollout":
        raise ValueError(f"{name} attributes rollouts; level {problem.level!r} is not supported")
    if problem.kind == "stream" and not stream:
        raise Declined(
            f"{name} scores draw problems only; the training stream ({problem.n_units} rollouts) "
            "would need library per-example gradients of every rollout at its checkpoint "
            "(documented limitation). Use the built-in counterpart, or construct it with "
            "stream=True"
        )
    if problem.n_units > max_units:
        raise ProblemTooLarge(
            f"{name} declines {problem.name}: {problem.n_units} units > max_units={max_units} "
            "(per-example gradients through the library on CPU would take too long); use its "
            "built-in counterpart here, or construct it with a larger max_units"
        )


def single_threaded(score):
    """Run an adapter's `score` with `self.threads` torch threads (class default 1). Measured at
    smoke on 2 busy cores: with torch's default 2 threads a draw took captum 0.6–37 s and traker
    1.2–7 s from run to run (OpenMP threads contending with other processes over many tiny
    per-example ops); with 1 thread, 0.5 s and 1.6 s every time."""

    @functools.wraps(score)
    def wrapper(self, problem):
        with torch_threads(getattr(self, "threads", 1)):
            return score(self, problem)

    return wrapper


def checkpoint_groups(problem) -> list[tuple[int, np.ndarray]]:
    """[(checkpoint step, unit rows)] — each unit under the greatest checkpoint ≤ its step."""
    out = []
    for j in np.unique(problem.ckpt_index):
        out.append((int(problem.checkpoint_steps[j]), np.flatnonzero(problem.ckpt_index == j)))
    return out


def train_tensors(problem, rows: np.ndarray) -> tuple[torch.Tensor, ...]:
    """(input_ids, attention_mask, position_ids, loss_mask, weight) of the rollouts `rows`."""
    b = grpo.batch_of(problem.rollouts.select(rows), problem.codec)
    w = torch.as_tensor(np.asarray(problem.weight)[rows], dtype=torch.float32)
    return b.input_ids, b.attention_mask, b.position_ids, b.loss_mask, w


def target_tensors(problem, kind: str, step: int) -> tuple[torch.Tensor, ...]:
    """(input_ids, attention_mask, position_ids, loss_mask, coef) of the target's rows at `step`."""
    ex = problem.target_examples(kind, step)
    if ex is None or len(ex) == 0:
        raise ValueError(
            f"target {kind!r} was not built at checkpoint {step} of {problem.name} "
            "(no sampled reply showed the behavior); choose another target="
        )
    b = examples_batch(ex, problem.codec.pad_id)
    return (
        b.input_ids,
        b.attention_mask,
        b.position_ids,
        b.loss_mask,
        torch.as_tensor(ex.coef, dtype=torch.float32),
    )


def weighted_logprob(model, params, ids, att, pos, mask, w) -> torch.Tensor:
    """f = w·ℓ for ONE example (no batch dim) under `params` — the function vmap-based libraries
    differentiate. `params` is a dict (or a (params, buffers) tuple) for
    `torch.func.functional_call`."""
    fmodel = lambda **kw: torch.func.functional_call(model, params, (), kw)  # noqa: E731
    ell = rollout_logprob(fmodel, Batch(ids[None], att[None], pos[None], mask[None], 0))
    return w * ell[0]


class LogProbModule(torch.nn.Module):
    """Wraps a causal LM so that model(ids, att, pos, mask) = ℓ per row, (B,) — for
    hook/autograd-based libraries (captum) that call `model(*inputs)`."""

    def __init__(self, lm: torch.nn.Module):
        super().__init__()
        self.lm = lm

    def forward(self, ids, att, pos, mask) -> torch.Tensor:
        return rollout_logprob(self.lm, Batch(ids, att, pos, mask, 0))


def state_of(problem, step: int) -> dict[str, torch.Tensor]:
    return problem.model_at(step).state_dict()
