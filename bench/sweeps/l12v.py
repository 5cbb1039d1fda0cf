"""Lesson 12 sweep v (issue 15): the int4 GEMV's ceiling, a kernel that only reads the same bytes, with L2 cleared
dirty (as make bench clears it) and clean.

Sweep l12u found a Triton kernel that does nothing but read the 8B up projection's packed int4 codes (29.4 MB) and
add them up taking 14.7 us under make bench's timer, about half of the copy bandwidth, where issue 15 asks 80 % of
it of the GEMV. Sweep l12p had found that the timer's way of clearing L2 (zeroing 256 MB, which leaves L2 full of
dirty lines) costs the copy of those bytes 16 % and cuBLAS's bf16 GEMV 18 %. This sweep times the read-only kernel,
a copy, the int4 GEMV (w4a16_fast, the table's schedule) and torchao's int4 GEMV (tinygemm, where torchao is
installed) three ways: after a zeroed buffer (as make bench), after a buffer read (L2 left clean), and with
nothing between (warm), each a median of 100 CUDA-event timings of graph replays, at Llama-3-8B's two projections
and a 1B one.

Run from the repo root: ``PYTHONPATH=$PWD OUT=$OUT python3 bench/sweeps/l12v.py`` on the GPU (about a minute),
``PYTHONPATH=$PWD python3 bench/sweeps/l12v.py --cpu`` under the interpreter (tiny shapes, no timings).
"""

import os
import statistics
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
from bench.sweeps.kit import Log, graphed  # noqa: E402
from lessons import l12_quantization as L  # noqa: E402

ENV = utils.mode.current()
say = Log("l12v")
REPS = 100


@triton.jit
def read_sum_kernel(src_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """Sums the low bytes of BLOCK int32 a program (l12u's fastest read: 4 KB a program, 4 warps)."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + tl.program_id(0), tl.sum(tl.load(src_ptr + offs, mask=offs < n, other=0) & 0xFF, 0))


def timed(fn, flush):
    """Median ms of fn() over REPS, each after flush() (None: nothing between); None under the interpreter."""
    if CPU:
        fn()
        return None
    start = [torch.cuda.Event(enable_timing=True) for _ in range(REPS)]
    end = [torch.cuda.Event(enable_timing=True) for _ in range(REPS)]
    for _ in range(5):
        fn()
    for i in range(REPS):
        if flush is not None:
            flush()
        start[i].record()
        fn()
        end[i].record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(start, end))


big = torch.empty((1 << 10) if CPU else (256 << 20 >> 2), dtype=torch.int32, device=ENV.device)
total = torch.empty((), dtype=torch.int64, device=ENV.device)
FLUSHES = {
    "zeroed (make bench)": big.zero_,
    "read (clean)": lambda: torch.sum(big, dim=0, out=total),
    "none (warm)": None,
}


def row(label, fn, nbytes):
    parts = []
    for name, flush in FLUSHES.items():
        ms = timed(fn, flush)
        parts.append(f"{name} " + ("ran" if ms is None else f"{ms * 1e3:7.2f} us {nbytes / ms / 1e6:5.0f} GB/s"))
    say(f"{label:30s} | " + " | ".join(parts))


def torchao_linear(w):
    try:
        from bench.lesson12 import torchao_int4_linear

        return torchao_int4_linear(w)
    except Exception as e:  # noqa: BLE001
        say(f"torchao: {type(e).__name__}: {e}")
        return None


say(f"lesson 12 sweep v (the int4 GEMV's ceiling, L2 cleared dirty and clean) on "
    f"{ENV.gpu_name if ENV.is_gpu else 'CPU (interpreter)'}, torch {torch.__version__}, triton {triton.__version__}; "
    f"median of {REPS} CUDA-event timings of graph replays; GB/s = the bytes the GEMV must move / time")  # fmt: skip
DT, G = (torch.float32, 32) if CPU else (torch.bfloat16, 128)
SHAPES = {"tiny": (24, 256)} if CPU else {"8B up": (14336, 4096), "8B down": (4096, 14336), "1B up": (8192, 2048)}
for label, (N, K) in SHAPES.items():
    torch.manual_seed(0)
    w = torch.randn(N, K, device=ENV.device, dtype=DT) / K**0.5
    x = torch.randn(1, K, device=ENV.device, dtype=DT)
    w4 = L.quantize_int4_ref(w, G)
    n4 = L.w4a16_bytes(1, N, K, G)
    words = w4.packed.view(torch.int32).reshape(-1)
    part = torch.empty(triton.cdiv(words.numel(), 1024), dtype=torch.int32, device=ENV.device)
    read = lambda: read_sum_kernel[(part.numel(),)](words, part, words.numel(), BLOCK=1024, num_warps=4)  # noqa
    read()
    if int(part.sum(dtype=torch.int64)) != int((words & 0xFF).sum(dtype=torch.int64)):
        say(f"{label}: the read-only kernel's sum is WRONG")
    src = torch.empty(max(n4 // 2, 1), dtype=torch.int8, device=ENV.device)
    dst = torch.empty_like(src)
    say(f"== {label} ({N}, {K}): the int4 GEMV moves {n4 / 1e6:.1f} MB ({w4.packed.nbytes / 1e6:.1f} MB of codes)")
    row("read-only kernel (codes)", graphed(read), w4.packed.nbytes)
    row("copy, read + written", graphed(lambda: dst.copy_(src)), n4)
    row("int4 w4a16_fast (table)", graphed(lambda: L.w4a16_fast(x, w4)), n4)
    if ENV.is_gpu:
        lin = torchao_linear(w)
        if lin is not None:
            row("torchao int4 (tinygemm)", graphed(lambda: lin(x)), n4)
    row("cuBLAS bf16 x @ w.T", graphed(lambda: x @ w.T), 2 * N * K)
    del w, w4, src, dst, words, part
say(f"total {time.time() - T0:.0f} s")
