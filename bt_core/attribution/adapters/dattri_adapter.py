"""Adapters to `dattri` (pip install "behaviortrace[dattri]"): ``tracin_dattri`` and
``trak_dattri``.

Both wrap the shared objective in a dattri `AttributionTask` whose loss and target functions are
L_i(θ) = −w_i·ℓ_i(θ) (w = advantage for rollouts, coef for target rows; see `_common`), so dattri's
per-example gradient of a rollout is A_i·e_i and the sum over target rows is the target t. One task
per checkpoint group (a single checkpoint each), so each rollout meets the target of its own
checkpoint.

* ``tracin_dattri`` — `TracInAttributor`, weight_list = [η_c], normalized_grad=False, *identity*
  projection (exact gradients; dattri's default would project to 512 dims): η_c⟨A_i e_i, t_c⟩, the
  built-in `tracincp`'s quantity except that e_i is taken at the checkpoint, not the rollout's own
  parameters, and is not sketched.
* ``trak_dattri`` — `TRAKAttributor` with a Gaussian projection to `proj_dim`, regularization
  λ = λ_scale·‖X‖²_F/proj_dim on dattri's own projected features, and Q = 1 by default (the
  reference's; dattri's own Q = 1 − p needs a "probability of the correct label", which a rollout
  does not have — `q="likelihood"` uses p = exp(ℓ_i), the geometric-mean token probability). λ needs
  ‖X‖_F before dattri builds its kernel, so the training features are projected twice (cheap at draw
  scale).
"""

from __future__ import annotations

import numpy as np
import torch

from bt_core.artifacts.targets import check_kind
from bt_core.attribution.adapters._common import (
    MAX_UNITS,
    NEEDS,
    check_problem,
    checkpoint_groups,
    single_threaded,
    state_of,
    target_tensors,
    train_tensors,
    weighted_logprob,
)
from bt_core.attribution.registry import Estimator, register

Q_TERMS = ("one", "likelihood")


def _task(problem, step: int):
    from dattri.task import AttributionTask

    model = problem.model_at(step)
    model.eval()

    def loss(params, data):
        ids, att, pos, mask, w = data
        return -weighted_logprob(model, params, ids, att, pos, mask, w)

    return model, AttributionTask(
        loss_func=loss, model=model, checkpoints=[state_of(problem, step)], target_func=loss
    )


def _loader(tensors: tuple[torch.Tensor, ...], batch_size: int):
    return torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(*tensors), batch_size=batch_size, shuffle=False
    )


class _DattriBase(Estimator):
    levels = ("rollout",)
    needs = NEEDS

    def __init__(
        self,
        target: str = "in_context",
        batch_size: int = 256,
        max_units: int = MAX_UNITS,
        stream: bool = False,
        **extra,
    ):
        check_kind(target)
        super().__init__(
            target=target, batch_size=batch_size, max_units=max_units, stream=stream, **extra
        )
        self.target, self.batch_size, self.max_units, self.stream = (
            target,
            batch_size,
            max_units,
            stream,
        )

    @single_threaded
    def score(self, problem) -> np.ndarray:
        check_problem(problem, self.name, self.max_units, self.stream)
        out = np.zeros(problem.n_units)
        for c, rows in checkpoint_groups(problem):
            train = _loader(train_tensors(problem, rows), self.batch_size)
            test = _loader(target_tensors(problem, self.target, c), self.batch_size)
            lr = float(np.asarray(problem.lr)[rows][0])
            scores = self._attribute(problem, c, train, test, lr)  # (n_rows, n_target_rows)
            out[rows] = scores.double().sum(1).numpy()
        return out


@register(origin="adapter:dattri")
class TracInDattri(_DattriBase):
    """TracIn through dattri (TracInAttributor, η-weighted gradient dot products, exact
    gradients)."""

    name = "tracin_dattri"

    def _attribute(self, problem, step, train, test, lr):
        from dattri.algorithm.tracin import TracInAttributor

        _, task = _task(problem, step)
        n_params = sum(p.numel() for p in problem.model_at(step).parameters())
        # Full kwargs every time: dattri merges user kwargs into a module-level default dict.
        proj = {
            "proj_dim": n_params,
            "proj_max_batch_size": 32,
            "proj_seed": 0,
            "device": "cpu",
            "proj_type": "identity",
        }
        att = TracInAttributor(
            task=task,
            weight_list=torch.tensor([lr]),
            normalized_grad=False,
            projector_kwargs=proj,
            device="cpu",
        )
        return att.attribute(train, test)


@register(origin="adapter:dattri")
class TrakDattri(_DattriBase):
    """TRAK through dattri (TRAKAttributor, Gaussian projection, λ = 0.1‖X‖²_F/d, Q = 1)."""

    name = "trak_dattri"

    def __init__(
        self,
        target: str = "in_context",
        proj_dim: int = 2048,
        lam_scale: float = 0.1,
        q: str = "one",
        batch_size: int = 256,
        max_units: int = MAX_UNITS,
        stream: bool = False,
        seed: int = 0,
    ):
        if q not in Q_TERMS:
            raise ValueError(f"q={q!r} is unknown; choose one of {', '.join(Q_TERMS)}")
        super().__init__(
            target=target,
            batch_size=batch_size,
            max_units=max_units,
            stream=stream,
            proj_dim=proj_dim,
            lam_scale=lam_scale,
            q=q,
            seed=seed,
        )
        self.proj_dim, self.lam_scale, self.q, self.seed = proj_dim, lam_scale, q, seed

    def _attribute(self, problem, step, train, test, lr):
        from dattri.algorithm.trak import TRAKAttributor
        from dattri.func.projection import random_project

        model, task = _task(problem, step)
        proj = {
            "proj_dim": self.proj_dim,
            "proj_max_batch_size": 32,
            "proj_seed": self.seed,
            "device": "cpu",
            "proj_type": "normal",
        }

        def prob(params, data):  # dattri's Q = 1 − p
            ids, att, pos, mask, _ = data
            if self.q == "one":
                return torch.zeros(())
            return torch.exp(weighted_logprob(model, params, ids, att, pos, mask, torch.ones(())))

        att = TRAKAttributor(
            task=task, correct_probability_func=prob, projector_kwargs=proj, device="cpu"
        )
        # λ from dattri's own features: the same gradient function, norm scaler and projection it
        # uses
        params, _ = task.get_param(ckpt_idx=0)
        fro2 = 0.0
        for batch in train:
            g = torch.nan_to_num(att.grad_loss_func(params, tuple(batch))) / att.norm_scaler
            x = random_project(g, g.shape[0], **proj)(g, ensemble_id=0)
            fro2 += float((x.detach().double() ** 2).sum())
        att.regularization = self.lam_scale * fro2 / self.proj_dim
        att.cache(train)
        return att.attribute(test)
