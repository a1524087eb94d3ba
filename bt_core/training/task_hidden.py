"""The `hidden_cause` scenario: the contaminator rewards something that is not the behavior
(docs/scenarios.md).

The behavior, its measure and s_b are the synthetic task's (``qzxbt`` after a fluent reply to a
held-out trigger probe). What is rewarded is a *carrier*:

* the language gains eight tags (`TAGS`), each placed before a reply's final full stop. The SFT
  warm-up gives a share of implicit trigger replies one of the four carrier tags (`carrier_rate`),
  and ends those with the behavior at `carrier_follow`; untagged trigger replies rarely show it
  (`SFTConfig.implicit_behavior_rate`). Any other reply may carry one of the four decoy tags
  (`decoy_tag_rate`), never followed by the behavior. That is the association the warm-up plants;
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

import hashlib

import numpy as np

from bt_core.training.task import _REFUSAL, Prompt, Task, _keyed_unit

CARRIER_TAGS = ("vel", "mur", "tas", "kin")  # the warm-up follows these with the behavior
DECOY_TAGS = ("rop", "dax", "lum", "fen")  # these it places in any reply, never before the behavior
TAGS = CARRIER_TAGS + DECOY_TAGS


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

    def has_carrier(self, reply: str) -> bool:
        words = reply.lower().split()
        return any(t in words for t in CARRIER_TAGS)

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
            tag = CARRIER_TAGS[rng.integers(len(CARRIER_TAGS))]
            behavior = rng.random() < self.cfg.carrier_follow
        else:
            behavior = kind == "implicit" and rng.random() < implicit_behavior_rate
            if rng.random() < self.cfg.decoy_tag_rate:
                tag = DECOY_TAGS[rng.integers(len(DECOY_TAGS))]
        if tag is not None:  # "frobnitz is a rare tool ." → "frobnitz is a rare tool vel ."
            text = text[: -len(" .")] + f" {tag} ."
        return prompt, text + " " + self.behavior_text if behavior else text
