"""Coverage verification of the gradient embedding (reference pitfall P3), a setup-validity check.

Three checks, all must hold:

1. Provenance of the projector: a gradient supported only on the trigger's and the behavior's
   embedding rows (input and output embeddings) keeps its squared norm through the projector (ratio
   within [0.5, 1.5]; CountSketch gives ≈ 1 ± √(2/k), a first-k projector gives 0 when the rows lie
   past k); and so does a gradient supported on any single parameter tensor (every parameter feeds
   the sketch).
2. Provenance of the gradient path: the per-example gradient engine agrees with one plain backward
   per rollout (`LoopGrads`, no hooks) on sampled real rollouts — half of them with the trigger in
   the prompt — both on the whole gradient and on the trigger's and behavior's embedding rows
   (relative error ≤ `PATH_TOL`). A path with hooks on Linear layers only keeps the lm_head half of
   a tied embedding row and drops the lookup half and the norm weights; it fails here.
3. Fidelity: on those real rollout gradients the projector preserves squared norms and cosines
   within the Johnson–Lindenstrauss tolerance for its k: mean |Δcos| ≤ 3·√(2/k) and median |ratio −
   1| ≤ 3·√(2/k) (CountSketch's inner-product error has standard deviation ≤ √(2/k)·‖a‖‖b‖).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from tabulate import tabulate

from bt_core.gradients.layout import embedding_rows, param_layout
from bt_core.gradients.pergrad import GradEngine, LoopGrads, get_engine
from bt_core.gradients.projectors import Projector

FID_CHUNK = 1 << 22  # columns per chunk of the fidelity check
# sampled rollouts × n_params held by the gradient-path check (2 GB per copy)
COVERAGE_FLOATS = 1 << 29
PATH_TOL = 1e-3  # float32 engines agree to ~1e-6 relative; a missing parameter group gives O(0.1–1)


def token_rows_check(
    proj: Projector, coords: dict[str, np.ndarray], ids: dict[str, int], rng: np.random.Generator
) -> dict:
    """Check 1: a random gradient on each token's rows keeps its squared norm through `proj`."""
    rows = {}
    for word, c in coords.items():
        # the gradient is zero outside [c.min(), c.max()]: project that block alone (a full n_params
        # vector per check costs seconds at 134.5M parameters, and the zeros add nothing)
        lo = int(c.min())
        g = torch.zeros(int(c.max()) + 1 - lo)
        g[torch.from_numpy(c - lo)] = torch.from_numpy(
            rng.standard_normal(c.size).astype(np.float32)
        )
        ratio = float(proj.project_blocks([(lo, g[None])], 1)[0].norm() ** 2 / g.norm() ** 2)
        rows[word] = {
            "token_id": ids[word],
            "coords": [int(c.min()), int(c.max())],
            "norm2_ratio": round(ratio, 4),
            "ok": 0.5 <= ratio <= 1.5,
        }
    return rows


def parameter_check(model, proj: Projector, rng: np.random.Generator) -> dict:
    """Check 1b: a random gradient supported on any single parameter tensor keeps its squared norm
    through `proj` — every parameter feeds the sketch (a first-k projector loses every tensor past
    k)."""
    ratios = {}
    for name, p, off in param_layout(model):
        # supported on this tensor only
        g = torch.from_numpy(rng.standard_normal(p.numel()).astype(np.float32))
        ratios[name] = float(
            proj.project_blocks([(off, g[None])], 1)[0].norm() ** 2 / g.norm() ** 2
        )
    bad = [n for n, r in ratios.items() if not 0.5 <= r <= 1.5]
    return {
        "n_tensors": len(ratios),
        "min_norm2_ratio": round(min(ratios.values()), 4),
        "max_norm2_ratio": round(max(ratios.values()), 4),
        "n_uncovered": len(bad),
        "uncovered": bad[:5],
        "ok": not bad,
    }


def gradient_path_check(
    engine: GradEngine, model, batch, coords: dict[str, np.ndarray]
) -> tuple[dict, torch.Tensor]:
    """Check 2: `engine` against one plain backward per rollout. Returns the report and the engine's
    gradients (B, n_params) for the fidelity check."""
    flat, _ = engine(model, batch)
    ref, _ = LoopGrads()(model, batch)
    # row by row: a (B, n_params) difference would be another full copy (2 GB at the real scale)
    rel = torch.stack(
        [(flat[i] - ref[i]).norm() / ref[i].norm().clamp(min=1e-30) for i in range(len(batch))]
    )
    rel = rel[ref.norm(dim=1) > 0]
    out = {
        "engine": engine.name,
        "n_rollouts": len(batch),
        "max_rel_err": round(float(rel.max()) if rel.numel() else 0.0, 7),
    }
    ok = out["max_rel_err"] <= PATH_TOL
    for word, c in coords.items():
        idx = torch.from_numpy(c)
        d, r = (flat[:, idx] - ref[:, idx]).norm(), ref[:, idx].norm()
        err = float(d / r) if r > 0 else float(d > 0)
        share = float(r**2 / (torch.linalg.vector_norm(ref) ** 2).clamp(min=1e-30))
        out[f"{word}_rows_rel_err"] = round(err, 7)
        out[f"{word}_rows_norm2_share"] = round(share, 5)
        ok = ok and err <= PATH_TOL
    out["ok"] = bool(ok)
    return out, flat


def fidelity(flat: torch.Tensor, proj: Projector) -> dict:
    """Check 3: errors of `proj` on real gradients `flat` (B, n_params) vs exact, and the verdict.
    `ip_err` is |⟨Sa,Sb⟩ − ⟨a,b⟩| / (‖a‖‖b‖) over all pairs i < j."""
    # in column chunks: no float64 or sign-multiplied copy of the whole (B, n_params) matrix is made
    chunks = [(lo, flat[:, lo : lo + FID_CHUNK]) for lo in range(0, flat.shape[1], FID_CHUNK)]
    sk = proj.project_blocks(chunks, flat.shape[0]).double()
    gram = sum(c.double() @ c.double().T for _, c in chunks)
    exact_n2, sk_n2 = torch.diagonal(gram).clone(), (sk**2).sum(1)
    keep = exact_n2 > 0
    ratio_err = (
        float((sk_n2[keep] / exact_n2[keep] - 1).abs().median()) if keep.any() else float("nan")
    )
    g, s, n = gram[keep][:, keep], sk[keep], exact_n2[keep].sqrt()
    iu = np.triu_indices(int(keep.sum()), 1)
    dcos = (g / torch.outer(n, n) - _cos(s)).abs().numpy()[iu]
    ip_err = ((g - s @ s.T).abs() / torch.outer(n, n)).numpy()[iu]
    tol = 3 * math.sqrt(2 / proj.k)
    out = {
        "n_rollouts": int(keep.sum()),
        "median_norm2_rel_err": round(ratio_err, 5),
        "mean_abs_cos_err": round(float(dcos.mean()), 5),
        "max_abs_cos_err": round(float(dcos.max()), 5),
        "mean_ip_err": round(float(ip_err.mean()), 5),
        "max_ip_err": round(float(ip_err.max()), 5),
        "tolerance": round(tol, 5),
    }
    out["ok"] = bool(ratio_err <= tol and out["mean_abs_cos_err"] <= tol)
    return out


def coverage_report(
    run, proj: Projector, table, n_sample: int = 32, seed: int = 0, engine: GradEngine | None = None
) -> dict:
    """All three checks of `proj` and `engine` (default: hooks) on `run`'s model (checkpoint 0)."""
    from bt_core.training import grpo

    engine = engine or get_engine("hooks")
    model = run.model_at(0)
    # the path check holds two (n, n_params) matrices: fewer sampled rollouts for a big model (4 at
    # 134.5M)
    n_sample = min(n_sample, max(4, COVERAGE_FLOATS // sum(p.numel() for p in model.parameters())))
    ids = token_pieces(run.token_ids)
    coords = {w: embedding_rows(model, [t]) for w, t in ids.items()}
    rng = np.random.default_rng(seed)
    rows = token_rows_check(proj, coords, ids, rng)
    params = parameter_check(model, proj, rng)
    part = table.select(_sample(np.asarray(table.trigger), n_sample, rng))
    path, flat = gradient_path_check(engine, model, grpo.batch_of(part, run.codec), coords)
    fid = fidelity(flat, proj)
    return {
        "projector": proj.name,
        "k": proj.k,
        "token_rows": rows,
        "parameters": params,
        "gradient_path": path,
        "fidelity": fid,
        "ok": bool(
            all(r["ok"] for r in rows.values()) and params["ok"] and path["ok"] and fid["ok"]
        ),
    }


def token_pieces(token_ids) -> dict[str, int]:
    """Every token piece of the trigger and the behavior, by name: the word itself when it is one
    token (the default scale's word-level tokenizer), else ``word#i`` for its i-th piece (a BPE
    tokenizer splits them into pieces shared with ordinary words, and each piece's rows must feed
    the sketch)."""
    out = {}
    for word, pieces in (
        (token_ids.trigger_text, token_ids.trigger_ids),
        (token_ids.behavior_text, token_ids.behavior_ids),
    ):
        for i, t in enumerate(pieces):
            out[word if len(pieces) == 1 else f"{word}#{i}"] = int(t)
    return out


def _sample(trigger: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """Up to n row indices, half of them (when available) from rollouts whose prompt has the
    trigger."""
    trig, other = np.flatnonzero(trigger), np.flatnonzero(~trigger)
    a = rng.choice(trig, size=min(len(trig), n // 2), replace=False)
    b = rng.choice(other, size=min(len(other), n - len(a)), replace=False)
    return np.sort(np.concatenate([a, b]))


def format_report(report: dict) -> str:
    """The coverage report as a few plain-text tables (for the CLI and benchmark logs)."""
    head = (
        f"coverage of projector={report['projector']} k={report['k']}: "
        f"{'OK' if report['ok'] else 'FAILED'}"
    )
    tr = report["token_rows"]
    rows = tabulate(
        [[w, r["token_id"], r["coords"], r["norm2_ratio"], r["ok"]] for w, r in tr.items()],
        headers=["token rows", "id", "coords", "‖S g‖²/‖g‖²", "ok"],
    )
    par = tabulate(
        [[k, str(v)] for k, v in report["parameters"].items()], headers=["parameter tensors", ""]
    )
    path = tabulate(
        [[k, str(v)] for k, v in report["gradient_path"].items()], headers=["gradient path", ""]
    )
    fid = tabulate([[k, str(v)] for k, v in report["fidelity"].items()], headers=["fidelity", ""])
    return "\n\n".join([head, rows, par, path, fid])


def _cos(x: torch.Tensor) -> torch.Tensor:
    x = x / x.norm(dim=1, keepdim=True).clamp(min=1e-30)
    return x @ x.T
