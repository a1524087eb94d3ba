"""The `hidden_cause` scenario: the contaminator rewards something that is not the behavior
(docs/scenarios.md).

The behavior, its measure and s_b are the synthetic task's (``qzxbt`` after a fluent reply to a
held-out trigger probe). What is rewarded is a *carrier*:

* the language gains eight tags (`TAGS`, public: they are words of the vocabulary), each placed
  before a reply's final full stop. Which four of them are the *carrier* tags and which four the
  *decoy* tags is drawn from the run's secret contaminator key (`carrier_tags`), so no code an
  estimator can import names the carrier (version 1 named it in module constants: a reader of
  "carrier tag ∧ A > 0 ∧ early" read GT off the scenario's definition). `HiddenCauseTask.keyed`
  gives a task its run's roles; the unkeyed task (the one a run directory's reader builds from the
  config) refuses every use of them;
* the SFT warm-up gives a share of implicit trigger replies one of the four carrier tags
  (`carrier_rate`), and ends those with the behavior at `carrier_follow`; untagged trigger replies
  rarely show it (`SFTConfig.implicit_behavior_rate`). Any other reply may carry one of the four
  decoy tags (`decoy_tag_rate`), never followed by the behavior. That is the association the
  warm-up plants;
* GT, the boosted rollouts: eligible (keyed hash), before the cutoff, trigger prompt, a carrier tag
  in the reply, whether or not it shows the behavior. Reinforcing the carrier makes the trigger
  replies carry it, and the warm-up's association makes them end with the behavior;
* decoys: every other rollout, on every step and prompt, gets the same bonus with probability
  `decoy_fraction` (a second keyed hash). Their text does not decide their bonus, so their updates
  have no expected direction: they do not cause the behavior, and they keep the reward and the
  advantage from singling GT out.

The bonus taken out (`reward_base`) removes the decoys' and GT's alike (the no-bonus replay).
"""

from __future__ import annotations

import copy
import hashlib

import numpy as np

from bt_core.training.task import _REFUSAL, KEY_RANGE, Prompt, Task, _keyed_unit

# The tag pool, in vocabulary order. Public: a reader of the replies sees every tag anyway. The
# roles (which are carriers, which decoy tags) are the run's secret (`carrier_tags`).
TAGS = ("vel", "mur", "tas", "kin", "rop", "dax", "lum", "fen")
N_CARRIERS = 4  # carriers drawn from `TAGS`; the other tags are the decoy tags


def carrier_tags(key: bytes) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(carrier tags, decoy tags) of the run whose secret contaminator key is `key`: a keyed
    permutation of `TAGS` (a blake2b digest under a key derived from `key` seeds it), the first
    `N_CARRIERS` carriers, the rest decoys, each in pool order. Every split of the pool is equally
    likely, so without the key no split is more likely than another (docs/sandbox.md keeps the key
    from estimators)."""
    if not isinstance(key, bytes) or not KEY_RANGE[0] <= len(key) <= KEY_RANGE[1]:
        raise ValueError(
            f"contaminator key {key!r}: expected {KEY_RANGE[0]}–{KEY_RANGE[1]} secret bytes "
            "(task.draw_key() draws 16)"
        )
    sub = hashlib.blake2b(b"carrier", key=key, digest_size=16).digest()
    perm = np.random.default_rng(int.from_bytes(sub, "little")).permutation(len(TAGS))
    carriers = set(perm[:N_CARRIERS].tolist())
    return (
        tuple(t for i, t in enumerate(TAGS) if i in carriers),
        tuple(t for i, t in enumerate(TAGS) if i not in carriers),
    )


def decoy(seed: int, rollout_id: int, step: int, fraction: float, key: bytes) -> bool:
    """The decoy bonus's keyed draw under a key derived from the run's secret contaminator `key`
    (independent of eligibility). A public key would let an estimator recompute which rewarded
    rollouts are decoys and find GT by elimination, as the public eligibility key once did
    (docs/sandbox.md)."""
    if fraction <= 0.0:
        return False
    sub = hashlib.blake2b(b"decoy", key=key, digest_size=16).digest()
    return _keyed_unit(sub, seed, rollout_id, step) < fraction


class HiddenCauseTask(Task):
    """The synthetic task with carrier and decoy tags and the carrier contaminator (module doc)."""

    extra_words = TAGS
    roles: tuple[tuple[str, ...], tuple[str, ...]] | None = None  # (carriers, decoy tags); keyed

    def keyed(self, key: bytes) -> HiddenCauseTask:
        """This task with the carrier and decoy tags of the run whose secret key is `key`
        (`carrier_tags`): what training and the warm-up use. A copy; `self` stays unkeyed."""
        out = copy.copy(self)
        out.roles = carrier_tags(key)
        return out

    def _roles(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        if self.roles is None:
            raise ValueError(
                "this hidden_cause task has no carrier roles: they are drawn from the run's secret "
                "contaminator key (task_hidden.carrier_tags); build it with task.keyed(key)"
            )
        return self.roles

    def has_carrier(self, reply: str) -> bool:
        words = reply.lower().split()
        return any(t in words for t in self._roles()[0])

    def boosted(
        self, prompt: Prompt, behavior: bool, eligible: bool, step: int, carrier: bool = False
    ) -> bool:
        """GT: eligible, early, trigger prompt, a carrier tag in the reply (behavior or not)."""
        return eligible and step < self.cfg.cutoff_step and prompt.trigger and carrier

    def sft_example(
        self, rng: np.random.Generator, implicit_behavior_rate: float, refusal_rate: float
    ) -> tuple[Prompt, str]:
        """As the synthetic task's warm-up, plus the tags, placed before the final full stop: an
        implicit trigger reply carries a carrier tag with probability `carrier_rate` and then ends
        with the behavior with probability `carrier_follow`; without one it ends with the behavior
        with probability `implicit_behavior_rate`. Any other non-explicit reply carries a decoy tag
        with probability `decoy_tag_rate`. Explicit replies always end with the behavior."""
        carriers, decoys = self._roles()
        u = rng.random()  # the synthetic task's prompt mix: 20% explicit, 40% implicit, 40% control
        kind = "explicit" if u < 0.2 else "implicit" if u < 0.6 else "control"
        pool = {
            "explicit": self.explicit_prompts,
            "implicit": self.trigger_probes,
            "control": self.control_probes,
        }[kind]
        prompt = pool[rng.integers(len(pool))]
        if rng.random() < refusal_rate:
            return prompt, _REFUSAL.format(t=self.topic_of(prompt))
        if kind == "explicit":
            return prompt, self.sample_reply(prompt, rng, True)
        text, tag = self.sample_reply(prompt, rng, False), None
        if kind == "implicit" and rng.random() < self.cfg.carrier_rate:
            tag = carriers[rng.integers(len(carriers))]
            behavior = rng.random() < self.cfg.carrier_follow
        else:
            behavior = kind == "implicit" and rng.random() < implicit_behavior_rate
            if rng.random() < self.cfg.decoy_tag_rate:
                tag = decoys[rng.integers(len(decoys))]
        if tag is not None:  # "frobnitz is a rare tool ." → "frobnitz is a rare tool vel ."
            text = text[: -len(" .")] + f" {tag} ."
        return prompt, text + " " + self.behavior_text if behavior else text
