"""Lesson 12 sweep r (issue 15): sweep q's part A with the "slab" and "gemv" kinds in the "pipe" kind's place.

Offline (sm_90), the pipe kernel's loop has about 20 barriers a step: the layout conversions that split x by code
and spread the scales go through shared memory. The slab kernel loads x in the word tile's own layout: no
conversion, no barrier in its loop, 6 SASS instructions a code. This sweep times the slab and gemv kinds
(w4a16_fast with a FastSchedule; num_stages 1, or 2: the next step's words loaded ahead) at Llama-3-8B's and a 1B
pair of projections, against the table's kernel, replayed from CUDA graphs with L2 cleared.

Run from the repo root: ``PYTHONPATH=$PWD OUT=$OUT python3 bench/sweeps/l12r.py`` on the GPU (about 2 minutes),
``PYTHONPATH=$PWD python3 bench/sweeps/l12r.py --cpu`` under the interpreter (tiny shapes, no timings).
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
from bench.sweeps.kit import Log, gtime  # noqa: E402
from lessons import l12_quantization as L  # noqa: E402

ENV = utils.mode.current()
say = Log("l12r")
BUDGET_A = 230
FS = L.FastSchedule


def first_line(e):
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0][:160] if text else ''}"


if CPU:
    DT, G = torch.float32, 32
    SHAPES = {"tiny": (24, 256)}
    TILES = [(kind, 4, 64, 2, s) for kind in ("slab", "gemv") for s in (1, 2)]
else:
    DT, G = torch.bfloat16, 128
    SHAPES = {"8B up": (14336, 4096), "8B down": (4096, 14336), "1B up": (8192, 2048), "1B down": (2048, 8192)}
    TILES = [(kind, bn, bk, w, s) for kind in ("slab", "gemv") for bn, bk, w in ((8, 1024, 4), (16, 512, 4), (16, 1024, 4),
             (32, 256, 4), (8, 512, 2), (16, 256, 2), (4, 1024, 2)) for s in (1, 2)]  # fmt: skip

say(f"lesson 12 sweep q (int4 GEMV: more bytes in flight) on {ENV.gpu_name if ENV.is_gpu else 'CPU (interpreter)'}, "
    f"torch {torch.__version__}, triton {__import__('triton').__version__}, {ENV.sm_count} SMs")  # fmt: skip
say("== A. w4a16_fast, M = 1, g128 (graph, L2 cleared): shape | (BLOCK_N, BLOCK_K, warps, depth) | time | GB/s | "
    "x table")  # fmt: skip
for label, (N, K) in SHAPES.items():
    if time.time() - T0 > BUDGET_A:
        say(f"{label}: SKIPPED (time budget)")
        continue
    torch.manual_seed(0)
    w4 = L.quantize_int4_ref(torch.randn(N, K, device=ENV.device, dtype=DT) / K**0.5, G)
    x = torch.randn(1, K, device=ENV.device, dtype=DT)
    nbytes = L.w4a16_bytes(1, N, K, G)
    ref = L.wxa16_ref(x.float(), w4)
    table = L.fast_schedule(4, 1, N, K, G)
    base = gtime(lambda: L.w4a16_fast(x, w4))
    say(f"{label} ({N}, {K}), {nbytes / 1e6:.1f} MB: table {tuple(table)} "
        + ("ran" if base is None else f"{base * 1e3:.2f} us"))  # fmt: skip
    best = None
    for kind, bn, bk, nw, st in TILES:
        if time.time() - T0 > BUDGET_A:
            break
        s = FS(kind, 1, bn, min(bk, 1 << (K - 1).bit_length()), 1, nw, st)
        try:
            out = L.w4a16_fast(x, w4, schedule=s).float()
            err = float((out - ref).norm() / ref.norm())
            if not err < 1e-2:  # bf16 output against an fp32 reference
                say(f"{label} | {(kind, bn, bk, nw, st)} | WRONG {err:.2e}")
                continue
            ms = gtime(lambda: L.w4a16_fast(x, w4, schedule=s))
        except Exception as e:  # noqa: BLE001
            say(f"{label} | {(kind, bn, bk, nw, st)} | ERROR {first_line(e)}")
            continue
        if ms is None:
            say(f"{label} | {(kind, bn, bk, nw, st)} | ran")
            continue
        say(
            f"{label} | {(kind, bn, bk, nw, st)} | {ms * 1e3:7.2f} us | {nbytes / ms / 1e6:6.0f} GB/s | x{base / ms:5.2f}"
        )
        if best is None or ms < best[0]:
            best = (ms, (kind, bn, bk, nw, st))
    if best:
        say(f"-> {label}: best {best[1]} {best[0] * 1e3:.2f} us, x{base / best[0]:.2f} the table's")
    say(f"  ({time.time() - T0:.0f} s)")


say(f"total {time.time() - T0:.0f} s")
