"""Adapter to MadryLab's `traker` (pip install "behaviortrace[trak]"): ``trak_traker``.

TRAKer with a `BasicProjector` (Gaussian JL projection, CPU), float32, no ensembling and Q = 1, like
the reference's TRAK-style estimator. The model output function is f_i = w_i·ℓ_i (see `_common`), so
a training feature is the projected ∇(A_i ℓ_i) = −A_i·e_i and a target row's is ∇m_j; the score
Σ_j coef_j·φ_iᵀ(XᵀX+λI)⁻¹ψ_j is then (A_i e_i)ᵀ(XᵀX+λI)⁻¹ t — the built-in `trak`'s quantity, with
the two minus signs cancelling. λ = λ_scale·‖X‖²_F/proj_dim on traker's own (normalized) features.

Every rollout is featurized at its checkpoint's parameters (all groups share one model id, hence one
kernel XᵀX over all units, as the built-in); targets are scored per checkpoint (one experiment
each).

`projector="countsketch"` swaps traker's Gaussian projection for the suite's own CountSketch (keyed
by `sketch_seed`, width = the problem's k), so that traker sees exactly the features the built-in
`trak` sees — the like-for-like setting of the conformance test. The default ("basic") is traker's
own.
"""

from __future__ import annotations

import logging
import tempfile

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
from bt_core.gradients.projectors import CountSketch

PROJECTORS = ("basic", "countsketch")
DEFAULT_PROJ_DIM = 2048  # traker's default JL width


def _model_output():
    from trak.modelout_functions import AbstractModelOutput

    class RolloutOutput(AbstractModelOutput):
        """f = w·ℓ (the shared per-rollout objective); Q = ∂loss/∂f taken as 1 (the reference's Q =
        1)."""

        def __init__(self) -> None:
            super().__init__()

        def get_output(self, model, weights, buffers, ids, att, pos, mask, w):
            return weighted_logprob(model, (weights, buffers), ids, att, pos, mask, w)

        def get_out_to_loss_grad(self, model, weights, buffers, batch):
            return torch.ones(batch[0].shape[0], 1)

    return RolloutOutput()


def _projector(kind: str, n_params: int, proj_dim: int, seed: int):
    from trak.projectors import AbstractProjector, BasicProjector, ProjectionType
    from trak.utils import vectorize

    if kind == "basic":
        return BasicProjector(
            grad_dim=n_params,
            proj_dim=proj_dim,
            seed=seed,
            proj_type=ProjectionType.normal,
            device="cpu",
            dtype=torch.float32,
        )

    class SuiteCountSketch(AbstractProjector):
        """The suite's CountSketch as a traker projector (per-parameter grads in named_parameters
        order)."""

        def __init__(self) -> None:
            super().__init__(n_params, proj_dim, seed, "countsketch", "cpu")
            self.sketch = CountSketch(n_params, proj_dim, seed)

        def project(self, grads, model_id: int) -> torch.Tensor:
            flat = vectorize(grads, device="cpu") if isinstance(grads, dict) else grads
            return self.sketch.project(flat)

    return SuiteCountSketch()


@register(origin="adapter:traker")
class TrakTraker(Estimator):
    """TRAK through the `traker` library (BasicProjector on CPU, Q = 1, λ = 0.1‖X‖²_F/d)."""

    name = "trak_traker"
    levels = ("rollout",)
    # reads the sketch dimension k (its default projection size for "countsketch")
    needs = NEEDS + ("emb",)

    def __init__(
        self,
        target: str = "in_context",
        proj_dim: int | None = None,
        lam_scale: float = 0.1,
        projector: str = "basic",
        batch_size: int = 128,
        max_units: int = MAX_UNITS,
        stream: bool = False,
        seed: int = 0,
    ):
        check_kind(target)
        if projector not in PROJECTORS:
            raise ValueError(
                f"projector={projector!r} is unknown; choose one of {', '.join(PROJECTORS)}"
            )
        super().__init__(
            target=target,
            proj_dim=proj_dim,
            lam_scale=lam_scale,
            projector=projector,
            batch_size=batch_size,
            max_units=max_units,
            stream=stream,
            seed=seed,
        )
        self.target, self.proj_dim, self.lam_scale, self.projector = (
            target,
            proj_dim,
            lam_scale,
            projector,
        )
        self.batch_size, self.max_units, self.stream, self.seed = (
            batch_size,
            max_units,
            stream,
            seed,
        )

    @single_threaded
    def score(self, problem) -> np.ndarray:
        check_problem(problem, self.name, self.max_units, self.stream)
        with tempfile.TemporaryDirectory(prefix="bt_traker_") as tmp:
            return self._score(problem, tmp)

    def _score(self, problem, save_dir: str) -> np.ndarray:
        from trak import TRAKer

        groups = checkpoint_groups(problem)
        model = problem.model_at(groups[0][0])
        n_params = sum(p.numel() for p in model.parameters())
        default_dim = DEFAULT_PROJ_DIM if self.projector == "basic" else int(problem.emb.shape[1])
        proj_dim = self.proj_dim or default_dim
        proj = _projector(self.projector, n_params, proj_dim, self.seed)
        # load_from_save_dir=True on a fresh temporary directory: with False traker 0.3.2 never
        # writes the experiments.json that scoring reads.
        traker = TRAKer(
            model=model,
            task=_model_output(),
            train_set_size=problem.n_units,
            save_dir=save_dir,
            load_from_save_dir=True,
            device="cpu",
            projector=proj,
            use_half_precision=False,
            logging_level=logging.ERROR,
        )
        for c, rows in groups:  # one model id: every rollout at its checkpoint, one kernel over all
            traker.load_checkpoint(state_of(problem, c), model_id=0)
            data = train_tensors(problem, rows)
            for lo in range(0, rows.size, self.batch_size):
                sl = slice(lo, lo + self.batch_size)
                traker.featurize(batch=[x[sl] for x in data], inds=rows[sl])
        x = np.asarray(traker.saver.current_store["grads"], np.float64)
        traker.score_computer.lambda_reg = self.lam_scale * float((x * x).sum()) / proj_dim
        traker.finalize_features(model_ids=[0])
        out = np.zeros(problem.n_units)
        for c, rows in groups:
            data = target_tensors(problem, self.target, c)
            exp = f"target_{c}"
            traker.start_scoring_checkpoint(
                exp_name=exp,
                checkpoint=state_of(problem, c),
                model_id=0,
                num_targets=data[0].shape[0],
            )
            ones = torch.ones_like(data[4])  # f_j = m_j; the coefficients combine the columns below
            traker.score(batch=[*data[:4], ones], num_samples=data[0].shape[0])
            # (n, n_rows)
            scores = np.asarray(traker.finalize_scores(exp_name=exp, model_ids=[0]), np.float64)
            out[rows] = scores[rows] @ data[4].double().numpy()
        return out
