"""Adapter to Kronfluence (pip install "behaviortrace[kronfluence]"): ``ekfac_kronfluence``.

An influence function (Grosse et al. 2023, EK-FAC by default) of each rollout on the behavior
measure, computed by kronfluence's own `Analyzer`:

    score_i = ∇f(θ_T)ᵀ (G + λI)⁻¹ ∇L_i(θ_T)

* **f** is the ideal's: the behavior NLL of the measure's examples (`measure_loss`), one query row
  per example (f = Σ_j of the rows' measurements; kronfluence aggregates the query gradients, exact
  since f is one scalar).
* **L_i = −c_i A_i ℓ_i** is rollout i's term in its logged step's GRPO loss (c_i = 1/(G·B) its
  loss weight, A_i its advantage, ℓ_i its mean reply log-prob), so ⟨∇f, ∇L_i⟩ is the ladder's R0
  up to η with ∇L_i taken at θ_T instead of the rollout's checkpoint (exactly R0 on a draw). The
  sign is the suite's (−∂f/∂w_i: an influence function's ∂f/∂ε_i is −∇fᵀH⁻¹∇L_i).
* **Where:** at θ_T, the stored checkpoint where the measure is taken. An influence function is a
  one-model method (the response of the optimum to upweighting a point); θ_T is the one model at
  which f is defined, and every rollout of the trained window shares it. Rollouts outside the
  window, and those with A = 0, get 0.
* **G, the curvature:** kronfluence fits its factors on the rollouts it scores, the window's with
  A ≠ 0 (those with A = 0 took no part in any update). Its default is the
  *true* Fisher: labels sampled from the model (`fisher="policy"`: at each reply position a token
  drawn from π_θ's next-token distribution given the logged prefix, the rollout's loss their mean
  negative log-prob, no advantage; this is the policy's own Fisher, the metric of the natural policy
  gradient). `fisher="empirical"` uses kronfluence's empirical Fisher of L_i itself (the logged
  tokens weighted by c_i A_i). Either is positive semi-definite. **The assumption that fails here:**
  a Fisher or Gauss-Newton curvature stands in for the Hessian of a likelihood loss; the
  advantage-weighted loss Σ_i L_i has an indefinite Hessian (negative-advantage rollouts push
  likelihood down), so no PSD G is its Hessian, and GRPO's few hundred steps do not reach an
  optimum, which an influence function assumes.
* **Coverage:** kronfluence hooks `nn.Linear` and `nn.Conv2d` only. The model's token embeddings
  are tied to `lm_head`, so it sees that weight's output side (`lm_head`) and not its input side,
  where the trigger's embedding row acts; nor the RMSNorm gains. Every row records
  this (`covers`).

On a **draw**, the same at the analysis checkpoint S (θ_T = θ_S), with L_i = −c ℓ_i for each
sibling (c = `extra["loss_weight"]`, a rollout's weight in one update): the ladder's R0 on draws,
preconditioned.

Kronfluence writes its factors and scores to a fresh temporary folder (the sandbox's scratch),
always with ``overwrite_output_dir=True`` (with results already there it would return them
unchanged). Settings that change the mathematics: ``strategy`` (identity, diagonal, kfac,
ekfac), ``fisher`` and ``damping`` (kronfluence's ``damping_factor``; None: its heuristic, 0.1 × the
mean eigenvalue).
"""

from __future__ import annotations

import copy
import dataclasses
import importlib.metadata
import logging
import tempfile

import numpy as np
import torch

from bt_core.attribution.adapters._common import single_threaded
from bt_core.attribution.registry import Declined, Estimator, register

STRATEGIES = ("identity", "diagonal", "kfac", "ekfac")
FISHERS = ("policy", "empirical")
COVERS = (
    "every nn.Linear (attention, MLP, lm_head: the tied embedding's output side); not the tied "
    "embedding's input side, nor the RMSNorm gains"
)
MAX_DIM = 8192  # the widest Linear side it fits a Kronecker factor for (a d×d float32 matrix)


class _Rows(torch.utils.data.Dataset):
    """Row indices the loaders collate into an index tensor the task reads: 0..n-1 for the train
    rollouts, −1..−n for the query rows (so the task tells them apart)."""

    def __init__(self, n: int, query: bool = False):
        self.n, self.query = n, query

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        return -1 - i if self.query else i


def _task(rollouts, coef: np.ndarray, examples, codec, seed: int):
    """A kronfluence `Task` over rollout rows (train) and measure rows (query)."""
    from kronfluence.task import Task

    from bt_core.training import grpo
    from bt_core.training.behavior import measure_loss
    from bt_core.training.objective import masked_mean, rollout_logprob

    gen = torch.Generator().manual_seed(seed)
    held: dict[tuple, object] = {}

    def collated(idx: torch.Tensor):
        key = tuple(int(i) for i in idx)
        if key not in held:  # one batch is asked for by the loss and by the attention mask
            held.clear()
            held[key] = grpo.batch_of(rollouts.select(np.asarray(key)), codec)
        return held[key]

    # kronfluence calls these with keywords (batch=, model=, sample=): the names are its
    class RolloutTask(Task):
        def compute_train_loss(self, batch, model, sample: bool = False) -> torch.Tensor:
            b = collated(batch)
            if not sample:  # the logged tokens, weighted: L_i = −c_i A_i ℓ_i
                w = torch.as_tensor(coef[batch.numpy()], dtype=torch.float32)
                return -(w * rollout_logprob(model, b)).sum()
            # the policy's Fisher: reply tokens drawn from π_θ given the logged prefix
            logits = model(
                input_ids=b.input_ids, attention_mask=b.attention_mask, position_ids=b.position_ids
            ).logits[:, :-1]
            logp = torch.log_softmax(logits.float(), dim=-1)
            with torch.no_grad():
                drawn = torch.multinomial(
                    logp.exp().reshape(-1, logp.shape[-1]), 1, generator=gen
                ).reshape(logp.shape[:2])
            tok = logp.gather(-1, drawn[..., None]).squeeze(-1)
            return -masked_mean(tok, b.loss_mask[:, 1:]).sum()

        def compute_measurement(self, batch, model) -> torch.Tensor:
            rows = -1 - batch.numpy()
            ex = dataclasses.replace(
                examples,
                **{f.name: getattr(examples, f.name)[rows] for f in dataclasses.fields(examples)},
            )
            return measure_loss(model, ex, codec.pad_id)

        def get_attention_mask(self, batch):
            # the activation covariance (fitted on the train rows) leaves out the padding (an
            # integer mask: kronfluence counts the tokens with it); a query row's padding has no
            # gradient to carry
            if len(batch) and int(batch[0]) >= 0:
                return collated(batch).attention_mask.long()
            return None

    return RolloutTask()


@register(origin="adapter:kronfluence")
class EkfacKronfluence(Estimator):
    """An influence function of each rollout on the behavior measure at its measurement step,
    through kronfluence (EK-FAC, the policy's Fisher; every Linear, so the tied embedding's output
    side only)."""

    name = "ekfac_kronfluence"
    levels = ("rollout",)
    # a subset of `metagrad`'s: the logged stream, the stored checkpoints and the measure
    needs = ("rollouts", "codec", "model_at", "checkpoint_steps", "measure")
    # it fits and inverts a curvature over every rollout of the window: judged where named
    opt_in = True

    def __init__(
        self,
        strategy: str = "ekfac",
        fisher: str = "policy",
        damping: float | None = 1e-8,
        batch_size: int = 64,
        window_only: bool = True,
        seed: int = 0,
        max_dim: int = MAX_DIM,
    ):
        if strategy not in STRATEGIES:
            raise ValueError(
                f"strategy={strategy!r} is not one of kronfluence's: {', '.join(STRATEGIES)}"
            )
        if fisher not in FISHERS:
            raise ValueError(
                f"fisher={fisher!r} is unknown; choose 'policy' (labels drawn from the model, "
                "kronfluence's default true Fisher) or 'empirical' (the logged tokens, weighted)"
            )
        if damping is not None and not damping >= 0:
            raise ValueError(f"damping={damping!r} must be ≥ 0, or None (kronfluence's heuristic)")
        if int(batch_size) < 1:
            raise ValueError(f"batch_size={batch_size!r} must be a whole number ≥ 1")
        super().__init__(
            strategy=strategy,
            fisher=fisher,
            damping=damping,
            batch_size=int(batch_size),
            window_only=window_only,
            seed=seed,
            max_dim=int(max_dim),
        )
        self.strategy, self.fisher, self.damping = strategy, fisher, damping
        self.max_dim = int(max_dim)
        self.batch_size, self.window_only, self.seed = int(batch_size), bool(window_only), seed
        # recorded in every row, beside the settings
        self.params["kronfluence"] = importlib.metadata.version("kronfluence")
        self.params["covers"] = COVERS

    @single_threaded
    def score(self, problem) -> np.ndarray:
        from bt_core.attribution.estimators.metagrad import draw_step, require_measure
        from bt_core.counterfactual.replay import step_bounds, step_coef

        require_measure(problem)
        m, t = problem.measure, problem.rollouts
        coef = np.zeros(len(t))
        if problem.kind == "draw":
            step = draw_step(problem)
            coef[:] = float(problem.extra["loss_weight"])
        else:
            step = int(m.step)
            steps = np.asarray(t.step)
            bounds = step_bounds(steps, int(steps.min()) if len(steps) else 0, step)
            for a, b in zip(bounds[:-1], bounds[1:], strict=True):
                if b > a:
                    coef[a:b] = step_coef(t.select(np.arange(a, b)))
            # outside the window (and where A = 0) the coefficient is 0: scored 0, not fitted
            if m.window is not None and self.window_only:
                coef[~np.asarray(m.window, bool)] = 0.0
        rows = np.flatnonzero(coef != 0)
        out = np.zeros(len(t))
        if rows.size == 0:
            return out
        with tempfile.TemporaryDirectory(prefix="bt_kronfluence_") as tmp:
            scores = self._influence(problem, step, t.select(rows), coef[rows], m.examples, tmp)
        out[rows] = scores
        return out

    def _influence(self, problem, step, rollouts, coef, examples, output_dir) -> np.ndarray:
        from kronfluence.analyzer import Analyzer, prepare_model
        from kronfluence.arguments import FactorArguments, ScoreArguments

        base = problem.model_at(step)
        wide = {
            n: max(mod.in_features, mod.out_features)
            for n, mod in base.named_modules()
            if type(mod) is torch.nn.Linear
        }
        too_wide = {n: d for n, d in wide.items() if d > self.max_dim}
        if too_wide and self.strategy in ("kfac", "ekfac"):
            name, d = max(too_wide.items(), key=lambda kv: kv[1])
            raise Declined(
                f"ekfac_kronfluence declines {problem.name}: {name} has a side of {d} "
                f"(> max_dim={self.max_dim}); its Kronecker factor would be a {d}×{d} matrix "
                f"({d * d * 4 / 2**30:.1f} GiB in float32) with its eigendecomposition. Use a "
                "smaller scale, strategy='diagonal', or a larger max_dim where memory allows"
            )
        task = _task(rollouts, coef, examples, problem.codec, self.seed)
        # prepare_model freezes and wraps the modules in place: a copy of its own
        model = prepare_model(copy.deepcopy(base).float(), task)
        analyzer = Analyzer(
            "behaviortrace",
            model,
            task,
            cpu=True,
            disable_tqdm=True,
            log_level=logging.WARNING,
            output_dir=output_dir,
        )
        train, query = _Rows(len(rollouts)), _Rows(len(examples), query=True)
        analyzer.fit_all_factors(
            "factors",
            train,
            per_device_batch_size=self.batch_size,
            factor_args=FactorArguments(
                strategy=self.strategy, use_empirical_fisher=self.fisher == "empirical"
            ),
            overwrite_output_dir=True,
        )
        analyzer.compute_pairwise_scores(
            "scores",
            "factors",
            query,
            train,
            per_device_query_batch_size=len(examples),
            per_device_train_batch_size=self.batch_size,
            score_args=ScoreArguments(damping_factor=self.damping, aggregate_query_gradients=True),
            overwrite_output_dir=True,
        )
        scores = analyzer.load_pairwise_scores("scores")["all_modules"]
        # (1, n): one aggregated query, the sum of the rows' gradients = ∇f
        return scores.double().sum(0).numpy()
