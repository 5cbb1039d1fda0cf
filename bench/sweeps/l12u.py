"""Lesson 12 sweep u (issue 15): the int4 GEMV on tensor cores with no interleaving, and what one launch can read.

Every tensor-core kernel of the lesson builds its (BLOCK_N, G) tile of W from a byte's two nibbles with
``tl.join(lo, hi)`` and a reshape, so that k = 2j and 2j + 1 sit side by side as in memory. That reshape leaves
the values in a layout no dot takes, and Triton converts it through shared memory. This prototype never
interleaves. The low nibbles are W's even columns, the high ones its odd columns, so a group is two dots:
``dot(W_even, x_even.T) + dot(W_odd, x_odd.T)``, with x read at stride 2 (x is a few KB, from L2). Each operand of W
is then elementwise work on the loaded bytes, which Triton can take straight into the registers of a Hopper
``wgmma`` (W's rows on the tensor cores' M side, x's 1-16 rows padded to 16 on their N side). The format is the
lesson's own: same bytes, scales and zero points.

Part A (the ceiling): what one launch reading as many bytes as the 8B projections' int4 weights reaches (a torch
sum of the packed bytes as int32, a Triton kernel that only sums them, at several block sizes), against a copy
of the same bytes. Part B: the prototype at M = 1 and 16, at Llama-3-8B's and a 1B pair of projections, over its
tiles, warps, pipeline depths, splits of K and where the scale goes (on each group's sums, or into W's tile),
each checked against the fp32 reference, against the table's kernel (w4a16_fast) and cuBLAS's bf16 product,
replayed from CUDA graphs with L2 cleared.

Run from the repo root: ``PYTHONPATH=$PWD OUT=$OUT python3 bench/sweeps/l12u.py`` on the GPU (about 4 minutes),
``PYTHONPATH=$PWD python3 bench/sweeps/l12u.py --cpu`` under the interpreter (tiny shapes, fp32 and fp16: a check
of the kernel's arithmetic, no timings).
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
from bench.common import copy_of  # noqa: E402
from bench.sweeps.kit import Log, gtime  # noqa: E402
from lessons import l12_quantization as L  # noqa: E402

ENV = utils.mode.current()
say = Log("l12u")
BUDGET_A, BUDGET_B = 60, 480


def first_line(e):
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0][:200] if text else ''}"


@triton.jit
def read_sum_kernel(src_ptr, out_ptr, n, BLOCK: tl.constexpr, STEPS: tl.constexpr):
    """Sums the low bytes of STEPS blocks of BLOCK int32 a program (the only work: the loads, an AND and an add a
    word; the low bytes keep the sums inside int32)."""
    base = tl.program_id(0).to(tl.int64) * BLOCK * STEPS
    acc = tl.zeros((BLOCK,), dtype=tl.int32)
    for i in tl.range(0, STEPS):
        offs = base + i * BLOCK + tl.arange(0, BLOCK)
        acc += tl.load(src_ptr + offs, mask=offs < n, other=0) & 0xFF
    tl.store(out_ptr + tl.program_id(0), tl.sum(acc, 0))


@triton.jit
def w4a16_even_odd_kernel(
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
    SCALE_IN_TILE: tl.constexpr,  # True: (q - z) * s in W's tile, one chain of dots; False: s on each group's sums
    PIPE: tl.constexpr,  # the depth of the loop Triton pipelines
    DOT_PRECISION: tl.constexpr,
    HAS_RESIDUAL: tl.constexpr,
):
    """out (M, N) = x (M, K) @ dequant(W).T, W's rows on the tensor cores' M side: each group is
    dot(W_even, x_even.T) + dot(W_odd, x_odd.T), the even columns from the low nibbles, the odd from the high."""
    HALF: tl.constexpr = GROUP_SIZE // 2
    pid_n = tl.program_id(0)
    groups = tl.cdiv(K, GROUP_SIZE)
    per_split = tl.cdiv(groups, SPLIT_K)
    first = tl.program_id(1) * per_split
    last = tl.minimum(first + per_split, groups)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, BLOCK_M)
    offs_j = tl.arange(0, HALF)
    mask_n, mask_m = offs_n < N, offs_m < M
    rows_n = offs_n.to(tl.int64)
    p_tile = packed_ptr + rows_n[:, None] * stride_pn + offs_j[None, :]  # (BLOCK_N, HALF) bytes of a group
    x_even = x_ptr + offs_m.to(tl.int64)[None, :] * stride_xm + 2 * offs_j[:, None]  # (HALF, BLOCK_M): x.T, k = 2j
    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    for g in tl.range(first, last, num_stages=PIPE):
        byte = tl.load(p_tile + g * HALF, mask=mask_n[:, None], other=0)
        k_even = g * GROUP_SIZE + 2 * offs_j
        xe = tl.load(x_even + g * GROUP_SIZE, mask=(k_even < K)[:, None] & mask_m[None, :], other=0.0)
        xo = tl.load(x_even + g * GROUP_SIZE + 1, mask=(k_even + 1 < K)[:, None] & mask_m[None, :], other=0.0)
        scale = tl.load(scale_ptr + rows_n * stride_sn + g, mask=mask_n, other=0.0)
        zero = tl.load(zero_ptr + rows_n * stride_sn + g, mask=mask_n, other=0)
        bias = (zero.to(tl.float32) + OFFSET).to(xe.dtype)[:, None]
        if MAGIC == 0:
            lo = (byte & 0xF).to(xe.dtype) - bias
            hi = (byte >> 4).to(xe.dtype) - bias
        else:  # OFFSET + q from bits, minus OFFSET + z: exact small integers in x's dtype
            lo = ((byte & 0xF).to(tl.int16) | MAGIC).to(xe.dtype, bitcast=True) - bias
            hi = ((byte >> 4).to(tl.int16) | MAGIC).to(xe.dtype, bitcast=True) - bias
        if SCALE_IN_TILE:
            s = scale.to(xe.dtype)[:, None]
            acc = tl.dot(lo * s, xe, acc, input_precision=DOT_PRECISION)
            acc = tl.dot(hi * s, xo, acc, input_precision=DOT_PRECISION)
        else:
            part = tl.dot(lo, xe, input_precision=DOT_PRECISION)
            part = tl.dot(hi, xo, part, input_precision=DOT_PRECISION)
            acc += part * scale.to(tl.float32)[:, None]
    acc = tl.trans(acc)  # (BLOCK_M, BLOCK_N)
    mask = mask_m[:, None] & mask_n[None, :]
    rows_m = offs_m.to(tl.int64)[:, None] * stride_om
    if HAS_RESIDUAL:
        acc += tl.load(res_ptr + rows_m + offs_n[None, :], mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + tl.program_id(1) * stride_os + rows_m + offs_n[None, :], acc.to(out_ptr.dtype.element_ty),
             mask=mask)  # fmt: skip


def even_odd(x, w, BLOCK_N, warps, pipe, split, scale_in_tile):
    M, K = x.shape
    N = w.shape[0]
    out = torch.empty(M, N, device=x.device, dtype=x.dtype)
    s = L.FastSchedule("tile_swap", 16, BLOCK_N, w.group_size, split, warps, 1)
    magic, offset = L.MAGIC_BITS[x.dtype]
    return L._fast_launch(w4a16_even_odd_kernel, triton.cdiv(N, BLOCK_N), x, (w.packed, w.scale, w.zero), out, M, N,
                          K, (x.stride(0), w.packed.stride(0), w.scale.stride(0)), s, None, GROUP_SIZE=w.group_size,
                          MAGIC=magic, OFFSET=offset, SCALE_IN_TILE=scale_in_tile, PIPE=pipe,
                          DOT_PRECISION="ieee" if x.dtype == torch.float32 else "tf32")  # fmt: skip


def us(ms):
    return "ran" if ms is None else f"{ms * 1e3:7.2f} us"


say(f"lesson 12 sweep u (int4 GEMV: tensor cores, even/odd dots) on "
    f"{ENV.gpu_name if ENV.is_gpu else 'CPU (interpreter)'}, torch {torch.__version__}, triton {triton.__version__}, "
    f"{ENV.sm_count} SMs")  # fmt: skip

# -- A. what one launch reading this many bytes reaches
say("== A. reading the packed int4 weights of a projection once (graph, L2 cleared): what | time | GB/s read")
for label, (N, K) in ({"8B up": (14336, 4096), "1B up": (8192, 2048)} if not CPU else {"tiny": (64, 256)}).items():
    packed = torch.randint(0, 255, (N, K // 2), device=ENV.device, dtype=torch.uint8)
    words = packed.view(torch.int32).reshape(-1)
    n = words.numel()
    nbytes = packed.numel()
    ms = gtime(lambda: words.sum())
    say(
        f"{label} {nbytes / 1e6:.1f} MB | torch int32 sum | {us(ms)}"
        + ("" if ms is None else f" | {nbytes / ms / 1e6:6.0f}")
    )
    ms = gtime(copy_of(2 * nbytes)) if not CPU else None
    say(f"{label} | torch copy of the same bytes (read + write) | {us(ms)}"
        + ("" if ms is None else f" | {nbytes / ms / 1e6:6.0f} (read)"))  # fmt: skip
    part = torch.empty(n, device=ENV.device, dtype=torch.int32)
    for block, steps, warps in ((1024, 1, 4), (2048, 1, 4), (4096, 1, 8), (2048, 4, 4), (4096, 4, 8), (8192, 2, 8),
                                (1024, 8, 4)):  # fmt: skip
        if time.time() - T0 > BUDGET_A:
            break
        grid = (triton.cdiv(n, block * steps),)

        def run(block=block, steps=steps, warps=warps, grid=grid):
            read_sum_kernel[grid](words, part, n, BLOCK=block, STEPS=steps, num_warps=warps)

        run()
        got = int(part[: grid[0]].sum(dtype=torch.int64))
        if got != int((words & 0xFF).sum(dtype=torch.int64)):
            say(f"{label} | read_sum {block} x {steps}, {warps} warps | WRONG")
            continue
        ms = gtime(run)
        say(f"{label} | triton read+sum, {block * 4 >> 10} KB x {steps} a program, {warps} warps | {us(ms)}"
            + ("" if ms is None else f" | {nbytes / ms / 1e6:6.0f}"))  # fmt: skip

# -- B. the even/odd tensor-core kernel
if CPU:
    SHAPES = {"tiny": (40, 200)}  # N not a multiple of the tile, K not a multiple of the group
    DTYPES, G, MS = (torch.float32, torch.float16), 32, (1, 3)
    CANDIDATES = [(16, 4, 2, sp, st) for sp in (1, 2) for st in (False, True)]
else:
    SHAPES = {"8B up": (14336, 4096), "8B down": (4096, 14336), "1B up": (8192, 2048), "1B down": (2048, 8192)}
    DTYPES, G, MS = (torch.bfloat16,), 128, (1, 16)
    CANDIDATES = [(bn, w, p, sp, False) for bn, w in ((64, 4), (128, 4), (128, 8)) for p in (3, 5)
                  for sp in (1, 2, 4)] + [(64, 4, 3, 1, True), (128, 8, 3, 1, True)]  # fmt: skip
say("== B. even/odd tensor-core kernel (graph, L2 cleared): shape | M | (BLOCK_N, warps, depth, split, scale in "
    "tile) | time | GB/s | x table | x cuBLAS bf16")  # fmt: skip
for dt in DTYPES:
    for label, (N, K) in SHAPES.items():
        torch.manual_seed(0)
        w = torch.randn(N, K, device=ENV.device, dtype=dt) / K**0.5
        w4 = L.quantize_int4_ref(w, G)
        for M in MS:
            if time.time() - T0 > BUDGET_B:
                say(f"{label} M={M}: SKIPPED (time budget)")
                continue
            x = torch.randn(M, K, device=ENV.device, dtype=dt)
            nbytes = L.w4a16_bytes(M, N, K, G)
            ref = L.wxa16_ref(x.float(), w4)
            table = gtime(lambda: L.w4a16_fast(x, w4))
            cublas = gtime(lambda: x @ w.T)
            say(f"{label} ({N}, {K}) M={M} {str(dt)[6:]}: table {tuple(L.fast_schedule(4, M, N, K, G))} {us(table)}, "
                f"cuBLAS {us(cublas)}")  # fmt: skip
            best = None
            for bn, nw, pipe, split, sit in CANDIDATES:
                if time.time() - T0 > BUDGET_B:
                    break
                cand = (bn, nw, pipe, split, sit)
                try:
                    out = even_odd(x, w4, bn, nw, pipe, split, sit).float()
                    err = float((out - ref).norm() / ref.norm())
                    if not err < (1e-5 if dt == torch.float32 else 1e-2):
                        say(f"{label} | {M} | {cand} | WRONG {err:.2e}")
                        continue
                    ms = gtime(lambda: even_odd(x, w4, bn, nw, pipe, split, sit))
                except Exception as e:  # noqa: BLE001
                    say(f"{label} | {M} | {cand} | ERROR {first_line(e)}")
                    continue
                if ms is None:
                    say(f"{label} | {M} | {cand} | ran (error {err:.1e})")
                    continue
                say(f"{label} | {M} | {cand} | {us(ms)} | {nbytes / ms / 1e6:6.0f} | x{table / ms:5.2f} | "
                    f"x{cublas / ms:5.2f}")  # fmt: skip
                if best is None or ms < best[0]:
                    best = (ms, cand)
            if best:
                say(f"-> {label} M={M}: best {best[1]} {best[0] * 1e3:.2f} us, x{table / best[0]:.2f} the table's, "
                    f"x{cublas / best[0]:.2f} cuBLAS")  # fmt: skip
            say(f"  ({time.time() - T0:.0f} s)")
say(f"total {time.time() - T0:.0f} s")
