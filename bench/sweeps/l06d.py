"""Lesson 06 sweep d, 2026-11-28 (issue 12): what one call of each attention launcher costs the host, now that
attention_tma keeps its launches (TMA_PREPARED; utils.launch builds the three descriptors around each call's
q, k, v). make bench (an H200, results/h200-2026-11-28-s17/bench-06) timed attention() with the descriptor kernel
2.4-8x slower than the prepared pointer kernel at T = 333 and 512 called from Python, the same in CUDA graphs.

For each launcher at a few shapes (q, k, v views of one qkv buffer, as the layer and make bench make them): how
many of 200 repeated calls went through the full path (_attention_inputs) instead of the prepared launch, and the
host's wall time a call (the GPU's work is a few microseconds: the host is the bottleneck here); then the pieces of
a prepared descriptor call one by one (the signature, three views, three descriptors, the launch).

Run once on an H200 (results/h200-2026-11-28-s17/sweeps/l06d.txt): no repeated call went through the full path;
60-86 us a call with descriptors, 27-46 with pointers, 25 us for the prepared descriptor launch alone. With make
bench's rows, lesson 06's TMA_MIN_FLOPS became 1e10 (the descriptor kernel from T = 2048 up).

Run from the repo root: ``PYTHONPATH=$PWD python3 bench/sweeps/l06d.py`` on a GPU with TMA (< 30 s), ``... --cpu``
under the interpreter (nothing is prepared there: a smoke test of the script).
"""

import os
import sys
import time

CPU = "--cpu" in sys.argv
if CPU:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402
import triton  # noqa: E402
from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: E402

import utils  # noqa: E402
from bench.sweeps.kit import Log  # noqa: E402
from lessons import l06_flash_attention as L  # noqa: E402
from utils import launch  # noqa: E402

ENV = utils.mode.current()
say = Log("l06d")


def per_call_us(fn, n):
    fn()
    if not CPU:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    if not CPU:
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n * 1e6


def main():
    say(f"lesson 06 sweep d on {ENV.gpu_name if ENV.is_gpu else 'CPU (interpreter)'}, torch {torch.__version__}, "
        f"triton {triton.__version__}, TMA_MIN_FLOPS {L.TMA_MIN_FLOPS}")  # fmt: skip
    shapes = [(1, 40, 4, 2, 16)] if CPU else [(1, 333, 32, 4, 64), (1, 512, 32, 4, 64), (1, 2048, 32, 4, 64)]
    n = 3 if CPU else 200
    dtype = torch.float16 if CPU else torch.bfloat16
    full = []
    inputs = L._attention_inputs
    L._attention_inputs = lambda *a, **k: (full.append(1), inputs(*a, **k))[1]
    for B, T, H, KV, D in shapes:
        q, k, v = L.random_qkv(B, T, H, KV, D, dtype)
        for causal in (True, False):
            for name, fn in (("attention_pointers", L.attention_pointers), ("attention_tma", L.attention_tma),
                             ("attention", L.attention)):  # fmt: skip
                fn(q, k, v, causal)
                full.clear()
                us = per_call_us(lambda: fn(q, k, v, causal), n)
                say(f"B={B} T={T} H={H} KV={KV} D={D} {'causal' if causal else 'full':6s} {name:20s} "
                    f"{us:7.1f} us a call, {len(full)} of {n + 1} through the full path")  # fmt: skip
    L._attention_inputs = inputs
    B, T, H, KV, D = shapes[0]
    q, k, v = L.random_qkv(B, T, H, KV, D, dtype)
    sig = lambda: launch.signature(L.attention_kernel, q, k, v, None, True, None, None)  # noqa: E731
    views = lambda: [t.view(t.shape[0], t.shape[1], -1) for t in (q, k, v)]  # noqa: E731
    rows = views()
    fields = dict(block_shape=[1, 64, D], padding="zero")
    descs = lambda: [TensorDescriptor(r, list(r.shape), list(r.stride()), **fields) for r in rows]  # noqa: E731
    say(f"pieces at T={T}: signature {per_call_us(sig, n):.1f} us, three views {per_call_us(views, n):.1f} us, "
        f"three descriptors {per_call_us(descs, n):.1f} us")  # fmt: skip
    prepared = L.TMA_PREPARED.get(sig())
    if prepared is not None:
        o = torch.empty_like(q.contiguous())
        say(f"  the Prepared alone (descriptors built and encoded, the launch): "
            f"{per_call_us(lambda: prepared(*rows, o), n):.1f} us; it launches: {prepared(*rows, o)}")  # fmt: skip
    else:
        say("  no prepared descriptor launch for this signature")


if __name__ == "__main__":
    main()
