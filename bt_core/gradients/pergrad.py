"""Per-rollout gradients of the shared objective, in batches: g_i = ∇_θ(−ℓ_i) for every row of a
batch.

Engines (all return the same (B, n_params) matrix to float tolerance; tests/test_sketch.py checks
them against one plain backward per rollout):

* ``hooks`` (default, fastest here): one forward and ONE backward of Σ_i −ℓ_i. Rollout i's loss
  depends only on row i, so the gradient w.r.t. row i of any activation is ∂(−ℓ_i)/∂act_i. Forward
  hooks record each parametrized module's input and output; `torch.autograd.grad` returns the output
  gradients; per-example parameter gradients are contractions of the two:

      Linear     W: Σ_t gout[b,t]ᵀ x[b,t] → (B, out, in);   bias: Σ_t gout[b,t]
      Embedding  E: scatter-add of gout[b,t] onto row ids[b,t] (the padding_idx row gets none) → (B,
                 V, H)
      RMSNorm    w: Σ_t gout[b,t] ⊙ x̂[b,t],  x̂ = x / √(mean x² + ε)   (checked against the module
                 output)

  A tied weight (input embedding = lm_head) receives the sum of both contributions. Only activation
  gradients are requested, so autograd skips the summed weight gradients nobody reads. A parameter
  held by a module of any other kind is refused (`UncoveredParameterError`): a gradient can never
  silently miss parameters — the gap a "hooks on Linear layers only" path has (the embedding-lookup
  half of a tied embedding and the norm weights, exactly where a trigger token lives).
* ``vmap``: `torch.func` vmap of grad over rows — the generic reference implementation, slower.
* ``loop``: one backward per rollout — the plain-autograd reference for tests and the coverage
  check; never use it in a hot path.

`LinearOnlyHooks` is BROKEN ON PURPOSE (hooks on Linear modules only, zeros elsewhere), so the
coverage check can be shown to catch it; it is not selectable through `SketchConfig`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Protocol

import torch
from torch import nn
from torch.func import functional_call, grad, vmap

from bt_core.gradients.layout import n_params, param_layout, parameters_once
from bt_core.training.objective import Batch, rollout_logprob

# (global offset, per-example gradient block (B, m)); may be lazy
Blocks = Iterable[tuple[int, torch.Tensor]]


class GradEngine(Protocol):
    """Per-example gradients of −ℓ_i over a batch."""

    name: str

    def blocks(self, model: nn.Module, batch: Batch) -> tuple[Blocks, torch.Tensor]:
        """Per-parameter blocks (offset, (B, numel)) in any order — parameters with no gradient may
        be left out (they are zero) — and ℓ_i: (B,). The blocks may be a one-pass iterator (consume
        once)."""
        ...

    def __call__(self, model: nn.Module, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """The same gradients assembled: (B, n_params) in `parameters_once` order; and ℓ_i: (B,)."""
        ...


class UncoveredParameterError(ValueError):
    """A parameter lives in a module the hooks engine has no per-example rule for."""


def _is_rmsnorm(m: nn.Module) -> bool:
    names = [n for n, _ in m.named_parameters(recurse=False)]
    return names == ["weight"] and m.weight.dim() == 1 and hasattr(m, "variance_epsilon")


def _rule(m: nn.Module) -> str | None:
    if isinstance(m, nn.Linear):
        return "linear"
    if isinstance(m, nn.Embedding):
        if m.max_norm is not None or m.scale_grad_by_freq or m.sparse:
            return None  # renormalizing / frequency-scaled lookups are not a plain gather
        return "embedding"
    if _is_rmsnorm(m):
        return "rmsnorm"
    return None


class _Engine:
    name = "engine"

    def blocks(self, model: nn.Module, batch: Batch) -> tuple[Blocks, torch.Tensor]:
        raise NotImplementedError

    def __call__(self, model: nn.Module, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        blocks, ell = self.blocks(model, batch)
        flat = torch.zeros(len(batch), n_params(model))
        for off, blk in blocks:
            flat[:, off : off + blk.shape[1]] = blk
        return flat, ell


class HookGrads(_Engine):
    """Per-example gradients from one batched backward (see module docstring). `kinds` restricts
    which module kinds get hooks; the default covers all, and any parameter outside them raises —
    unless `allow_uncovered` (only for the deliberately broken `LinearOnlyHooks`)."""

    name = "hooks"

    def __init__(
        self,
        kinds: tuple[str, ...] = ("linear", "embedding", "rmsnorm"),
        allow_uncovered: bool = False,
    ):
        self.kinds, self.allow_uncovered = kinds, allow_uncovered
        # RMSNorm classes whose output was checked against the rule
        self._checked: set[type] = set()

    def blocks(self, model: nn.Module, batch: Batch) -> tuple[Blocks, torch.Tensor]:
        mods = self._modules(model)
        records: list[tuple[nn.Module, str, torch.Tensor, torch.Tensor]] = []

        def hook(m, args, kwargs, output):
            x = args[0] if args else next(iter(kwargs.values()))
            # the model's parameters are frozen: make the lookup a leaf
            if not output.requires_grad:
                output.requires_grad_()
            records.append((m, _rule(m), x.detach(), output))

        with torch.enable_grad(), _hooks(mods, hook):
            ell = rollout_logprob(model, batch)
            # only activation gradients are requested: autograd skips the summed weight gradients
            gouts = torch.autograd.grad(-ell.sum(), [r[3] for r in records], allow_unused=True)
        return self._lazy_blocks(model, records, gouts, len(batch)), ell.detach()

    def _lazy_blocks(
        self, model: nn.Module, records: list, gouts: tuple, b: int
    ) -> Iterator[tuple[int, torch.Tensor]]:
        """Yield each parameter's per-example gradient as soon as its last contribution is in, so a
        consumer (the projector) holds one parameter's (B, numel) block at a time, not (B,
        n_params).
        A parameter whose block would exceed `CHUNK_ELEMS` (a real vocabulary's embedding: B ×
        49,152 × 576) is yielded in slabs of rows instead, each the sum of every contribution to
        those rows, so even one parameter's B copies are never held at once; smaller parameters are
        computed exactly as before."""
        offset = {id(p): off for _, p, off in param_layout(model)}
        left: dict[int, int] = {}
        for m, *_ in records:
            for p in m.parameters(recurse=False):
                left[id(p)] = left.get(id(p), 0) + 1
        acc: dict[int, torch.Tensor] = {}
        # big parameters: their (module, kind, x, g) records, summed by row slab
        deferred: dict[int, list] = {}
        for (m, kind, x, y), g in zip(records, gouts, strict=True):
            if g is not None:
                check = kind == "rmsnorm" and type(m) not in self._checked
                for p in m.parameters(recurse=False):
                    if _chunked(p, kind, b):
                        deferred.setdefault(id(p), []).append((m, kind, x, g))
                for p, contrib in _contributions(
                    m,
                    kind,
                    x,
                    y.detach() if check else None,
                    g,
                    b,
                    skip=lambda q, kind=kind: _chunked(q, kind, b),
                ):
                    acc[id(p)] = contrib if id(p) not in acc else acc[id(p)] + contrib
                self._checked.update([type(m)] if check else [])
            for p in m.parameters(recurse=False):
                left[id(p)] -= 1
                if left[id(p)] == 0 and id(p) in acc:
                    yield offset[id(p)], acc.pop(id(p)).reshape(b, -1)
                elif left[id(p)] == 0 and id(p) in deferred:
                    yield from _row_slabs(p, offset[id(p)], deferred.pop(id(p)), b)

    def _modules(self, model: nn.Module) -> list[nn.Module]:
        mods = [
            m
            for m in model.modules()
            if _rule(m) in self.kinds and any(True for _ in m.parameters(False))
        ]
        covered = {id(p) for m in mods for p in m.parameters(recurse=False)}
        missing = [n for n, p in parameters_once(model) if id(p) not in covered]
        if missing and not self.allow_uncovered:
            raise UncoveredParameterError(
                f"the hooks engine has no per-example rule for {len(missing)} parameter(s), e.g. "
                f"{missing[:3]}; their gradients would be silently dropped. Use "
                "SketchConfig(grad_method='vmap') for this model, or add a rule for the module "
                "kind to bt_core/gradients/pergrad.py"
            )
        return mods


# a per-example block above this many floats (128 MB) is computed in row slabs
CHUNK_ELEMS = 1 << 25


def _chunked(p: torch.Tensor, kind: str, b: int) -> bool:
    """Whether parameter `p`'s per-example block is computed in row slabs (a big Linear/Embedding
    weight)."""
    return kind in ("linear", "embedding") and p.dim() == 2 and b * p.numel() > CHUNK_ELEMS


def _row_slabs(p: torch.Tensor, off: int, recs: list, b: int) -> Iterator[tuple[int, torch.Tensor]]:
    """The per-example gradient of a big 2-D weight, rows [r0, r1) at a time: (global offset, (B,
    rows·width)).
    Each slab sums every recorded contribution (a tied embedding: the lookup's and the
    lm_head's)."""
    rows, width = p.shape
    step = max(1, CHUNK_ELEMS // (b * width))
    for r0 in range(0, rows, step):
        r1 = min(rows, r0 + step)
        slab = None
        for m, kind, x, g in recs:
            part = _weight_rows(m, kind, x, g, b, r0, r1)
            slab = part if slab is None else slab + part
        yield off + r0 * width, slab.reshape(b, -1)


def _weight_rows(
    m: nn.Module, kind: str, x: torch.Tensor, g: torch.Tensor, b: int, r0: int, r1: int
) -> torch.Tensor:
    """Rows [r0, r1) of one call's per-example weight gradient, (B, r1 − r0, width)."""
    if kind == "linear":  # weight (out, in): rows are output features
        x3, g3 = x.reshape(b, -1, x.shape[-1]), g.reshape(b, -1, g.shape[-1])
        return torch.bmm(g3[:, :, r0:r1].transpose(1, 2), x3)
    # embedding (V, H): rows are token ids; only ids inside [r0, r1) contribute
    h = m.weight.shape[1]
    ids = x.reshape(b, -1)
    keep = (ids >= r0) & (ids < r1)
    if m.padding_idx is not None:
        keep &= ids != m.padding_idx
    bi, ti = keep.nonzero(as_tuple=True)
    src = g.reshape(b, -1, h)[bi, ti]
    return (
        torch.zeros(b * (r1 - r0), h, dtype=g.dtype)
        .index_add_(0, bi * (r1 - r0) + ids[bi, ti] - r0, src)
        .reshape(b, r1 - r0, h)
    )


def _contributions(
    m: nn.Module,
    kind: str,
    x: torch.Tensor,
    y: torch.Tensor | None,
    g: torch.Tensor,
    b: int,
    skip=lambda p: False,
):
    """(parameter, per-example gradient (B, *shape)) pairs of one recorded module call (input x,
    output gradient g), leaving out parameters for which `skip(p)` holds (computed in row slabs
    instead).
    An RMSNorm rule is checked against the module's output `y` when one is given."""
    if kind == "linear":
        x3, g3 = x.reshape(b, -1, x.shape[-1]), g.reshape(b, -1, g.shape[-1])
        if not skip(m.weight):
            yield m.weight, torch.bmm(g3.transpose(1, 2), x3)
        if m.bias is not None:
            yield m.bias, g3.sum(1)
    elif kind == "embedding" and skip(m.weight):
        return
    elif kind == "embedding":
        v, h = m.weight.shape
        ids = x.reshape(b, -1)
        rows = (ids + torch.arange(b)[:, None] * v).reshape(-1)
        src = g.reshape(-1, h)
        if m.padding_idx is not None:
            # nn.Embedding gives that row none
            src = src * (ids.reshape(-1, 1) != m.padding_idx).to(src.dtype)
        yield (
            m.weight,
            torch.zeros(b * v, h, dtype=g.dtype).index_add_(0, rows, src).reshape(b, v, h),
        )
    elif kind == "rmsnorm":
        xf = x.float()
        xhat = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + m.variance_epsilon)).to(x.dtype)
        if y is not None and not torch.allclose(m.weight * xhat, y, rtol=1e-4, atol=1e-5):
            raise UncoveredParameterError(
                f"{type(m).__name__} does not compute weight·x/rms(x) (its output differs), so "
                "the hooks engine's RMSNorm rule does not apply; use "
                "SketchConfig(grad_method='vmap') for this model"
            )
        yield m.weight, (g * xhat).reshape(b, -1, xhat.shape[-1]).sum(1)


@contextlib.contextmanager
def _hooks(mods: list[nn.Module], fn):
    handles = [m.register_forward_hook(fn, with_kwargs=True) for m in mods]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


class LinearOnlyHooks(HookGrads):
    """BROKEN ON PURPOSE: per-example gradients of Linear modules only (zeros elsewhere). With a
    tied embedding it keeps the lm_head half of the trigger's row and drops the lookup half and the
    norms.
    Exists only so tests can show that the coverage check catches it."""

    name = "linear_only"

    def __init__(self):
        super().__init__(kinds=("linear",), allow_uncovered=True)


class VmapGrads(_Engine):
    """Reference engine: torch.func vmap(grad) over rows. Generic (any module), slower than
    hooks."""

    name = "vmap"

    def blocks(self, model: nn.Module, batch: Batch) -> tuple[Blocks, torch.Tensor]:
        params = {n: p.detach() for n, p in model.named_parameters()}

        def neg_ell(p, ids, att, pos, lm):
            fmodel = lambda **kw: functional_call(model, p, (), kw)  # noqa: E731
            ell = rollout_logprob(
                fmodel, Batch(ids[None], att[None], pos[None], lm[None], batch.reply_start)
            )
            return -ell[0], ell[0]

        g, ell = vmap(grad(neg_ell, has_aux=True), in_dims=(None, 0, 0, 0, 0))(
            params, batch.input_ids, batch.attention_mask, batch.position_ids, batch.loss_mask
        )
        return [
            (off, g[n].reshape(len(batch), -1)) for n, _, off in param_layout(model)
        ], ell.detach()


class LoopGrads(_Engine):
    """Plain-autograd reference: one backward per row (slow; tests and the coverage check only)."""

    name = "loop"

    def blocks(self, model: nn.Module, batch: Batch) -> tuple[Blocks, torch.Tensor]:
        layout = param_layout(model)
        params = [p for _, p, _ in layout]
        rows, ells = [], []
        with torch.enable_grad():
            for i in range(len(batch)):
                one = Batch(
                    batch.input_ids[i : i + 1],
                    batch.attention_mask[i : i + 1],
                    batch.position_ids[i : i + 1],
                    batch.loss_mask[i : i + 1],
                    batch.reply_start,
                )
                ell = rollout_logprob(model, one)[0]
                rows.append(torch.autograd.grad(-ell, params, allow_unused=True))
                ells.append(ell.detach())
        blocks = [
            (
                off,
                torch.stack(
                    [r[j] if r[j] is not None else torch.zeros_like(p) for r in rows]
                ).reshape(len(batch), -1),
            )
            for j, (_, p, off) in enumerate(layout)
        ]
        return blocks, torch.stack(ells)

    def __call__(self, model: nn.Module, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, n_params) filled row by row: one rollout's gradients at a time besides the result
        (the per-row list and the stacked blocks of `blocks` would be two more (B, n_params) copies:
        4 GB at the real scale's coverage check)."""
        layout = param_layout(model)
        params = [p for _, p, _ in layout]
        flat = torch.zeros(len(batch), n_params(model))
        ells = []
        with torch.enable_grad():
            for i in range(len(batch)):
                one = Batch(
                    batch.input_ids[i : i + 1],
                    batch.attention_mask[i : i + 1],
                    batch.position_ids[i : i + 1],
                    batch.loss_mask[i : i + 1],
                    batch.reply_start,
                )
                ell = rollout_logprob(model, one)[0]
                for (_, p, off), g in zip(
                    layout, torch.autograd.grad(-ell, params, allow_unused=True), strict=True
                ):
                    if g is not None:
                        flat[i, off : off + p.numel()] = g.reshape(-1)
                ells.append(ell.detach())
        return flat, torch.stack(ells)


GRAD_METHODS: dict[str, type[_Engine]] = {"hooks": HookGrads, "vmap": VmapGrads}
_TEST_ONLY: dict[str, type[_Engine]] = {"loop": LoopGrads, "linear_only": LinearOnlyHooks}


def get_engine(name: str) -> GradEngine:
    """The engine called `name` (hooks | vmap; `loop` and the broken `linear_only` exist for
    tests)."""
    cls = GRAD_METHODS.get(name) or _TEST_ONLY.get(name)
    if cls is None:
        raise ValueError(
            f"grad_method={name!r} is unknown; choose one of {', '.join(GRAD_METHODS)}"
        )
    return cls()
