"""Lesson 12 sweep k (issues 15 and 11): the int8 GEMV and lesson 08's bf16 decode GEMV with their K loops pipelined
by Triton, as bench/sweeps/l12i.py did for int4.

Run from the repo root: ``PYTHONPATH=$PWD python3 bench/sweeps/l12k.py`` on the GPU (< 210 s),
``PYTHONPATH=$PWD python3 bench/sweeps/l12k.py --cpu`` under the interpreter (tiny shapes, no timings: a smoke test).

Why: l12i found the int4 GEMV 1.04-1.78x faster once its full steps ran in a loop written ``tl.range(a, b,
num_stages=S)`` (Triton's pipeliner then takes loads that feed no tl.dot: 16-byte cp.async S - 1 steps ahead), with
no masks in it and the step K cuts short peeled off. The int8 GEMV (``w8a16_gemv_kernel``, 58 % of the copy ceiling
at the 8B up projection) and lesson 08's bf16 ``decode_gemv_kernel`` (the batch-1 step's GEMVs: TinyLlama's step at
67-68 % of the ceiling, issue 11's target 70 %) still prefetch one step by hand. Both prototypes here are those
kernels with that loop, written in this file (nothing in the lessons changes until this sweep says so):

- part A, int8 at M = 1: ``w8a16_pipe_kernel`` through lesson 12's ``_fast_launch`` (split-K included) against
  ``w8a16_fast`` as set, bf16 cuBLAS and a graphed copy of as many bytes, at the 1B and 8B projections, TinyLlama's
  down, qkv and head and Llama-3.2-1B's head;
- part B, bf16 at batch 1: ``decode_gemv_pipe_kernel`` against ``L8.decode_gemv`` at its table's schedule, both
  launched in order (no PDL), each with the epilogue the step uses (the norm; the norm and SwiGLU; the residual), at
  TinyLlama's and Llama-3.2-1B's projections.

Every time is the GPU's: the call captured in a CUDA graph, the replay timed by triton.testing.do_bench, which clears
L2 before each repetition. Every candidate is compared with a reference first (FAIL: never chosen). Candidates
(BLOCK_N, BLOCK_K, num_warps, STAGES). Part B runs first: a shape is skipped past 85 s, a candidate past 100 s;
then part A: past 170 s and 195 s. The summary prints the
best per shape (the rows a table would take) and the best single schedule by geometric mean.
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
from lessons import l08_llama_model as L8  # noqa: E402
from lessons import l12_quantization as L  # noqa: E402
from lessons.l12_quantization import _int8_float  # noqa: E402

ENV = utils.mode.current()
LINES = []


def say(line=""):
    print(line, flush=True)
    LINES.append(line)


def save():
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "sweep_l12k.txt"), "w") as f:
            f.write("\n".join(LINES) + "\n")


def late(limit):
    return time.time() - T0 > limit


@triton.jit
def w8a16_pipe_kernel(
    x_ptr,
    q_ptr,
    scale_ptr,
    res_ptr,
    out_ptr,
    M,
    N,
    K,
    stride_xm,
    stride_qn,
    stride_om,
    stride_os,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    PREFETCH: tl.constexpr,  # unused: the signature of w8a16_gemv_kernel (_fast_launch passes it)
    SPLIT_K,
    HAS_RESIDUAL: tl.constexpr,
    STAGES: tl.constexpr,
):
    tl.static_assert(BLOCK_M == 1, "one row of x")
    steps = tl.cdiv(K, BLOCK_K)
    per_split = tl.cdiv(steps, SPLIT_K)
    first = tl.program_id(1) * per_split
    last = tl.minimum(first + per_split, steps)
    full = tl.maximum(tl.minimum(last, K // BLOCK_K), first)  # [first, full): every column of the step exists
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    mask_n = offs_n < N
    rows = tl.minimum(offs_n, N - 1).to(tl.int64)  # rows past N read row N - 1, never stored: no mask below
    q_tile = q_ptr + rows[:, None] * stride_qn + offs_k[None, :]
    acc = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
    for step in tl.range(first, full, num_stages=STAGES):
        q = tl.load(q_tile + step * BLOCK_K)
        x = tl.load(x_ptr + step * BLOCK_K + offs_k).to(tl.float32)
        acc += _int8_float(q) * x[None, :]
    for step in range(full, last):  # the step K cuts short, masked
        k = step * BLOCK_K + offs_k
        q = tl.load(q_tile + step * BLOCK_K, mask=(k < K)[None, :], other=0)
        x = tl.load(x_ptr + k, mask=k < K, other=0.0).to(tl.float32)
        acc += _int8_float(q) * x[None, :]
    y = tl.sum(acc, axis=1) * tl.load(scale_ptr + offs_n, mask=mask_n, other=0.0).to(tl.float32)
    if HAS_RESIDUAL:
        y += tl.load(res_ptr + offs_n, mask=mask_n, other=0.0).to(tl.float32)
    tl.store(out_ptr + tl.program_id(1) * stride_os + offs_n, y.to(out_ptr.dtype.element_ty), mask=mask_n)


@triton.jit
def decode_gemv_pipe_kernel(
    x_ptr,
    w_ptr,
    norm_ptr,
    res_ptr,
    out_ptr,
    N,
    K,
    eps,
    NORM: tl.constexpr,
    SWIGLU: tl.constexpr,
    RESIDUAL: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    STAGES: tl.constexpr,
):
    # lesson 08's decode_gemv_kernel (launched in order: no PDL) with its full steps in a loop Triton pipelines
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    keep = offs_n < N
    rows = tl.minimum(offs_n, N - 1).to(tl.int64)
    cols = tl.arange(0, BLOCK_K)
    w_rows = w_ptr + rows[:, None] * K + cols[None, :]
    acc = tl.zeros([BLOCK_N, BLOCK_K], tl.float32)
    acc_up = tl.zeros([BLOCK_N, BLOCK_K], tl.float32)
    sq = tl.zeros([BLOCK_K], tl.float32)
    full = (K // BLOCK_K) * BLOCK_K
    for k in tl.range(0, full, BLOCK_K, num_stages=STAGES):
        w = tl.load(w_rows + k)
        xk = tl.load(x_ptr + k + cols).to(tl.float32)
        if NORM:
            sq += xk * xk
            xk = xk * tl.load(norm_ptr + k + cols).to(tl.float32)
        acc += w.to(tl.float32) * xk[None, :]
        if SWIGLU:
            acc_up += tl.load(w_rows + N * K + k).to(tl.float32) * xk[None, :]
    for k in range(full, K, BLOCK_K):  # the step K cuts short, masked
        in_k = k + cols < K
        w = tl.load(w_rows + k, mask=in_k[None, :], other=0.0)
        xk = tl.load(x_ptr + k + cols, mask=in_k, other=0.0).to(tl.float32)
        if NORM:
            sq += xk * xk
            xk = xk * tl.load(norm_ptr + k + cols, mask=in_k, other=0.0).to(tl.float32)
        acc += w.to(tl.float32) * xk[None, :]
        if SWIGLU:
            acc_up += tl.load(w_rows + N * K + k, mask=in_k[None, :], other=0.0).to(tl.float32) * xk[None, :]
    y = tl.sum(acc, 1)
    u = tl.sum(acc_up, 1)
    if NORM:
        rstd = tl.rsqrt(tl.sum(sq, 0) / K + eps)
        y *= rstd
        u *= rstd
    y = y.to(x_ptr.dtype.element_ty).to(tl.float32)
    if SWIGLU:
        u = u.to(x_ptr.dtype.element_ty).to(tl.float32)
        y = y * tl.sigmoid(y) * u
    if RESIDUAL:
        y += tl.load(res_ptr + offs_n, mask=keep, other=0.0).to(tl.float32)
    tl.store(out_ptr + offs_n, y.to(out_ptr.dtype.element_ty), mask=keep)


def int8_pipe(x, w, out, BLOCK_N, BLOCK_K, num_warps, STAGES, SPLIT_K=1):
    N, K = w.shape
    s = L.FastSchedule("gemv", 1, BLOCK_N, BLOCK_K, SPLIT_K, num_warps, 1)  # num_stages 1: PREFETCH off
    return L._fast_launch(w8a16_pipe_kernel, triton.cdiv(N, BLOCK_N), x, (w.q, w.scale), out, 1, N, K,
                          (x.stride(0), w.q.stride(0)), s, None, BLOCK_K=BLOCK_K, STAGES=STAGES)  # fmt: skip


def bf16_pipe(x, w, out, norm, residual, swiglu, BLOCK_N, BLOCK_K, num_warps, STAGES):
    N = w.shape[0] // 2 if swiglu else w.shape[0]
    K = w.shape[1]
    decode_gemv_pipe_kernel[(triton.cdiv(N, BLOCK_N),)](
        x, w, norm, residual, out, N, K, 1e-5, NORM=norm is not None, SWIGLU=swiglu, RESIDUAL=residual is not None,
        BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, STAGES=STAGES, num_warps=num_warps,
    )  # fmt: skip
    return out


def gtime(fn):
    if CPU:
        fn()
        return None
    import triton.testing

    from bench.common import graphed

    return triton.testing.do_bench(graphed(fn), warmup=5, rep=25)


def copy_fn(nbytes):
    src = torch.empty(max(nbytes // 4, 1), dtype=torch.int16, device=ENV.device)
    dst = torch.empty_like(src)
    return lambda: dst.copy_(src)


def fmt(ms):
    return "   n/a  " if ms is None else f"{ms * 1e3:8.2f} us"


def first_line(e):
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0][:150] if text else ''}"


if CPU:
    DT = torch.float32
    INT8 = {"odd": (33, 200), "small": (16, 128)}
    BF16 = {"odd, norm": (33, 200, "norm"), "swiglu": (12, 96, "swiglu"), "residual": (20, 130, "residual")}
    C8 = [(4, 64, 2, 3), (8, 32, 4, 2)]
    C16 = [(4, 64, 2, 3), (2, 32, 4, 2)]
else:
    DT = torch.bfloat16
    INT8 = {  # name: (N, K)
        "Llama-3.2-1B head": (128256, 2048),
        "8B up": (14336, 4096),
        "8B down": (4096, 14336),
        "1B up": (8192, 2048),
        "1B down": (2048, 8192),
        "TinyLlama down": (2048, 5632),
        "TinyLlama qkv": (2560, 2048),
    }
    BF16 = {  # name: (N, K, epilogue) as lesson 08's batch-1 step calls decode_gemv
        "TinyLlama qkv": (2560, 2048, "norm"),
        "TinyLlama wo": (2048, 2048, "residual"),
        "TinyLlama gate/up": (5632, 2048, "swiglu"),
        "TinyLlama down": (2048, 5632, "residual"),
        "TinyLlama head": (32000, 2048, "norm"),
        "Llama-3.2-1B qkv": (3072, 2048, "norm"),
        "Llama-3.2-1B gate/up": (8192, 2048, "swiglu"),
        "Llama-3.2-1B down": (2048, 8192, "residual"),
        "Llama-3.2-1B head": (128256, 2048, "norm"),
    }
    C8 = [(bn, bk, nw, st) for bn in (4, 8, 16) for bk in (512, 1024) for nw in (4,) for st in (3, 4)]
    C16 = [(bn, bk, nw, st) for bn in (2, 4, 8) for bk in (512, 1024) for nw in (4,) for st in (3,)] + [
        (4, 1024, 8, 3), (4, 2048, 4, 3)]  # fmt: skip

say(f"lesson 12 sweep k (int8 and bf16 decode GEMVs, the K loop pipelined by the compiler) on "
    f"{ENV.gpu_name if ENV.is_gpu else 'CPU (interpreter)'}, torch {torch.__version__}, triton {triton.__version__}, "
    f"{ENV.sm_count} SMs; candidates (BLOCK_N, BLOCK_K, num_warps, STAGES)")  # fmt: skip
SCORES = {"int8": {}, "bf16": {}}  # part -> (candidate, split) -> {shape: ms}
BEST = {"int8": {}, "bf16": {}}  # part -> shape -> (ms, candidate, split, table ms)


def record(part, label, key, ms, table_ms):
    SCORES[part].setdefault(key, {})[label] = ms
    if label not in BEST[part] or ms < BEST[part][label][0]:
        BEST[part][label] = (ms, *key, table_ms)


def candidate_line(label, key, ms, nbytes, copy, base, base_name):
    if ms is None:
        return f"{label} | {key} | ran"
    return (f"{label} | {key} | {fmt(ms)} | {nbytes / ms / 1e6:6.0f} GB/s | {100 * copy / ms:5.1f}% copy | "
            f"x{base / ms:5.2f} {base_name}")  # fmt: skip


def part_a():
    say("== A. int8 GEMV at M = 1 (graph, L2 cleared): shape | (candidate, split) | time | GB/s | % copy | x table")
    for label, (N, K) in INT8.items():
        if late(170):
            say(f"{label}: SKIPPED (time budget)")
            continue
        try:
            torch.manual_seed(0)
            W = (torch.randn(N, K, device=ENV.device) / math.sqrt(K)).to(DT)
            w = L.quantize_int8_ref(W)
            x = torch.randn(1, K, device=ENV.device, dtype=DT)
            ref = L.wxa16_ref(x.double(), w).float()
            out = torch.empty(1, N, device=ENV.device, dtype=DT)
            nbytes = L.w8a16_bytes(1, N, K)
            copy = gtime(copy_fn(nbytes))
            cublas = None if CPU else gtime(lambda: torch.mm(x, W.T, out=out))
            table = gtime(lambda: L.w8a16_fast(x, w, out=out))
            s = L.fast_schedule(8, 1, N, K)
            say(f"{label} ({N}, {K}) int8 | {nbytes / 1e6:.1f} MB | copy {fmt(copy)} | cuBLAS bf16 {fmt(cublas)} | "
                f"table {s.kernel} {tuple(s[2:])} {fmt(table)}")  # fmt: skip
            tol = 2e-2 * float(ref.abs().max()) + 1e-3
            for c in C8:
                for split in (1, 2) if triton.cdiv(N, c[0]) < 4 * (ENV.sm_count or 1) else (1,):
                    if late(195):
                        break
                    try:
                        out.fill_(float("nan"))
                        err = float((int8_pipe(x, w, out, *c, SPLIT_K=split).float() - ref).abs().max())
                        if not math.isfinite(err) or err > tol:
                            say(f"{label} | {c} split {split} | FAIL max error {err:.3g} (tolerance {tol:.3g})")
                            continue
                        ms = gtime(lambda c=c, split=split: int8_pipe(x, w, out, *c, SPLIT_K=split))
                        say(candidate_line(label, (c, split), ms, nbytes, copy, table, "table"))
                        record("int8", label, (c, split), 1.0 if ms is None else ms, table)
                    except Exception as e:  # noqa: BLE001
                        say(f"{label} | {c} split {split} | ERROR {first_line(e)}")
        except Exception as e:  # noqa: BLE001
            say(f"{label} | ERROR {first_line(e)}")
        if not CPU:
            torch.cuda.empty_cache()
        say(f"  ({time.time() - T0:.0f} s)")


def part_b():
    say("== B. bf16 decode GEMV, batch 1, launched in order (graph, L2 cleared): shape | candidate | time | GB/s | "
        "% copy | x decode_gemv at its table's schedule")  # fmt: skip
    for label, (N, K, epi) in BF16.items():
        if late(85):
            say(f"{label}: SKIPPED (time budget)")
            continue
        try:
            torch.manual_seed(0)
            rows = 2 * N if epi == "swiglu" else N
            W = (torch.randn(rows, K, device=ENV.device) / math.sqrt(K)).to(DT)
            x = torch.randn(1, K, device=ENV.device, dtype=DT)
            norm = (1 + 0.1 * torch.randn(K, device=ENV.device)).to(DT) if epi in ("norm", "swiglu") else None
            res = torch.randn(1, N, device=ENV.device, dtype=DT) if epi == "residual" else None
            swiglu = epi == "swiglu"
            ref = L8.decode_gemv_ref(x.double(), W.double(), norm=None if norm is None else norm.double(),
                                     residual=None if res is None else res.double(), swiglu=swiglu).float()  # fmt: skip
            out = torch.empty(1, N, device=ENV.device, dtype=DT)
            nbytes = (rows * K + K + 2 * N) * 2
            copy = gtime(copy_fn(nbytes))
            s = L8.gemv_schedule(N, K)
            table = gtime(lambda: L8.decode_gemv(x, W, norm=norm, residual=res, swiglu=swiglu, out=out))
            say(f"{label} ({N}, {K}) bf16, {epi} | {nbytes / 1e6:.1f} MB | copy {fmt(copy)} | decode_gemv "
                f"{tuple(s)} {fmt(table)}")  # fmt: skip
            tol = 2e-2 * float(ref.abs().max()) + 1e-3
            for c in C16:
                if late(100):
                    break
                try:
                    out.fill_(float("nan"))
                    err = float((bf16_pipe(x, W, out, norm, res, swiglu, *c).float() - ref).abs().max())
                    if not math.isfinite(err) or err > tol:
                        say(f"{label} | {c} | FAIL max error {err:.3g} (tolerance {tol:.3g})")
                        continue
                    ms = gtime(lambda c=c: bf16_pipe(x, W, out, norm, res, swiglu, *c))
                    say(candidate_line(label, c, ms, nbytes, copy, table, "decode_gemv"))
                    record("bf16", label, (c, 1), 1.0 if ms is None else ms, table)
                except Exception as e:  # noqa: BLE001
                    say(f"{label} | {c} | ERROR {first_line(e)}")
        except Exception as e:  # noqa: BLE001
            say(f"{label} | ERROR {first_line(e)}")
        if not CPU:
            torch.cuda.empty_cache()
        say(f"  ({time.time() - T0:.0f} s)")


def summary():
    for part in ("int8", "bf16"):
        say(f"== best per shape, {part}: (candidate, split) | time | x the table's")
        for label, (ms, c, split, table) in BEST[part].items():
            gain = "" if CPU or not table else f" | x{table / ms:5.2f}"
            say(f"{label}: {c} split {split} | {fmt(None if CPU else ms)}{gain}")
        best = {label: v[0] for label, v in BEST[part].items()}
        full = {k: per for k, per in SCORES[part].items() if best and len(per) == len(best)}
        if full and not CPU:
            gm = {k: math.exp(sum(math.log(per[s] / best[s]) for s in per) / len(per)) for k, per in full.items()}
            k = min(gm, key=gm.get)
            say(f"one schedule for every {part} shape: {k[0]} split {k[1]}, geometric mean {gm[k]:.3f}x the best")
    say(f"total {time.time() - T0:.0f} s")


for part in (part_b, part_a):  # bf16 first (issue 11), to 100 s; then int8, to 195 s
    try:
        part()
    except Exception as e:  # noqa: BLE001
        say(f"{part.__name__} stopped: {first_line(e)}")
    save()
summary()
save()
