"""Hugging Face glue: transformers' Llama decoder layer holding the course's weights, to check and time against.

The only module of the course that imports ``transformers`` (lazily, inside each function), so a lesson runs
without it until it compares with Hugging Face. ``args`` is a lesson's ``LlamaArgs`` (``dim``, ``n_heads``,
``n_kv_heads``, ``head_dim``, ``ffn_dim``, ``rope_theta``, ``norm_eps``) and ``w`` its ``Weights`` (``attn_norm``,
``wqkv``, ``wo``, ``mlp_norm``, ``w13``, ``w2``); both are read by attribute only.

Two details of ``transformers`` 5.x matter: the layer takes ``position_embeddings=(cos, sin)`` from
``LlamaRotaryEmbedding`` rather than computing them, and whether it is causal depends on the attention
implementation: ``"sdpa"`` is causal when given no mask, ``"eager"`` adds whatever mask it is given (none means
*not* causal), so :func:`hf_forward` builds one. The layer returns a tensor (4.x: a tuple).
"""

from __future__ import annotations

import torch


def hf_config(args, attn_implementation: str = "sdpa"):
    """transformers' LlamaConfig of the same layer."""
    from transformers import LlamaConfig

    return LlamaConfig(
        hidden_size=args.dim,
        intermediate_size=args.ffn_dim,
        num_attention_heads=args.n_heads,
        num_key_value_heads=args.n_kv_heads,
        head_dim=args.head_dim,
        rms_norm_eps=args.norm_eps,
        hidden_act="silu",
        rope_parameters={"rope_type": "default", "rope_theta": args.rope_theta},
        attn_implementation=attn_implementation,
    )


def hf_layer(args, w, attn_implementation: str = "sdpa"):
    """transformers' LlamaDecoderLayer holding the weights ``w`` (on their device, in their dtype), in eval mode."""
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    H, KV, D = args.n_heads, args.n_kv_heads, args.head_dim
    layer = LlamaDecoderLayer(hf_config(args, attn_implementation), layer_idx=0)
    layer = layer.to(device=w.wo.device, dtype=w.wo.dtype).eval()
    q, k, v = w.wqkv.split([H * D, KV * D, KV * D])
    gate, up = w.w13.chunk(2)
    attn, mlp = layer.self_attn, layer.mlp
    with torch.no_grad():
        for param, value in [
            (layer.input_layernorm.weight, w.attn_norm),
            (attn.q_proj.weight, q),
            (attn.k_proj.weight, k),
            (attn.v_proj.weight, v),
            (attn.o_proj.weight, w.wo),
            (layer.post_attention_layernorm.weight, w.mlp_norm),
            (mlp.gate_proj.weight, gate),
            (mlp.up_proj.weight, up),
            (mlp.down_proj.weight, w.w2),
        ]:
            param.copy_(value)
    return layer


def hf_rope_tables(args, B: int, T: int, dtype, device=None):
    """(cos, sin), (B, T, D) each, from LlamaRotaryEmbedding: what HF's model hands every layer."""
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    if device is None:
        from .mode import current

        device = current().device
    rotary = LlamaRotaryEmbedding(hf_config(args)).to(device)
    positions = torch.arange(T, device=device)[None].expand(B, T)
    return rotary(torch.empty(0, device=device, dtype=dtype), positions)


def hf_forward(layer, x, cos, sin):
    """HF's layer, causal: "sdpa" is causal without a mask; "eager" needs one (-inf above the diagonal)."""
    mask = None
    if layer.self_attn.config._attn_implementation == "eager":
        T = x.shape[1]
        mask = torch.full((T, T), float("-inf"), device=x.device, dtype=x.dtype).triu(1)[None, None]
    with torch.no_grad():
        out = layer(x, attention_mask=mask, position_embeddings=(cos, sin))
    return out[0] if isinstance(out, tuple) else out
