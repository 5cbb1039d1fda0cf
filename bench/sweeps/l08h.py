"""Lesson 08 sweep h, 2026-11-28 (written, not yet run on a GPU): the batch-1 decode step with one persistent kernel a
layer for its four GEMVs, three launches a layer instead of six (issues 15 and 11).

Why: see sweep l08g.py, which measures a grid barrier against a launch boundary on the MLPs alone. This is the
step itself. Lesson 08's step launches, a layer: qkv + RoPE + cache write, attention's two kernels, wo, gate/up,
down. Here, a layer: attention's two kernels (lesson 08's, launched early as the step does), then one kernel of one
program an SM that runs wo (+ the residual), a barrier, gate/up (+ RMSNorm, SwiGLU), a barrier, down (+ the
residual), a barrier, and the next layer's qkv (+ RMSNorm, RoPE, the cache write). The first layer's qkv and the
head are lesson 08's launches.

The GEMVs inside are lesson 08's loops written as helpers (decode_gemv_kernel's and decode_qkv_rope_kernel's,
"pipe" loop, the same tiles from DECODE_PIPE_SCHEDULES), the programs taking the row blocks of each phase in turn:
each output is summed in the same order as in lesson 08's kernels, so the logits must be the same bits as lesson
08's step (checked before any timing). The barrier is l08g.py's, imported (every program must be resident).

What it times, at TinyLlama's shape then Llama-3.2-1B's (random bf16 weights, context 640, the step replayed from a
CUDA graph, L2 cleared before each repetition): lesson 08's step as set, then the persistent step at 1, 2, 4 and 8
programs an SM (as many as can be resident); then the same for lesson 12's int8 and int4 steps (quantized_decode_step) and
persistent steps whose GEMVs are lesson 12's w8a16_decode_kernel and w4a16_decode_stream_kernel loops as helpers
(issue 15's int8 1.5x and int4 2x), up to 8 programs an SM.

Run from the repo root: ``timeout 300 python3 bench/sweeps/l08h.py`` with PYTHONPATH=$PWD on a GPU (< 240 s; the
timeout: a barrier whose programs are not all resident would spin), ``... l08h.py --cpu`` under the interpreter (a
tiny model, one program: checks only).
"""

import os
import sys
import time

T0 = time.time()
CPU = "--cpu" in sys.argv
if CPU:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

import utils  # noqa: E402
from bench.common import LLAMA_SHAPES, random_llama  # noqa: E402
from bench.sweeps.l08g import _grid_barrier  # noqa: E402  (the barrier l08g.py measures)
from lessons import l08_llama_model as L8  # noqa: E402
from lessons import l12_quantization as L12  # noqa: E402
from lessons.l08_llama_model import _rope_kv_epilogue  # noqa: E402
from lessons.l12_quantization import (  # noqa: E402
    _decode_epilogue,
    _int8_float,
    _rope_epilogue,
    _stream_word_sums,
    _x_by_code_and_sum,
)

ENV = utils.mode.current()
LINES = []


def say(line=""):
    print(line, flush=True)
    LINES.append(line)
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "sweep_l08h.txt"), "w") as f:
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
def _gemv_rows(x_ptr, w_ptr, norm_ptr, out_ptr, N, K, eps, rb, NORM: tl.constexpr, SWIGLU: tl.constexpr,
               BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PIPE: tl.constexpr):  # fmt: skip
    """decode_gemv_kernel's work for row block rb ("pipe" loop, or the masked loop alone with PIPE 1); without
    SWIGLU the residual add in place (out is the residual)."""
    rows = rb * BLOCK_N + tl.arange(0, BLOCK_N)
    keep = rows < N
    cols = tl.arange(0, BLOCK_K)
    w_rows = w_ptr + tl.minimum(rows, N - 1).to(tl.int64)[:, None] * K + cols[None, :]
    acc = tl.zeros([BLOCK_N, BLOCK_K], tl.float32)
    acc_up = tl.zeros([BLOCK_N, BLOCK_K], tl.float32)
    sq = tl.zeros([BLOCK_K], tl.float32)
    k_start = 0
    if PIPE > 1:
        full = (K // BLOCK_K) * BLOCK_K
        for k in tl.range(0, full, BLOCK_K, num_stages=PIPE):
            w = tl.load(w_rows + k)
            xk = tl.load(x_ptr + k + cols).to(tl.float32)
            if NORM:
                sq += xk * xk
                xk = xk * tl.load(norm_ptr + k + cols).to(tl.float32)
            acc += w.to(tl.float32) * xk[None, :]
            if SWIGLU:
                acc_up += tl.load(w_rows + N * K + k).to(tl.float32) * xk[None, :]
        k_start = full
    for k in range(k_start, K, BLOCK_K):
        in_k = k + cols < K
        mask = keep[:, None] & in_k[None, :]
        w = tl.load(w_rows + k, mask=mask, other=0.0)
        if SWIGLU:
            up = tl.load(w_rows + N * K + k, mask=mask, other=0.0)
        xk = tl.load(x_ptr + k + cols, mask=in_k, other=0.0).to(tl.float32)
        if NORM:
            sq += xk * xk
            xk = xk * tl.load(norm_ptr + k + cols, mask=in_k, other=0.0).to(tl.float32)
        acc += w.to(tl.float32) * xk[None, :]
        if SWIGLU:
            acc_up += up.to(tl.float32) * xk[None, :]
    y = tl.sum(acc, 1)
    u = tl.sum(acc_up, 1)
    if NORM:
        rstd = tl.rsqrt(tl.sum(sq, 0) / K + eps)
        y *= rstd
        u *= rstd
    y = y.to(x_ptr.dtype.element_ty).to(tl.float32)
    if SWIGLU:
        u = u.to(x_ptr.dtype.element_ty).to(tl.float32)
        y = y * tl.sigmoid(y) * u
    else:
        y += tl.load(out_ptr + rows, mask=keep, other=0.0).to(tl.float32)
    tl.store(out_ptr + rows, y.to(out_ptr.dtype.element_ty), mask=keep)


@triton.jit
def _qkv_pairs(x_ptr, w_ptr, norm_ptr, cos_ptr, sin_ptr, pos_ptr, q_ptr, k_cache_ptr, v_cache_ptr, H, KV, K, eps,
               stride_ct, pb, HEAD_DIM: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_K: tl.constexpr,
               PIPE: tl.constexpr):  # fmt: skip
    """decode_qkv_rope_kernel's work for pair block pb (with the norm, "pipe" loop or the masked loop alone)."""
    pairs = pb * BLOCK_P + tl.arange(0, BLOCK_P)
    head = pairs // (HEAD_DIM // 2)
    i = pairs % (HEAD_DIM // 2)
    keep = head < H + 2 * KV
    cols = tl.arange(0, BLOCK_K)
    pair = tl.minimum(pairs, (H + 2 * KV) * (HEAD_DIM // 2) - 1)
    row = (pair // (HEAD_DIM // 2)) * HEAD_DIM + pair % (HEAD_DIM // 2)
    w_rows = w_ptr + row.to(tl.int64)[:, None] * K + cols[None, :]
    acc = tl.zeros([BLOCK_P, BLOCK_K], tl.float32)
    acc2 = tl.zeros([BLOCK_P, BLOCK_K], tl.float32)
    sq = tl.zeros([BLOCK_K], tl.float32)
    k_start = 0
    if PIPE > 1:
        full = (K // BLOCK_K) * BLOCK_K
        for k in tl.range(0, full, BLOCK_K, num_stages=PIPE):
            xk = tl.load(x_ptr + k + cols).to(tl.float32)
            sq += xk * xk
            xk = xk * tl.load(norm_ptr + k + cols).to(tl.float32)
            acc += tl.load(w_rows + k).to(tl.float32) * xk[None, :]
            acc2 += tl.load(w_rows + (HEAD_DIM // 2) * K + k).to(tl.float32) * xk[None, :]
        k_start = full
    for k in range(k_start, K, BLOCK_K):
        in_k = k + cols < K
        mask = keep[:, None] & in_k[None, :]
        w = tl.load(w_rows + k, mask=mask, other=0.0)
        w2 = tl.load(w_rows + (HEAD_DIM // 2) * K + k, mask=mask, other=0.0)
        xk = tl.load(x_ptr + k + cols, mask=in_k, other=0.0).to(tl.float32)
        sq += xk * xk
        xk = xk * tl.load(norm_ptr + k + cols, mask=in_k, other=0.0).to(tl.float32)
        acc += w.to(tl.float32) * xk[None, :]
        acc2 += w2.to(tl.float32) * xk[None, :]
    rstd = tl.rsqrt(tl.sum(sq, 0) / K + eps)
    y1 = (tl.sum(acc, 1) * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
    y2 = (tl.sum(acc2, 1) * rstd).to(x_ptr.dtype.element_ty).to(tl.float32)
    _rope_kv_epilogue(y1, y2, head, i, keep, H, KV, cos_ptr, sin_ptr, pos_ptr, q_ptr, k_cache_ptr, v_cache_ptr,
                      stride_ct, 2**31 - 1, HEAD_DIM)  # fmt: skip


@triton.jit
def layer_gemvs_kernel(
    x_ptr, o_ptr, g_ptr, wo_ptr, mlp_norm_ptr, w13_ptr, w2_ptr, attn_norm_ptr, wqkv_ptr, cos_ptr, sin_ptr, pos_ptr,
    q_ptr, k_cache_ptr, v_cache_ptr, sync_ptr, C, HD, FF, H, KV, eps, stride_ct,
    HEAD_DIM: tl.constexpr, HAS_NEXT: tl.constexpr,
    BN_O: tl.constexpr, BK_O: tl.constexpr, PIPE_O: tl.constexpr,
    BN_13: tl.constexpr, BK_13: tl.constexpr, PIPE_13: tl.constexpr,
    BN_2: tl.constexpr, BK_2: tl.constexpr, PIPE_2: tl.constexpr,
    BP_QKV: tl.constexpr, BK_QKV: tl.constexpr, PIPE_QKV: tl.constexpr,
):  # fmt: skip
    """A layer's wo, gate/up and down, then the next layer's qkv, one program an SM, barriers between."""
    pid = tl.program_id(0)
    P = tl.num_programs(0)
    for rb in range(pid, tl.cdiv(C, BN_O), P):  # x += o wo^T
        _gemv_rows(o_ptr, wo_ptr, mlp_norm_ptr, x_ptr, C, HD, eps, rb, False, False, BN_O, BK_O, PIPE_O)
    _grid_barrier(sync_ptr, P)
    for rb in range(pid, tl.cdiv(FF, BN_13), P):  # g = silu(gate) * up of rmsnorm(x)
        _gemv_rows(x_ptr, w13_ptr, mlp_norm_ptr, g_ptr, FF, C, eps, rb, True, True, BN_13, BK_13, PIPE_13)
    _grid_barrier(sync_ptr, P)
    for rb in range(pid, tl.cdiv(C, BN_2), P):  # x += g w2^T
        _gemv_rows(g_ptr, w2_ptr, mlp_norm_ptr, x_ptr, C, FF, eps, rb, False, False, BN_2, BK_2, PIPE_2)
    if HAS_NEXT:
        _grid_barrier(sync_ptr, P)
        for pb in range(pid, tl.cdiv((H + 2 * KV) * (HEAD_DIM // 2), BP_QKV), P):  # the next layer's q, k, v
            _qkv_pairs(x_ptr, wqkv_ptr, attn_norm_ptr, cos_ptr, sin_ptr, pos_ptr, q_ptr, k_cache_ptr, v_cache_ptr,
                       H, KV, C, eps, stride_ct, pb, HEAD_DIM, BP_QKV, BK_QKV, PIPE_QKV)  # fmt: skip


@triton.jit
def _int8_rows(x_ptr, q_ptr, scale_ptr, norm_ptr, res_ptr, out_ptr, N, K, eps, stride_qn, rb, cos_ptr, sin_ptr,
               pos_ptr, k_cache_ptr, v_cache_ptr, H, KV, stride_ct, NORM: tl.constexpr, SWIGLU: tl.constexpr,
               RESIDUAL: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, HEAD_DIM: tl.constexpr,
               ROPE: tl.constexpr, PIPE: tl.constexpr):  # fmt: skip
    """w8a16_decode_kernel's work (lesson 12) for row block rb: the "pipe" loop, or the masked loop alone."""
    TWO: tl.constexpr = SWIGLU or ROPE
    offs_n = rb * BLOCK_N + tl.arange(0, BLOCK_N)
    keep = offs_n < N
    cols = tl.arange(0, BLOCK_K)
    n_in = tl.minimum(offs_n, N - 1)
    if ROPE:
        head = offs_n // (HEAD_DIM // 2)
        i = offs_n % (HEAD_DIM // 2)
        gate = ((n_in // (HEAD_DIM // 2)) * HEAD_DIM + n_in % (HEAD_DIM // 2)).to(tl.int64)
        up_rows = gate + HEAD_DIM // 2
    else:
        gate, up_rows = n_in.to(tl.int64), (n_in + N).to(tl.int64)
    q_gate = q_ptr + gate[:, None] * stride_qn + cols[None, :]
    q_up = q_ptr + up_rows[:, None] * stride_qn + cols[None, :]
    acc = tl.zeros((BLOCK_N, BLOCK_K), tl.float32)
    acc_up = tl.zeros((BLOCK_N, BLOCK_K), tl.float32)
    sq = tl.zeros((BLOCK_K,), tl.float32)
    k_start = 0
    if PIPE > 1:
        full = (K // BLOCK_K) * BLOCK_K
        for k in tl.range(0, full, BLOCK_K, num_stages=PIPE):
            xk = tl.load(x_ptr + k + cols).to(tl.float32)
            if NORM:
                sq += xk * xk
                xk = xk * tl.load(norm_ptr + k + cols).to(tl.float32)
            acc += _int8_float(tl.load(q_gate + k)) * xk[None, :]
            if TWO:
                acc_up += _int8_float(tl.load(q_up + k)) * xk[None, :]
        k_start = full
    for k in range(k_start, K, BLOCK_K):
        in_k = k + cols < K
        q = tl.load(q_gate + k, mask=keep[:, None] & in_k[None, :], other=0)
        if TWO:
            up = tl.load(q_up + k, mask=keep[:, None] & in_k[None, :], other=0)
        xk = tl.load(x_ptr + k + cols, mask=in_k, other=0.0).to(tl.float32)
        if NORM:
            sq += xk * xk
            xk = xk * tl.load(norm_ptr + k + cols, mask=in_k, other=0.0).to(tl.float32)
        acc += _int8_float(q) * xk[None, :]
        if TWO:
            acc_up += _int8_float(up) * xk[None, :]
    y = tl.sum(acc, 1) * tl.load(scale_ptr + gate, mask=keep, other=0.0).to(tl.float32)
    u = tl.sum(acc_up, 1)
    if TWO:
        u *= tl.load(scale_ptr + up_rows, mask=keep, other=0.0).to(tl.float32)
    if ROPE:
        _rope_epilogue(y, u, sq, K, eps, x_ptr, head, i, keep, H, KV, cos_ptr, sin_ptr, pos_ptr, out_ptr, k_cache_ptr,
                       v_cache_ptr, stride_ct, 2**31 - 1, NORM, HEAD_DIM)  # fmt: skip
    else:
        _decode_epilogue(y, u, sq, K, eps, x_ptr, res_ptr, out_ptr, offs_n, keep, NORM, SWIGLU, RESIDUAL)


@triton.jit
def layer_int8_kernel(
    x_ptr, o_ptr, g_ptr, wo_q, wo_s, mlp_norm_ptr, w13_q, w13_s, w2_q, w2_s, attn_norm_ptr, wqkv_q, wqkv_s, cos_ptr,
    sin_ptr, pos_ptr, q_ptr, k_cache_ptr, v_cache_ptr, sync_ptr, C, HD, FF, H, KV, eps, stride_ct,
    HEAD_DIM: tl.constexpr, HAS_NEXT: tl.constexpr,
    BN_O: tl.constexpr, BK_O: tl.constexpr, PIPE_O: tl.constexpr,
    BN_13: tl.constexpr, BK_13: tl.constexpr, PIPE_13: tl.constexpr,
    BN_2: tl.constexpr, BK_2: tl.constexpr, PIPE_2: tl.constexpr,
    BP_QKV: tl.constexpr, BK_QKV: tl.constexpr, PIPE_QKV: tl.constexpr,
):  # fmt: skip
    """layer_gemvs_kernel with lesson 12's int8 weights (codes and a scale a row)."""
    pid = tl.program_id(0)
    P = tl.num_programs(0)
    for rb in range(pid, tl.cdiv(C, BN_O), P):  # x += o wo^T
        _int8_rows(o_ptr, wo_q, wo_s, mlp_norm_ptr, x_ptr, x_ptr, C, HD, eps, HD, rb, cos_ptr, sin_ptr, pos_ptr,
                   k_cache_ptr, v_cache_ptr, H, KV, stride_ct, False, False, True, BN_O, BK_O, HEAD_DIM, False,
                   PIPE_O)  # fmt: skip
    _grid_barrier(sync_ptr, P)
    for rb in range(pid, tl.cdiv(FF, BN_13), P):  # g = silu(gate) * up of rmsnorm(x)
        _int8_rows(x_ptr, w13_q, w13_s, mlp_norm_ptr, x_ptr, g_ptr, FF, C, eps, C, rb, cos_ptr, sin_ptr, pos_ptr,
                   k_cache_ptr, v_cache_ptr, H, KV, stride_ct, True, True, False, BN_13, BK_13, HEAD_DIM, False,
                   PIPE_13)  # fmt: skip
    _grid_barrier(sync_ptr, P)
    for rb in range(pid, tl.cdiv(C, BN_2), P):  # x += g w2^T
        _int8_rows(g_ptr, w2_q, w2_s, mlp_norm_ptr, x_ptr, x_ptr, C, FF, eps, FF, rb, cos_ptr, sin_ptr, pos_ptr,
                   k_cache_ptr, v_cache_ptr, H, KV, stride_ct, False, False, True, BN_2, BK_2, HEAD_DIM, False,
                   PIPE_2)  # fmt: skip
    if HAS_NEXT:
        _grid_barrier(sync_ptr, P)
        for pb in range(pid, tl.cdiv((H + 2 * KV) * (HEAD_DIM // 2), BP_QKV), P):  # the next layer's q, k, v
            _int8_rows(x_ptr, wqkv_q, wqkv_s, attn_norm_ptr, x_ptr, q_ptr, (H + 2 * KV) * (HEAD_DIM // 2), C, eps, C,
                       pb, cos_ptr, sin_ptr, pos_ptr, k_cache_ptr, v_cache_ptr, H, KV, stride_ct, True, False, False,
                       BP_QKV, BK_QKV, HEAD_DIM, True, PIPE_QKV)  # fmt: skip


@triton.jit
def _int4_rows(x_ptr, packed_ptr, scale_ptr, zero_ptr, norm_ptr, res_ptr, out_ptr, N, K, eps, stride_pn, stride_sn,
               rb, cos_ptr, sin_ptr, pos_ptr, k_cache_ptr, v_cache_ptr, H, KV, stride_ct, GROUP_SIZE: tl.constexpr,
               NORM: tl.constexpr, SWIGLU: tl.constexpr, RESIDUAL: tl.constexpr, BLOCK_N: tl.constexpr,
               BLOCK_K: tl.constexpr, HEAD_DIM: tl.constexpr, ROPE: tl.constexpr, PIPE: tl.constexpr):  # fmt: skip
    """w4a16_decode_stream_kernel's work (lesson 12) for row block rb: the "pipe" loop, or the masked loop alone."""
    GROUPS: tl.constexpr = BLOCK_K // GROUP_SIZE
    TWO: tl.constexpr = SWIGLU or ROPE
    WORDS: tl.constexpr = GROUP_SIZE // 8
    offs_n = rb * BLOCK_N + tl.arange(0, BLOCK_N)
    keep = offs_n < N
    offs_g = tl.arange(0, GROUPS)
    offs_k = tl.arange(0, BLOCK_K)
    groups = tl.cdiv(K, GROUP_SIZE)
    rows = tl.minimum(offs_n, N - 1)
    if ROPE:
        head = offs_n // (HEAD_DIM // 2)
        i = offs_n % (HEAD_DIM // 2)
        gate = ((rows // (HEAD_DIM // 2)) * HEAD_DIM + rows % (HEAD_DIM // 2)).to(tl.int64)
        up_rows = gate + HEAD_DIM // 2
    else:
        gate, up_rows = rows.to(tl.int64), (rows + N).to(tl.int64)
    words = offs_g[None, :, None] * WORDS + tl.arange(0, WORDS)[None, None, :]
    p_gate = packed_ptr + gate[:, None, None] * stride_pn + words
    p_up = packed_ptr + up_rows[:, None, None] * stride_pn + words
    s_gate = gate[:, None] * stride_sn + offs_g[None, :]
    s_up = up_rows[:, None] * stride_sn + offs_g[None, :]
    acc = tl.zeros((BLOCK_N, GROUPS, WORDS), tl.float32)
    acc_up = tl.zeros((BLOCK_N, GROUPS, WORDS), tl.float32)
    sq = tl.zeros((BLOCK_K,), tl.float32)
    g_start = 0
    if PIPE > 1:
        g_full = (K // BLOCK_K) * GROUPS
        for g0 in tl.range(0, g_full, GROUPS, num_stages=PIPE):
            word = tl.load(p_gate + g0 * WORDS)
            scale = tl.load(scale_ptr + s_gate + g0)
            zero = tl.load(zero_ptr + s_gate + g0)
            xk = tl.load(x_ptr + g0 * GROUP_SIZE + offs_k).to(tl.float32)
            if NORM:
                sq += xk * xk
                xk = xk * tl.load(norm_ptr + g0 * GROUP_SIZE + offs_k).to(tl.float32)
            x0, x1, x2, x3, x4, x5, x6, x7, x_sum = _x_by_code_and_sum(xk, GROUPS, WORDS)
            acc += _stream_word_sums(word, x0, x1, x2, x3, x4, x5, x6, x7, x_sum, scale, zero)
            if TWO:
                up = tl.load(p_up + g0 * WORDS)
                scale_up = tl.load(scale_ptr + s_up + g0)
                zero_up = tl.load(zero_ptr + s_up + g0)
                acc_up += _stream_word_sums(up, x0, x1, x2, x3, x4, x5, x6, x7, x_sum, scale_up, zero_up)
        g_start = g_full
    for g0 in range(g_start, groups, GROUPS):
        mask_g = keep[:, None] & (g0 + offs_g < groups)[None, :]
        word = tl.load(p_gate + g0 * WORDS, mask=mask_g[:, :, None], other=0)
        scale = tl.load(scale_ptr + s_gate + g0, mask=mask_g, other=0.0)
        zero = tl.load(zero_ptr + s_gate + g0, mask=mask_g, other=0)
        if TWO:
            up = tl.load(p_up + g0 * WORDS, mask=mask_g[:, :, None], other=0)
            scale_up = tl.load(scale_ptr + s_up + g0, mask=mask_g, other=0.0)
            zero_up = tl.load(zero_ptr + s_up + g0, mask=mask_g, other=0)
        k = g0 * GROUP_SIZE + offs_k
        xk = tl.load(x_ptr + k, mask=k < K, other=0.0).to(tl.float32)
        if NORM:
            sq += xk * xk
            xk = xk * tl.load(norm_ptr + k, mask=k < K, other=0.0).to(tl.float32)
        x0, x1, x2, x3, x4, x5, x6, x7, x_sum = _x_by_code_and_sum(xk, GROUPS, WORDS)
        acc += _stream_word_sums(word, x0, x1, x2, x3, x4, x5, x6, x7, x_sum, scale, zero)
        if TWO:
            acc_up += _stream_word_sums(up, x0, x1, x2, x3, x4, x5, x6, x7, x_sum, scale_up, zero_up)
    y = tl.sum(tl.sum(acc, 2), 1)
    u = tl.sum(tl.sum(acc_up, 2), 1)
    if ROPE:
        _rope_epilogue(y, u, sq, K, eps, x_ptr, head, i, keep, H, KV, cos_ptr, sin_ptr, pos_ptr, out_ptr, k_cache_ptr,
                       v_cache_ptr, stride_ct, 2**31 - 1, NORM, HEAD_DIM)  # fmt: skip
    else:
        _decode_epilogue(y, u, sq, K, eps, x_ptr, res_ptr, out_ptr, offs_n, keep, NORM, SWIGLU, RESIDUAL)


@triton.jit
def layer_int4_kernel(
    x_ptr, o_ptr, g_ptr, wo_p, wo_s, wo_z, mlp_norm_ptr, w13_p, w13_s, w13_z, w2_p, w2_s, w2_z, attn_norm_ptr,
    wqkv_p, wqkv_s, wqkv_z, cos_ptr, sin_ptr, pos_ptr, q_ptr, k_cache_ptr, v_cache_ptr, sync_ptr, C, HD, FF, H, KV,
    eps, stride_ct, wo_pn, wo_sn, w13_pn, w13_sn, w2_pn, w2_sn, wqkv_pn, wqkv_sn, GROUP_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr, HAS_NEXT: tl.constexpr,
    BN_O: tl.constexpr, BK_O: tl.constexpr, PIPE_O: tl.constexpr,
    BN_13: tl.constexpr, BK_13: tl.constexpr, PIPE_13: tl.constexpr,
    BN_2: tl.constexpr, BK_2: tl.constexpr, PIPE_2: tl.constexpr,
    BP_QKV: tl.constexpr, BK_QKV: tl.constexpr, PIPE_QKV: tl.constexpr,
):  # fmt: skip
    """layer_gemvs_kernel with lesson 12's int4 weights (codes as int32 words, a scale and zero point a group)."""
    pid = tl.program_id(0)
    P = tl.num_programs(0)
    for rb in range(pid, tl.cdiv(C, BN_O), P):  # x += o wo^T
        _int4_rows(o_ptr, wo_p, wo_s, wo_z, mlp_norm_ptr, x_ptr, x_ptr, C, HD, eps, wo_pn, wo_sn,
                   rb, cos_ptr, sin_ptr, pos_ptr, k_cache_ptr, v_cache_ptr, H, KV, stride_ct, GROUP_SIZE, False, False,
                   True, BN_O, BK_O, HEAD_DIM, False, PIPE_O)  # fmt: skip
    _grid_barrier(sync_ptr, P)
    for rb in range(pid, tl.cdiv(FF, BN_13), P):  # g = silu(gate) * up of rmsnorm(x)
        _int4_rows(x_ptr, w13_p, w13_s, w13_z, mlp_norm_ptr, x_ptr, g_ptr, FF, C, eps, w13_pn, w13_sn,
                   rb, cos_ptr, sin_ptr, pos_ptr, k_cache_ptr, v_cache_ptr, H, KV, stride_ct, GROUP_SIZE, True, True,
                   False, BN_13, BK_13, HEAD_DIM, False, PIPE_13)  # fmt: skip
    _grid_barrier(sync_ptr, P)
    for rb in range(pid, tl.cdiv(C, BN_2), P):  # x += g w2^T
        _int4_rows(g_ptr, w2_p, w2_s, w2_z, mlp_norm_ptr, x_ptr, x_ptr, C, FF, eps, w2_pn, w2_sn,
                   rb, cos_ptr, sin_ptr, pos_ptr, k_cache_ptr, v_cache_ptr, H, KV, stride_ct, GROUP_SIZE, False, False,
                   True, BN_2, BK_2, HEAD_DIM, False, PIPE_2)  # fmt: skip
    if HAS_NEXT:
        _grid_barrier(sync_ptr, P)
        for pb in range(pid, tl.cdiv((H + 2 * KV) * (HEAD_DIM // 2), BP_QKV), P):  # the next layer's q, k, v
            _int4_rows(x_ptr, wqkv_p, wqkv_s, wqkv_z, attn_norm_ptr, x_ptr, q_ptr, (H + 2 * KV) * (HEAD_DIM // 2), C,
                       eps, wqkv_pn, wqkv_sn, pb, cos_ptr, sin_ptr, pos_ptr, k_cache_ptr, v_cache_ptr, H,
                       KV, stride_ct, GROUP_SIZE, True, False, False, BP_QKV, BK_QKV, HEAD_DIM, True,
                       PIPE_QKV)  # fmt: skip


def resident_per_sm(compiled, num_warps) -> int:
    """How many programs of this compiled kernel an SM holds at once (registers, threads, shared memory), from the
    GPU's own properties (an H100's where torch does not give them)."""
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    regs = getattr(props, "regs_per_multiprocessor", 65536)
    threads = getattr(props, "max_threads_per_multi_processor", 2048)
    smem = getattr(props, "shared_memory_per_multiprocessor", 233472)
    compiled._init_handles()  # loads the binary: n_regs is known from then on
    per_program = 32 * num_warps
    reserved = 1024  # shared memory the system keeps for each program
    return min(regs // max(1, compiled.n_regs * per_program), threads // per_program,
               smem // (compiled.metadata.shared + reserved), 32)  # fmt: skip


def launch_persistent(kernel, bufs, args, meta):
    """kernel[(bufs["programs"],)](*args, **meta), after finding (once) how many of its programs an SM can hold at
    once: a persistent kernel may launch no more, or its barrier would wait for programs never started."""
    if "resident" not in bufs and not CPU:
        bufs["resident"] = resident_per_sm(kernel.warmup(*args, grid=(1,), **meta), meta["num_warps"])
    kernel[(bufs["programs"],)](*args, **meta)


# -- each format: its persistent kernel, its tiles (BLOCK_N, BLOCK_K, the pipelined loop's depth, warps) as the
# lesson's step launches that weight's GEMV, and a weight as the kernel takes it (its tensors, then its strides)
def _bf16_tile(N, K, G):
    s = L8.gemv_schedule(N, K, "pipe")
    return s.BLOCK_N, s.BLOCK_K, s.num_stages if s.num_stages >= 2 else 1, s.num_warps


def _quantized_tile(bits):
    def tile(N, K, G):  # the lesson's row for this weight, its loop made the pipelined one (the same sums)
        s = L12.fused_gemv_schedule(bits, N, K, G)
        return s.BLOCK_N, s.BLOCK_K, 1 if CPU else max(2, s.num_stages), s.num_warps

    return tile


def _int4_parts(t):  # the codes as int32 words, the scales, the zero points; strides in words and in groups
    words = t.packed.view(torch.int32)
    return (words, t.scale, t.zero), (words.stride(0), t.scale.stride(0))


FORMATS = {  # bits (None: bf16) -> (kernel, tile, parts)
    None: (layer_gemvs_kernel, _bf16_tile, lambda t: ((t,), ())),
    8: (layer_int8_kernel, _quantized_tile(8), lambda t: ((t.q, t.scale), ())),
    4: (layer_int4_kernel, _quantized_tile(4), _int4_parts),
}


def persistent_step(model, token, pos, cache, bufs, bits=None):
    """The lesson's batch-1 decode step (lesson 08's for bf16, lesson 12's quantized_decode_step for int8 and int4)
    with the format's persistent kernel for each layer's GEMVs: 3 launches a layer."""
    a = model.args
    H, KV, D, C, FF = a.n_heads, a.n_kv_heads, a.head_dim, a.dim, a.ffn_dim
    kernel, tile, parts = FORMATS[bits]
    G = model.layers[0].wo.group_size if bits == 4 else 1
    lengths = pos + 1
    x = F.embedding(token, model.embed)  # (1, C)
    w0 = model.layers[0]
    q = L12.quantized_decode_qkv_rope(x, w0.wqkv, cache.cos, cache.sin, pos, cache.k[0], cache.v[0],
                                      norm=w0.attn_norm, eps=a.norm_eps, out=bufs["q"])  # fmt: skip
    (bn_o, bk_o, p_o, warps), (bn_13, bk_13, p_13, _), (bn_2, bk_2, p_2, _), (bn_q, bk_q, p_q, _) = (
        tile(C, H * D, G), tile(FF, C, G), tile(C, FF, G), tile((H + 2 * KV) * D, C, G))  # fmt: skip
    meta = dict(HEAD_DIM=D, BN_O=bn_o, BK_O=bk_o, PIPE_O=p_o, BN_13=bn_13, BK_13=bk_13, PIPE_13=p_13, BN_2=bn_2,
                BK_2=bk_2, PIPE_2=p_2, BP_QKV=max(1, bn_q // 2), BK_QKV=bk_q, PIPE_QKV=p_q, num_warps=warps,
                num_stages=1, **({"GROUP_SIZE": G} if bits == 4 else {}))  # fmt: skip
    for i, w in enumerate(model.layers):
        o = L8.decode_attention_step(q, cache.k[i], cache.v[i], lengths)  # (1, H, D): lesson 08's two launches
        nxt = model.layers[i + 1] if i + 1 < len(model.layers) else w
        j = min(i + 1, len(model.layers) - 1)
        (wo, wo_st), (w13, w13_st), (w2, w2_st), (wqkv, wqkv_st) = (parts(t) for t in (w.wo, w.w13, w.w2, nxt.wqkv))
        launch_persistent(kernel, bufs, (
            x, o, bufs["g"], *wo, w.mlp_norm, *w13, *w2, nxt.attn_norm, *wqkv, cache.cos, cache.sin, pos, q,
            cache.k[j], cache.v[j], bufs["sync"], C, H * D, FF, H, KV, a.norm_eps, cache.k[j].stride(1), *wo_st,
            *w13_st, *w2_st, *wqkv_st,
        ), dict(meta, HAS_NEXT=i + 1 < len(model.layers)))  # fmt: skip
    logits = torch.empty(1, a.vocab_size, device=x.device, dtype=torch.float32)
    pdl = L8.DECODE_FUSIONS.pdl if bits is None else L12.QUANTIZED_PDL.get(bits, False)  # as the lesson's step
    return L12.quantized_decode_gemv(x, model.lm_head, norm=model.norm, eps=a.norm_eps, out=logits, pdl=pdl)


if CPU:
    SHAPES = {"tiny": L8.ModelArgs(vocab_size=100, n_layers=2, dim=64, n_heads=4, n_kv_heads=2, ffn_dim=48,
                                   tie_embeddings=False)}  # fmt: skip
    DT, MAX_LEN, CONTEXT = torch.float32, 24, 16
else:
    SHAPES = {name: L8.ModelArgs(**shape) for name, shape in LLAMA_SHAPES.items()}
    DT, MAX_LEN, CONTEXT = torch.bfloat16, 768, 640

say(
    f"lesson 08 sweep h (one persistent kernel a layer for the GEMVs) on "
    f"{ENV.gpu_name if ENV.is_gpu else 'CPU (interpreter)'}, torch {torch.__version__}, triton {triton.__version__}, "
    f"{ENV.sm_count} SMs"
)


def measure(name, lesson, persistent, cache, bufs):
    """persistent() checked against lesson() (logits and the cache rows written), then both timed."""
    per_sm = [1] if CPU else [1, 2, 4, 8]
    want = lesson().float().clone()
    k_want, v_want = cache.k.clone(), cache.v.clone()
    cache.k[:, :, CONTEXT] = float("nan")  # the row the step writes: the persistent step must write it again
    cache.v[:, :, CONTEXT] = float("nan")
    got = persistent().float()
    same = torch.equal(got, want) and torch.equal(cache.k, k_want) and torch.equal(cache.v, v_want)
    rel = float((got - want).norm() / want.norm())
    ok = same or (rel < 1e-2 and torch.equal(cache.k.isnan(), k_want.isnan()))
    say(f"== {name}: the persistent step's logits {'the same bits as' if same else f'{rel:.1e} from'} the lesson's"
        + ("" if ok else "  <-- FAIL"))  # fmt: skip
    if CPU or not ok:
        return
    say(f"   the persistent kernel: {bufs['resident']} programs an SM can be resident")
    base = gtime(lesson)
    say(f"   the lesson's step, 6 launches a layer        {base:.4f} ms")
    for k in per_sm:
        if k > bufs["resident"]:
            say(f"   {k} programs an SM: SKIPPED (not all resident: the barrier would wait for programs never started)")
            continue
        bufs["programs"] = k * ENV.sm_count
        got = persistent().float()
        rel = float((got - want).norm() / want.norm())
        if not rel < 1e-2:
            say(f"   {k} programs an SM: FAIL (logits {rel:.1e} from the lesson's)")
            continue
        ms = gtime(persistent)
        after = gtime(lesson)
        say(f"   persistent, {k} programs an SM, 3 launches a layer  {ms:.4f} ms: x{(base + after) / 2 / ms:.3f}"
            + (" (same bits)" if torch.equal(got, want) else f" (logits {rel:.1e} from the lesson's)")
            + f"; the lesson's after: {after:.4f}")  # fmt: skip
        base = after


for name, args in SHAPES.items():
    torch.manual_seed(0)
    model = random_llama(args, DT, ENV.device)
    cache = L8.new_cache(model, 1, MAX_LEN)
    cache.k.normal_()
    cache.v.normal_()
    token = torch.tensor([7], device=ENV.device)
    pos = torch.tensor([CONTEXT], dtype=torch.int32, device=ENV.device)

    def buffers():
        return {
            "q": torch.empty(1, args.n_heads, args.head_dim, device=ENV.device, dtype=DT),
            "g": torch.empty(1, args.ffn_dim, device=ENV.device, dtype=DT),
            "sync": torch.zeros(2, device=ENV.device, dtype=torch.int32),
            "programs": 1 if CPU else ENV.sm_count,
        }

    bufs = buffers()
    measure(f"{name}, bf16", lambda: L8.decode_step(model, token, pos, cache, L8.TRITON_DECODE),
            lambda: persistent_step(model, token, pos, cache, bufs), cache, bufs)  # fmt: skip
    for bits in (8, 4):
        qmodel, qbufs = L12.quantize_model(model, bits), buffers()
        measure(f"{name}, int{bits}", lambda q=qmodel: L12.quantized_decode_step(q, token, pos, cache),
                lambda q=qmodel, b=qbufs, n=bits: persistent_step(q, token, pos, cache, b, n), cache, qbufs)  # fmt: skip
        qmodel = None
say(f"total {time.time() - T0:.0f} s")
