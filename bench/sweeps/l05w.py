"""Lesson 05 sweep w, 2026-11-28 (written, not yet run on a GPU): what is left inside the TMA kernel's tile at
3000 x 5000 x 1000 (issue 12: matmul() at 0.72x cuBLAS there; results/h100-2026-11-28-s11).

Why: sweep l05v (an H200, results/h100-2026-11-28-s14/sweeps/l05v-h200.txt) found no tile and no number of programs
that beats the lesson's tile at one program an SM there. At K = 1000 a tile runs 16 steps of its K loop; what else
it does is a large share: building its descriptors (once a program, on the GPU), then for every tile converting
and storing a 128 x 256 C block through shared memory while the next tile's loads wait for that memory. Three
changes the lesson's kernel does not make, each a constexpr of one copy of matmul_tma_kernel (no bias, no
activation: the shapes here have none), each alone and together:

  SUBTILE 2    the epilogue in two halves of (BLOCK_M, BLOCK_N / 2): half the shared memory for the staged C block,
               so one more stage of the K loop fits (the lesson's 3 stages become 4 at 128 x 256 x 64)
  host descs   the three descriptors built once on the host (triton.tools.tensor_descriptor) instead of by every
               program on the GPU (sweep l06c measured GPU-built descriptors 1-27 % slower in attention)
  warp spec.   tl.range(..., warp_specialize=True) on the tile loop: the compiler puts the TMA loads and the MMAs in
               different warps (Triton's tutorial 09 uses it on Blackwell; whether it pays on an sm_90 is what
               this measures: offline, triton 3.7.1 splits the warps there only at 4 warps; flatten off with it)

Each candidate is first compared with an fp32 product (a FAIL is never timed), then replayed from a CUDA graph, L2
cleared before each repetition, between two cuBLAS timings (graphed too), at 3000 x 5000 x 1000 in fp16 and bf16,
then the best two and the lesson's at 4096^3 and 1024^3 fp16 as controls. The lesson's kernel launched as l05v
launches it is the first row of each shape.

Run from the repo root: ``PYTHONPATH=$PWD python3 bench/sweeps/l05w.py`` on a GPU with TMA (< 250 s),
``... l05w.py --cpu`` under the interpreter (tiny shapes, no timings: a smoke test of every variant).
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
from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: E402

import utils  # noqa: E402
from bench.sweeps.kit import Log, compare_matmuls  # noqa: E402
from lessons import l05_matmul as L  # noqa: E402
from lessons.l05_matmul import grouped_tile  # noqa: E402

ENV = utils.mode.current()
BUDGET_S = 240
SMEM = 227 * 1024  # the shared memory a program may use on an H100 / H200
say = Log("l05w")


@triton.jit
def tma_variant_kernel(a, b, c, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                       GROUP_M: tl.constexpr, NUM_SMS: tl.constexpr, SUBTILE: tl.constexpr, HOST_DESCS: tl.constexpr,
                       WARP_SPEC: tl.constexpr):  # fmt: skip
    """matmul_tma_kernel (no bias, no activation) with SUBTILE, HOST_DESCS and WARP_SPEC (module docstring).
    HOST_DESCS: a, b, c are descriptors of block (BLOCK_M, BLOCK_K), (BLOCK_K, BLOCK_N), (BLOCK_M, BLOCK_N //
    SUBTILE); else pointers to contiguous A, B, C."""
    if HOST_DESCS:
        a_desc, b_desc, c_desc = a, b, c
    else:
        a_desc = tl.make_tensor_descriptor(a, shape=[M, K], strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
        b_desc = tl.make_tensor_descriptor(b, shape=[K, N], strides=[N, 1], block_shape=[BLOCK_K, BLOCK_N])
        c_desc = tl.make_tensor_descriptor(c, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N // SUBTILE])
    num_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    for tile in tl.range(tl.program_id(0), num_tiles, NUM_SMS, flatten=not WARP_SPEC, warp_specialize=WARP_SPEC):
        pid_m, pid_n = grouped_tile(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, K, BLOCK_K):
            acc = tl.dot(a_desc.load([pid_m * BLOCK_M, k]), b_desc.load([k, pid_n * BLOCK_N]), acc)
        if SUBTILE == 2:  # the two column halves of the block, converted and stored one after the other
            halves = tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1))
            left, right = tl.split(halves)
            c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], left.to(c_desc.dtype))
            c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N + BLOCK_N // 2], right.to(c_desc.dtype))
        else:
            c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(c_desc.dtype))


def launch(a, b, c, tile, variant):
    """One candidate: tile (BLOCK_M, BLOCK_N, BLOCK_K, warps, stages, GROUP_M), variant (SUBTILE, HOST_DESCS,
    WARP_SPEC), one program an SM (at most one a tile)."""
    (M, K), N = a.shape, b.shape[1]
    BM, BN, BK, warps, stages, G = tile
    sub, host, ws = variant
    n = min(L.NUM_SMS, triton.cdiv(M, BM) * triton.cdiv(N, BN))
    triton.set_allocator(L.tma_scratch)
    if host:
        args = (TensorDescriptor.from_tensor(a, [BM, BK]), TensorDescriptor.from_tensor(b, [BK, BN]),
                TensorDescriptor.from_tensor(c, [BM, BN // sub]))  # fmt: skip
    else:
        args = (a, b, c)
    tma_variant_kernel[(n,)](*args, M, N, K, BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK, GROUP_M=G, NUM_SMS=n, SUBTILE=sub,
                             HOST_DESCS=host, WARP_SPEC=ws, num_warps=warps, num_stages=stages)  # fmt: skip
    return c


def lesson(a, b, c, tile):
    """The lesson's kernel at this tile, one program an SM (as l05v's "one an SM")."""
    (M, K), N = a.shape, b.shape[1]
    BM, BN, BK, warps, stages, G = tile
    n = min(L.NUM_SMS, triton.cdiv(M, BM) * triton.cdiv(N, BN))
    triton.set_allocator(L.tma_scratch)
    L.matmul_tma_kernel.fn[(n,)](a, b, c, a, M, N, K, BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK, GROUP_M=G, NUM_SMS=n,
                                 HAS_BIAS=False, ACTIVATION=None, num_warps=warps, num_stages=stages)  # fmt: skip
    return c


def smem(tile, sub):
    BM, BN, BK, _, stages, _ = tile
    return stages * (BM * BK + BK * BN) * 2 + BM * BN // sub * 2


LESSON_TILE = (128, 256, 64, 8, 3, 8)  # TMA_CONFIGS' first, what the lesson runs at these shapes
VARIANTS = [
    (1, False, False),
    (2, False, False),
    (1, True, False),
    (2, True, False),
    (1, False, True),
    (2, False, True),
]  # fmt: skip  (SUBTILE, HOST_DESCS, WARP_SPEC)
# 128 x 256 x 64 at 4 stages fits only with SUBTILE 2 (229 KB). Offline for sm_90 (triton 3.7.1), warp_specialize
# splits the warps (setmaxnreg in the PTX) only at 4 warps: (128, 128, 64, 4, 4, 8) is the tile that tries it
TILES = [LESSON_TILE, (128, 256, 64, 8, 4, 8), (128, 128, 64, 4, 4, 8)]


def name(tile, variant):
    sub, host, ws = variant
    parts = [f"SUBTILE {sub}"] + (["host descs"] if host else []) + (["warp spec."] if ws else [])
    return f"{tile} {', '.join(parts)}"


def compare(shape, dtype, candidates):
    """Each (label, fn) checked against fp32, then timed between two cuBLAS timings; [(ratio, label, fn)]."""
    return compare_matmuls(say, shape, dtype, candidates, T0 + BUDGET_S - 15)


def main():
    say(
        f"lesson 05 sweep w (inside the TMA kernel's tile: epilogue halves, host descriptors, warp specialization) "
        f"on {ENV.gpu_name if ENV.is_gpu else 'CPU (interpreter)'}, torch {torch.__version__}, "
        f"triton {triton.__version__}, {L.NUM_SMS} SMs"
    )
    tiles = [(16, 32, 16, 4, 1, 2)] if CPU else TILES
    candidates = []
    for tile in tiles:
        candidates.append((f"{tile} the lesson's kernel", lambda a, b, c, t=tile: lesson(a, b, c, t)))
        for variant in VARIANTS:
            if not CPU and smem(tile, variant[0]) > SMEM:
                continue
            candidates.append((name(tile, variant), lambda a, b, c, t=tile, v=variant: launch(a, b, c, t, v)))
    odd = [((40, 72, 48), torch.float16)] if CPU else [((3000, 5000, 1000), torch.float16),
                                                       ((3000, 5000, 1000), torch.bfloat16)]  # fmt: skip
    best = []
    for shape, dtype in odd:
        results = sorted(compare(shape, dtype, candidates), key=lambda r: -r[0])
        for ratio, label, _ in results[:3]:
            say(f"  best: {label}: x cuBLAS {ratio:.3f}")
        best += [r for r in results[:2] if r[1] not in {b[1] for b in best}]
    if not CPU and best:
        controls = [candidates[0]] + [(label, fn) for _, label, fn in best]
        for shape in ((4096, 4096, 4096), (1024, 1024, 1024)):
            compare(shape, torch.float16, controls)
    say(f"total {time.time() - T0:.0f} s")


if __name__ == "__main__":
    main()
