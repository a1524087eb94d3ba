"""Targets: three kinds per checkpoint and per seeded draw, stored examples that rebuild each target
through the shared objective, the minimal-pair identity, and the token-level quantity."""

import numpy as np
import pytest
import torch

from bt_core.artifacts.targets import TARGET_KINDS, check_kind
from bt_core.attribution.problem import UnknownTargetError
from bt_core.gradients.layout import embedding_rows, flat_grad
from bt_core.gradients.projectors import make_projector
from bt_core.gradients.sketch import per_rollout_grads
from bt_core.metrics import cluster_bootstrap_mean_ci
from bt_core.targets.build import _seed
from bt_core.targets.examples import NEUTRAL_FILLERS, examples_batch, target_gradient
from bt_core.targets.token_level import REPLIES_PER_PROBE
from bt_core.training.generate import sample
from bt_core.training.objective import collate, rollout_logprob
from bt_core.training.task import TRIGGER


@pytest.fixture(scope="module")
def seed0(smoke_artifacts):
    return smoke_artifacts[0]


def _first_built(tg, kind, draw=0):
    """(row, step) of the first checkpoint where `kind` was built with more than one example."""
    for j, c in enumerate(tg.steps):
        ex = tg.examples(kind, int(c), draw)
        if ex is not None and len(ex) > 1:
            return j, int(c)
    raise AssertionError(f"{kind} was never built")


def test_every_kind_at_every_checkpoint_and_draw(seed0, smoke_scale):
    tg = seed0.targets
    assert tg.kinds == TARGET_KINDS and tg.n_draws == smoke_scale.draws.n_draws
    for d in range(tg.n_draws):
        vec = tg.for_draw(d)
        for kind in TARGET_KINDS:
            assert vec[kind].shape == (len(tg.steps), smoke_scale.sketch.k)
        assert np.all(tg.norms_for_draw(d)["constructed"] > 0) and np.all(tg.norms_for_draw(d)["minimal_pair"] > 0)
    assert all(np.array_equal(tg.vectors[k], tg.for_draw(0)[k]) for k in TARGET_KINDS)  # stream = draw 0
    with pytest.raises(IndexError, match="built for 2 draw"):
        tg.for_draw(tg.n_draws)


def test_draws_resample_in_context_and_minimal_pair_but_not_constructed(seed0):
    tg = seed0.targets
    d0, d1 = tg.for_draw(0), tg.for_draw(1)
    assert np.array_equal(d0["constructed"], d1["constructed"])  # deterministic construction
    assert not np.allclose(d0["in_context"], d1["in_context"])  # sampled with each draw's seed
    assert not np.allclose(d0["minimal_pair"], d1["minimal_pair"])  # replies re-sampled per draw


def test_draw_problems_carry_their_own_draws_targets(smoke_evidence):
    seed = smoke_evidence.seeds[0]
    tg = smoke_evidence.artifacts[seed].targets
    for d in range(tg.n_draws):
        p = smoke_evidence.draw_problem(seed, d)
        assert p.draw == d and np.array_equal(p.targets["in_context"], tg.for_draw(d)["in_context"])
        c = int(p.checkpoint_steps[p.ckpt_index[0]])
        assert len(p.target_examples("in_context", c)) == len(tg.examples("in_context", c, d))
    assert smoke_evidence.stream_problem(seed).draw == 0


@pytest.mark.parametrize("kind", TARGET_KINDS)
def test_stored_examples_rebuild_the_stored_target(seed0, smoke_scale, kind):
    """target_gradient(examples) through the shared objective, sketched, is exactly the stored vector —
    the promise that lets own-gradient methods (the adapters) use the same targets."""
    tg, run = seed0.targets, seed0.run
    d = 1
    j, c = _first_built(tg, kind, d)
    g = target_gradient(run.model_at(c), tg.examples(kind, c, d), run.codec.pad_id)
    sk = smoke_scale.sketch
    proj = make_projector(sk.projector, g.numel(), sk.k, sk.hash_seed)
    assert np.allclose(proj.project(g[None])[0].numpy(), tg.for_draw(d)[kind][j], rtol=1e-4, atol=1e-6)
    assert float(g.norm()) == pytest.approx(float(tg.norms_for_draw(d)[kind][j]), rel=1e-5)


def test_minimal_pair_is_the_mean_gradient_difference_over_pairs(seed0):
    tg, run = seed0.targets, seed0.run
    _, c = _first_built(tg, "minimal_pair")
    ex = tg.examples("minimal_pair", c)
    trig = np.flatnonzero(ex.coef > 0)
    assert len(ex) == len(trig) * (1 + len(NEUTRAL_FILLERS))
    assert ex.coef[trig].sum() == pytest.approx(1.0) and ex.coef[ex.coef < 0].sum() == pytest.approx(-1.0)
    model = run.model_at(c)
    trigger_id = run.codec.tok.convert_tokens_to_ids(TRIGGER)
    per_row, _ = per_rollout_grads(model, examples_batch(ex, run.codec.pad_id))  # ∇(−m_j) of every row, one vmap
    diffs = []
    for i in trig:  # rows: a trigger prompt, then its neutral versions with the same reply
        for n in range(i + 1, i + 1 + len(NEUTRAL_FILLERS)):
            assert trigger_id in ex.prompts[i] and trigger_id not in ex.prompts[n]
            assert np.array_equal(ex.replies[n], ex.replies[i]) and np.array_equal(ex.mask[n], ex.mask[i])
            diffs.append(per_row[i] - per_row[n])
    assert torch.allclose(target_gradient(model, ex, run.codec.pad_id), torch.stack(diffs).mean(0), atol=1e-6)


def test_token_level_cosine_matches_its_definition(seed0):
    """Redo by hand what the stored cosine means: the first behavior reply build_targets sampled at one
    checkpoint and draw, its ∇(−ℓ_i) by a plain backward, restricted to the trigger's embedding row R, and
    its cosine with each target restricted to R."""
    tg, run = seed0.targets, seed0.run
    codec, draw = run.codec, 1
    tl = tg.token_level(draw)
    j = int(np.bincount(tl.ckpt).argmax())
    c = int(tg.steps[j])
    model = run.model_at(c)
    rows = torch.from_numpy(embedding_rows(model, [codec.tok.convert_tokens_to_ids(TRIGGER)]))
    assert np.array_equal(tl.rows, rows.numpy()) and rows.numel() == model.config.hidden_size  # tied: one row
    enc = [codec.encode_prompt(p.text) for p in run.task.trigger_probes for _ in range(REPLIES_PER_PROBE)]
    rep, ln = sample(model, enc, max_new_tokens=run.config.grpo.max_new_tokens, eos_id=codec.eos_id,
                     pad_id=codec.pad_id, generator=torch.Generator().manual_seed(_seed(run.seed, c, draw, 0x70)),
                     temperature=1.0, top_p=1.0)
    i = next(i for i in range(len(enc)) if any(codec.behavior_mask(rep[i, : ln[i]].tolist())))
    b = collate(np.array([enc[i]]), np.array([len(enc[i])]), rep[i: i + 1, : ln[i]], ln[i: i + 1],
                codec.pad_id, codec.eos_id)
    model.zero_grad()
    (-rollout_logprob(model, b).sum()).backward()
    g = flat_grad(model)[rows].double()
    assert tl.probe[tl.ckpt == j][0] == i // REPLIES_PER_PROBE
    assert tl.trigger_norm[tl.ckpt == j][0] == pytest.approx(float(g.norm()), rel=1e-4)
    for kind in TARGET_KINDS:
        t = target_gradient(model, tg.examples(kind, c, draw), codec.pad_id)[rows].double()
        assert tl.target_norm[kind][j] == pytest.approx(float(t.norm()), rel=1e-5)
        assert tl.cos[kind][tl.ckpt == j][0] == pytest.approx(float(g @ t / (g.norm() * t.norm())), abs=1e-4)


def test_token_alignment_api(seed0):
    tg = seed0.targets
    for kind in TARGET_KINDS:
        for c in tg.steps:
            a = tg.token_alignment(kind, int(c))
            if a.n:
                assert a.ci_lo <= a.mean <= a.ci_hi and a.n_probes >= 1
            else:
                assert np.isnan(a.mean) and np.isnan(a.ci_lo)
    with pytest.raises(UnknownTargetError):
        tg.token_alignment("behaviour", int(tg.steps[-1]))
    with pytest.raises(KeyError, match="no checkpoint at step 7"):
        tg.token_alignment("in_context", 7)


def test_cluster_bootstrap_ci():
    lo, hi = cluster_bootstrap_mean_ci(np.array([1.0, 1.0, 3.0, 3.0]), np.array([0, 0, 1, 1]), n_boot=2000)
    assert lo == pytest.approx(1.0) and hi == pytest.approx(3.0)
    assert np.isnan(cluster_bootstrap_mean_ci(np.zeros(0), np.zeros(0))[0])


def test_check_kind_lists_the_kinds():
    assert check_kind("minimal_pair") == "minimal_pair"
    with pytest.raises(UnknownTargetError, match="choose one of constructed, in_context, minimal_pair"):
        check_kind("context")


def test_target_gradient_in_chunks_is_the_one_batch_gradient(seed0, monkeypatch):
    """A big model's target is summed over chunks of sequences (memory); the sum is the same gradient,
    whatever the chunks' own padding widths (minimal pairs: replies of several lengths)."""
    from bt_core.targets import examples as examples_mod

    run, tg = seed0.run, seed0.targets
    c = int(tg.steps[-1])
    ex = tg.examples("minimal_pair", c)
    assert len(set(ex.reply_len.tolist())) > 1  # chunks pad to different widths
    model = run.model_at(c)
    whole = target_gradient(model, ex, run.codec.pad_id)
    monkeypatch.setattr(examples_mod, "BIG_MODEL", 0)  # every model counts as big
    chunk = next(k for k in range(3, len(ex)) if len(ex) % k)  # does not divide the set: a short last chunk
    monkeypatch.setattr(examples_mod, "BIG_MODEL_CHUNK", chunk)
    chunked = target_gradient(model, ex, run.codec.pad_id)
    assert torch.allclose(chunked, whole, atol=1e-6, rtol=1e-5)
    assert float(chunked.norm()) > 0
