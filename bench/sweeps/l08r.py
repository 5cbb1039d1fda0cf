"""Lesson 08 sweep r, 2026-12-07 (session 46): what a launch from Python costs the host, under the triton in use.
Run from the repo root: ``PYTHONPATH=$PWD python3 bench/sweeps/l08r.py`` on the GPU (< 60 s), once with the image's
triton and once with the pinned one (``scripts/gpu-validate.sh sweep:l08r@80 pinned sweep:l08r@80``: the log's name
carries the version); ``--cpu``: every part once under the interpreter (a smoke test, no timings).

Why: session 46's ``make bench`` of lesson 12 under the pinned triton 3.7.1 (results/h100-2026-12-07-s46/bench-12-pinned)
matched session 45's under 3.6 (same kind of H100) wherever a CUDA graph replays the kernels, but the time to first
token of the 1B models (a prefill launched from Python, several hundred launches) took 1.3-2.4x as long, the bf16 model
of lesson 08 included (Llama-3.2-1B: 4.4 ms under 3.6, 8.2-10.8 ms under 3.7.1), and a few launcher rows timed without
a graph jumped (the int4 M = 16 GEMV at 1B's down projection, two launches: 16.5 us under 3.6, 46.1 us under 3.7.1,
15.9 us replayed from a graph). A host that spends longer on each launch than the GPU spends on its kernel sets the
pace of everything not captured in a graph.

Part A: a kernel that stores one value, launched 2,000 times back to back: the host's microseconds a launch (until the
call returns) and the GPU-synced microseconds a launch, with 3 and with 16 arguments, and with launch_pdl=True (lesson
08's early launch). Then a cProfile of the 16-argument launches: where the host's time goes, function by function.
Part B: lesson 12's launchers as make bench times them (no graph) and replayed from a graph, at the rows that jumped.
Part C: lesson 08's bf16 prefill of Llama-3.2-1B's shape (prompt 512, random weights: make bench's "time to first
token"), the number of kernels it launches, and its time.
Nothing to edit: the figures say whether the pinned triton's launch costs more, by how much, and where.
"""

import cProfile
import os
import sys
import time

T0 = time.time()
CPU = "--cpu" in sys.argv
if CPU:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch
import triton
import triton.language as tl

from bench.sweeps.kit import Log, bench_ms, count_launches, graphed, on_gpu, say_profile

say = Log(f"l08r-triton{triton.__version__}")
DEV = "cuda" if on_gpu() else "cpu"
N_LAUNCH = 2000 if on_gpu() else 3


@triton.jit
def one_store_kernel(out_ptr, n, BLOCK: tl.constexpr):
    tl.store(out_ptr + tl.arange(0, BLOCK), tl.zeros([BLOCK], tl.float32) + n, mask=tl.arange(0, BLOCK) < n)


@triton.jit
def sixteen_args_kernel(out_ptr, a_ptr, b_ptr, c_ptr, d_ptr, e_ptr, n, s0, s1, s2, s3, s4, s5, s6, s7,
                        BLOCK: tl.constexpr):  # fmt: skip
    tl.store(out_ptr + tl.arange(0, BLOCK), tl.zeros([BLOCK], tl.float32) + n + s0 + s7, mask=tl.arange(0, BLOCK) < n)


def sync():
    if on_gpu():
        torch.cuda.synchronize()


def per_launch(launch, n=N_LAUNCH):
    """(host us a launch until the call returns, us a launch until the GPU is done): n launches back to back."""
    for _ in range(20):
        launch()
    sync()
    t0 = time.perf_counter()
    for _ in range(n):
        launch()
    t1 = time.perf_counter()
    sync()
    t2 = time.perf_counter()
    return (t1 - t0) / n * 1e6, (t2 - t0) / n * 1e6


def part_a():
    out = torch.empty(128, device=DEV)
    bufs = [torch.empty(16, device=DEV) for _ in range(5)]
    pdl = {"launch_pdl": True} if on_gpu() and torch.cuda.get_device_capability()[0] >= 9 else {}
    launches = {
        "3 args": lambda: one_store_kernel[(1,)](out, 7, BLOCK=128),
        "16 args": lambda: sixteen_args_kernel[(1,)](out, *bufs, 7, 1, 2, 3, 4, 5, 6, 7, 8, BLOCK=128),
        "16 args, 4 warps, 3 stages named": lambda: sixteen_args_kernel[(1,)](
            out, *bufs, 7, 1, 2, 3, 4, 5, 6, 7, 8, BLOCK=128, num_warps=4, num_stages=3
        ),
    }
    if pdl:
        launches["16 args, launch_pdl=True"] = lambda: sixteen_args_kernel[(1,)](
            out, *bufs, 7, 1, 2, 3, 4, 5, 6, 7, 8, BLOCK=128, **pdl
        )
    say("== A: a one-store kernel launched back to back")
    for label, launch in launches.items():
        host, done = per_launch(launch)
        say(f"  {label:36s} host {host:6.2f} us a launch, GPU done {done:6.2f} us a launch")
    prof = cProfile.Profile()
    launch = launches["16 args"]
    prof.enable()
    for _ in range(N_LAUNCH):
        launch()
    prof.disable()
    sync()
    say_profile(say, prof, f"cProfile of {N_LAUNCH} launches of the 16-argument kernel")


def part_b():
    from lessons import l12_quantization as L12

    say("== B: lesson 12's launchers, as make bench times them and replayed from a graph")
    shapes = [(16, 2048, 8192), (16, 8192, 2048), (1, 2048, 8192)] if on_gpu() else [(16, 40, 300), (1, 40, 300)]
    dtype = torch.bfloat16 if on_gpu() else torch.float32
    for M, N, K in shapes:
        w = torch.randn(N, K, device=DEV, dtype=dtype) / K**0.5
        x = torch.randn(M, K, device=DEV, dtype=dtype)
        w4, w8 = L12.quantize_int4_ref(w, 128), L12.quantize_int8_ref(w)
        for label, fn in (("int4", lambda: L12.w4a16_fast(x, w4)), ("int8", lambda: L12.w8a16_fast(x, w8))):
            host, done = per_launch(fn, n=500 if on_gpu() else 1)
            say(f"  {label} M={M:2d} {K}->{N}: {L12.fast_schedule(4 if label == 'int4' else 8, M, N, K)}")
            say(f"      make bench's timing {bench_ms(fn) * 1e3:7.1f} us, graphed {bench_ms(graphed(fn)) * 1e3:7.1f} us; "
                f"back to back: host {host:6.1f} us a call, GPU done {done:6.1f} us a call")  # fmt: skip


def part_c():
    from bench.common import random_llama
    from lessons import l08_llama_model as L8

    say("== C: lesson 08's bf16 prefill (time to first token), Llama-3.2-1B's shape, prompt 512")
    if on_gpu():
        model, prompt = random_llama("Llama-3.2-1B", torch.bfloat16), 512
    else:
        args = L8.ModelArgs(vocab_size=100, n_layers=2, dim=64, n_heads=4, n_kv_heads=2, ffn_dim=48,
                            tie_embeddings=False)  # fmt: skip
        model, prompt = random_llama(args, torch.float32, device="cpu"), 8
    ids = torch.randint(0, model.args.vocab_size, (1, prompt), device=DEV)

    def first_token():
        return L8.generate(model, ids, 1, max_len=prompt + 256)

    first_token()
    launches = count_launches(first_token)
    ms = bench_ms(first_token)
    host, done = per_launch(first_token, n=20 if on_gpu() else 1)
    say(f"  {launches} Triton launches; make bench's timing {ms:.2f} ms; back to back: host {host / 1e3:.2f} ms a "
        f"call, GPU done {done / 1e3:.2f} ms a call ({done / max(launches, 1):.1f} us a launch)")  # fmt: skip


def main():
    say(f"lesson 08 sweep r on {torch.cuda.get_device_name() if on_gpu() else 'the CPU (interpreter)'}, torch "
        f"{torch.__version__}, triton {triton.__version__}")  # fmt: skip
    for part in (part_a, part_b, part_c):
        try:
            part()
        except Exception as e:  # noqa: BLE001 - one part's failure is a finding; the others still run
            say(f"  {part.__name__} failed: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}")
    say(f"total {time.time() - T0:.0f} s")


if __name__ == "__main__":
    main()
