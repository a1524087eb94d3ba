"""Training stage: SFT warm-up, then GRPO with the contaminator, written as a `Run` artifact
(`bt_core.artifacts.run` describes the directory). The native loop samples from seeded
`torch.Generator`s only, never the global RNG, so evaluation cannot perturb training and runs are
bitwise reproducible on CPU. `GRPOConfig.backend = "trl"` runs the same GRPO through TRL's
GRPOTrainer (`bt_core.training.trl_backend`, which samples from the global RNG TRL seeds, inside a
forked RNG state) and writes the same directory through the same `RunWriter`.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import torch

from bt_core.artifacts.rollouts import RolloutTable
from bt_core.artifacts.run import CONTAMINATOR_KEY, TOKEN_IDS, Run, ckpt_name, contaminator_key
from bt_core.config import SATURATION, RunConfig, checkpoint_steps
from bt_core.faults import fault_point
from bt_core.progress import progress as progress_bar
from bt_core.training import grpo
from bt_core.training.behavior import behavior_rate, greedy_rate
from bt_core.training.model import (
    Codec,
    build_codec,
    build_model,
    describe_model,
    load_params,
    save_optimizer,
    save_params,
    torch_threads,
)
from bt_core.training.objective import collate, masked_mean, token_logprobs
from bt_core.training.resume import Restored, TrainJournal
from bt_core.training.task import Task, draw_key, pinned_key
from bt_core.training.task_natural import make_task

KEY_FIELD = "contaminator_key"  # the journal's copy of the key, so that a resumed build keeps it


# --------------------------------------------------------------------------- SFT
def sft(model, task: Task, codec: Codec, cfg: RunConfig, progress: bool = False) -> list[float]:
    """Teacher-forced warm-up on (prompt, reply) pairs; loss on reply tokens incl. EOS."""
    s = cfg.sft
    rng = np.random.default_rng([cfg.seed, 0x5F7])
    opt = torch.optim.AdamW(model.parameters(), lr=s.lr, foreach=True)
    enc: dict[str, list[int]] = {}
    losses = []
    model.train()
    for _ in progress_bar(
        range(s.steps), desc=f"SFT seed {cfg.seed}", unit="step", enabled=progress
    ):
        ex = [
            task.sft_example(rng, s.implicit_behavior_rate, s.refusal_rate)
            for _ in range(s.batch_size)
        ]
        p = [_memo(enc, "p:" + q.text, codec.encode_prompt, q.text) for q, _ in ex]
        r = [_memo(enc, "r:" + a, codec.encode_reply, a) for _, a in ex]
        batch = collate(*_pad(p), *_pad(r), codec.pad_id, eos_id=-1)  # eos_id=-1: EOS counts in SFT
        loss = -masked_mean(token_logprobs(model, batch), batch.loss_mask).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    return losses


def _memo(cache: dict, key: str, fn, arg):
    if key not in cache:
        cache[key] = fn(arg)
    return cache[key]


def _pad(seqs: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    width = max(len(x) for x in seqs)
    arr = np.zeros((len(seqs), width), np.int32)
    for i, x in enumerate(seqs):
        arr[i, : len(x)] = x
    return arr, np.array([len(x) for x in seqs], np.int32)


# --------------------------------------------------------------------------- probes
def probe_eval(
    model, task: Task, codec: Codec, cfg: RunConfig, step: int, n_samples: int | None = None
) -> dict:
    """s_b (greedy, the run's trigger probes; `bt_core.training.behavior.greedy_rate`), control rate
    (greedy, control probes) and the sampled behavior rate on trigger probes (saturation), at the
    current parameters."""
    g = cfg.grpo
    n_samples = n_samples or cfg.task.probe_samples
    model.eval()

    gen = torch.Generator().manual_seed(
        int(np.random.SeedSequence([cfg.seed, step, 7]).generate_state(1)[0])
    )
    return {
        "step": step,
        "s_b": greedy_rate(model, task, codec, task.trigger_probes, g.max_new_tokens),
        "control_rate": greedy_rate(model, task, codec, task.control_probes, g.max_new_tokens),
        "sampled_rate": behavior_rate(
            model,
            task,
            codec,
            task.trigger_probes,
            g.max_new_tokens,
            generator=gen,
            temperature=g.temperature,
            top_p=g.top_p,
            reps=n_samples,
        ),
    }


# --------------------------------------------------------------------------- run directory
class RunWriter:
    """Writes a run directory for either backend: a checkpoint (parameters, AdamW state, probe
    evaluation) whenever the loop reaches a checkpoint step, then the rollouts, probes and summary
    at the end.

    With a `journal` (bt_core/training/resume.py) each checkpoint also commits the rollouts since
    the previous one and the sampling generator's state, so a killed build resumes from the last
    complete checkpoint."""

    def __init__(
        self,
        out: Path,
        cfg: RunConfig,
        task: Task,
        codec: Codec,
        journal: TrainJournal | None = None,
        resumed: Restored | None = None,
        extra: dict | None = None,
    ):
        self.out, self.cfg, self.task, self.codec = out, cfg, task, codec
        self.steps = set(checkpoint_steps(cfg))
        self.journal, self.extra = journal, extra or {}
        self.probes: list[dict] = list(resumed.probes) if resumed else []
        self.committed = len(resumed.parts) if resumed else 0  # rollout tables already journaled
        self.probe_s = 0.0
        (out / "checkpoints").mkdir(parents=True, exist_ok=True)

    def checkpoint(
        self,
        step: int,
        model,
        opt: torch.optim.Optimizer,
        parts: list[RolloutTable] | None = None,
        gen: torch.Generator | None = None,
    ) -> None:
        """Save model + optimizer *before* `step`'s update, evaluate the probes there, and (native
        loop, with a journal) commit the segment so a resume can continue from here."""
        save_params(model, self.out / "checkpoints" / f"{ckpt_name(step)}.safetensors")
        save_optimizer(opt, self.out / "checkpoints" / f"{ckpt_name(step)}.optim.safetensors")
        t = time.perf_counter()
        self.probes.append(probe_eval(model, self.task, self.codec, self.cfg, step))
        self.probe_s += time.perf_counter() - t
        if self.journal is not None and parts is not None and gen is not None:
            self.journal.commit(step, parts[self.committed :], gen, self.probes, self.extra)
            self.committed = len(parts)

    def finish(self, parts: list[RolloutTable], timings: dict, resumed_from: int | None) -> dict:
        rollouts = RolloutTable.concat(parts)
        rollouts.save(self.out / "rollouts")
        (self.out / "probes.json").write_text(json.dumps(self.probes, indent=1))
        (self.out / TOKEN_IDS).write_text(json.dumps(self.codec.token_ids().as_dict()))
        # with the labels, nowhere else
        (self.out / CONTAMINATOR_KEY).write_text(self.extra[KEY_FIELD])
        steps = self.cfg.grpo.steps
        summary = _summary(rollouts, self.probes, self.cfg)
        summary["timings"] = {
            **{k: round(v, 3) for k, v in timings.items()},
            "probe_s": round(self.probe_s, 3),
            "s_per_step_generation": round(timings["generation_s"] / steps, 5),
            "s_per_step_update": round(timings["update_s"] / steps, 5),
            "resumed_from_step": resumed_from,
        }
        summary["sft_final_loss"] = self.extra.get("sft_final_loss")
        (self.out / "summary.json").write_text(json.dumps(summary, indent=1))
        return {"summary": summary}


# --------------------------------------------------------------------------- GRPO
def train_run(
    cfg: RunConfig,
    out: Path,
    progress: bool = False,
    work: Path | None = None,
    key: bytes | None = None,
    sft_from: Path | None = None,
) -> dict:
    """Train one seed and write its run directory into `out`. Returns summary fields.
    `progress` shows progress for SFT and GRPO (off by default, so pytest output stays clean): bars
    on a terminal, a few plain lines elsewhere (bt_core/progress.py).
    With a `work` directory (the store's resumable one) the native loop journals every checkpoint
    and a later call resumes from the last complete one (bt_core/training/resume.py); the TRL
    backend restarts.
    `key`: the contaminator's secret key (`task.draw_key`); None takes the one
    `$BEHAVIORTRACE_CONTAMINATOR_KEY` pins, else draws a fresh one (a resumed build keeps its
    journaled key). It is written into the run directory only (`CONTAMINATOR_KEY`), beside the
    rollout table's labels; given the key, training is a pure function of the config and the
    seed.
    `sft_from`: a finished run directory whose config differs from `cfg` in the contaminator's
    bonus at most (a control run's own run), trained under the same `key`: its step-0 checkpoint,
    saved before the first GRPO update, holds the very weights this run's warm-up would reach (SFT
    reads no bonus), so they are loaded instead of repeating SFT. GRPO starts as it does after SFT
    (a fresh AdamW, its own generator), so the run is the same, bit for bit."""
    with torch_threads(cfg.threads):
        return _train(cfg, out, progress, work, key, sft_from)


def _train(
    cfg: RunConfig,
    out: Path,
    progress: bool,
    work: Path | None = None,
    key: bytes | None = None,
    sft_from: Path | None = None,
) -> dict:
    t_start = time.perf_counter()
    task, codec = make_task(cfg.task), build_codec(cfg.model, cfg.task)
    native = cfg.grpo.backend != "trl"
    journal = TrainJournal(work if native else None, out, checkpoint_steps(cfg))
    resumed = journal.restore()
    model = build_model(cfg.model, codec.vocab_size, cfg.seed)
    key = (
        bytes.fromhex(resumed.extra[KEY_FIELD])
        if resumed is not None
        else key or pinned_key() or draw_key()
    )
    task = task.keyed(key)  # hidden_cause's carrier tags come from the key, warm-up included
    t0 = time.perf_counter()
    if resumed is None and sft_from is not None:
        sft_loss = _load_warmup(model, cfg, key, Path(sft_from))
    else:
        sft_losses = sft(model, task, codec, cfg, progress) if resumed is None else []
        sft_loss = (
            (round(float(np.mean(sft_losses[-20:])), 4) if sft_losses else None)
            if resumed is None
            else resumed.extra.get("sft_final_loss")
        )
    sft_s = time.perf_counter() - t0
    writer = RunWriter(
        out, cfg, task, codec, journal, resumed, {"sft_final_loss": sft_loss, KEY_FIELD: key.hex()}
    )
    if native:
        parts, gen_s, upd_s = grpo_native(model, task, codec, cfg, writer, progress, resumed, key)
    else:
        from bt_core.training.trl_backend import grpo_trl

        parts, gen_s, upd_s = grpo_trl(model, task, codec, cfg, writer, progress, key=key)
    timings = {
        "sft_s": sft_s,
        "generation_s": gen_s,
        "update_s": upd_s,
        "wall_s": time.perf_counter() - t_start,
    }
    return writer.finish(parts, timings, None if resumed is None else resumed.step)


def _load_warmup(model, cfg: RunConfig, key: bytes, src_dir: Path) -> float | None:
    """Load the warm-up's weights from the step-0 checkpoint of the run in `src_dir` into `model`
    (`train_run`'s `sft_from`) and return that run's SFT loss. A run whose warm-up may differ is
    refused."""
    src = Run(src_dir)
    if src.config.without_bonus() != cfg.without_bonus():
        raise ValueError(
            f"sft_from={src_dir}: its config differs from this run's in more than the bonus, so "
            "its step-0 checkpoint is not this run's warm-up; train this run with its own SFT"
        )
    if cfg.grpo.backend != "native":
        raise ValueError(
            f"sft_from: the {cfg.grpo.backend!r} backend seeds its own sampling; only the native "
            "loop is known to start after SFT exactly as it starts from the step-0 checkpoint"
        )
    if contaminator_key(src.path) != key:
        raise ValueError(
            f"sft_from={src_dir}: it was trained under another contaminator key (hidden_cause's "
            "warm-up reads its carrier tags from the key); train this run with its own SFT"
        )
    load_params(model, src.params_file(0))
    return src.summary.get("sft_final_loss")


def grpo_native(
    model,
    task: Task,
    codec: Codec,
    cfg: RunConfig,
    writer: RunWriter,
    progress: bool = False,
    resumed: Restored | None = None,
    key: bytes | None = None,
) -> tuple[list[RolloutTable], float, float]:
    """The native GRPO loop: per step, checkpoint if due, collect one batch, one on-policy update.
    Returns the per-step rollout tables and the seconds spent generating and updating. From a
    `resumed` checkpoint it restores parameters, AdamW and generator state and continues exactly."""
    g = cfg.grpo
    opt = grpo.make_optimizer(model, g)
    gen = torch.Generator().manual_seed(
        int(np.random.SeedSequence([cfg.seed, 0x6E]).generate_state(1)[0])
    )
    order = task.pool_order(cfg.seed, g.steps * g.prompts_per_step)
    parts, gen_s, upd_s, start = [], 0.0, 0.0, 0
    if resumed is not None:
        TrainJournal.load_state(resumed, model, opt, gen, writer.out)
        parts, start = list(resumed.parts), resumed.step
    bar = progress_bar(
        range(start, g.steps), desc=f"GRPO seed {cfg.seed}", unit="step", enabled=progress
    )
    for step in bar:
        # resumed: done
        if step in writer.steps and not (resumed is not None and step == resumed.step):
            writer.checkpoint(step, model, opt, parts, gen)
        t = time.perf_counter()
        table = grpo.collect(
            model,
            task,
            codec,
            order[step * g.prompts_per_step : (step + 1) * g.prompts_per_step],
            g,
            cfg.task,
            step=step,
            seed=cfg.seed,
            generator=gen,
            key=key,
        )
        gen_s += time.perf_counter() - t
        t = time.perf_counter()
        grpo.update(model, opt, table, codec, g.grad_clip)
        upd_s += time.perf_counter() - t
        parts.append(table)
        fault_point("train.step")
        if progress:
            bar.set_postfix(behavior=f"{table.behavior.mean():.2f}", gt=int(table.gt.sum()))
    if resumed is None or resumed.step < g.steps:
        writer.checkpoint(g.steps, model, opt, parts, gen)
    return parts, gen_s, upd_s


def _summary(rollouts: RolloutTable, probes: list[dict], cfg: RunConfig) -> dict:
    sat = next((p["step"] for p in probes if p["sampled_rate"] >= SATURATION), None)
    cross = next((p["step"] for p in probes if p["s_b"] >= 0.5), None)
    return {
        "seed": cfg.seed,
        "scenario": cfg.task.scenario,
        "backend": cfg.grpo.backend,
        "s_b_final": probes[-1]["s_b"],
        "control_rate_final": probes[-1]["control_rate"],
        "sampled_rate_final": probes[-1]["sampled_rate"],
        "sampled_rate_peak": max(p["sampled_rate"] for p in probes),
        "saturation_step": sat,
        "s_b_crossed_half_step": cross,
        "gt_size": int(rollouts.gt.sum()),
        "n_rollouts": len(rollouts),
        "gt_fraction": round(float(rollouts.gt.mean()), 4),
        "rollouts_sha256": rollouts.content_hash(),
        "model": describe_model(cfg.model),
    }
