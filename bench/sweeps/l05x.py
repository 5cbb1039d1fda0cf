"""Lesson 05 sweep x, 2026-11-28 (issue 12; written after session 16's GPU time, not yet run): do the TMA kernel's
host-built descriptors (sweep l05w: 3-4 % faster, graphed, at every shape it measured on an H200) still win when a
launcher builds them at every call from Python, as matmul() would, and timed the way make bench times matmul()?

Before lesson 05's launcher is changed (an autotune pre_hook for the descriptors' block shapes, a utils.launch
Prepared that builds descriptors from the call's tensors), this times, at the shapes of issue 12's matmul rows
(4096^3, 8192^3 and 3000 x 5000 x 1000, fp16 and bf16):
  - matmul(a, b, out=c) as make bench calls it (from Python; its PREPARED launch after the first call);
  - sweep l05w's kernel with host descriptors (tma_variant_kernel, HOST_DESCS) at the tile the lesson's autotuner
    picked for that shape, from Python, three TensorDescriptors built at every call; the epilogue whole and in
    halves (SUBTILE 1, 2);
  - both again replayed from CUDA graphs (the GPU's work alone);
each checked against an fp32 product first (a FAIL is never timed), then timed by utils.timing (L2 flushed before
each repetition, median) between two cuBLAS timings, as bench.common.paired pairs make bench's rows, in two rounds.
If the host-descriptor launch from Python beats matmul() by what l05w found, lesson 05's TMA path takes it.

Run once on an H200 (results/h200-2026-11-28-s17/sweeps/l05x.txt): 2-4 % faster at 4096^3 and 3000 x 5000 x 1000 in
both dtypes, within the noise at 8192^3, the epilogue whole as good as in halves. Lesson 05's TMA kernel then took its
descriptors from the host (an autotune pre_hook sets their block shapes; utils.launch prepares the launch); this
script's "matmul()" rows measured the kernel as it was before, building them on the GPU.

Run from the repo root: ``PYTHONPATH=$PWD python3 bench/sweeps/l05x.py`` on a GPU with TMA (< 150 s),
``... l05x.py --cpu`` under the interpreter (tiny shapes, no timings: a smoke test).
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
from bench.sweeps.kit import Log, bench_ms, graphed  # noqa: E402
from bench.sweeps.l05w import launch as variant_launch  # noqa: E402
from lessons import l05_matmul as L  # noqa: E402

ENV = utils.mode.current()
DEVICE = "cpu" if CPU else "cuda"
BUDGET_S = 140
say = Log("l05x")


def picked_tile(a, b, c):
    """The tile lesson 05's TMA autotuner picks for this call, as l05w's (BM, BN, BK, warps, stages, GROUP_M)."""
    L.matmul_persistent_tma(a, b, out=c)
    cfg = getattr(L.matmul_tma_kernel, "best_config", None) or L.matmul_tma_kernel.configs[0]
    kw = cfg.all_kwargs()
    return (kw["BLOCK_M"], kw["BLOCK_N"], kw["BLOCK_K"], kw["num_warps"], kw["num_stages"], kw["GROUP_M"])


def run(shape, dtype):
    M, N, K = shape
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    a = torch.randn(M, K, device=DEVICE, dtype=dtype, generator=gen)
    b = torch.randn(K, N, device=DEVICE, dtype=dtype, generator=gen)
    c = torch.empty(M, N, device=DEVICE, dtype=dtype)
    truth = a.float() @ b.float()
    tol = 0.02 * K**0.5
    tile = picked_tile(a, b, c)
    say(f"== {M}x{N}x{K} {str(dtype).replace('torch.', '')}: the lesson's autotuner picks {tile}")
    python = {
        "matmul() (make bench's call)": lambda: L.matmul(a, b, out=c),
        "host descriptors, SUBTILE 1": lambda: variant_launch(a, b, c, tile, (1, True, False)),
        "host descriptors, SUBTILE 2": lambda: variant_launch(a, b, c, tile, (2, True, False)),
    }
    for label, fn in python.items():
        c.fill_(float("nan"))
        err = (fn().float() - truth).abs().max().item()
        if not err <= tol:  # NaN too: a block never stored
            say(f"   {label}: FAIL (max error {err:.3g}); not timed")
            return
    candidates = dict(python)
    if not CPU:
        candidates.update({f"{label}, CUDA graph": graphed(fn) for label, fn in python.items()})
        candidates["cuBLAS, CUDA graph"] = graphed(lambda: torch.matmul(a, b, out=c))
    cublas = lambda: torch.matmul(a, b, out=c)  # noqa: E731
    for rnd in (1, 2):
        base = bench_ms(cublas)
        for label, fn in candidates.items():
            if time.time() - T0 > BUDGET_S:
                say(f"   round {rnd} {label}: SKIPPED (time budget)")
                continue
            ms = bench_ms(fn)
            after = bench_ms(cublas)
            if CPU:
                say(f"   round {rnd} {label}: ran")
                continue
            say(f"   round {rnd} {label:44s} {ms * 1e3:8.1f} us  x cuBLAS {(base + after) / 2 / ms:.3f}")
            base = after


def main():
    say(
        f"lesson 05 sweep x (host descriptors from a Python launcher, timed as make bench times matmul()) on "
        f"{ENV.gpu_name if ENV.is_gpu else 'CPU (interpreter)'}, torch {torch.__version__}, triton {triton.__version__}"
    )
    if not CPU and not ENV.supports_tma:
        say("no TMA on this GPU: nothing to time")
        return
    shapes = [((40, 72, 48), torch.float16)] if CPU else [
        ((4096, 4096, 4096), torch.float16), ((4096, 4096, 4096), torch.bfloat16),
        ((3000, 5000, 1000), torch.float16), ((3000, 5000, 1000), torch.bfloat16),
        ((8192, 8192, 8192), torch.float16), ((8192, 8192, 8192), torch.bfloat16),
    ]  # fmt: skip
    for shape, dtype in shapes:
        run(shape, dtype)
    say(f"total {time.time() - T0:.0f} s")


if __name__ == "__main__":
    main()
