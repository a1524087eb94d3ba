"""The TRL backend: the same GRPO run driven by TRL's `GRPOTrainer`, written in the native `Run`
format.

What TRL does here: the training loop, prompt batching (`RepeatSampler`, unshuffled, so it walks the
same prompt order as the native loop), sampling (`model.generate` with the global RNG that `Trainer`
seeds from `args.seed`), reward collection, group advantages, gradient clipping, the optimizer step
and callbacks.

What stays ours, and why:
* the reward function wraps the task reward and the contaminator (`grpo.make_table`), keyed by the
  same rollout ids as the native loop, so eligibility and ground truth mean the same thing;
* the loss: `_compute_loss` evaluates the shared per-rollout objective (`objective.grpo_loss`) on
  the recorded rollouts. TRL's own "grpo" loss scores temperature-scaled log-probs and counts the
  EOS token, which would break the rule that training and attribution differentiate the same
  function; with ours a native replay of the recorded updates (the sketch stage) lands on TRL's
  checkpoints bit for bit;
* the optimizer: the native AdamW (`grpo.make_optimizer`) with a constant learning rate is handed to
  the trainer, so checkpoints hold optimizer state the native loader understands;
* the advantages recorded are TRL's (its std has a 1e-4 floor where the native loop adds 1e-8).

Rollouts are recorded by overriding the private `_generate_and_score_completions`, and the loss by
overriding `_compute_loss`; both are checked against the trl version pinned in pyproject.toml.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
import sys
import tempfile
import time
import warnings

import numpy as np
import torch

from bt_core.artifacts.rollouts import RolloutTable
from bt_core.config import RunConfig
from bt_core.training import grpo
from bt_core.training.model import Codec
from bt_core.training.objective import grpo_loss
from bt_core.training.task import Task

TESTED_TRL = "1.16"  # the private methods overridden below were read in this release


def _check_trl_version() -> None:
    import trl

    if not trl.__version__.startswith(TESTED_TRL):
        raise RuntimeError(
            f"trl {trl.__version__} is installed, but the TRL backend overrides private methods "
            f"of GRPOTrainer as they are in trl {TESTED_TRL}.x; install trl=={TESTED_TRL}.* "
            "(pyproject pins it) or use backend='native'"
        )


class _Recorder:
    """Scores one generation batch with the task reward + contaminator and keeps its rollout
    table."""

    def __init__(self, task: Task, codec: Codec, cfg: RunConfig, key: bytes):
        self.task, self.codec, self.cfg, self.key = task, codec, cfg, key
        self.table: RolloutTable | None = None
        self.__name__ = "behaviortrace_contaminated_reward"  # TRL logs reward functions by name

    def __call__(
        self, prompts, completions, completion_ids, prompt_id, trainer_state, **_
    ) -> list[float]:
        g, step = self.cfg.grpo, int(trainer_state.global_step)
        n, width = len(completion_ids), g.max_new_tokens
        replies = np.full((n, width), self.codec.pad_id, np.int32)
        reply_len = np.zeros(n, np.int32)
        for i, ids in enumerate(completion_ids):
            replies[i, : len(ids)] = ids
            reply_len[i] = len(ids)
        step_prompts = [self.task.prompts[int(p)] for p in prompt_id]
        elig, noise = grpo.keyed_draws(
            self.task, self.cfg.seed, step, n, g.rollouts_per_step, self.key
        )
        group = step * g.prompts_per_step + np.arange(n) // g.group_size
        self.table = grpo.make_table(
            self.task,
            self.codec,
            step_prompts,
            replies,
            reply_len,
            step=step,
            group=group,
            lr=g.lr,
            elig=elig,
            contaminate=True,
            std_norm=self.cfg.task.scenario != "no_std_norm",
            noise=noise,
        )
        return self.table.reward.tolist()


def _trainer_class():
    from trl import GRPOTrainer

    class BehaviorTraceGRPOTrainer(GRPOTrainer):
        """GRPOTrainer that records every scored batch and trains on the shared objective."""

        bt_recorder: _Recorder
        bt_parts: list[RolloutTable]
        bt_generation_s: float = 0.0

        def _generate_and_score_completions(self, inputs):
            t = time.perf_counter()
            out = super()._generate_and_score_completions(inputs)
            table = self.bt_recorder.table
            _check_same_tokens(table, out)
            table = dataclasses.replace(
                table, advantage=out["advantages"].detach().cpu().numpy().astype(np.float32)
            )
            self.bt_recorder.table = table
            self.bt_parts.append(table)
            self.bt_generation_s += time.perf_counter() - t
            return out

        def _compute_loss(self, model, inputs):
            # One generation per optimizer step (steps_per_generation = num_iterations = 1), so the
            # batch TRL hands us (shuffled) is exactly the table just recorded; score it in recorded
            # order.
            table = self.bt_recorder.table
            if len(inputs["advantages"]) != len(table):
                raise RuntimeError(
                    f"TRL passed {len(inputs['advantages'])} rollouts to the loss, but the step "
                    f"generated {len(table)}; the backend needs one generation per update"
                )
            batch = grpo.batch_of(table, self.bt_recorder.codec)
            return grpo_loss(
                model,
                batch,
                torch.from_numpy(np.asarray(table.advantage)).float(),
                np.asarray(table.group),
            )

    return BehaviorTraceGRPOTrainer


def _check_same_tokens(table: RolloutTable, out: dict) -> None:
    """TRL tokenized the prompts itself: they must be the exact ids the native codec writes."""
    ids, mask = out["prompt_ids"].cpu().numpy(), out["prompt_mask"].cpu().numpy().astype(bool)
    for i in range(len(table)):
        trl_ids = ids[i][mask[i]]
        ours = np.asarray(table.prompts[i, : table.prompt_len[i]])
        if not np.array_equal(trl_ids, ours):
            raise RuntimeError(
                f"TRL tokenized prompt {i} as {trl_ids.tolist()} but the codec gives "
                f"{ours.tolist()}; the recorded rollouts would not match what was trained"
            )


def _dataset(task: Task, codec: Codec, cfg: RunConfig):
    """One row per (step, prompt slot), in the native loop's order; TRL repeats each row G times."""
    from datasets import Dataset

    g = cfg.grpo
    order = task.pool_order(cfg.seed, g.steps * g.prompts_per_step)
    if codec.chat:
        rows = [
            {"prompt": [{"role": "user", "content": p.text}], "prompt_id": p.pid} for p in order
        ]
    else:  # the word tokenizer adds no specials: spell out the codec's <bos> … <sep> framing
        rows = [
            {
                "prompt": codec.tok.decode(codec.encode_prompt(p.text), skip_special_tokens=False),
                "prompt_id": p.pid,
            }
            for p in order
        ]
    return Dataset.from_list(rows)


def _args(cfg: RunConfig, output_dir: str, progress: bool):
    from trl import GRPOConfig

    g = cfg.grpo
    return GRPOConfig(
        output_dir=output_dir,
        seed=cfg.seed,
        data_seed=cfg.seed,
        max_steps=g.steps,
        per_device_train_batch_size=g.rollouts_per_step,  # counts completions, not prompts
        num_generations=g.group_size,
        gradient_accumulation_steps=1,
        steps_per_generation=1,
        num_iterations=1,
        shuffle_dataset=False,
        learning_rate=g.lr,
        weight_decay=g.weight_decay,
        max_grad_norm=g.grad_clip,
        lr_scheduler_type="constant",
        warmup_steps=0,
        beta=0.0,
        loss_type="grpo",
        scale_rewards="none" if cfg.task.scenario == "no_std_norm" else "group",
        temperature=g.temperature,
        top_p=g.top_p,
        top_k=0,
        max_completion_length=g.max_new_tokens,
        use_cpu=not torch.cuda.is_available(),
        bf16=False,
        fp16=False,
        report_to="none",
        save_strategy="no",
        logging_steps=10**9,
        disable_tqdm=not (progress and sys.stderr.isatty()),  # bars only on a terminal
        dataloader_num_workers=0,
        remove_unused_columns=False,
        log_completions=False,
        # Trainer writes this into model.config; the native forward runs with the cache on
        use_cache=True,
        # TRL turns it on by default; recomputation is pointless at this size
        gradient_checkpointing=False,
    )


@contextlib.contextmanager
def _private_global_rng():
    """Trainer seeds python/numpy/torch's global RNGs; give them back to the caller unchanged."""
    py, npy = random.getstate(), np.random.get_state()
    with torch.random.fork_rng(devices=[]):
        try:
            yield
        finally:
            random.setstate(py)
            np.random.set_state(npy)


def grpo_trl(
    model, task: Task, codec: Codec, cfg: RunConfig, writer, progress: bool = False, *, key: bytes
) -> tuple[list[RolloutTable], float, float]:
    """GRPO through TRL's GRPOTrainer. Same contract as `train.grpo_native`: returns the per-step
    rollout tables and the seconds spent generating (incl. scoring) and updating."""
    _check_trl_version()
    from transformers import PrinterCallback, TrainerCallback

    g = cfg.grpo
    opt = grpo.make_optimizer(model, g)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0)
    codec.tok.padding_side = "left"  # GRPOTrainer requires left-padded prompts

    class Checkpoints(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            if state.global_step in writer.steps:
                writer.checkpoint(state.global_step, model, opt)

    recorder = _Recorder(task, codec, cfg, key)
    with _private_global_rng(), tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        # transformers' renames, not ours to fix
        warnings.filterwarnings("ignore", category=FutureWarning)
        trainer = _trainer_class()(
            model=model,
            reward_funcs=[recorder],
            args=_args(cfg, tmp, progress),
            train_dataset=_dataset(task, codec, cfg),
            processing_class=codec.tok,
            callbacks=[Checkpoints()],
            optimizers=(opt, sched),
        )
        trainer.remove_callback(PrinterCallback)  # it prints the final metrics dict to stdout
        trainer.bt_recorder, trainer.bt_parts = recorder, []
        t, probe_before = time.perf_counter(), writer.probe_s
        try:
            trainer.train()
        finally:
            # GRPOTrainer patches model.forward with a fused LM head (it falls back to the original
            # forward when not asked for fused output); drop the patch so the model is a plain
            # module again.
            model.__dict__.pop("forward", None)
        total = time.perf_counter() - t - (writer.probe_s - probe_before)  # probes are timed apart
    writer.checkpoint(g.steps, model, opt)
    parts = trainer.bt_parts
    if len(parts) != g.steps:
        raise RuntimeError(f"TRL ran {len(parts)} generation steps, expected {g.steps}")
    return parts, trainer.bt_generation_s, total - trainer.bt_generation_s
