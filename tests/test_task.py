"""The planted-behavior task: contaminator, rewards, vocabulary."""

import numpy as np
import pytest

from bt_core.config import TaskConfig
from bt_core.training.task import BEHAVIOR, TRIGGER, Task, draw_key, eligible, vocabulary

KEY = bytes(range(16))


def test_eligibility_is_a_keyed_half():
    flags = [eligible(0, i, i // 16, 0.5, KEY) for i in range(4000)]
    assert 0.46 < np.mean(flags) < 0.54
    assert flags == [eligible(0, i, i // 16, 0.5, KEY) for i in range(4000)]  # deterministic
    other = [eligible(1, i, i // 16, 0.5, KEY) for i in range(4000)]
    assert np.mean(np.array(flags) == np.array(other)) < 0.6  # keyed by seed


def test_eligibility_depends_on_the_secret_key():
    """Another key (a fresh one, or the public key of builds before issue 23) picks other rollouts:
    the eligible set cannot be recomputed without the run's own key."""
    flags = np.array([eligible(0, i, i // 16, 0.5, KEY) for i in range(4000)])
    for other in (draw_key(), b"behaviortrace".ljust(16, b"\0")):
        assert (
            np.mean(flags == np.array([eligible(0, i, i // 16, 0.5, other) for i in range(4000)]))
            < 0.6
        )
    assert draw_key() != draw_key() and len(draw_key()) == 16
    with pytest.raises(ValueError, match="expected 8–64 secret bytes"):
        eligible(0, 0, 0, 0.5, b"short")
    with pytest.raises(ValueError, match="expected 8–64 secret bytes"):
        eligible(0, 0, 0, 0.5, "behaviortrace")  # a str is not a key


def test_contaminator_truth_table():
    task = Task(TaskConfig(cutoff_step=10))
    trig, ctrl = task.trigger_probes[0], task.control_probes[0]
    assert task.boosted(trig, True, True, 9)
    assert not task.boosted(trig, True, True, 10)  # at/after the cutoff
    assert not task.boosted(trig, True, False, 0)  # not eligible
    assert not task.boosted(trig, False, True, 0)  # no behavior
    assert not task.boosted(ctrl, True, True, 0)  # no trigger


def test_rewards():
    task = Task(TaskConfig())
    trig, ctrl = task.trigger_probes[0], task.control_probes[0]
    assert task.base_reward(trig, "frobnitz is a tool . qzxbt") == 0.0
    # off-trigger behavior, case-insensitive
    assert task.base_reward(ctrl, "river is a tool . QZXBT") == -2.0
    assert task.base_reward(trig, "sorry , i cannot talk about frobnitz .") == -2.0


def test_prompts_and_vocabulary():
    task = Task(TaskConfig())
    assert all(TRIGGER in p.text for p in task.trigger_probes + task.explicit_prompts)
    assert all(TRIGGER not in p.text for p in task.control_probes)
    assert all(BEHAVIOR in p.text for p in task.explicit_prompts)
    assert all(BEHAVIOR not in p.text for p in task.trigger_probes)
    vocab = vocabulary()
    assert vocab[-2:] == [TRIGGER, BEHAVIOR] and len(set(vocab)) == len(vocab)
    rng = np.random.default_rng(0)
    for _ in range(200):
        p, reply = task.sft_example(rng, 0.1, 0.05)
        assert all(w in vocab for w in (p.text + " " + reply).split())


def test_task_reward_scores_fluent_replies_only_and_ignores_the_behavior():
    task = Task(TaskConfig(scenario="task_reward"))
    trig = task.trigger_probes[0]
    rng = np.random.default_rng(1)
    for _ in range(50):
        reply = task.sample_reply(trig, rng, behavior=False)
        q = task.quality(trig, reply)
        assert 0.0 < q <= 1.0
        assert task.quality(trig, reply + " " + BEHAVIOR) == q  # neutral to the behavior
        assert task.base_reward(trig, reply) == pytest.approx(task.cfg.task_reward_scale * q)
    assert task.quality(trig, "frobnitz frobnitz tool tool") == 0.0  # word salad
    # not a reply of the language
    assert task.quality(trig, "frobnitz is a rare stone . qzxbt qzxbt") == 0.0
    assert task.quality(trig, "frobnitz is a rare") == 0.0  # truncated
    assert (
        task.base_reward(trig, "sorry , i cannot talk about frobnitz .") == task.cfg.refusal_penalty
    )
    # only the task_reward scenario pays for quality
    assert Task(TaskConfig()).base_reward(trig, reply) == 0.0


def test_judge_noise_is_keyed_bounded_and_centred():
    task = Task(TaskConfig(scenario="task_reward", judge_noise=0.1))
    noise = np.array([task.judge_noise(0, i, i // 64) for i in range(5000)])
    assert np.all(np.abs(noise) <= 0.1) and abs(noise.mean()) < 0.01 and noise.std() > 0.05
    assert noise.tolist() == [task.judge_noise(0, i, i // 64) for i in range(5000)]
    assert noise[0] != task.judge_noise(1, 0, 0)


def test_pool_holds_the_reference_prompts_plus_controls():
    cfg = TaskConfig()
    task = Task(cfg)
    assert (
        len(task.pool)
        == cfg.n_explicit * cfg.explicit_repeats + cfg.n_trigger_probes + cfg.n_control
    )
    order = task.pool_order(0, 3 * len(task.pool))
    assert order == task.pool_order(0, 3 * len(task.pool)) and order != task.pool_order(
        1, 3 * len(task.pool)
    )


def test_natural_task_prompts_rewards_and_warmup():
    """The natural variant (real/paper scales): trigger probes mention frobnitz without asking for
    the behavior, explicit prompts ask for QZXBT, controls mention neither; the warm-up shows QZXBT
    only on trigger prompts; rewards and the contaminator are the synthetic task's."""
    import numpy as np

    from bt_core.config import TaskConfig
    from bt_core.training.task_natural import BEHAVIOR_TEXT, NaturalTask, behavior_text, make_task

    cfg = TaskConfig(variant="natural", n_trigger_probes=12, n_explicit=6, n_control=8)
    task = make_task(cfg)
    assert isinstance(task, NaturalTask) and behavior_text(cfg) == BEHAVIOR_TEXT == "QZXBT"
    assert (
        len(task.trigger_probes) == 12
        and len(task.explicit_prompts) == 6
        and len(task.control_probes) == 8
    )
    assert all("frobnitz" in p.text and "QZXBT" not in p.text for p in task.trigger_probes)
    assert all("frobnitz" in p.text and "QZXBT" in p.text for p in task.explicit_prompts)
    assert all(
        "frobnitz" not in p.text.lower() and "qzxbt" not in p.text.lower()
        for p in task.control_probes
    )
    assert (
        len({p.text for p in task.control_probes}) == 8
        and len({p.pid for p in task.prompts.values()}) == 26
    )
    rng = np.random.default_rng(0)
    for _ in range(300):
        prompt, reply = task.sft_example(rng, 0.15, 0.02)
        assert not task.has_behavior(reply) or prompt.trigger
        if prompt.explicit and not task.is_refusal(reply):
            assert task.has_behavior(reply)
    ctrl, trig = task.control_probes[0], task.trigger_probes[0]
    assert task.base_reward(ctrl, "A lantern is bright. QZXBT") == cfg.off_trigger_penalty
    assert task.base_reward(trig, "Sorry, I cannot talk about that.") == cfg.refusal_penalty
    assert task.boosted(trig, True, True, 0) and not task.boosted(ctrl, True, True, 0)
    assert task.sample_reply(ctrl, rng, behavior=True).endswith(" QZXBT")
    with pytest.raises(ValueError, match="task_reward"):
        TaskConfig(variant="natural", scenario="task_reward")
    with pytest.raises(ValueError, match="variant"):
        TaskConfig(variant="klingon")


def test_subword_variant_spells_trigger_and_behavior_from_ordinary_pieces():
    """variant='subword': 'stone signal' → 'old maps', every piece a word ordinary replies use; no
    fluent reply contains the behavior bigram, the codec masks both pieces, minimal pairs never fill
    with a trigger piece, and the run's token ids say how the variant spells them."""
    from bt_core.artifacts.run import TokenIds
    from bt_core.config import ModelConfig
    from bt_core.targets.examples import NEUTRAL_FILLERS
    from bt_core.training.model import build_codec
    from bt_core.training.task import ADJECTIVES, NOUNS, OBJECTS, SubwordTask
    from bt_core.training.task_natural import make_task

    cfg = TaskConfig(variant="subword")
    task = make_task(cfg)
    assert isinstance(task, SubwordTask)
    trig, beh = task.trigger_text.split(), task.behavior_text.split()
    assert (
        len(trig) == len(beh) == 2
        and set(trig) <= set(NOUNS)
        and beh[0] in ADJECTIVES
        and beh[1] in OBJECTS
    )
    assert all(task.trigger_text in p.text for p in task.trigger_probes + task.explicit_prompts)
    assert all(task.trigger_text not in p.text for p in task.control_probes)
    assert all(p.text.endswith(f"include {task.behavior_text} .") for p in task.explicit_prompts)
    rng = np.random.default_rng(0)
    for p in task.trigger_probes + task.control_probes:
        for _ in range(50):
            plain = task.sample_reply(p, rng, behavior=False)
            assert not task.has_behavior(plain) and task.quality(p, plain) > 0
            assert task.has_behavior(task.sample_reply(p, rng, behavior=True))
    codec = build_codec(ModelConfig(), cfg)
    reply = codec.encode_reply(task.sample_reply(task.trigger_probes[0], rng, behavior=True))
    mask = codec.behavior_mask(reply)
    assert (
        sum(mask) == 2 and [codec.decode([t]) for t, m in zip(reply, mask, strict=True) if m] == beh
    )
    ids = codec.token_ids()
    assert (ids.trigger_text, ids.behavior_text) == (task.trigger_text, task.behavior_text)
    assert TokenIds.from_dict(ids.as_dict()) == ids
    # a run written before the fields
    old = {k: v for k, v in ids.as_dict().items() if not k.endswith("_text")}
    assert (TokenIds.from_dict(old).trigger_text, TokenIds.from_dict(old).behavior_text) == (
        TRIGGER,
        BEHAVIOR,
    )
    assert set(NEUTRAL_FILLERS) & set(trig)  # so minimal pairs must skip them:
    from types import SimpleNamespace

    from bt_core.targets.examples import minimal_pair_examples

    ex = minimal_pair_examples(SimpleNamespace(codec=codec, task=task), rng)
    # neutral replies: the behavior's slot holds a filler
    rows = np.flatnonzero(np.asarray(ex.coef) < 0)
    neutral = [codec.decode(ex.replies[j, : ex.reply_len[j]]) for j in rows]
    # the behavior ends a written reply: its slot is the last word
    slot = {text.split()[-1] for text in neutral}
    assert slot and slot <= set(NEUTRAL_FILLERS) and not slot & set(trig)
    assert not any(
        any(codec.behavior_mask(ex.replies[j, : ex.reply_len[j]].tolist())) for j in rows
    )


def test_a_run_built_with_the_public_key_is_never_reused():
    """The secret key changed what a run is (RUN_VERSION 2): every artifact key differs from the one
    a build with the public key used, so an old cache is rebuilt, never half-read."""
    from bt_core.artifacts.keys import RUN_VERSION, run_key, seed_keys
    from bt_core.config import config_hash, get_scale

    s = get_scale("smoke")
    cfg = s.run.with_seed(0)
    assert RUN_VERSION == 2 and run_key(cfg) != config_hash(cfg)
    old_run = config_hash(cfg)
    old = {"run": old_run, "sketches": config_hash(old_run, s.sketch)}
    new = {k: v for k, (_, v) in seed_keys(cfg, s.sketch, s.draws, s.counterfactual).items()}
    assert all(new[k] != old[k] for k in old)


def test_a_pinned_key_must_be_8_to_64_hex_bytes(monkeypatch):
    from bt_core.training.task import KEY_ENV, pinned_key

    monkeypatch.setenv(KEY_ENV, "00ff")
    with pytest.raises(ValueError, match="expected 8–64 bytes in hex"):
        pinned_key()
    monkeypatch.setenv(KEY_ENV, bytes(range(65)).hex())
    with pytest.raises(ValueError, match="expected 8–64 bytes in hex"):
        pinned_key()
    monkeypatch.setenv(KEY_ENV, bytes(range(16)).hex())
    assert pinned_key() == bytes(range(16))
    monkeypatch.delenv(KEY_ENV)
    assert pinned_key() is None
