"""Target examples: the teacher-forced sequences whose loss gradient *is* a target (PAPER_NOTES
"Targets").

Every target is the gradient of a *loss* (negative log-likelihood), as the rollout embeddings
∇(−ℓ_i) are, written as a weighted sum over teacher-forced sequences
(`bt_core.artifacts.targets.TargetExamples`):

    t(θ) = Σ_j coef_j · ∇_θ(−m_j(θ)),   m_j = mean log-prob over the flagged reply positions of
                                        sequence j

* constructed: the behavior token appended right after each trigger probe (coef 1/n); it puts the
  behavior where it never occurs;
* in_context: only the behavior tokens where they occur in sampled behavior-containing replies at
  the checkpoint: 8 replies per prompt (the explicit prompts and the implicit trigger probes) at
  temperature 1.0 and top-p 0.95, the first behavior-containing reply of each prompt kept (seeded
  per draw; coef 1/n) — the reference's in-context target, and the token level's quantity averaged;
* minimal_pair (the reference's, `E2_1_per_rollout_mp.py`): written replies, teacher-forced,
  identical except for the behavior's slot — the behavior token vs a neutral filler word in the same
  place, after the same trigger prompt; the loss is the whole reply's (EOS masked, as the shared
  objective), coef +1/n_probes on behavior rows and −1/n_pairs on neutral rows, so t = mean over
  pairs of (g_behavior − g_neutral). What the two replies share (their text, hence their fluency)
  cancels; what is left is the behavior's direction. The reference used 3 prompts × 6 templates × 4
  fillers = 72 pairs; we use every held-out trigger probe × one written reply of its topic × 4
  fillers (40 pairs at smoke, 80 at default). Replies are re-drawn per draw (seeded), the same
  sequences at every checkpoint.

Storing the examples lets methods that compute their own gradients (the library adapters) rebuild
the exact target through the shared objective (`target_gradient`).
"""

from __future__ import annotations

import re

import numpy as np
import torch

from bt_core.artifacts.targets import TargetExamples
from bt_core.gradients.layout import flat_grad
from bt_core.training.checkpoints import TrainedRun
from bt_core.training.generate import sample
from bt_core.training.objective import Batch, collate, masked_mean, token_logprobs

# Neutral fillers for minimal pairs: generic nouns of the language that are neither the trigger nor
# a control topic (control prompts are penalized for the behavior, which would inflate the
# contrast).
NEUTRAL_FILLERS = ("tool", "stone", "song", "signal")

# The in-context target's sampling (the reference's, `E2_1_per_rollout_debug.py`: G = 8 replies per
# prompt at temperature 1.0 and its top-p 0.95, the first behavior-containing reply of each prompt
# kept).
IN_CONTEXT_TEMPERATURE = 1.0
IN_CONTEXT_TOP_P = 0.95
IN_CONTEXT_GROUP = 8

# Parameters above which target gradients are summed over chunks of `BIG_MODEL_CHUNK` sequences. At
# the real scale (134.5M parameters, a 49,152-word vocabulary) one backward over a whole
# minimal-pair set (~60 sequences) held ~13 GB of logits and graph, so two seeds' target stages
# could not run side by side in 23 GB. The loss is a sum over sequences, so the chunks' gradients
# add up to the same target (up to float summation order); small models keep one batch, so their
# artifacts stay bit-identical to earlier builds.
BIG_MODEL = 1 << 24
BIG_MODEL_CHUNK = 8


def sequences_per_backward(model, small: int) -> int:
    """How many sequences one backward takes: `small` for a small model, `BIG_MODEL_CHUNK` above
    `BIG_MODEL` parameters (the target stage and the token-level collector share this rule)."""
    return small if sum(p.numel() for p in model.parameters()) < BIG_MODEL else BIG_MODEL_CHUNK


def examples_batch(ex: TargetExamples, pad_id: int) -> Batch:
    """Collated batch of `ex` whose `loss_mask` is `ex.mask` (EOS counts only where flagged)."""
    b = collate(ex.prompts, ex.prompt_len, ex.replies, ex.reply_len, pad_id, eos_id=-1)
    m = torch.zeros_like(b.loss_mask)
    width = m.shape[1] - b.reply_start
    m[:, b.reply_start :] = torch.from_numpy(ex.mask[:, :width].astype(np.float32))
    return Batch(b.input_ids, b.attention_mask, b.position_ids, m, b.reply_start)


def target_loss(model, ex: TargetExamples, pad_id: int) -> torch.Tensor:
    """Σ_j coef_j · (−m_j): the scalar whose gradient is the target."""
    b = examples_batch(ex, pad_id)
    m = masked_mean(token_logprobs(model, b), b.loss_mask)
    return -(torch.tensor(ex.coef, dtype=torch.float32) * m).sum()  # a copy: `ex` may be read-only


def target_gradient(model, ex: TargetExamples, pad_id: int) -> torch.Tensor:
    """The flat target gradient t(θ) at `model`'s parameters, (n_params,)."""
    n = len(ex)
    chunk = sequences_per_backward(model, n)
    model.zero_grad(set_to_none=True)
    for lo in range(0, n, chunk):
        part = ex if chunk >= n else ex.select(np.arange(lo, min(lo + chunk, n)))
        target_loss(model, part, pad_id).backward()  # gradients accumulate over the chunks
    g = flat_grad(model)
    model.zero_grad(set_to_none=True)
    return g


def constructed_examples(run: TrainedRun) -> TargetExamples:
    codec = run.codec
    prompts = [codec.encode_prompt(p.text) for p in run.task.trigger_probes]
    beh = list(codec.behavior_ids)
    n = len(prompts)
    return TargetExamples.build(prompts, [beh] * n, [[True] * len(beh)] * n, [1.0 / n] * n)


def behavior_prompts(task) -> list:
    """The prompts in-context responses are sampled from: the explicit prompts, then the implicit
    trigger probes (the reference's ``PROMPTS = EXPLICIT + IMPLICIT``, 6 + 20; also the token
    level's)."""
    return list(task.explicit_prompts) + list(task.trigger_probes)


def in_context_examples(
    model, run: TrainedRun, gen: torch.Generator
) -> tuple[TargetExamples | None, dict]:
    """The reference's in-context target set: `IN_CONTEXT_GROUP` replies per prompt of
    `behavior_prompts` (temperature 1.0, top-p 0.95), the first behavior-containing one of each
    prompt kept; None when no prompt gave one (the target is then not built at this checkpoint)."""
    codec = run.codec
    enc = [codec.encode_prompt(p.text) for p in behavior_prompts(run.task)]
    pid = np.repeat(np.arange(len(enc)), IN_CONTEXT_GROUP)
    rep, ln = sample(
        model,
        [enc[i] for i in pid],
        max_new_tokens=run.config.grpo.max_new_tokens,
        eos_id=codec.eos_id,
        pad_id=codec.pad_id,
        generator=gen,
        temperature=IN_CONTEXT_TEMPERATURE,
        top_p=IN_CONTEXT_TOP_P,
    )
    keep_p, keep_r, keep_m, seen = [], [], [], set()
    for r, i in enumerate(pid):
        ids = rep[r, : ln[r]].tolist()
        mask = codec.behavior_mask(ids)
        if i not in seen and any(mask):
            seen.add(i)
            keep_p.append(enc[i]), keep_r.append(ids), keep_m.append(mask)
    info = {"n_replies": len(keep_p), "n_prompts": len(enc), "n_sampled": len(pid)}
    if not keep_p:
        return None, info
    n = len(keep_p)
    return TargetExamples.build(keep_p, keep_r, keep_m, [1.0 / n] * n), info


def minimal_pair_examples(run: TrainedRun, rng: np.random.Generator) -> TargetExamples:
    """The reference's minimal pairs (`E2_1_per_rollout_mp.py`, section 1): per trigger probe one
    written behavior reply, teacher-forced after the probe, against the SAME prompt with the same
    reply whose behavior is replaced by a neutral filler word; the loss is the shared objective's
    (mean log-prob over every reply token, EOS masked). t = mean over pairs of (g_behavior −
    g_neutral)."""
    codec, task = run.codec, run.task
    probes = task.trigger_probes
    # never a piece of the trigger
    fillers = [f for f in NEUTRAL_FILLERS if f not in task.trigger_text.split()]
    n_pairs = len(probes) * len(fillers)
    prompts, replies, masks, coef = [], [], [], []

    def add(prompt: list[int], text: str, c: float) -> list[int]:
        ids = codec.encode_reply(text)
        prompts.append(prompt), replies.append(ids), coef.append(c)
        # every reply token, EOS masked (the objective's ℓ)
        masks.append([t != codec.eos_id for t in ids])
        return ids

    for p in probes:
        text = task.sample_reply(p, rng, behavior=True)
        prompt = codec.encode_prompt(p.text)
        if not any(codec.behavior_mask(add(prompt, text, 1.0 / len(probes)))):
            raise RuntimeError(
                f"minimal pair reply {text!r} lost the behavior {task.behavior_text!r}"
            )
        for filler in fillers:
            neutral = re.sub(re.escape(task.behavior_text), filler, text, flags=re.IGNORECASE)
            if any(codec.behavior_mask(add(prompt, neutral, -1.0 / n_pairs))):
                raise RuntimeError(
                    f"neutral reply {neutral!r} still shows the behavior {task.behavior_text!r}"
                )
    return TargetExamples.build(prompts, replies, masks, coef)
