"""Lesson 12 sweep s (issue 15): an int4 GEMV that reads x as int32 pairs in the word tile's own layout.

Offline (sm_90) the lesson's pipe kernel has about 20 barriers a step, from the layout conversions that split x by
code through shared memory; sweeps l12n-l12r found every kind and tile near 25-27 us at Llama-3-8B's projections,
whatever its instruction count below about 4.5 a code. This prototype loads each word's eight numbers of x as four
int32 (two bf16 each) with the word tile's own shape, so nothing is converted (2-4 barriers a step), at 7.3-8.6
instructions a code. bf16 x only, M = 1, K a whole number of steps. Checked against the fp32 reference, then
replayed from CUDA graphs with L2 cleared against the table's kernel.

Run from the repo root: ``PYTHONPATH=$PWD OUT=$OUT python3 bench/sweeps/l12s.py`` on the GPU (about a minute),
``PYTHONPATH=$PWD python3 bench/sweeps/l12s.py --cpu`` under the interpreter (tiny shapes, fp16 x, which the bf16
bit tricks misread: a smoke test of the launch only, its result unchecked).
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

ENV = utils.mode.current()
say = Log("l12s")


@triton.jit
def _pick(base, POS: tl.constexpr):
    return (base & (0x4B000000 | (0xF << POS))).to(tl.float32, bitcast=True) - 8388608.0


@triton.jit
def gemv_pairs(
    x_ptr,
    packed_ptr,
    scale_ptr,
    zero_ptr,
    out_ptr,
    N,
    K,
    stride_pn,
    stride_sn,
    GROUP_SIZE: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    PIPE: tl.constexpr,
):
    GROUPS: tl.constexpr = BLOCK_K // GROUP_SIZE
    WORDS: tl.constexpr = GROUP_SIZE // 8
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_n = offs_n < N
    rows = tl.minimum(offs_n, N - 1).to(tl.int64)
    offs_g = tl.arange(0, GROUPS)
    cols = offs_g[:, None] * WORDS + tl.arange(0, WORDS)[None, :]
    p_tile = packed_ptr + rows[:, None, None] * stride_pn + cols[None, :, :]
    s_tile = rows[:, None] * stride_sn + offs_g[None, :]
    x_tile = x_ptr + (cols * 4)[None, :, :] + 0 * rows[:, None, None]  # x as int32 pairs: word j's x at 4j .. 4j+3
    acc = tl.zeros((BLOCK_N, GROUPS, WORDS), tl.float32)
    groups = K // GROUP_SIZE
    for g0 in tl.range(0, groups, GROUPS, num_stages=PIPE):
        word = tl.load(p_tile + g0 * WORDS)
        scale = tl.load(scale_ptr + s_tile + g0).to(tl.float32)
        zero = tl.load(zero_ptr + s_tile + g0).to(tl.float32)
        xp = x_tile + g0 * WORDS * 4
        p0 = tl.load(xp)
        p1 = tl.load(xp + 1)
        p2 = tl.load(xp + 2)
        p3 = tl.load(xp + 3)
        x0 = (p0 << 16).to(tl.float32, bitcast=True)
        x1 = (p0 & -65536).to(tl.float32, bitcast=True)
        x2 = (p1 << 16).to(tl.float32, bitcast=True)
        x3 = (p1 & -65536).to(tl.float32, bitcast=True)
        x4 = (p2 << 16).to(tl.float32, bitcast=True)
        x5 = (p2 & -65536).to(tl.float32, bitcast=True)
        x6 = (p3 << 16).to(tl.float32, bitcast=True)
        x7 = (p3 & -65536).to(tl.float32, bitcast=True)
        x_sum = ((x0 + x1) + (x2 + x3)) + ((x4 + x5) + (x6 + x7))
        lo = (word & 0xFFFFF) | 0x4B000000
        hi = ((word >> 12) & 0xFFF00) | 0x4B000000
        t = _pick(lo, 0) * x0
        t += _pick(lo, 4) * (x1 * 0.0625)
        t += _pick(lo, 8) * (x2 * 0.00390625)
        t += _pick(lo, 12) * (x3 * 0.000244140625)
        t += _pick(lo, 16) * (x4 * 0.0000152587890625)
        t += _pick(hi, 8) * (x5 * 0.00390625)
        t += _pick(hi, 12) * (x6 * 0.000244140625)
        t += _pick(hi, 16) * (x7 * 0.0000152587890625)
        acc += (t - zero[:, :, None] * x_sum) * scale[:, :, None]
    y = tl.sum(tl.sum(acc, axis=2), axis=1)
    tl.store(out_ptr + offs_n, y, mask=mask_n)


if CPU:
    DT, G, SHAPES, TILES = torch.float16, 32, {"tiny": (24, 256)}, [(8, 64, 2, 2)]
else:
    DT, G = torch.bfloat16, 128
    SHAPES = {"8B up": (14336, 4096), "8B down": (4096, 14336), "1B up": (8192, 2048)}
    TILES = [(8, 512, 4, 3), (16, 512, 2, 3), (4, 1024, 2, 3), (32, 256, 2, 4), (8, 1024, 2, 3), (16, 256, 4, 4)]
say(f"lesson 12 sweep s (int4 GEMV, x as int32 pairs) on {ENV.gpu_name if ENV.is_gpu else 'CPU (interpreter)'}, "
    f"torch {torch.__version__}, triton {triton.__version__}")  # fmt: skip
for label, (N, K) in SHAPES.items():
    torch.manual_seed(0)
    w4 = L.quantize_int4_ref((torch.randn(N, K) / K**0.5).to(ENV.device, DT), G)
    x = torch.randn(1, K).to(ENV.device, DT)
    words, pairs = w4.packed.view(torch.int32), x.view(torch.int32)
    ref = L.wxa16_ref(x.float(), w4)[0]
    base = gtime(lambda: L.w4a16_fast(x, w4))
    say(f"{label} ({N}, {K}): table {tuple(L.fast_schedule(4, 1, N, K, G))} "
        + ("ran" if base is None else f"{base * 1e3:.2f} us"))  # fmt: skip
    out = torch.empty(N, device=ENV.device)
    for bn, bk, nw, pipe in TILES:

        def run(bn=bn, bk=bk, nw=nw, pipe=pipe):
            gemv_pairs[(triton.cdiv(N, bn),)](pairs, words, w4.scale, w4.zero, out, N, K, words.stride(0),
                                              w4.scale.stride(0), GROUP_SIZE=G, BLOCK_N=bn, BLOCK_K=bk, PIPE=pipe,
                                              num_warps=nw, num_stages=1)  # fmt: skip

        run()
        err = float((out - ref).norm() / ref.norm())
        if ENV.is_gpu and not err < 1e-4:
            say(f"{label} | {(bn, bk, nw, pipe)} | WRONG {err:.2e}")
            continue
        ms = gtime(run)
        say(f"{label} | {(bn, bk, nw, pipe)} | " + ("ran" if ms is None else f"{ms * 1e3:7.2f} us | x{base / ms:5.2f}"))
say(f"total {time.time() - T0:.0f} s")
