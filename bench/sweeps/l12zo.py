"""Lesson 12 sweep zo, issue 15: prefill's quantized matmul, the tile kernels against W dequantized then cuBLAS.

Run from the repo root: ``PYTHONPATH=$PWD python3 bench/sweeps/l12zo.py`` on the GPU (< 120 s); ``--cpu`` under the
interpreter (a tiny shape, no timings: a smoke test of the script).

Why: make bench timed the fast launchers' prefill tile kernels at 0.42x (int4) and 0.56x (int8) cuBLAS's bf16 speed
at the 8B up projection with M = 2048 (results/h100-2026-12-07-s48/bench-12-pinned), and the int4 model's first
token at 0.65-0.67x the bf16 model's. Writing W in bf16 from its codes costs about 2.5 bytes a weight (the codes
read, the bf16 written; cuBLAS then reads the bf16 as the bf16 model's matmul does), a picosecond a weight at 2.5
TB/s, while the matmul spends 2 M flops a weight: at 600 TFLOP/s the dequantized path pays from about 250 rows of x
(PREFILL_DEQUANT_M). This measures where it pays.

For each projection of Llama-3.2-1B (qkv, wo, gate/up, down) and Llama-3-8B's up and down, each M of 64 .. 2048 and
both formats (int4 in groups of 128, int8): the tile kernel (the launcher's schedule with PREFILL_DEQUANT_M off),
the dequantized path (schedule "dequant") and cuBLAS's bf16 x @ W.T, each replayed from a CUDA graph with L2 cleared
before each repetition (kit.gtime); both paths checked first against the fp64 answer (their worst error in bf16's
tolerance, above 1 outside it). The last column is the dequantized path's speed-up over the tile kernel.
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
from bench.sweeps.kit import Log, gtime, in_bf16_tolerances  # noqa: E402
from lessons import l12_quantization as L  # noqa: E402

say = Log("l12zo")
ENV = utils.mode.current()
BUDGET_S = float(os.environ.get("BUDGET_S", "120"))
DT = torch.float32 if CPU else torch.bfloat16
G = 32 if CPU else 128
if CPU:
    SHAPES, MS = {"tiny": (40, 96)}, (20,)
else:
    SHAPES = {"1B qkv": (3072, 2048), "1B wo": (2048, 2048), "1B gate/up": (16384, 2048), "1B down": (2048, 8192),
              "8B up": (14336, 4096), "8B down": (4096, 14336)}  # fmt: skip
    MS = (64, 128, 256, 512, 1024, 2048)


def main():
    dev = ENV.device
    say(f"lesson 12 sweep zo on {ENV.gpu_name if ENV.is_gpu else 'CPU (interpreter)'}, torch {torch.__version__}, "
        f"triton {triton.__version__}; PREFILL_DEQUANT_M {L.PREFILL_DEQUANT_M}, DEQUANT_TILE {L.DEQUANT_TILE}, "
        f"DEQUANT_CHUNK_BYTES {L.DEQUANT_CHUNK_BYTES}")  # fmt: skip
    say(
        "shape          bits     M | tile ms (err)  kernel | dequant ms (err) kernel | cuBLAS ms | x cuBLAS: tile, "
        "dequant | dequant / tile"
    )
    for label, (N, K) in SHAPES.items():
        torch.manual_seed(0)
        W = torch.randn(N, K, device=dev, dtype=DT) / K**0.5
        weights = {4: L.quantize_int4_ref(W, G), 8: L.quantize_int8_ref(W)}
        for M in MS:
            if time.time() - T0 > BUDGET_S:
                say(f"(budget of {BUDGET_S:.0f} s spent: stopped before {label} M={M})")
                return
            x = torch.randn(M, K, device=dev, dtype=DT)
            out = torch.empty(M, N, device=dev, dtype=DT)
            base = gtime(lambda: torch.mm(x, W.T, out=out))
            for bits, w in weights.items():
                fn = L.w4a16_fast if bits == 4 else L.w8a16_fast
                want = x.double() @ L.dequantize(w, torch.float64).T
                cells, times = [], []
                dequant = L.dequant_schedule(bits, G)
                for s in (L.fast_schedule(bits, M, N, K, G, dequant=False), dequant):
                    got = fn(x, w, out=out, schedule=s).clone()
                    err = in_bf16_tolerances(got, want)
                    ms = gtime(lambda: fn(x, w, out=out, schedule=s))  # noqa: B023
                    times.append(ms)
                    cells.append(f"{ms if ms is not None else float('nan'):8.4f} ({err:5.2f}) {s.kernel:>7s}")
                ratio = lambda a, b: (a / b) if a and b else float("nan")  # noqa: E731
                say(f"{label:12s} int{bits} {M:5d} | {cells[0]} | {cells[1]} | {base or float('nan'):9.4f} | "
                    f"{ratio(base, times[0]):6.3f} {ratio(base, times[1]):8.3f} | "
                    f"{ratio(times[0], times[1]):6.3f}")  # fmt: skip
    say(f"total {time.time() - T0:.0f} s")


main()
