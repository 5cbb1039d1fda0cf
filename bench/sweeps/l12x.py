"""Lesson 12 sweep x (issue 15): where the tensor-core int4 GEMV's time goes, and the scale inside the tile.

Sweep l12w's planar kernel (floats from inline PTX, about 5 instructions a code) took 29-36 us at Llama-3-8B's
projections, where a kernel that only reads the codes takes 14 (l12v). Its loop waits for each group's two
``wgmma`` before it can scale their sums, so the tensor cores never run ahead of the loads. This sweep times one
kernel in several modes, on the same data and grid:

- MODE 0: as l12w (the scale on each group's sums);
- MODE 1: the scale inside W's tile, (q - z) * s rounded once in x's dtype (the lesson's spec), one more
  ``mul.bf16x2`` a pair of codes, so that the dots chain into one accumulator and need not be waited for;
- MODE 2 (a probe, its output wrong on purpose): the loads alone, each byte added up as it comes;
- MODE 3 (a probe): no loads of W in the loop (its first group loaded once, varied by an XOR a byte): the
  dequantization and the dots alone.

Modes 0 and 1 are checked against the fp32 reference, then timed against the table's kernel (w4a16_fast) and
cuBLAS's bf16 product, replayed from CUDA graphs with L2 cleared, at M = 1 and 16, Llama-3-8B's projections.

Run from the repo root: ``PYTHONPATH=$PWD OUT=$OUT python3 bench/sweeps/l12x.py`` on the GPU (about 2 minutes),
``PYTHONPATH=$PWD python3 bench/sweeps/l12x.py --cpu`` under the interpreter (tiny shapes, fp32 and fp16: modes 0
and 1 checked, the probes run).
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
say = Log("l12x")
BUDGET = 400

_SUB = """{
.reg .b32 t0, t1, u0, u1;
prmt.b32 t0, $4, 0, 0x4140;
prmt.b32 t1, $4, 0, 0x4342;
lop3.b32 u0, t0, 0x000F000F, MAGIC2, 0xEA;
lop3.b32 u1, t1, 0x000F000F, MAGIC2, 0xEA;
sub.rn.TYPE $0, u0, $5;
sub.rn.TYPE $1, u1, $6;
shr.b32 t0, t0, 4;
shr.b32 t1, t1, 4;
lop3.b32 u0, t0, 0x000F000F, MAGIC2, 0xEA;
lop3.b32 u1, t1, 0x000F000F, MAGIC2, 0xEA;
sub.rn.TYPE $2, u0, $5;
sub.rn.TYPE $3, u1, $6;
}"""
_SUB_MUL = """{
.reg .b32 t0, t1, u0, u1;
prmt.b32 t0, $4, 0, 0x4140;
prmt.b32 t1, $4, 0, 0x4342;
lop3.b32 u0, t0, 0x000F000F, MAGIC2, 0xEA;
lop3.b32 u1, t1, 0x000F000F, MAGIC2, 0xEA;
sub.rn.TYPE u0, u0, $5;
sub.rn.TYPE u1, u1, $6;
mul.rn.TYPE $0, u0, $7;
mul.rn.TYPE $1, u1, $8;
shr.b32 t0, t0, 4;
shr.b32 t1, t1, 4;
lop3.b32 u0, t0, 0x000F000F, MAGIC2, 0xEA;
lop3.b32 u1, t1, 0x000F000F, MAGIC2, 0xEA;
sub.rn.TYPE u0, u0, $5;
sub.rn.TYPE u1, u1, $6;
mul.rn.TYPE $2, u0, $7;
mul.rn.TYPE $3, u1, $8;
}"""
ASM_SUB = {k: _SUB.replace("MAGIC2", m).replace("TYPE", t) for k, m, t in
           (("bf16", "0x43004300", "bf16x2"), ("fp16", "0x64006400", "f16x2"))}  # fmt: skip
ASM_SUB_MUL = {k: _SUB_MUL.replace("MAGIC2", m).replace("TYPE", t) for k, m, t in
               (("bf16", "0x43004300", "bf16x2"), ("fp16", "0x64006400", "f16x2"))}  # fmt: skip


def first_line(e):
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0][:200] if text else ''}"


@triton.jit
def _codes(byte, bias, scale, MAGIC: tl.constexpr, OFFSET: tl.constexpr, ASM: tl.constexpr, SCALED: tl.constexpr,
           ASM_BF16: tl.constexpr, ASM_FP16: tl.constexpr, ASM_BF16_S: tl.constexpr, ASM_FP16_S: tl.constexpr):  # fmt: skip
    """(low nibble - z, high nibble - z) of each byte in bias's dtype, times scale with SCALED; exact before the
    scale, rounded once after it. bias = OFFSET + z and scale are shaped as byte."""
    if ASM:
        if SCALED:
            if MAGIC == 0x4300:
                lo, hi = tl.inline_asm_elementwise(ASM_BF16_S, "=r,=r,=r,=r,r,r,r,r,r", [byte, bias, scale],
                                                   dtype=(tl.bfloat16, tl.bfloat16), is_pure=True, pack=4)  # fmt: skip
            else:
                lo, hi = tl.inline_asm_elementwise(ASM_FP16_S, "=r,=r,=r,=r,r,r,r,r,r", [byte, bias, scale],
                                                   dtype=(tl.float16, tl.float16), is_pure=True, pack=4)  # fmt: skip
        else:
            if MAGIC == 0x4300:
                lo, hi = tl.inline_asm_elementwise(ASM_BF16, "=r,=r,=r,=r,r,r,r", [byte, bias],
                                                   dtype=(tl.bfloat16, tl.bfloat16), is_pure=True, pack=4)  # fmt: skip
            else:
                lo, hi = tl.inline_asm_elementwise(ASM_FP16, "=r,=r,=r,=r,r,r,r", [byte, bias],
                                                   dtype=(tl.float16, tl.float16), is_pure=True, pack=4)  # fmt: skip
    else:
        lo = ((byte & 0xF).to(tl.float32) + OFFSET).to(bias.dtype) - bias
        hi = ((byte >> 4).to(tl.float32) + OFFSET).to(bias.dtype) - bias
        if SCALED:
            lo, hi = lo * scale, hi * scale
    return lo, hi


@triton.jit
def w4a16_probe_kernel(
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
    MODE: tl.constexpr,  # 0: scale on the sums; 1: scale in the tile; 2: loads only; 3: no loads of W
    PIPE: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    HAS_RESIDUAL: tl.constexpr,
    ASM_BF16: tl.constexpr,
    ASM_FP16: tl.constexpr,
    ASM_BF16_S: tl.constexpr,
    ASM_FP16_S: tl.constexpr,
):
    """The planar layout (l12w): byte j of a group holds its columns j (low nibble) and G / 2 + j (high)."""
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
    if MODE == 3:
        byte0 = tl.load(p_tile, mask=mask_n[:, None], other=0)
    for g in tl.range(first, last, num_stages=PIPE):
        if MODE == 3:  # W's first group, loaded once before the loop, varied by one XOR a byte
            byte = byte0 ^ tl.cast(g, tl.uint8)
        else:
            byte = tl.load(p_tile + g * HALF, mask=mask_n[:, None], other=0)
        if MODE == 2:
            acc += tl.sum(byte.to(tl.float32), 1)[:, None]
        else:
            k0 = g * GROUP_SIZE
            x_lo = tl.load(x_rows + k0 + offs_j[None, :], mask=mask_m[:, None] & (k0 + offs_j < K)[None, :], other=0.0)
            x_hi = tl.load(x_rows + k0 + HALF + offs_j[None, :], mask=mask_m[:, None] & (k0 + HALF + offs_j < K)[None, :],
                           other=0.0)  # fmt: skip
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


def planar(w: L.Int4Weight) -> torch.Tensor:
    """The same codes, each group's byte j holding its columns j (low nibble) and G / 2 + j (high)."""
    G = w.group_size
    q = L.unpack_int4(w.packed).view(w.packed.shape[0], -1, G)
    return (q[:, :, : G // 2] | (q[:, :, G // 2 :] << 4)).reshape(w.packed.shape).contiguous()


def probe(x, w, packed, mode, BLOCK_N, warps, pipe, split):
    M, K = x.shape
    N = w.shape[0]
    out = torch.empty(M, N, device=x.device, dtype=x.dtype)
    s = L.FastSchedule("tile_swap", 16, BLOCK_N, w.group_size, split, warps, 1)
    magic, offset = L.MAGIC_BITS[x.dtype]
    return L._fast_launch(w4a16_probe_kernel, triton.cdiv(N, BLOCK_N), x, (packed, w.scale, w.zero), out, M, N, K,
                          (x.stride(0), packed.stride(0), w.scale.stride(0)), s, None, GROUP_SIZE=w.group_size,
                          MAGIC=magic, OFFSET=offset, ASM=ENV.is_gpu and magic != 0, MODE=mode, PIPE=pipe,
                          DOT_PRECISION="ieee" if x.dtype == torch.float32 else "tf32", ASM_BF16=ASM_SUB["bf16"],
                          ASM_FP16=ASM_SUB["fp16"], ASM_BF16_S=ASM_SUB_MUL["bf16"],
                          ASM_FP16_S=ASM_SUB_MUL["fp16"])  # fmt: skip


def us(ms):
    return "ran" if ms is None else f"{ms * 1e3:7.2f} us"


def main():
    say(f"lesson 12 sweep x (tensor-core int4 GEMV: modes and probes) on "
        f"{ENV.gpu_name if ENV.is_gpu else 'CPU (interpreter)'}, torch {torch.__version__}, triton {triton.__version__}, "
        f"{ENV.sm_count} SMs")  # fmt: skip
    if CPU:
        SHAPES = {"tiny": (40, 200)}
        DTYPES, G, MS = (torch.float32, torch.float16), 32, (1, 3)
        TILES = [(16, 4, 2, sp) for sp in (1, 2)]
    else:
        SHAPES = {"8B up": (14336, 4096), "8B down": (4096, 14336)}
        DTYPES, G, MS = (torch.bfloat16,), 128, (1, 16)
        TILES = [(bn, w, p, sp) for bn, w in ((64, 4), (128, 8)) for p in (3, 5) for sp in (2, 4, 8)]
    MODES = {0: "scale on sums", 1: "scale in tile", 2: "PROBE loads only", 3: "PROBE no W loads"}
    say("== shape | M | mode | (BLOCK_N, warps, depth, split) | time | GB/s | x table | x cuBLAS bf16")
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
                for mode, name in MODES.items():
                    if M == 16 and mode >= 2:
                        continue  # the probes at M = 1 only
                    for bn, nw, pipe, split in TILES:
                        if time.time() - T0 > BUDGET:
                            break
                        cand = (bn, nw, pipe, split)
                        try:
                            out = probe(x, w4, packed, mode, bn, nw, pipe, split).float()
                            if mode < 2:
                                err = float((out - ref).norm() / ref.norm())
                                if not err < (1e-5 if dt == torch.float32 else 1e-2):
                                    say(f"{label} | {M} | {name} | {cand} | WRONG {err:.2e}")
                                    continue
                            ms = gtime(lambda: probe(x, w4, packed, mode, bn, nw, pipe, split))
                        except Exception as e:  # noqa: BLE001
                            say(f"{label} | {M} | {name} | {cand} | ERROR {first_line(e)}")
                            continue
                        if ms is None:
                            say(f"{label} | {M} | {name} | {cand} | ran")
                            continue
                        say(f"{label} | {M} | {name} | {cand} | {us(ms)} | {nbytes / ms / 1e6:6.0f} | x{table / ms:5.2f} | "
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
