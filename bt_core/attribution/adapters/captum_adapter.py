"""Adapter to `captum` (pip install "behaviortrace[captum]"): ``tracincp_captum``.

`captum.influence.TracInCP` on a wrapper whose forward is ℓ per row (`LogProbModule`), with the
per-example loss L_i = −w_i·ℓ_i (reduction "none"; w = advantage for rollouts, coef for target rows)
for both training and test examples. The checkpoint list holds one checkpoint per call (each rollout
under the greatest checkpoint ≤ its step); its load function returns the learning rate η_c, which
captum multiplies in. Test rows are aggregated (captum sums their jacobians), which is exactly the
target t.
Per-example gradients come from captum's own loop over autograd.grad
(sample_wise_grads_per_batch=False: its batched trick supports only Linear/Conv2d layers, not
embeddings or attention). That loop backpropagates through the whole batch graph once per example,
so its cost grows as batch²: batches are kept small (4).
"""

from __future__ import annotations

import numpy as np
import torch

from bt_core.artifacts.targets import check_kind
from bt_core.attribution.adapters._common import (
    MAX_UNITS,
    NEEDS,
    LogProbModule,
    check_problem,
    checkpoint_groups,
    single_threaded,
    state_of,
    target_tensors,
    train_tensors,
)
from bt_core.attribution.registry import Estimator, register


class _WeightedNLL(torch.nn.Module):
    """L_i = −w_i·ℓ_i per example; `reduction = "none"` tells captum the loss is per example."""

    reduction = "none"

    def forward(self, ell: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return -(w * ell)


@register(origin="adapter:captum")
class TracInCPCaptum(Estimator):
    """TracInCP through captum (η-weighted gradient dot products at the checkpoint, exact
    gradients)."""

    name = "tracincp_captum"
    levels = ("rollout",)
    needs = NEEDS

    def __init__(
        self,
        target: str = "in_context",
        batch_size: int = 4,
        max_units: int = MAX_UNITS,
        stream: bool = False,
    ):
        check_kind(target)
        super().__init__(target=target, batch_size=batch_size, max_units=max_units, stream=stream)
        self.target, self.batch_size, self.max_units, self.stream = (
            target,
            batch_size,
            max_units,
            stream,
        )

    @single_threaded
    def score(self, problem) -> np.ndarray:
        from captum.influence import TracInCP

        check_problem(problem, self.name, self.max_units, self.stream)
        out = np.zeros(problem.n_units)
        for c, rows in checkpoint_groups(problem):
            wrapper = LogProbModule(problem.model_at(c)).eval()
            lr = float(np.asarray(problem.lr)[rows][0])
            state = state_of(problem, c)

            # captum reloads the checkpoint for every train batch
            def load(model, step, lr=lr, state=state):
                model.lm.load_state_dict(state)
                return lr

            tracin = TracInCP(
                wrapper,
                torch.utils.data.TensorDataset(*train_tensors(problem, rows)),
                [c],
                checkpoints_load_func=load,
                loss_fn=_WeightedNLL(),
                test_loss_fn=_WeightedNLL(),
                batch_size=self.batch_size,
                sample_wise_grads_per_batch=False,
            )
            # (1, n_rows)
            scores = tracin.influence(target_tensors(problem, self.target, c), aggregate=True)
            out[rows] = scores.double().numpy()[0]
        return out
