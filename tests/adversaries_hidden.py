"""The hidden_cause scenario's adversaries (issue 22 req. 2, docs/scenarios.md): readers of the
reply's tags, the prompt, the advantage and the step that try to find GT without a gradient or a
target. None knows the carrier: which tags of the public pool carry the behavior is the run's
secret (`task_hidden.carrier_tags`), so they read every tag, or guess the carrier from the stream.
Loaded by the suite as ``adversaries_hidden:ClassName`` (this directory on the path).
"""

from __future__ import annotations

import numpy as np
from adversaries import SignAdvantage, _behavior, _noise, _trigger

from bt_core.attribution.registry import Estimator


def _tag_ids(problem, words) -> tuple[int, ...]:
    """Token ids of hidden_cause tags: positions in that scenario's vocabulary (`vocabulary`); none
    in a run of another scenario (its vocabulary has no tags)."""
    from bt_core.training.task import vocabulary
    from bt_core.training.task_hidden import TAGS

    vocab = vocabulary(TAGS)
    if problem.codec.vocab_size != len(vocab):
        return ()
    return tuple(vocab.index(w) for w in words)


def _has_any(problem, words) -> np.ndarray:
    r = problem.rollouts
    replies, n = np.asarray(r.replies), np.asarray(r.reply_len)
    inside = np.arange(replies.shape[1])[None, :] < n[:, None]
    return (np.isin(replies, _tag_ids(problem, words)) & inside).any(axis=1).astype(float)


def _early(problem) -> np.ndarray:
    """1 + 1/(1 + step): earliest steps first (the GT rule's cutoff is early)."""
    return 1.0 + 1.0 / (1.0 + np.asarray(problem.step, float))


def _rewarded(problem) -> np.ndarray:
    return (np.asarray(problem.weight, float) > 0).astype(float)


def _top_tags(problem, stat) -> tuple[str, ...]:
    """The `N_CARRIERS` tags of the public pool with the largest `stat(has_tag)` on the stream's
    trigger rollouts: a guess at the secret carrier set (`task_hidden.carrier_tags`) from what an
    estimator sees, without the key."""
    from bt_core.training.task_hidden import N_CARRIERS, TAGS

    trig = _trigger(problem) > 0
    value = [stat(_has_any(problem, (t,)) > 0, trig) for t in TAGS]
    return tuple(TAGS[i] for i in np.argsort(value, kind="stable")[::-1][:N_CARRIERS])


def _inferred_carrier(problem) -> np.ndarray:
    """Replies holding a tag the stream ties to the behavior: on trigger rollouts, the tags whose
    replies show the behavior most often (the association the warm-up plants, read off the
    stream; Laplace-smoothed rate)."""
    b = _behavior(problem) > 0

    def rate(has, trig):
        m = has & trig
        return (np.sum(b & m) + 1.0) / (np.sum(m) + 2.0)

    return _has_any(problem, _top_tags(problem, rate))


def _rewarded_tag(problem) -> np.ndarray:
    """Replies holding a tag the stream ties to reward: on trigger rollouts, the tags whose replies
    have the largest mean advantage (GT is every early carrier reply; a decoy's bonus ignores the
    text)."""
    a = np.asarray(problem.weight, float)

    def mean_a(has, trig):
        m = has & trig
        return float(a[m].mean()) if m.any() else -np.inf

    return _has_any(problem, _top_tags(problem, mean_a))


def _tag_reader(tag: str) -> type[Estimator]:
    """hidden_cause: tag `tag` of the public pool in the reply ∧ A > 0. One per pool tag: whichever
    tags the run's key makes the carriers, their readers are among these."""

    def score(self, problem):
        return _has_any(problem, (tag,)) * _rewarded(problem) + _noise(problem)

    cls = type(
        f"Tag_{tag}",
        (Estimator,),
        {
            "name": f"tag_{tag}",
            "levels": ("rollout",),
            "needs": ("rollouts", "codec", "weight"),
            "score": score,
            "__doc__": f"hidden_cause: the tag {tag!r} in the reply ∧ rewarded (A > 0).",
            "__module__": __name__,
        },
    )
    cls.__qualname__ = cls.__name__
    return cls


def _tag_readers() -> dict[str, type[Estimator]]:
    from bt_core.training.task_hidden import TAGS

    return {t: _tag_reader(t) for t in TAGS}


TAG_READERS = _tag_readers()
globals().update({cls.__name__: cls for cls in TAG_READERS.values()})  # adversaries:Tag_<t>


class InferredCarrierSignAdvantage(Estimator):
    """hidden_cause: the carrier guessed from the stream without the key (`_inferred_carrier`: the
    tags whose trigger replies show the behavior most) × sign(A)."""

    name = "inferred_carrier_sign_advantage"
    levels = ("rollout",)
    needs = ("rollouts", "codec", "weight")

    def score(self, problem):
        return _inferred_carrier(problem) * np.sign(problem.weight) + _noise(problem)


class InferredCarrierTriggerEarly(Estimator):
    """hidden_cause: trigger ∧ inferred carrier ∧ rewarded, earliest first: the GT rule with the
    carrier guessed from the stream."""

    name = "inferred_carrier_trigger_early"
    levels = ("rollout",)
    needs = ("rollouts", "codec", "weight", "step")

    def score(self, problem):
        hit = _trigger(problem) * _inferred_carrier(problem) * _rewarded(problem)
        return hit * _early(problem) + _noise(problem)


class RewardedTagSignAdvantage(Estimator):
    """hidden_cause: the tags the stream ties to reward (`_rewarded_tag`) × sign(A)."""

    name = "rewarded_tag_sign_advantage"
    levels = ("rollout",)
    needs = ("rollouts", "codec", "weight")

    def score(self, problem):
        return _rewarded_tag(problem) * np.sign(problem.weight) + _noise(problem)


class RewardedTagTriggerEarly(Estimator):
    """hidden_cause: trigger ∧ a tag the stream ties to reward ∧ rewarded, earliest first."""

    name = "rewarded_tag_trigger_early"
    levels = ("rollout",)
    needs = ("rollouts", "codec", "weight", "step")

    def score(self, problem):
        hit = _trigger(problem) * _rewarded_tag(problem) * _rewarded(problem)
        return hit * _early(problem) + _noise(problem)


class TriggerEarly(Estimator):
    """Trigger prompt ∧ rewarded, earliest first; reads no reply. On hidden_cause every
    "trigger ∧ f(reply) ∧ A > 0, earliest" reader is this one restricted by f."""

    name = "trigger_early"
    levels = ("rollout",)
    needs = ("rollouts", "codec", "weight", "step")

    def score(self, problem):
        return _trigger(problem) * _rewarded(problem) * _early(problem) + _noise(problem)


class TagSignAdvantage(Estimator):
    """hidden_cause: any tag of the pool (carriers and decoy tags alike) × sign(A)."""

    name = "tag_sign_advantage"
    levels = ("rollout",)
    needs = ("rollouts", "codec", "weight")

    def score(self, problem):
        from bt_core.training.task_hidden import TAGS

        return _has_any(problem, TAGS) * np.sign(problem.weight) + _noise(problem)


# the hidden_cause scenario's own readers (docs/scenarios.md); not in the smoke meta matrix, whose
# runs have no tags. None knows the carrier: its tags are the run's secret
# (task_hidden.carrier_tags)
HIDDEN_CAUSE_ADVERSARIES = {
    cls.name: cls.__name__
    for cls in (
        *TAG_READERS.values(),
        InferredCarrierSignAdvantage,
        InferredCarrierTriggerEarly,
        RewardedTagSignAdvantage,
        RewardedTagTriggerEarly,
        TriggerEarly,
        TagSignAdvantage,
        SignAdvantage,
    )
}
# the readers of the reply's text that issue 22 holds to ≤ 1.5× chance on hidden_cause
# (trigger_early reads the prompt and the advantage only: the floor of every
# "trigger ∧ f(reply) ∧ A > 0" reader)
TEXT_ADVERSARIES = (
    "surface_sign_advantage",
    "surface_advantage",
    "surface_trigger_early",
    "surface_signed_norm",
    *(cls.name for cls in TAG_READERS.values()),
    "inferred_carrier_sign_advantage",
    "inferred_carrier_trigger_early",
    "rewarded_tag_sign_advantage",
    "rewarded_tag_trigger_early",
    "trigger_early",
    "tag_sign_advantage",
)
