"""Lesson 12 sweep zh, issue 15: the int4 dots on the tensor cores (INT4_DOTS = "mma") against the packed bf16 dots
("pairs"), in the M = 1 GEMV (w4a16_fast) and in the fused decode kernel (quantized_decode_gemv), tile by tile.

Run from the repo root: ``PYTHONPATH=$PWD python3 bench/sweeps/l12zh.py`` on the GPU (< 300 s; ``BUDGET_S`` in the
environment stops it sooner), ``--cpu`` under the interpreter (tiny shapes, no timings, and only the "pairs" path:
the interpreter runs no PTX; a smoke test of the script).

Why: session 42 found the packed dots' instructions, not the bytes, setting the GEMV's time at the 8B up
projection, and session 43's profile (l12ze) put the 1B steps' gate/up and head GEMVs at about 1.2 TB/s. The MMA
dots (INT4_MMA_PTX) take 27-35 % fewer loop instructions offline at the decode tables' rows and free registers
(168 against 255 at 8 rows of gate/up), so tiles with more rows a thread, which spilled with the packed dots, may
now pay: each shape is timed at its table's tile with both dots, and at wider ones with the MMA dots.

Every time is the GPU's: the call replayed from a CUDA graph, L2 cleared before each repetition (kit.gtime).
Every candidate is checked against the fp64 reference first (FAIL: its error as a fraction of bf16's tolerance;
never chosen; the MMA dots' products are exact, so they should sit far inside it). Columns: us, % of a copy of the
same bytes (weight as stored + x + out), x the shape's table tile with the packed dots. The summary prints each
shape's best, and EDIT lines for the tables where the best is not the table's.
"""

import os
import sys
import time

T0 = time.time()
CPU = "--cpu" in sys.argv
if CPU:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402

import utils  # noqa: E402
from bench.sweeps.kit import Log, copy_gbs, gtime, in_bf16_tolerances, int4_gemv_case  # noqa: E402
from lessons import l12_quantization as L  # noqa: E402

say = Log("l12zh")
ENV = utils.mode.current()
BUDGET_S = float(os.environ.get("BUDGET_S", "300"))
DT = torch.float32 if CPU else torch.bfloat16
G = 32 if CPU else 128
DOTS = ("pairs",) if CPU else ("pairs", "mma")
if CPU:
    GEMV = {(40, 96): None}
    FUSED = {"gate/up": (40, 96, dict(swiglu=True, norm=True))}
else:
    GEMV = {(N, K): s for (bits, M, N, K), s in L.FAST_SCHEDULES.items() if bits == 4 and M == 1}
    FUSED = {  # (N, K, epilogue): Llama-3.2-1B's (the stream kernel), TinyLlama's and Llama-3-8B's ("pipe")
        "1B gate/up": (8192, 2048, dict(swiglu=True, norm=True)),
        "1B down": (2048, 8192, dict(residual=True)),
        "1B wo": (2048, 2048, dict(residual=True)),
        "1B head": (128256, 2048, dict(norm=True)),
        "TinyLlama gate/up": (5632, 2048, dict(swiglu=True, norm=True)),
        "TinyLlama down": (2048, 5632, dict(residual=True)),
        "8B gate/up": (14336, 4096, dict(swiglu=True, norm=True)),
        "8B down": (4096, 14336, dict(residual=True)),
    }
# the wider tiles: offline (sm_90, triton 3.7) the MMA dots' decode kernel took 1.7-2.5 SASS instructions a code at
# these, spilling at some (32 rows of 2 warps at gate/up, 16 x 2048 at the 8B gate/up): the GPU decides
WIDE = [(8, 1024, 2, 2), (16, 1024, 2, 2), (32, 1024, 2, 2), (32, 1024, 4, 2), (16, 2048, 2, 2), (64, 1024, 4, 2)]


def with_dots(dots, fn):
    was = L.INT4_DOTS
    L.INT4_DOTS = dots
    try:
        return fn()
    finally:
        L.INT4_DOTS = was


def error(got, want):
    """The worst error as a fraction of bf16's tolerance (atol + rtol |want|)."""
    return in_bf16_tolerances(got, want)


def report(label, rows, base):
    """rows: [(tile label, dots, us or None, roof %, err)] -> the best line and its ratio to base (us)."""
    ok = [r for r in rows if r[2] is not None and r[4] <= 1]
    for tile, dots, us, roof, err in rows:
        if us is None:
            say(f"  {label} | {tile} | {dots:5s} | " + (f"FAIL: {err:.2f}x bf16's tolerance" if err > 1 else "ran"))
        else:
            ratio = f"x{base / us:.3f}" if base else "-"
            say(f"  {label} | {tile} | {dots:5s} | {us:8.2f} us | {roof:5.1f} % copy | {ratio} | err {err:.3f}")
    if ok and base:
        best = min(ok, key=lambda r: r[2])
        say(f"  -> {label}: best {best[0]} {best[1]} {best[2]:.2f} us ({best[3]:.1f} % copy), x{base / best[2]:.3f}")
        return best
    return None


def time_tiles(label, tiles, call, want, nbytes, gbs, tolerance=1):
    """Each (name, schedule) of tiles, with both dots at the table's tile and the MMA dots at the others: call(schedule)
    checked against want (its error over ``tolerance`` times bf16's: above 1 a FAIL, not timed), then timed ->
    report's best line."""
    rows, base = [], None
    for name, sched in tiles:
        for dots in DOTS if name == "table" else DOTS[-1:]:  # the packed dots at the table's tile only
            if time.time() - T0 > BUDGET_S:
                say(f"  (budget: {name} {dots} and after not run)")
                return report(label, rows, base)
            try:
                fn = lambda sched=sched: call(sched)  # noqa: E731
                got = with_dots(dots, fn).clone()
                err = error(got, want) / tolerance
                us = with_dots(dots, lambda: gtime(fn))
                us = us * 1e3 if us is not None else None
                if err > 1:
                    us = None
                if name == "table" and dots == "pairs" and us:
                    base = us
                roof = nbytes / (us * 1e-6) / (gbs * 1e9) * 100 if us else 0
                rows.append((name, dots, us, roof, err))
            except Exception as e:  # noqa: BLE001
                say(f"  {label} | {name} | {dots} | ERROR {type(e).__name__}: {str(e).strip()[:120]}")
    return report(label, rows, base)


def gemv_shape(N, K, s, gbs):
    w, x, want, out, nbytes = int4_gemv_case(N, K, G, DT)  # the weight as stored, x and out
    tiles = [("table", s)] if s is not None else [("default", None)]
    if s is not None:
        tiles += [(f"pipe {t}", s._replace(kernel="pipe", BLOCK_N=t[0], BLOCK_K=t[1], num_warps=t[2], num_stages=t[3]))
                  for t in WIDE if (t[0], t[1], t[2], t[3]) != (s.BLOCK_N, s.BLOCK_K, s.num_warps, s.num_stages)]  # fmt: skip
    return time_tiles(f"GEMV {N}x{K}", tiles, lambda sched: L.w4a16_fast(x, w, out=out, schedule=sched), want, nbytes,
                      gbs)  # fmt: skip


def fused_shape(label, N, K, epi, gbs):
    torch.manual_seed(0)
    rows_w = 2 * N if epi.get("swiglu") else N
    w = L.quantize_int4_ref(torch.randn(rows_w, K, device=ENV.device) / K**0.5, G)
    x = torch.randn(1, K, device=ENV.device, dtype=DT)
    norm = (1 + 0.1 * torch.randn(K, device=ENV.device)).to(DT) if epi.get("norm") else None
    res = torch.randn(1, N, device=ENV.device, dtype=DT) if epi.get("residual") else None
    want = L.quantized_decode_gemv_ref(x.double(), w, norm=None if norm is None else norm.double(),
                                       residual=None if res is None else res.double(), swiglu=epi.get("swiglu", False))  # fmt: skip
    out = torch.empty(1, N, device=ENV.device, dtype=DT)
    nbytes = L.w4a16_bytes(1, rows_w, K, G) + 4 * (K + N)  # the weight; x, norm, out and the residual in bf16
    s = L.fused_gemv_schedule(4, N, K, G)
    kind = L.fused_int4_kernel(N, K)
    tiles = [("table", s)] + [(f"{kind} {t}", L.GemvSchedule(*t)) for t in WIDE if tuple(s) != t]

    def call(sched):
        r = None if res is None else out.copy_(res)  # in place, as the step adds it
        return L.quantized_decode_gemv(x, w, norm=norm, residual=r, swiglu=epi.get("swiglu", False), out=out,
                                       schedule=sched)  # fmt: skip

    # behind SwiGLU the checks allow four times bf16's tolerance
    best = time_tiles(f"{label} ({kind})", tiles, call, want, nbytes, gbs, 4 if epi.get("swiglu") else 1)
    if best and best[0] != "table":
        table = "FUSED_PIPE_SCHEDULES" if kind == "pipe" else "FUSED_STREAM_SCHEDULES"
        t = best[0].split(" ", 1)[1]
        say(f"  EDIT {table}[({N}, {K})] = GemvSchedule{t}  # with INT4_DOTS = {best[1]!r}")
    return best


say(f"lesson 12 sweep zh on {ENV.gpu_name if ENV.is_gpu else 'CPU (interpreter)'}, torch {torch.__version__}, "
    f"triton {__import__('triton').__version__}; INT4_DOTS as set {L.INT4_DOTS!r}, groups of {G}")  # fmt: skip
gbs = copy_gbs(say)
say("== the fused decode kernel (quantized_decode_gemv as the int4 step calls it), each table tile and wider ones")
for label, (N, K, epi) in FUSED.items():
    fused_shape(label, N, K, epi, gbs)
say("== the M = 1 GEMV (w4a16_fast)")
for (N, K), s in GEMV.items():
    gemv_shape(N, K, s, gbs)
say(f"total {time.time() - T0:.0f} s")
