"""The shared per-rollout objective and the GRPO loss (PAPER_NOTES "GRPO").

    ℓ_i = mean over completion tokens of log π(o_t)        (prompt, EOS and padding masked)
    L   = −(1/B) Σ_groups mean_{i∈group} A_i ℓ_i
    A_i = (r_i − mean_G r) / (std_G r + 1e-8)               (unbiased std, no floor; `no_std_norm`:
                                                            r − mean)

The same `rollout_logprob` serves training, sketching, targets and every estimator that computes its
own gradients, so attribution always differentiates exactly what training differentiated.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True)
class Batch:
    """A collated batch: prompts left-padded, replies right-padded. Shapes (B, T)."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    position_ids: torch.Tensor
    loss_mask: torch.Tensor  # 1 on reply tokens that count in ℓ (no EOS, no padding); float
    reply_start: int  # column of the first reply token

    def __len__(self) -> int:
        return self.input_ids.shape[0]


def collate(
    prompts: np.ndarray,
    prompt_len: np.ndarray,
    replies: np.ndarray,
    reply_len: np.ndarray,
    pad_id: int,
    eos_id: int,
) -> Batch:
    """Build a batch from stored rows: `prompts` (B, Lp) right-padded with lengths `prompt_len`;
    `replies` (B, Lr) right-padded with lengths `reply_len` (EOS included when emitted)."""
    b = prompts.shape[0]
    lp = int(prompt_len.max()) if b else 0
    lr = max(int(reply_len.max()) if b else 0, 1)
    ids = np.full((b, lp + lr), pad_id, dtype=np.int64)
    att = np.zeros((b, lp + lr), dtype=np.int64)
    for i in range(b):
        pl, rl = int(prompt_len[i]), int(reply_len[i])
        ids[i, lp - pl : lp] = prompts[i, :pl]
        att[i, lp - pl : lp] = 1
        ids[i, lp : lp + rl] = replies[i, :rl]
        att[i, lp : lp + rl] = 1
    loss = att.copy()
    loss[:, :lp] = 0
    loss[ids == eos_id] = 0
    ids_t = torch.from_numpy(ids)
    att_t = torch.from_numpy(att)
    pos = (att_t.cumsum(1) - 1).clamp(min=0)
    return Batch(ids_t, att_t, pos, torch.from_numpy(loss).float(), lp)


def token_logprobs(model, batch: Batch) -> torch.Tensor:
    """log π of each token given its prefix, (B, T); column t scores token t (column 0 is 0). The
    batch is moved to the model's device (a GPU under TRL) and the result comes back to the batch's
    (CPU); autograd carries the gradient across."""
    dev = _device(model)
    ids = batch.input_ids if dev is None else batch.input_ids.to(dev)
    logits = model(
        input_ids=ids,
        attention_mask=batch.attention_mask.to(ids.device),
        position_ids=batch.position_ids.to(ids.device),
    ).logits
    logits = logits[:, :-1]
    # f64 stays f64
    logp = torch.log_softmax(logits if logits.dtype == torch.float64 else logits.float(), dim=-1)
    tok = logp.gather(-1, ids[:, 1:, None]).squeeze(-1)
    return torch.nn.functional.pad(tok, (1, 0)).to(batch.input_ids.device)


def _device(model) -> torch.device | None:
    """The device of a module's parameters; None for a functional wrapper (torch.func) or a CPU
    model."""
    if not isinstance(model, torch.nn.Module):
        return None
    p = next(model.parameters(), None)
    return None if p is None or p.device.type == "cpu" else p.device


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of `values` over `mask` per row; a row with an empty mask gives 0."""
    return (values * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)


def rollout_logprob(model, batch: Batch) -> torch.Tensor:
    """ℓ_i, (B,): mean reply-token log-prob (the shared per-rollout objective; also 'fluency')."""
    return masked_mean(token_logprobs(model, batch), batch.loss_mask)


def advantages(rewards: np.ndarray, group: np.ndarray, std_norm: bool = True) -> np.ndarray:
    """Group-relative advantages. `rewards`, `group`: (N,). Unbiased std, +1e-8, no floor; a group
    whose rewards are all equal gets A = 0 (it contributes no gradient)."""
    out = np.zeros_like(rewards, dtype=np.float64)
    for g in np.unique(group):
        idx = group == g
        r = rewards[idx].astype(np.float64)
        centred = r - r.mean()
        if std_norm:
            sd = r.std(ddof=1) if r.size > 1 else 0.0
            centred = centred / (sd + 1e-8)
        out[idx] = centred
    return out.astype(np.float32)


def grpo_loss(model, batch: Batch, adv: torch.Tensor, group: np.ndarray) -> torch.Tensor:
    """L = −(1/B) Σ_groups mean_i(A_i ℓ_i), with B the number of groups."""
    ell = rollout_logprob(model, batch)
    _, inv, counts = np.unique(group, return_inverse=True, return_counts=True)
    w = torch.from_numpy(1.0 / (counts[inv] * len(counts))).float()
    return -(w * adv * ell).sum()
