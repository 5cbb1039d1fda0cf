"""Lesson 06 for `make bench`: the solution's kernels and the assembled Llama layer, prefill, bf16.

- RMSNorm on 8192 x 2048 (the B=8, T=1024 layer's activations) and 65536 x 2048 (256 MB, past L2) against a copy
  of the same bytes (the ceiling for an op that reads its input once and writes its output once) and against the
  unfused PyTorch reference;
  bytes = read + write of x (the weight is 4 KB).
- RoPE (q and k of the 1B layer) against Hugging Face's apply_rotary_pos_emb; SwiGLU against F.silu(g) * u.
- RMSNorm with the residual add fused (reads x and r, writes the sum and the norm) against x + r then the reference.
- Attention, causal and not, D = 128 at T = 1024..4096 and the 1B layer's D = 64 with 4 KV heads, against torch's
  scaled_dot_product_attention on the same tensors (its (B, H, T, D) layout as free transposed views); which SDPA
  backend ran is read from the profiler's kernel names and written into the baseline's label.
  flops = 4 B H T^2 D, halved when causal.
- The whole layer (TinyLlama-1.1B shape) at (B=1, T=2048) and (B=8, T=1024) against transformers'
  LlamaDecoderLayer with the same weights, eager ("sdpa" attention, HF's default) and under torch.compile
  (dynamic=False, compiled and warmed up before timing); and once more with both sides in CUDA graphs (ours captured
  with torch.cuda.graph, HF's compiled with mode="reduce-overhead"), which removes launch overhead from both.
  flops = the projections' and attention's (layer_costs).
"""

import torch
import torch.nn.functional as F

from utils.lessons import load
from utils.timing import bench

DTYPE = torch.bfloat16


def _row(op, shape, ms, baseline, baseline_ms, nbytes=None, flops=None):
    return {
        "lesson": "06",
        "op": op,
        "shape": shape,
        "dtype": "bf16",
        "impl": "triton",
        "ms": ms,
        "baseline": baseline,
        "baseline_ms": baseline_ms,
        "bytes": nbytes,
        "flops": flops,
    }


def _ms(fn):
    return bench(fn).ms


def kernels(L) -> list[dict]:
    rows = []
    args = L.LLAMA_1B
    # -- RMSNorm: against a copy of the same bytes, and against the unfused reference
    w = torch.randn(args.dim, device="cuda", dtype=DTYPE)
    for M in (8192, 65536):  # the layer's activations (32 MB, partly L2-resident) and a 256 MB, HBM-bound one
        x = torch.randn(M, args.dim, device="cuda", dtype=DTYPE)
        nbytes = 2 * x.nbytes
        ours = _ms(lambda: L.rmsnorm(x, w))
        shape = f"M={M} C={args.dim}"
        rows.append(_row("rmsnorm", shape, ours, "copy (same bytes)", _ms(lambda: x.clone()), nbytes))
        rows.append(_row("rmsnorm", shape, ours, "PyTorch (unfused)", _ms(lambda: L.rmsnorm_ref(x, w, 1e-6)), nbytes))
    r = torch.randn_like(x)  # with the residual add fused: read x and r, write the sum and the norm
    rows.append(
        _row(
            "residual + rmsnorm",
            shape,
            _ms(lambda: L.rmsnorm(x, w, residual=r)),
            "PyTorch x + r, then rmsnorm (unfused)",
            _ms(lambda: L.rmsnorm_ref(x, w, 1e-6, residual=r)),
            2 * nbytes,
        )
    )
    # -- RoPE on q and k, against HF's apply_rotary_pos_emb on its (B, heads, T, D) layout
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    B, T, H, KV, D = 1, 2048, args.n_heads, args.n_kv_heads, args.head_dim
    q, k, _ = L._qkv(B, T, H, KV, D, DTYPE)
    cos, sin = L.rope_tables(T, D, dtype=DTYPE)
    qt, kt = q.transpose(1, 2), k.transpose(1, 2)
    nbytes = 2 * (q.numel() + k.numel()) * 2 + 2 * cos.nbytes
    rows.append(
        _row(
            "rope q+k",
            f"B={B} T={T} H={H} KV={KV} D={D}",
            _ms(lambda: L.rope(q, k, cos, sin)),
            "HF apply_rotary_pos_emb",
            _ms(lambda: apply_rotary_pos_emb(qt, kt, cos, sin)),
            nbytes,
        )
    )
    # -- SwiGLU
    gu = torch.randn(8192, 2 * args.ffn_dim, device="cuda", dtype=DTYPE)
    g, u = gu.chunk(2, dim=-1)
    nbytes = gu.nbytes * 3 // 2
    rows.append(
        _row(
            "swiglu",
            f"M=8192 F={args.ffn_dim}",
            _ms(lambda: L.swiglu(gu)),
            "PyTorch silu(g) * u",
            _ms(lambda: F.silu(g) * u),
            nbytes,
        )
    )
    # -- attention: D = 128 (the targets), and the 1B layer's own D = 64 with grouped-query heads
    for B, T, H, KV, D in [
        (1, 2048, 32, 32, 128),
        (1, 4096, 32, 32, 128),
        (8, 1024, 32, 32, 128),
        (1, 2048, 32, 4, 128),
        (1, 2048, 32, 4, 64),
        (8, 1024, 32, 4, 64),
    ]:
        q, k, v = L._qkv(B, T, H, KV, D, DTYPE)
        qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
        nbytes = 2 * (2 * q.numel() + 2 * k.numel())
        for causal in (True, False):

            def sdpa():
                return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal, enable_gqa=KV != H)

            shape = f"B={B} H={H} KV={KV} T={T} D={D}"
            rows.append(
                _row(
                    "attention causal" if causal else "attention",
                    shape,
                    _ms(lambda: L.attention(q, k, v, causal=causal)),
                    f"SDPA ({L.sdpa_backend(sdpa)})",
                    _ms(sdpa),
                    nbytes,
                    L.attention_flops(B, H, T, D, causal),
                )
            )
    return rows


def _graphed(fn):
    """fn captured once in a CUDA graph (after warm-up on a side stream, as torch.cuda.graph asks); returns replay."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


def layer(L) -> list[dict]:
    rows = []
    args = L.LLAMA_1B
    for B, T in [(1, 2048), (8, 1024)]:
        w = L.random_weights(args, DTYPE)
        x = torch.randn(B, T, args.dim, device="cuda", dtype=DTYPE)
        cos, sin = L.hf_rope_tables(args, B, T, DTYPE)
        hf = L.hf_layer(args, w)
        torch.compiler.reset()
        compiled = torch.compile(hf, dynamic=False)
        L.hf_forward(compiled, x, cos, sin)  # compile outside the timing
        costs = L.layer_costs(args, B, T)
        flops, nbytes = sum(c[1] for c in costs), sum(c[2] for c in costs)
        ours = _ms(lambda: L.llama_layer(x, w, args, cos, sin, L.TRITON_OPS))
        shape = f"B={B} T={T} (TinyLlama-1.1B layer)"
        rows.append(
            _row("llama layer", shape, ours, "HF eager", _ms(lambda: L.hf_forward(hf, x, cos, sin)), nbytes, flops)
        )
        rows.append(
            _row(
                "llama layer",
                shape,
                ours,
                "HF torch.compile",
                _ms(lambda: L.hf_forward(compiled, x, cos, sin)),
                nbytes,
                flops,
            )
        )
        # -- both sides with CUDA graphs: launch overhead gone, only GPU time left
        torch.compiler.reset()
        graphed_hf = torch.compile(hf, mode="reduce-overhead", dynamic=False)
        for _ in range(3):  # record and warm the graph outside the timing
            L.hf_forward(graphed_hf, x, cos, sin)
        row = _row(
            "llama layer",
            shape,
            _ms(_graphed(lambda: L.llama_layer(x, w, args, cos, sin, L.TRITON_OPS))),
            "HF torch.compile (reduce-overhead: CUDA graph)",
            _ms(lambda: L.hf_forward(graphed_hf, x, cos, sin)),
            nbytes,
            flops,
        )
        row["impl"] = "triton (CUDA graph)"
        rows.append(row)
        hf = compiled = graphed_hf = None
    return rows


def run(ceil) -> list[dict]:
    L = load("06")
    with torch.no_grad():
        return kernels(L) + layer(L)
