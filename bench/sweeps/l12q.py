"""Lesson 12 sweep q (issue 15): the int4 GEMV with more bytes in flight (deeper pipelines, more rows a program).

Sweep l12o found the GEMV's loop taking about the time of its loads plus the time of its dots, as if the two never
overlapped: while a program works out a step's dots it issues no new loads, so the bytes in flight fall. A deeper
pipeline (PIPE = num_stages of the "pipe" kind: that many steps copied ahead into shared memory) or more rows a
program keep more in flight. This sweep times the lesson's own kernel (w4a16_fast with a FastSchedule) at depths
2-6 and 4-32 rows a program, at Llama-3-8B's and a 1B pair of projections; then lesson 12's int4 decode step at
Llama-3-8B's shape with FUSED_INT4_KERNEL = "pipe" at deeper FUSED_PIPE_SCHEDULES[None] rows, against the table's
"stream" step, bf16 and int8.

Run from the repo root: ``PYTHONPATH=$PWD OUT=$OUT python3 bench/sweeps/l12q.py`` on the GPU (about 4 minutes),
``PYTHONPATH=$PWD python3 bench/sweeps/l12q.py --cpu`` under the interpreter (tiny shapes, no timings).
"""

import os
import sys
import time

T0 = time.time()
CPU = "--cpu" in sys.argv
if CPU:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402

import utils  # noqa: E402
from bench.sweeps.kit import Log, gtime  # noqa: E402
from lessons import l08_llama_model as L8  # noqa: E402
from lessons import l12_quantization as L  # noqa: E402

ENV = utils.mode.current()
say = Log("l12q")
BUDGET_A, BUDGET_S = 230, 500
FS, GS = L.FastSchedule, L8.GemvSchedule


def first_line(e):
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0][:160] if text else ''}"


if CPU:
    DT, G = torch.float32, 32
    SHAPES = {"tiny": (24, 256)}
    TILES = [(4, 64, 2, s) for s in (2, 4)]
else:
    DT, G = torch.bfloat16, 128
    SHAPES = {"8B up": (14336, 4096), "8B down": (4096, 14336), "1B up": (8192, 2048), "1B down": (2048, 8192)}
    TILES = [(bn, bk, w, s) for bn, bk, w in ((8, 512, 4), (16, 512, 2), (16, 512, 4), (32, 256, 2), (8, 1024, 2),
                                              (4, 1024, 2), (32, 512, 4)) for s in (2, 3, 4, 5, 6)]  # fmt: skip

say(f"lesson 12 sweep q (int4 GEMV: more bytes in flight) on {ENV.gpu_name if ENV.is_gpu else 'CPU (interpreter)'}, "
    f"torch {torch.__version__}, triton {__import__('triton').__version__}, {ENV.sm_count} SMs")  # fmt: skip
say("== A. w4a16_fast, M = 1, g128 (graph, L2 cleared): shape | (BLOCK_N, BLOCK_K, warps, depth) | time | GB/s | "
    "x table")  # fmt: skip
for label, (N, K) in SHAPES.items():
    if time.time() - T0 > BUDGET_A:
        say(f"{label}: SKIPPED (time budget)")
        continue
    torch.manual_seed(0)
    w4 = L.quantize_int4_ref(torch.randn(N, K, device=ENV.device, dtype=DT) / K**0.5, G)
    x = torch.randn(1, K, device=ENV.device, dtype=DT)
    nbytes = L.w4a16_bytes(1, N, K, G)
    ref = L.wxa16_ref(x.float(), w4)
    table = L.fast_schedule(4, 1, N, K, G)
    base = gtime(lambda: L.w4a16_fast(x, w4))
    say(f"{label} ({N}, {K}), {nbytes / 1e6:.1f} MB: table {tuple(table)} "
        + ("ran" if base is None else f"{base * 1e3:.2f} us"))  # fmt: skip
    best = None
    for bn, bk, nw, st in TILES:
        if time.time() - T0 > BUDGET_A:
            break
        s = FS("pipe", 1, bn, min(bk, 1 << (K - 1).bit_length()), 1, nw, st)
        try:
            out = L.w4a16_fast(x, w4, schedule=s).float()
            err = float((out - ref).norm() / ref.norm())
            if not err < 1e-2:  # bf16 output against an fp32 reference
                say(f"{label} | {(bn, bk, nw, st)} | WRONG {err:.2e}")
                continue
            ms = gtime(lambda: L.w4a16_fast(x, w4, schedule=s))
        except Exception as e:  # noqa: BLE001
            say(f"{label} | {(bn, bk, nw, st)} | ERROR {first_line(e)}")
            continue
        if ms is None:
            say(f"{label} | {(bn, bk, nw, st)} | ran")
            continue
        say(f"{label} | {(bn, bk, nw, st)} | {ms * 1e3:7.2f} us | {nbytes / ms / 1e6:6.0f} GB/s | x{base / ms:5.2f}")
        if best is None or ms < best[0]:
            best = (ms, (bn, bk, nw, st))
    if best:
        say(f"-> {label}: best {best[1]} {best[0] * 1e3:.2f} us, x{base / best[0]:.2f} the table's")
    say(f"  ({time.time() - T0:.0f} s)")


def part_b():
    from bench.common import random_llama

    if CPU:
        args = L8.ModelArgs(vocab_size=100, n_layers=2, dim=64, n_heads=4, n_kv_heads=2, ffn_dim=48,
                            tie_embeddings=False)  # fmt: skip
        rows, max_len, context = [GS(4, 64, 2, 4)], 24, 16
    else:
        args = L8.ModelArgs(vocab_size=128256, n_layers=32, dim=4096, n_heads=32, n_kv_heads=8, ffn_dim=14336,
                            rope_theta=500000.0, tie_embeddings=False)  # fmt: skip
        rows = [GS(bn, bk, w, s) for bn, bk, w in ((8, 512, 4), (16, 512, 2), (4, 1024, 4), (8, 1024, 2))
                for s in (3, 4, 5)]  # fmt: skip
        max_len, context = 768, 640
    say(
        f"== B. {'tiny' if CPU else 'Llama-3-8B'} decode step, B=1, context {context}, CUDA graph: variant | time | x bf16"
    )
    torch.manual_seed(0)
    model = random_llama(args, DT, ENV.device)
    int4 = L.quantize_model(model, 4, G)
    cache = L8.new_cache(model, 1, max_len)
    token = torch.tensor([7], device=ENV.device)
    pos = torch.tensor([context], dtype=torch.int32, device=ENV.device)
    times = {}

    def step(key, fn):
        if time.time() - T0 > BUDGET_S:
            say(f"{key} | SKIPPED (time budget)")
            return
        try:
            fn()
            ms = gtime(fn)
        except Exception as e:  # noqa: BLE001
            say(f"{key} | ERROR {first_line(e)}")
            return
        times[key] = ms
        b = times.get("bf16")
        say(f"{key} | " + ("ran" if ms is None else f"{ms:7.4f} ms | x{b / ms if b else float('nan'):5.2f} bf16"))

    step("bf16", lambda: L8.decode_step(model, token, pos, cache, L8.TRITON_DECODE))
    step(f"int4 {L.FUSED_INT4_KERNEL} (the table)", lambda: L.quantized_decode_step(int4, token, pos, cache))
    saved_kind, saved_row = L.FUSED_INT4_KERNEL, L.FUSED_PIPE_SCHEDULES[None]
    try:
        L.FUSED_INT4_KERNEL = "pipe"
        for s in rows:
            L.FUSED_PIPE_SCHEDULES[None] = s
            step(f"int4 pipe, None row {tuple(s)}", lambda: L.quantized_decode_step(int4, token, pos, cache))
    finally:
        L.FUSED_INT4_KERNEL, L.FUSED_PIPE_SCHEDULES[None] = saved_kind, saved_row


part_b()
say(f"total {time.time() - T0:.0f} s")
