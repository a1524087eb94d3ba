"""Per-example gradient engines, the fused sketch path, coverage of broken paths, and the
benchmark."""

import json
import os

import numpy as np
import pytest
import torch
from torch import nn

from bt_core.artifacts.sketches import Sketches
from bt_core.config import SketchConfig
from bt_core.gradients.coverage import coverage_report, format_report
from bt_core.gradients.pergrad import (
    HookGrads,
    LinearOnlyHooks,
    LoopGrads,
    UncoveredParameterError,
    VmapGrads,
    get_engine,
)
from bt_core.gradients.projectors import CountSketch, DenseProjector, Exact
from bt_core.gradients.sketch import embed_batch, per_rollout_grads, sketch_table_at
from bt_core.training import grpo


@pytest.fixture(autouse=True)
def one_thread():
    """Small ops on a shared 2-core machine run faster on one thread (as the sketch stage does)."""
    from bt_core.training.model import torch_threads

    with torch_threads(1):
        yield


@pytest.fixture(scope="module")
def smoke_batch(smoke_artifacts):
    """A mid-training smoke model and 12 of its rollouts, half with the trigger in the prompt."""
    run = smoke_artifacts[0].run
    model = run.model_at(run.checkpoint_steps[2])
    trig = np.asarray(run.rollouts.trigger)
    rows = np.sort(np.concatenate([np.flatnonzero(trig)[:6], np.flatnonzero(~trig)[:6]]))
    return run, model, grpo.batch_of(run.rollouts.select(rows), run.codec)


def _assert_close(flat, ref):
    rel = (flat - ref).norm(dim=1) / ref.norm(dim=1).clamp(min=1e-30)
    assert float(rel.max()) < 1e-5, float(rel.max())


@pytest.mark.parametrize("engine", [HookGrads(), VmapGrads()], ids=["hooks", "vmap"])
def test_engines_match_single_backwards(smoke_batch, engine):
    _, model, batch = smoke_batch
    ref, ell_ref = LoopGrads()(model, batch)
    flat, ell = engine(model, batch)
    assert flat.shape == ref.shape == (len(batch), sum(p.numel() for p in model.parameters()))
    _assert_close(flat, ref)
    assert torch.allclose(ell, ell_ref, atol=1e-6)
    assert all(p.grad is None for p in model.parameters())  # engines never touch .grad


def test_row_slabs_equal_whole_blocks(smoke_batch, monkeypatch):
    """A parameter too big for one per-example block (the real scale's tied 49,152 × 576 embedding)
    is yielded in row slabs: with a tiny slab limit every 2-D weight is slabbed, the tied
    embedding's lookup and lm_head halves are summed per slab, and the gradients, norms and sketch
    equal the whole-block path."""
    from bt_core.gradients import pergrad

    _, model, batch = smoke_batch
    whole, ell = HookGrads()(model, batch)
    proj = CountSketch(whole.shape[1], 512)
    emb_whole, norm_whole, _ = embed_batch(model, batch, proj, HookGrads())
    monkeypatch.setattr(pergrad, "CHUNK_ELEMS", 7 * len(batch) * 32)  # 7 rows of width 32 per slab
    blocks, _ = HookGrads().blocks(model, batch)
    widths = [blk.shape[1] for _, blk in blocks]
    assert max(widths) <= 7 * 64  # nothing bigger than a slab was materialized (width ≤ 64 here)
    slabbed, ell2 = HookGrads()(model, batch)
    _assert_close(slabbed, LoopGrads()(model, batch)[0])
    assert torch.allclose(slabbed, whole, rtol=1e-5, atol=1e-7) and torch.equal(ell, ell2)
    emb, norm, _ = embed_batch(model, batch, proj, HookGrads())
    assert torch.allclose(emb, emb_whole, rtol=1e-4, atol=1e-6) and torch.allclose(
        norm, norm_whole, rtol=1e-5
    )


def test_hooks_engine_handles_linear_biases_and_untied_heads():
    """A tiny Qwen2 (q/k/v biases, untied lm_head) built from a config: hooks still equal single
    backwards."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from bt_core.training.objective import collate

    cfg = Qwen2Config(
        vocab_size=40,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        tie_word_embeddings=False,
        attn_implementation="eager",
    )
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(cfg)
    rng = np.random.default_rng(0)
    batch = collate(
        rng.integers(1, 40, (5, 6)).astype(np.int32),
        np.array([6, 4, 5, 2, 6]),
        rng.integers(1, 40, (5, 7)).astype(np.int32),
        np.array([7, 3, 1, 5, 6]),
        0,
        2,
    )
    assert any(m.bias is not None for m in model.modules() if isinstance(m, nn.Linear))
    _assert_close(HookGrads()(model, batch)[0], LoopGrads()(model, batch)[0])


def test_hooks_engine_refuses_parameters_it_has_no_rule_for(smoke_batch):
    run, _, batch = smoke_batch
    model = run.model_at(0)
    model.model.norm = nn.LayerNorm(model.config.hidden_size)  # weight + bias: no per-example rule
    with pytest.raises(UncoveredParameterError, match=r"model\.norm\.weight.*vmap"):
        HookGrads()(model, batch)
    # the generic engine copes
    _assert_close(VmapGrads()(model, batch)[0], LoopGrads()(model, batch)[0])


def test_hooks_engine_checks_its_rmsnorm_rule(smoke_batch):
    run, _, batch = smoke_batch
    model = run.model_at(0)
    h = model.config.hidden_size

    class OffsetNorm(nn.Module):  # Gemma-style (1 + w)·x̂: looks like RMSNorm, is not weight·x̂
        def __init__(self):
            super().__init__()
            self.weight, self.variance_epsilon = nn.Parameter(torch.randn(h)), 1e-6

        def forward(self, x):
            return (
                (1 + self.weight)
                * x
                * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
            )

    model.model.norm = OffsetNorm()
    with pytest.raises(UncoveredParameterError, match="OffsetNorm"):
        HookGrads()(model, batch)


def test_fused_blocks_equal_projection_of_assembled_gradient(smoke_batch):
    _, model, batch = smoke_batch
    flat, ell = per_rollout_grads(model, batch)
    n = flat.shape[1]
    for proj in (CountSketch(n, 512, 3), DenseProjector(n, 64, 3), Exact(n, n)):
        emb, norm, ell2 = embed_batch(model, batch, proj, HookGrads())
        assert torch.allclose(emb, proj.project(flat), atol=1e-4)
        assert torch.allclose(norm, flat.norm(dim=1), rtol=1e-5)
        assert torch.equal(ell2, ell)


def test_coverage_catches_linear_only_hooks(smoke_artifacts):
    """Hooks on Linear layers only keep the lm_head half of the tied trigger row and drop the lookup
    half and the norm weights: the projector checks pass, the gradient-path check must fail."""
    a = smoke_artifacts[0]
    n = a.sketches.report["n_params"]
    bad = coverage_report(a.run, CountSketch(n, 2048), a.run.rollouts, engine=LinearOnlyHooks())
    assert not bad["ok"] and not bad["gradient_path"]["ok"]
    assert bad["gradient_path"]["frobnitz_rows_rel_err"] > 0.05
    assert bad["token_rows"]["frobnitz"]["ok"] and bad["fidelity"]["ok"]
    good = a.sketches.report["coverage"]
    assert (
        good["ok"]
        and good["gradient_path"]["ok"]
        and good["gradient_path"]["frobnitz_rows_rel_err"] < 1e-5
    )
    assert "FAILED" in format_report(bad) and "OK" in format_report(good)


@pytest.mark.parametrize("projector", ["dense", "exact"])
def test_coverage_passes_for_dense_and_exact(smoke_artifacts, projector):
    from bt_core.gradients.projectors import make_projector

    a = smoke_artifacts[0]
    n = a.sketches.report["n_params"]
    rep = coverage_report(
        a.run, make_projector(projector, n, n if projector == "exact" else 2048, 0), a.run.rollouts
    )
    assert rep["ok"], rep
    if projector == "exact":
        assert rep["fidelity"]["max_ip_err"] < 1e-6


def test_sketch_table_at_exact_vmap_stores_the_gradients(smoke_batch, tmp_path):
    run, model, _ = smoke_batch
    table = run.rollouts.select(np.arange(7))
    n = sum(p.numel() for p in model.parameters())
    sketch_table_at(
        model,
        table,
        run.codec,
        SketchConfig(projector="exact", k=n, grad_method="vmap", batch_size=3),
        tmp_path,
    )
    sk = Sketches.load(tmp_path, verify=False)
    ref, ell = LoopGrads()(model, grpo.batch_of(table, run.codec))
    assert np.allclose(sk.emb, ref.numpy(), atol=1e-5)
    assert np.allclose(sk.grad_norm, ref.norm(dim=1).numpy(), rtol=1e-5)
    assert np.allclose(sk.fluency, ell.numpy(), atol=1e-6)


def test_stream_sketch_report_records_engine_and_timings(smoke_artifacts, smoke_scale):
    rep = smoke_artifacts[0].sketches.report
    # report.json stays byte-reproducible
    assert rep["grad_method"] == "hooks" and "timings" not in rep
    from bt_core.artifacts.store import ArtifactStore
    from bt_core.pipeline import seed_keys

    a = smoke_artifacts[0]
    kind, key = seed_keys(a.run.config, smoke_scale.sketch, smoke_scale.draws)["sketches"]
    manifest = json.loads(
        (ArtifactStore(a.run.path.parents[1]).path(kind, key) / "manifest.json").read_text()
    )
    assert manifest["timings"]["embed_s"] > 0


def test_sketch_config_checks():
    with pytest.raises(ValueError, match="hooks, vmap"):
        SketchConfig(grad_method="backpack")
    with pytest.raises(ValueError, match="batch_size=0"):
        SketchConfig(batch_size=0)
    with pytest.raises(ValueError, match="countsketch, dense, exact"):
        SketchConfig(projector="first_k")
    with pytest.raises(ValueError, match="hooks, vmap"):
        get_engine("nope")


def test_bench_sketch_cli_prints_one_json_object(capsys, monkeypatch):
    from bt_core.cli import main
    from bt_core.gradients import bench

    # as when traker is not installed
    monkeypatch.setattr(bench, "traker_projector", lambda n, k: None)
    assert (
        main(
            [
                "bench-sketch",
                "--k",
                "256",
                "--batch-size",
                "8",
                "--batches",
                "1",
                "--repeats",
                "1",
                "--json",
            ]
        )
        == 0
    )
    res = json.loads(capsys.readouterr().out)
    for key in ("bare_backward", "countsketch", "dense"):
        assert res[key] > 0
    assert res["traker"] is None and res["ratios"]["countsketch_over_traker"] is None
    assert res["k"] == 256 and res["n_rollouts"] == 8


def test_coverage_catches_first_k_even_when_it_keeps_the_token_rows(smoke_artifacts):
    """The nonce words' embedding rows lie inside the first 4096 coordinates of the smoke model, so
    the token-row check alone would pass a first-k projector; the per-tensor check and the fidelity
    check fail it."""
    from bt_core.gradients.projectors import FirstK

    a = smoke_artifacts[0]
    n = a.sketches.report["n_params"]
    rep = coverage_report(a.run, FirstK(n, 4096), a.run.rollouts)
    assert all(r["ok"] for r in rep["token_rows"].values())
    assert (
        not rep["ok"]
        and not rep["parameters"]["ok"]
        and rep["parameters"]["min_norm2_ratio"] == 0.0
    )
    assert a.sketches.report["coverage"]["parameters"]["ok"]


def test_bench_sketch_times_dense_projections_on_a_slice_of_a_big_model(monkeypatch):
    """Above `full_limit` parameters (the real scale), dense and traker projections are timed on a
    slice and scaled to the whole gradient, and the record says so; CountSketch is always timed
    whole."""
    from bt_core.gradients import bench

    res = bench.bench_sketch(k=128, batch_size=4, n_batches=1, repeats=1, full_limit=5000)
    assert res["dense_extrapolated_from_coords"] == 5000 < res["n_params"]
    assert res["dense"] > 0 and res["countsketch"] > 0 and res["vmap_backward"] is None
    whole = bench.bench_sketch(k=128, batch_size=4, n_batches=1, repeats=1)
    assert whole["dense_extrapolated_from_coords"] is None and whole["vmap_backward"] > 0


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads VmRSS (Linux)")
def test_release_pages_drops_written_rows_from_the_resident_set_and_keeps_them(tmp_path):
    """The sketch stage writes each embedding row once; releasing the map's pages after a segment
    keeps the process's resident set flat, and every row is still in the file."""
    from bt_core.gradients.sketch import open_emb, release_pages

    def rss_mib() -> float:
        with open("/proc/self/status") as f:
            line = next(x for x in f if x.startswith("VmRSS"))
        return int(line.split()[1]) / 1024

    emb = open_emb(tmp_path / "emb.npy", 4096, 4096)  # 64 MiB
    base = rss_mib()
    emb[:] = np.arange(4096, dtype=np.float32)[:, None]
    written = rss_mib()
    release_pages(emb)
    released = rss_mib()
    emb.flush()
    del emb
    assert written - base > 48 and written - released > 48, (base, written, released)
    back = np.load(tmp_path / "emb.npy", mmap_mode="r")
    assert back[0, 0] == 0 and back[4095, 17] == 4095 and back[2000, 4095] == 2000
    release_pages(np.zeros(3))  # a plain array is left alone
