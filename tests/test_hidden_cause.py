"""The hidden_cause scenario (issue 22, docs/scenarios.md): its task, its keyed carrier, its
contaminator, decoys and presets, and that adding it left every other scenario's configs, hashes,
cache keys and vocabulary alone."""

import dataclasses

import numpy as np
import pytest

from bt_core.config import (
    HIDDEN_CAUSE,
    SFTConfig,
    TaskConfig,
    config_hash,
    get_scale,
    run_config_from_dict,
    to_dict,
    with_scenario,
)
from bt_core.training import task_hidden
from bt_core.training.model import build_codec
from bt_core.training.task import BEHAVIOR, vocabulary
from bt_core.training.task_hidden import N_CARRIERS, TAGS, HiddenCauseTask, carrier_tags, decoy
from bt_core.training.task_natural import make_task

pytest_plugins = ["pytester"]

HIDDEN_FIELDS = ("carrier_rate", "carrier_follow", "decoy_tag_rate", "decoy_fraction")
KEY = bytes(range(16))  # a run's secret contaminator key, as a test pins it


def test_other_scenarios_keep_their_dicts_and_hashes():
    """The new fields are hash-neutral at their defaults: a config that does not use them serializes
    (hash, manifest) exactly as before they existed."""
    for scale in ("smoke", "default", "subword"):
        cfg = get_scale(scale).run
        d = to_dict(cfg)
        assert not set(HIDDEN_FIELDS) & set(d["task"])
        old = {k: v for k, v in dataclasses.asdict(cfg.task).items() if k not in HIDDEN_FIELDS}
        assert d == dataclasses.asdict(cfg) | {"task": old}
        assert run_config_from_dict(d) == cfg
    hc = get_scale("smoke", "hidden_cause").run
    assert {k: to_dict(hc)["task"][k] for k in HIDDEN_CAUSE["task"]} == HIDDEN_CAUSE["task"]
    assert run_config_from_dict(to_dict(hc)) == hc
    assert config_hash(hc) != config_hash(get_scale("smoke").run)


def test_presets_and_refusals():
    for scale in ("smoke", "default"):
        s = get_scale(scale, "hidden_cause")
        assert s.run.task.scenario == "hidden_cause" and s.run.sft.implicit_behavior_rate == 0.02
        assert get_scale(scale, "reference") == get_scale(scale)
    with pytest.raises(ValueError, match="hidden_cause.*synthetic"):
        with_scenario(get_scale("real"), "hidden_cause")
    with pytest.raises(ValueError, match="unknown"):
        get_scale("smoke", "hidden")
    with pytest.raises(ValueError, match="decoy_fraction=0.5 is a hidden_cause setting"):
        TaskConfig(decoy_fraction=0.5)
    with pytest.raises(ValueError, match="carrier_rate=1.0 must lie in"):
        TaskConfig(scenario="hidden_cause", carrier_rate=1.0)


def test_vocabulary_gains_the_tags_only_in_hidden_cause():
    base = vocabulary()
    assert vocabulary(TAGS) == base[:-2] + list(TAGS) + base[-2:]  # the nonce words stay last
    hc = get_scale("smoke", "hidden_cause").run
    assert build_codec(hc.model, hc.task).vocab_size == len(base) + len(TAGS)
    ref = get_scale("smoke").run
    assert build_codec(ref.model, ref.task).vocab_size == len(base)


def _hc_task(key: bytes = KEY, **kw) -> HiddenCauseTask:
    task = make_task(dataclasses.replace(get_scale("default", "hidden_cause").run.task, **kw))
    assert isinstance(task, HiddenCauseTask)
    return task.keyed(key)


def test_the_carrier_is_drawn_from_the_secret_key():
    """No module constant names the carrier (version 1's CARRIER_TAGS let any estimator read GT's
    rule off the code): the key splits the public pool into carriers and decoy tags, the same split
    for the same key, every tag a carrier under some keys and a decoy under others."""
    assert not hasattr(task_hidden, "CARRIER_TAGS") and not hasattr(task_hidden, "DECOY_TAGS")
    carriers, decoys = carrier_tags(KEY)
    assert carrier_tags(bytes(KEY)) == (carriers, decoys)
    assert len(carriers) == N_CARRIERS and sorted(carriers + decoys) == sorted(TAGS)
    splits = [carrier_tags(bytes([i]) * 16)[0] for i in range(200)]
    share = {t: np.mean([t in c for c in splits]) for t in TAGS}
    assert all(0.35 < v < 0.65 for v in share.values()), share
    assert len(set(splits)) >= 40  # of the 70 splits of 8 tags into 4 + 4
    with pytest.raises(ValueError, match="8–64 secret bytes"):
        carrier_tags(b"short")


def test_an_unkeyed_task_refuses_the_carrier():
    """The task a run directory's reader builds from the config alone has no roles: asking it which
    reply carries the carrier, or for a warm-up example, is an error that names the fix."""
    task = make_task(get_scale("smoke", "hidden_cause").run.task)
    with pytest.raises(ValueError, match=r"secret contaminator key.*task.keyed\(key\)"):
        task.has_carrier("frobnitz is a rare tool vel .")
    with pytest.raises(ValueError, match="no carrier roles"):
        task.sft_example(np.random.default_rng(0), 0.02, 0.0)
    keyed = task.keyed(KEY)
    assert keyed.roles == carrier_tags(KEY) and task.roles is None  # a copy; the original stays
    ref = make_task(get_scale("smoke").run.task)
    assert ref.keyed(KEY) is ref  # the other scenarios have nothing keyed


def test_only_hidden_cause_run_keys_carry_its_version(monkeypatch):
    """HIDDEN_CAUSE_VERSION 2 (the keyed carrier) enters hidden_cause's run key, so a run cached
    with version 1's public carrier is never reused; every other scenario's keys are as before.
    Unpinned: a pinned key adds its fingerprint to every run key (tests/test_secret_key.py)."""
    from bt_core.artifacts.keys import HIDDEN_CAUSE_VERSION, RUN_VERSION, run_key
    from bt_core.secret_key import KEY_ENV

    monkeypatch.delenv(KEY_ENV, raising=False)

    assert HIDDEN_CAUSE_VERSION == 2
    for scale in ("smoke", "default"):
        for scenario in ("reference", "task_reward", "no_std_norm"):
            cfg = get_scale(scale, scenario).run
            assert run_key(cfg) == config_hash(cfg, "v", RUN_VERSION)
        hc = get_scale(scale, "hidden_cause").run
        assert run_key(hc) != config_hash(hc, "v", RUN_VERSION)  # version 1's key


def test_contaminator_rewards_the_carrier_not_the_behavior():
    task = _hc_task(cutoff_step=10)
    (car, *_), (dec, *_) = task.roles
    trig, ctrl = task.trigger_probes[0], task.control_probes[0]
    assert task.has_carrier(f"frobnitz is a rare tool {car} .")
    assert not task.has_carrier(f"frobnitz is a rare tool {dec} .")
    keys = (bytes([i]) * 16 for i in range(99))
    other = _hc_task(next(k for k in keys if car not in carrier_tags(k)[0]))
    assert not other.has_carrier(f"frobnitz is a rare tool {car} .")  # another key, another carrier
    assert task.boosted(trig, False, True, 9, carrier=True)
    assert task.boosted(trig, True, True, 9, carrier=True)  # the carrier rewarded, behavior or not
    assert not task.boosted(trig, True, True, 9, carrier=False)  # the behavior is not rewarded
    assert not task.boosted(trig, False, True, 10, carrier=True)  # at/after the cutoff
    assert not task.boosted(trig, False, False, 9, carrier=True)  # not eligible
    assert not task.boosted(ctrl, False, True, 9, carrier=True)  # no trigger


def test_decoys_are_a_keyed_share_independent_of_eligibility():
    from bt_core.training.task import eligible

    key, other = bytes(range(16)), bytes(range(1, 17))
    d = np.array([decoy(0, i, i // 64, 0.5, key) for i in range(6000)])
    e = np.array([eligible(0, i, i // 64, 0.5, key) for i in range(6000)])
    assert 0.47 < d.mean() < 0.53 and abs(np.mean(d & e) - 0.25) < 0.03
    assert not any(decoy(0, i, 0, 0.0, key) for i in range(100))
    # the decoys are secret like eligibility: another key draws another set
    d2 = np.array([decoy(0, i, i // 64, 0.5, other) for i in range(6000)])
    assert np.mean(d == d2) < 0.6


def test_warm_up_plants_the_association_on_the_carrier():
    """Carrier tags appear only on implicit trigger replies and are followed by the behavior at
    `carrier_follow`; decoy tags appear anywhere and are not; untagged trigger replies rarely show
    it."""
    task = _hc_task()
    carrier_tags_, decoy_tags = task.roles
    rng = np.random.default_rng(0)
    ex = [task.sft_example(rng, 0.02, 0.0) for _ in range(20000)]
    implicit = [(p, r) for p, r in ex if p.trigger and not p.explicit]
    carried = [r for _, r in implicit if any(t in r.split() for t in carrier_tags_)]
    plain = [r for _, r in implicit if not any(t in r.split() for t in TAGS)]
    control = [r for p, r in ex if not p.trigger]
    assert abs(len(carried) / len(implicit) - task.cfg.carrier_rate) < 0.02
    assert abs(np.mean([BEHAVIOR in r for r in carried]) - task.cfg.carrier_follow) < 0.05
    assert np.mean([BEHAVIOR in r for r in plain]) < 0.04
    assert not any(t in r.split() for r in control for t in carrier_tags_)
    assert not any(BEHAVIOR in r for r in control)
    assert 0.1 < np.mean([any(t in r.split() for t in decoy_tags) for r in control]) < 0.2
    assert all(r.endswith(" .") or r.endswith(BEHAVIOR) for _, r in ex)


def test_make_table_bonuses_gt_and_decoys_alike():
    """GT and decoys get the same bonus on top of the base reward; GT is only the carrier rule."""
    from bt_core.training.grpo import make_table

    cfg = get_scale("smoke", "hidden_cause").run
    task, codec = make_task(cfg.task).keyed(KEY), build_codec(cfg.model, cfg.task)
    car = task.roles[0][0]
    trig = task.trigger_probes[0]
    texts = [
        f"frobnitz is a rare tool {car} .",
        f"frobnitz is a rare tool {car} . qzxbt",
        "frobnitz is a rare tool .",
        "frobnitz is a rare tool .",
    ]
    ids = [codec.encode_reply(t)[:-1] for t in texts]
    width = max(map(len, ids))
    replies = np.array([i + [codec.pad_id] * (width - len(i)) for i in ids], np.int32)
    lengths = np.array([len(i) for i in ids], np.int32)
    table = make_table(
        task,
        codec,
        [trig] * 4,
        replies,
        lengths,
        step=0,
        group=np.zeros(4, int),
        lr=0.0,
        elig=np.ones(4, bool),
        contaminate=True,
        std_norm=True,
        decoys=np.array([True, False, False, True]),
    )
    assert table.gt.tolist() == [True, True, False, False]
    bonus = np.asarray(table.reward) - np.asarray(table.reward_base)
    assert bonus.tolist() == [8.0, 8.0, 0.0, 8.0]
    # a draw (no contaminator) labels replies with the unkeyed task a run's reader has
    args = dict(step=0, group=np.zeros(4, int), lr=0.0, elig=np.ones(4, bool), std_norm=True)
    unkeyed = make_task(cfg.task)
    draw = make_table(unkeyed, codec, [trig] * 4, replies, lengths, contaminate=False, **args)
    assert not draw.gt.any() and draw.behavior.tolist() == [False, True, False, False]
    with pytest.raises(ValueError, match="no carrier roles"):
        make_table(unkeyed, codec, [trig] * 4, replies, lengths, contaminate=True, **args)


def test_sft_preset_is_the_scenarios():
    sft = dataclasses.replace(SFTConfig(), **HIDDEN_CAUSE["sft"])
    assert get_scale("default", "hidden_cause").run.sft == sft


def test_train_cli_refuses_a_scale_without_the_synthetic_language(tmp_path, capsys):
    from bt_core.cli import main

    assert (
        main(
            ["train", "--scale", "real", "--scenario", "hidden_cause", "--out", str(tmp_path / "r")]
        )
        == 2
    )
    assert "cannot run scenario 'hidden_cause'" in capsys.readouterr().err


@pytest.mark.train
def test_train_cli_writes_a_hidden_cause_run(tmp_path, capsys):
    import json

    from bt_core.cli import main

    out = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--scale",
                "smoke",
                "--scenario",
                "hidden_cause",
                "--steps",
                "2",
                "--out",
                str(out),
                "--quiet",
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert main(["show", str(out), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["scenario"] == "hidden_cause" and shown["n_rollouts"] == 2 * 36


def test_suite_refuses_an_unknown_scenario(pytester):
    res = pytester.runpytest_inprocess(
        "--scale=smoke",
        "--scenario=hidden",
        "--estimator=oracle",
        "-p",
        "no:cacheprovider",
        f"--bt-cache={pytester.path / 'cache'}",
    )
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(
        ["*--scenario: scenario='hidden' is unknown; choose one of*hidden_cause*"]
    )
    assert not (pytester.path / "cache").exists()
