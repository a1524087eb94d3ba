"""A run that did not plant the behavior is trained again under a fresh key
(bt_core.training.planting): the rule, the bounded redraw, the pin that forbids it, and a killed
build that keeps its reasons."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bt_core.artifacts.run import contaminator_key
from bt_core.artifacts.store import ArtifactStore
from bt_core.config import SATURATION
from bt_core.secret_key import KEY_ENV
from bt_core.training import planting
from bt_core.training.planting import CONTROL_MAX, S_B_MIN, emerged, planted_run, unplanted
from checklist import emergence

rates = st.floats(0.0, 1.0, allow_nan=False)


@settings(max_examples=200, deadline=None)
@given(rates, rates, st.one_of(st.none(), st.integers(0, 200)), rates)
def test_a_run_planted_the_behavior_iff_it_emerged_and_saturated(s_b, control, sat, peak):
    summary = {
        "s_b_final": s_b,
        "control_rate_final": control,
        "saturation_step": sat,
        "sampled_rate_final": peak,
        "sampled_rate_peak": peak,
    }
    why = unplanted(summary)
    assert (why is None) == (emerged(summary) and sat is not None)
    assert emerged(summary) == (s_b > S_B_MIN and control <= CONTROL_MAX)
    if why is not None and emerged(summary):
        assert f"peak sampled rate {peak:.2f} < {SATURATION}" in why


def test_the_emergence_gate_judges_with_the_one_rule():
    assert emergence.emerged is emerged
    assert (emergence.S_B_MIN, emergence.CONTROL_MAX) == (S_B_MIN, CONTROL_MAX)


class FakeTraining:
    """Trains runs whose summaries come from `outcomes` (True: planted), one per call."""

    def __init__(self, outcomes: list[bool]):
        self.outcomes, self.trained, self.resets = list(outcomes), 0, 0

    def train(self) -> dict:
        self.trained += 1
        return {"gt_size": self.trained}

    def summary(self) -> dict:
        ok = self.outcomes[self.trained - 1]
        return {
            "s_b_final": 1.0 if ok else 0.0,
            "control_rate_final": 0.0,
            "saturation_step": 6 if ok else None,
            "sampled_rate_final": 0.9 if ok else 0.05,
        }

    def reset(self) -> None:
        self.resets += 1

    def run(self, redrawn: list[str] | None = None, may_redraw: bool = True, draws: int = 3):
        return planted_run(
            self.train, self.summary, self.reset, redrawn or [], may_redraw, key_draws=draws
        )


@pytest.mark.parametrize(
    "outcomes, trained, kept_planted",
    [
        ([True], 1, True),
        ([False, True], 2, True),
        ([False, False, True], 3, True),
        ([False, False, False], 3, False),  # kept after the last draw: the gate reports it
    ],
)
def test_an_unplanted_run_is_trained_again_up_to_the_key_draws(outcomes, trained, kept_planted):
    t = FakeTraining(outcomes)
    fields = t.run()
    assert t.trained == trained and t.resets == trained - 1
    assert fields["gt_size"] == trained  # the kept run's own fields
    assert len(fields["redrawn"]) == trained - 1
    assert all("did not emerge" in w for w in fields["redrawn"])
    assert (unplanted(t.summary()) is None) == kept_planted


def test_a_pinned_or_given_key_is_never_redrawn():
    t = FakeTraining([False, True])
    assert t.run(may_redraw=False)["redrawn"] == [] and t.trained == 1


def test_a_resumed_build_counts_the_keys_set_aside_before_it_was_killed():
    # every draw left plants nothing, so the count alone decides where the build stops: one draw
    # was spent before the kill, so two are left (3 in all), and the last is kept unplanted. Code
    # that forgot the spent draw would train three times here
    t = FakeTraining([False, False, False])
    fields = t.run(redrawn=["it did not emerge (before the kill)"])
    assert t.trained == 2 and t.resets == 1
    assert fields["redrawn"][0] == "it did not emerge (before the kill)"
    assert len(fields["redrawn"]) == 2  # keys 1 and 2 set aside; key 3, the limit, kept


def test_the_gate_s_line_says_which_key_draw_a_run_is_on_after_its_figures():
    assert emergence._on_key_draw([]) == ""
    why = [
        "never saturated (peak sampled rate 0.74 < 0.8)",
        "did not emerge (final s_b 0.00 ≤ 0.1)",
    ]
    assert emergence._on_key_draw(why) == f"; on key draw 3 (set aside: {why[0]}; {why[1]})"


@pytest.fixture
def short_cfg(smoke_scale):
    """The smoke run cut to 10 SFT and 3 GRPO steps: what is tested is the redraw, not training."""
    run = smoke_scale.run.with_seed(0)
    g = dataclasses.replace(run.grpo, steps=3, checkpoint_every=3)
    return dataclasses.replace(run, grpo=g, sft=dataclasses.replace(run.sft, steps=10))


@pytest.mark.train
def test_build_run_sets_an_unplanted_key_aside_and_keeps_the_next(short_cfg, tmp_path, monkeypatch):
    """Unpinned: the first key is set aside (here by a rule that rejects it), the run is trained
    from scratch under a fresh key, its manifest says why, and nothing of the first is left."""
    from bt_core import pipeline

    monkeypatch.delenv(KEY_ENV, raising=False)
    keys, real_train = [], pipeline.train_run

    def train(cfg, out, *a, **kw):
        fields = real_train(cfg, out, *a, **kw)
        keys.append(contaminator_key(out))
        return fields

    monkeypatch.setattr(pipeline, "train_run", train)
    # the first key is set aside, the second kept (3 steps plant nothing: the rule is the test's)
    monkeypatch.setattr(
        planting, "unplanted", lambda s: "set aside by the test" if len(keys) == 1 else None
    )
    run = pipeline.build_run(ArtifactStore(tmp_path), short_cfg)
    assert len(keys) == 2 and keys[0] != keys[1]
    assert contaminator_key(run.path) == keys[1]
    assert run.manifest["redrawn"] == ["set aside by the test"]
    assert run.summary["timings"].get("resumed_from_step") is None  # trained from scratch
    # the store verified every file against the manifest, and the work directory is gone
    assert sorted(p.name for p in run.path.parent.iterdir()) == [
        run.path.name,
        run.path.name + ".lock",
    ]


@pytest.mark.train
def test_a_build_killed_after_a_key_was_set_aside_still_says_why(short_cfg, tmp_path, monkeypatch):
    from bt_core import pipeline

    monkeypatch.delenv(KEY_ENV, raising=False)
    calls, real_train = [], pipeline.train_run

    def train(cfg, out, *a, **kw):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt  # killed while training under the second key
        return real_train(cfg, out, *a, **kw)

    monkeypatch.setattr(pipeline, "train_run", train)
    monkeypatch.setattr(
        planting, "unplanted", lambda s: "set aside by the test" if len(calls) == 1 else None
    )
    with pytest.raises(KeyboardInterrupt):
        pipeline.build_run(ArtifactStore(tmp_path), short_cfg)
    run = pipeline.build_run(ArtifactStore(tmp_path), short_cfg)
    assert len(calls) == 3 and run.manifest["redrawn"] == ["set aside by the test"]


@pytest.mark.train
def test_under_a_pinned_key_an_unplanted_run_is_kept(short_cfg, tmp_path, monkeypatch):
    from bt_core import pipeline

    monkeypatch.setenv(KEY_ENV, bytes(range(16)).hex())
    monkeypatch.setattr(planting, "unplanted", lambda s: "set aside by the test")
    run = pipeline.build_run(ArtifactStore(tmp_path), short_cfg)
    assert run.manifest["redrawn"] == [] and contaminator_key(run.path) == bytes(range(16))


@pytest.mark.train
@pytest.mark.parametrize("how", ["given key", "one key draw"])
def test_a_given_key_or_a_single_draw_keeps_an_unplanted_run(short_cfg, tmp_path, monkeypatch, how):
    from bt_core import pipeline

    monkeypatch.delenv(KEY_ENV, raising=False)
    monkeypatch.setattr(planting, "unplanted", lambda s: "set aside by the test")
    given = bytes(range(16, 32))
    kw = {"key": given} if how == "given key" else {"key_draws": 1}
    run = pipeline.build_run(ArtifactStore(tmp_path), short_cfg, **kw)
    assert run.manifest["redrawn"] == []
    if how == "given key":
        assert contaminator_key(run.path) == given


@pytest.mark.train
def test_a_build_killed_while_setting_a_key_aside_does_not_resume_that_key(
    short_cfg, tmp_path, monkeypatch
):
    """Killed between saving the reason and clearing the set-aside run's journal, the next build
    clears it first: it trains a fresh key and counts the set-aside one once."""
    import shutil

    from bt_core import pipeline

    monkeypatch.delenv(KEY_ENV, raising=False)
    keys, real_train, real_rmtree = [], pipeline.train_run, shutil.rmtree

    def train(cfg, out, *a, **kw):
        fields = real_train(cfg, out, *a, **kw)
        keys.append(contaminator_key(out))
        return fields

    killed = []

    def rmtree(path, *a, **kw):
        if str(path).endswith("journal") and not killed:
            killed.append(path)
            raise KeyboardInterrupt  # the reason is saved, the journal not yet cleared
        return real_rmtree(path, *a, **kw)

    monkeypatch.setattr(pipeline, "train_run", train)
    monkeypatch.setattr(pipeline.shutil, "rmtree", rmtree)
    monkeypatch.setattr(
        planting, "unplanted", lambda s: "set aside by the test" if len(keys) == 1 else None
    )
    with pytest.raises(KeyboardInterrupt):
        pipeline.build_run(ArtifactStore(tmp_path), short_cfg)
    assert killed and len(keys) == 1
    run = pipeline.build_run(ArtifactStore(tmp_path), short_cfg)
    assert len(keys) == 2 and keys[1] != keys[0]
    assert contaminator_key(run.path) == keys[1]
    assert run.manifest["redrawn"] == ["set aside by the test"]
