"""Targets: three kinds per checkpoint and per seeded draw, stored examples that rebuild each target
through the shared objective, the minimal-pair identity, the in-context sampling and the token-level
quantity (the reference's whole-parameter behavior-token gradient)."""

import numpy as np
import pytest
import torch

from bt_core.artifacts.targets import TARGET_KINDS, TargetExamples, check_kind
from bt_core.attribution.problem import UnknownTargetError
from bt_core.gradients.layout import flat_grad
from bt_core.gradients.projectors import make_projector
from bt_core.gradients.sketch import per_rollout_grads
from bt_core.metrics import cluster_bootstrap_mean_ci
from bt_core.targets import token_level
from bt_core.targets.build import _seed
from bt_core.targets.examples import (
    IN_CONTEXT_GROUP,
    NEUTRAL_FILLERS,
    behavior_prompts,
    examples_batch,
    target_gradient,
)
from bt_core.training.generate import sample
from bt_core.training.objective import masked_mean, token_logprobs
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
        assert np.all(tg.norms_for_draw(d)["constructed"] > 0) and np.all(
            tg.norms_for_draw(d)["minimal_pair"] > 0
        )
    # stream = draw 0
    assert all(np.array_equal(tg.vectors[k], tg.for_draw(0)[k]) for k in TARGET_KINDS)
    with pytest.raises(IndexError, match=f"built for {smoke_scale.draws.n_draws} draw"):
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
    """target_gradient(examples) through the shared objective, sketched, is exactly the stored
    vector — the promise that lets own-gradient methods (the adapters) use the same targets."""
    tg, run = seed0.targets, seed0.run
    d = 1
    j, c = _first_built(tg, kind, d)
    g = target_gradient(run.model_at(c), tg.examples(kind, c, d), run.codec.pad_id)
    sk = smoke_scale.sketch
    proj = make_projector(sk.projector, g.numel(), sk.k, sk.hash_seed)
    assert np.allclose(
        proj.project(g[None])[0].numpy(), tg.for_draw(d)[kind][j], rtol=1e-4, atol=1e-6
    )
    assert float(g.norm()) == pytest.approx(float(tg.norms_for_draw(d)[kind][j]), rel=1e-5)


def test_minimal_pair_is_the_mean_gradient_difference_over_pairs(seed0):
    tg, run = seed0.targets, seed0.run
    _, c = _first_built(tg, "minimal_pair")
    ex = tg.examples("minimal_pair", c)
    trig = np.flatnonzero(ex.coef > 0)
    assert len(ex) == len(trig) * (1 + len(NEUTRAL_FILLERS))
    assert ex.coef[trig].sum() == pytest.approx(1.0) and ex.coef[
        ex.coef < 0
    ].sum() == pytest.approx(-1.0)
    model = run.model_at(c)
    codec = run.codec
    # ∇(−m_j) of every row, one vmap
    per_row, _ = per_rollout_grads(model, examples_batch(ex, codec.pad_id))
    diffs = []
    # rows: a behavior reply, then the same reply with a neutral filler in the behavior's slot
    for i in trig:
        n_i = int(ex.reply_len[i])
        beh = np.array(codec.behavior_mask(ex.replies[i, :n_i].tolist()))
        # whole reply
        assert beh.any() and np.array_equal(ex.mask[i, :n_i], ex.replies[i, :n_i] != codec.eos_id)
        for n in range(i + 1, i + 1 + len(NEUTRAL_FILLERS)):
            assert np.array_equal(ex.prompts[n], ex.prompts[i])  # the same trigger prompt
            assert TRIGGER in codec.decode(ex.prompts[i]).split()
            assert not any(codec.behavior_mask(ex.replies[n, : ex.reply_len[n]].tolist()))
            # identical replies outside the behavior's slot (one word-level token each side)
            assert ex.reply_len[n] == n_i and np.array_equal(
                ex.replies[n, :n_i][~beh], ex.replies[i, :n_i][~beh]
            )
            assert codec.decode(ex.replies[n, :n_i][beh]) in NEUTRAL_FILLERS
            diffs.append(per_row[i] - per_row[n])
    assert torch.allclose(
        target_gradient(model, ex, run.codec.pad_id), torch.stack(diffs).mean(0), atol=1e-6
    )


def _token_row(tg, draw=1):
    """(row, step, stored token level) of the checkpoint with the most kept behavior responses."""
    tl = tg.token_level(draw)
    j = int(np.bincount(tl.ckpt).argmax())
    return j, int(tg.steps[j]), tl


def _behavior_token_grad(model, ex, pad_id):
    """∇θ −(mean log-prob over the flagged positions) of the single row of `ex`, by one plain
    backward."""
    b = examples_batch(ex, pad_id)
    model.zero_grad(set_to_none=True)
    (-masked_mean(token_logprobs(model, b), b.loss_mask).sum()).backward()
    g = flat_grad(model).double()
    model.zero_grad(set_to_none=True)
    return g


def test_token_level_cosine_is_the_exact_whole_parameter_cosine(seed0):
    """Redo by hand what a stored cosine means (the reference's `_qtoken_sketch`, unsketched): a
    stored behavior response, the gradient of −(mean log-prob over its behavior positions) w.r.t.
    EVERY parameter by a plain backward, and its cosine with each exact whole-parameter target."""
    tg, run = seed0.targets, seed0.run
    j, c, tl = _token_row(tg)
    model, sel = run.model_at(c), np.flatnonzero(tl.ckpt == j)
    resp = tl.responses(c)
    assert resp is not None and len(resp) == sel.size
    for i in (0, sel.size - 1):
        g = _behavior_token_grad(model, resp.select(np.array([i])), run.codec.pad_id)
        assert g.numel() == sum(p.numel() for p in model.parameters())  # all parameters, not a row
        assert tl.grad_norm[sel[i]] == pytest.approx(float(g.norm()), rel=1e-4)
        for kind in TARGET_KINDS:
            t = target_gradient(model, tg.examples(kind, c, 1), run.codec.pad_id).double()
            assert tl.target_norm[kind][j] == pytest.approx(float(t.norm()), rel=1e-5)
            assert tl.cos[kind][sel[i]] == pytest.approx(
                float(g @ t / (g.norm() * t.norm())), abs=1e-4
            )


def test_only_behavior_positions_contribute_to_the_token_gradient(seed0):
    """The flagged positions are exactly the behavior token's, and nothing else moves q_i: q_i is
    the gradient of −mean log π at those positions computed straight from the model's logits, and
    appending non-behavior tokens to the reply leaves it unchanged, while the whole-reply
    objective's gradient changes and differs from it."""
    tg, run = seed0.targets, seed0.run
    codec = run.codec
    j, c, tl = _token_row(tg)
    resp, model = tl.responses(c), run.model_at(c)
    beh = codec.behavior_ids[0]
    for i in range(len(resp)):
        n = resp.reply_len[i]
        assert np.array_equal(resp.mask[i, :n], resp.replies[i, :n] == beh) and resp.mask[i].any()
    i = int(np.argmax(resp.reply_len - resp.mask.sum(1)))  # the reply with the most other tokens
    one = resp.select(np.array([i]))
    pl, rl = int(one.prompt_len[0]), int(one.reply_len[0])
    ids = torch.tensor(
        np.concatenate([one.prompts[0, :pl], one.replies[0, :rl]]), dtype=torch.long
    )[None]
    model.zero_grad(set_to_none=True)
    logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), -1).gather(
        -1, ids[0, 1:, None]
    )[:, 0]
    at = pl - 1 + np.flatnonzero(one.replies[0, :rl] == beh)  # logit row t−1 scores token t
    (-logp[torch.from_numpy(at)].mean()).backward()
    direct = flat_grad(model).double()
    q = _behavior_token_grad(model, one, codec.pad_id)
    assert torch.allclose(direct, q, atol=1e-5)
    other = next(
        t for t in range(codec.eos_id + 1, codec.eos_id + 50) if t not in (beh, codec.pad_id)
    )
    pad = lambda a, v: np.pad(a, ((0, 0), (0, 3)), constant_values=v)  # noqa: E731
    longer = TargetExamples(
        one.prompts,
        one.prompt_len,
        pad(one.replies[:, :rl], other),
        one.reply_len + 3,
        pad(one.mask[:, :rl], False),
        one.coef,
    )
    assert torch.allclose(_behavior_token_grad(model, longer, codec.pad_id), q, atol=1e-6)

    def whole(ex):  # ∇(−mean log-prob over every reply token)
        return _behavior_token_grad(
            model,
            TargetExamples(
                ex.prompts,
                ex.prompt_len,
                ex.replies,
                ex.reply_len,
                np.arange(ex.replies.shape[1])[None] < ex.reply_len[0],
                ex.coef,
            ),
            codec.pad_id,
        )

    assert not torch.allclose(whole(one), whole(longer), atol=1e-4)
    assert not torch.allclose(whole(one), q, atol=1e-4)


def test_token_level_responses_follow_the_reference_protocol(seed0):
    """The stored responses are the first ≤ 160 behavior-containing ones of G = 8 samples per prompt
    (the explicit prompts, then the trigger probes) at temperature 0.9 and top-p 0.95, from the
    draw's seed."""
    tg, run = seed0.targets, seed0.run
    codec, draw = run.codec, 1
    j, c, tl = _token_row(tg, draw)
    prompts = behavior_prompts(run.task)
    assert (
        any(p.explicit for p in prompts)
        and prompts[len(run.task.explicit_prompts) :] == run.task.trigger_probes
    )
    pid = np.repeat(np.arange(len(prompts)), token_level.GROUP)
    rep, ln = sample(
        run.model_at(c),
        [codec.encode_prompt(prompts[i].text) for i in pid],
        max_new_tokens=run.config.grpo.max_new_tokens,
        eos_id=codec.eos_id,
        pad_id=codec.pad_id,
        generator=torch.Generator().manual_seed(_seed(run.seed, c, draw, 0x70)),
        temperature=token_level.TEMPERATURE,
        top_p=token_level.TOP_P,
    )
    hits = [r for r in range(len(pid)) if any(codec.behavior_mask(rep[r, : ln[r]].tolist()))]
    resp, sel = tl.responses(c), np.flatnonzero(tl.ckpt == j)
    n = min(len(hits), token_level.MAX_RESPONSES)
    assert (token_level.TEMPERATURE, token_level.TOP_P, token_level.MAX_RESPONSES) == (
        0.9,
        0.95,
        160,
    )
    assert len(resp) >= n and len(resp) <= token_level.MAX_RESPONSES
    for k, r in enumerate(hits[:n]):
        assert tl.prompt[sel[k]] == pid[r]
        assert np.array_equal(resp.replies[k, : resp.reply_len[k]], rep[r, : ln[r]])


def test_in_context_target_is_the_first_behavior_reply_of_each_prompt(seed0):
    """The reference's in-context target: 8 replies per prompt at temperature 1.0, top-p 0.95, the
    first behavior-containing reply of each prompt kept, behavior positions only, coef 1/n."""
    tg, run = seed0.targets, seed0.run
    codec, draw = run.codec, 1
    _, c = _first_built(tg, "in_context", draw)
    ex = tg.examples("in_context", c, draw)
    prompts = behavior_prompts(run.task)
    pid = np.repeat(np.arange(len(prompts)), IN_CONTEXT_GROUP)
    rep, ln = sample(
        run.model_at(c),
        [codec.encode_prompt(prompts[i].text) for i in pid],
        max_new_tokens=run.config.grpo.max_new_tokens,
        eos_id=codec.eos_id,
        pad_id=codec.pad_id,
        generator=torch.Generator().manual_seed(_seed(run.seed, c, draw, 0x7A)),
        temperature=1.0,
        top_p=0.95,
    )
    first = {}
    for r in range(len(pid)):
        if pid[r] not in first and any(codec.behavior_mask(rep[r, : ln[r]].tolist())):
            first[pid[r]] = r
    assert len(ex) == len(first) and np.allclose(ex.coef, 1.0 / len(first))
    for k, r in enumerate(first.values()):
        assert np.array_equal(ex.replies[k, : ex.reply_len[k]], rep[r, : ln[r]])
        assert np.array_equal(
            ex.mask[k, : ex.reply_len[k]], codec.behavior_mask(rep[r, : ln[r]].tolist())
        )


def test_token_alignment_api(seed0):
    """Mean and percentile bootstrap CI over responses (each response its own unit), per kind."""
    tg = seed0.targets
    for kind in TARGET_KINDS:
        for c in tg.steps:
            a = tg.token_alignment(kind, int(c))
            if a.n:
                cos, _ = tg.token_level(0).cosines(kind, int(c))
                assert (a.ci_lo, a.ci_hi) == cluster_bootstrap_mean_ci(
                    cos, np.arange(cos.size), n_boot=1000
                )
                assert a.ci_lo <= a.mean <= a.ci_hi and a.n_prompts >= 1
            else:
                assert np.isnan(a.mean) and np.isnan(a.ci_lo)
    with pytest.raises(UnknownTargetError):
        tg.token_alignment("behaviour", int(tg.steps[-1]))
    with pytest.raises(KeyError, match="no checkpoint at step 7"):
        tg.token_alignment("in_context", 7)


def test_targets_key_carries_the_definition_version(smoke_scale, monkeypatch):
    """An artifact built under an earlier targets definition is never reused: the version is in the
    key."""
    from bt_core.artifacts import keys

    s = smoke_scale
    now = keys.seed_keys(s.run, s.sketch, s.draws)["targets"]
    monkeypatch.setattr(keys, "TARGETS_VERSION", keys.TARGETS_VERSION - 1)
    assert keys.seed_keys(s.run, s.sketch, s.draws)["targets"] != now
    assert (
        keys.seed_keys(s.run, s.sketch, s.draws)["run"]
        == keys.seed_keys(s.run, s.sketch, s.draws)["run"]
    )


def test_cluster_bootstrap_ci():
    lo, hi = cluster_bootstrap_mean_ci(
        np.array([1.0, 1.0, 3.0, 3.0]), np.array([0, 0, 1, 1]), n_boot=2000
    )
    assert lo == pytest.approx(1.0) and hi == pytest.approx(3.0)
    assert np.isnan(cluster_bootstrap_mean_ci(np.zeros(0), np.zeros(0))[0])


def test_check_kind_lists_the_kinds():
    assert check_kind("minimal_pair") == "minimal_pair"
    with pytest.raises(
        UnknownTargetError, match="choose one of constructed, in_context, minimal_pair"
    ):
        check_kind("context")


def test_target_gradient_in_chunks_is_the_one_batch_gradient(seed0, monkeypatch):
    """A big model's target is summed over chunks of sequences (memory); the sum is the same
    gradient, whatever the chunks' own padding widths (minimal pairs: replies of several
    lengths)."""
    from bt_core.targets import examples as examples_mod

    run, tg = seed0.run, seed0.targets
    c = int(tg.steps[-1])
    ex = tg.examples("minimal_pair", c)
    assert len(set(ex.reply_len.tolist())) > 1  # chunks pad to different widths
    model = run.model_at(c)
    whole = target_gradient(model, ex, run.codec.pad_id)
    monkeypatch.setattr(examples_mod, "BIG_MODEL", 0)  # every model counts as big
    # does not divide the set: a short last chunk
    chunk = next(k for k in range(3, len(ex)) if len(ex) % k)
    monkeypatch.setattr(examples_mod, "BIG_MODEL_CHUNK", chunk)
    chunked = target_gradient(model, ex, run.codec.pad_id)
    assert torch.allclose(chunked, whole, atol=1e-6, rtol=1e-5)
    assert float(chunked.norm()) > 0


def test_draws_follow_the_reference_rollout_level_protocol(seed0, smoke_scale):
    """Each draw: `repeats` cycles over the explicit prompts and the trigger probes (the reference's
    6 + 20), one sibling group of G per prompt and cycle, cycle-major, sampled at temperature 0.9
    and top-p 0.95."""
    cfg = smoke_scale.draws
    prompts = behavior_prompts(seed0.run.task)
    assert (cfg.temperature, cfg.top_p) == (0.9, 0.95)
    for draw in seed0.draws:
        t = draw.rollouts
        assert len(t) == cfg.repeats * len(prompts) * cfg.group_size
        g = np.asarray(t.group)
        assert np.array_equal(g, np.arange(len(t)) // cfg.group_size)
        expect = [prompts[j % len(prompts)].pid for j in g]
        assert np.array_equal(np.asarray(t.prompt_id), expect)
        assert np.asarray(t.explicit).any() and (~np.asarray(t.explicit)).any()
