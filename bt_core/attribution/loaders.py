"""The lazy handles an attribution problem carries instead of the artifacts: a checkpoint's model
(`problem.model_at`), its AdamW state and preconditioner, the sketches' projector, a target's
examples and the counterfactual items' behavior measure. Each holds configs and file paths, never
the `Run` or the `SeedArtifacts` (whose rollout table holds the answers); torch and the training
stage are imported only when one is called. `Evidence` builds problems with them."""

from __future__ import annotations

import copy
from dataclasses import fields

import numpy as np

from bt_core.artifacts.readonly import readonly
from bt_core.artifacts.replays import BehaviorMeasure
from bt_core.artifacts.run import Run
from bt_core.artifacts.seed import SeedArtifacts
from bt_core.artifacts.targets import TargetExamples


class ModelLoader:
    """checkpoint step → a fresh model of a run there (`problem.model_at`). It holds the model
    config, the seed and the checkpoint files, not the `Run`: an estimator that computes its own
    gradients gets the parameters, never a handle on the run's rollout table (whose `gt` column is
    the answer). The training stage (torch, transformers) is imported only when it is called."""

    def __init__(self, run: Run):
        self._config, self._vocab, self._seed = run.config.model, run.token_ids.vocab_size, run.seed
        self._files = {int(s): run.params_file(int(s)) for s in run.checkpoint_steps}

    def __call__(self, step: int):
        from bt_core.training.model import build_model, load_params

        if int(step) not in self._files:
            raise KeyError(f"no checkpoint at step {step}; checkpoints: {sorted(self._files)}")
        model = build_model(self._config, self._vocab, self._seed)
        load_params(model, self._files[int(step)])
        return model

    def with_files(self, move):
        """A copy whose checkpoint files are `move(path)` (the scoring worker's scratch copies)."""
        return _moved(self, move)


class PreconditionerLoader:
    """checkpoint step → the flat AdamW preconditioner 1/(√v̂+ε) stored there, or None before the
    first update (`problem.preconditioner`; `bt_core.training.checkpoints.adam_preconditioner_of`).
    Like `ModelLoader` it holds the configs and the checkpoint files, never the `Run` (whose rollout
    table holds the answers)."""

    def __init__(self, run: Run):
        self._models = ModelLoader(run)
        self._grpo = run.config.grpo
        self._files = {int(s): run.optimizer_file(int(s)) for s in run.checkpoint_steps}

    def __call__(self, step: int) -> np.ndarray | None:
        from bt_core.training.checkpoints import adam_preconditioner_of

        if int(step) not in self._files:
            raise KeyError(f"no checkpoint at step {step}; checkpoints: {sorted(self._files)}")
        p = adam_preconditioner_of(self._models(step), self._grpo, self._files[int(step)])
        return None if p is None else readonly(p)

    def with_files(self, move):
        """A copy whose checkpoint files are `move(path)` (the scoring worker's scratch copies)."""
        return _moved(self, move)


class OptimizerLoader:
    """(checkpoint step, model) → the run's AdamW over `model`'s parameters with the state stored at
    that checkpoint (`problem.optimizer_at`). Like `ModelLoader` it holds the config and the files,
    never the `Run`."""

    def __init__(self, run: Run):
        self._grpo = run.config.grpo
        self._files = {int(s): run.optimizer_file(int(s)) for s in run.checkpoint_steps}

    def __call__(self, step: int, model):
        from bt_core.training import grpo
        from bt_core.training.model import load_optimizer

        if int(step) not in self._files:
            raise KeyError(f"no checkpoint at step {step}; checkpoints: {sorted(self._files)}")
        opt = grpo.make_optimizer(model, self._grpo)
        load_optimizer(opt, self._files[int(step)])
        return opt

    def with_files(self, move):
        """A copy whose checkpoint files are `move(path)` (the scoring worker's scratch copies)."""
        return _moved(self, move)


def _moved(loader, move):
    new = copy.copy(loader)
    new._files = {s: move(p) for s, p in loader._files.items()}
    if getattr(loader, "_models", None) is not None:
        new._models = loader._models.with_files(move)
    return new


def measure_of(a: SeedArtifacts) -> BehaviorMeasure | None:
    """The counterfactual items' behavior measure of a seed, read-only; None without replays."""
    r = getattr(a, "replays", None)
    if r is None:
        return None
    ex = r.measure.examples
    return BehaviorMeasure(
        int(r.measure.step),
        TargetExamples(**{f.name: readonly(getattr(ex, f.name)) for f in fields(TargetExamples)}),
        readonly(r.window),
    )


def draw_measure(a: SeedArtifacts, step: int) -> BehaviorMeasure | None:
    """The behavior measure of a draw: the stream's examples (held-out probes × fixed replies),
    taken after one update from the analysis checkpoint `step` (what the draws' causal label and
    metagrad's draw score differentiate), no trained window; None without replays."""
    m = measure_of(a)
    return None if m is None else BehaviorMeasure(int(step), m.examples, None)


class Projection:
    """flat (n_params,) → (k,): the projector the sketches were built with (`problem.project`),
    built on first use. It holds the projector's settings only, not the sketches or the run."""

    def __init__(self, sketches):
        cfg = sketches.config()
        self._args = (
            cfg["projector"],
            int(sketches.report["n_params"]),
            int(cfg["k"]),
            int(cfg["hash_seed"]),
        )
        self._proj = None

    def __call__(self, flat: np.ndarray) -> np.ndarray:
        import torch

        from bt_core.gradients.projectors import make_projector

        if self._proj is None:
            self._proj = make_projector(*self._args)
        return self._proj.project(torch.from_numpy(np.array(flat, np.float32))[None])[0].numpy()


def examples_of(tg, draw: int):
    """(kind, checkpoint step) → the target's teacher-forced examples of seeded draw `draw`."""
    return lambda kind, step: tg.examples(kind, step, draw)
