"""Coverage verification of a gradient projector (reference pitfall P3).

Two checks, both must hold:

1. Provenance: a gradient supported only on the trigger's and the behavior's embedding rows (input and
   output embeddings) keeps its squared norm through the projector (ratio within [0.5, 1.5]; CountSketch
   gives ≈ 1, a first-k projector gives 0 when the rows lie past k).
2. Fidelity: on real rollout gradients, the projector preserves squared norms and cosines within the
   Johnson–Lindenstrauss tolerance for its k: mean |Δcos| ≤ 3·√(2/k) and median |ratio − 1| ≤ 3·√(2/k)
   (CountSketch's inner-product error has standard deviation ≤ √(2/k)·‖a‖‖b‖).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from bt_core import task as task_mod
from bt_core.projectors import Projector


def embedding_rows(model, token_ids: list[int]) -> np.ndarray:
    """Global coordinate indices of the input- and output-embedding rows of `token_ids`."""
    from bt_core.sketch import param_layout

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


def coverage_report(run, proj: Projector, table, n_sample: int = 32, seed: int = 0) -> dict:
    """Provenance and fidelity checks of `proj` on `run`'s model (checkpoint 0) and rollouts."""
    from bt_core import grpo
    from bt_core.sketch import per_rollout_grads

    model = run.model_at(0)
    tok = run.codec.tok
    ids = {w: tok.convert_tokens_to_ids(w) for w in (task_mod.TRIGGER, task_mod.BEHAVIOR)}
    rng = np.random.default_rng(seed)
    rows = {}
    for word, t in ids.items():
        coords = embedding_rows(model, [t])
        g = torch.zeros(proj.n_params)
        g[torch.from_numpy(coords)] = torch.from_numpy(rng.standard_normal(coords.size).astype(np.float32))
        ratio = float(proj.project(g[None])[0].norm() ** 2 / g.norm() ** 2)
        rows[word] = {"token_id": int(t), "coords": [int(coords.min()), int(coords.max())],
                      "norm2_ratio": round(ratio, 4), "ok": 0.5 <= ratio <= 1.5}
    pick = rng.choice(len(table), size=min(n_sample, len(table)), replace=False)
    part = table.select(np.sort(pick))
    flat, _ = per_rollout_grads(model, grpo.batch_of(part, run.codec))
    sk = proj.project(flat).double()
    flat = flat.double()
    exact_n2, sk_n2 = (flat ** 2).sum(1), (sk ** 2).sum(1)
    keep = exact_n2 > 0
    ratio_err = float((sk_n2[keep] / exact_n2[keep] - 1).abs().median()) if keep.any() else float("nan")
    cos_e = _cos(flat[keep])
    cos_s = _cos(sk[keep])
    iu = np.triu_indices(int(keep.sum()), 1)
    dcos = (cos_e - cos_s).abs().numpy()[iu]
    tol = 3 * math.sqrt(2 / proj.k)
    fidelity = {"n_rollouts": int(keep.sum()), "median_norm2_rel_err": round(ratio_err, 5),
                "mean_abs_cos_err": round(float(dcos.mean()), 5), "max_abs_cos_err": round(float(dcos.max()), 5),
                "tolerance": round(tol, 5)}
    fidelity["ok"] = bool(ratio_err <= tol and fidelity["mean_abs_cos_err"] <= tol)
    return {"projector": proj.name, "k": proj.k, "token_rows": rows, "fidelity": fidelity,
            "ok": bool(all(r["ok"] for r in rows.values()) and fidelity["ok"])}


def _cos(x: torch.Tensor) -> torch.Tensor:
    x = x / x.norm(dim=1, keepdim=True).clamp(min=1e-30)
    return x @ x.T
