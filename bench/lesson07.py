"""Lesson 07 for `make bench`: the layer's kernels and the assembled Llama layer (TinyLlama-1.1B shape), bf16.

- RMSNorm on 8192 x 2048 (the B=8, T=1024 layer's activations) and 65536 x 2048 (256 MB, past L2) against a copy
  of the same bytes (the ceiling for an op that reads its input once and writes its output once) and against the
  unfused PyTorch reference; bytes = read + write of x (the weight is 4 KB).
- RMSNorm with the residual add fused (reads x and r, writes the sum and the norm) against x + r then the reference.
- RoPE (q and k of the 1B layer) against Hugging Face's apply_rotary_pos_emb; SwiGLU against F.silu(g) * u.
- RMSNorm, the residual add + RMSNorm, RoPE and SwiGLU once more against Liger-Kernel's Triton kernels for the same
  ops (LigerRMSNormFunction, LigerFusedAddRMSNormFunction, LigerRopeFunction, LigerFusedGateUpSiLUMulFunction), when
  liger_kernel is installed (pure Python, optional: its rows are left out without it).
- The whole layer at (B=1, T=2048) and (B=8, T=1024) against transformers' LlamaDecoderLayer with the same weights,
  eager ("sdpa" attention, HF's default) and under torch.compile (dynamic=False, compiled and warmed up before
  timing); and once more with both sides in CUDA graphs (ours captured with torch.cuda.graph, HF's compiled with
  mode="reduce-overhead"), which removes launch overhead from both. flops and bytes: layer_costs.
"""

import torch
import torch.nn.functional as F

from bench.common import Row, graphed, paired, with_liger
from lessons.l07_llm_layer import (
    LLAMA_1B,
    TRITON_OPS,
    layer_costs,
    llama_layer,
    random_qkv,
    random_weights,
    rmsnorm,
    rmsnorm_ref,
    rope,
    rope_tables,
    swiglu,
)
from utils.hf import hf_forward, hf_layer, hf_rope_tables

DTYPE = torch.bfloat16
EPS = LLAMA_1B.norm_eps


def kernels() -> list[Row]:
    rows, args = [], LLAMA_1B
    common = {"lesson": "07", "dtype": "bf16"}
    w = torch.randn(args.dim, device="cuda", dtype=DTYPE)
    for M in (8192, 65536):  # the layer's activations (32 MB, partly L2-resident) and a 256 MB, HBM-bound one
        x = torch.randn(M, args.dim, device="cuda", dtype=DTYPE)
        shape, nbytes = f"M={M} C={args.dim}", 2 * x.nbytes

        def ours(x=x):
            return rmsnorm(x, w, EPS)

        rows += paired(
            {"triton": ours}, ("copy (same bytes)", x.clone), op="rmsnorm", shape=shape, bytes=nbytes, **common
        )
        rows += paired(
            {"triton": ours},
            ("PyTorch (unfused)", lambda x=x: rmsnorm_ref(x, w, EPS)),
            op="rmsnorm",
            shape=shape,
            bytes=nbytes,
            **common,
        )
        rows += with_liger(
            "07",
            "rms_norm",
            "LigerRMSNormFunction",
            lambda op, x=x, ours=ours, shape=shape, nbytes=nbytes: paired(
                {"triton": ours}, ("Liger-Kernel", lambda: op.apply(x, w, EPS)), op="rmsnorm", shape=shape,
                bytes=nbytes, **common,
            ),
        )  # fmt: skip
    r = torch.randn_like(x)  # with the residual add fused: read x and r, write the sum and the norm
    rows += paired(
        {"triton": lambda: rmsnorm(x, w, EPS, residual=r)},
        ("PyTorch x + r, then rmsnorm (unfused)", lambda: rmsnorm_ref(x, w, EPS, residual=r)),
        op="residual + rmsnorm",
        shape=shape,
        bytes=2 * nbytes,
        **common,
    )
    rows += with_liger(
        "07",
        "fused_add_rms_norm",
        "LigerFusedAddRMSNormFunction",
        lambda op: paired(
            {"triton": lambda: rmsnorm(x, w, EPS, residual=r)}, ("Liger-Kernel", lambda: op.apply(x, r, w, EPS)),
            op="residual + rmsnorm", shape=shape, bytes=2 * nbytes, **common,
        ),
    )  # fmt: skip
    x = r = None
    # -- RoPE on q and k, against HF's apply_rotary_pos_emb on its (B, heads, T, D) layout
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    B, T, H, KV, D = 1, 2048, args.n_heads, args.n_kv_heads, args.head_dim
    q, k, _ = random_qkv(B, T, H, KV, D, DTYPE, device="cuda")
    cos, sin = rope_tables(T, D, dtype=DTYPE, device="cuda")
    qt, kt = q.transpose(1, 2), k.transpose(1, 2)
    rows += paired(
        {"triton": lambda: rope(q, k, cos, sin)},
        ("HF apply_rotary_pos_emb", lambda: apply_rotary_pos_emb(qt, kt, cos, sin)),
        op="rope q+k",
        shape=f"B={B} T={T} H={H} KV={KV} D={D}",
        bytes=2 * (q.numel() + k.numel()) * q.element_size() + 2 * cos.nbytes,
        **common,
    )
    # Liger rotates q and k in place (its kernel writes over its inputs): give it copies of its own
    lq, lk = qt.clone(), kt.clone()
    rows += with_liger(
        "07",
        "rope",
        "LigerRopeFunction",
        lambda op: paired(
            {"triton": lambda: rope(q, k, cos, sin)}, ("Liger-Kernel", lambda: op.apply(lq, lk, cos, sin)),
            op="rope q+k", shape=f"B={B} T={T} H={H} KV={KV} D={D}",
            bytes=2 * (q.numel() + k.numel()) * q.element_size() + 2 * cos.nbytes, **common,
        ),
    )  # fmt: skip
    # -- SwiGLU
    gu = torch.randn(8192, 2 * args.ffn_dim, device="cuda", dtype=DTYPE)
    g, u = gu.chunk(2, dim=-1)
    rows += paired(
        {"triton": lambda: swiglu(gu)},
        ("PyTorch silu(g) * u", lambda: F.silu(g) * u),
        op="swiglu",
        shape=f"M=8192 F={args.ffn_dim}",
        bytes=gu.nbytes * 3 // 2,
        **common,
    )
    rows += with_liger(
        "07",
        "swiglu",
        "LigerFusedGateUpSiLUMulFunction",
        lambda op: paired(
            {"triton": lambda: swiglu(gu)}, ("Liger-Kernel", lambda: op.apply(gu)), op="swiglu",
            shape=f"M=8192 F={args.ffn_dim}", bytes=gu.nbytes * 3 // 2, **common,
        ),
    )  # fmt: skip
    return rows


def layer() -> list[Row]:
    rows, args = [], LLAMA_1B
    for B, T in [(1, 2048), (8, 1024)]:
        w = random_weights(args, DTYPE, device="cuda")
        x = torch.randn(B, T, args.dim, device="cuda", dtype=DTYPE)
        cos, sin = hf_rope_tables(args, B, T, DTYPE, device="cuda")
        hf = hf_layer(args, w)
        costs = layer_costs(args, B, T)
        common = {
            "lesson": "07",
            "op": "llama layer",
            "shape": f"B={B} T={T} (TinyLlama-1.1B layer)",
            "dtype": "bf16",
            "bytes": sum(c[2] for c in costs),
            "flops": sum(c[1] for c in costs),
        }

        def ours():
            return llama_layer(x, w, args, cos, sin, TRITON_OPS)

        rows += paired({"triton": ours}, ("HF eager", lambda: hf_forward(hf, x, cos, sin)), **common)
        torch.compiler.reset()
        compiled = torch.compile(hf, dynamic=False)
        hf_forward(compiled, x, cos, sin)  # compile outside the timing
        rows += paired({"triton": ours}, ("HF torch.compile", lambda: hf_forward(compiled, x, cos, sin)), **common)
        # -- both sides with CUDA graphs: launch overhead gone, only GPU time left
        torch.compiler.reset()
        graphed_hf = torch.compile(hf, mode="reduce-overhead", dynamic=False)
        for _ in range(3):  # record and warm the graph outside the timing
            hf_forward(graphed_hf, x, cos, sin)
        rows += paired(
            {"triton (CUDA graph)": graphed(ours)},
            ("HF torch.compile (reduce-overhead: CUDA graph)", lambda: hf_forward(graphed_hf, x, cos, sin)),
            **common,
        )
        hf = compiled = graphed_hf = None
    return rows


def run() -> list[Row]:
    with torch.no_grad():
        return kernels() + layer()
