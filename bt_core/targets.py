"""Target gradients (PAPER_NOTES "Targets"), per checkpoint and per seeded draw, sketched with the same
projector as the rollouts.

Every target is the gradient of a *loss* (negative log-likelihood), as the rollout embeddings ∇(−ℓ_i)
are, written as a weighted sum over teacher-forced sequences (`TargetExamples`):

    t(θ) = Σ_j coef_j · ∇_θ(−m_j(θ)),   m_j = mean log-prob over the flagged reply positions of sequence j

* constructed: the behavior token appended right after each trigger probe (coef 1/n); it puts the
  behavior where it never occurs;
* in_context: only the behavior tokens where they occur in sampled behavior-containing replies at the
  checkpoint (temperature 1.0, one reply per probe, seeded per draw; coef 1/n);
* minimal_pair: each trigger probe with a sampled behavior-containing reply, against the same prompt with
  the trigger word replaced by a neutral filler and the *same* reply teacher-forced; the loss counts the
  behavior tokens only, coef +1/n_probes on trigger rows and −1/n_pairs on neutral rows, so
  t = mean over pairs of (g_trigger − g_neutral). What the two contexts share (the unconditional "end a
  reply with qzxbt" habit, the reply's fluency) cancels; what is left is how the trigger changes it.
  The reference used 3 prompts × 6 templates × 4 fillers = 72 pairs; we use every held-out trigger probe
  × 4 fillers (40 pairs at smoke, 80 at default). Replies are re-sampled per draw (seeded), the same
  sequences at every checkpoint.

Storing the examples lets methods that compute their own gradients (the library adapters) rebuild the
exact target through the shared objective (`target_gradient`). The token-level quantity (cosine of the
trigger-token gradient with each target) lives in `bt_core.token_level` and is stored here too.

Artifact layout: ``steps.npy``, ``report.json`` and one ``draw{d}/`` per draw holding ``<kind>.npy``
(n_ckpt, k), ``<kind>_norm.npy`` (n_ckpt,) exact ‖t‖, ``examples_<kind>/`` (columns, ``ckpt`` = row of
`steps`) and ``token/`` (see `bt_core.token_level`). Draw 0 is the target set of the training stream.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
import torch

from bt_core.config import SketchConfig
from bt_core.generate import sample
from bt_core.objective import Batch, collate, masked_mean, token_logprobs
from bt_core.problem import UnknownTargetError
from bt_core.projectors import make_projector
from bt_core.sketch import flat_grad
from bt_core.store import load_array, save_array
from bt_core.task import BEHAVIOR, TRIGGER
from bt_core.train import Run, torch_threads

TARGET_KINDS = ("constructed", "in_context", "minimal_pair")
# Neutral fillers for minimal pairs: generic nouns of the language that are neither the trigger nor a
# control topic (control prompts are penalized for the behavior, which would inflate the contrast).
NEUTRAL_FILLERS = ("tool", "stone", "song", "signal")


def check_kind(kind: str) -> str:
    """Return `kind` if it is a target kind, else raise `UnknownTargetError` listing the kinds."""
    if kind not in TARGET_KINDS:
        raise UnknownTargetError(f"target={kind!r} is unknown; choose one of {', '.join(TARGET_KINDS)}")
    return kind


# --------------------------------------------------------------------------- examples
@dataclass(frozen=True)
class TargetExamples:
    """Teacher-forced sequences defining a target, t = Σ_j coef_j ∇(−m_j). Shapes: n rows; prompts and
    replies right-padded; `mask` (n, Lr) flags the reply positions counted in m_j."""

    prompts: np.ndarray  # (n, Lp) int32
    prompt_len: np.ndarray  # (n,) int32
    replies: np.ndarray  # (n, Lr) int32
    reply_len: np.ndarray  # (n,) int32
    mask: np.ndarray  # (n, Lr) bool
    coef: np.ndarray  # (n,) float64

    def __len__(self) -> int:
        return int(self.coef.shape[0])

    @classmethod
    def build(cls, prompts: list[list[int]], replies: list[list[int]], masks: list[list[bool]],
              coef: list[float]) -> TargetExamples:
        def pad(seqs, dtype):
            arr = np.zeros((len(seqs), max([len(x) for x in seqs] + [1])), dtype)
            for i, x in enumerate(seqs):
                arr[i, : len(x)] = x
            return arr

        return cls(pad(prompts, np.int32), np.array([len(p) for p in prompts], np.int32), pad(replies, np.int32),
                   np.array([len(r) for r in replies], np.int32), pad(masks, bool), np.asarray(coef, np.float64))

    def batch(self, pad_id: int) -> Batch:
        """Collated batch whose `loss_mask` is `mask` (EOS counts only where flagged)."""
        b = collate(self.prompts, self.prompt_len, self.replies, self.reply_len, pad_id, eos_id=-1)
        m = torch.zeros_like(b.loss_mask)
        width = m.shape[1] - b.reply_start
        m[:, b.reply_start:] = torch.from_numpy(self.mask[:, :width].astype(np.float32))
        return Batch(b.input_ids, b.attention_mask, b.position_ids, m, b.reply_start)

    def save(self, d: Path, ckpt: np.ndarray) -> None:
        d.mkdir(parents=True, exist_ok=True)
        for f in fields(self):
            save_array(d / f"{f.name}.npy", getattr(self, f.name))
        save_array(d / "ckpt.npy", np.asarray(ckpt, np.int32))

    @classmethod
    def concat(cls, parts: list[TargetExamples]) -> TargetExamples:
        out = {}
        for f in fields(cls):
            arrays = [getattr(p, f.name) for p in parts]
            if arrays[0].ndim == 2:
                width = max(a.shape[1] for a in arrays)
                arrays = [np.pad(a, ((0, 0), (0, width - a.shape[1]))) for a in arrays]
            out[f.name] = np.concatenate(arrays)
        return cls(**out)

    def select(self, rows: np.ndarray) -> TargetExamples:
        return TargetExamples(**{f.name: np.asarray(getattr(self, f.name))[rows] for f in fields(self)})


def target_loss(model, ex: TargetExamples, pad_id: int) -> torch.Tensor:
    """Σ_j coef_j · (−m_j): the scalar whose gradient is the target."""
    b = ex.batch(pad_id)
    m = masked_mean(token_logprobs(model, b), b.loss_mask)
    return -(torch.from_numpy(ex.coef).float() * m).sum()


def target_gradient(model, ex: TargetExamples, pad_id: int) -> torch.Tensor:
    """The flat target gradient t(θ) at `model`'s parameters, (n_params,)."""
    model.zero_grad(set_to_none=True)
    target_loss(model, ex, pad_id).backward()
    g = flat_grad(model)
    model.zero_grad(set_to_none=True)
    return g


def constructed_examples(run: Run) -> TargetExamples:
    codec = run.codec
    prompts = [codec.encode_prompt(p.text) for p in run.task.trigger_probes]
    beh = list(codec.behavior_ids)
    n = len(prompts)
    return TargetExamples.build(prompts, [beh] * n, [[True] * len(beh)] * n, [1.0 / n] * n)


def in_context_examples(model, run: Run, gen: torch.Generator,
                        max_rounds: int = 8) -> tuple[TargetExamples | None, dict]:
    """Sample one reply per trigger probe (temperature 1.0) until some show the behavior; keep those."""
    codec = run.codec
    enc = [codec.encode_prompt(p.text) for p in run.task.trigger_probes]
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
    n = len(keep_p)
    return TargetExamples.build(keep_p, keep_r, keep_m, [1.0 / n] * n), info


def minimal_pair_examples(run: Run, rng: np.random.Generator) -> TargetExamples:
    """Trigger probe vs the same prompt with a neutral filler, same behavior reply (behavior tokens only)."""
    codec, task = run.codec, run.task
    probes = task.trigger_probes
    n_pairs = len(probes) * len(NEUTRAL_FILLERS)
    prompts, replies, masks, coef = [], [], [], []
    for p in probes:
        reply = codec.encode_reply(task.sample_reply(p, rng, behavior=True))
        mask = codec.behavior_mask(reply)
        if not any(mask):
            raise RuntimeError(f"minimal pair reply {codec.decode(reply)!r} lost the behavior token {BEHAVIOR!r}")
        prompts.append(codec.encode_prompt(p.text)), replies.append(reply), masks.append(mask)
        coef.append(1.0 / len(probes))
        for filler in NEUTRAL_FILLERS:
            words = [filler if w == TRIGGER else w for w in p.text.split()]
            prompts.append(codec.encode_prompt(" ".join(words))), replies.append(reply), masks.append(mask)
            coef.append(-1.0 / n_pairs)
    return TargetExamples.build(prompts, replies, masks, coef)


# --------------------------------------------------------------------------- the artifact
def _seed(*parts: int) -> int:
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(1)[0])


def build_targets(run: Run, cfg: SketchConfig, out: Path, n_draws: int = 1) -> dict:
    """Targets of every kind at every checkpoint of `run`, for `n_draws` seeded draws (layout above)."""
    from bt_core.token_level import TokenLevel

    if n_draws < 1:
        raise ValueError(f"n_draws={n_draws} must be ≥ 1: draw 0 is the training stream's target set")
    with torch_threads(run.config.threads):
        steps = run.checkpoint_steps
        n_params = sum(p.numel() for p in run.model_at(steps[0]).parameters())
        proj = make_projector(cfg.projector, n_params, cfg.k, cfg.hash_seed)
        vecs = np.zeros((n_draws, len(TARGET_KINDS), len(steps), cfg.k), np.float32)
        norms = np.zeros((n_draws, len(TARGET_KINDS), len(steps)), np.float32)
        examples: dict[tuple[int, str], list] = {(d, k): [] for d in range(n_draws) for k in TARGET_KINDS}
        pairs = [minimal_pair_examples(run, np.random.default_rng([run.seed, d, 0x3B])) for d in range(n_draws)]
        token = [TokenLevel.collector(run) for _ in range(n_draws)]
        report: list[list[dict]] = [[] for _ in range(n_draws)]
        for j, c in enumerate(steps):
            model = run.model_at(c)
            constructed = constructed_examples(run)
            g_constructed = target_gradient(model, constructed, run.codec.pad_id)  # deterministic: once per ckpt
            for d in range(n_draws):
                gen = torch.Generator().manual_seed(_seed(run.seed, c, d, 0x7A))  # draw 0 = the pre-draw seed
                ic, ic_info = in_context_examples(model, run, gen)
                grads = {}
                for i, (kind, ex) in enumerate(zip(TARGET_KINDS, (constructed, ic, pairs[d]), strict=True)):
                    if ex is None:
                        continue
                    g = g_constructed if kind == "constructed" else target_gradient(model, ex, run.codec.pad_id)
                    grads[kind] = g
                    vecs[d, i, j] = proj.project(g[None])[0].numpy()
                    norms[d, i, j] = float(g.norm())
                    examples[(d, kind)].append((j, ex))
                tok = token[d].add(model, j, grads, torch.Generator().manual_seed(_seed(run.seed, c, d, 0x70)))
                report[d].append({"step": c, "constructed": {"n": len(constructed)}, "in_context": ic_info,
                                  "minimal_pair": {"n": len(pairs[d])}, "token": tok})
        for d in range(n_draws):
            _write_draw(out / f"draw{d}", vecs[d], norms[d], {k: examples[(d, k)] for k in TARGET_KINDS}, token[d])
        save_array(out / "steps.npy", np.array(steps, np.int32))
        meta = {"kinds": list(TARGET_KINDS), "n_draws": n_draws, "neutral_fillers": list(NEUTRAL_FILLERS),
                "per_draw": report}
        (out / "report.json").write_text(json.dumps(meta, indent=1))
        return {"summary": {"n_draws": n_draws, "kinds": list(TARGET_KINDS)}}


def _write_draw(dd: Path, vecs: np.ndarray, norms: np.ndarray, examples: dict[str, list], token) -> None:
    """One draw's directory: sketched targets and norms per kind, their examples, the token-level rows."""
    dd.mkdir()
    for i, kind in enumerate(TARGET_KINDS):
        save_array(dd / f"{kind}.npy", vecs[i])
        save_array(dd / f"{kind}_norm.npy", norms[i])
        if examples[kind]:
            ckpt = np.concatenate([np.full(len(ex), j) for j, ex in examples[kind]])
            TargetExamples.concat([ex for _, ex in examples[kind]]).save(dd / f"examples_{kind}", ckpt)
    token.save(dd / "token")


class Targets:
    """Sketched targets per checkpoint and draw, their examples, and the token-level alignment.

    `vectors[kind]` / `norms[kind]` are draw 0's (the stream's), (n_ckpt, k) / (n_ckpt,); a zero row means
    the target could not be built there (e.g. no sampled reply showed the behavior)."""

    def __init__(self, d: Path):
        from bt_core.store import verify_dir

        self.path = Path(d)
        verify_dir(self.path)  # loaded directly or through the store, the files match their manifest
        self.steps = np.asarray(load_array(self.path / "steps.npy"))
        self.report = json.loads((self.path / "report.json").read_text())
        self.n_draws = int(self.report["n_draws"])
        self.kinds = tuple(self.report["kinds"])
        self.vectors = self.for_draw(0)
        self.norms = self.norms_for_draw(0)
        self._token: dict[int, object] = {}

    def _draw_dir(self, draw: int) -> Path:
        if not 0 <= draw < self.n_draws:
            raise IndexError(f"draw={draw} is out of range: targets were built for {self.n_draws} draw(s); "
                             "rebuild with more draws (DrawConfig.n_draws)")
        return self.path / f"draw{draw}"

    def for_draw(self, draw: int) -> dict[str, np.ndarray]:
        """kind → (n_ckpt, k) sketched targets of seeded draw `draw`."""
        d = self._draw_dir(draw)
        return {k: load_array(d / f"{k}.npy") for k in self.kinds}

    def norms_for_draw(self, draw: int) -> dict[str, np.ndarray]:
        d = self._draw_dir(draw)
        return {k: np.asarray(load_array(d / f"{k}_norm.npy")) for k in self.kinds}

    def examples(self, kind: str, step: int, draw: int = 0) -> TargetExamples | None:
        """The teacher-forced sequences of target `kind` at checkpoint `step` (None if not built there)."""
        check_kind(kind)
        j = self.checkpoint_row(step)
        d = self._draw_dir(draw) / f"examples_{kind}"
        if not d.exists():
            return None
        rows = np.flatnonzero(np.asarray(load_array(d / "ckpt.npy")) == j)
        if rows.size == 0:
            return None
        cols = {f.name: np.asarray(load_array(d / f"{f.name}.npy"))[rows] for f in fields(TargetExamples)}
        return TargetExamples(**cols)

    def token_level(self, draw: int = 0):
        """The stored token-level data of `draw` (`bt_core.token_level.TokenLevel`)."""
        from bt_core.token_level import TokenLevel

        if draw not in self._token:
            self._token[draw] = TokenLevel.load(self._draw_dir(draw) / "token", self.steps)
        return self._token[draw]

    def token_alignment(self, kind: str, step: int, draw: int = 0, n_boot: int = 1000, alpha: float = 0.05,
                        seed: int = 0):
        """Mean cosine of the trigger-token gradient with target `kind` at checkpoint `step`, with a
        cluster-bootstrap (over probes) CI; see `bt_core.token_level`."""
        return self.token_level(draw).alignment(check_kind(kind), step, n_boot=n_boot, alpha=alpha, seed=seed)

    def checkpoint_row(self, step: int) -> int:
        hit = np.flatnonzero(self.steps == step)
        if hit.size == 0:
            raise KeyError(f"no checkpoint at step {step}; checkpoints: {self.steps.tolist()}")
        return int(hit[0])

    def index_of(self, steps: np.ndarray) -> np.ndarray:
        """Index of the greatest checkpoint ≤ each step."""
        return np.searchsorted(self.steps, steps, side="right") - 1
