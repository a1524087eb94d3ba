"""Generation draws: fresh sibling groups sampled at the analysis checkpoint (PAPER_NOTES P5/P6).

The analysis checkpoint is the first whose sampled behavior rate on trigger probes reaches
`DrawConfig.saturation` (the "saturated" checkpoint where the fluency confound arises), else the
checkpoint with the highest rate. Each draw is the reference's rollout-level protocol
(`E2_1_per_rollout_mp.py`, section 2): `repeats` cycles over the explicit prompts and the held-out
trigger probes (`bt_core.targets.examples.behavior_prompts`), one group of `group_size` siblings per
prompt and cycle, sampled at `DrawConfig.temperature` and `top_p` (0.9 / 0.95); the label is the
behavior flag.

Each draw also holds its causal label (``effect.npy``, (n,) float64): every sibling's one-step
effect on the counterfactual items' behavior measure (`bt_core.counterfactual.sibling_effect`),
computed from the analysis checkpoint's parameters and AdamW state. Like the behavior flag it is an
answer: the attribution layer keeps it from every estimator (`bt_core.attribution.evidence`).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from bt_core.artifacts.run import Run
from bt_core.artifacts.store import save_array
from bt_core.config import CounterfactualConfig, DrawConfig, SketchConfig
from bt_core.counterfactual.sibling_effect import run_coefficient, sibling_effects
from bt_core.gradients.sketch import sketch_table_at
from bt_core.targets.examples import behavior_prompts
from bt_core.training.behavior import measure_examples
from bt_core.training.checkpoints import TrainedRun
from bt_core.training.generate import sample
from bt_core.training.grpo import make_table
from bt_core.training.model import cast_model, torch_threads


def analysis_step(run: Run, cfg: DrawConfig) -> int:
    probes = run.probes
    for p in probes:
        if p["sampled_rate"] >= cfg.saturation:
            return int(p["step"])
    return int(max(probes, key=lambda p: p["sampled_rate"])["step"])


def causal_label(run: TrainedRun, step: int, table, cf: CounterfactualConfig | None) -> dict:
    """Each sibling's one-step effect at checkpoint `step` (`sibling_effects`), in float64, with the
    counterfactual items' measure (`cf`'s; the default config's without one)."""
    g = run.config.grpo
    model = cast_model(run.model_at(step), torch.float64)
    ex = measure_examples(run.task, run.codec, cf if cf is not None else CounterfactualConfig())
    return sibling_effects(
        model,
        run.optimizer_at(step, model),
        table,
        run.codec,
        ex,
        run_coefficient(g.group_size, g.prompts_per_step),
        g.grad_clip,
    )


def build_draw(
    run: TrainedRun,
    cfg: DrawConfig,
    sk: SketchConfig,
    draw: int,
    out: Path,
    cf: CounterfactualConfig | None = None,
) -> dict:
    with torch_threads(run.config.threads):
        step = analysis_step(run, cfg)
        model = run.model_at(step)
        codec, task = run.codec, run.task
        # cycle-major, as the reference's group index rep × n_prompts + prompt
        prompts = [
            p
            for _ in range(cfg.repeats)
            for p in behavior_prompts(task)
            for _ in range(cfg.group_size)
        ]
        seed = int(np.random.SeedSequence([run.seed, step, draw, 0xD4]).generate_state(1)[0])
        model.eval()
        replies, reply_len = sample(
            model,
            [codec.encode_prompt(p.text) for p in prompts],
            max_new_tokens=run.config.grpo.max_new_tokens,
            eos_id=codec.eos_id,
            pad_id=codec.pad_id,
            generator=torch.Generator().manual_seed(seed),
            temperature=cfg.temperature,
            top_p=cfg.top_p,
        )
        group = np.arange(len(prompts)) // cfg.group_size
        table = make_table(
            task,
            codec,
            prompts,
            replies,
            reply_len,
            step=step,
            group=group,
            lr=0.0,
            elig=np.zeros(len(prompts), bool),
            contaminate=False,
            std_norm=True,
        )
        table.save(out / "rollouts")
        sketch_table_at(model, table, codec, sk, out)
        eff = causal_label(run, step, table, cf)
        save_array(out / "effect.npy", eff["effect"])
        summary = {
            "analysis_step": step,
            "draw": draw,
            "n": len(table),
            "behavior_rate": round(float(table.behavior.mean()), 4),
            "effect": {
                "positive_rate": round(float(np.mean(eff["effect"] > 0)), 4),
                "nll_start": eff["nll_start"],
                "nll_empty": eff["nll_empty"],
                "seconds": round(eff["seconds"], 3),
                "audit": eff["audit"],
            },
        }
        (out / "draw.json").write_text(json.dumps(summary))
        return {
            "summary": {k: v for k, v in summary.items() if k != "effect"},
            "timings": {"effect_s": round(eff["seconds"], 3)},
        }
