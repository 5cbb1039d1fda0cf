"""Lesson 12 sweep w (issue 15): the int4 GEMV on tensor cores with the dequantization in a few PTX instructions.

Sweep l12u's even/odd kernel put W's tile into the registers of Hopper's ``wgmma`` (Triton hoists the layout
change above elementwise work up to the load), but spent about 6 PTX instructions a code building the floats
(mask, convert to int16, or, bitcast, subtract, each on one value) and was no faster than the CUDA-core kernel.
Here the floats are built by ``tl.inline_asm_elementwise``, four bytes (eight codes) at a time on 32-bit words:
two ``prmt`` spread the bytes into 16-bit lanes, ``lop3`` ORs each nibble into the exponent of OFFSET (0x4300:
128.0 in bf16; 0x6400: 1024.0 in fp16), and one ``sub.bf16x2`` takes OFFSET + z off two codes at once, exactly:
about 1.5 instructions a code. Two layouts of the same codes:

- "even/odd": the lesson's own bytes (low nibble k = 2j, high k = 2j + 1): a group is two dots, x read at stride 2;
- "planar": each group repacked so that the low nibbles hold its first half of columns and the high nibbles its
  second half: x's two halves are contiguous tiles (pipelined copies instead of single elements).

Each candidate is checked against the fp32 reference, then timed against the table's kernel (w4a16_fast) and
cuBLAS's bf16 product, replayed from CUDA graphs with L2 cleared, at M = 1 and 16, Llama-3-8B's and a 1B pair of
projections. Under the interpreter the floats are built with plain Triton operations (no PTX there), the same
values.

Run from the repo root: ``PYTHONPATH=$PWD OUT=$OUT python3 bench/sweeps/l12w.py`` on the GPU (about 3 minutes),
``PYTHONPATH=$PWD python3 bench/sweeps/l12w.py --cpu`` under the interpreter (tiny shapes, fp32 and fp16).
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
say = Log("l12w")
BUDGET = 420


def first_line(e):
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0][:200] if text else ''}"


@triton.jit
def _codes(byte, bias, MAGIC: tl.constexpr, OFFSET: tl.constexpr, ASM: tl.constexpr):
    """(low nibble - z, high nibble - z) of each byte in bias's dtype, exact; bias = OFFSET + z, shaped as byte."""
    if ASM:
        if MAGIC == 0x4300:  # bf16
            lo, hi = tl.inline_asm_elementwise(
                asm="""{
                .reg .b32 t0, t1, u0, u1;
                prmt.b32 t0, $4, 0, 0x4140;
                prmt.b32 t1, $4, 0, 0x4342;
                lop3.b32 u0, t0, 0x000F000F, 0x43004300, 0xEA;
                lop3.b32 u1, t1, 0x000F000F, 0x43004300, 0xEA;
                sub.rn.bf16x2 $0, u0, $5;
                sub.rn.bf16x2 $1, u1, $6;
                shr.b32 t0, t0, 4;
                shr.b32 t1, t1, 4;
                lop3.b32 u0, t0, 0x000F000F, 0x43004300, 0xEA;
                lop3.b32 u1, t1, 0x000F000F, 0x43004300, 0xEA;
                sub.rn.bf16x2 $2, u0, $5;
                sub.rn.bf16x2 $3, u1, $6;
                }""",
                constraints="=r,=r,=r,=r,r,r,r",
                args=[byte, bias],
                dtype=(tl.bfloat16, tl.bfloat16),
                is_pure=True,
                pack=4,
            )
        else:  # fp16
            lo, hi = tl.inline_asm_elementwise(
                asm="""{
                .reg .b32 t0, t1, u0, u1;
                prmt.b32 t0, $4, 0, 0x4140;
                prmt.b32 t1, $4, 0, 0x4342;
                lop3.b32 u0, t0, 0x000F000F, 0x64006400, 0xEA;
                lop3.b32 u1, t1, 0x000F000F, 0x64006400, 0xEA;
                sub.rn.f16x2 $0, u0, $5;
                sub.rn.f16x2 $1, u1, $6;
                shr.b32 t0, t0, 4;
                shr.b32 t1, t1, 4;
                lop3.b32 u0, t0, 0x000F000F, 0x64006400, 0xEA;
                lop3.b32 u1, t1, 0x000F000F, 0x64006400, 0xEA;
                sub.rn.f16x2 $2, u0, $5;
                sub.rn.f16x2 $3, u1, $6;
                }""",
                constraints="=r,=r,=r,=r,r,r,r",
                args=[byte, bias],
                dtype=(tl.float16, tl.float16),
                is_pure=True,
                pack=4,
            )
    else:
        lo = ((byte & 0xF).to(tl.float32) + OFFSET).to(bias.dtype) - bias
        hi = ((byte >> 4).to(tl.float32) + OFFSET).to(bias.dtype) - bias
    return lo, hi


@triton.jit
def w4a16_asm_kernel(
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
    ASM: tl.constexpr,  # the floats built by inline PTX (a GPU), or by plain operations (the interpreter)
    PLANAR: tl.constexpr,  # bytes hold columns j and HALF + j of a group (repacked); False: 2j and 2j + 1 (the lesson's)
    PIPE: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    HAS_RESIDUAL: tl.constexpr,
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
    p_tile = packed_ptr + rows_n[:, None] * stride_pn + offs_j[None, :]  # (BLOCK_N, HALF)
    x_rows = x_ptr + offs_m.to(tl.int64)[:, None] * stride_xm  # (BLOCK_M, 1)
    if PLANAR:
        k_lo, k_hi = offs_j, HALF + offs_j
    else:
        k_lo, k_hi = 2 * offs_j, 2 * offs_j + 1
    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    for g in tl.range(first, last, num_stages=PIPE):
        byte = tl.load(p_tile + g * HALF, mask=mask_n[:, None], other=0)
        k0 = g * GROUP_SIZE
        x_lo = tl.load(x_rows + k0 + k_lo[None, :], mask=mask_m[:, None] & (k0 + k_lo < K)[None, :], other=0.0)
        x_hi = tl.load(x_rows + k0 + k_hi[None, :], mask=mask_m[:, None] & (k0 + k_hi < K)[None, :], other=0.0)
        scale = tl.load(scale_ptr + rows_n * stride_sn + g, mask=mask_n, other=0.0).to(tl.float32)
        zero = tl.load(zero_ptr + rows_n * stride_sn + g, mask=mask_n, other=0)
        bias = tl.broadcast_to((zero.to(tl.float32) + OFFSET).to(x_lo.dtype)[:, None], (BLOCK_N, HALF))
        w_lo, w_hi = _codes(byte, bias, MAGIC, OFFSET, ASM)
        part = tl.dot(w_lo, tl.trans(x_lo), input_precision=DOT_PRECISION)
        part = tl.dot(w_hi, tl.trans(x_hi), part, input_precision=DOT_PRECISION)
        acc += part * scale[:, None]
    acc = tl.trans(acc)  # (BLOCK_M, BLOCK_N)
    mask = mask_m[:, None] & mask_n[None, :]
    rows_m = offs_m.to(tl.int64)[:, None] * stride_om
    if HAS_RESIDUAL:
        acc += tl.load(res_ptr + rows_m + offs_n[None, :], mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + tl.program_id(1) * stride_os + rows_m + offs_n[None, :], acc.to(out_ptr.dtype.element_ty),
             mask=mask)  # fmt: skip


def planar(w: L.Int4Weight) -> torch.Tensor:
    """The same codes, each group's byte j holding its columns j (low nibble) and G / 2 + j (high)."""
    G = w.group_size
    q = L.unpack_int4(w.packed).view(w.packed.shape[0], -1, G)  # (N, groups, G)
    return (q[:, :, : G // 2] | (q[:, :, G // 2 :] << 4)).reshape(w.packed.shape).contiguous()


def asm_gemv(x, w, packed, is_planar, BLOCK_N, warps, pipe, split):
    M, K = x.shape
    N = w.shape[0]
    out = torch.empty(M, N, device=x.device, dtype=x.dtype)
    s = L.FastSchedule("tile_swap", 16, BLOCK_N, w.group_size, split, warps, 1)
    magic, offset = L.MAGIC_BITS[x.dtype]
    return L._fast_launch(w4a16_asm_kernel, triton.cdiv(N, BLOCK_N), x, (packed, w.scale, w.zero), out, M, N, K,
                          (x.stride(0), packed.stride(0), w.scale.stride(0)), s, None, GROUP_SIZE=w.group_size,
                          MAGIC=magic, OFFSET=offset, ASM=ENV.is_gpu and magic != 0, PLANAR=is_planar, PIPE=pipe,
                          DOT_PRECISION="ieee" if x.dtype == torch.float32 else "tf32")  # fmt: skip


def us(ms):
    return "ran" if ms is None else f"{ms * 1e3:7.2f} us"


say(f"lesson 12 sweep w (int4 GEMV: tensor cores, floats from inline PTX) on "
    f"{ENV.gpu_name if ENV.is_gpu else 'CPU (interpreter)'}, torch {torch.__version__}, triton {triton.__version__}, "
    f"{ENV.sm_count} SMs")  # fmt: skip
if CPU:
    SHAPES = {"tiny": (40, 200)}  # N not a multiple of the tile, K not a multiple of the group
    DTYPES, G, MS = (torch.float32, torch.float16), 32, (1, 3)
    CANDIDATES = [(lay, 16, 4, 2, sp) for lay in ("even/odd", "planar") for sp in (1, 2)]
else:
    SHAPES = {"8B up": (14336, 4096), "8B down": (4096, 14336), "1B up": (8192, 2048), "1B down": (2048, 8192)}
    DTYPES, G, MS = (torch.bfloat16,), 128, (1, 16)
    CANDIDATES = [(lay, bn, w, p, sp) for lay in ("planar", "even/odd") for bn, w in ((64, 4), (128, 4), (128, 8))
                  for p in (3, 4) for sp in (1, 2, 4)]  # fmt: skip
say("== shape | M | (layout, BLOCK_N, warps, depth, split) | time | GB/s | x table | x cuBLAS bf16")
for dt in DTYPES:
    for label, (N, K) in SHAPES.items():
        torch.manual_seed(0)
        w = torch.randn(N, K, device=ENV.device, dtype=dt) / K**0.5
        w4 = L.quantize_int4_ref(w, G)
        packed = {"even/odd": w4.packed, "planar": planar(w4)}
        for M in MS:
            if time.time() - T0 > BUDGET:
                say(f"{label} M={M}: SKIPPED (time budget)")
                continue
            x = torch.randn(M, K, device=ENV.device, dtype=dt)
            nbytes = L.w4a16_bytes(M, N, K, G)
            ref = L.wxa16_ref(x.float(), w4)
            table = gtime(lambda: L.w4a16_fast(x, w4))
            cublas = gtime(lambda: x @ w.T)
            say(f"{label} ({N}, {K}) M={M} {str(dt)[6:]}: table {tuple(L.fast_schedule(4, M, N, K, G))} {us(table)}, "
                f"cuBLAS {us(cublas)}")  # fmt: skip
            best = {}
            for lay, bn, nw, pipe, split in CANDIDATES:
                if time.time() - T0 > BUDGET:
                    break
                cand = (lay, bn, nw, pipe, split)
                p = packed[lay]
                try:
                    out = asm_gemv(x, w4, p, lay == "planar", bn, nw, pipe, split).float()
                    err = float((out - ref).norm() / ref.norm())
                    if not err < (1e-5 if dt == torch.float32 else 1e-2):
                        say(f"{label} | {M} | {cand} | WRONG {err:.2e}")
                        continue
                    ms = gtime(lambda: asm_gemv(x, w4, p, lay == "planar", bn, nw, pipe, split))
                except Exception as e:  # noqa: BLE001
                    say(f"{label} | {M} | {cand} | ERROR {first_line(e)}")
                    continue
                if ms is None:
                    say(f"{label} | {M} | {cand} | ran (error {err:.1e})")
                    continue
                say(f"{label} | {M} | {cand} | {us(ms)} | {nbytes / ms / 1e6:6.0f} | x{table / ms:5.2f} | "
                    f"x{cublas / ms:5.2f}")  # fmt: skip
                if lay not in best or ms < best[lay][0]:
                    best[lay] = (ms, cand)
            for lay, (ms, cand) in best.items():
                say(f"-> {label} M={M} {lay}: best {cand} {ms * 1e3:.2f} us, x{table / ms:.2f} the table's, "
                    f"x{cublas / ms:.2f} cuBLAS")  # fmt: skip
            say(f"  ({time.time() - T0:.0f} s)")
say(f"total {time.time() - T0:.0f} s")
