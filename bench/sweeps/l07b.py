"""Lesson 07 sweep b, 2026-11-28 (written, not yet run on a GPU): SwiGLU in the gate/up matmul's epilogue, a fusion
Inductor does not make (issue 12: the decoder layer >= 1.1x Hugging Face under torch.compile; results/h100-2026-11-28-s11
has 1.05x at B=1 T=2048 and 1.01x at B=8 T=1024).

Why: lesson 07's layer computes h @ w13^T with cuBLAS, writing the (M, 2F) gate/up product to memory, then reads it
back in swiglu_kernel to write silu(gate) * up (M, F). At B=8 T=1024 (M = 8192, F = 5632) that round trip moves
about 0.37 GB: some 0.12 ms of a 1.35 ms layer at 3 TB/s. With SwiGLU in the matmul's epilogue only (M, F) is
written. For the epilogue to hold each gate next to its up, the rows of w13 are interleaved once, when the weights
are prepared (gate 0, up 0, gate 1, up 1, ...): an output tile of BLOCK_N columns is BLOCK_N / 2 gate/up pairs,
split in registers (tl.reshape then tl.split), each rounded to the dtype as cuBLAS's output would be, then
silu(gate) * up, stored through a TMA descriptor. The kernel is otherwise lesson 05's persistent TMA kernel (extra
step 7), with the weight read (2F, K) row-major (its transpose is what tl.dot sees).

What it times (bf16, TinyLlama-1.1B's layer, random weights; every candidate first checked against the unfused path):
  the MLP's first half at M = 2048 and 8192: cuBLAS h @ w13^T then lesson 07's swiglu, against matmul_swiglu at
  each tile; then the whole layer at B=1 T=2048 and B=8 T=1024: lesson 07's llama_layer (TRITON_OPS), the same with
  matmul_swiglu at the best tile, and transformers' LlamaDecoderLayer under torch.compile(mode="reduce-overhead"),
  each replayed from a CUDA graph, L2 cleared before each repetition, HF timed before and after each of ours.

Run from the repo root: ``PYTHONPATH=$PWD python3 bench/sweeps/l07b.py`` on a GPU with TMA (< 200 s),
``... l07b.py --cpu`` under the interpreter (a tiny layer, no timings: checks only).
"""

import os
import sys
import time

T0 = time.time()
CPU = "--cpu" in sys.argv
if CPU:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

import utils  # noqa: E402
from lessons import l05_matmul as L5  # noqa: E402
from lessons import l07_llm_layer as L7  # noqa: E402
from lessons.l05_matmul import grouped_tile  # noqa: E402

ENV = utils.mode.current()
LINES = []


def say(line=""):
    print(line, flush=True)
    LINES.append(line)
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "sweep_l07b.txt"), "w") as f:
            f.write("\n".join(LINES) + "\n")


def gtime(fn):
    """GPU ms of fn() replayed from a CUDA graph, L2 cleared before each repetition; None on the CPU."""
    if CPU:
        fn()
        return None
    import triton.testing

    from bench.common import graphed

    return triton.testing.do_bench(graphed(fn), warmup=5, rep=30)


@triton.jit
def _tile_product(a_desc, w_desc, pid_m, pid_n, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  BLOCK_K: tl.constexpr):  # fmt: skip
    """One (BLOCK_M, BLOCK_N) tile of a w^T in fp32, a (M, K) and w (N, K) row-major, read through descriptors."""
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = a_desc.load([pid_m * BLOCK_M, k])
        w = w_desc.load([pid_n * BLOCK_N, k])
        acc = tl.dot(a, w.T, acc)
    return acc


@triton.jit
def matmul_swiglu_kernel(a_ptr, w_ptr, c_ptr, M, F, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                         BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, NUM_SMS: tl.constexpr):  # fmt: skip
    """c (M, F) = silu(a w1^T) * (a w3^T) for w (2F, K) whose rows alternate w1's and w3's (interleave)."""
    N = 2 * F
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
    w_desc = tl.make_tensor_descriptor(w_ptr, shape=[N, K], strides=[K, 1], block_shape=[BLOCK_N, BLOCK_K])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, F], strides=[F, 1], block_shape=[BLOCK_M, BLOCK_N // 2])
    num_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    for tile in tl.range(tl.program_id(0), num_tiles, NUM_SMS, flatten=True):
        pid_m, pid_n = grouped_tile(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = _tile_product(a_desc, w_desc, pid_m, pid_n, K, BLOCK_M, BLOCK_N, BLOCK_K)
        # -- epilogue: columns 2j and 2j + 1 are gate j and up j; each rounded as a matmul's output, then SwiGLU
        gate, up = tl.split(tl.reshape(acc, (BLOCK_M, BLOCK_N // 2, 2)))
        gate = gate.to(c_ptr.dtype.element_ty).to(tl.float32)
        up = up.to(c_ptr.dtype.element_ty).to(tl.float32)
        y = gate * tl.sigmoid(gate) * up
        c_desc.store([pid_m * BLOCK_M, pid_n * (BLOCK_N // 2)], y.to(c_ptr.dtype.element_ty))


@triton.jit
def matmul_rope_kernel(a_ptr, w_ptr, c_ptr, cos_ptr, sin_ptr, M, N, K, T, stride_cb, stride_ct, ROTATED,
                       HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                       GROUP_M: tl.constexpr, NUM_SMS: tl.constexpr):  # fmt: skip
    """c (M, N) = a w^T with RoPE applied to the first ROTATED heads of each row (q and k; v's heads after them as
    they are): row m is token m % T of sequence m // T, pairs (i, i + HEAD_DIM / 2) as lesson 07's rope."""
    HALF: tl.constexpr = HEAD_DIM // 2
    HEADS: tl.constexpr = BLOCK_N // HEAD_DIM  # a tile holds whole heads
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
    w_desc = tl.make_tensor_descriptor(w_ptr, shape=[N, K], strides=[K, 1], block_shape=[BLOCK_N, BLOCK_K])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N])
    num_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    for tile in tl.range(tl.program_id(0), num_tiles, NUM_SMS, flatten=True):
        pid_m, pid_n = grouped_tile(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = _tile_product(a_desc, w_desc, pid_m, pid_n, K, BLOCK_M, BLOCK_N, BLOCK_K)
        acc = acc.to(c_ptr.dtype.element_ty).to(tl.float32)  # rounded as the matmul's output would be
        # -- epilogue: each head's two halves turned by the angles of its token
        rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        angle = (rows // T).to(tl.int64)[:, None] * stride_cb + (rows % T)[:, None] * stride_ct
        angle += tl.arange(0, HALF)[None, :]
        in_m = (rows < M)[:, None]
        c = tl.load(cos_ptr + angle, mask=in_m, other=0.0).to(tl.float32)[:, None, :]  # (BLOCK_M, 1, HALF)
        s = tl.load(sin_ptr + angle, mask=in_m, other=0.0).to(tl.float32)[:, None, :]
        x1, x2 = tl.split(tl.permute(tl.reshape(acc, (BLOCK_M, HEADS, 2, HALF)), (0, 1, 3, 2)))
        turn = (pid_n * HEADS + tl.arange(0, HEADS) < ROTATED)[None, :, None]  # (1, HEADS, 1): q and k heads
        y1 = tl.where(turn, x1 * c - x2 * s, x1)
        y2 = tl.where(turn, x2 * c + x1 * s, x2)
        y = tl.reshape(tl.permute(tl.join(y1, y2), (0, 1, 3, 2)), (BLOCK_M, BLOCK_N))
        c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], y.to(c_ptr.dtype.element_ty))


def interleave(w13):
    """w13 (2F, K), gate rows then up rows -> (2F, K) with gate j and up j side by side (rows 2j and 2j + 1)."""
    F = w13.shape[0] // 2
    return torch.stack([w13[:F], w13[F:]], dim=1).reshape(w13.shape).contiguous()


TILE = (128, 256, 64, 8, 3, 8)  # BLOCK_M, BLOCK_N, BLOCK_K, warps, stages, GROUP_M: lesson 05's first TMA config
TILES = [TILE, (128, 128, 64, 4, 4, 8), (128, 256, 64, 8, 4, 8), (256, 128, 64, 8, 3, 8), (128, 256, 64, 8, 3, 16)]


def matmul_swiglu(h, w13i, tile=None, out=None):
    """silu(h w1^T) * (h w3^T), (M, F), from h (M, K) and interleave(w13)."""
    (M, K), (N, K2) = h.shape, w13i.shape
    if K2 != K or N % 2:
        raise ValueError(f"w13i must be (2F, {K}), got {tuple(w13i.shape)}")
    F = N // 2
    for name, t in (("h", h), ("w13i", w13i)):
        if not L5.rows_on_16_bytes(t) or t.stride(1) != 1:
            raise ValueError(f"{name} must be contiguous with rows on 16-byte boundaries for TMA")
    out = torch.empty(M, F, device=h.device, dtype=h.dtype) if out is None else out
    BM, BN, BK, warps, stages, G = tile or (TILE if not CPU else (16, 32, 16, 4, 1, 2))
    triton.set_allocator(L5.tma_scratch)
    programs = min(L5.NUM_SMS, triton.cdiv(M, BM) * triton.cdiv(N, BN))
    matmul_swiglu_kernel[(programs,)](h, w13i, out, M, F, K, BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK, GROUP_M=G,
                                      NUM_SMS=programs, num_warps=warps, num_stages=stages)  # fmt: skip
    return out


def matmul_rope(h, wqkv, cos, sin, args, T, tile=None):
    """h (M, C) @ wqkv^T, (M, (H + 2 KV) D), with q's and k's heads turned by RoPE (cos, sin: (B or 1, T, D))."""
    (M, K), N = h.shape, wqkv.shape[0]
    D = args.head_dim
    for name, t in (("h", h), ("wqkv", wqkv)):
        if not L5.rows_on_16_bytes(t) or t.stride(1) != 1:
            raise ValueError(f"{name} must be contiguous with rows on 16-byte boundaries for TMA")
    out = torch.empty(M, N, device=h.device, dtype=h.dtype)
    BM, BN, BK, warps, stages, G = tile or (TILE if not CPU else (16, 32, 16, 4, 1, 2))
    BN = max(BN, D)
    if BN % D:
        raise ValueError(f"BLOCK_N={BN} must hold whole heads of {D}")
    triton.set_allocator(L5.tma_scratch)
    programs = min(L5.NUM_SMS, triton.cdiv(M, BM) * triton.cdiv(N, BN))
    matmul_rope_kernel[(programs,)](h, wqkv, out, cos, sin, M, N, K, T, cos.stride(0) if cos.shape[0] > 1 else 0,
                                    cos.stride(1), args.n_heads + args.n_kv_heads, HEAD_DIM=D, BLOCK_M=BM,
                                    BLOCK_N=BN, BLOCK_K=BK, GROUP_M=G, NUM_SMS=programs, num_warps=warps,
                                    num_stages=stages)  # fmt: skip
    return out


def layer_fused(x, w, args, cos, sin, w13i, tile=None, rope_tile=False):
    """lesson 07's llama_layer with TRITON_OPS, the gate/up matmul and SwiGLU in one kernel (matmul_swiglu); with a
    rope_tile (False: not), the qkv matmul and RoPE in one kernel too (matmul_rope)."""
    ops = L7.TRITON_OPS
    B, T, C = x.shape
    H, KV, D = args.n_heads, args.n_kv_heads, args.head_dim
    x = x.reshape(B * T, C)
    h = ops.rmsnorm(x, w.attn_norm, args.norm_eps)
    if rope_tile is False:
        q, k, v = (h @ w.wqkv.T).view(B, T, H + 2 * KV, D).split([H, KV, KV], dim=2)
        q, k = ops.rope(q, k, cos, sin)
    else:
        q, k, v = matmul_rope(h, w.wqkv, cos, sin, args, T, rope_tile).view(B, T, H + 2 * KV, D).split([H, KV, KV], 2)
    y = ops.attention(q, k, v, causal=True).reshape(B * T, H * D) @ w.wo.T
    h, x = ops.rmsnorm(y, w.mlp_norm, args.norm_eps, residual=x)
    return x.addmm_(matmul_swiglu(h, w13i, tile), w.w2.T).view(B, T, C)


def kernel_rows(label, unfused, fused, tiles):
    """Each tile of fused(tile) checked against unfused() and timed against it (graphs); the fastest tile or None."""
    want = unfused().float()
    base = gtime(unfused)
    if base is not None:
        say(f"   {label:26s} {base * 1e3:8.1f} us")
    results = []
    for tile in tiles:
        try:
            got = fused(tile).float()
            rel = float((got - want).norm() / want.norm())
            if not rel < tol:
                say(f"   {tile}: FAIL ({rel:.1e} from the unfused path)")
                continue
            ms = gtime(lambda t=tile: fused(t))
        except Exception as e:  # noqa: BLE001
            say(f"   {tile}: ERROR {type(e).__name__}: {str(e).splitlines()[0][:150] if str(e) else ''}")
            continue
        if ms is None:
            say(f"   {tile}: checked ({rel:.1e} from the unfused path)")
            continue
        after = gtime(unfused)
        say(f"   {str(tile):26s} {ms * 1e3:8.1f} us  x unfused {(base + after) / 2 / ms:.3f}  ({rel:.1e})")
        base = after
        results.append((ms, tile))
    return min(results)[1] if results else None


say(
    f"lesson 07 sweep b (SwiGLU in the gate/up matmul's epilogue) on "
    f"{ENV.gpu_name if ENV.is_gpu else 'CPU (interpreter)'}, torch {torch.__version__}, triton {triton.__version__}"
)
device = "cpu" if CPU else "cuda"
dtype = torch.float32 if CPU else torch.bfloat16
args = L7.TINY if CPU else L7.LLAMA_1B
tol = 1e-4 if CPU else 3e-2

# -- the kernels alone: against cuBLAS (or the CPU's matmul) and lesson 07's swiglu / rope
best, best_rope = (TILE, TILE) if not CPU else (None, None)
for M in (37, 64) if CPU else (2048, 8192):
    gen = torch.Generator(device=device).manual_seed(M)
    h = torch.randn(M, args.dim, device=device, dtype=dtype, generator=gen)
    w13 = torch.randn(2 * args.ffn_dim, args.dim, device=device, dtype=dtype, generator=gen) / args.dim**0.5
    w13i = interleave(w13)
    say(f"== gate/up + SwiGLU, M {M}, K {args.dim}, F {args.ffn_dim}")
    got = kernel_rows("cuBLAS + swiglu", lambda: L7.swiglu(h @ w13.T), lambda t: matmul_swiglu(h, w13i, t),
                      [None] if CPU else TILES)  # fmt: skip
    best = got or best
    H, KV, D = args.n_heads, args.n_kv_heads, args.head_dim
    wqkv = torch.randn((H + 2 * KV) * D, args.dim, device=device, dtype=dtype, generator=gen) / args.dim**0.5
    Bq, Tq = (1, M) if M % 2 else (2, M // 2)
    cos, sin = L7.rope_tables(Tq, D, dtype=dtype, device=device)

    def unfused_qkv():
        q, k, v = (h @ wqkv.T).view(Bq, Tq, H + 2 * KV, D).split([H, KV, KV], dim=2)
        q, k = L7.rope(q, k, cos, sin)
        return torch.cat([q, k, v], dim=2).view(M, -1)

    say(f"== qkv + RoPE, M {M} (B={Bq}, T={Tq}), K {args.dim}, heads {H} + {KV} + {KV} of {D}")
    got = kernel_rows("cuBLAS + rope (and a cat)", unfused_qkv, lambda t: matmul_rope(h, wqkv, cos, sin, args, Tq, t),
                      [None] if CPU else TILES)  # fmt: skip
    best_rope = got or best_rope

# -- the layer
for B, T in [(1, 37), (2, 16)] if CPU else [(1, 2048), (8, 1024)]:
    w = L7.random_weights(args, dtype, device=device)
    x = torch.randn(B, T, args.dim, device=device, dtype=dtype)
    cos, sin = L7.rope_tables(T, args.head_dim, dtype=dtype, device=device)
    w13i = interleave(w.w13)
    ref = L7.llama_layer(x, w, args, cos, sin, L7.TRITON_OPS)
    variants = {
        "lesson 07's layer": lambda: L7.llama_layer(x, w, args, cos, sin, L7.TRITON_OPS),
        "+ matmul_swiglu": lambda: layer_fused(x, w, args, cos, sin, w13i, best),
        "+ matmul_swiglu, matmul_rope": lambda: layer_fused(x, w, args, cos, sin, w13i, best, best_rope),
    }
    say(f"== the layer, B={B} T={T}")
    ok = {}
    for label, fn in variants.items():
        rel = float((fn().float() - ref.float()).norm() / ref.float().norm())
        ok[label] = rel < tol
        say(f"   {label:30s} {rel:.1e} from lesson 07's" + ("" if ok[label] else "  <-- FAIL"))
    if CPU:
        continue
    import triton.testing

    from utils.hf import hf_forward, hf_layer, hf_rope_tables

    hcos, hsin = hf_rope_tables(args, B, T, dtype, device="cuda")
    torch.compiler.reset()
    hf = torch.compile(hf_layer(args, w), mode="reduce-overhead", dynamic=False)
    for _ in range(3):
        hf_forward(hf, x, hcos, hsin)

    def hf_time():
        return triton.testing.do_bench(lambda: hf_forward(hf, x, hcos, hsin), warmup=5, rep=30)

    base = hf_time()
    for label, fn in variants.items():
        if not ok[label]:
            continue
        ms = gtime(fn)
        after = hf_time()
        say(f"   {label:30s} {ms * 1e3:8.1f} us  x HF compiled (CUDA graph) {(base + after) / 2 / ms:.3f}")
        base = after
    hf = None
say(f"total {time.time() - T0:.0f} s")
