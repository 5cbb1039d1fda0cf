"""Lesson 05 sweep y, 2026-11-28 (issue 12): the 1024^3 product, where matmul() trails cuBLAS (0.898x fp16, 0.892x
bf16 on the H200, results/h200-2026-11-28-s17) with the GPU half idle: the wave-aware prune keeps one tile,
64 x 128 (128 tiles on 132 SMs, 16 steps of K each).

Two ways to give the SMs more, shorter work, each timed as make bench times matmul() (utils.timing, L2 flushed,
median) between two cuBLAS timings:
  - matmul_kernel at other tiles, warps and stages (the autotuner never sees them at this shape);
  - split-K: each tile's K range cut into SPLIT parts, one program a part (SPLIT times the programs, each 1/SPLIT
    of the loop). Each part writes its fp32 block to a workspace and counts itself in at a per-tile counter (an
    atomic, after a barrier); the part that arrives last adds the SPLIT blocks in a FIXED order (part 0 first), so
    the result is the same bits at every call whichever part finishes last, stores C and sets the counter back
    to 0 for the next call (no memset launch).
Every candidate is checked against an fp32 product (tolerance as lesson 05's check) and, for split-K, for the same
bits over repeated calls, before it is timed. 2048^3 and 16 x 4096 x 4096 are timed too for the split-K rows, to
see where it must not be chosen.

Run on an H200 (results/h200-2026-11-28-s19/sweeps/l05y.txt; l05y-python-launch.txt is a first run that timed
the candidates launched from Python, slower than the GPU's work at this size): nothing beat the lesson's pick, the
best tile within the noise of it; split-K 0.55-0.62x cuBLAS at SPLIT 2. Nothing changed.

Run from the repo root: ``PYTHONPATH=$PWD python3 bench/sweeps/l05y.py`` on a GPU (< 200 s), ``... --cpu`` under the
interpreter (tiny shapes, no timings: a check of the prototype).
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
from bench.sweeps.kit import Log, bench_ms, graphed  # noqa: E402
from lessons import l05_matmul as L  # noqa: E402

ENV = utils.mode.current()
DEVICE = ENV.device
BUDGET_S = 190
say = Log("l05y")


@triton.jit
def matmul_splitk_kernel(a_ptr, b_ptr, c_ptr, part_ptr, count_ptr, M, N, K, stride_am, stride_ak, stride_bk,
                         stride_bn, stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                         BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, SPLIT: tl.constexpr):  # fmt: skip
    tile = tl.program_id(0)
    part = tl.program_id(1)
    pid_m, pid_n = L.grouped_tile(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
    steps = tl.cdiv(tl.cdiv(K, BLOCK_K), SPLIT)  # K steps a part; the last part may have fewer (or none)
    k0 = part * steps * BLOCK_K
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + (k0 + offs_k[None, :]) * stride_ak
    b_ptrs = b_ptr + (k0 + offs_k[:, None]) * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, steps):
        k_left = K - k0 - k * BLOCK_K
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_left), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c_mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    if SPLIT == 1:
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=c_mask)
    else:
        block = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
        n_tiles = tl.num_programs(0)
        tl.store(part_ptr + (part * n_tiles + tile).to(tl.int64) * (BLOCK_M * BLOCK_N) + block, acc)
        tl.debug_barrier()  # every thread's share of the block is written before the count says so
        arrived = tl.atomic_add(count_ptr + tile, 1, sem="acq_rel")
        if arrived == SPLIT - 1:  # the last part of this tile: add all SPLIT blocks, part 0 first
            total = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for p in tl.static_range(SPLIT):
                total += tl.load(part_ptr + (p * n_tiles + tile).to(tl.int64) * (BLOCK_M * BLOCK_N) + block,
                                 cache_modifier=".cg")  # fmt: skip
            tl.store(c_ptrs, total.to(c_ptr.dtype.element_ty), mask=c_mask)
            tl.store(count_ptr + tile, 0)  # ready for the next call


WORK = {}


def splitk(a, b, c, BM, BN, BK, warps, stages, split, group=8):
    M, K = a.shape
    N = b.shape[1]
    tiles = triton.cdiv(M, BM) * triton.cdiv(N, BN)
    key = (tiles, split, BM * BN)
    if key not in WORK:
        WORK[key] = (torch.empty(split * tiles * BM * BN, device=a.device, dtype=torch.float32),
                     torch.zeros(tiles, device=a.device, dtype=torch.int32))  # fmt: skip
    part, count = WORK[key]
    matmul_splitk_kernel[(tiles, split)](a, b, c, part, count, M, N, K, a.stride(0), a.stride(1), b.stride(0),
                                        b.stride(1), c.stride(0), c.stride(1), BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK,
                                        GROUP_M=group, SPLIT=split, num_warps=warps, num_stages=stages)  # fmt: skip
    return c


def tiled(a, b, c, BM, BN, BK, warps, stages, group=8):
    args, meta = L.matmul_launch_args(a, b, c)
    L.matmul_kernel.fn[L.matmul_grid(args[4], args[5])](*args, **meta, BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK,
                                                        GROUP_M=group, num_warps=warps, num_stages=stages)  # fmt: skip
    return c


def check(fn, a, b, c, ref, tol, repeat):
    c.fill_(float("nan"))
    fn()
    if not torch.allclose(c.float(), ref, atol=tol["atol"], rtol=tol["rtol"]):
        return f"FAIL (max error {(c.float() - ref).abs().nan_to_num(float('inf')).max().item():.3g})"
    first = c.clone()
    for _ in range(repeat):
        c.fill_(float("nan"))
        fn()
        if not torch.equal(c, first):
            return "FAIL (not the same bits from call to call)"
    return None


def run(shape, dtype, candidates):
    M, N, K = shape
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    a = torch.randn(M, K, device=DEVICE, dtype=dtype, generator=gen)
    b = torch.randn(K, N, device=DEVICE, dtype=dtype, generator=gen)
    c = torch.empty(M, N, device=DEVICE, dtype=dtype)
    ref = a.float() @ b.float()
    tol = L.matmul_tolerance(dtype, K, K**0.5)
    name = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}[dtype]
    say(
        f"\n== {M}x{N}x{K} {name}  (x cuBLAS: cuBLAS's time before and after the candidate, averaged, over its; "
        f"all replayed from CUDA graphs)"
    )

    def paired(label, fn):
        if time.time() - T0 > BUDGET_S:
            say(f"   {label:48s} SKIPPED (past {BUDGET_S} s)")
            return
        blas = graphed(lambda: torch.matmul(a, b, out=c))
        before = bench_ms(blas)
        ms = bench_ms(graphed(fn))  # the GPU's work alone: Triton's launch from Python costs more than 1024^3 takes
        after = bench_ms(blas)
        say(f"   {label:48s} {ms:9.5f} ms   x cuBLAS {(before + after) / 2 / ms:6.3f}")

    paired("matmul() as the lesson has it", lambda: L.matmul(a, b, out=c))
    for cand in candidates:
        kind, cfg = cand[0], cand[1:]
        if kind == "tile":
            label = "tile BM={} BN={} BK={} w={} s={}".format(*cfg)
            fn = lambda cfg=cfg: tiled(a, b, c, *cfg)  # noqa: E731
        else:
            label = "split-K BM={} BN={} BK={} w={} s={} SPLIT={}".format(*cfg)
            fn = lambda cfg=cfg: splitk(a, b, c, *cfg)  # noqa: E731
        try:
            bad = check(fn, a, b, c, ref, tol, repeat=3 if kind == "tile" else 20)
        except Exception as e:  # a candidate that does not compile (shared memory) says so; the sweep goes on
            say(f"   {label:48s} ERROR {type(e).__name__}: {str(e)[:70]}")
            continue
        if bad:
            say(f"   {label:48s} {bad}")
            continue
        paired(label, fn)


def main():
    say(f"lesson 05 sweep y on {ENV.gpu_name if ENV.is_gpu else 'CPU (interpreter)'}, torch {torch.__version__}, "
        f"triton {triton.__version__}")  # fmt: skip
    if CPU:
        tiles = [("tile", 16, 16, 16, 1, 1)]
        splits = [("split", 16, 16, 16, 1, 1, 2), ("split", 16, 32, 16, 1, 1, 3), ("split", 32, 16, 16, 1, 1, 4)]
        for shape in ((40, 48, 100), (33, 17, 70)):
            run(shape, torch.float16, tiles + splits)
        return
    tiles = [("tile", *t) for t in ((64, 128, 64, 4, 3), (64, 128, 64, 8, 4), (64, 128, 128, 4, 3),
                                    (64, 64, 64, 4, 4), (64, 64, 128, 4, 3), (128, 64, 64, 4, 4),
                                    (64, 128, 64, 8, 3), (64, 128, 128, 8, 3), (64, 64, 64, 4, 3), (64, 64, 64, 2, 4),
                                    (128, 128, 64, 4, 4), (128, 128, 64, 8, 4), (64, 128, 32, 4, 5))]  # fmt: skip
    splits = [("split", *s) for s in ((128, 128, 64, 4, 4, 2), (128, 128, 64, 8, 4, 2), (128, 128, 64, 4, 4, 4),
                                      (64, 128, 64, 4, 4, 2), (128, 256, 64, 8, 3, 2), (128, 256, 64, 8, 3, 4),
                                      (64, 128, 64, 4, 4, 4))]  # fmt: skip
    for dtype in (torch.float16, torch.bfloat16):
        run((1024, 1024, 1024), dtype, tiles + splits)
    run((2048, 2048, 2048), torch.float16, splits[:3])
    run((1024, 1024, 4096), torch.float16, splits[:3])
    say(f"done in {time.time() - T0:.0f} s")


if __name__ == "__main__":
    main()
