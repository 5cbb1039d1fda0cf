"""Lesson 12 sweep t (issue 15): the int4 GEMV with its codes interleaved so that x needs no layout conversion.

The lesson packs code s of word j as column k = 8 j + s: a thread holding 4 neighbouring words needs x's 32
neighbouring columns split by s, a conversion through shared memory (about 20 barriers a step in the pipe kernel's
loop, sm_90, offline). Interleaved in blocks of 32 columns (nibble s of word 4 c + i is column 32 c + 4 s + i, a
permutation inside each block: groups and scales unchanged), the four words' x at nibble s are four neighbouring
columns, loaded in the word tile's own layout: 2-4 barriers a step, 4.5 instructions a code at the in-thread tiles
(offline). A prototype (bf16 x, M = 1, K a whole number of steps), checked against the fp32 reference of the
unpermuted weight, then timed against the table's kernel, replayed from CUDA graphs with L2 cleared.

Run from the repo root: ``PYTHONPATH=$PWD OUT=$OUT python3 bench/sweeps/l12t.py`` on the GPU (about a minute),
``PYTHONPATH=$PWD python3 bench/sweeps/l12t.py --cpu`` under the interpreter (tiny shapes, fp32: a check of the
permutation and the kernel's arithmetic, no timings).
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
say = Log("l12t")


@triton.jit
def _pick(base, POS: tl.constexpr):
    return (base & (0x4B000000 | (0xF << POS))).to(tl.float32, bitcast=True) - 8388608.0


@triton.jit
def gemv_inter(
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
    # codes interleaved in blocks of 32: nibble s of word 4c + i is column k = 32 c + 4 s + i
    GROUPS: tl.constexpr = BLOCK_K // GROUP_SIZE
    WORDS: tl.constexpr = GROUP_SIZE // 8
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_n = offs_n < N
    rows = tl.minimum(offs_n, N - 1).to(tl.int64)
    offs_g = tl.arange(0, GROUPS)
    w = tl.arange(0, WORDS)
    cols = offs_g[:, None] * WORDS + w[None, :]
    p_tile = packed_ptr + rows[:, None, None] * stride_pn + cols[None, :, :]
    s_tile = rows[:, None] * stride_sn + offs_g[None, :]
    kx = offs_g[:, None] * GROUP_SIZE + ((w // 4) * 32 + w % 4)[None, :]  # column of nibble 0 of each word
    x_tile = x_ptr + kx[None, :, :]
    acc = tl.zeros((BLOCK_N, GROUPS, WORDS), tl.float32)
    groups = K // GROUP_SIZE
    for g0 in tl.range(0, groups, GROUPS, num_stages=PIPE):
        word = tl.load(p_tile + g0 * WORDS)
        scale = tl.load(scale_ptr + s_tile + g0).to(tl.float32)
        zero = tl.load(zero_ptr + s_tile + g0).to(tl.float32)
        xp = x_tile + g0 * GROUP_SIZE
        x0 = tl.load(xp).to(tl.float32)
        x1 = tl.load(xp + 4).to(tl.float32)
        x2 = tl.load(xp + 8).to(tl.float32)
        x3 = tl.load(xp + 12).to(tl.float32)
        x4 = tl.load(xp + 16).to(tl.float32)
        x5 = tl.load(xp + 20).to(tl.float32)
        x6 = tl.load(xp + 24).to(tl.float32)
        x7 = tl.load(xp + 28).to(tl.float32)
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


def interleaved(w4):
    """w4's packed codes with each block of 32 columns interleaved: nibble s of word 4 c + i is column 32 c + 4 s + i."""
    q = L.unpack_int4(w4.packed)  # (N, K) codes, column k at position k
    N, K = q.shape
    blocks = q.view(N, K // 32, 8, 4)  # [c, s, i] = column 32 c + 4 s + i
    moved = blocks.permute(0, 1, 3, 2).reshape(N, K)  # position 32 c + 8 i + s = word 4 c + i, nibble s
    return L.pack_int4(moved.contiguous()).view(torch.int32)


if CPU:
    DT, G, SHAPES, TILES = torch.float32, 32, {"tiny": (24, 256)}, [(8, 64, 2, 2), (4, 128, 1, 3)]
else:
    DT, G = torch.bfloat16, 128
    SHAPES = {"8B up": (14336, 4096), "8B down": (4096, 14336), "1B up": (8192, 2048), "1B down": (2048, 8192)}
    TILES = [(8, 512, 4, 3), (16, 512, 2, 3), (8, 1024, 2, 3), (4, 1024, 2, 3), (32, 256, 2, 4), (8, 1024, 1, 3),
             (16, 512, 2, 4), (8, 1024, 1, 4)]  # fmt: skip
say(f"lesson 12 sweep t (int4 GEMV, interleaved codes) on {ENV.gpu_name if ENV.is_gpu else 'CPU (interpreter)'}, "
    f"torch {torch.__version__}, triton {triton.__version__}")  # fmt: skip
for label, (N, K) in SHAPES.items():
    torch.manual_seed(0)
    w4 = L.quantize_int4_ref((torch.randn(N, K) / K**0.5).to(ENV.device, DT), G)
    x = torch.randn(1, K).to(ENV.device, DT)
    words = interleaved(w4)
    ref = L.wxa16_ref(x.float(), w4)[0]
    base = gtime(lambda: L.w4a16_fast(x, w4))
    say(f"{label} ({N}, {K}): table {tuple(L.fast_schedule(4, 1, N, K, G))} "
        + ("ran" if base is None else f"{base * 1e3:.2f} us"))  # fmt: skip
    out = torch.empty(N, device=ENV.device)
    for bn, bk, nw, pipe in TILES:

        def run(bn=bn, bk=bk, nw=nw, pipe=pipe):
            gemv_inter[(triton.cdiv(N, bn),)](x, words, w4.scale, w4.zero, out, N, K, words.stride(0),
                                              w4.scale.stride(0), GROUP_SIZE=G, BLOCK_N=bn, BLOCK_K=bk, PIPE=pipe,
                                              num_warps=nw, num_stages=1)  # fmt: skip

        try:
            run()
        except Exception as e:  # noqa: BLE001
            say(f"{label} | {(bn, bk, nw, pipe)} | ERROR {type(e).__name__}: {str(e).strip().splitlines()[0][:150]}")
            continue
        err = float((out - ref).norm() / ref.norm())
        if not err < 1e-4:
            say(f"{label} | {(bn, bk, nw, pipe)} | WRONG {err:.2e}")
            continue
        ms = gtime(run)
        say(
            f"{label} | {(bn, bk, nw, pipe)} | "
            + (f"ran, {err:.1e} from the reference" if ms is None else f"{ms * 1e3:7.2f} us | x{base / ms:5.2f}")
        )
say(f"total {time.time() - T0:.0f} s")
