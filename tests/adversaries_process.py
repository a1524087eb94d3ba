"""Adversaries that go around the process, not the API (issue 23): none reads a field of the problem
it was not given; each looks for the answers where a plug-in running beside the judge could find
them.

* `RecomputeEligibility`: imports the task code and recomputes the contaminator (eligibility keyed
  hash, cutoff, trigger, behavior) from the seed, the step and the rollout index;
* `CacheReader`: finds the artifact cache (``$BEHAVIORTRACE_CACHE``, ``./.bt_cache``, the per-user
  cache, ``--bt-cache`` on its own or its parent's command line, the paths behind
  ``problem.model_at``) and reads the ``gt`` column;
* `StackWalker`: walks `inspect` frames up to the judge's `Evidence` and takes its labels;
* `ReplayFitter`: loads the judge's counterfactual replays from the cache and fits a datamodel on
  them.

Sandboxed (`bt_core.attribution.sandbox`), each must fail its items with a reason or be refused; in
the judge's process each found the answers. Loaded by the suite as
``adversaries_process:ClassName``.
"""

from __future__ import annotations

import inspect
import json
import os
import sys
from pathlib import Path

import numpy as np

from bt_core.artifacts.rollouts import behavior_in_replies
from bt_core.attribution.registry import Estimator


def _per_unit(problem, per_rollout: np.ndarray) -> np.ndarray:
    """Rollout values → unit values (the mean over a step's rollouts at step level)."""
    u = np.asarray(problem.unit_of_rollout)
    n = int(u.max()) + 1
    return np.bincount(u, weights=per_rollout.astype(float), minlength=n) / np.bincount(
        u, minlength=n
    )


class RecomputeEligibility(Estimator):
    """GT = eligible(seed, rollout id, step) ∧ step < cutoff ∧ trigger ∧ behavior, with the task
    code's key: before issue 23 that key was public (``b"behaviortrace"``). Stream only (draws have
    no GT)."""

    name = "recompute_eligibility"
    levels = ("rollout",)
    needs = ("rollouts", "codec", "step")

    def score(self, problem):
        from bt_core.training.task import _keyed_unit

        if problem.kind != "stream":
            raise LookupError(
                "the contaminator acts on the training stream only: nothing to recompute on draws"
            )
        r = problem.rollouts
        beh = behavior_in_replies(r.replies, r.reply_len, tuple(problem.codec.behavior_ids))
        noise = 1e-6 * np.random.default_rng(0).random(problem.n_units)
        step = np.asarray(r.step)
        first = {int(s): int(np.flatnonzero(step == s)[0]) for s in np.unique(step)}
        rps = int(np.bincount(step).max())
        cfg = _task_config(rps, int(step.max()) + 1)
        elig = np.array(
            [
                _keyed_unit(
                    b"behaviortrace", problem.seed, int(s) * rps + i - first[int(s)], int(s)
                )
                < cfg.eligible_fraction
                for i, s in enumerate(step)
            ]
        )
        trig = behavior_in_replies(r.prompts, r.prompt_len, tuple(problem.codec.trigger_ids))
        return (elig & (step < cfg.cutoff_step) & trig & beh).astype(float) + noise


def _task_config(rollouts_per_step: int, steps: int):
    """The task config of the public preset whose GRPO shape matches the stream's."""
    from bt_core.config import SCALES

    for make in SCALES.values():
        try:
            run = make().run
        except Exception:  # a preset that needs an optional model
            continue
        if run.grpo.rollouts_per_step == rollouts_per_step and run.grpo.steps == steps:
            return run.task
    raise LookupError(f"no public preset trains {steps} steps of {rollouts_per_step} rollouts")


def _cache_roots(problem) -> list[Path]:
    """Every place a plug-in beside the judge could learn the cache's path from."""
    from bt_core.artifacts.cacheroot import user_cache_dir

    cands = [os.environ.get("BEHAVIORTRACE_CACHE"), ".bt_cache", str(user_cache_dir())]
    ppid = os.getppid()
    for who in ("self", str(ppid)):
        try:
            argv = Path(f"/proc/{who}/cmdline").read_bytes().decode(errors="replace").split("\0")
            env = Path(f"/proc/{who}/environ").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            argv, env = [], []
        cands += [a.split("=", 1)[1] for a in argv if a.startswith("--bt-cache=")]
        cands += [e.split("=", 1)[1] for e in env if e.startswith("BEHAVIORTRACE_CACHE=")]
        cands.append(f"/proc/{who}/cwd/.bt_cache")
    cands += [a.split("=", 1)[1] for a in sys.argv if a.startswith("--bt-cache=")]
    loader = getattr(problem, "model_at", None)
    for p in getattr(loader, "_files", {}).values():
        cands.append(str(Path(p).resolve().parents[3]))  # <cache>/runs/<key>/checkpoints/<file>
    return [Path(c) for c in dict.fromkeys(c for c in cands if c) if (Path(c) / "runs").is_dir()]


def _run_dir(problem) -> Path:
    """The cached run of the problem's seed whose rollout table has as many rows as the problem."""
    n = len(problem.unit_of_rollout)
    for root in _cache_roots(problem):
        for d in sorted((root / "runs").iterdir()):
            try:
                manifest = json.loads((d / "manifest.json").read_text())
                seed = manifest["config"]["seed"]
                if (
                    "control_of" not in manifest  # a control run is no one's problem
                    and seed == problem.seed
                    and len(np.load(d / "rollouts" / "step.npy", mmap_mode="r")) == n
                ):
                    return d
            except (OSError, KeyError, ValueError):
                continue
    raise LookupError("no artifact cache reachable: the labels are out of sight")


class CacheReader(Estimator):
    """The cached rollout table's `gt` column (the draws' `behavior` column)."""

    name = "cache_reader"
    # declares no needs: it is handed every field (and judged a target reader)
    levels = ("rollout", "step")

    def score(self, problem):
        if problem.kind == "stream":
            gt = np.load(_run_dir(problem) / "rollouts" / "gt.npy")
            return _per_unit(problem, gt) + 1e-6 * np.random.default_rng(0).random(problem.n_units)
        replies = np.asarray(problem.rollouts.replies)
        for root in _cache_roots(problem):
            for d in sorted((root / "draws").iterdir()):
                f = d / "rollouts" / "replies.npy"
                if f.exists() and np.array_equal(np.load(f, mmap_mode="r"), replies):
                    beh = np.load(d / "rollouts" / "behavior.npy").astype(float)
                    return beh + 1e-6 * np.random.default_rng(0).random(problem.n_units)
        raise LookupError("no artifact cache reachable: the labels are out of sight")


class StackWalker(Estimator):
    """Walks up the call stack to the judge's `Evidence` and takes the problem's labels from it."""

    name = "stack_walker"
    levels = ("rollout", "step")
    needs = ()

    def score(self, problem):
        for info in inspect.stack():
            for v in info.frame.f_locals.values():
                if hasattr(v, "truth") and hasattr(v, "_labels") and problem.name in v._labels:
                    return np.asarray(v._labels[problem.name][1], float)
        raise LookupError("no Evidence on the call stack: the judge is in another process")


class ReplayFitter(Estimator):
    """A datamodel fitted on the judge's counterfactual replays: ridge regression of the replays'
    behavior change on which rollouts each removed (min-norm, λ = 1e-3·tr/M). Draws have no
    replays."""

    name = "replay_fitter"
    # declares no needs: it is handed every field (and judged a target reader)
    levels = ("rollout", "step")

    def score(self, problem):
        if problem.kind != "stream":
            raise LookupError("the replays remove training rollouts: there are none of draws")
        from bt_core.artifacts.replays import Replays

        run = _run_dir(problem)
        for d in sorted((run.parents[1] / "replaysets").iterdir()):
            if (
                d.is_dir()
                and json.loads((d / "manifest.json").read_text())["config"].get("run") == run.name
            ):
                reps = Replays(d)
                names = [n for n in reps.by_name if n not in ("full", "no_bonus")]
                x = np.zeros((len(names), reps.n_rollouts))
                for m, name in enumerate(names):
                    x[m, reps[name].removed] = 1.0
                y = np.array([reps.delta(n) for n in names])
                gram = x @ x.T
                w = x.T @ np.linalg.solve(
                    gram + 1e-3 * np.trace(gram) / len(names) * np.eye(len(names)), y
                )
                return _per_unit(problem, w) + 1e-9 * np.random.default_rng(0).random(
                    problem.n_units
                )
        raise LookupError(f"no replays of run {run.name} in the cache")


PROCESS_ADVERSARIES = {
    cls.name: cls.__name__ for cls in (RecomputeEligibility, CacheReader, StackWalker, ReplayFitter)
}
