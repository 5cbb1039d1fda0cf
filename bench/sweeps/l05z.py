"""Lesson 05 sweep z, 2026-12-07 (written, not yet run on a GPU): stream-K for the last wave at 3000 x 5000 x 1000
(issue 12: matmul() at 0.72-0.78x cuBLAS there, results/h100-2026-11-28-s11 and h200-2026-11-28-s17).

Why: at 128 x 256 tiles the product has 24 x 20 = 480 tiles for 132 SMs: three full waves and a fourth with 84
tiles, so in the last wave 48 SMs idle while 84 finish (at best 480 / 528 = 91 % of the machine's time busy).
Sweeps l05v and l05w found nothing inside the tile (other tiles, two programs an SM, the epilogue in halves, warp
specialization). Stream-K (Osama et al., "Stream-K: Work-centric Parallel Decomposition for Dense Matrix-Matrix
Multiplication on the GPU", 2023) shares the K steps of the last tiles out evenly instead: the persistent programs
first run whole tiles, as the lesson's TMA kernel does, then each takes an equal run of the remaining tiles' K steps
(a run may start and end inside a tile). A tile whose steps belong to several programs is finished by the last of
them to arrive: each writes its fp32 partial block to a workspace, takes a ticket (an atomic add on the tile's
counter, acquire-release), and the one that draws the last ticket adds the partials in the order of their K steps
(the same bits at every run: no atomics on the sums), applies nothing else (no bias, no activation here), stores
the C block and sets the counter back to 0 for the next call. Nobody waits on anybody: no spin, so no deadlock
even where programs run one after another (the interpreter).

SK_WAVES: how many whole waves of tiles join the last partial one in the stream-K part (0: only the 84 tiles of the
partial wave, each split across about 1.6 programs; 1: 216 tiles, 1.6 tiles a program). Each candidate is first
compared with an fp32 product (a FAIL is never timed), then replayed from a CUDA graph, L2 cleared before each
repetition, between two cuBLAS timings (graphed too), at 3000 x 5000 x 1000 in fp16 and bf16; the lesson's
matmul_tma_kernel at the same tile is the first row; the best two then at 4096^3 (three waves and 4 tiles: 128 x 256
makes 512 tiles) and 8192 x 8192 x 1024 as controls.

Run from the repo root: ``PYTHONPATH=$PWD python3 bench/sweeps/l05z.py`` on a GPU with TMA (< 200 s),
``... l05z.py --cpu`` under the interpreter (small awkward shapes, every variant checked against fp32 and run twice
for the same bits; no timings).
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
from bench.sweeps.kit import Log, compare_matmuls, matmul_tma_at  # noqa: E402
from lessons import l05_matmul as L  # noqa: E402
from lessons.l05_matmul import grouped_tile  # noqa: E402

ENV = utils.mode.current()
BUDGET_S = int(os.environ.get("BUDGET_S", 200))
say = Log("l05z")
DEADLINE = T0 + BUDGET_S - 15  # the candidates past it are skipped


@triton.jit
def streamk_kernel(a_desc, b_desc, c_desc, ws_ptr, count_ptr, M, N, K, DP_TILES, SK_PER,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                   NUM_SMS: tl.constexpr, MAX_PARTS: tl.constexpr):  # fmt: skip
    """C = A @ B through host-built descriptors: tiles [0, DP_TILES) whole, one program a tile in turn (the
    lesson's matmul_tma_kernel); then the K steps of tiles [DP_TILES, num_tiles) in runs of SK_PER, program p's run
    starting at step p * SK_PER of that region. ws_ptr: fp32 (stream-K tiles, MAX_PARTS, BLOCK_M, BLOCK_N), the
    partial blocks; count_ptr: int32 (stream-K tiles,), zero before the launch and left zero after it."""
    pid = tl.program_id(0)
    num_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    iters = tl.cdiv(K, BLOCK_K)
    # -- whole tiles, as the lesson's persistent kernel runs them
    for tile in tl.range(pid, DP_TILES, NUM_SMS, flatten=True):
        pid_m, pid_n = grouped_tile(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, K, BLOCK_K):
            acc = tl.dot(a_desc.load([pid_m * BLOCK_M, k]), b_desc.load([k, pid_n * BLOCK_N]), acc)
        c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(c_desc.dtype))
    # -- this program's run of the stream-K region's steps, tile by tile
    sk_steps = (num_tiles - DP_TILES) * iters
    it = pid * SK_PER
    end = tl.minimum(it + SK_PER, sk_steps)
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    block = offs_m[:, None] * BLOCK_N + offs_n[None, :]  # a partial block's elements, row-major
    while it < end:
        t = it // iters  # the tile's index in the stream-K region
        first_step = t * iters
        k0 = it - first_step
        k1 = tl.minimum(iters, end - first_step)
        pid_m, pid_n = grouped_tile(DP_TILES + t, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for kk in range(k0, k1):
            k = kk * BLOCK_K
            acc = tl.dot(a_desc.load([pid_m * BLOCK_M, k]), b_desc.load([k, pid_n * BLOCK_N]), acc)
        # the programs whose runs meet this tile's steps: first_step // SK_PER .. (first_step + iters - 1) // SK_PER
        first_prog = first_step // SK_PER
        parts = (first_step + iters - 1) // SK_PER - first_prog + 1
        if parts == 1:
            c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(c_desc.dtype))
        else:
            slot = ws_ptr + (t * MAX_PARTS + (pid - first_prog)).to(tl.int64) * (BLOCK_M * BLOCK_N)
            tl.store(slot + block, acc)
            # every thread's stores before the ticket (the barrier orders the program's threads; acq_rel at GPU
            # scope publishes them), as lesson 08's one-launch attention takes its ticket
            tl.debug_barrier()
            ticket = tl.atomic_add(count_ptr + t, 1, sem="acq_rel", scope="gpu")
            if ticket == parts - 1:  # the last to arrive: every other partial is written, add them in K order
                tl.debug_barrier()
                total = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
                for p in range(0, parts):
                    part = ws_ptr + (t * MAX_PARTS + p).to(tl.int64) * (BLOCK_M * BLOCK_N)
                    total += tl.load(part + block, cache_modifier=".cg")  # from L2: another SM wrote it
                c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], total.to(c_desc.dtype))
                tl.store(count_ptr + t, 0)  # ready for the next call
        it = first_step + k1


def plan(M, N, K, tile, programs, sk_waves):
    """(DP_TILES, SK_PER, MAX_PARTS): whole tiles first, leaving the partial wave and sk_waves whole waves (as
    many as there are) to stream-K; SK_PER: the region's steps shared out evenly over the programs."""
    BM, BN, BK = tile[:3]
    tiles = triton.cdiv(M, BM) * triton.cdiv(N, BN)
    iters = triton.cdiv(K, BK)
    full = tiles // programs
    if tiles % programs == 0 and sk_waves == 0:
        return tiles, 1, 1  # no partial wave: no stream-K
    dp = max(0, full - sk_waves) * programs
    steps = (tiles - dp) * iters
    per = triton.cdiv(steps, programs)
    return dp, per, triton.cdiv(iters, per) + 1  # a tile's steps meet at most this many runs


WORKSPACE = {}


def streamk(a, b, c, tile, sk_waves, programs=None):
    (M, K), N = a.shape, b.shape[1]
    BM, BN, BK, warps, stages, G = tile
    programs = programs or L.NUM_SMS
    dp, per, parts = plan(M, N, K, tile, programs, sk_waves)
    sk_tiles = triton.cdiv(M, BM) * triton.cdiv(N, BN) - dp
    key = (a.device, sk_tiles, parts, BM, BN)
    if key not in WORKSPACE:  # kept between calls: the counters come back to zero at the end of each
        WORKSPACE[key] = (torch.empty(max(sk_tiles * parts, 1) * BM * BN, device=a.device, dtype=torch.float32),
                          torch.zeros(max(sk_tiles, 1), device=a.device, dtype=torch.int32))  # fmt: skip
    ws, count = WORKSPACE[key]
    descs = (TensorDescriptor.from_tensor(a, [BM, BK]), TensorDescriptor.from_tensor(b, [BK, BN]),
             TensorDescriptor.from_tensor(c, [BM, BN]))  # fmt: skip
    streamk_kernel[(programs,)](*descs, ws, count, M, N, K, dp, per, BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK, GROUP_M=G,
                                NUM_SMS=programs, MAX_PARTS=parts, num_warps=warps, num_stages=stages)  # fmt: skip
    return c


LESSON_TILE = (128, 256, 64, 8, 3, 8)  # TMA_CONFIGS' first, what the lesson runs at these shapes


def main():
    say(
        f"lesson 05 sweep z (stream-K for the last wave) on {ENV.gpu_name if ENV.is_gpu else 'CPU (interpreter)'}, "
        f"torch {torch.__version__}, triton {triton.__version__}, {L.NUM_SMS} SMs"
    )
    tiles = [(16, 32, 16, 4, 1, 2)] if CPU else [LESSON_TILE, (128, 128, 64, 4, 4, 8)]
    candidates = []
    for tile in tiles:
        candidates.append((f"{tile} the lesson's kernel", lambda a, b, c, t=tile: matmul_tma_at(a, b, c, t)))
        for waves in (0, 1):
            candidates.append((f"{tile} stream-K, SK_WAVES {waves}",
                               lambda a, b, c, t=tile, w=waves: streamk(a, b, c, t, w)))  # fmt: skip
    if CPU:  # tiles of 16 x 32, 4 programs: partial waves, runs that start and end inside tiles, K not a multiple
        shapes = [((40, 72, 48), torch.float16), ((33, 100, 92), torch.float32), ((64, 64, 16), torch.float16)]
        for shape, dtype in shapes:
            compare_matmuls(say, shape, dtype, candidates, DEADLINE, same_bits=True)
        say(f"total {time.time() - T0:.0f} s")
        return
    best = []
    for dtype in (torch.float16, torch.bfloat16):
        results = sorted(
            compare_matmuls(say, (3000, 5000, 1000), dtype, candidates, DEADLINE, same_bits=True), key=lambda r: -r[0]
        )
        for ratio, label, _ in results[:3]:
            say(f"  best: {label}: x cuBLAS {ratio:.3f}")
        best += [r for r in results[:2] if r[1] not in {b[1] for b in best}]
    if best:
        controls = [candidates[0]] + [(label, fn) for _, label, fn in best if label != candidates[0][0]]
        for shape in ((4096, 4096, 4096), (8192, 8192, 1024)):
            compare_matmuls(say, shape, torch.float16, controls, DEADLINE, same_bits=True)
    say(f"total {time.time() - T0:.0f} s")


if __name__ == "__main__":
    main()
