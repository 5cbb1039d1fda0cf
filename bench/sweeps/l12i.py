"""Lesson 12 sweep i (issue 15): the int4 GEMV at M = 1 with its K loop pipelined by the compiler.

Run from the repo root: ``PYTHONPATH=$PWD python3 bench/sweeps/l12i.py`` on the GPU (< 200 s),
``PYTHONPATH=$PWD python3 bench/sweeps/l12i.py --cpu`` under the interpreter (tiny shapes, no timings: a smoke test).

Why: at the 8B-class projections the table's int4 GEMVs move 1.0-1.1 TB/s (35 % of the copy ceiling; target 80 %).
Every GEMV kernel of lessons 08 and 12 loads one step ahead into registers (PREFETCH) and is launched with
num_stages=1, because Triton pipelines only loads that feed tl.dot... in a loop written with ``range``. A loop
written ``tl.range(a, b, num_stages=S)`` carries the attribute that makes Triton's pipeliner take every load of
32 bits or more (AssignLatencies' pipelineWithoutDot): the words then travel by cp.async into shared memory S - 1
steps ahead, with no registers held for them. The candidate kernel here (``w4a16_pipe_kernel``) is the stream
kernel's arithmetic (codes widened with the 2**23 trick, a sum a word, the zero point as z * sum(x), one reduction
after the loop) in such a loop, with no masks in it: rows past N read row N - 1 (never stored), and the one step
that K may cut short is peeled off after the loop, masked. SZ_AHEAD loads the next step's scales and zero points in
registers a step ahead (they are 1-2 bytes a thread: too narrow for cp.async).

Every time is the GPU's: the call captured in a CUDA graph (bench.common.graphed), the replay timed by
triton.testing.do_bench, which clears L2 before each repetition (the weights come from HBM). Every candidate is
compared with the fp32 reference first (FAIL: the max error; never chosen). Columns: time, GB/s counting the weight
as stored (w4a16_bytes), % of a graphed copy of as many bytes, x the table's kernel (w4a16_fast as set), x bf16
cuBLAS at the same shape. A shape is skipped past 150 s, a candidate past 185 s.

Candidates (BLOCK_N, BLOCK_K, num_warps, STAGES, SZ_AHEAD) x SPLIT_K 1 (and 2 where N / BLOCK_N programs are fewer
than four an SM). The summary prints the best per shape and the best geometric mean over the shapes: the row to
put in FAST_SCHEDULES if this kernel joins the lesson.
"""

import math
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
from lessons import l12_quantization as L  # noqa: E402
from lessons.l12_quantization import _stream_dots, _x_by_code  # noqa: E402

ENV = utils.mode.current()
LINES = []


def say(line=""):
    print(line, flush=True)
    LINES.append(line)


def save():
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "sweep_l12i.txt"), "w") as f:
            f.write("\n".join(LINES) + "\n")


def late(limit):
    return time.time() - T0 > limit


@triton.jit
def _pipe_math(acc, word, scale, zero, xk, GROUPS: tl.constexpr, WORDS: tl.constexpr):
    """One step of the stream kernel's arithmetic: acc (BLOCK_N, GROUPS, WORDS) += sum over each word's codes."""
    lo = (word & 0xFFFFF) | 0x4B000000
    hi = ((word >> 12) & 0xFFF00) | 0x4B000000
    x0, x1, x2, x3, x4, x5, x6, x7 = _x_by_code(xk.to(tl.float32), GROUPS, WORDS)
    t = _stream_dots(lo, hi, x0, x1, x2, x3, x4, x5, x6, x7)
    x_sum = x0 + x1 * 16.0 + x2 * 256.0 + x3 * 4096.0 + x4 * 65536.0 + x5 * 256.0 + x6 * 4096.0 + x7 * 65536.0
    z = zero.to(tl.float32)[:, :, None]
    return acc + (t - z * x_sum[None]) * scale.to(tl.float32)[:, :, None]


@triton.jit
def w4a16_pipe_kernel(
    x_ptr,
    packed_ptr,  # int32 words, 8 codes a word
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
    BLOCK_K: tl.constexpr,
    PREFETCH: tl.constexpr,  # unused: the signature of lesson 12's GEMV kernels (_fast_launch passes it)
    X_AHEAD: tl.constexpr,  # unused, as PREFETCH
    SPLIT_K,
    HAS_RESIDUAL: tl.constexpr,
    STAGES: tl.constexpr,  # the compiler's pipeline depth for the full steps (tl.range's num_stages)
    SZ_AHEAD: tl.constexpr,  # the next step's scales and zero points loaded a step ahead, in registers
):
    GROUPS: tl.constexpr = BLOCK_K // GROUP_SIZE
    WORDS: tl.constexpr = GROUP_SIZE // 8
    groups = tl.cdiv(K, GROUP_SIZE)
    steps = tl.cdiv(groups, GROUPS)
    per_split = tl.cdiv(steps, SPLIT_K)
    first = tl.program_id(1) * per_split
    last = tl.minimum(first + per_split, steps)
    full = tl.maximum(tl.minimum(last, K // BLOCK_K), first)  # [first, full): every column of the step exists
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_n = offs_n < N
    rows_n = tl.minimum(offs_n, N - 1).to(tl.int64)  # rows past N read row N - 1: no mask in the loop
    offs_g = tl.arange(0, GROUPS)
    offs_k = tl.arange(0, BLOCK_K)
    cols = offs_g[:, None] * WORDS + tl.arange(0, WORDS)[None, :]
    p_tile = packed_ptr + rows_n[:, None, None] * stride_pn + cols[None, :, :]
    s_tile = rows_n[:, None] * stride_sn + offs_g[None, :]
    acc = tl.zeros((BLOCK_N, GROUPS, WORDS), dtype=tl.float32)
    g_first = tl.minimum(first, tl.maximum(full - 1, 0)) * GROUPS
    scale_next = tl.load(scale_ptr + s_tile + g_first, mask=(first < full) & (offs_g < GROUPS)[None, :], other=0.0)
    zero_next = tl.load(zero_ptr + s_tile + g_first, mask=(first < full) & (offs_g < GROUPS)[None, :], other=0)
    for step in tl.range(first, full, num_stages=STAGES):
        g0 = step * GROUPS
        word = tl.load(p_tile + g0 * WORDS)
        if SZ_AHEAD:
            scale, zero = scale_next, zero_next
            g_next = tl.minimum(step + 1, full - 1) * GROUPS
            scale_next = tl.load(scale_ptr + s_tile + g_next)
            zero_next = tl.load(zero_ptr + s_tile + g_next)
        else:
            scale = tl.load(scale_ptr + s_tile + g0)
            zero = tl.load(zero_ptr + s_tile + g0)
        xk = tl.load(x_ptr + g0 * GROUP_SIZE + offs_k)
        acc = _pipe_math(acc, word, scale, zero, xk, GROUPS, WORDS)
    for step in range(full, last):  # the step K cuts short (at most one), masked
        g0 = step * GROUPS
        in_g = (g0 + offs_g < groups)[None, :]
        word = tl.load(p_tile + g0 * WORDS, mask=in_g[:, :, None], other=0)
        scale = tl.load(scale_ptr + s_tile + g0, mask=in_g, other=0.0)
        zero = tl.load(zero_ptr + s_tile + g0, mask=in_g, other=0)
        k = g0 * GROUP_SIZE + offs_k
        xk = tl.load(x_ptr + k, mask=k < K, other=0.0)
        acc = _pipe_math(acc, word, scale, zero, xk, GROUPS, WORDS)
    y = tl.sum(tl.sum(acc, axis=2), axis=1)
    if HAS_RESIDUAL:
        y += tl.load(res_ptr + offs_n, mask=mask_n, other=0.0).to(tl.float32)
    tl.store(out_ptr + tl.program_id(1) * stride_os + offs_n, y.to(out_ptr.dtype.element_ty), mask=mask_n)


def pipe(x, w, out, BLOCK_N, BLOCK_K, num_warps, STAGES, SZ_AHEAD, SPLIT_K=1):
    """w4a16_pipe_kernel through lesson 12's launch helper (split-K partial sums and their combine included)."""
    words = w.packed.view(torch.int32)
    N, K = w.shape
    s = L.FastSchedule("stream", 1, BLOCK_N, BLOCK_K, SPLIT_K, num_warps, 1)  # stages 1: PREFETCH, X_AHEAD off
    return L._fast_launch(w4a16_pipe_kernel, triton.cdiv(N, BLOCK_N), x, (words, w.scale, w.zero), out, 1, N, K,
                          (x.stride(0), words.stride(0), w.scale.stride(0)), s, None, GROUP_SIZE=w.group_size,
                          BLOCK_K=BLOCK_K, STAGES=STAGES, SZ_AHEAD=SZ_AHEAD)  # fmt: skip


def gtime(fn):
    """GPU ms of fn() replayed from a CUDA graph, L2 cleared before each repetition; None on the CPU."""
    if CPU:
        fn()
        return None
    import triton.testing

    from bench.common import graphed

    return triton.testing.do_bench(graphed(fn), warmup=5, rep=25)


def copy_fn(nbytes):
    src = torch.empty(max(nbytes // 4, 1), dtype=torch.int16, device=ENV.device)  # read nbytes / 2, write as much
    dst = torch.empty_like(src)
    return lambda: dst.copy_(src)


def fmt(ms):
    return "   n/a  " if ms is None else f"{ms * 1e3:8.2f} us"


def first_line(e):
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0][:150] if text else ''}"


if CPU:
    DT, G = torch.float32, 32
    SHAPES = {"odd": (33, 200), "small": (16, 128)}
    CANDIDATES = [(4, 64, 2, 3, False), (8, 64, 4, 2, True), (2, 32, 1, 3, True)]
else:
    DT, G = torch.bfloat16, 128
    SHAPES = {  # name: (N, K), the largest weights first
        "Llama-3.2-1B head": (128256, 2048),
        "8B up": (14336, 4096),
        "8B down": (4096, 14336),
        "1B up": (8192, 2048),
        "1B down": (2048, 8192),
        "TinyLlama down": (2048, 5632),
        "TinyLlama qkv": (2560, 2048),
    }
    CANDIDATES = [
        (bn, bk, nw, st, sz)
        for bn in (4, 8, 16)
        for bk in (512, 1024)
        for nw in (2, 4)
        for st in (3, 4)
        for sz in (False, True)
        if not (bn == 16 and bk == 1024 and nw == 2)  # 16 rows x 512 bytes in 64 threads: registers
    ]

say(f"lesson 12 sweep i (int4 GEMV, the K loop pipelined by the compiler) on "
    f"{ENV.gpu_name if ENV.is_gpu else 'CPU (interpreter)'}, torch {torch.__version__}, triton {triton.__version__}, "
    f"{ENV.sm_count} SMs; candidates (BLOCK_N, BLOCK_K, num_warps, STAGES, SZ_AHEAD)")  # fmt: skip
SCORES = {}  # (candidate, split) -> {shape: ms}
BEST, TABLE = {}, {}


def sweep_shape(label, N, K):
    torch.manual_seed(0)
    W = (torch.randn(N, K, device=ENV.device) / math.sqrt(K)).to(DT)
    w = L.quantize_int4_ref(W, G)
    x = torch.randn(1, K, device=ENV.device, dtype=DT)
    ref = L.wxa16_ref(x.double(), w).float()
    out = torch.empty(1, N, device=ENV.device, dtype=DT)
    nbytes = L.w4a16_bytes(1, N, K, G)
    copy = gtime(copy_fn(nbytes))
    cublas = None if CPU else gtime(lambda: torch.mm(x, W.T, out=out))
    table = gtime(lambda: L.w4a16_fast(x, w, out=out))
    TABLE[label] = table
    s = L.fast_schedule(4, 1, N, K, G)
    say(
        f"{label} ({N}, {K}) int4 g{G} | {nbytes / 1e6:.1f} MB | copy {fmt(copy)} | cuBLAS bf16 {fmt(cublas)} | "
        f"table {s.kernel} {tuple(s[2:])} {fmt(table)}" + (f" ({100 * copy / table:.1f}% copy)" if table else "")
    )
    tol = 2e-2 * float(ref.abs().max()) + 1e-3
    programs = {c: triton.cdiv(N, c[0]) for c in CANDIDATES}
    for c in CANDIDATES:
        for split in (1, 2) if programs[c] < 4 * (ENV.sm_count or 1) else (1,):
            if late(185):
                say(f"{label} | {c} split {split} | SKIPPED (time budget)")
                continue
            try:
                out.fill_(float("nan"))
                err = float((pipe(x, w, out, *c, SPLIT_K=split).float() - ref).abs().max())
                if not math.isfinite(err) or err > tol:
                    say(f"{label} | {c} split {split} | FAIL max error {err:.3g} (tolerance {tol:.3g})")
                    continue
                ms = gtime(lambda c=c, split=split: pipe(x, w, out, *c, SPLIT_K=split))
                if ms is None:
                    say(f"{label} | {c} split {split} | ran, max error {err:.2g}")
                    ms = 1.0
                else:
                    say(f"{label} | {c} split {split} | {fmt(ms)} | {nbytes / ms / 1e6:6.0f} GB/s | "
                        f"{100 * copy / ms:5.1f}% copy | x{table / ms:5.2f} table | x{cublas / ms:5.2f} cuBLAS")  # fmt: skip
                SCORES.setdefault((c, split), {})[label] = ms
                if label not in BEST or ms < BEST[label][0]:
                    BEST[label] = (ms, c, split, copy, cublas)
            except Exception as e:  # noqa: BLE001
                say(f"{label} | {c} split {split} | ERROR {first_line(e)}")


for label, (N, K) in SHAPES.items():
    if late(150):
        say(f"{label}: SKIPPED (time budget)")
        continue
    try:
        sweep_shape(label, N, K)
    except Exception as e:  # noqa: BLE001
        say(f"{label} | ERROR {first_line(e)}")
    if not CPU:
        torch.cuda.empty_cache()
    say(f"  ({time.time() - T0:.0f} s)")

say("== best per shape: candidate (BLOCK_N, BLOCK_K, num_warps, STAGES, SZ_AHEAD), split | time | % copy | x table | "
    "x cuBLAS")  # fmt: skip
for label, (ms, c, split, copy, cublas) in BEST.items():
    if CPU:
        say(f"{label}: {c} split {split} ran")
        continue
    say(f"{label}: {c} split {split} | {fmt(ms)} | {100 * copy / ms:5.1f}% copy | x{TABLE[label] / ms:5.2f} table | "
        f"x{cublas / ms:5.2f} cuBLAS")  # fmt: skip
best = {label: v[0] for label, v in BEST.items()}
full = {k: per for k, per in SCORES.items() if len(per) == len(best) and len(best)}
if full and not CPU:
    gm = {k: math.exp(sum(math.log(per[s] / best[s]) for s in per) / len(per)) for k, per in full.items()}
    k = min(gm, key=gm.get)
    say(f"one schedule for every shape: {k[0]} split {k[1]}, geometric mean {gm[k]:.3f}x the best per shape")
say(f"total {time.time() - T0:.0f} s")
save()
