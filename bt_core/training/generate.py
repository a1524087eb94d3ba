"""Batched sampling with a KV cache, driven by an explicit `torch.Generator`.

Why not `model.generate`: it draws from the global RNG (an evaluation would shift the training
trajectory unless RNG state is saved and restored) and costs several times more per call on a tiny
model. This loop is ~40 lines, seeded per call, and returns the exact token ids training stores.
"""

from __future__ import annotations

import inspect
from functools import cache

import numpy as np
import torch


@cache
def _cache_kw(cls: type) -> str:
    """transformers ≥5.2x calls the KV cache `cache`; older releases `past_key_values`."""
    return "cache" if "cache" in inspect.signature(cls.forward).parameters else "past_key_values"


def _top_p_filter(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    if top_p >= 1.0:
        return logits
    sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
    probs = torch.softmax(sorted_logits, dim=-1)
    drop = probs.cumsum(-1) - probs > top_p  # keep the smallest prefix whose mass reaches top_p
    sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
    return torch.full_like(logits, float("-inf")).scatter(-1, order, sorted_logits)


@torch.no_grad()
def sample(
    model,
    prompts: list[list[int]],
    *,
    max_new_tokens: int,
    eos_id: int,
    pad_id: int,
    generator: torch.Generator | None,
    temperature: float = 1.0,
    top_p: float = 1.0,
    greedy: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Generate one reply per prompt. Returns `replies` (B, max_new_tokens) int32 padded with
    `pad_id` and `reply_len` (B,) counting tokens up to and including EOS."""
    b = len(prompts)
    lp = max(len(p) for p in prompts)
    ids = torch.full((b, lp), pad_id, dtype=torch.long)
    att = torch.zeros((b, lp), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, lp - len(p) :] = torch.tensor(p)
        att[i, lp - len(p) :] = 1
    pos = (att.cumsum(1) - 1).clamp(min=0)
    dev = next(model.parameters()).device  # a GPU under TRL: sample there, return CPU arrays
    ids, att, pos = ids.to(dev), att.to(dev), pos.to(dev)
    kw = _cache_kw(type(model))
    out = model(input_ids=ids, attention_mask=att, position_ids=pos, use_cache=True)
    cache = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
    replies = torch.full((b, max_new_tokens), pad_id, dtype=torch.long, device=dev)
    done = torch.zeros(b, dtype=torch.bool, device=dev)
    lengths = torch.full((b,), max_new_tokens, dtype=torch.long, device=dev)
    next_pos = pos[:, -1:] + 1
    for t in range(max_new_tokens):
        logits = out.logits[:, -1].float()
        if greedy:
            nxt = logits.argmax(-1)
        else:
            probs = torch.softmax(_top_p_filter(logits / temperature, top_p), dim=-1)
            # a CPU generator draws on CPU (the same numbers whatever device the model is on)
            nxt = torch.multinomial(probs.cpu(), 1, generator=generator).squeeze(-1).to(dev)
        nxt = torch.where(done, torch.full_like(nxt, pad_id), nxt)
        replies[:, t] = nxt
        finished = (nxt == eos_id) & ~done
        lengths[finished] = t + 1
        done |= finished
        if bool(done.all()) or t == max_new_tokens - 1:
            break
        # finished rows: ignored
        att = torch.cat([att, torch.ones((b, 1), dtype=torch.long, device=dev)], dim=1)
        out = model(
            input_ids=nxt[:, None],
            attention_mask=att,
            position_ids=next_pos,
            use_cache=True,
            **{kw: cache},
        )
        cache = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
        next_pos = next_pos + 1
    return replies.cpu().numpy().astype(np.int32), lengths.cpu().numpy().astype(np.int32)
