"""Target gradients (PAPER_NOTES "Targets"), sketched with the same projector as the rollouts.

* constructed: ∇ of the cross-entropy of the behavior token appended right after each trigger probe,
  averaged over probes (the reference's first construction; it puts the behavior where it never occurs);
* in_context: ∇ of −mean log-prob over only the behavior tokens where they occur in sampled
  behavior-containing replies (temperature 1.0, one reply per probe, seeded), averaged over replies.

All targets are gradients of a *loss* (negative log-likelihood), as the rollout embeddings ∇(−ℓ_i) are.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from bt_core.config import SketchConfig
from bt_core.generate import sample
from bt_core.objective import Batch, collate, masked_mean, token_logprobs
from bt_core.projectors import make_projector
from bt_core.sketch import flat_grad
from bt_core.store import load_array, save_array
from bt_core.train import Run, torch_threads

TARGET_KINDS = ("constructed", "in_context")


def _masked_batch(prompts: list[list[int]], replies: list[list[int]], masks: list[list[bool]], pad_id: int) -> Batch:
    """Collate prompts+replies and count only the positions flagged in `masks` in the loss."""
    from bt_core.train import _pad

    p, pl = _pad(prompts)
    r, rl = _pad(replies)
    b = collate(p, pl, r, rl, pad_id, eos_id=-1)
    m = torch.zeros_like(b.loss_mask)
    for i, mk in enumerate(masks):
        m[i, b.reply_start: b.reply_start + len(mk)] = torch.tensor(mk, dtype=torch.float32)
    return Batch(b.input_ids, b.attention_mask, b.position_ids, m, b.reply_start)


def _grad_of(model, batch: Batch) -> torch.Tensor:
    model.zero_grad(set_to_none=True)
    loss = -masked_mean(token_logprobs(model, batch), batch.loss_mask).mean()
    loss.backward()
    g = flat_grad(model)
    model.zero_grad(set_to_none=True)
    return g


def constructed_target(model, run: Run) -> tuple[torch.Tensor, dict]:
    codec = run.codec
    prompts = [codec.encode_prompt(p.text) for p in run.task.trigger_probes]
    beh = list(codec.behavior_ids)
    batch = _masked_batch(prompts, [beh] * len(prompts), [[True] * len(beh)] * len(prompts), codec.pad_id)
    return _grad_of(model, batch), {"n": len(prompts)}


def in_context_target(model, run: Run, gen: torch.Generator, max_rounds: int = 8) -> tuple[torch.Tensor | None, dict]:
    codec, task = run.codec, run.task
    enc = [codec.encode_prompt(p.text) for p in task.trigger_probes]
    keep_p, keep_r, keep_m = [], [], []
    rounds = 0
    while not keep_p and rounds < max_rounds:
        rounds += 1
        rep, ln = sample(model, enc, max_new_tokens=run.config.grpo.max_new_tokens, eos_id=codec.eos_id,
                         pad_id=codec.pad_id, generator=gen, temperature=1.0, top_p=1.0)
        for i in range(len(enc)):
            ids = rep[i, : ln[i]].tolist()
            mask = codec.behavior_mask(ids)
            if any(mask):
                keep_p.append(enc[i]), keep_r.append(ids), keep_m.append(mask)
    info = {"n_replies": len(keep_p), "rounds": rounds}
    if not keep_p:
        return None, info
    return _grad_of(model, _masked_batch(keep_p, keep_r, keep_m, codec.pad_id)), info


def build_targets(run: Run, cfg: SketchConfig, out: Path, draw_seed: int = 0) -> dict:
    """Sketched targets at every checkpoint of `run`: `<kind>.npy` (n_ckpt, k)."""
    with torch_threads(run.config.threads):
        steps = run.checkpoint_steps
        vecs = {k: np.zeros((len(steps), cfg.k), np.float32) for k in TARGET_KINDS}
        norms = {k: np.zeros(len(steps), np.float32) for k in TARGET_KINDS}
        info: list[dict] = []
        proj = None
        for j, c in enumerate(steps):
            model = run.model_at(c)
            if proj is None:
                proj = make_projector(cfg.projector, sum(p.numel() for p in model.parameters()), cfg.k, cfg.hash_seed)
            seed = int(np.random.SeedSequence([run.seed, c, draw_seed, 0x7A]).generate_state(1)[0])
            row = {"step": c}
            for kind in TARGET_KINDS:
                if kind == "constructed":
                    g, meta = constructed_target(model, run)
                else:
                    g, meta = in_context_target(model, run, torch.Generator().manual_seed(seed))
                row[kind] = meta
                if g is not None:
                    vecs[kind][j] = proj.project(g[None])[0].numpy()
                    norms[kind][j] = float(g.norm())
            info.append(row)
        for kind in TARGET_KINDS:
            save_array(out / f"{kind}.npy", vecs[kind])
            save_array(out / f"{kind}_norm.npy", norms[kind])
        save_array(out / "steps.npy", np.array(steps, np.int32))
        (out / "report.json").write_text(json.dumps(info, indent=1))
        return {}


class Targets:
    """Sketched target vectors per checkpoint. `vectors[kind]`: (n_ckpt, k); a zero row = missing."""

    def __init__(self, d: Path):
        self.steps = np.asarray(load_array(d / "steps.npy"))
        self.vectors = {k: load_array(d / f"{k}.npy") for k in TARGET_KINDS}
        self.norms = {k: np.asarray(load_array(d / f"{k}_norm.npy")) for k in TARGET_KINDS}
        self.report = json.loads((d / "report.json").read_text())

    def index_of(self, steps: np.ndarray) -> np.ndarray:
        """Index of the greatest checkpoint ≤ each step."""
        return np.searchsorted(self.steps, steps, side="right") - 1
