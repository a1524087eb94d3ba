"""Token level: the cosine of the behavior-token gradient with each target (PAPER_NOTES "Token
level", P4).

Definition — the reference's (`notebooks/colab/E2_1_per_rollout_debug.py` of
`AmitoVrito/BehaviorTrace`, functions `_qtoken_sketch` and `collect`; written here from that
definition, not copied):

* Responses: at checkpoint c and draw d, sample `GROUP` responses per prompt of `behavior_prompts`
  (the explicit "… Include <behavior>" prompts, then the implicit trigger probes — the reference's
  6 + 20), at temperature `TEMPERATURE` 0.9 and top-p `TOP_P` 0.95, repeating the prompt cycle up to
  `MAX_REPEATS` times; keep the behavior-containing responses in sampling order, at most
  `MAX_RESPONSES` (160).
* The behavior-token gradient of kept response i is the whole-parameter gradient

      q_i = ∇_θ −( mean over the reply positions whose token spells the behavior of log π(o_t) )

  — every parameter, not an embedding row; the positions are `codec.behavior_mask` (EOS, padding and
  every other token masked). It is the same quantity the in-context target averages
  (`bt_core.targets.examples.in_context_examples`: one behavior response per prompt at temperature
  1.0).
* The quantity is cos(q_i, t_c) per response for each target kind t (NaN where the target was not
  built or either vector is 0). The reference CountSketched both sides to 65,536 buckets; we compute
  the cosine **exactly** over the whole parameter vector — the per-example gradient is consumed one
  parameter block at a time (`whole_dots`), so no (B, n_params) matrix is held even at the real
  scale — which removes the sketch's ≈1/√k noise and is the quantity the sketch estimates.
* `TokenLevel.alignment` (`bt_core.artifacts.targets`) gives its mean over responses with a
  percentile bootstrap CI over responses (the reference's resampling unit). The reference's bar:
  in-context CI lower bound > 0.05 (the gate, `behaviortrace.checklist.in_context_targets`) and
  constructed CI upper bound < 0.05 (reported).

`bt_core.artifacts.keys.TARGETS_VERSION` is part of the targets' cache key: an artifact built under
the earlier definition (the gradient restricted to the trigger word's embedding row, and in-context
replies from the implicit probes only at top-p 1.0) is never reused.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from bt_core.artifacts.store import save_array
from bt_core.artifacts.targets import TARGET_KINDS, TargetExamples
from bt_core.targets.examples import behavior_prompts, examples_batch, sequences_per_backward
from bt_core.training.generate import sample

TEMPERATURE = 0.9  # the reference's sampling temperature for the token-level responses
TOP_P = 0.95  # the reference's nucleus
GROUP = 8  # responses sampled per prompt and repeat (the reference's G)
MAX_REPEATS = 6  # prompt cycles at most (the reference's repeats at temperature 0.9)
MAX_RESPONSES = 160  # behavior-containing responses kept at most (the reference's TOKEN_LEVEL_MAX)
BATCH = 64  # responses per batched per-example gradient


def behavior_responses(
    model, run, gen: torch.Generator
) -> tuple[TargetExamples | None, np.ndarray, int]:
    """Sample the token-level responses (module docstring): the kept ones as examples whose mask
    flags the behavior positions (coef 1), the index into `behavior_prompts` of each, and how many
    were sampled."""
    codec = run.codec
    enc = [codec.encode_prompt(p.text) for p in behavior_prompts(run.task)]
    pid = np.repeat(np.arange(len(enc)), GROUP)
    prompts, replies, masks, kept_pid, n_sampled = [], [], [], [], 0
    for _ in range(MAX_REPEATS):
        if len(prompts) >= MAX_RESPONSES:
            break
        rep, ln = sample(
            model,
            [enc[i] for i in pid],
            max_new_tokens=run.config.grpo.max_new_tokens,
            eos_id=codec.eos_id,
            pad_id=codec.pad_id,
            generator=gen,
            temperature=TEMPERATURE,
            top_p=TOP_P,
        )
        n_sampled += len(pid)
        for r, i in enumerate(pid):
            ids = rep[r, : ln[r]].tolist()
            mask = codec.behavior_mask(ids)
            if any(mask) and len(prompts) < MAX_RESPONSES:
                prompts.append(enc[i]), replies.append(ids), masks.append(mask), kept_pid.append(i)
    if not prompts:
        return None, np.zeros(0, np.int32), n_sampled
    ex = TargetExamples.build(prompts, replies, masks, [1.0] * len(prompts))
    return ex, np.asarray(kept_pid, np.int32), n_sampled


def whole_dots(
    model, ex: TargetExamples, pad_id: int, targets: dict[str, torch.Tensor], engine: str = "hooks"
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Exact ‖q_i‖ and ⟨q_i, t⟩ for each target, over the whole parameter vector, for every row of
    `ex` (q_i = ∇(−m_i), m_i the mean log-prob over row i's flagged positions). Returns ((n,), kind
    → (n,)).
    The per-example gradient arrives one parameter block at a time; only (B, block) is ever held."""
    from bt_core.gradients.pergrad import get_engine

    n = len(ex)
    sq = np.zeros(n)
    dots = {k: np.zeros(n) for k in targets}
    # the real scale: small batches (activations grow with B)
    step = sequences_per_backward(model, BATCH)
    for lo in range(0, n, step):
        rows = np.arange(lo, min(lo + step, n))
        blocks, _ = get_engine(engine).blocks(model, examples_batch(ex.select(rows), pad_id))
        for off, blk in blocks:
            b = blk.double()
            sq[rows] += (b * b).sum(1).numpy()
            for k, t in targets.items():
                dots[k][rows] += (b @ t[off : off + b.shape[1]].double()).numpy()
    return np.sqrt(sq), dots


def _cosines(norm: np.ndarray, dot: np.ndarray, t_norm: float) -> np.ndarray:
    denom = norm * t_norm
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denom > 0, dot / np.where(denom > 0, denom, 1.0), np.nan)


class TokenLevelCollector:
    """Accumulates token-level rows checkpoint by checkpoint during `build_targets` (one per
    draw)."""

    def __init__(self, run):
        self.run = run
        self.ckpt, self.prompt, self.gnorm, self.responses = [], [], [], []
        self.cos: dict[str, list] = {k: [] for k in TARGET_KINDS}
        self.tnorm: dict[str, list] = {k: [] for k in TARGET_KINDS}

    def add(self, model, j: int, grads: dict[str, torch.Tensor], gen: torch.Generator) -> dict:
        """Sample responses at checkpoint row `j`, keep behavior ones, store their cosines with
        `grads` (kind → the exact flat target at this checkpoint; a kind not built here is
        absent)."""
        for k in TARGET_KINDS:
            self.tnorm[k].append(float(grads[k].double().norm()) if k in grads else 0.0)
        ex, pid, n_sampled = behavior_responses(model, self.run, gen)
        info = {"n_sampled": n_sampled, "n_kept": 0 if ex is None else len(ex)}
        if ex is None:
            return info
        norm, dots = whole_dots(model, ex, self.run.codec.pad_id, grads)
        self.ckpt.append(np.full(len(ex), j)), self.prompt.append(pid), self.gnorm.append(norm)
        self.responses.append((j, ex))
        for k in TARGET_KINDS:
            cos = (
                _cosines(norm, dots[k], self.tnorm[k][-1])
                if k in dots
                else np.full(len(ex), np.nan)
            )
            self.cos[k].append(cos)
        info["mean_cos"] = {k: _nanmean(self.cos[k][-1]) for k in TARGET_KINDS}
        return info

    def save(self, d: Path) -> None:
        """``ckpt.npy``, ``prompt.npy``, ``grad_norm.npy``, ``cos_<kind>.npy`` (n,),
        ``target_norm_<kind>.npy`` (n_ckpt,) and ``responses/`` (the kept responses as
        `TargetExamples`, their behavior masks)."""
        d.mkdir(parents=True, exist_ok=True)
        cat = lambda parts, dtype: (
            np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype)
        )  # noqa: E731
        save_array(d / "ckpt.npy", cat(self.ckpt, np.int32))
        save_array(d / "prompt.npy", cat(self.prompt, np.int32))
        save_array(d / "grad_norm.npy", cat(self.gnorm, np.float64))
        for k in TARGET_KINDS:
            save_array(d / f"cos_{k}.npy", cat(self.cos[k], np.float64))
            save_array(d / f"target_norm_{k}.npy", np.asarray(self.tnorm[k], np.float64))
        if self.responses:
            ckpt = np.concatenate([np.full(len(ex), j) for j, ex in self.responses])
            TargetExamples.concat([ex for _, ex in self.responses]).save(d / "responses", ckpt)


def _nanmean(x: np.ndarray) -> float | None:
    x = x[np.isfinite(x)]
    return round(float(x.mean()), 5) if x.size else None
