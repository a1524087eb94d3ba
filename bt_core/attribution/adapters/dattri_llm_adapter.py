"""Adapter to dattri-llm (pip install "behaviortrace[dattri-llm]"): ``adamw_influence_dattri`` and
``dvemb_dattri``, the two published methods closest to what `metagrad` computes exactly, run by
dattri-llm's own sweeps on the logged run.

Both attribute the ideal's f (the behavior NLL of the measure's examples at the measurement step T,
`measure_loss`) to every rollout's weight w_i in its logged GRPO step, whose loss is
L_s = Σ_i w_i L_i with L_i = −c_i A_i ℓ_i (c_i = 1/(G·B) its loss weight, A_i its advantage, ℓ_i
its mean reply log-prob). Each rollout's "recorded per-sample gradient" is g_i = ∇L_i(θ_s), its
share of the step's batch gradient as trained (a *mean* loss over the step's G·B rollouts, so the
library's `loss_reduction="mean"` is the default: its Gauss-Newton scale is the step's row count,
which is 1/c_i where the step's groups are of one size, as GRPO's are). The score has the suite's
sign, −∂f/∂w_i (dattri-llm's AdamW-influence score is the opposite, −∇fᵀ(the state's response to
*removing* i): negated here).

**The trajectory, replayed, not trained again.** dattri-llm's live `attribute()` re-trains from the
first checkpoint with its own trainer, and its cache holds every step's per-sample gradients on disk
(about 3.4 GB at the default scale). Neither is used. The adapter replays the logged updates as the
ladder does (`bt_core.counterfactual.ladder`: `metagrad`'s float64 trajectory when it fits, the
suite's clip and AdamW on the rows with A ≠ 0), one checkpoint segment at a time, latest first, and
hands the library's sweep a train source that yields each step's per-sample gradients at its
replayed θ_s (rows with A = 0 as zero rows: they count in the batch) and, for AdamW-influence, each
step's optimizer dynamics — the AdamW moments before and after the step, its step count, lr, betas,
eps and weight decay — exactly what dattri-llm's `OptimizerStateCallback` records during training.
The per-sample gradients are ours (one forward of a chunk of rows through
`torch.func.functional_call` and a backward vectorized over its rows, `is_grads_batched`): every
parameter, the tied embedding once (both of its sides in one gradient, one AdamW state), the
RMSNorm gains per sample. dattri-llm's own hooks would split the tied weight into two layers
sharing one AdamW state and take batch-level gradients for the norms.

**Test-side propagation** (the library's `propagation="test"`): both carry the query gradient
∇f(θ_T) back through the steps (`AdamWInfluenceAttributor.sweep_queries`,
`DVEmbAttributor._propagate_test_and_score`); the train-side summary would be a 3p × p matrix.
Memory: the replay's (model, AdamW) at every checkpoint not yet swept (`metagrad`'s replayed
states), one segment's per-step states, one step's per-sample gradients with a chunk's batched
backward, and the sweep's 3p floats with its temporaries; an estimate above `max_gb` (4 by
default) declines with the figure (and records it as `memory_gb`).

``adamw_influence_dattri`` (Deng et al. 2026) carries removing rollout i through AdamW: the push on
(θ, m, v) at its step (m: −(1−β₁)g_i; v: −2(1−β₂)g_s⊙g_i; θ through the preconditioner and its
sensitivity to v), then every later step's diagonal AdamW Jacobian with weight decay, **plus a
Gauss-Newton curvature term** H_s = (1/c)Σ_i g_i g_iᵀ for how each later gradient moves with θ.
That is the ladder's R2 (momentum and the second moment carried to T, no curvature) plus that
curvature; two differences: the push uses the rollout's unclipped g_i where R2 carries κ_s g_i (the
clip never acts on the suite's runs, `docs/ladder.md`), and H_s is an empirical-Fisher stand-in for
the step's Hessian. **The assumption that fails here:** a Gauss-Newton curvature is the Hessian of
a likelihood loss near a fit; the advantage-weighted loss has an indefinite Hessian (negative
advantages push likelihood down), and each g_i g_iᵀ carries A_i², so H_s counts every rollout as if
it were being fitted. Settings: `loss_reduction` (its GGN scale). On a draw the one update is the
run's step at the analysis checkpoint from the empty step (`metagrad`'s draw): there the push is
emitted before any transition, so AdamW-influence is exactly `metagrad`'s draw score (a test).

``dvemb_dattri`` (Data Value Embedding, Wang et al., ICLR 2025): I_i = η_s ∇f(θ_T)ᵀ
Π_{k>s}(I − η_k H_k) g_i, with H_k the same empirical-Fisher Gauss-Newton matrix. **It is derived
for SGD**: the logged run is AdamW, so DVEmb's product ignores the preconditioner, the moments and
weight decay — with AdamW's learning rate (`learning_rate="logged"`, the run's η at every step)
and raw gradients, η_k H_k is small and DVEmb is close to the ladder's R0 (on a draw a test checks
it; on the stream the Spearman is reported). Settings:
`loss_reduction`, `hessian_mode` ("full": layers coupled; "diagonal": block-diagonal per
parameter, the official implementation's approximation) and `learning_rate` ("logged" or a
number). On a draw: η⟨∇f(θ'_∅), g_i⟩ with g_i at the analysis checkpoint.

Every row records dattri-llm's version and the settings. float32 in the library (its sweeps), the
trajectory and the gradients in `dtype` (float64 by default) before the cast.
"""

from __future__ import annotations

import copy
import importlib.metadata
import math
from collections.abc import Iterator, Mapping

import numpy as np
import torch

from bt_core.attribution.adapters._common import single_threaded
from bt_core.attribution.estimators.metagrad import MetaGrad
from bt_core.attribution.registry import Declined, Estimator, register

LOSS_REDUCTIONS = ("mean", "sum")
HESSIAN_MODES = ("full", "diagonal")
MAX_GB = 4.0
# rows per forward, their backward vectorized over them (each of the chunk's rows pays a backward
# of the whole chunk): measured on a smoke draw (936 rows, float64, one thread), 16: 8.6 CPU-s,
# 8: 5.4, 4: 4.7, one row at a time: 9.4
CHUNK = 4


def per_sample_grads(model, theta: list[torch.Tensor], part, weight, codec) -> torch.Tensor:
    """(n, p) float32: ∇(weight_i · ℓ_i)(θ) for every row of `part`, flattened in
    `model.named_parameters()` order (the tied embedding once); rows with weight 0 are 0 without
    being computed. One forward per `CHUNK` rows and one backward vectorized over the chunk's rows
    (`is_grads_batched`: the vmap is over the backward only; transformers' mask code does not
    vmap)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from bt_core.training import grpo
    from bt_core.training.objective import rollout_logprob

    names = [n for n, _ in model.named_parameters()]
    p = sum(t.numel() for t in theta)
    weight = np.asarray(weight, np.float64)
    out = torch.zeros(len(part), p, dtype=torch.float32)
    live = np.flatnonzero(weight != 0)
    if live.size == 0:
        return out
    leaves = [t.detach().requires_grad_(True) for t in theta]
    params = dict(zip(names, leaves, strict=True))

    def functional(**kw):
        return torch.func.functional_call(model, params, (), kw)

    model.train()
    for a in range(0, len(live), CHUNK):
        rows = live[a : a + CHUNK]
        with sdpa_kernel(SDPBackend.MATH):
            ell = rollout_logprob(functional, grpo.batch_of(part.select(rows), codec))
            w = torch.as_tensor(weight[rows], dtype=ell.dtype)
            grads = torch.autograd.grad(
                w * ell,
                leaves,
                grad_outputs=torch.eye(len(rows), dtype=ell.dtype),
                is_grads_batched=True,
                allow_unused=True,
            )
        out[rows] = torch.cat(
            [
                (
                    torch.zeros(len(rows), t.numel(), dtype=t.dtype)
                    if g is None
                    else g.reshape(len(rows), -1)
                )
                for g, t in zip(grads, leaves, strict=True)
            ],
            1,
        ).float()
    return out


class _Source:
    """dattri-llm's train source (`for_steps`) and optimizer dynamics (a mapping), built lazily
    from a replay of the logged updates, one checkpoint segment at a time (module docstring).

    `load(s)` returns the records of the segment holding step s, by step: θ_s (flat), the (m, v)
    before and after, the AdamW step count after it, its hyperparameters, the step's batch
    gradient, the rows' global indices and their weights −c_i A_i (so that
    ∇(weight · ℓ) = ∇L_i)."""

    def __init__(self, model, codec, load):
        from bt_core.counterfactual.metagrad import _Layout

        self.model, self.codec = model, codec
        self.names = [n for n, _ in model.named_parameters()]
        self.layout = _Layout(list(model.parameters()))  # flat ↔ per-parameter, as metagrad's
        self.sizes = self.layout.sizes
        self._load = load  # step → {step: record} of the segment holding it
        self._records: dict[int, dict] = {}
        self._blocks: tuple[int, object, list[str]] | None = None
        self.loads = 0  # segments replayed: one per segment in a sweep (a test counts them)

    def _record(self, s: int) -> dict:
        if s not in self._records:
            self._records = {}  # the segment swept before is freed before the next is replayed
            self._records = self._load(s)
            self.loads += 1
        return self._records[s]

    def _split(self, flat: torch.Tensor, dim: int = 0) -> dict[str, torch.Tensor]:
        """`flat` split by parameter along `dim`, keyed by name (the library's layers)."""
        return dict(zip(self.names, torch.split(flat, self.sizes, dim=dim), strict=True))

    def dynamics(self, s: int) -> dict:
        r = self._record(s)
        pre_m, pre_v = self._split(r["pre"][0].float()), self._split(r["pre"][1].float())
        post_m, post_v = self._split(r["post"][0].float()), self._split(r["post"][1].float())
        hp = r["hp"]
        return {
            "pre": {n: (pre_m[n], pre_v[n]) for n in self.names},
            "post": {n: (post_m[n], post_v[n]) for n in self.names},
            "step": r["t"],
            "lr": hp["lr"],
            "betas": (hp["b1"], hp["b2"]),
            "eps": hp["eps"],
            "weight_decay": hp["wd"],
        }

    def for_steps(self, steps) -> Iterator[tuple[int, object, list[str]]]:
        from dattri_llm.gradient.gradient import Gradient

        for s in steps:
            s = int(s)
            if self._blocks is None or self._blocks[0] != s:
                r = self._record(s)
                theta = self.layout.views(r["theta"])
                flat = per_sample_grads(self.model, theta, r["part"], r["weight"], self.codec)
                ids = [str(int(i)) for i in r["rows"]]
                if not ids:  # a step without rollouts still updates AdamW: one zero row, id −1
                    flat, ids = torch.zeros(1, sum(self.sizes)), ["-1"]
                block = Gradient(
                    representation=dict.fromkeys(self.names, "materialized"),
                    data=self._split(flat, dim=1),
                    layer_types=dict.fromkeys(self.names, "nn.Linear"),
                )
                self._blocks = (s, block, ids)
            yield self._blocks

    def lr(self, s: int) -> float:
        """The logged AdamW learning rate at step s."""
        return float(self._record(s)["hp"]["lr"])


class _Dynamics(Mapping):
    """The source's dynamics as the mapping dattri-llm's sweep reads (`dynamics[step]`)."""

    def __init__(self, source: _Source, steps: list[int]):
        self.source, self.steps = source, steps

    def __getitem__(self, s):
        if s not in self.steps:
            raise KeyError(s)
        return self.source.dynamics(int(s))

    def __iter__(self):
        return iter(self.steps)

    def __len__(self) -> int:
        return len(self.steps)


class _LoggedLR(dict):
    """DVEmb's {step: η}, read from the replay as the sweep reaches each step (DVEmb indexes its
    learning rate with `[step]` where it is a dict; a missing key is looked up)."""

    def __init__(self, source: _Source):
        super().__init__()
        self.source = source

    def __missing__(self, s: int) -> float:
        return self.source.lr(int(s))


class _DattriLLM(Estimator):
    """What the two share: the replayed trajectory, the query gradient, the memory check."""

    levels = ("rollout",)
    # `metagrad`'s: the logged stream, the stored checkpoints with their AdamW state, the clip norm
    # and the measure
    needs = MetaGrad.needs
    # it replays the run and sweeps every step, costing about what the ideal costs: judged where
    # named
    opt_in = True

    def __init__(
        self,
        loss_reduction="mean",
        dtype="float64",
        states="auto",
        window_only=True,
        max_gb=MAX_GB,
        **settings,
    ):
        from bt_core.attribution.estimators.metagrad import check_settings

        if loss_reduction not in LOSS_REDUCTIONS:
            raise ValueError(
                f"loss_reduction={loss_reduction!r} is not one of dattri-llm's: 'mean' (the "
                "logged GRPO loss, a mean over the step's rollouts: Gauss-Newton scale = the "
                "step's row count) or 'sum' (scale 1)"
            )
        check_settings(dtype, states)
        if not float(max_gb) > 0:
            raise ValueError(f"max_gb={max_gb!r} must be a positive number of GiB")
        super().__init__(
            loss_reduction=loss_reduction,
            dtype=dtype,
            states=states,
            window_only=window_only,
            max_gb=float(max_gb),
            **settings,
        )
        self.loss_reduction, self.dtype, self.states = loss_reduction, dtype, states
        self.window_only, self.max_gb = bool(window_only), float(max_gb)
        self.params["dattri_llm"] = importlib.metadata.version("dattri-llm")
        self.figures: dict = {}

    # -- the trajectory ---------------------------------------------------------------------
    def _check_memory(
        self, problem, model, rows_per_step: int, seg_steps: int, cuts: int, dtype
    ) -> float:
        """The sweep's memory estimate in GiB (module docstring); above `max_gb`, Declined."""
        item = torch.empty(0, dtype=dtype).element_size()
        p = sum(t.numel() for t in model.parameters())
        t = problem.rollouts
        length = t.prompts.shape[1] + t.replies.shape[1]
        vocab = model.get_input_embeddings().weight.shape[0]
        need = (
            rows_per_step * p * 4  # one step's per-sample block (float32)
            + 3 * CHUNK * CHUNK * length * vocab * item  # the logits' batched backward
            + CHUNK * p * item * 2  # a chunk's gradients, before and after the cast
            + seg_steps * 5 * p * item  # the segment's states (θ, m, v), gradients, records
            + 10 * p * 4  # the sweep: U (θ, m, v), its transition, the step's terms
            + cuts * 3 * p * item  # the replay's (model, AdamW) kept at every checkpoint
        )
        gb = need / 2**30
        if gb > self.max_gb:
            raise Declined(
                f"{self.name} declines {problem.name}: its sweep would hold about {gb:.2f} GiB "
                f"(p = {p:,} parameters, {rows_per_step} per-sample gradients per step, "
                f"{seg_steps} replayed steps per segment) > max_gb={self.max_gb:g}. Use a "
                "smaller scale, or a larger max_gb where memory allows"
            )
        return gb

    def _stream_source(self, problem):
        """(source, prop_steps, query ∇f(θ_T) flat float32, f(θ_T), the measure, the memory
        estimate in GiB)."""
        from bt_core.attribution.estimators.metagrad import logged_stream
        from bt_core.counterfactual.ladder import _measure_grad, _replay_segment
        from bt_core.counterfactual.metagrad import _replayed, _snapshot, _stored
        from bt_core.counterfactual.replay import step_bounds, step_coef
        from bt_core.training.model import cast_model

        stream, m, dtype, states = logged_stream(problem, self.dtype, self.states)
        T = int(m.step)
        cuts = sorted({int(c) for c in stream.checkpoint_steps if c < T} | {T})
        if T == 0:
            raise Declined(
                f"{self.name} declines {problem.name}: its measure is taken at step 0, before "
                "any update"
            )
        steps = np.asarray(stream.rollouts.step)
        kept = _replayed(stream, cuts, dtype)[0] if states == "replayed" else {}
        model = kept.pop(T)[0] if T in kept else cast_model(stream.model_at(T), dtype)
        nll, grad = _measure_grad(model, m.examples, stream.codec.pad_id)
        per_step = int(np.bincount(steps[steps < T]).max()) if (steps < T).any() else 0
        gb = self._check_memory(problem, model, per_step, int(max(np.diff(cuts))), len(cuts), dtype)

        def load(s: int) -> dict:
            j = int(np.searchsorted(cuts, s, side="right")) - 1
            a, b = cuts[j], cuts[j + 1]
            # a copy: a segment replayed again (a reader out of order) starts from the same state
            start = copy.deepcopy(kept[a]) if a in kept else _stored(stream, a, dtype)
            seg, hp = _replay_segment(stream, a, b, dtype, start)
            after = _snapshot(*start, theta=False)
            bounds = step_bounds(steps, a, b)
            out = {}
            for i, kp in enumerate(seg):
                rows = np.arange(bounds[i], bounds[i + 1])
                part = stream.rollouts.select(rows)
                post = seg[i + 1].state if i + 1 < len(seg) else after
                out[a + i] = {
                    "theta": kp.state.theta,
                    "pre": (kp.state.m, kp.state.v),
                    "post": (post.m, post.v),
                    "t": kp.state.t,
                    "g": kp.g,  # the step's batch gradient (unclipped), as the replay took it
                    "hp": hp,
                    "rows": rows,
                    "part": part,
                    "weight": -step_coef(part),
                }
            return out

        source = _Source(model, stream.codec, load)
        query = torch.cat([g.reshape(-1) for g in grad]).float()
        return source, list(range(T)), query, nll, m, gb

    def _draw_source(self, problem):
        """The draw's one update (module docstring): (source, [S], ∇f(θ'_∅), f(θ'_∅), measure,
        the memory estimate in GiB)."""
        from bt_core.attribution.estimators.metagrad import draw_step
        from bt_core.counterfactual.metagrad import _hyper, _snapshot
        from bt_core.counterfactual.metagrad_draws import empty_step_grad
        from bt_core.training.model import cast_model

        m, s = problem.measure, draw_step(problem)
        model = cast_model(problem.model_at(s), getattr(torch, self.dtype))
        opt = problem.optimizer_at(s, model)
        nll, grad_f, _ = empty_step_grad(model, opt, m.examples, problem.codec.pad_id)
        st, hp = _snapshot(model, opt), _hyper(opt)
        n = len(problem.rollouts)
        gb = self._check_memory(problem, model, n, 1, 0, grad_f.dtype)
        record = {
            "theta": st.theta,
            "pre": (st.m, st.v),
            # the empty step: no gradient, so the moments only decay
            "post": (hp["b1"] * st.m, hp["b2"] * st.v),
            "t": st.t,
            "hp": hp,
            "rows": np.arange(n),
            "part": problem.rollouts,
            "weight": np.full(n, -float(problem.extra["loss_weight"])),
        }
        source = _Source(model, problem.codec, lambda _s: {s: record})
        return source, [s], grad_f.float(), nll, m, gb

    @single_threaded
    def score(self, problem) -> np.ndarray:
        import time

        from bt_core.attribution.estimators.metagrad import in_window, require_measure

        require_measure(problem)
        t0 = time.perf_counter()
        if problem.kind == "draw":
            source, steps, query, nll, m, gb = self._draw_source(problem)
        else:
            source, steps, query, nll, m, gb = self._stream_source(problem)
        scores, ids = self._sweep(source, steps, query)
        rows = np.asarray([int(i) for i in ids], int)
        out = np.zeros(len(problem.rollouts))
        out[rows[rows >= 0]] = np.asarray(scores)[rows >= 0]  # −1: a step's placeholder row
        self.figures[problem.name] = {
            "nll": nll,
            "seconds": time.perf_counter() - t0,
            "memory_gb": round(gb, 4),
            "segments_replayed": source.loads,
        }
        if problem.kind == "draw":
            return out
        return in_window(out, m, self.window_only)

    def _attributor(self, cls):
        import tempfile

        from dattri_llm import AttributionArguments

        # nothing is written there: the sweeps are called directly (module docstring)
        return cls(AttributionArguments(output_dir=tempfile.gettempdir(), use_cpu=True))


@register(origin="adapter:dattri-llm")
class AdamWInfluenceDattri(_DattriLLM):
    """AdamW-influence (Deng et al. 2026) of each rollout on the behavior measure, by dattri-llm's
    query-side sweep over the replayed AdamW trajectory (the ladder's R2 plus a Gauss-Newton
    curvature)."""

    name = "adamw_influence_dattri"

    def _sweep(self, source, steps, query) -> tuple[np.ndarray, list[str]]:
        from dattri_llm import AdamWInfluenceAttributor

        scores, ids, _ = self._attributor(AdamWInfluenceAttributor).sweep_queries(
            source,
            _Dynamics(source, steps),
            query[None],
            layers=source.names,
            prop_steps=steps,
            output_steps=set(steps),
            loss_reduction=self.loss_reduction,
        )
        # dattri-llm's sign is the opposite of the suite's (module docstring)
        return -scores[:, 0].double().numpy(), ids


@register(origin="adapter:dattri-llm")
class DVEmbDattri(_DattriLLM):
    """Data Value Embedding (Wang et al. 2025) of each rollout on the behavior measure, by
    dattri-llm's test-side propagation over the replayed trajectory (an SGD method on an AdamW
    run: close to the ladder's R0)."""

    name = "dvemb_dattri"

    def __init__(self, hessian_mode: str = "full", learning_rate="logged", **kw):
        if hessian_mode not in HESSIAN_MODES:
            raise ValueError(
                f"hessian_mode={hessian_mode!r} is not one of dattri-llm's: 'full' (the layers "
                "coupled) or 'diagonal' (block-diagonal per parameter)"
            )
        if learning_rate != "logged" and not (
            isinstance(learning_rate, (int, float))
            and not isinstance(learning_rate, bool)
            and math.isfinite(learning_rate)
            and learning_rate > 0
        ):
            raise ValueError(
                f"learning_rate={learning_rate!r} must be 'logged' (the run's AdamW learning rate "
                "at every step) or a positive number (DVEmb's SGD η)"
            )
        super().__init__(hessian_mode=hessian_mode, learning_rate=learning_rate, **kw)
        self.hessian_mode, self.learning_rate = hessian_mode, learning_rate

    def _sweep(self, source, steps, query) -> tuple[np.ndarray, list[str]]:
        from dattri_llm import DVEmbAttributor

        lr = _LoggedLR(source) if self.learning_rate == "logged" else float(self.learning_rate)
        w = {n: t.contiguous() for n, t in source._split(query[None], dim=1).items()}
        scores, ids, _ = self._attributor(DVEmbAttributor)._propagate_test_and_score(
            w,
            1,
            source,
            steps,
            set(steps),
            learning_rate=lr,
            loss_reduction=self.loss_reduction,
            hessian_mode=self.hessian_mode,
            verbose=False,
        )
        return scores[:, 0].double().numpy(), ids
