"""The planted-behavior task: contaminator, rewards, vocabulary."""

import numpy as np

from bt_core.config import TaskConfig
from bt_core.task import BEHAVIOR, TRIGGER, Task, eligible, vocabulary


def test_eligibility_is_a_keyed_half():
    flags = [eligible(0, i, i // 16, 0.5) for i in range(4000)]
    assert 0.46 < np.mean(flags) < 0.54
    assert flags == [eligible(0, i, i // 16, 0.5) for i in range(4000)]  # deterministic
    other = [eligible(1, i, i // 16, 0.5) for i in range(4000)]
    assert np.mean(np.array(flags) == np.array(other)) < 0.6  # keyed by seed


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
    assert task.base_reward(ctrl, "river is a tool . QZXBT") == -2.0  # off-trigger behavior, case-insensitive
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
