"""The behavior measure: one home for how much a model shows the planted behavior. The replays, the
draws' one-step causal label, the exact metagradient, the no-bonus control run and the causal items
all read it from here.

Two readings of one model:

* **The behavior NLL** (`measure_examples`, `measure_loss`, `behavior_nll`): each of `n_probes`
  held-out trigger probes (`Task.heldout_probes`, templates the GRPO pool never uses) with
  `replies_per_probe` fluent replies of the language drawn from a fixed generator (`MEASURE_RNG`:
  the same sequences for every replay, every seed), each followed by the behavior token; the measure
  is the mean NLL of the behavior token(s) after the reply, teacher-forced (one coefficient 1/n per
  sequence, as a target). It is continuous where s_b saturates, so the counterfactual items judge on
  it.
* **s_b** (`greedy_rate`): the share of probes whose greedy reply shows the behavior. On the run's
  own trigger probes it is the emergence gate's figure (training's probe evaluation); on the
  held-out probes it is reported beside the NLL.
"""

from __future__ import annotations

import numpy as np
import torch

from bt_core.artifacts.targets import TargetExamples
from bt_core.config import CounterfactualConfig
from bt_core.training.generate import sample
from bt_core.training.objective import collate, masked_mean, token_logprobs
from bt_core.training.task import Task

MEASURE_RNG = 0xC0F  # fixed: the measure's replies are the same for every replay and every seed


def measure_examples(task: Task, codec, cf: CounterfactualConfig) -> TargetExamples:
    """Teacher-forced (held-out probe, fluent reply + behavior) sequences; the mask flags the
    behavior."""
    rng = np.random.default_rng(MEASURE_RNG)
    prompts, replies, masks = [], [], []
    for p in task.heldout_probes(cf.n_probes):
        for _ in range(cf.replies_per_probe):
            # no EOS: not measured
            reply = codec.encode_reply(task.sample_reply(p, rng, behavior=True))[:-1]
            mask = codec.behavior_mask(reply)
            if not any(mask):
                raise RuntimeError(
                    f"measure reply {codec.decode(reply)!r} lost the behavior "
                    f"{task.behavior_text!r}"
                )
            prompts.append(codec.encode_prompt(p.text)), replies.append(reply), masks.append(mask)
    n = len(prompts)
    return TargetExamples.build(prompts, replies, masks, [1.0 / n] * n)


def measure_loss(model, ex: TargetExamples, pad_id: int) -> torch.Tensor:
    """Σ_j coef_j · (−mean log-prob of the flagged tokens of sequence j): the measure as a
    differentiable scalar tensor (the same scalar as `bt_core.targets.examples.target_loss`). Sets
    eval mode."""
    b = collate(ex.prompts, ex.prompt_len, ex.replies, ex.reply_len, pad_id, eos_id=-1)
    m = torch.zeros_like(b.loss_mask)
    m[:, b.reply_start :] = torch.from_numpy(
        ex.mask[:, : m.shape[1] - b.reply_start].astype(np.float32)
    )
    model.eval()
    ell = masked_mean(token_logprobs(model, b), m)
    return -(torch.from_numpy(np.array(ex.coef, np.float32)) * ell).sum()


def behavior_nll(model, ex: TargetExamples, pad_id: int) -> float:
    """The measure (`measure_loss`) as a float, without a graph."""
    with torch.no_grad():
        return float(measure_loss(model, ex, pad_id))


def behavior_rate(
    model,
    task: Task,
    codec,
    prompts,
    max_new_tokens: int,
    *,
    generator: torch.Generator | None = None,
    temperature: float = 1.0,
    top_p: float = 1.0,
    reps: int = 1,
) -> float:
    """Share of replies to `prompts` (`reps` each) that show the behavior: greedy without a
    `generator` (s_b), else sampled with it at `temperature` and `top_p` (training's saturation
    figure)."""
    model.eval()
    enc = [codec.encode_prompt(p.text) for p in prompts for _ in range(reps)]
    rep, ln = sample(
        model,
        enc,
        max_new_tokens=max_new_tokens,
        eos_id=codec.eos_id,
        pad_id=codec.pad_id,
        generator=generator,
        temperature=temperature,
        top_p=top_p,
        greedy=generator is None,
    )
    return float(
        np.mean([task.has_behavior(codec.decode(rep[i, : ln[i]])) for i in range(len(enc))])
    )


def greedy_rate(model, task: Task, codec, prompts, max_new_tokens: int) -> float:
    """Share of `prompts` whose greedy reply shows the behavior (s_b)."""
    return behavior_rate(model, task, codec, prompts, max_new_tokens)
