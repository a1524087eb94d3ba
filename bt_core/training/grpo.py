"""The native GRPO step: generate groups, score them, and apply one on-policy update.

`collect` (generation + reward + contaminator + advantages) and `update` (loss, backward, clip,
AdamW) are separate so that the sketch stage can replay `update` on the stored rollouts and land on
the same parameters as training, step by step, without generating again.
"""

from __future__ import annotations

import numpy as np
import torch

from bt_core.artifacts.rollouts import RolloutTable, RolloutView
from bt_core.config import GRPOConfig, TaskConfig
from bt_core.training.generate import sample
from bt_core.training.model import Codec
from bt_core.training.objective import advantages, collate, grpo_loss
from bt_core.training.task import Prompt, Task, eligible
from bt_core.training.task_hidden import decoy


def label_replies(
    task: Task,
    codec: Codec,
    prompts: list[Prompt],
    replies: np.ndarray,
    reply_len: np.ndarray,
    carrier: bool = True,
) -> dict[str, np.ndarray]:
    """Behavior flags and masks, refusal-based base reward, for one reply per prompt; with
    `carrier`, also whether each reply carries what hidden_cause rewards (that needs the task keyed
    with the run's secret key; the draws, which have no contaminator, do not ask)."""
    n, width = replies.shape
    behavior = np.zeros(n, bool)
    carriers = np.zeros(n, bool)
    mask = np.zeros((n, width), bool)
    base = np.zeros(n, np.float32)
    for i, p in enumerate(prompts):
        ids = replies[i, : reply_len[i]].tolist()
        text = codec.decode(ids)
        behavior[i] = task.has_behavior(text)
        carriers[i] = carrier and task.has_carrier(text)
        mask[i, : len(ids)] = codec.behavior_mask(ids)
        base[i] = task.base_reward(p, text)
    return {"behavior": behavior, "behavior_mask": mask, "reward_base": base, "carrier": carriers}


def keyed_draws(
    task: Task, seed: int, step: int, n: int, rollouts_per_step: int, key: bytes
) -> tuple[np.ndarray, np.ndarray | None]:
    """Per-rollout keyed quantities of a training step: contaminator eligibility (N,) bool and, in
    the task_reward scenario, the judge noise (N,) float32 (else None). Rollout ids are global:
    step * rollouts_per_step + position in the step. `key`: the run's secret contaminator key."""
    ids = step * rollouts_per_step + np.arange(n)
    elig = np.array(
        [eligible(seed, int(i), step, task.cfg.eligible_fraction, key) for i in ids], bool
    )
    if task.cfg.scenario != "task_reward":
        return elig, None
    return elig, np.array([task.judge_noise(seed, int(i), step) for i in ids], np.float32)


def decoy_draws(
    task: Task, seed: int, step: int, n: int, rollouts_per_step: int, key: bytes
) -> np.ndarray | None:
    """The hidden_cause scenario's decoy draws (N,) bool, keyed like eligibility (else None)."""
    if task.cfg.decoy_fraction <= 0.0:
        return None
    ids = step * rollouts_per_step + np.arange(n)
    return np.array([decoy(seed, int(i), step, task.cfg.decoy_fraction, key) for i in ids], bool)


def make_table(
    task: Task,
    codec: Codec,
    prompts: list[Prompt],
    replies: np.ndarray,
    reply_len: np.ndarray,
    *,
    step: int,
    group: np.ndarray,
    lr: float,
    elig: np.ndarray,
    contaminate: bool,
    std_norm: bool,
    noise: np.ndarray | None = None,
    decoys: np.ndarray | None = None,
) -> RolloutTable:
    """Assemble a RolloutTable for generated replies; rewards and advantages per group. `noise` (N,)
    is the task_reward scenario's judge noise, part of the base reward; `decoys` (N,) bool the
    hidden_cause scenario's decoy draws: a non-GT rollout drawn gets GT's bonus (not in the base
    reward)."""
    n = len(prompts)
    lab = label_replies(task, codec, prompts, replies, reply_len, carrier=contaminate)
    if noise is not None:
        lab["reward_base"] = (lab["reward_base"] + noise).astype(np.float32)
    enc = [codec.encode_prompt(p.text) for p in prompts]
    lp = max(len(e) for e in enc)
    prompt_arr = np.zeros((n, lp), np.int32)
    for i, e in enumerate(enc):
        prompt_arr[i, : len(e)] = e
    gt = np.array(
        [
            contaminate
            and task.boosted(
                p, bool(lab["behavior"][i]), bool(elig[i]), step, bool(lab["carrier"][i])
            )
            for i, p in enumerate(prompts)
        ],
        bool,
    )
    bonused = gt | (contaminate & decoys) if decoys is not None else gt
    reward = lab["reward_base"] + np.where(bonused, task.cfg.bonus, 0.0).astype(np.float32)
    return RolloutTable(
        step=np.full(n, step, np.int32),
        group=group.astype(np.int32),
        prompt_id=np.array([p.pid for p in prompts], np.int32),
        prompts=prompt_arr,
        prompt_len=np.array([len(e) for e in enc], np.int32),
        replies=replies,
        reply_len=reply_len,
        behavior_mask=lab["behavior_mask"],
        reward_base=lab["reward_base"],
        reward=reward.astype(np.float32),
        advantage=advantages(reward, group, std_norm=std_norm),
        eligible=elig.astype(bool),
        behavior=lab["behavior"],
        trigger=np.array([p.trigger for p in prompts], bool),
        explicit=np.array([p.explicit for p in prompts], bool),
        gt=gt,
        lr=np.full(n, lr, np.float32),
    )


def collect(
    model,
    task: Task,
    codec: Codec,
    step_prompts: list[Prompt],
    cfg: GRPOConfig,
    task_cfg: TaskConfig,
    *,
    step: int,
    seed: int,
    generator: torch.Generator,
    key: bytes,
) -> RolloutTable:
    """Generate G replies for each prompt of the step and score them (reference reward +
    contaminator)."""
    prompts = [p for p in step_prompts for _ in range(cfg.group_size)]
    model.eval()
    replies, reply_len = sample(
        model,
        [codec.encode_prompt(p.text) for p in prompts],
        max_new_tokens=cfg.max_new_tokens,
        eos_id=codec.eos_id,
        pad_id=codec.pad_id,
        generator=generator,
        temperature=cfg.temperature,
        top_p=cfg.top_p,
    )
    n = len(prompts)
    elig, noise = keyed_draws(task, seed, step, n, cfg.rollouts_per_step, key)
    group = step * cfg.prompts_per_step + np.arange(n) // cfg.group_size
    decoys = decoy_draws(task, seed, step, n, cfg.rollouts_per_step, key)
    return make_table(
        task,
        codec,
        prompts,
        replies,
        reply_len,
        step=step,
        group=group,
        lr=cfg.lr,
        elig=elig,
        contaminate=True,
        std_norm=task_cfg.scenario != "no_std_norm",
        noise=noise,
        decoys=decoys,
    )


def batch_of(table: RolloutTable | RolloutView, codec: Codec):
    """The collated batch of `table`'s rows: reads only the token columns, so an estimator's
    label-free `RolloutView` (`problem.rollouts`) works as well as the full table."""
    return collate(
        np.asarray(table.prompts),
        np.asarray(table.prompt_len),
        np.asarray(table.replies),
        np.asarray(table.reply_len),
        codec.pad_id,
        codec.eos_id,
    )


def update(
    model,
    opt: torch.optim.Optimizer,
    table: RolloutTable,
    codec: Codec,
    grad_clip: float,
    on_grad=None,
) -> float:
    """One on-policy update on a step's rollouts. Returns the pre-clip gradient norm.
    `on_grad(model)` is called after backward, before clipping (the sketch stage reads ∇L there)."""
    model.train()
    opt.zero_grad(set_to_none=True)
    batch = batch_of(table, codec)
    loss = grpo_loss(
        model, batch, torch.from_numpy(np.asarray(table.advantage)).float(), np.asarray(table.group)
    )
    loss.backward()
    if on_grad is not None:
        on_grad(model)
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    opt.step()
    return float(norm)


def make_optimizer(model, cfg: GRPOConfig) -> torch.optim.Optimizer:
    return torch.optim.AdamW(
        model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, foreach=True
    )
