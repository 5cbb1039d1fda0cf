"""Lesson 12 sweep zb (issue 15): l12za's thin-tile tensor-core int4 GEMV on the lesson's own bytes.

Sweep l12za found l12x's kernel (floats from inline PTX, ``mma.sync`` at 32 rows and 2 warps a program) 1.10-1.32x
the table's kernel at M = 16 and 1.09x at M = 1 at Llama-3-8B's up projection, on weights repacked "planar" (a
group's first half of columns in the low nibbles). A repacking is a second format to keep. Here the same kernel
reads the lesson's own bytes (low nibble column 2j, high 2j + 1): each group of x is loaded whole and its even and
odd columns split apart in registers (``tl.split``), instead of l12w's loads at stride 2. Same modes, checks,
shapes and tiles as l12za, with the planar kernel again in the same run.

Run from the repo root: ``PYTHONPATH=$PWD OUT=$OUT python3 bench/sweeps/l12zb.py`` on the GPU (about 3 minutes),
``PYTHONPATH=$PWD python3 bench/sweeps/l12zb.py --cpu`` under the interpreter (tiny shapes, fp32).
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
from bench.sweeps.l12x import ASM_SUB, ASM_SUB_MUL, _codes, planar, probe  # noqa: E402
from lessons import l12_quantization as L  # noqa: E402

ENV = utils.mode.current()
say = Log("l12zb")
BUDGET = 420


@triton.jit
def w4a16_pairs_kernel(
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
    MODE: tl.constexpr,  # 0: scale on the sums; 1: scale in the tile
    PIPE: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    HAS_RESIDUAL: tl.constexpr,
    ASM_BF16: tl.constexpr,
    ASM_FP16: tl.constexpr,
    ASM_BF16_S: tl.constexpr,
    ASM_FP16_S: tl.constexpr,
):
    """The lesson's own bytes: byte j of a group holds its columns 2j (low nibble) and 2j + 1 (high); x's group
    loaded whole, its even and odd columns split apart in registers."""
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
    for g in tl.range(first, last, num_stages=PIPE):
        byte = tl.load(p_tile + g * HALF, mask=mask_n[:, None], other=0)
        k = g * GROUP_SIZE + tl.arange(0, GROUP_SIZE)
        x = tl.load(x_rows + k[None, :], mask=mask_m[:, None] & (k < K)[None, :], other=0.0)  # (BLOCK_M, G)
        x_lo, x_hi = tl.split(tl.reshape(x, (BLOCK_M, HALF, 2)))  # columns 2j and 2j + 1
        scale = tl.load(scale_ptr + rows_n * stride_sn + g, mask=mask_n, other=0.0)
        zero = tl.load(zero_ptr + rows_n * stride_sn + g, mask=mask_n, other=0)
        bias = tl.broadcast_to((zero.to(tl.float32) + OFFSET).to(x_lo.dtype)[:, None], (BLOCK_N, HALF))
        s_tile = tl.broadcast_to(scale.to(x_lo.dtype)[:, None], (BLOCK_N, HALF))
        w_lo, w_hi = _codes(byte, bias, s_tile, MAGIC, OFFSET, ASM, MODE == 1, ASM_BF16, ASM_FP16, ASM_BF16_S,
                            ASM_FP16_S)  # fmt: skip
        if MODE == 1:
            acc = tl.dot(w_lo, tl.trans(x_lo), acc, input_precision=DOT_PRECISION)
            acc = tl.dot(w_hi, tl.trans(x_hi), acc, input_precision=DOT_PRECISION)
        else:
            part = tl.dot(w_lo, tl.trans(x_lo), input_precision=DOT_PRECISION)
            part = tl.dot(w_hi, tl.trans(x_hi), part, input_precision=DOT_PRECISION)
            acc += part * scale.to(tl.float32)[:, None]
    acc = tl.trans(acc)
    mask = mask_m[:, None] & mask_n[None, :]
    rows_m = offs_m.to(tl.int64)[:, None] * stride_om
    if HAS_RESIDUAL:
        acc += tl.load(res_ptr + rows_m + offs_n[None, :], mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + tl.program_id(1) * stride_os + rows_m + offs_n[None, :], acc.to(out_ptr.dtype.element_ty),
             mask=mask)  # fmt: skip


def pairs(x, w, mode, BLOCK_N, warps, pipe, split):
    M, K = x.shape
    N = w.shape[0]
    out = torch.empty(M, N, device=x.device, dtype=x.dtype)
    s = L.FastSchedule("tile_swap", 16, BLOCK_N, w.group_size, split, warps, 1)
    magic, offset = L.MAGIC_BITS[x.dtype]
    return L._fast_launch(w4a16_pairs_kernel, triton.cdiv(N, BLOCK_N), x, (w.packed, w.scale, w.zero), out, M, N, K,
                          (x.stride(0), w.packed.stride(0), w.scale.stride(0)), s, None, GROUP_SIZE=w.group_size,
                          MAGIC=magic, OFFSET=offset, ASM=ENV.is_gpu and magic != 0, MODE=mode, PIPE=pipe,
                          DOT_PRECISION="ieee" if x.dtype == torch.float32 else "tf32", ASM_BF16=ASM_SUB["bf16"],
                          ASM_FP16=ASM_SUB["fp16"], ASM_BF16_S=ASM_SUB_MUL["bf16"],
                          ASM_FP16_S=ASM_SUB_MUL["fp16"])  # fmt: skip


def main():
    say(f"lesson 12 sweep zb (thin-tile tensor-core int4 GEMV on the lesson's bytes) on "
        f"{ENV.gpu_name if ENV.is_gpu else 'CPU (interpreter)'}, torch {torch.__version__}, triton "
        f"{triton.__version__}, {ENV.sm_count} SMs")  # fmt: skip
    if CPU:
        SHAPES, DT, G, MS = {"tiny": (40, 200)}, torch.float32, 32, (1, 3)
        TILES = [(16, 1, 2, 1), (32, 2, 2, 2)]
    else:
        SHAPES = {"8B up": (14336, 4096), "8B down": (4096, 14336), "1B up": (8192, 2048)}
        DT, G, MS = torch.bfloat16, 128, (1, 16)
        TILES = [(bn, w, p, sp) for bn, w in ((16, 1), (32, 1), (32, 2), (64, 4)) for p in (3, 4) for sp in (2, 4)]
    kinds = {"pairs, scale on sums": (False, 0), "pairs, scale in tile": (False, 1), "planar, scale on sums": (True, 0)}
    say("== shape | M | kernel | (BLOCK_N, warps, depth, split) | time | x table | x cuBLAS bf16")
    for label, (N, K) in SHAPES.items():
        torch.manual_seed(0)
        w = torch.randn(N, K, device=ENV.device, dtype=DT) / K**0.5
        w4 = L.quantize_int4_ref(w, G)
        packed = planar(w4)
        for M in MS:
            x = torch.randn(M, K, device=ENV.device, dtype=DT)
            ref = L.wxa16_ref(x.float(), w4)
            table = gtime(lambda: L.w4a16_fast(x, w4))
            cublas = gtime(lambda: x @ w.T)
            say(f"{label} ({N}, {K}) M={M}: table " + ("ran" if table is None else
                f"{table * 1e3:.2f} us, cuBLAS {cublas * 1e3:.2f} us"))  # fmt: skip
            best = {}
            for name, (is_planar, mode) in kinds.items():
                for bn, nw, pipe, split in TILES:
                    if time.time() - T0 > BUDGET:
                        break
                    cand = (bn, nw, pipe, split)

                    def fn(mode=mode, is_planar=is_planar, bn=bn, nw=nw, pipe=pipe, split=split):
                        if is_planar:
                            return probe(x, w4, packed, mode, bn, nw, pipe, split)
                        return pairs(x, w4, mode, bn, nw, pipe, split)

                    try:
                        out = fn().float()
                        err = float((out - ref).norm() / ref.norm())
                        if not err < (1e-5 if DT == torch.float32 else 1e-2):
                            say(f"{label} | {M} | {name} | {cand} | WRONG {err:.2e}")
                            continue
                        ms = gtime(fn)
                    except Exception as e:  # noqa: BLE001
                        say(f"{label} | {M} | {name} | {cand} | ERROR {type(e).__name__}: {str(e)[:160]}")
                        continue
                    if ms is None:
                        say(f"{label} | {M} | {name} | {cand} | ran (error {err:.1e})")
                        continue
                    say(f"{label} | {M} | {name} | {cand} | {ms * 1e3:7.2f} us | x{table / ms:5.2f} | "
                        f"x{cublas / ms:5.2f}")  # fmt: skip
                    if name not in best or ms < best[name][0]:
                        best[name] = (ms, cand)
            for name, (ms, cand) in best.items():
                say(f"-> {label} M={M} {name}: best {cand} {ms * 1e3:.2f} us, x{table / ms:.2f} the table's, "
                    f"x{cublas / ms:.2f} cuBLAS")  # fmt: skip
            say(f"  ({time.time() - T0:.0f} s)")
    say(f"total {time.time() - T0:.0f} s")


if __name__ == "__main__":
    main()
