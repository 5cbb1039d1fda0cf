"""Lesson 05 sweep u, 2026-11-28: why matmul() timed 6-9 % slower than matmul_persistent_tma() at 4096^3 in make
bench (results/h100-2026-11-27-s10 and -s11) when it hands that shape to the same kernel (issue 12).

Nothing to choose: a diagnosis. At 4096^3, fp16 and bf16, each way of calling the TMA kernel is timed as make bench
times it (bench.common.paired: Python launches, do_bench with L2 cleared, cuBLAS timed before and after), three
rounds in a different order each time, so that a row's place in the list cannot explain its time:
  matmul             matmul(a, b): the prepared launch (utils.launch) after the first call
  matmul, out=       matmul(a, b, out=c)
  tma                matmul_persistent_tma(a, b): Triton's own launch, through the autotuner
  tma, out=          matmul_persistent_tma(a, b, out=c)
  matmul (graph)     matmul(a, b) replayed from a CUDA graph: the GPU's work alone
  tma (graph)        the same for matmul_persistent_tma
It also prints what each path launches (the autotuner's pick, the prepared launch's kernel and grid) and the host's
microseconds a call. If the Python rows differ and the graph rows do not, the gap is the host's; if the graph rows
differ too, the two launch different work.

Run from the repo root: ``PYTHONPATH=$PWD python3 bench/sweeps/l05u.py`` on a GPU with TMA (< 60 s),
``... l05u.py --cpu`` under the interpreter (tiny shapes, no timings: a smoke test).
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


def say(line=""):
    print(line, flush=True)
    LINES.append(line)
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "sweep_l05u.txt"), "w") as f:
            f.write("\n".join(LINES) + "\n")


def host_us(fn, calls=50):
    """Wall-clock microseconds a call of fn() takes the host (the GPU's queue absorbs the work)."""
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(calls):
        fn()
    us = (time.perf_counter() - t) / calls * 1e6
    torch.cuda.synchronize()
    return us


say(
    f"lesson 05 sweep u (matmul() against matmul_persistent_tma() at one shape) on "
    f"{ENV.gpu_name if ENV.is_gpu else 'CPU (interpreter)'}, torch {torch.__version__}, triton {triton.__version__}, "
    f"TMA_MIN_FLOPS {L.TMA_MIN_FLOPS}, LARGE_MATMUL {getattr(L.LARGE_MATMUL, '__name__', None)}"
)
M = N = K = 48 if CPU else 4096
device = "cpu" if CPU else "cuda"
for dtype in (torch.float16, torch.float32 if CPU else torch.bfloat16):  # the interpreter has no bf16
    gen = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(M, K, device=device, dtype=dtype, generator=gen)
    b = torch.randn(K, N, device=device, dtype=dtype, generator=gen)
    c = torch.empty(M, N, device=device, dtype=dtype)
    fns = {
        "matmul": lambda: L.matmul(a, b),
        "matmul, out=": lambda: L.matmul(a, b, out=c),
        "tma": lambda: L.matmul_persistent_tma(a, b),
        "tma, out=": lambda: L.matmul_persistent_tma(a, b, out=c),
    }
    truth = a.float() @ b.float()
    for name, fn in fns.items():
        err = (fn().float() - truth).abs().max().item()
        say(f"{dtype} {name}: max error {err:.3g} against fp32")
    if CPU:
        continue
    from bench.common import graphed
    from utils import timing

    fns["matmul (graph)"] = graphed(fns["matmul"])
    fns["tma (graph)"] = graphed(fns["tma"])
    kernel = L.matmul_tma_kernel
    say(f"  autotuner cache: {[(k, str(v)) for k, v in kernel.cache.items()]}")
    say(f"  prepared launches: {list(L.PREPARED.values())}")
    for p in L.PREPARED.values():
        meta = p.compiled.metadata
        say(f"    {p.compiled.name}: grid {p.grid}, num_warps {meta.num_warps}, num_stages {meta.num_stages}")
    for name in ("matmul", "matmul, out=", "tma", "tma, out="):
        say(f"  host {name}: {host_us(fns[name]):.1f} us a call")
    cublas = lambda: torch.matmul(a, b)  # noqa: E731
    names = list(fns)
    for rnd in range(3):
        order = names[rnd:] + names[:rnd] if rnd < 2 else names[::-1]
        base = timing.bench(cublas).ms
        for name in order:
            t = timing.bench(fns[name]).ms
            after = timing.bench(cublas).ms
            say(f"  round {rnd} {name:16s} {t * 1e3:8.1f} us  cuBLAS {base * 1e3:7.1f}/{after * 1e3:7.1f}"
                f"  ratio {(base + after) / 2 / t:.3f}")  # fmt: skip
            base = after
say(f"total {time.time() - T0:.0f} s")
