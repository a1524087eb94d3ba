"""Cache keys of every artifact: each key hashes its own config and the key of what it is built
from, so a change anywhere upstream rebuilds everything downstream and nothing from another config
is reused."""

from __future__ import annotations

from bt_core.config import CounterfactualConfig, DrawConfig, RunConfig, SketchConfig, config_hash
from bt_core.secret_key import pin_fingerprint

# The targets stage's definition version (token level and the in-context target), in its key: a
# targets artifact built under an earlier definition is never reused. 2: the reference's
# whole-parameter behavior-token gradient and its in-context sampling
# (`bt_core.targets.token_level`).
# 3: also the reference's minimal pairs (behavior vs neutral word in the reply's slot)
TARGETS_VERSION = 3
# The draws' protocol version, in their key: 2 is the reference's rollout-level protocol (explicit
# prompts and trigger probes, cycle-major); a draw sampled under an earlier protocol is never
# reused.
# 3: each sibling's one-step effect on the behavior measure (the causal label, effect.npy)
DRAWS_VERSION = 3
# The run's definition version, in its key (and so in every key downstream): 2 draws the
# contaminator's eligibility key secretly at build time and stores it with the labels (issue 23); a
# run built with the public key is never reused, nor anything built from it.
RUN_VERSION = 2
# The hidden_cause scenario's definition version, in its runs' keys only (every other scenario's
# keys are unchanged): 2 draws the carrier and decoy tags from the run's secret contaminator key
# (`task_hidden.carrier_tags`); a run built with the public carrier tags of version 1 is never
# reused, nor anything built from it.
HIDDEN_CAUSE_VERSION = 2
# The sketch stage's definition version, in the sketches' key: 2 accumulates each rollout's exact
# gradient norm in float64 over its float32 coordinates, in the projector's one pass
# (`bt_core.gradients.scatter`); version 1 summed per-parameter float32 norms. The embeddings are
# the same bits; the norms differ in the last float32 digits, so a version-1 sketch is never reused.
SKETCH_VERSION = 2
# The control run's definition version (`control_key`): 1 is the run's config with the bonus at 0,
# trained with the run's own contaminator key on its own on-policy samples. Starting it from the
# run's step-0 checkpoint instead of repeating the SFT gives the same bytes (a test compares them),
# so that saving kept version 1.
CONTROL_VERSION = 1


def run_key(cfg: RunConfig) -> str:
    """The run's config and definition version (and hidden_cause's, on that scenario only) and, when
    `$BEHAVIORTRACE_CONTAMINATOR_KEY` pins the contaminator key, that key's fingerprint
    (`bt_core.secret_key`): a run built under one pin is never reused under another. An unpinned
    build's key is drawn at build time and kept with it."""
    parts: tuple = ("v", RUN_VERSION)
    if cfg.task.scenario == "hidden_cause":
        parts += ("hidden_cause", HIDDEN_CAUSE_VERSION)
    pin = pin_fingerprint()
    if pin is not None:
        parts += ("pin", pin)
    return config_hash(cfg, *parts)


def control_key(cfg: RunConfig) -> str:
    """The control run of the run `cfg` (`RunConfig.without_bonus`, trained with that run's secret
    key): keyed by the run's own key, so it follows the run it controls. Under the reference
    scenario the key changes nothing once the bonus is 0 (eligibility only gates the bonus); under
    hidden_cause the key draws the carrier tags of the warm-up, so the control must use the
    run's."""
    return config_hash(run_key(cfg), "control", CONTROL_VERSION)


def sketch_key(cfg: RunConfig, sketch: SketchConfig) -> str:
    return config_hash(run_key(cfg), sketch, "sketch", SKETCH_VERSION)


def replay_key(run_k: str, identity: dict, measure: dict) -> str:
    """One counterfactual replay: the run, the subset's identity (mode, sha256 of the sorted removed
    rows, measurement step) and the measure's config — a different subset never reuses another's
    replay."""
    return config_hash(run_k, "replay", identity, measure)


def replay_set_key(cfg: RunConfig, cf: CounterfactualConfig) -> str:
    """The index of one seed's replays (the plan is a function of the run and `cf`)."""
    return config_hash(run_key(cfg), "replays", cf)


def targets_key(rk: str, sketch: SketchConfig, draws: DrawConfig) -> str:
    """One target set per draw; the definition's version is hashed in (`TARGETS_VERSION`)."""
    return config_hash(rk, sketch, "targets", draws.n_draws, "v", TARGETS_VERSION)


def draw_measure(cf: CounterfactualConfig | None) -> dict:
    """The behavior measure a draw's causal label is computed with: the counterfactual items' own
    (`cf`'s measure fields; the default config's when a session builds no replays)."""
    c = cf if cf is not None else CounterfactualConfig()
    return {"n_probes": c.n_probes, "replies_per_probe": c.replies_per_probe}


def draw_key(
    rk: str, sketch: SketchConfig, draws: DrawConfig, draw: int, cf: CounterfactualConfig | None
) -> str:
    """One generation draw: the run, the sketch, the draw protocol, its index and the measure of its
    causal label (`draw_measure`)."""
    return config_hash(rk, sketch, draws, draw, "v", DRAWS_VERSION, draw_measure(cf))


def seed_keys(
    run_cfg: RunConfig,
    sketch: SketchConfig,
    draws: DrawConfig,
    counterfactual: CounterfactualConfig | None = None,
) -> dict[str, tuple[str, str]]:
    """(kind, key) of every artifact one seed needs, without building anything (the replays' own
    keys depend on the run's rollouts: their index, ``replays``, stands for them)."""
    rk = run_key(run_cfg)
    keys = {
        "run": ("runs", rk),
        "sketches": ("sketches", sketch_key(run_cfg, sketch)),
        "targets": ("targets", targets_key(rk, sketch, draws)),
    }
    for i in range(draws.n_draws):
        keys[f"draw{i}"] = ("draws", draw_key(rk, sketch, draws, i, counterfactual))
    if counterfactual is not None:
        keys["control"] = ("runs", control_key(run_cfg))
        keys["replays"] = ("replaysets", replay_set_key(run_cfg, counterfactual))
    return keys
