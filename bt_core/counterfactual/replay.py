"""Counterfactual replay engine: the run's stored GRPO updates replayed in order without a set of
rollouts, and the behavior measured at the measurement checkpoint.

What a replay is. From the stored checkpoint at or before the first step the counterfactual changes
(step 0 when the change starts there: the SFT model with a fresh GRPO AdamW), each logged step's
update is applied again with the same function training used (`grpo.update`: the shared objective,
backward, gradient clipping at `grad_clip`, the same AdamW, the same torch threads), on the *stored*
rollouts (token ids, logged advantages) — the rollouts are held fixed: this is the off-policy
counterfactual of the logged stream, not a re-generation. A removed rollout leaves the loss; nothing
else changes.

* A step that loses nothing replays its logged batch verbatim, so a replay that removes nothing
  lands bit-exactly on the stored checkpoints (tests/test_counterfactual.py proves max |Δθ| = 0 on
  CPU).
* A step that loses rollouts is replayed on the rows that still enter its loss: those not removed
  and with a nonzero advantage (a row with A = 0 adds exactly 0 to the loss; dropping it saves a
  third of the work at the default scale and changes only float rounding, ~1e-7). Each kept row
  keeps the weight 1/(G·B) it had in the logged loss (its group's logged size G, the step's logged
  number of groups B), so the step's gradient is exactly the logged gradient minus the removed
  rollouts' terms A_i·∇ℓ_i/(G·B) (before clipping and Adam). The denominators deliberately do not
  shrink with the removals: then the removals are exactly additive in the first-order term, which is
  what a sum of per-rollout scores predicts (shrinking them would rescale every kept rollout of the
  step, a second intervention). A step left with no row still calls AdamW with a zero gradient, as
  training did for a batch without reward variance: its moments decay and momentum still moves θ.

Advantages of a group that lost members are **kept as logged**, not recomputed. Every estimator
scores a rollout's own term A_u·∇ℓ_u of the logged update; the LDS asks whether the sum of those
scores over a subset predicts the effect of deleting exactly those terms. Recomputing would add a
second, indirect effect no per-rollout score models (removing a +8 GT rollout would take its
siblings' negative advantages to ~0: the group loses its variance), would make removal non-additive
even to first order, and is undefined for a group left with one member. The reward-redistribution
counterfactual is measured separately and on purpose: ``no_bonus`` recomputes every advantage from
the rewards without the contaminator's bonus (per logged group, with the scenario's normalization)
and removes nothing.

The measure: `bt_core.training.behavior` (the behavior NLL on held-out probes, s_b beside it).

Where the measurement checkpoint lies (`bt_core.counterfactual.plan.measure_step`): the first
checkpoint at or after the contaminator's cutoff (step 80 at the default scale, 12 at smoke). Every
GT rollout and every rollout of the trained window acts before it, so every removal the items ask
about can show; a later checkpoint would add the post-cutoff drift of 170 more steps (and triple the
cost, which grows with the steps replayed) without adding a rollout that can be removed; an earlier
one (the behavior saturates around steps 30–50) would make the window's later removals inert by
construction.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import torch

from bt_core.artifacts.store import save_array
from bt_core.artifacts.targets import TargetExamples
from bt_core.config import CounterfactualConfig
from bt_core.counterfactual.plan import ReplaySpec
from bt_core.training import grpo
from bt_core.training.behavior import behavior_nll, greedy_rate, measure_examples
from bt_core.training.checkpoints import TrainedRun
from bt_core.training.model import cast_model, torch_threads
from bt_core.training.objective import advantages, rollout_logprob


# --------------------------------------------------------------------------- the engine
def replay_advantages(run: TrainedRun, mode: str) -> np.ndarray:
    """(N,) the advantages a replay uses: as logged, or (no_bonus) recomputed per logged group from
    the rewards without the bonus, with the run's scenario's normalization."""
    t = run.rollouts
    logged = np.asarray(t.advantage, np.float32)
    if mode != "no_bonus":
        return logged
    std_norm = run.config.task.scenario != "no_std_norm"
    return advantages(np.asarray(t.reward_base, np.float32), np.asarray(t.group), std_norm=std_norm)


def loss_weights(group: np.ndarray) -> np.ndarray:
    """(n,) float64: each row's weight 1/(G·B) in its logged step's loss (G its group's size, B the
    groups)."""
    _, inv, counts = np.unique(np.asarray(group), return_inverse=True, return_counts=True)
    return 1.0 / (counts[inv] * len(counts))


def step_coef(part) -> np.ndarray:
    """(n,) float64: c_i A_i, each row's coefficient of ℓ_i in its logged step's loss (`part`: the
    rows of one step; c_i its `loss_weights`)."""
    return loss_weights(part.group) * np.asarray(part.advantage, np.float64)


def partial_update(
    model,
    opt: torch.optim.Optimizer,
    part,
    live: np.ndarray,
    adv: np.ndarray,
    codec,
    grad_clip: float,
) -> None:
    """One step on the live rows of `part` (a logged step), each with its logged loss weight
    1/(G·B).
    `adv` may be float64 (a float64 model then keeps it exact: the finite-difference checks perturb
    it)."""
    w = loss_weights(part.group)
    model.train()
    opt.zero_grad(set_to_none=True)
    rows = np.flatnonzero(live)
    if rows.size:
        batch = grpo.batch_of(part.select(rows), codec)
        ell = rollout_logprob(model, batch)
        # float32: the logged arithmetic
        dt = ell.dtype if ell.dtype == torch.float64 else torch.float32
        loss = -(
            torch.from_numpy(w[rows]).to(dt) * torch.from_numpy(np.asarray(adv[rows])).to(dt) * ell
        ).sum()
        loss.backward()
    for p in model.parameters():
        if p.grad is None:  # AdamW skips a parameter without a gradient; training gave it zeros
            p.grad = torch.zeros_like(p)
    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    opt.step()


def replay_step(
    model,
    opt: torch.optim.Optimizer,
    part,
    keep: np.ndarray,
    adv: np.ndarray,
    codec,
    grad_clip: float,
) -> None:
    """One logged step (`part`: its rows, in order) replayed with rows `~keep` removed and
    advantages `adv` ((n,) each): verbatim (training's own update, bit-exact) when nothing changes,
    else `partial_update`."""
    if keep.all() and np.array_equal(adv, np.asarray(part.advantage, np.float32)):
        grpo.update(model, opt, part, codec, grad_clip)  # verbatim: bit-exact with training
    else:
        partial_update(model, opt, part, keep & (adv != 0), adv, codec, grad_clip)


def step_bounds(step_col: np.ndarray, start: int, stop: int) -> np.ndarray:
    """(stop − start + 1,) row offsets: rows of step s are [b[s − start], b[s − start + 1]) (step
    order)."""
    return np.searchsorted(np.asarray(step_col), np.arange(start, stop + 1))


def replay_model(
    run: TrainedRun,
    keep: np.ndarray,
    adv: np.ndarray,
    start: int,
    stop: int,
    on_step=None,
    dtype: torch.dtype | None = None,
) -> torch.nn.Module:
    """The model after replaying steps [start, stop) from the stored checkpoint `start`, with rows
    `~keep` removed and advantages `adv` ((N,) each). `on_step(step, model, opt)` runs after each
    step.
    `dtype` (e.g. torch.float64) casts the checkpoint and its AdamW state first; None keeps the
    run's."""
    model = cast_model(run.model_at(start), dtype)
    opt = run.optimizer_at(start, model)
    t, codec, clip = run.rollouts, run.codec, run.config.grpo.grad_clip
    bounds = step_bounds(t.step, start, stop)
    for s in range(start, stop):
        rows = np.arange(bounds[s - start], bounds[s - start + 1])
        replay_step(model, opt, t.select(rows), keep[rows], adv[rows], codec, clip)
        if on_step is not None:
            on_step(s, model, opt)
    return model


def first_changed_step(run: TrainedRun, keep: np.ndarray, adv: np.ndarray) -> int | None:
    """The first step whose loss the counterfactual changes (None: it changes nothing)."""
    changed = ~keep | (adv != np.asarray(run.rollouts.advantage, np.float32))
    return int(np.asarray(run.rollouts.step)[changed].min()) if changed.any() else None


def spec_weights(run: TrainedRun, spec: ReplaySpec) -> tuple[np.ndarray, np.ndarray]:
    """(keep (N,) bool, adv (N,)) of `spec`: removed rows out of the loss, or (a reweighting) kept
    with their advantage scaled by `spec.weight` (w_i and A_i enter the loss only as their product).
    `adv` is float64 for a float64 replay (exact), else float32 (the logged arithmetic)."""
    keep = np.ones(len(run.rollouts), bool)
    rows = np.asarray(spec.removed, np.int64)
    f64 = spec.dtype == "float64"
    adv = replay_advantages(run, spec.mode).astype(np.float64 if f64 else np.float32)
    if spec.weight:
        adv[rows] *= spec.weight
    else:
        keep[rows] = False
    return keep, adv


def replay(
    run: TrainedRun, spec: ReplaySpec, cf: CounterfactualConfig
) -> tuple[dict, TargetExamples]:
    """Replay `spec` and measure the behavior at its measurement step. Returns (figures, the
    measure's sequences). Starts from the latest stored checkpoint at or before the first changed
    step."""
    with torch_threads(run.config.threads):
        t0 = time.perf_counter()
        stop = int(spec.measure_step)
        keep, adv = spec_weights(run, spec)
        first = first_changed_step(run, keep, adv)
        start = (
            stop
            if first is None or first >= stop
            else max(c for c in run.checkpoint_steps if c <= first)
        )
        dtype = torch.float64 if spec.dtype == "float64" else None
        if dtype is not None:
            start = 0  # float64: every replay and its baseline `full_f64` from the same checkpoint
        model = replay_model(run, keep, adv, start, stop, dtype=dtype)
        t1 = time.perf_counter()
        ex = measure_examples(run.task, run.codec, cf)
        max_new = run.config.grpo.max_new_tokens
        figures = {
            **spec.identity(),
            "start_step": start,
            "steps_replayed": stop - start,
            "nll": behavior_nll(model, ex, run.codec.pad_id),
            "s_b": greedy_rate(
                model, run.task, run.codec, run.task.heldout_probes(cf.n_probes), max_new
            ),
            "s_b_probes": greedy_rate(model, run.task, run.codec, run.task.trigger_probes, max_new),
        }
        timings = {"replay_s": round(t1 - t0, 4), "measure_s": round(time.perf_counter() - t1, 4)}
    return {**figures, "timings": timings}, ex


def build_replay(run: TrainedRun, spec: ReplaySpec, cf: CounterfactualConfig, out: Path) -> dict:
    """Write one replay artifact into `out` (layout: `bt_core.artifacts.replays`)."""
    figures, ex = replay(run, spec, cf)
    timings = figures.pop("timings")
    (out / "replay.json").write_text(json.dumps(figures, indent=1, sort_keys=True))
    save_array(out / "removed.npy", np.asarray(spec.removed, np.int64))
    if spec.mode == "remove" and spec.removed.size == 0:
        ex.save(out / "measure", np.zeros(len(ex), np.int32))
    return {"summary": {"nll": figures["nll"], "s_b": figures["s_b"]}, "timings": timings}
