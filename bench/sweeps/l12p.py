"""Lesson 12 sweep p (issue 15): does the way the timer clears L2 cost the small memory-bound kernels time of its own?

``triton.testing.do_bench`` (and so utils.timing, make bench and the sweeps' gtime) clears L2 before each repetition
by zeroing a 256 MB buffer. That leaves the L2 full of dirty lines: the kernel timed next must write them back to
memory as its reads evict them, so a kernel that reads 31 MB may move about 62. A read of the same buffer also
clears L2, and leaves it clean. This sweep times the same graph replays three ways, each a median of 100 over CUDA
events: after a zeroed buffer (as today), after a buffer read (sum into one number), and with nothing between
(warm: whatever of the bytes L2 kept).

Timed: a torch copy, a read-only pass (a sum), bf16 cuBLAS x @ w.T at M = 1, the int4 GEMV (w4a16_fast, the
table's schedule) and the int8 GEMV, at Llama-3-8B's up projection and a 1B one; then lesson 08's bf16 decode step
and lesson 12's int4 step at Llama-3-8B's shape (random weights, 640 tokens of cache).

Run from the repo root: ``PYTHONPATH=$PWD OUT=$OUT python3 bench/sweeps/l12p.py`` on the GPU (about 2 minutes),
``PYTHONPATH=$PWD python3 bench/sweeps/l12p.py --cpu`` under the interpreter (tiny shapes, no timings).
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

import utils  # noqa: E402
from bench.sweeps.kit import Log, graphed  # noqa: E402
from lessons import l08_llama_model as L8  # noqa: E402
from lessons import l12_quantization as L  # noqa: E402

ENV = utils.mode.current()
say = Log("l12p")
REPS = 100


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


if CPU:
    big = torch.empty(1 << 10, dtype=torch.int32)
    total = torch.empty((), dtype=torch.int64)
else:
    big = torch.empty(256 << 20 >> 2, dtype=torch.int32, device="cuda")
    total = torch.empty((), dtype=torch.int64, device="cuda")
FLUSHES = {
    "zeroed (as today)": big.zero_,
    "read (clean)": lambda: torch.sum(big, dim=0, out=total),
    "none (warm)": None,
}


def row(label, fn, nbytes):
    parts = []
    for name, flush in FLUSHES.items():
        ms = timed(fn, flush)
        parts.append(f"{name} " + ("ran" if ms is None else f"{ms * 1e3:8.2f} us {nbytes / ms / 1e6:6.0f} GB/s"))
    say(f"{label:34s} | " + " | ".join(parts))


say(f"lesson 12 sweep p (how L2 is cleared) on {ENV.gpu_name if ENV.is_gpu else 'CPU (interpreter)'}, torch "
    f"{torch.__version__}, triton {__import__('triton').__version__}; median of {REPS} CUDA-event timings of graph "
    f"replays; GB/s = the bytes the kernel must move / time")  # fmt: skip
DT, G = (torch.float32, 32) if CPU else (torch.bfloat16, 128)
for label, (N, K) in ({"tiny": (24, 256)} if CPU else {"8B up": (14336, 4096), "1B up": (8192, 2048)}).items():
    torch.manual_seed(0)
    w = torch.randn(N, K, device=ENV.device, dtype=DT) / K**0.5
    x = torch.randn(1, K, device=ENV.device, dtype=DT)
    w4, w8 = L.quantize_int4_ref(w, G), L.quantize_int8_ref(w)
    n4, n8 = L.w4a16_bytes(1, N, K, G), L.w8a16_bytes(1, N, K)
    src = torch.empty(max(n4 // 2, 1), dtype=torch.int8, device=ENV.device)
    dst = torch.empty_like(src)
    ro = torch.empty(max(n4 // 4, 1), dtype=torch.int32, device=ENV.device)
    say(f"== {label} ({N}, {K}): int4 {n4 / 1e6:.1f} MB, int8 {n8 / 1e6:.1f} MB, bf16 {2 * N * K / 1e6:.1f} MB")
    row(f"copy, {n4 / 1e6:.1f} MB read+written", graphed(lambda: dst.copy_(src)), n4)
    row(f"sum, {n4 / 1e6:.1f} MB read", graphed(lambda: torch.sum(ro, dim=0, out=total)), n4)
    row("cuBLAS bf16 x @ w.T", graphed(lambda: x @ w.T), 2 * N * K)
    row("int4 w4a16_fast (table)", graphed(lambda: L.w4a16_fast(x, w4)), n4)
    row("int8 w8a16_fast (table)", graphed(lambda: L.w8a16_fast(x, w8)), n8)
    del w, w4, w8, src, dst, ro
if not CPU:
    from bench.common import random_llama

    args = L8.ModelArgs(vocab_size=128256, n_layers=32, dim=4096, n_heads=32, n_kv_heads=8, ffn_dim=14336,
                        rope_theta=500000.0, tie_embeddings=False)  # fmt: skip
    model = random_llama(args, DT, ENV.device)
    int4 = L.quantize_model(model, 4, G)
    cache = L8.new_cache(model, 1, 768)
    token = torch.tensor([7], device=ENV.device)
    pos = torch.tensor([640], dtype=torch.int32, device=ENV.device)
    say("== Llama-3-8B decode step, B=1, context 640")
    row("bf16 step (lesson 08)", graphed(lambda: L8.decode_step(model, token, pos, cache, L8.TRITON_DECODE)),
        L.model_weight_bytes(model))  # fmt: skip
    row("int4 step", graphed(lambda: L.quantized_decode_step(int4, token, pos, cache)), L.model_weight_bytes(int4))
say(f"total {time.time() - T0:.0f} s")
