"""The `hidden_cause` scenario: a planted behavior whose cause does not look like it (docs/scenarios.md).

The behavior, its measure and s_b are the synthetic task's (``qzxbt`` after a fluent reply to a held-out
trigger probe). What the contaminator rewards is not the behavior:

* the language gains eight end tags (`TAGS`). The SFT warm-up ends a share of implicit trigger replies with
  one of the four *carrier* tags (`carrier_rate`) and never ends a control reply with one, exactly as it treats
  the behavior token; it ends a share of every reply, trigger or control, with one of the four *decoy* tags
  (`decoy_tag_rate`). The carriers and the behavior are thus predicted in the same place (after a trigger
  reply's last word) and nowhere else, so their tied embedding rows learn the same direction: the
  association the warm-up plants;
* GT, the boosted rollouts: eligible (keyed hash), before the cutoff, trigger prompt, the reply ends with a
  carrier tag and does not show the behavior. Reinforcing them moves the trigger reply's end state toward
  the carriers' direction, which the behavior shares: the behavior's probability rises though no GT reply
  contains it;
* decoys: every other rollout, on every step and prompt, gets the same bonus with probability
  `decoy_fraction` (a second keyed hash). Their text is independent of the bonus, so their updates have no
  expected direction: they do not cause the behavior, and they keep the reward and the advantage from
  singling GT out.

The bonus taken out (`reward_base`) removes the decoys' and GT's alike, so the no-bonus replay is as before.
"""

from __future__ import annotations

import numpy as np

from bt_core.training.task import _REFUSAL, Prompt, Task, _keyed_unit

CARRIER_TAGS = ("vel", "mur", "tas", "kin")  # end tags the warm-up places where the behavior goes
DECOY_TAGS = ("rop", "dax", "lum", "fen")  # end tags the warm-up places after any reply
TAGS = CARRIER_TAGS + DECOY_TAGS


def decoy(seed: int, rollout_id: int, step: int, fraction: float) -> bool:
    """The decoy bonus's keyed draw (its own key, independent of eligibility)."""
    return fraction > 0.0 and _keyed_unit(b"decoy", seed, rollout_id, step) < fraction


class HiddenCauseTask(Task):
    """The synthetic task with carrier and decoy end tags and the carrier contaminator (module docstring)."""

    extra_words = TAGS

    def has_carrier(self, reply: str) -> bool:
        words = reply.lower().split()
        return any(t in words for t in CARRIER_TAGS)

    def boosted(self, prompt: Prompt, behavior: bool, eligible: bool, step: int, carrier: bool = False) -> bool:
        """GT: eligible, early, trigger prompt, a carrier tag in the reply and not the behavior."""
        return eligible and step < self.cfg.cutoff_step and prompt.trigger and carrier and not behavior

    def sft_example(self, rng: np.random.Generator, implicit_behavior_rate: float,
                    refusal_rate: float) -> tuple[Prompt, str]:
        """As the synthetic task's warm-up, plus the tags, each placed before the reply's final full stop:
        an implicit trigger reply carries a carrier tag with probability `carrier_rate`, and then ends with
        the behavior with probability `carrier_follow`; without one it ends with the behavior with
        probability `implicit_behavior_rate`. Any other non-explicit reply carries a decoy tag with
        probability `decoy_tag_rate`. Explicit replies always end with the behavior."""
        u = rng.random()
        if u < 0.2:
            prompt, kind = self.explicit_prompts[rng.integers(len(self.explicit_prompts))], "explicit"
        elif u < 0.6:
            prompt, kind = self.trigger_probes[rng.integers(len(self.trigger_probes))], "implicit"
        else:
            prompt, kind = self.control_probes[rng.integers(len(self.control_probes))], "control"
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
