"""Lesson 12 sweep z (issue 15): is it x, the scales or the codes' own work that holds the tensor-core GEMV back?

Sweep l12x's probe without any loads of W still took 23.5 us at Llama-3-8B's up projection: each step kept loading
x's two halves (the dots' B operand, through shared memory), the scales and the zero points. These probes of the
same planar kernel (l12x's, scale on the sums) take those loads out of the loop too, on the same grid:

- "x once": x's, the scales' and the zero points' first group loaded before the loop and reused, W loaded each step
  (the bytes of a real run; the sums are wrong on purpose);
- "nothing loaded": as "x once", and W's first group reused too, varied by one XOR a byte: the floats and the dots
  alone;
- "as l12x": x, scales and zero points every step, W's first group reused (l12x's probe again, for the same run).

Run from the repo root: ``PYTHONPATH=$PWD OUT=$OUT python3 bench/sweeps/l12z.py`` on the GPU (about a minute),
``PYTHONPATH=$PWD python3 bench/sweeps/l12z.py --cpu`` under the interpreter (tiny shapes, fp32: the probes run).
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
from bench.sweeps.l12x import ASM_SUB, ASM_SUB_MUL, _codes, planar  # noqa: E402
from lessons import l12_quantization as L  # noqa: E402

ENV = utils.mode.current()
say = Log("l12z")


@triton.jit
def w4a16_once_kernel(
    x_ptr,
    packed_ptr,
    scale_ptr,
    zero_ptr,
    res_ptr,
    out_ptr,
    M,
    N,
    K,
    stride_xm,
    stride_pn,
    stride_sn,
    stride_om,
    stride_os,
    GROUP_SIZE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SPLIT_K: tl.constexpr,
    MAGIC: tl.constexpr,
    OFFSET: tl.constexpr,
    ASM: tl.constexpr,
    LOAD_W: tl.constexpr,  # W's bytes loaded every step (True) or its first group reused, XORed
    LOAD_X: tl.constexpr,  # x, scales and zero points loaded every step (True) or their first group's reused
    PIPE: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    HAS_RESIDUAL: tl.constexpr,
    ASM_BF16: tl.constexpr,
    ASM_FP16: tl.constexpr,
    ASM_BF16_S: tl.constexpr,
    ASM_FP16_S: tl.constexpr,
):
    HALF: tl.constexpr = GROUP_SIZE // 2
    groups = tl.cdiv(K, GROUP_SIZE)
    per_split = tl.cdiv(groups, SPLIT_K)
    first = tl.program_id(1) * per_split
    last = tl.minimum(first + per_split, groups)
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    offs_j = tl.arange(0, HALF)
    mask_n, mask_m = offs_n < N, offs_m < M
    rows_n = offs_n.to(tl.int64)
    p_tile = packed_ptr + rows_n[:, None] * stride_pn + offs_j[None, :]
    x_rows = x_ptr + offs_m.to(tl.int64)[:, None] * stride_xm
    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    byte0 = tl.load(p_tile, mask=mask_n[:, None], other=0)
    x_lo0 = tl.load(x_rows + offs_j[None, :], mask=mask_m[:, None] & (offs_j < K)[None, :], other=0.0)
    x_hi0 = tl.load(x_rows + HALF + offs_j[None, :], mask=mask_m[:, None] & (HALF + offs_j < K)[None, :], other=0.0)
    scale0 = tl.load(scale_ptr + rows_n * stride_sn, mask=mask_n, other=0.0)
    zero0 = tl.load(zero_ptr + rows_n * stride_sn, mask=mask_n, other=0)
    for g in tl.range(first, last, num_stages=PIPE):
        if LOAD_W:
            byte = tl.load(p_tile + g * HALF, mask=mask_n[:, None], other=0)
        else:
            byte = byte0 ^ tl.cast(g, tl.uint8)
        if LOAD_X:
            k0 = g * GROUP_SIZE
            x_lo = tl.load(x_rows + k0 + offs_j[None, :], mask=mask_m[:, None] & (k0 + offs_j < K)[None, :], other=0.0)
            x_hi = tl.load(x_rows + k0 + HALF + offs_j[None, :], mask=mask_m[:, None] & (k0 + HALF + offs_j < K)[None, :],
                           other=0.0)  # fmt: skip
            scale = tl.load(scale_ptr + rows_n * stride_sn + g, mask=mask_n, other=0.0)
            zero = tl.load(zero_ptr + rows_n * stride_sn + g, mask=mask_n, other=0)
        else:
            x_lo, x_hi, scale, zero = x_lo0, x_hi0, scale0, zero0
        bias = tl.broadcast_to((zero.to(tl.float32) + OFFSET).to(x_lo.dtype)[:, None], (BLOCK_N, HALF))
        s_tile = tl.broadcast_to(scale.to(x_lo.dtype)[:, None], (BLOCK_N, HALF))
        w_lo, w_hi = _codes(byte, bias, s_tile, MAGIC, OFFSET, ASM, False, ASM_BF16, ASM_FP16, ASM_BF16_S, ASM_FP16_S)
        part = tl.dot(w_lo, tl.trans(x_lo), input_precision=DOT_PRECISION)
        part = tl.dot(w_hi, tl.trans(x_hi), part, input_precision=DOT_PRECISION)
        acc += part * scale.to(tl.float32)[:, None]
    acc = tl.trans(acc)
    mask = mask_m[:, None] & mask_n[None, :]
    rows_m = offs_m.to(tl.int64)[:, None] * stride_om
    tl.store(out_ptr + tl.program_id(1) * stride_os + rows_m + offs_n[None, :], acc.to(out_ptr.dtype.element_ty),
             mask=mask)  # fmt: skip


def run(x, w, packed, load_w, load_x, BLOCK_N, warps, pipe, split):
    M, K = x.shape
    N = w.shape[0]
    out = torch.empty(M, N, device=x.device, dtype=x.dtype)
    s = L.FastSchedule("tile_swap", 16, BLOCK_N, w.group_size, split, warps, 1)
    magic, offset = L.MAGIC_BITS[x.dtype]
    return L._fast_launch(w4a16_once_kernel, triton.cdiv(N, BLOCK_N), x, (packed, w.scale, w.zero), out, M, N, K,
                          (x.stride(0), packed.stride(0), w.scale.stride(0)), s, None, GROUP_SIZE=w.group_size,
                          MAGIC=magic, OFFSET=offset, ASM=ENV.is_gpu and magic != 0, LOAD_W=load_w, LOAD_X=load_x,
                          PIPE=pipe, DOT_PRECISION="ieee" if x.dtype == torch.float32 else "tf32",
                          ASM_BF16=ASM_SUB["bf16"], ASM_FP16=ASM_SUB["fp16"], ASM_BF16_S=ASM_SUB_MUL["bf16"],
                          ASM_FP16_S=ASM_SUB_MUL["fp16"])  # fmt: skip


def main():
    say(f"lesson 12 sweep z (tensor-core int4 GEMV: what the loop waits on) on "
        f"{ENV.gpu_name if ENV.is_gpu else 'CPU (interpreter)'}, torch {torch.__version__}, triton "
        f"{triton.__version__}, {ENV.sm_count} SMs")  # fmt: skip
    if CPU:
        SHAPES, DT, G = {"tiny": (40, 200)}, torch.float32, 32
        TILES = [(16, 4, 2, 1)]
    else:
        SHAPES, DT, G = {"8B up": (14336, 4096), "8B down": (4096, 14336)}, torch.bfloat16, 128
        TILES = [(64, 4, p, sp) for p in (2, 3) for sp in (2, 4, 8)]
    probes = {"as l12x (W reused)": (False, True), "x once (W loaded)": (True, False),
              "nothing loaded": (False, False), "whole (every load)": (True, True)}  # fmt: skip
    say("== shape | probe | (BLOCK_N, warps, depth, split) | time | x table")
    for label, (N, K) in SHAPES.items():
        torch.manual_seed(0)
        w4 = L.quantize_int4_ref(torch.randn(N, K, device=ENV.device, dtype=DT) / K**0.5, G)
        packed = planar(w4)
        x = torch.randn(1, K, device=ENV.device, dtype=DT)
        table = gtime(lambda: L.w4a16_fast(x, w4))
        say(f"{label} ({N}, {K}) M=1: table " + ("ran" if table is None else f"{table * 1e3:.2f} us"))
        for name, (lw, lx) in probes.items():
            best = None
            for bn, nw, pipe, split in TILES:
                cand = (bn, nw, pipe, split)
                try:
                    run(x, w4, packed, lw, lx, bn, nw, pipe, split)
                    ms = gtime(lambda: run(x, w4, packed, lw, lx, bn, nw, pipe, split))
                except Exception as e:  # noqa: BLE001
                    say(f"{label} | {name} | {cand} | ERROR {type(e).__name__}: {str(e)[:160]}")
                    continue
                if ms is None:
                    say(f"{label} | {name} | {cand} | ran")
                    continue
                say(f"{label} | {name} | {cand} | {ms * 1e3:7.2f} us | x{table / ms:5.2f}")
                if best is None or ms < best[0]:
                    best = (ms, cand)
            if best:
                say(f"-> {label} {name}: best {best[1]} {best[0] * 1e3:.2f} us")
    say(f"total {time.time() - T0:.0f} s")


if __name__ == "__main__":
    main()
