"""Build the `Targets` artifact: every target kind at every checkpoint of a run, for each seeded
draw, sketched with the same projector as the rollouts, with their examples and the token-level
rows.
Layout: `bt_core.artifacts.targets`; what each kind is: `bt_core.targets.examples`.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from bt_core.artifacts.store import save_array
from bt_core.artifacts.targets import TARGET_KINDS, TargetExamples
from bt_core.config import SketchConfig
from bt_core.gradients.projectors import make_projector
from bt_core.targets.examples import (
    NEUTRAL_FILLERS,
    constructed_examples,
    in_context_examples,
    minimal_pair_examples,
    target_gradient,
)
from bt_core.targets.token_level import TokenLevelCollector
from bt_core.training.checkpoints import TrainedRun
from bt_core.training.model import torch_threads


def _seed(*parts: int) -> int:
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(1)[0])


def build_targets(run: TrainedRun, cfg: SketchConfig, out: Path, n_draws: int = 1) -> dict:
    """Targets of every kind at every checkpoint of `run`, for `n_draws` seeded draws (layout
    above)."""
    if n_draws < 1:
        raise ValueError(
            f"n_draws={n_draws} must be ≥ 1: draw 0 is the training stream's target set"
        )
    with torch_threads(run.config.threads):
        steps = run.checkpoint_steps
        n_params = sum(p.numel() for p in run.model_at(steps[0]).parameters())
        proj = make_projector(cfg.projector, n_params, cfg.k, cfg.hash_seed)
        vecs = np.zeros((n_draws, len(TARGET_KINDS), len(steps), cfg.k), np.float32)
        norms = np.zeros((n_draws, len(TARGET_KINDS), len(steps)), np.float32)
        examples: dict[tuple[int, str], list] = {
            (d, k): [] for d in range(n_draws) for k in TARGET_KINDS
        }
        pairs = [
            minimal_pair_examples(run, np.random.default_rng([run.seed, d, 0x3B]))
            for d in range(n_draws)
        ]
        token = [TokenLevelCollector(run) for _ in range(n_draws)]
        report: list[list[dict]] = [[] for _ in range(n_draws)]
        for j, c in enumerate(steps):
            model = run.model_at(c)
            constructed = constructed_examples(run)
            # deterministic: once per ckpt
            g_constructed = target_gradient(model, constructed, run.codec.pad_id)
            for d in range(n_draws):
                # draw 0 = the pre-draw seed
                gen = torch.Generator().manual_seed(_seed(run.seed, c, d, 0x7A))
                ic, ic_info = in_context_examples(model, run, gen)
                grads = {}
                for i, (kind, ex) in enumerate(
                    zip(TARGET_KINDS, (constructed, ic, pairs[d]), strict=True)
                ):
                    if ex is None:
                        continue
                    g = (
                        g_constructed
                        if kind == "constructed"
                        else target_gradient(model, ex, run.codec.pad_id)
                    )
                    grads[kind] = g
                    vecs[d, i, j] = proj.project(g[None])[0].numpy()
                    norms[d, i, j] = float(g.norm())
                    examples[(d, kind)].append((j, ex))
                tok = token[d].add(
                    model, j, grads, torch.Generator().manual_seed(_seed(run.seed, c, d, 0x70))
                )
                report[d].append(
                    {
                        "step": c,
                        "constructed": {"n": len(constructed)},
                        "in_context": ic_info,
                        "minimal_pair": {"n": len(pairs[d])},
                        "token": tok,
                    }
                )
        for d in range(n_draws):
            _write_draw(
                out / f"draw{d}",
                vecs[d],
                norms[d],
                {k: examples[(d, k)] for k in TARGET_KINDS},
                token[d],
            )
        save_array(out / "steps.npy", np.array(steps, np.int32))
        meta = {
            "kinds": list(TARGET_KINDS),
            "n_draws": n_draws,
            "neutral_fillers": list(NEUTRAL_FILLERS),
            "per_draw": report,
        }
        (out / "report.json").write_text(json.dumps(meta, indent=1))
        return {"summary": {"n_draws": n_draws, "kinds": list(TARGET_KINDS)}}


def _write_draw(
    dd: Path, vecs: np.ndarray, norms: np.ndarray, examples: dict[str, list], token
) -> None:
    """One draw's directory: sketched targets and norms per kind, their examples, the token-level
    rows."""
    dd.mkdir()
    for i, kind in enumerate(TARGET_KINDS):
        save_array(dd / f"{kind}.npy", vecs[i])
        save_array(dd / f"{kind}_norm.npy", norms[i])
        if examples[kind]:
            ckpt = np.concatenate([np.full(len(ex), j) for j, ex in examples[kind]])
            TargetExamples.concat([ex for _, ex in examples[kind]]).save(
                dd / f"examples_{kind}", ckpt
            )
    token.save(dd / "token")
