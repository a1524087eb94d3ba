"""The hidden_cause adversaries (`tests/adversaries_hidden.py`) on a small synthetic stream: each is
loadable by name, reads what it says, and guesses the carrier without the key where the stream
gives it away."""

from types import SimpleNamespace

import adversaries
import adversaries_hidden as ah
import numpy as np
import pytest

from bt_core.artifacts.rollouts import RolloutView
from bt_core.config import get_scale
from bt_core.training.model import build_codec
from bt_core.training.task_hidden import TAGS, carrier_tags
from bt_core.training.task_natural import make_task

KEY = bytes(range(16))


def _pad(rows: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    width = max(map(len, rows))
    arr = np.array([r + [0] * (width - len(r)) for r in rows], np.int32)
    return arr, np.array([len(r) for r in rows], np.int32)


def _stream(advantage_on_carrier: float, scale: str = "smoke", scenario: str = "hidden_cause"):
    """A stream where a trigger reply with a carrier tag shows the behavior 2 times in 3 and a
    decoy tag never; carrier replies get `advantage_on_carrier`, the others ±0.5 alternately."""
    cfg = get_scale(scale, scenario).run
    task, codec = make_task(cfg.task), build_codec(cfg.model, cfg.task)
    carriers, decoys = carrier_tags(KEY)
    prompts, replies, adv, step = [], [], [], []
    for i in range(64):
        tags = carriers if i % 2 == 0 else decoys
        tag = tags[(i // 2) % len(tags)]
        behavior = i % 2 == 0 and i % 6 != 0
        prompt = task.trigger_probes[0] if i < 48 else task.control_probes[0]
        reply = f"{task.topic_of(prompt)} is a rare tool {tag} ." + (" qzxbt" if behavior else "")
        prompts.append(codec.encode_prompt(prompt.text))
        replies.append(codec.encode_reply(reply))
        adv.append(advantage_on_carrier if i % 2 == 0 else (0.5 if i % 4 == 1 else -0.5))
        step.append(i // 16)
    (p, pl), (r, rl) = _pad(prompts), _pad(replies)
    n = len(adv)
    view = RolloutView(
        step=np.array(step, np.int32),
        group=np.arange(n, dtype=np.int32) // 4,
        prompt_id=np.zeros(n, np.int32),
        prompts=p,
        prompt_len=pl,
        replies=r,
        reply_len=rl,
        advantage=np.array(adv, np.float32),
        lr=np.ones(n, np.float32),
    )
    return SimpleNamespace(
        rollouts=view,
        codec=codec,
        weight=np.array(adv, np.float64),
        step=np.array(step),
        seed=0,
        n_units=n,
        level="rollout",
    ), np.arange(n) % 2 == 0


def test_every_hidden_cause_adversary_loads_by_name_and_none_names_the_carrier():
    names = ah.HIDDEN_CAUSE_ADVERSARIES
    assert {f"tag_{t}" for t in TAGS} <= set(names)
    for name, cls in names.items():
        assert getattr(ah, cls).name == name
    known = set(adversaries.ADVERSARIES) | set(names)
    assert set(ah.TEXT_ADVERSARIES) <= known
    assert not hasattr(ah, "CARRIER_TAGS") and not hasattr(adversaries, "CARRIER_TAGS")


def test_tag_readers_read_their_tag_and_a_positive_advantage():
    problem, carried = _stream(1.0)
    car = carrier_tags(KEY)[0][0]
    s = getattr(ah, f"Tag_{car}")().score(problem)
    hit = s > 0.5
    assert hit.any() and carried[hit].all()  # only rows holding that tag, all with A > 0
    assert not (ah.TriggerEarly().score(problem)[48:] > 0.5).any()  # control prompts never


def test_the_carrier_is_inferred_from_the_stream_where_it_shows():
    """Without the key: the tags whose trigger replies show the behavior are the carriers; the tags
    whose replies earn the larger advantage are too, when the advantage favors them."""
    problem, carried = _stream(1.0)
    assert (ah._inferred_carrier(problem) > 0).tolist() == carried.tolist()
    assert (ah._rewarded_tag(problem) > 0).tolist() == carried.tolist()
    problem, _ = _stream(-1.0)  # carriers unrewarded: the reward points at the decoy tags
    assert not (ah._rewarded_tag(problem)[carried] > 0).any()


def test_tag_readers_find_nothing_in_a_run_without_tags():
    problem, _ = _stream(1.0)
    ref = get_scale("smoke").run
    problem.codec = build_codec(ref.model, ref.task)  # another vocabulary: no tag ids
    for cls in ("Tag_vel", "InferredCarrierSignAdvantage", "RewardedTagTriggerEarly"):
        assert np.abs(getattr(ah, cls)().score(problem)).max() < 1e-5


@pytest.mark.parametrize("name", ["inferred_carrier_trigger_early", "rewarded_tag_trigger_early"])
def test_trigger_early_readers_rank_early_rows_first(name):
    problem, carried = _stream(1.0)
    s = getattr(ah, ah.HIDDEN_CAUSE_ADVERSARIES[name])().score(problem)
    top = np.argsort(-s)[:4]
    assert carried[top].all() and (problem.step[top] == 0).all()
