"""Lesson 05 sweep t, 2026-11-27: where matmul() should hand a problem to extra step 7's persistent TMA kernel
(issue 12): TMA_MIN_FLOPS, the smallest problem (2·M·N·K FLOPs) from which LARGE_MATMUL is at least as fast as
matmul's own kernel at every timed shape above it.

Run from the repo root: ``PYTHONPATH=$PWD python3 bench/sweeps/l05t.py`` on a GPU with TMA (Hopper; < 200 s,
autotuning included), ``... l05t.py --cpu`` under the interpreter (tiny shapes, no timings: a smoke test).

Timing: as sweep l05c. Each call is captured in a CUDA graph (bench.common.graphed) and the replay timed by
triton.testing.do_bench (L2 cleared before each repetition). cuBLAS (torch.matmul, captured the same way) is timed
before and after each candidate, and the candidate's ratio uses the mean of the two: the H100's clocks fall under
sustained tensor-core load. Each candidate is first compared with an fp32 product of the same inputs (a FAIL is
never chosen).

Candidates: matmul() with the switch off (TMA_MIN_FLOPS = None: the lesson's autotuned kernel, padding rules as
shipped) and matmul_persistent_tma() (autotuned over TMA_CONFIGS).

  -> edit, in solutions/05_matmul.ipynb: TMA_MIN_FLOPS = the EDIT line's value, then ``python -m utils.notebooks``.
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
BUDGET_S = 200


def say(line=""):
    print(line, flush=True)
    LINES.append(line)
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "sweep_l05t.txt"), "w") as f:
            f.write("\n".join(LINES) + "\n")


def gtime(fn):
    """GPU ms of fn() replayed from a CUDA graph, L2 cleared before each repetition; None on the CPU."""
    if CPU:
        fn()
        return None
    import triton.testing

    from bench.common import graphed

    return triton.testing.do_bench(graphed(fn), warmup=5, rep=25)


if CPU:
    SHAPES = [((32, 48, 64), torch.float16)]
else:
    SHAPES = [  # by FLOPs, smallest first
        ((1024, 1024, 1024), torch.float16),
        ((512, 4096, 4096), torch.bfloat16),
        ((2048, 2048, 2048), torch.float16),
        ((3000, 5000, 1000), torch.float16),
        ((2048, 2048, 2048), torch.bfloat16),
        ((2048, 5632, 2048), torch.bfloat16),
        ((3072, 3072, 3072), torch.float16),
        ((4096, 4096, 4096), torch.float16),
        ((4096, 4096, 4096), torch.bfloat16),
        ((4096, 11008, 4096), torch.bfloat16),
        ((8192, 8192, 8192), torch.bfloat16),
    ]

say(
    f"lesson 05 sweep t (TMA_MIN_FLOPS) on {ENV.gpu_name if ENV.is_gpu else 'CPU (interpreter)'},"
    f" torch {torch.__version__}, triton {triton.__version__}, {ENV.sm_count} SMs, TMA: {ENV.supports_tma}"
)
L.TMA_MIN_FLOPS = None  # matmul() keeps its own kernel throughout; the TMA kernel is called directly
CANDIDATES = [("matmul()", L.matmul), ("matmul_persistent_tma()", L.matmul_persistent_tma)]
ROWS = []  # (flops, label, {name: ratio})

for (M, N, K), dtype in SHAPES:
    label = f"{M}x{N}x{K} {utils.dtype_name(dtype)}"
    if time.time() - T0 > BUDGET_S:
        say(f"== {label}: skipped (past {BUDGET_S} s)")
        continue
    torch.manual_seed(0)
    a = (torch.randn(M, K, device=ENV.device) * K**-0.25).to(dtype)
    b = (torch.randn(K, N, device=ENV.device) * K**-0.25).to(dtype)
    ref = a.float() @ b.float()
    flops = L.matmul_flops(M, N, K)
    cublas = lambda: torch.matmul(a, b)  # noqa: E731
    gtime(cublas)
    ratios = {}
    for name, fn in CANDIDATES:
        out = torch.full((M, N), float("nan"), device=ENV.device, dtype=dtype)
        fn(a, b, out=out)
        err = (out.float() - ref).abs().max().item()
        ok = err <= 0.05 and not out.isnan().any().item()
        before = gtime(cublas)
        ms = gtime(lambda: fn(a, b, out=out))
        if ms is None:
            say(f"   {label} {name}: {'OK' if ok else f'FAIL {err:.3g}'} (no timing on the CPU)")
            ratios[name] = 1.0 if ok else None
            continue
        base = (before + gtime(cublas)) / 2
        ratios[name] = base / ms if ok else None
        say(
            f"   {label} {name}: {ms * 1e3:8.1f} us {flops / ms / 1e9:6.1f} TFLOP/s {base / ms:.3f}x cuBLAS "
            f"(cuBLAS {base * 1e3:.1f} us) {'OK' if ok else f'FAIL max err {err:.3g}'}"
        )
    ROWS.append((flops, label, ratios))
    del a, b, ref
    if not CPU:
        torch.cuda.empty_cache()

say("")
say("== TMA kernel / matmul() per shape, by FLOPs")
threshold = None
for flops, label, r in sorted(ROWS, key=lambda row: row[0], reverse=True):  # largest first, while the TMA kernel wins
    plain, tma = r["matmul()"], r["matmul_persistent_tma()"]
    wins = plain is not None and tma is not None and tma >= plain
    say(f"   {label} ({flops:.3g} FLOPs): {f'{tma / plain:.3f}' if plain and tma else 'n/a'}")
    if not wins:
        break
    threshold = flops
if threshold is None:
    say("EDIT: TMA_MIN_FLOPS = None (the TMA kernel does not win at the largest shape)")
else:
    say(f"EDIT: TMA_MIN_FLOPS = {threshold:.3g} (the TMA kernel at least as fast at every timed shape from there up)")
say(f"done in {time.time() - T0:.0f} s")
