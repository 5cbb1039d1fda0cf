"""Checkpoint directories in the Hugging Face layout, without ``transformers``: download one, or build one locally.

A Llama checkpoint on the Hub is a folder of plain files::

    config.json                    the shape: hidden size, layers, heads, RoPE, norm epsilon, vocabulary size
    model.safetensors              the weights, by name (or model-0000k-of-0000n.safetensors + an index)
    tokenizer.json                 the tokenizer, readable by the ``tokenizers`` library

Lesson 08 reads such a folder with ``safetensors`` and ``tokenizers`` directly. Where there is a network,
:func:`download_or_build` fetches a real one with ``huggingface_hub``; where there is none (CI, an air-gapped GPU
box) it says so in one line and builds a folder of the same layout with random weights (:func:`build_checkpoint`),
so the same code runs either way. :func:`build_tokenizer` trains a small byte-level BPE tokenizer on a short
built-in text, so the local folder has a real ``tokenizer.json`` too.
"""

from __future__ import annotations

import json
import math
import os
import socket
import tempfile
from pathlib import Path

from .mode import dtype_name

#: the files a download fetches: enough to run the model, nothing else (no PyTorch .bin, no ONNX, no GGUF)
FILES = ["*.json", "*.safetensors"]

#: special tokens of the local tokenizer: Llama's three, and ChatML's two (what SmolLM2-Instruct chats with)
SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]

#: the text the local tokenizer is trained on: a few sentences about the course, so common words get tokens
TEXT = """\
A kernel is a small program that runs on every element of a tensor at once. Triton writes kernels in Python:
each program loads a block of numbers, computes, and stores the result. Memory bandwidth bounds most kernels;
the tensor cores bound the matrix multiplications. A language model is an embedding, a stack of decoder layers
and a head that turns the last hidden state into scores for every token of the vocabulary. Decoding reads every
weight once per token, so the time per token is the bytes of the weights divided by the bandwidth of the memory.
The key and value cache keeps what attention needs from earlier tokens, so each new token costs one step.
Hello! How are you? I am a small model with random weights: what I say means nothing, but it is fast.
"""


def _config(vocab_size: int, **shape) -> dict:
    """config.json of a Llama model, as Hugging Face writes one (the keys the lesson's loader reads)."""
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": vocab_size,
        "hidden_size": 64,
        "intermediate_size": 96,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "hidden_act": "silu",
        "max_position_embeddings": 2048,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "tie_word_embeddings": True,
        "attention_bias": False,
        "mlp_bias": False,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": "float32",
    }
    cfg.update(shape)
    cfg["head_dim"] = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]  # may be set apart
    return cfg


#: small enough for Triton's interpreter on a CPU: 2 layers, hidden 64, 4 query heads sharing 2 KV heads (D = 16)
TINY = {}
#: the shape of SmolLM2-135M (30 layers, hidden 576, 9 heads sharing 3, D = 64) with the local vocabulary
SMOLLM2_135M = {
    "hidden_size": 576,
    "intermediate_size": 1536,
    "num_hidden_layers": 30,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "rope_theta": 100000.0,
    "max_position_embeddings": 8192,
}


def build_tokenizer(path, vocab_size: int = 320):
    """Trains a byte-level BPE tokenizer on :data:`TEXT`, saves ``path/tokenizer.json``, returns the Tokenizer.

    Byte-level: any text encodes (unknown characters fall back to their UTF-8 bytes), as with Llama 3 and SmolLM2.
    The 256 byte tokens and the special tokens come first, then merges learnt from the text up to ``vocab_size``.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(TEXT.splitlines(), trainer=trainer)
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tok.save(str(path / "tokenizer.json"))
    return tok


def random_state_dict(cfg: dict, seed: int = 0, dtype=None) -> dict:
    """Random weights under Hugging Face's names for the Llama ``cfg``: unit-scale activations, so that attention
    is neither uniform nor one-hot and the greedy tokens do not all repeat one token."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    C, F, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    H, KV = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D = cfg.get("head_dim") or C // H

    def linear(n_out, n_in):
        return torch.randn(n_out, n_in, generator=gen) / math.sqrt(n_in)

    def norm():
        return 1 + 0.1 * torch.randn(C, generator=gen)

    # embeddings small beside the layers' outputs: a tied head would otherwise predict the input token again
    sd = {"model.embed_tokens.weight": 0.1 * torch.randn(V, C, generator=gen)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        sd[p + "input_layernorm.weight"] = norm()
        sd[p + "self_attn.q_proj.weight"] = linear(H * D, C)
        sd[p + "self_attn.k_proj.weight"] = linear(KV * D, C)
        sd[p + "self_attn.v_proj.weight"] = linear(KV * D, C)
        sd[p + "self_attn.o_proj.weight"] = linear(C, H * D)
        sd[p + "post_attention_layernorm.weight"] = norm()
        sd[p + "mlp.gate_proj.weight"] = linear(F, C)
        sd[p + "mlp.up_proj.weight"] = linear(F, C)
        sd[p + "mlp.down_proj.weight"] = linear(C, F)
    sd["model.norm.weight"] = norm()
    if not cfg.get("tie_word_embeddings", True):
        sd["lm_head.weight"] = linear(V, C)
    return {name: t.to(dtype) if dtype is not None else t for name, t in sd.items()}


def save_state_dict(state_dict: dict, path, shards: int = 1) -> None:
    """``path/model.safetensors``, or ``shards`` files with a ``model.safetensors.index.json`` naming each
    tensor's file, as Hugging Face writes large checkpoints."""
    from safetensors.torch import save_file

    path = Path(path)
    names = list(state_dict)
    if shards <= 1:
        save_file({n: state_dict[n].contiguous() for n in names}, str(path / "model.safetensors"))
        return
    weight_map, per = {}, math.ceil(len(names) / shards)
    for k in range(shards):
        file = f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        part = names[k * per : (k + 1) * per]
        save_file({n: state_dict[n].contiguous() for n in part}, str(path / file))
        weight_map.update(dict.fromkeys(part, file))
    total = sum(t.numel() * t.element_size() for t in state_dict.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (path / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))


def build_checkpoint(path, shape: dict | None = None, *, seed: int = 0, shards: int = 1, dtype=None) -> Path:
    """A Llama checkpoint folder at ``path`` with random weights: tokenizer.json (:func:`build_tokenizer`),
    config.json (:data:`TINY` unless ``shape`` gives other config keys; its vocab_size, if any, over the
    tokenizer's) and the safetensors weights."""
    path = Path(path)
    tok = build_tokenizer(path)
    cfg = _config(**{"vocab_size": tok.get_vocab_size(), **(shape or TINY)})  # shape may set a larger vocabulary
    cfg["bos_token_id"], cfg["eos_token_id"] = tok.token_to_id("<s>"), tok.token_to_id("<|im_end|>")
    if dtype is not None:
        cfg["torch_dtype"] = dtype_name(dtype)
    (path / "config.json").write_text(json.dumps(cfg, indent=2))
    save_state_dict(random_state_dict(cfg, seed, dtype), path, shards)
    return path


def folder_bytes(path) -> int:
    """Bytes of the files in a checkpoint folder (what a download costs)."""
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def _online(host: str = "huggingface.co", timeout: float = 3.0) -> str | None:
    """None when the Hub can be reached, else why not (in a few words)."""
    if os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0"):
        return "HF_HUB_OFFLINE is set"
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
    except OSError as e:
        return f"cannot reach {host} ({e.strerror or type(e).__name__})"
    return None


def download_or_build(
    repo_id: str, shape: dict | None = None, *, skip: str | None = None, local_dir=None, quiet: bool = False
):
    """``(folder, real)``: the checkpoint ``repo_id`` from the Hugging Face Hub (``real=True``), or, with no
    network (or with ``skip``, the reason not to download), a local folder of the same layout with random weights
    of ``shape`` (``real=False``). One line says which, and the download's size."""
    why = skip or _online()
    if why is None:
        try:
            from huggingface_hub import snapshot_download

            folder = Path(snapshot_download(repo_id, allow_patterns=FILES))
            if not quiet:
                print(f"downloaded {repo_id}: {folder_bytes(folder) / 1e6:,.1f} MB in {folder}")
            return folder, True
        except Exception as e:  # noqa: BLE001 - a gated repo, a proxy, a full disk: fall back, say why
            why = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    folder = Path(local_dir or Path(tempfile.gettempdir()) / "triton-hard-way" / "random-llama")
    build_checkpoint(folder, shape)
    if not quiet:
        print(
            f"no download ({why}): using a local Llama with random weights instead, "
            f"{folder_bytes(folder) / 1e6:,.1f} MB in {folder}"
        )
    return folder, False


def chat_prompt(tokenizer, message: str, system: str | None = None) -> str:
    """The text of a one-turn chat: ChatML (``<|im_start|>role ... <|im_end|>``, as SmolLM2-Instruct and the
    local tokenizer use) when the tokenizer knows those tokens, else the message as it is."""
    if tokenizer.token_to_id("<|im_start|>") is None:
        return message
    turns = ([("system", system)] if system else []) + [("user", message)]
    text = "".join(f"<|im_start|>{role}\n{content}<|im_end|>\n" for role, content in turns)
    return text + "<|im_start|>assistant\n"
