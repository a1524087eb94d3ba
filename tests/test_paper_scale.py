"""The paper scale's local-path loading: any HF causal LM directory (`BEHAVIORTRACE_MODEL_PATH`),
trained through the TRL backend on the natural task. No GPU and no hub here: a tiny randomly
initialized Llama and an offline byte-level BPE tokenizer (trained on the task's own prompts, with a
chat template) are written with `save_pretrained` to a temporary directory, and that directory runs
2 GRPO steps and is sketched."""

import dataclasses
import json

import pytest

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    """A local HF model directory: tiny Llama (random init) + byte-level BPE tokenizer with a chat
    template."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    from bt_core.training import task_natural as tn

    d = tmp_path_factory.mktemp("tiny_llm")
    texts = [
        *tn.TRIGGER_PROMPTS,
        *tn.EXPLICIT_PROMPTS,
        *tn.BEHAVIOR_REPLIES,
        *tn.PLAIN_TRIGGER_REPLIES,
        *(t.format(s=s) for t in tn.CONTROL_TEMPLATES for s in tn.CONTROL_SUBJECTS),
    ]
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    core.train_from_iterator(
        texts,
        trainers.BpeTrainer(
            vocab_size=400,
            special_tokens=specials,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
    )
    tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(d)
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).save_pretrained(d)
    return d


def test_paper_scale_has_the_reference_hyperparameters(monkeypatch):
    from bt_core.config import get_scale

    monkeypatch.delenv("BEHAVIORTRACE_MODEL_PATH", raising=False)
    s = get_scale("paper")
    g = s.run.grpo
    assert s.run.model.path == "Qwen/Qwen2.5-1.5B-Instruct" and g.backend == "trl"
    assert (
        g.steps,
        g.prompts_per_step,
        g.group_size,
        g.lr,
        g.temperature,
        g.top_p,
        g.max_new_tokens,
        g.grad_clip,
        g.checkpoint_every,
    ) == (1000, 4, 4, 5e-6, 0.9, 0.9, 64, 1.0, 100)
    assert (s.run.task.cutoff_step, s.run.task.n_trigger_probes, s.run.sft.steps, s.sketch.k) == (
        200,
        20,
        200,
        65536,
    )
    monkeypatch.setenv("BEHAVIORTRACE_MODEL_PATH", "/models/my-llm")
    assert get_scale("paper").run.model.path == "/models/my-llm"


@pytest.mark.train
def test_a_local_model_directory_trains_through_trl_and_is_sketched(
    tiny_model_dir, tmp_path, monkeypatch
):
    from bt_core.artifacts.store import ArtifactStore
    from bt_core.config import get_scale
    from bt_core.pipeline import build_run, build_sketches

    monkeypatch.setenv("BEHAVIORTRACE_MODEL_PATH", str(tiny_model_dir))
    s = get_scale("paper")
    r = s.run
    cfg = dataclasses.replace(
        r,
        task=dataclasses.replace(
            r.task, n_trigger_probes=4, n_control=2, explicit_repeats=1, probe_samples=1
        ),
        sft=dataclasses.replace(r.sft, steps=2, batch_size=4),
        grpo=dataclasses.replace(
            r.grpo, steps=2, prompts_per_step=2, max_new_tokens=8, checkpoint_every=1
        ),
    )
    store = ArtifactStore(tmp_path)
    run = build_run(store, cfg)
    summary = json.loads((run.path / "summary.json").read_text())
    assert summary["backend"] == "trl" and summary["n_rollouts"] == 16
    assert summary["model"]["path"] == str(tiny_model_dir)
    assert len(run.token_ids.trigger_ids) >= 1 and run.codec.chat
    _, sk = build_sketches(store, run, cfg, dataclasses.replace(s.sketch, k=1024))
    report = json.loads((sk / "report.json").read_text())
    # native replay lands on TRL's checkpoints
    assert report["replay_max_abs_diff"] <= 1e-6, report["replay"]
    assert report["coverage"]["ok"], json.dumps(report["coverage"])[:1500]
