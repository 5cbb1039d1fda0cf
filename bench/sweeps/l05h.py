"""Lesson 05 sweep h, 2026-11-27: what a call of each matmul launcher costs the host (issue 12: >= 0.9x cuBLAS at
1024^3 "cache what the host builds per call").

make bench times a call from Python with the L2 flushed before it (utils.timing): the flush gives the GPU about
85 us of work while Python launches the call, so a launcher whose host work takes longer than that leaves the GPU
idle inside the timed region, and a 10 us matmul reads as 70 us (results/h100-2026-11-23-s7: matmul() at 1024^3 fp16
0.14x cuBLAS, 0.89x in a CUDA graph). This script measures the host side alone: many calls back to back at a size
where the GPU is never the bottleneck, wall clock per call, and a profile of the slowest launcher by function.

Run from the repo root: ``PYTHONPATH=$PWD python3 bench/sweeps/l05h.py`` on the GPU (< 60 s);
``PYTHONPATH=$PWD python3 bench/sweeps/l05h.py --cpu`` under the interpreter (a smoke test: there the kernels
themselves run on the host, so the numbers mean nothing).

2026-11-28: matmul() now launches a repeated call from L.PREPARED (utils.launch: the compiled kernel, no checks
but out's overlap); its rows measure that, and the two "nothing prepared" rows the full path as before.
"""

import cProfile
import os
import sys
import time

CPU = "--cpu" in sys.argv
if CPU:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402
import triton  # noqa: E402

import utils  # noqa: E402
from bench.sweeps.kit import say_profile  # noqa: E402
from lessons import l05_matmul as L  # noqa: E402
from utils import launch  # noqa: E402

ENV = utils.mode.current()
LINES = []


def say(line=""):
    print(line, flush=True)
    LINES.append(line)


def sync():
    if not CPU:
        torch.cuda.synchronize()


def host_us(fn, calls):
    """Wall-clock microseconds a call over `calls` calls queued back to back (one sync at the end)."""
    fn()
    sync()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    sync()
    return (time.perf_counter() - t0) / calls * 1e6


say(
    f"lesson 05 sweep h (host cost a call) on {ENV.gpu_name if ENV.is_gpu else 'CPU (interpreter)'}, torch "
    f"{torch.__version__}, triton {triton.__version__}"
)
n, calls = (32, 3) if CPU else (1024, 2000)
for dtype in (torch.float16, torch.bfloat16) if not CPU else (torch.float16,):
    a = torch.randn(n, n, device=ENV.device).to(dtype)
    b = torch.randn(n, n, device=ENV.device).to(dtype)
    out = torch.empty(n, n, device=ENV.device, dtype=dtype)
    launchers = {
        "torch.matmul(out=)": lambda: torch.matmul(a, b, out=out),
        "matmul()": lambda: L.matmul(a, b),
        "matmul(out=)": lambda: L.matmul(a, b, out=out),
        "matmul_persistent(out=)": lambda: L.matmul_persistent(a, b, out=out),
        "matmul_persistent_tma(out=)": lambda: L.matmul_persistent_tma(a, b, out=out),
        "matmul_launch (no checks)": lambda: L.matmul_launch(a, b, out),
        "matmul_kernel[grid] with a fixed config (no autotuner)": lambda: L.matmul_kernel.fn[L.matmul_grid(n, n)](
            *L.matmul_args(a, b, out, None),
            BLOCK_M=128,
            BLOCK_N=128,
            BLOCK_K=64,
            GROUP_M=8,
            HAS_BIAS=False,
            ACTIVATION=None,
            ALIGN=16,
            num_warps=4,
            num_stages=3,
        ),  # fmt: skip
    }
    gpu_us = None
    if not CPU:
        import triton.testing

        from bench.common import graphed

        gpu_us = triton.testing.do_bench(graphed(lambda: L.matmul(a, b, out=out)), warmup=5, rep=50) * 1e3
    say(f"== {n}^3 {utils.dtype_name(dtype)}: the kernel alone {'n/a' if gpu_us is None else f'{gpu_us:.1f} us'}")
    for name, fn in launchers.items():
        try:
            say(f"   {name:58s} {host_us(fn, calls):8.1f} us a call")
        except Exception as e:
            say(f"   {name:58s} ERROR {type(e).__name__}: {str(e).splitlines()[0][:120]}")

    # 2026-11-28: matmul() repeats a call's launch from L.PREPARED (utils.launch); the same calls without it (a
    # table that keeps nothing; as run on the GPU, L.remember was switched off instead, to the same effect)
    class KeepsNothing(launch.Table):
        def keep(self, *args, **kwargs):
            pass

    saved, L.PREPARED = L.PREPARED, KeepsNothing()
    for name, fn in {"matmul(), nothing prepared": lambda: L.matmul(a, b),
                     "matmul(out=), nothing prepared": lambda: L.matmul(a, b, out=out)}.items():  # fmt: skip
        say(f"   {name:58s} {host_us(fn, calls):8.1f} us a call")
    L.PREPARED = saved
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(calls):
        L.matmul(a, b, out=out)
    sync()
    profile.disable()
    say_profile(say, profile, f"profile of matmul(out=), {calls} calls", indent="     ")
out_dir = os.environ.get("OUT")
if out_dir:
    with open(os.path.join(out_dir, "sweep_l05h.txt"), "w") as f:
        f.write("\n".join(LINES) + "\n")
