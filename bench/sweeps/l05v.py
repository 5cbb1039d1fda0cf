"""Lesson 05 sweep v, 2026-11-28: the TMA kernel's tile and number of programs at 3000 x 5000 x 1000 (issue 12:
matmul() at 0.72x cuBLAS there, results/h100-2026-11-28-s11, where the same kernel reaches 0.98x at 4096^3).

Why: at K = 1000 a tile runs only 16 steps of its K loop, so what a tile costs besides them (filling its pipeline,
converting and storing its C block) is a large share, and the persistent kernel's one program an SM does those
alone. Two programs an SM, each with half the shared memory, let one program's epilogue overlap the other's loop
(what cuBLAS's ping-pong kernels do with warp groups); one program a tile leaves the waves to the hardware.

Candidates: matmul_tma_kernel (the lesson's persistent TMA kernel, not edited) launched directly at a tile
(BLOCK_M, BLOCK_N, BLOCK_K, warps, stages, GROUP_M) and a number of programs: one an SM (as the lesson launches it),
two an SM, or one a tile (NUM_SMS = the number of tiles: each program takes one tile). Shared memory counts the C
tile the TMA store stages; a candidate that does not fit twice is not tried at two an SM. Each candidate is first
compared with an fp32 product (a FAIL is never chosen), then replayed from a CUDA graph, L2 cleared before each
repetition, between two cuBLAS timings (graphed too). At 4096^3 the best few are timed as a control.

Run from the repo root: ``PYTHONPATH=$PWD python3 bench/sweeps/l05v.py`` on a GPU with TMA (< 200 s),
``... l05v.py --cpu`` under the interpreter (a tiny shape, no timings: a smoke test).
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

import utils  # noqa: E402
from lessons import l05_matmul as L  # noqa: E402

ENV = utils.mode.current()
LINES = []
BUDGET_S = 190
SMEM = 227 * 1024  # an H100's shared memory a program may use; two programs an SM share 228 KB


def say(line=""):
    print(line, flush=True)
    LINES.append(line)
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "sweep_l05v.txt"), "w") as f:
            f.write("\n".join(LINES) + "\n")


def gtime(fn):
    """GPU ms of fn() replayed from a CUDA graph, L2 cleared before each repetition; None on the CPU."""
    if CPU:
        fn()
        return None
    import triton.testing

    from bench.common import graphed

    return triton.testing.do_bench(graphed(fn), warmup=5, rep=25)


def launch(a, b, c, BM, BN, BK, warps, stages, G, programs):
    (M, K), N = a.shape, b.shape[1]
    tiles = triton.cdiv(M, BM) * triton.cdiv(N, BN)
    n = {"one an SM": L.NUM_SMS, "two an SM": 2 * L.NUM_SMS, "one a tile": tiles}[programs]
    n = min(n, tiles)
    triton.set_allocator(L.tma_scratch)
    L.matmul_tma_kernel.fn[(n,)](
        a, b, c, a, M, N, K, BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK, GROUP_M=G, NUM_SMS=n, HAS_BIAS=False,
        ACTIVATION=None, num_warps=warps, num_stages=stages,
    )  # fmt: skip
    return c


TILES = [  # (BLOCK_M, BLOCK_N, BLOCK_K, warps, stages, GROUP_M)
    (128, 256, 64, 8, 3, 8),  # TMA_CONFIGS' first: what the autotuner takes at 4096^3
    (128, 128, 64, 4, 4, 8),
    (64, 128, 64, 4, 4, 8),
    (128, 128, 64, 8, 3, 8),
    (128, 128, 64, 4, 2, 8),
    (128, 128, 32, 4, 4, 8),
    (128, 256, 32, 8, 4, 8),
    (128, 256, 64, 8, 2, 8),
    (256, 128, 64, 8, 3, 8),
    (128, 128, 64, 4, 4, 4),
    (128, 128, 64, 4, 4, 16),
]
PROGRAMS = ("one an SM", "two an SM", "one a tile")


def smem(BM, BN, BK, stages, elem=2):
    return stages * (BM * BK + BK * BN) * elem + BM * BN * elem


say(
    f"lesson 05 sweep v (the TMA kernel's tile and programs at an odd shape) on "
    f"{ENV.gpu_name if ENV.is_gpu else 'CPU (interpreter)'}, torch {torch.__version__}, triton {triton.__version__}, "
    f"{L.NUM_SMS} SMs"
)
device = "cpu" if CPU else "cuda"
shapes = [((40, 72, 48), torch.float16)] if CPU else [((3000, 5000, 1000), torch.float16),
                                                      ((3000, 5000, 1000), torch.bfloat16)]  # fmt: skip
tiles = [(16, 16, 16, 4, 1, 2), (16, 32, 16, 4, 1, 2)] if CPU else TILES
best = {}
for (M, N, K), dtype in shapes:
    gen = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(M, K, device=device, dtype=dtype, generator=gen)
    b = torch.randn(K, N, device=device, dtype=dtype, generator=gen)
    c = torch.empty(M, N, device=device, dtype=dtype)
    truth = a.float() @ b.float()
    tol = 0.02 * K**0.5
    say(f"== {M}x{N}x{K} {dtype}")
    base = gtime(lambda: torch.matmul(a, b))
    results = []
    for t in tiles:
        for programs in PROGRAMS:
            if time.time() - T0 > BUDGET_S - 25:
                say(f"   {t} {programs}: SKIPPED (time budget)")
                continue
            if not CPU and programs == "two an SM" and 2 * smem(*t[:3], t[4]) > 228 * 1024:
                continue
            if not CPU and smem(*t[:3], t[4]) > SMEM:
                continue
            try:
                c.fill_(float("nan"))
                err = (launch(a, b, c, *t, programs).float() - truth).abs().max().item()
                if not err <= tol:
                    say(f"   {t} {programs}: FAIL (max error {err:.3g})")
                    continue
                ms = gtime(lambda t=t, p=programs: launch(a, b, c, *t, p))
            except Exception as e:  # noqa: BLE001
                say(f"   {t} {programs}: ERROR {str(e).splitlines()[0][:120]}")
                continue
            if ms is None:
                say(f"   {t} {programs}: checked (max error {err:.2g})")
                continue
            after = gtime(lambda: torch.matmul(a, b))
            ratio = (base + after) / 2 / ms
            base = after
            results.append((ratio, t, programs, ms))
            say(f"   {t} {programs:10s} {ms * 1e3:7.1f} us  x cuBLAS {ratio:.3f}")
    for ratio, t, programs, ms in sorted(results, reverse=True)[:3]:
        say(f"  best: {t} {programs}: {ms * 1e3:.1f} us, x cuBLAS {ratio:.3f}")
    if results:
        best[dtype] = sorted(results, reverse=True)[:2]
if not CPU and torch.float16 in best and time.time() - T0 < BUDGET_S - 20:
    M = N = K = 4096
    a = torch.randn(M, K, device=device, dtype=torch.float16)
    b = torch.randn(K, N, device=device, dtype=torch.float16)
    c = torch.empty(M, N, device=device, dtype=torch.float16)
    say("== control: 4096^3 fp16")
    base = gtime(lambda: torch.matmul(a, b))
    for _, t, programs, _ in [(0, TILES[0], "one an SM", 0), *best[torch.float16]]:
        ms = gtime(lambda t=t, p=programs: launch(a, b, c, *t, p))
        after = gtime(lambda: torch.matmul(a, b))
        say(f"   {t} {programs:10s} {ms * 1e3:7.1f} us  x cuBLAS {(base + after) / 2 / ms:.3f}")
        base = after
say(f"total {time.time() - T0:.0f} s")
