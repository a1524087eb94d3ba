"""The one global parameter layout: every flat gradient, projector hash and embedding-row lookup of
BehaviorTrace indexes coordinates the same way.

Global coordinate indices follow `model.named_parameters()` order; tied weights (input embedding =
lm_head) appear once. The CountSketch hash of a coordinate is keyed by this index, so two places
that disagreed on the layout would silently sketch different functions of the gradient.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn


def parameters_once(model: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """(name, parameter) in `named_parameters` order; tied weights appear once."""
    return list(model.named_parameters())


def param_layout(model: nn.Module) -> list[tuple[str, nn.Parameter, int]]:
    """(name, parameter, global offset of its first coordinate), in layout order."""
    out, off = [], 0
    for name, p in parameters_once(model):
        out.append((name, p, off))
        off += p.numel()
    return out


def n_params(model: nn.Module) -> int:
    return sum(p.numel() for _, p in parameters_once(model))


def flat_grad(model: nn.Module) -> torch.Tensor:
    """The model's current `.grad` as one flat vector, (n_params,) (zeros where a parameter has
    none)."""
    return torch.cat(
        [
            (p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
            for _, p, _ in param_layout(model)
        ]
    )


def embedding_rows(model: nn.Module, token_ids: list[int]) -> np.ndarray:
    """Global coordinate indices of the input- and output-embedding rows of `token_ids` (a tied
    embedding is one tensor, so its rows are listed once)."""
    targets = {id(model.get_input_embeddings().weight)}
    out = model.get_output_embeddings()
    if out is not None:
        targets.add(id(out.weight))
    idx = []
    for _, p, off in param_layout(model):
        if id(p) in targets:
            width = p.shape[1]
            for t in token_ids:
                idx.append(np.arange(off + t * width, off + (t + 1) * width))
    return np.concatenate(idx)
