"""Lesson 12 sweep zc (issue 15): where else ``"mma"`` (w4a16_mma_kernel) should replace the tile kernels.

Sweep l12zb measured w4a16_mma_kernel at M = 16 at three shapes, and FAST_SCHEDULES takes it there. The heuristic
(fast_schedule for every other shape with GEMV_M < M <= DECODE_M) still picks TILE_KERNEL's swapped tile. Before
the heuristic changes, this sweep times, at M = 5, 8 and 16 and the four projections of make bench (1B down,
2048 x 8192, is new to "mma"), the schedule fast_schedule picks today against "mma" tiles of 16 and 32 rows of W,
1 and 2 warps, depths 3 and 4 and splits of 1, 2 and 4, each checked against the fp32 reference and timed two
ways: replayed from a CUDA graph (the GPU's time) and called from Python as make bench calls it (with the
host's launches: a split of K adds the combine's).

Run from the repo root: ``PYTHONPATH=$PWD OUT=$OUT python3 bench/sweeps/l12zc.py`` on the GPU (about 5 minutes),
``PYTHONPATH=$PWD python3 bench/sweeps/l12zc.py --cpu`` under the interpreter (tiny shapes, fp32: the checks).
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
from bench.sweeps.kit import Log, bench_ms, gtime  # noqa: E402
from lessons import l12_quantization as L  # noqa: E402

ENV = utils.mode.current()
say = Log("l12zc")
BUDGET = 540


def main():
    say(f"lesson 12 sweep zc (where \"mma\" replaces the tile kernels) on "
        f"{ENV.gpu_name if ENV.is_gpu else 'CPU (interpreter)'}, torch {torch.__version__}, triton "
        f"{triton.__version__}, {ENV.sm_count} SMs")  # fmt: skip
    if CPU:
        SHAPES, DT, G, MS = {"tiny": (40, 200)}, torch.float32, 32, (5, 16)
        TILES = [(16, 1, 2, 1), (32, 2, 3, 2)]
    else:
        SHAPES = {"8B up": (14336, 4096), "8B down": (4096, 14336), "1B up": (8192, 2048), "1B down": (2048, 8192)}
        DT, G, MS = torch.bfloat16, 128, (5, 8, 16)
        TILES = [(bn, w, p, sp) for bn, w in ((16, 1), (32, 2)) for p in (3, 4) for sp in (1, 2, 4)]
    say("== shape | M | schedule | graphed | from Python | x today's (graphed) | x cuBLAS (graphed)")
    for label, (N, K) in SHAPES.items():
        torch.manual_seed(0)
        w = torch.randn(N, K, device=ENV.device, dtype=DT) / K**0.5
        w4 = L.quantize_int4_ref(w, G)
        for M in MS:
            if time.time() - T0 > BUDGET:
                say(f"{label} M={M}: SKIPPED (time budget)")
                continue
            x = torch.randn(M, K, device=ENV.device, dtype=DT)
            ref = L.wxa16_ref(x.float(), w4)
            today = L.fast_schedule(4, M, N, K, G)
            base = gtime(lambda: L.w4a16_fast(x, w4))
            cublas = gtime(lambda: x @ w.T)
            py = bench_ms(lambda: L.w4a16_fast(x, w4))
            say(f"{label} ({N}, {K}) M={M}: today {tuple(today)} " + ("ran" if base is None else
                f"{base * 1e3:.2f} us graphed, {py * 1e3:.2f} us from Python; cuBLAS {cublas * 1e3:.2f} us"))  # fmt: skip
            best = None
            for bn, nw, pipe, split in TILES:
                s = L.FastSchedule("mma", 16, bn, G, split, nw, pipe)
                try:
                    out = L.w4a16_fast(x, w4, schedule=s).float()
                    err = float((out - ref).norm() / ref.norm())
                    if not err < (1e-5 if DT == torch.float32 else 1e-2):
                        say(f"{label} | {M} | {tuple(s)} | WRONG {err:.2e}")
                        continue
                    ms = gtime(lambda: L.w4a16_fast(x, w4, schedule=s))
                    py_ms = bench_ms(lambda: L.w4a16_fast(x, w4, schedule=s))
                except Exception as e:  # noqa: BLE001
                    say(f"{label} | {M} | {tuple(s)} | ERROR {type(e).__name__}: {str(e)[:160]}")
                    continue
                if ms is None:
                    say(f"{label} | {M} | {tuple(s)} | ran (error {err:.1e})")
                    continue
                say(f"{label} | {M} | {tuple(s)} | {ms * 1e3:7.2f} us | {py_ms * 1e3:7.2f} us | x{base / ms:5.2f} | "
                    f"x{cublas / ms:5.2f}")  # fmt: skip
                if best is None or ms < best[0]:
                    best = (ms, s)
            if best:
                say(f"-> {label} M={M}: best {tuple(best[1])} {best[0] * 1e3:.2f} us, x{base / best[0]:.2f} today's, "
                    f"x{cublas / best[0]:.2f} cuBLAS")  # fmt: skip
            say(f"  ({time.time() - T0:.0f} s)")
    say(f"total {time.time() - T0:.0f} s")


if __name__ == "__main__":
    main()
