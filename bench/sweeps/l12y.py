"""Lesson 12 sweep y (issue 15): the tensor-core int4 GEMV with several groups a step (more work in flight).

Sweep l12x's probes split the planar kernel's time at Llama-3-8B's up projection: its loads alone take 19.7 us,
its dequantization and dots alone (no loads of W) 23.5 us, the whole 27.4. The instructions a code are few (about
5), so the dots wait on a chain: shared-memory loads, the PTX that builds the floats, the ``wgmma``, its wait,
barriers, one group at a time, with about 7 programs an SM. Here each loop step takes GROUPS groups: their bytes
in one load, GROUPS independent chains of floats, 2 GROUPS dots before one wait. Same data, grid and checks as
l12x (the scale in W's tile, or on each group's sums), with its "no loads of W" probe again, at M = 1 and 16.

Run from the repo root: ``PYTHONPATH=$PWD OUT=$OUT python3 bench/sweeps/l12y.py`` on the GPU (about 2 minutes),
``PYTHONPATH=$PWD python3 bench/sweeps/l12y.py --cpu`` under the interpreter (tiny shapes, fp32 and fp16).
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
say = Log("l12y")
BUDGET = 400


def first_line(e):
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0][:200] if text else ''}"


@triton.jit
def w4a16_groups_kernel(
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
    GROUPS: tl.constexpr,  # groups a loop step
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SPLIT_K: tl.constexpr,
    MAGIC: tl.constexpr,
    OFFSET: tl.constexpr,
    ASM: tl.constexpr,
    MODE: tl.constexpr,  # 0: scale on the sums; 1: scale in the tile; 3: no loads of W (a probe)
    PIPE: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    HAS_RESIDUAL: tl.constexpr,
    ASM_BF16: tl.constexpr,
    ASM_FP16: tl.constexpr,
    ASM_BF16_S: tl.constexpr,
    ASM_FP16_S: tl.constexpr,
):
    """l12x's planar kernel, GROUPS groups a step (K split in whole steps; the last step's missing groups masked)."""
    HALF: tl.constexpr = GROUP_SIZE // 2
    groups = tl.cdiv(K, GROUP_SIZE)
    steps = tl.cdiv(groups, GROUPS)
    per_split = tl.cdiv(steps, SPLIT_K)
    first = tl.program_id(1) * per_split
    last = tl.minimum(first + per_split, steps)
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    offs_j = tl.arange(0, HALF)
    mask_n, mask_m = offs_n < N, offs_m < M
    rows_n = offs_n.to(tl.int64)
    p_tile = packed_ptr + rows_n[:, None] * stride_pn + offs_j[None, :]
    x_rows = x_ptr + offs_m.to(tl.int64)[:, None] * stride_xm
    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    if MODE == 3:
        byte0 = tl.load(p_tile, mask=mask_n[:, None], other=0)
    for step in tl.range(first, last, num_stages=PIPE):
        for i in tl.static_range(GROUPS):
            g = step * GROUPS + i
            inside = g < groups
            if MODE == 3:
                byte = byte0 ^ tl.cast(g, tl.uint8)
            else:
                byte = tl.load(p_tile + g * HALF, mask=mask_n[:, None] & inside, other=0)
            k0 = g * GROUP_SIZE
            x_lo = tl.load(x_rows + k0 + offs_j[None, :], mask=mask_m[:, None] & (k0 + offs_j < K)[None, :], other=0.0)
            x_hi = tl.load(x_rows + k0 + HALF + offs_j[None, :], mask=mask_m[:, None] & (k0 + HALF + offs_j < K)[None, :],
                           other=0.0)  # fmt: skip
            scale = tl.load(scale_ptr + rows_n * stride_sn + g, mask=mask_n & inside, other=0.0)
            zero = tl.load(zero_ptr + rows_n * stride_sn + g, mask=mask_n & inside, other=0)
            bias = tl.broadcast_to((zero.to(tl.float32) + OFFSET).to(x_lo.dtype)[:, None], (BLOCK_N, HALF))
            s_tile = tl.broadcast_to(scale.to(x_lo.dtype)[:, None], (BLOCK_N, HALF))
            w_lo, w_hi = _codes(byte, bias, s_tile, MAGIC, OFFSET, ASM, MODE != 0, ASM_BF16, ASM_FP16, ASM_BF16_S,
                                ASM_FP16_S)  # fmt: skip
            if MODE == 0:
                part = tl.dot(w_lo, tl.trans(x_lo), input_precision=DOT_PRECISION)
                part = tl.dot(w_hi, tl.trans(x_hi), part, input_precision=DOT_PRECISION)
                acc += part * scale.to(tl.float32)[:, None]
            else:
                acc = tl.dot(w_lo, tl.trans(x_lo), acc, input_precision=DOT_PRECISION)
                acc = tl.dot(w_hi, tl.trans(x_hi), acc, input_precision=DOT_PRECISION)
    acc = tl.trans(acc)
    mask = mask_m[:, None] & mask_n[None, :]
    rows_m = offs_m.to(tl.int64)[:, None] * stride_om
    if HAS_RESIDUAL:
        acc += tl.load(res_ptr + rows_m + offs_n[None, :], mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + tl.program_id(1) * stride_os + rows_m + offs_n[None, :], acc.to(out_ptr.dtype.element_ty),
             mask=mask)  # fmt: skip


def run(x, w, packed, mode, groups, BLOCK_N, warps, pipe, split):
    M, K = x.shape
    N = w.shape[0]
    out = torch.empty(M, N, device=x.device, dtype=x.dtype)
    s = L.FastSchedule("tile_swap", 16, BLOCK_N, w.group_size, split, warps, 1)
    magic, offset = L.MAGIC_BITS[x.dtype]
    return L._fast_launch(w4a16_groups_kernel, triton.cdiv(N, BLOCK_N), x, (packed, w.scale, w.zero), out, M, N, K,
                          (x.stride(0), packed.stride(0), w.scale.stride(0)), s, None, GROUP_SIZE=w.group_size,
                          GROUPS=groups, MAGIC=magic, OFFSET=offset, ASM=ENV.is_gpu and magic != 0, MODE=mode,
                          PIPE=pipe, DOT_PRECISION="ieee" if x.dtype == torch.float32 else "tf32",
                          ASM_BF16=ASM_SUB["bf16"], ASM_FP16=ASM_SUB["fp16"], ASM_BF16_S=ASM_SUB_MUL["bf16"],
                          ASM_FP16_S=ASM_SUB_MUL["fp16"])  # fmt: skip


def us(ms):
    return "ran" if ms is None else f"{ms * 1e3:7.2f} us"


def main():
    say(f"lesson 12 sweep y (tensor-core int4 GEMV, several groups a step) on "
        f"{ENV.gpu_name if ENV.is_gpu else 'CPU (interpreter)'}, torch {torch.__version__}, triton "
        f"{triton.__version__}, {ENV.sm_count} SMs")  # fmt: skip
    if CPU:
        SHAPES = {"tiny": (40, 200)}
        DTYPES, G, MS = (torch.float32, torch.float16), 32, (1, 3)
        TILES = [(gr, 16, 4, 2, sp) for gr in (2, 4) for sp in (1, 2)]
    else:
        SHAPES = {"8B up": (14336, 4096), "8B down": (4096, 14336)}
        DTYPES, G, MS = (torch.bfloat16,), 128, (1, 16)
        TILES = [(gr, bn, w, p, sp) for gr in (2, 4) for bn, w in ((64, 4), (128, 8)) for p in (2, 3)
                 for sp in (2, 4, 8)]  # fmt: skip
    modes = {1: "scale in tile", 0: "scale on sums", 3: "PROBE no W loads"}
    say("== shape | M | mode | (groups a step, BLOCK_N, warps, depth, split) | time | GB/s | x table | x cuBLAS bf16")
    for dt in DTYPES:
        for label, (N, K) in SHAPES.items():
            torch.manual_seed(0)
            w = torch.randn(N, K, device=ENV.device, dtype=dt) / K**0.5
            w4 = L.quantize_int4_ref(w, G)
            packed = planar(w4)
            for M in MS:
                x = torch.randn(M, K, device=ENV.device, dtype=dt)
                nbytes = L.w4a16_bytes(M, N, K, G)
                ref = L.wxa16_ref(x.float(), w4)
                table = gtime(lambda: L.w4a16_fast(x, w4))
                cublas = gtime(lambda: x @ w.T)
                say(f"{label} ({N}, {K}) M={M} {str(dt)[6:]}: table {us(table)}, cuBLAS {us(cublas)}")
                best = {}
                for mode, name in modes.items():
                    if M == 16 and mode == 3:
                        continue
                    for gr, bn, nw, pipe, split in TILES:
                        if time.time() - T0 > BUDGET:
                            break
                        cand = (gr, bn, nw, pipe, split)
                        try:
                            out = run(x, w4, packed, mode, gr, bn, nw, pipe, split).float()
                            if mode != 3:
                                err = float((out - ref).norm() / ref.norm())
                                if not err < (1e-5 if dt == torch.float32 else 1e-2):
                                    say(f"{label} | {M} | {name} | {cand} | WRONG {err:.2e}")
                                    continue
                            ms = gtime(lambda: run(x, w4, packed, mode, gr, bn, nw, pipe, split))
                        except Exception as e:  # noqa: BLE001
                            say(f"{label} | {M} | {name} | {cand} | ERROR {first_line(e)}")
                            continue
                        if ms is None:
                            say(f"{label} | {M} | {name} | {cand} | ran")
                            continue
                        say(f"{label} | {M} | {name} | {cand} | {us(ms)} | {nbytes / ms / 1e6:6.0f} | "
                            f"x{table / ms:5.2f} | x{cublas / ms:5.2f}")  # fmt: skip
                        if name not in best or ms < best[name][0]:
                            best[name] = (ms, cand)
                for name, (ms, cand) in best.items():
                    say(f"-> {label} M={M} {name}: best {cand} {ms * 1e3:.2f} us, x{table / ms:.2f} the table's, "
                        f"x{cublas / ms:.2f} cuBLAS")  # fmt: skip
                say(f"  ({time.time() - T0:.0f} s)")
    say(f"total {time.time() - T0:.0f} s")


if __name__ == "__main__":
    main()
