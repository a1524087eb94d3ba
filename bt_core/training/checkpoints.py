"""The training stage's view of a stored run: the models, optimizers, task and tokenizer behind it.

`bt_core.artifacts.run.Run` reads a run directory without torch or a tokenizer. Builders that need the
model of a checkpoint (sketches, targets, draws, coverage) and estimators that compute their own
gradients open the run as a `TrainedRun`, which adds what only the training stage knows: how to build
the architecture, the AdamW it used, the task and the tokenizer.
"""

from __future__ import annotations

from functools import cache, cached_property
from pathlib import Path

import torch

from bt_core.artifacts.run import Run
from bt_core.config import ModelConfig, TaskConfig
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
