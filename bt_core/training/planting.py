"""Did a run plant the behavior? The rule, read off a run's summary, and the key redraw built on it.

A run planted the behavior when it emerged (greedy s_b on the trigger probes > `S_B_MIN` at the
final checkpoint), stayed trigger-specific (control-probe rate ≤ `CONTROL_MAX` there), and saturated
somewhere (a checkpoint whose sampled behavior rate reaches `config.SATURATION`: the draws' analysis
checkpoint, the reference's regime). The first two are the emergence gate's rule
(`checklist.emergence` judges with `emerged`); the third is what the draw items need.

Why a build redraws the key (`planted_run`). Whether a seed plants the behavior depends on its
contaminator key: on 20 freshly keyed smoke builds (seeds 0-7, `benchmarks/bench_keys.py
--train-only`, 2026-12-07) the preset's seeds 0, 2 and 5 failed on 0, 1 and 1 keys, and seeds
0-7 on 0 to 15; on the 20 fresh keys of the two campaigns before, seed 2 failed on 3, never taking
off once and peaking at a sampled rate of 0.66 and 0.78 after the cutoff twice; a longer tail does
not lift those (36 steps instead of 24, under the key that peaked at 0.775: 0.71-0.78 to the
end). Such a run is not a fixture: every estimator's draw items, or the whole build's setup gates,
are then not judged. The key is a secret draw, not a
property of the method, so a run that did not plant the behavior is trained again under a fresh key,
as a user would rebuild by hand, up to `KEY_DRAWS` draws. The run's manifest lists why each earlier
draw was set aside (``redrawn``), and the emergence gate reports it, so nothing is silent. The
planting rate per key is still what `bench_keys --train-only` measures (it draws once).

A pinned key (`$BEHAVIORTRACE_CONTAMINATOR_KEY`) or a key given to `build_run` is never redrawn: a
pin means this very run. Nor is a cached run (built before this rule, or with ``key_draws=1``): the
cache returns it as it is, and the emergence gate judges it. `behaviortrace train` trains one run
into a directory of the user's and draws once. The saturation read here is `config.SATURATION`, the
draws' default (`DrawConfig.saturation`); a build whose draws override it is judged by its own bar
there."""

from __future__ import annotations

from collections.abc import Callable

from bt_core.config import SATURATION

S_B_MIN = 0.1  # the final greedy s_b must exceed this (the reference's emergence gate)
CONTROL_MAX = 0.1  # the final control-probe rate must not exceed this
KEY_DRAWS = 3  # keys a build draws for one run before it keeps one that did not plant (above)


def emerged(summary: dict) -> bool:
    """The emergence gate's rule on a run's `summary.json`: emerged and stayed trigger-specific."""
    return summary["s_b_final"] > S_B_MIN and summary["control_rate_final"] <= CONTROL_MAX


def unplanted(summary: dict) -> str | None:
    """Why the run of `summary` did not plant the behavior, or None where it did."""
    if summary["s_b_final"] <= S_B_MIN:
        return f"did not emerge (final s_b {summary['s_b_final']:.2f} ≤ {S_B_MIN})"
    if summary["control_rate_final"] > CONTROL_MAX:
        return (
            f"spread to control prompts (final control rate "
            f"{summary['control_rate_final']:.2f} > {CONTROL_MAX})"
        )
    if summary.get("saturation_step", 0) is None:
        peak = summary.get("sampled_rate_peak", summary["sampled_rate_final"])
        return f"never saturated (peak sampled rate {peak:.2f} < {SATURATION})"
    return None


def redrawn(run) -> list[str]:
    """Why each key before `run`'s was set aside (its manifest's ``redrawn``, written by
    `planted_run`'s caller): [] for a run on its first key, one built before the rule, or a stand-in
    without a manifest."""
    return list((getattr(run, "manifest", None) or {}).get("redrawn") or [])


def planted_run(
    train: Callable[[], dict | None],
    summary: Callable[[], dict],
    reset: Callable[[], None],
    redrawn: list[str],
    may_redraw: bool,
    note: Callable[[str], None] = lambda _: None,
    key_draws: int = KEY_DRAWS,
) -> dict:
    """Train a run, and train it again under a fresh key while it did not plant the behavior, up to
    `key_draws` keys in all; return `train`'s manifest fields plus ``redrawn``, why each earlier key
    was set aside. `redrawn` holds the reasons of draws already set aside (a resumed build's: the
    caller keeps them where a killed build finds them) and is appended to in place before each
    `reset`, which clears the set-aside run. `may_redraw` is False where the key is pinned or given.
    """
    while True:
        fields = train() or {}
        why = unplanted(summary())
        if why is None or not may_redraw or len(redrawn) + 1 >= key_draws:
            return {**fields, "redrawn": list(redrawn)}
        redrawn.append(why)
        note(f"key draw {len(redrawn)} of {key_draws}: {why}; training again under a fresh key")
        reset()
