"""Lesson 12 sweep za (issue 15): l12x's tensor-core int4 GEMV in thin tiles, where Triton takes ``mma.sync``.

Sweeps l12x and l12z found the planar kernel (floats from inline PTX) bound by its own chain: each group's
``wgmma`` on W in registers is waited for before the next group, with 4 warps a program and about 7 programs an
SM. Below 64 rows a program Triton cannot use ``wgmma`` and takes Ampere's ``mma.sync`` (m16n8k16, synchronous,
W's fragment loaded by ``ldmatrix``; offline, sm_90a: 16 rows and 1 warp, about 4 PTX instructions a code; 32 rows
and 1 warp, about 3). Many more programs fit an SM, each a warp or two, so other warps fill each one's waits. This
sweep times l12x's kernel (``bench.sweeps.l12x.probe``, the same modes and checks) at 16 and 32 rows a program, 1
and 2 warps, against its 64-row ``wgmma`` tile, at M = 1 and 16.

Run from the repo root: ``PYTHONPATH=$PWD OUT=$OUT python3 bench/sweeps/l12za.py`` on the GPU (about 4 minutes),
``PYTHONPATH=$PWD python3 bench/sweeps/l12za.py --cpu`` under the interpreter (tiny shapes, fp32).
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
from bench.sweeps.kit import Log, gtime  # noqa: E402
from bench.sweeps.l12x import planar, probe  # noqa: E402
from lessons import l12_quantization as L  # noqa: E402

ENV = utils.mode.current()
say = Log("l12za")
BUDGET = 480


def main():
    say(f"lesson 12 sweep za (tensor-core int4 GEMV in thin tiles: mma.sync) on "
        f"{ENV.gpu_name if ENV.is_gpu else 'CPU (interpreter)'}, torch {torch.__version__}, triton "
        f"{triton.__version__}, {ENV.sm_count} SMs")  # fmt: skip
    if CPU:
        SHAPES, DT, G, MS = {"tiny": (40, 200)}, torch.float32, 32, (1, 3)
        TILES = [(16, 1, 2, 1), (32, 2, 2, 2)]
    else:
        SHAPES = {"8B up": (14336, 4096), "8B down": (4096, 14336), "1B up": (8192, 2048)}
        DT, G, MS = torch.bfloat16, 128, (1, 16)
        TILES = [(bn, w, p, sp) for bn, w in ((16, 1), (32, 1), (32, 2), (64, 4)) for p in (3, 4) for sp in (1, 2, 4)]
    modes = {0: "scale on sums", 1: "scale in tile", 3: "PROBE no W loads"}
    say("== shape | M | mode | (BLOCK_N, warps, depth, split) | time | x table | x cuBLAS bf16")
    for label, (N, K) in SHAPES.items():
        torch.manual_seed(0)
        w = torch.randn(N, K, device=ENV.device, dtype=DT) / K**0.5
        w4 = L.quantize_int4_ref(w, G)
        packed = planar(w4)
        for M in MS:
            x = torch.randn(M, K, device=ENV.device, dtype=DT)
            ref = L.wxa16_ref(x.float(), w4)
            table = gtime(lambda: L.w4a16_fast(x, w4))
            cublas = gtime(lambda: x @ w.T)
            say(f"{label} ({N}, {K}) M={M}: table " + ("ran" if table is None else
                f"{table * 1e3:.2f} us, cuBLAS {cublas * 1e3:.2f} us"))  # fmt: skip
            best = {}
            for mode, name in modes.items():
                if M > 1 and mode == 3:
                    continue
                for bn, nw, pipe, split in TILES:
                    if time.time() - T0 > BUDGET:
                        break
                    cand = (bn, nw, pipe, split)
                    try:
                        out = probe(x, w4, packed, mode, bn, nw, pipe, split).float()
                        if mode != 3:
                            err = float((out - ref).norm() / ref.norm())
                            if not err < (1e-5 if DT == torch.float32 else 1e-2):
                                say(f"{label} | {M} | {name} | {cand} | WRONG {err:.2e}")
                                continue
                        ms = gtime(lambda: probe(x, w4, packed, mode, bn, nw, pipe, split))
                    except Exception as e:  # noqa: BLE001
                        say(f"{label} | {M} | {name} | {cand} | ERROR {type(e).__name__}: {str(e)[:160]}")
                        continue
                    if ms is None:
                        say(f"{label} | {M} | {name} | {cand} | ran")
                        continue
                    say(f"{label} | {M} | {name} | {cand} | {ms * 1e3:7.2f} us | x{table / ms:5.2f} | "
                        f"x{cublas / ms:5.2f}")  # fmt: skip
                    if name not in best or ms < best[name][0]:
                        best[name] = (ms, cand)
            for name, (ms, cand) in best.items():
                say(f"-> {label} M={M} {name}: best {cand} {ms * 1e3:.2f} us, x{table / ms:.2f} the table's, "
                    f"x{cublas / ms:.2f} cuBLAS")  # fmt: skip
            say(f"  ({time.time() - T0:.0f} s)")
    say(f"total {time.time() - T0:.0f} s")


if __name__ == "__main__":
    main()
