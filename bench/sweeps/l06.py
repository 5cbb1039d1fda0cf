"""Sweep: lesson 06's flash-attention forward (tensor-descriptor kernel) on Hopper: tile configurations and the
order of the query blocks (heaviest causal blocks first), against SDPA, both in CUDA graphs.
PYTHONPATH=$PWD python3 bench/sweeps/l06.py [--cpu] [--configs]"""

import math
import os
import sys
import time

cpu = "--cpu" in sys.argv
if cpu:
    os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from bench.common import graphed  # noqa: E402
from lessons.l06_flash_attention import (  # noqa: E402
    LOG2E,
    _attention_range_tma,
    _tiles,
    attention_config,
    attention_flops,
    attention_kernel,
)

out_file = open(os.path.join(os.environ["OUT"], "sweep_l06.txt"), "w") if os.environ.get("OUT") else None
t_start = time.time()


def say(*a):
    line = " ".join(str(x) for x in a)
    print(line, flush=True)
    if out_file:
        out_file.write(line + "\n")
        out_file.flush()


@triton.jit
def attention_kernel_grid_order(
    q_desc, k_desc, v_desc, o_ptr, T, H, GROUP, qk_scale, stride_ob, stride_ot, stride_oh,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, IS_CAUSAL: tl.constexpr,
):  # fmt: skip
    """The kernel as it was this morning: pid_m fastest, then (sequence, head)."""
    pid = tl.program_id(0)
    n_m = tl.cdiv(T, BLOCK_M)
    pid_m = pid % n_m
    bh = pid // n_m
    b = bh // H
    h = bh % H
    kv_h = h // GROUP
    start_m = pid_m * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    q = q_desc.load([b, start_m, h * HEAD_DIM]).reshape([BLOCK_M, HEAD_DIM])
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    if IS_CAUSAL:
        full_end = start_m
        masked_end = tl.minimum(start_m + BLOCK_M, T)
    else:
        full_end = (T // BLOCK_N) * BLOCK_N
        masked_end = T
    acc, l_i, m_i = _attention_range_tma(
        acc, l_i, m_i, q, k_desc, v_desc, b, kv_h * HEAD_DIM, 0, full_end, offs_m, T, qk_scale, BLOCK_N, HEAD_DIM,
        False, IS_CAUSAL,
    )  # fmt: skip
    acc, l_i, m_i = _attention_range_tma(
        acc, l_i, m_i, q, k_desc, v_desc, b, kv_h * HEAD_DIM, full_end, masked_end, offs_m, T, qk_scale, BLOCK_N,
        HEAD_DIM, True, IS_CAUSAL,
    )  # fmt: skip
    offs_d = tl.arange(0, HEAD_DIM)
    o_ptrs = (
        o_ptr + b.to(tl.int64) * stride_ob + h * stride_oh + offs_m.to(tl.int64)[:, None] * stride_ot + offs_d[None, :]
    )
    tl.store(o_ptrs, (acc / l_i[:, None]).to(o_ptr.dtype.element_ty), mask=offs_m[:, None] < T)


@triton.jit
def attention_kernel_heavy_first(
    q_desc,
    k_desc,
    v_desc,
    o_ptr,
    T,
    H,
    GROUP,
    qk_scale,
    stride_ob,
    stride_ot,
    stride_oh,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    IS_CAUSAL: tl.constexpr,
):
    """attention_kernel with the query blocks taken last first: under causal masking the last blocks have the most
    keys, and starting them first leaves the short ones to fill the tail of the grid."""
    pid = tl.program_id(0)
    n_m = tl.cdiv(T, BLOCK_M)
    pid_m = n_m - 1 - pid // (tl.num_programs(0) // n_m)
    bh = pid % (tl.num_programs(0) // n_m)
    b = bh // H
    h = bh % H
    kv_h = h // GROUP
    start_m = pid_m * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    q = q_desc.load([b, start_m, h * HEAD_DIM]).reshape([BLOCK_M, HEAD_DIM])
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    if IS_CAUSAL:
        full_end = start_m
        masked_end = tl.minimum(start_m + BLOCK_M, T)
    else:
        full_end = (T // BLOCK_N) * BLOCK_N
        masked_end = T
    acc, l_i, m_i = _attention_range_tma(
        acc, l_i, m_i, q, k_desc, v_desc, b, kv_h * HEAD_DIM, 0, full_end, offs_m, T, qk_scale, BLOCK_N, HEAD_DIM,
        False, IS_CAUSAL,
    )  # fmt: skip
    acc, l_i, m_i = _attention_range_tma(
        acc, l_i, m_i, q, k_desc, v_desc, b, kv_h * HEAD_DIM, full_end, masked_end, offs_m, T, qk_scale, BLOCK_N,
        HEAD_DIM, True, IS_CAUSAL,
    )  # fmt: skip
    offs_d = tl.arange(0, HEAD_DIM)
    o_ptrs = (
        o_ptr + b.to(tl.int64) * stride_ob + h * stride_oh + offs_m.to(tl.int64)[:, None] * stride_ot + offs_d[None, :]
    )
    tl.store(o_ptrs, (acc / l_i[:, None]).to(o_ptr.dtype.element_ty), mask=offs_m[:, None] < T)


def launch(kernel, q, k, v, out, causal, BM, BN, warps, stages):
    B, T, H, D = q.shape
    grid = (triton.cdiv(T, BM) * B * H,)
    kernel[grid](
        _tiles(q, BM), _tiles(k, BN), _tiles(v, BN), out, T, H, H // k.shape[2], LOG2E / math.sqrt(D),
        out.stride(0), out.stride(1), out.stride(2),
        HEAD_DIM=D, BLOCK_M=BM, BLOCK_N=BN, IS_CAUSAL=causal, num_warps=warps, num_stages=stages,
    )  # fmt: skip
    return out


def graph_ms(fn):
    if cpu:
        fn()
        return float("nan")
    return triton.testing.do_bench(graphed(fn), warmup=10, rep=100)  # the bench's own graph capture


dev = "cpu" if cpu else "cuda"
dt = torch.float16 if cpu else torch.bfloat16
if cpu:
    shapes = [(1, 4, 2, 40, 16, True)]
    configs = [(32, 16, 4, 1)]
else:
    shapes = [
        (1, 32, 4, 2048, 64, True),
        (1, 32, 4, 8192, 64, True),
        (1, 32, 4, 2048, 128, True),
        (1, 32, 4, 8192, 128, True),
        (8, 32, 32, 1024, 128, True),
        (8, 32, 32, 1024, 128, False),
        (1, 32, 32, 4096, 128, True),
        (8, 32, 4, 1024, 64, True),
        (1, 32, 4, 8192, 128, False),
    ]
    # --configs: six tile configurations at each shape (the sweep that chose attention_config, with only two orders
    # then: results/h100-2026-11-23-late/sweeps/l06-attention-configs.txt); otherwise the lesson's rule
    configs = (
        [(64, 64, 4, 3), (128, 64, 4, 3), (128, 64, 8, 3), (128, 128, 8, 3), (128, 64, 8, 2), (128, 128, 8, 2)]
        if "--configs" in sys.argv
        else None
    )
best = {}
for B, H, KV, T, D, causal in shapes:
    if time.time() - t_start > 140:
        say("time budget reached: stopping")
        break
    torch.manual_seed(0)
    q = torch.randn(B, T, H, D, device=dev, dtype=dt)
    k = torch.randn(B, T, KV, D, device=dev, dtype=dt)
    v = torch.randn(B, T, KV, D, device=dev, dtype=dt)
    ref = F.scaled_dot_product_attention(
        q.transpose(1, 2).float(), k.transpose(1, 2).float(), v.transpose(1, 2).float(), is_causal=causal,
        enable_gqa=True,
    ).transpose(1, 2)  # fmt: skip
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    sdpa_ms = graph_ms(lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal, enable_gqa=True))
    flops = attention_flops(B, H, T, D, causal)
    shape = f"B={B} H={H} KV={KV} T={T} D={D} {'causal' if causal else 'full'}"
    say(f"{shape}: SDPA {sdpa_ms:.4f} ms {flops / sdpa_ms / 1e9:.0f} TFLOP/s; rule {attention_config(D, causal)}")
    kernels = (
        ("grid order", attention_kernel_grid_order),
        ("heavy first, all heads", attention_kernel_heavy_first),
        ("by kv head, heavy first (the lesson's)", attention_kernel),
    )
    for name, kernel in kernels:
        for BM, BN, warps, stages in configs or [attention_config(D, causal)]:
            if causal and BM < BN:
                continue
            tag = f"{shape} | {name} ({BM},{BN},{warps},{stages})"
            try:
                out = torch.full_like(q, float("nan"))
                launch(kernel, q, k, v, out, causal, BM, BN, warps, stages)
                err = float((out.float() - ref).abs().max())
                ok = err < 3e-2
                ms = graph_ms(lambda: launch(kernel, q, k, v, out, causal, BM, BN, warps, stages))
                say(f"{tag}: {'ok' if ok else 'FAIL'} err {err:.1e} {ms:.4f} ms {flops / ms / 1e9:.0f} TFLOP/s "
                    f"x SDPA {sdpa_ms / ms:.3f}")  # fmt: skip
                if ok and (shape not in best or ms < best[shape][1]):
                    best[shape] = (f"{name} ({BM},{BN},{warps},{stages})", ms, sdpa_ms / ms)
            except Exception as e:  # noqa: BLE001
                say(f"{tag}: ERROR {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
say("best per shape:")
for s, (name, ms, r) in best.items():
    say(f"  {s}: {name} {ms:.4f} ms x SDPA {r:.3f}")
