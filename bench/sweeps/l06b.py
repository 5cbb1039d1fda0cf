"""Sweep b: lesson 06's flash-attention forward (tensor-descriptor kernel) where it trails SDPA (not causal, and 32
kv heads): how the softmax scale is applied inside the loop, and Triton's warp specialization of the loop, against
SDPA, both in CUDA graphs.
PYTHONPATH=$PWD python3 bench/sweeps/l06b.py [--cpu]

SCALE: 0 = the lesson's loop when this ran (s = q k^T * scale, then s - m: a multiply and a subtract a score; the
           lesson has taken SCALE 1 since, so "lesson" in a new run is SCALE 1);
       1 = the scale folded into the exponent (m from max(s) * scale, p = exp2(s * scale - m): one fused
           multiply-add a score, as Triton's tutorial does);
       2 = q multiplied by the scale once before the loop (in the input's precision: a rounding more, no multiply
           a score).
WS: the key loop as tl.range(..., warp_specialize=True) (the compiler splits loads and math between warps; it
may refuse on this GPU or Triton: the line says ERROR and the sweep goes on).
Each candidate is checked against SDPA in fp32 first; ``x SDPA`` = SDPA ms / candidate ms."""

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
from lessons.l06_flash_attention import LOG2E, _tiles, attention_config, attention_flops, attention_kernel  # noqa: E402

out_file = open(os.path.join(os.environ["OUT"], "sweep_l06b.txt"), "w") if os.environ.get("OUT") else None
t_start = time.time()


def say(*a):
    line = " ".join(str(x) for x in a)
    print(line, flush=True)
    if out_file:
        out_file.write(line + "\n")
        out_file.flush()


@triton.jit
def _range_variant(
    acc, l_i, m_i, q, k_desc, v_desc, b, kv_col, start, end, offs_m, T, qk_scale,
    BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, MASKED: tl.constexpr, IS_CAUSAL: tl.constexpr,
    SCALE: tl.constexpr, WS: tl.constexpr,
):  # fmt: skip
    """The lesson's _attention_range_tma with the scale applied three ways (SCALE) and an optional warp-specialised
    loop (WS)."""
    for n in tl.range(start, end, BLOCK_N, warp_specialize=WS):
        k = k_desc.load([b, n, kv_col]).reshape([BLOCK_N, HEAD_DIM])
        v = v_desc.load([b, n, kv_col]).reshape([BLOCK_N, HEAD_DIM])
        s = tl.dot(q, tl.trans(k))
        if SCALE == 0:
            s = s * qk_scale
        if MASKED:
            offs_n = n + tl.arange(0, BLOCK_N)
            keep = offs_n[None, :] < T
            if IS_CAUSAL:
                keep = keep & (offs_n[None, :] <= offs_m[:, None])
            s = tl.where(keep, s, float("-inf"))
        if SCALE == 1:
            m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
            p = tl.exp2(s * qk_scale - m_new[:, None])
        else:
            m_new = tl.maximum(m_i, tl.max(s, 1))
            p = tl.exp2(s - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def attention_kernel_variant(
    q_desc, k_desc, v_desc, o_ptr, T, H, GROUP, qk_scale, stride_ob, stride_ot, stride_oh,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, IS_CAUSAL: tl.constexpr,
    SCALE: tl.constexpr, WS: tl.constexpr,
):  # fmt: skip
    """The lesson's attention_kernel (same program order) with _range_variant's loop."""
    pid = tl.program_id(0)
    n_m = tl.cdiv(T, BLOCK_M)
    per_kv = n_m * GROUP
    bkv = pid // per_kv
    r = pid % per_kv
    pid_m = n_m - 1 - r // GROUP
    b = bkv // (H // GROUP)
    kv_h = bkv % (H // GROUP)
    h = kv_h * GROUP + r % GROUP
    start_m = pid_m * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    q = q_desc.load([b, start_m, h * HEAD_DIM]).reshape([BLOCK_M, HEAD_DIM])
    if SCALE == 2:
        q = (q * qk_scale).to(q.dtype)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    if IS_CAUSAL:
        full_end = start_m
        masked_end = tl.minimum(start_m + BLOCK_M, T)
    else:
        full_end = (T // BLOCK_N) * BLOCK_N
        masked_end = T
    acc, l_i, m_i = _range_variant(
        acc, l_i, m_i, q, k_desc, v_desc, b, kv_h * HEAD_DIM, 0, full_end, offs_m, T, qk_scale, BLOCK_N, HEAD_DIM,
        False, IS_CAUSAL, SCALE, WS,
    )  # fmt: skip
    acc, l_i, m_i = _range_variant(
        acc, l_i, m_i, q, k_desc, v_desc, b, kv_h * HEAD_DIM, full_end, masked_end, offs_m, T, qk_scale, BLOCK_N,
        HEAD_DIM, True, IS_CAUSAL, SCALE, False,
    )  # fmt: skip
    offs_d = tl.arange(0, HEAD_DIM)
    o_ptrs = (
        o_ptr + b.to(tl.int64) * stride_ob + h * stride_oh + offs_m.to(tl.int64)[:, None] * stride_ot + offs_d[None, :]
    )
    tl.store(o_ptrs, (acc / l_i[:, None]).to(o_ptr.dtype.element_ty), mask=offs_m[:, None] < T)


def launch(q, k, v, out, causal, BM, BN, warps, stages, variant):
    B, T, H, D = q.shape
    grid = (triton.cdiv(T, BM) * B * H,)
    args = (
        _tiles(q, BM), _tiles(k, BN), _tiles(v, BN), out, T, H, H // k.shape[2], LOG2E / math.sqrt(D),
        out.stride(0), out.stride(1), out.stride(2),
    )  # fmt: skip
    meta = dict(HEAD_DIM=D, BLOCK_M=BM, BLOCK_N=BN, IS_CAUSAL=causal, num_warps=warps, num_stages=stages)
    if variant is None:
        attention_kernel[grid](*args, **meta)
    else:
        attention_kernel_variant[grid](*args, **meta, SCALE=variant[0], WS=variant[1])
    return out


def graph_ms(fn):
    if cpu:
        fn()
        return float("nan")
    return triton.testing.do_bench(graphed(fn), warmup=10, rep=100)


dev = "cpu" if cpu else "cuda"
dt = torch.float16 if cpu else torch.bfloat16
if cpu:
    shapes = [(1, 4, 2, 40, 16, False)]
    extra = []
else:
    shapes = [  # bench/lesson06.py's shapes where the lesson trails SDPA, then one it leads (a check on the change)
        (1, 32, 4, 2048, 128, False),
        (1, 32, 4, 2048, 64, False),
        (8, 32, 4, 1024, 64, False),
        (1, 32, 32, 2048, 128, True),
        (1, 32, 4, 2048, 128, True),
    ]
    extra = [(128, 128, 8, 2), (128, 64, 4, 3)]  # beside the lesson's rule
variants = [None, (1, False), (2, False), (0, True), (1, True)]
names = {None: "lesson", (1, False): "fold scale", (2, False): "q pre-scaled", (0, True): "WS", (1, True): "fold+WS"}
best = {}
for B, H, KV, T, D, causal in shapes:
    if time.time() - t_start > 140:
        say("time budget reached: stopping")
        break
    torch.manual_seed(0)
    q = torch.randn(B, T, H, D, device=dev, dtype=dt)
    k = torch.randn(B, T, KV, D, device=dev, dtype=dt)
    v = torch.randn(B, T, KV, D, device=dev, dtype=dt)
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    ref = F.scaled_dot_product_attention(qt.float(), kt.float(), vt.float(), is_causal=causal, enable_gqa=True)
    ref = ref.transpose(1, 2)
    sdpa_ms = graph_ms(lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal, enable_gqa=True))
    flops = attention_flops(B, H, T, D, causal)
    shape = f"B={B} H={H} KV={KV} T={T} D={D} {'causal' if causal else 'full'}"
    rule = attention_config(D, causal) if not cpu else (32, 16, 4, 1)
    say(f"{shape}: SDPA {sdpa_ms:.4f} ms {flops / sdpa_ms / 1e9:.0f} TFLOP/s; rule {rule}")
    for cfg in [rule] + [c for c in extra if c != rule and not (causal and c[0] < c[1])]:
        for variant in variants:
            tag = f"{shape} | {names[variant]} {cfg}"
            try:
                out = torch.full_like(q, float("nan"))
                launch(q, k, v, out, causal, *cfg, variant)
                err = float((out.float() - ref).abs().max())
                ok = err < 3e-2
                ms = graph_ms(lambda: launch(q, k, v, out, causal, *cfg, variant))
                say(f"{tag}: {'ok' if ok else 'FAIL'} err {err:.1e} {ms:.4f} ms {flops / ms / 1e9:.0f} TFLOP/s "
                    f"x SDPA {sdpa_ms / ms:.3f}")  # fmt: skip
                if ok and (shape not in best or ms < best[shape][1]):
                    best[shape] = (f"{names[variant]} {cfg}", ms, sdpa_ms / ms)
            except Exception as e:  # noqa: BLE001
                say(f"{tag}: ERROR {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
say("best per shape:")
for s, (name, ms, r) in best.items():
    say(f"  {s}: {name} {ms:.4f} ms x SDPA {r:.3f}")
say(f"total {time.time() - t_start:.0f} s")
