"""Lesson 12 sweep o (issue 15): what sets the int4 GEMV's time at M = 1, if not its instructions (sweep l12n).

A probe: the lesson's pipelined stream loop ("pipe": its full steps in ``tl.range(..., num_stages=PIPE)``, the
exact _pick dots, M = 1, K a whole number of steps) with two switches, timed at each tile:

- SCALES: 0 = each step loads its scales (bf16) and zero points (uint8) as the lesson does (2 and 1 bytes a
  thread: too narrow for cp.async, so the pipeliner leaves them in the loop, a wait every step); 1 = loaded once
  before the loop and reused (wrong sums: a timing diagnostic only); 2 = one int32 a group (the scale's 16 bits,
  the zero point above them), 4 bytes: cp.async-able, so pipelined with the words.
- DOTS: 1 = the lesson's dots; 0 = one conversion a word instead (what the loads alone cost).

Each probe with DOTS at SCALES 0 and 2 is checked against the fp32 reference first. Replayed from CUDA graphs, L2 cleared,
against a copy of the same bytes and the table's kernel, at Llama-3-8B's up and down projections and a 1B one.

Run from the repo root: ``PYTHONPATH=$PWD OUT=$OUT python3 bench/sweeps/l12o.py`` on the GPU (about 3 minutes),
``PYTHONPATH=$PWD python3 bench/sweeps/l12o.py --cpu`` under the interpreter (tiny shapes, no timings).
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
from bench.sweeps.kit import Log, gtime  # noqa: E402
from lessons import l12_quantization as L  # noqa: E402
from lessons.l12_quantization import _stream_word_sums, _x_by_code_and_sum  # noqa: E402, F401

ENV = utils.mode.current()
say = Log("l12o")
BUDGET_S = 400


@triton.jit
def gemv_probe(x_ptr, packed_ptr, scale_ptr, zero_ptr, meta_ptr, out_ptr, N, K, stride_pn, stride_sn,
               GROUP_SIZE: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PIPE: tl.constexpr,
               SCALES: tl.constexpr, DOTS: tl.constexpr):  # fmt: skip
    GROUPS: tl.constexpr = BLOCK_K // GROUP_SIZE
    WORDS: tl.constexpr = GROUP_SIZE // 8
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_n = offs_n < N
    rows_n = tl.minimum(offs_n, N - 1).to(tl.int64)
    offs_g = tl.arange(0, GROUPS)
    offs_k = tl.arange(0, BLOCK_K)
    cols = offs_g[:, None] * WORDS + tl.arange(0, WORDS)[None, :]
    p_tile = packed_ptr + rows_n[:, None, None] * stride_pn + cols[None, :, :]
    s_tile = rows_n[:, None] * stride_sn + offs_g[None, :]
    acc = tl.zeros((BLOCK_N, GROUPS, WORDS), tl.float32)
    acc_x = tl.zeros((BLOCK_K,), tl.float32)
    scale0 = tl.load(scale_ptr + s_tile)
    zero0 = tl.load(zero_ptr + s_tile)
    groups = K // GROUP_SIZE
    for g0 in tl.range(0, groups, GROUPS, num_stages=PIPE):
        word = tl.load(p_tile + g0 * WORDS)
        if SCALES == 0:
            scale = tl.load(scale_ptr + s_tile + g0).to(tl.float32)
            zero = tl.load(zero_ptr + s_tile + g0)
        elif SCALES == 1:
            scale = scale0.to(tl.float32)
            zero = zero0
        else:
            m = tl.load(meta_ptr + s_tile + g0)
            scale = ((m & 0xFFFF) << 16).to(tl.float32, bitcast=True)  # a bf16's bits are an fp32's high half
            zero = (m >> 16) & 0xFF
        xk = tl.load(x_ptr + g0 * GROUP_SIZE + offs_k).to(tl.float32)
        if DOTS:
            x0, x1, x2, x3, x4, x5, x6, x7, x_sum = _x_by_code_and_sum(xk, GROUPS, WORDS)
            acc += _stream_word_sums(word, x0, x1, x2, x3, x4, x5, x6, x7, x_sum, scale, zero)
        else:
            acc += (word.to(tl.float32) - zero.to(tl.float32)[:, :, None]) * scale[:, :, None]
            acc_x += xk
    y = tl.sum(tl.sum(acc, axis=2), axis=1)
    if not DOTS:
        y += tl.sum(acc_x, axis=0)
    tl.store(out_ptr + offs_n, y, mask=mask_n)


def meta_of(w4):
    """One int32 a group: the scale's 16 bits (bf16), the zero point in bits 16-23."""
    bits = w4.scale.view(torch.int16).to(torch.int32) & 0xFFFF
    return (bits | (w4.zero.to(torch.int32) << 16)).contiguous()


if CPU:
    DT, G = torch.float32, 32
    SHAPES = {"tiny": (24, 256)}
    TILES = [(4, 64, 2, 2), (8, 128, 1, 3)]
else:
    DT, G = torch.bfloat16, 128
    SHAPES = {"8B up": (14336, 4096), "8B down": (4096, 14336), "1B up": (8192, 2048)}
    TILES = [(8, 512, 4, 3), (4, 1024, 2, 3), (4, 512, 2, 3), (8, 1024, 1, 3), (4, 1024, 1, 3), (2, 1024, 1, 4),
             (8, 1024, 2, 3), (16, 512, 2, 3), (4, 512, 4, 4)]  # fmt: skip

say(f"lesson 12 sweep o (int4 GEMV probe: scales and dots) on {ENV.gpu_name if ENV.is_gpu else 'CPU (interpreter)'}, "
    f"torch {torch.__version__}, triton {triton.__version__}, {ENV.sm_count} SMs")  # fmt: skip
say("shape | (BLOCK_N, BLOCK_K, warps, PIPE) | SCALES | DOTS | time | GB/s | % copy | x table | registers, spills")
for label, (N, K) in SHAPES.items():
    if time.time() - T0 > BUDGET_S:
        say(f"{label}: SKIPPED (time budget)")
        continue
    torch.manual_seed(0)
    w = torch.randn(N, K, device=ENV.device, dtype=DT) / K**0.5
    w4 = L.quantize_int4_ref(w, G)
    words = w4.packed.view(torch.int32)
    meta = meta_of(w4) if DT == torch.bfloat16 else None
    x = torch.randn(1, K, device=ENV.device, dtype=DT)
    nbytes = L.w4a16_bytes(1, N, K, G)
    src = torch.empty(max(nbytes // 2, 1), dtype=torch.int8, device=ENV.device)
    dst = torch.empty_like(src)
    copy_ms = gtime(lambda: dst.copy_(src))
    ref = L.wxa16_ref(x.float(), w4)  # fp32 (the first run compared with w4a16_fast's bf16 output: 1.6e-3 apart)
    table_ms = gtime(lambda: L.w4a16_fast(x, w4))
    say(f"{label} ({N}, {K}), {nbytes / 1e6:.1f} MB: copy of as many bytes read+written "
        f"{copy_ms * 1e3 if copy_ms else float('nan'):.2f} us, the table's kernel "
        f"{table_ms * 1e3 if table_ms else float('nan'):.2f} us ({L.fast_schedule(4, 1, N, K, G)})")  # fmt: skip
    out = torch.empty(N, device=ENV.device, dtype=torch.float32)
    for bn, bk, nw, pipe in TILES:
        for scales in (0, 1, 2):
            if scales == 2 and meta is None:
                continue
            for dots in (1, 0):
                if time.time() - T0 > BUDGET_S:
                    break

                def run(bn=bn, bk=bk, nw=nw, pipe=pipe, scales=scales, dots=dots):
                    return gemv_probe[(triton.cdiv(N, bn),)](
                        x, words, w4.scale, w4.zero, meta if meta is not None else words, out, N, K,
                        words.stride(0), w4.scale.stride(0), GROUP_SIZE=G, BLOCK_N=bn, BLOCK_K=bk, PIPE=pipe,
                        SCALES=scales, DOTS=dots, num_warps=nw, num_stages=1)  # fmt: skip

                tag = f"{label} | {(bn, bk, nw, pipe)} | {scales} | {dots}"
                try:
                    k = run()
                    if dots and scales != 1:
                        err = float((out - ref[0]).norm() / ref.norm())
                        if not err < 1e-4:
                            say(f"{tag} | WRONG: {err:.2e} from w4a16_fast")
                            continue
                    ms = gtime(run)
                except Exception as e:  # noqa: BLE001
                    say(f"{tag} | ERROR {type(e).__name__}: {str(e).strip().splitlines()[0][:150] if str(e) else ''}")
                    continue
                regs = f"{getattr(k, 'n_regs', '?')} regs, {getattr(k, 'n_spills', '?')} spills"
                if ms is None:
                    say(f"{tag} | ran | {regs}")
                    continue
                say(f"{tag} | {ms * 1e3:7.2f} us | {nbytes / ms / 1e6:6.0f} GB/s | {100 * copy_ms / ms:5.1f}% copy | "
                    f"x{table_ms / ms:5.2f} | {regs}")  # fmt: skip
    say(f"  ({time.time() - T0:.0f} s)")
    if not CPU:
        torch.cuda.empty_cache()
say(f"total {time.time() - T0:.0f} s")
