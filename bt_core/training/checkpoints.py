"""The training stage's view of a stored run: the models, optimizers, task and tokenizer behind it.

`bt_core.artifacts.run.Run` reads a run directory without torch or a tokenizer. Builders that need
the model of a checkpoint (sketches, targets, draws, coverage) and estimators that compute their own
gradients open the run as a `TrainedRun`, which adds what only the training stage knows: how to
build the architecture, the AdamW it used, the task and the tokenizer.
"""

from __future__ import annotations

from functools import cache, cached_property
from pathlib import Path

import numpy as np
import torch

from bt_core.artifacts.run import Run
from bt_core.config import GRPOConfig, ModelConfig, TaskConfig
from bt_core.training import grpo
from bt_core.training.model import Codec, build_codec, build_model, load_optimizer, load_params
from bt_core.training.task import Task
from bt_core.training.task_natural import make_task


@cache
def codec_for(cfg: ModelConfig, task: TaskConfig | None = None) -> Codec:
    """The tokenizer wrapper of a model config (built once per process)."""
    return build_codec(cfg, task)


def model_at(run: Run, step: int) -> torch.nn.Module:
    """A fresh model holding the parameters of `run`'s checkpoint `step`."""
    path = run.params_file(step)
    model = build_model(run.config.model, run.token_ids.vocab_size, run.seed)
    load_params(model, path)
    return model


def optimizer_at(run: Run, step: int, model: torch.nn.Module) -> torch.optim.Optimizer:
    """The AdamW of `run` at checkpoint `step`, over `model`'s parameters."""
    opt = grpo.make_optimizer(model, run.config.grpo)
    load_optimizer(opt, run.optimizer_file(step))
    return opt


def adam_preconditioner_of(
    model: torch.nn.Module, grpo_cfg: GRPOConfig, optim_file: Path
) -> np.ndarray | None:
    """The AdamW preconditioner stored in `optim_file` (the state of `model`'s parameters) as one
    flat vector in the parameter layout (`bt_core.gradients.layout`), (n_params,) float32: P =
    1/(√v̂ + ε) with v̂ = v/(1 − β₂ᵗ) the bias-corrected second moment of the stored state (t = its
    step count). None when the file holds no state (step 0: saved before the first GRPO update). A
    coordinate with v = 0 (no gradient reached it in any update so far) gets P = 0, not 1/ε: Adam's
    first step on a coordinate moves it by ~lr·sign(g), not by g/ε, so 1/ε would be a 10⁸ weight
    that no update ever applies."""
    opt = grpo.make_optimizer(model, grpo_cfg)
    load_optimizer(opt, optim_file)
    group = opt.param_groups[0]
    beta2, eps = group["betas"][1], group["eps"]
    parts = []
    for p in model.parameters():
        st = opt.state.get(p)
        if not st or "exp_avg_sq" not in st:
            return None
        t = float(st["step"])
        v = st["exp_avg_sq"].detach().reshape(-1).double() / (1.0 - beta2**t)
        parts.append(torch.where(v > 0, 1.0 / (v.sqrt() + eps), torch.zeros_like(v)))
    return torch.cat(parts).float().numpy()


def adam_preconditioner(run: Run, step: int) -> np.ndarray | None:
    """`adam_preconditioner_of` the checkpoint `step` of `run`."""
    return adam_preconditioner_of(model_at(run, step), run.config.grpo, run.optimizer_file(step))


class TrainedRun(Run):
    """A `Run` with the training stage's accessors: `model_at`, `optimizer_at`, `task`, `codec`."""

    def __init__(self, path: Path):
        super().__init__(path)

    @cached_property
    def task(self) -> Task:
        return make_task(self.config.task)

    @property
    def codec(self) -> Codec:
        return codec_for(self.config.model, self.config.task)

    def model_at(self, step: int) -> torch.nn.Module:
        return model_at(self, step)

    def optimizer_at(self, step: int, model: torch.nn.Module) -> torch.optim.Optimizer:
        return optimizer_at(self, step, model)
