"""Generation draws: fresh sibling groups sampled at the analysis checkpoint (PAPER_NOTES P5/P6).

The analysis checkpoint is the first whose sampled behavior rate on trigger probes reaches
`DrawConfig.saturation` (the "saturated" checkpoint where the fluency confound arises), else the
checkpoint with the highest rate. Each draw is the reference's rollout-level protocol
(`E2_1_per_rollout_mp.py`, section 2): `repeats` cycles over the explicit prompts and the held-out trigger
probes (`bt_core.targets.examples.behavior_prompts`), one group of `group_size` siblings per prompt and
cycle, sampled at `DrawConfig.temperature` and `top_p` (0.9 / 0.95); the label is the behavior flag.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from bt_core.artifacts.run import Run
from bt_core.config import DrawConfig, SketchConfig
from bt_core.gradients.sketch import sketch_table_at
from bt_core.targets.examples import behavior_prompts
from bt_core.training.checkpoints import TrainedRun
from bt_core.training.generate import sample
from bt_core.training.grpo import make_table
from bt_core.training.model import torch_threads


def analysis_step(run: Run, cfg: DrawConfig) -> int:
    probes = run.probes
    for p in probes:
        if p["sampled_rate"] >= cfg.saturation:
            return int(p["step"])
    return int(max(probes, key=lambda p: p["sampled_rate"])["step"])


def build_draw(run: TrainedRun, cfg: DrawConfig, sk: SketchConfig, draw: int, out: Path) -> dict:
    with torch_threads(run.config.threads):
        step = analysis_step(run, cfg)
        model = run.model_at(step)
        codec, task = run.codec, run.task
        # cycle-major, as the reference's group index rep × n_prompts + prompt
        prompts = [p for _ in range(cfg.repeats) for p in behavior_prompts(task) for _ in range(cfg.group_size)]
        seed = int(np.random.SeedSequence([run.seed, step, draw, 0xD4]).generate_state(1)[0])
        model.eval()
        replies, reply_len = sample(model, [codec.encode_prompt(p.text) for p in prompts],
                                    max_new_tokens=run.config.grpo.max_new_tokens, eos_id=codec.eos_id,
                                    pad_id=codec.pad_id, generator=torch.Generator().manual_seed(seed),
                                    temperature=cfg.temperature, top_p=cfg.top_p)
        group = np.arange(len(prompts)) // cfg.group_size
        table = make_table(task, codec, prompts, replies, reply_len, step=step, group=group, lr=0.0,
                           elig=np.zeros(len(prompts), bool), contaminate=False, std_norm=True)
        table.save(out / "rollouts")
        sketch_table_at(model, table, codec, sk, out)
        summary = {"analysis_step": step, "draw": draw, "n": len(table),
                   "behavior_rate": round(float(table.behavior.mean()), 4)}
        (out / "draw.json").write_text(json.dumps(summary))
        return {"summary": summary}
