"""Lesson 08 sweep e (issues 11 and 15): DECODE_GEMV_LOOP and FUSED_INT8_LOOP in the batch-1 decode step: the GEMVs
loading ahead by hand ("prefetch", the tables as they were) or in a loop Triton pipelines ("pipe": the steps K does
not cut short in tl.range(..., num_stages=S), DECODE_PIPE_SCHEDULES / FUSED_INT8_PIPE_SCHEDULES from l12k.py), at
each place a GEMV launched early lets the next kernel launch (DECODE_FUSIONS.pdl, QUANTIZED_PDL[8]).

Run from the repo root: ``PYTHONPATH=$PWD python3 bench/sweeps/l08e.py`` on the GPU (< 150 s),
``PYTHONPATH=$PWD python3 bench/sweeps/l08e.py --cpu`` under the interpreter (a tiny model, no timings: a smoke test).

Why: l12k.py timed the pipelined loop against the tables' kernels one GEMV at a time, launched in order: bf16 1.00 to
1.19x, int8 (the fast path's kernel) 1.04 to 1.37x. The step launches its GEMVs early (PDL), and with the "prefetch"
loop their first weights load before the wait for the kernel before; with "pipe" the compiler's first loads come at
the loop, after the wait. Only the step says which is faster.

Prints, at TinyLlama's and Llama-3.2-1B's shapes (random weights, bf16, context 640, the step in a CUDA graph): the
bf16 step for each loop and trigger, the int8 step likewise, the int4 step as set; time, tokens/s, x the bf16 step
as set, and each variant's logits against its format's first (a relative difference: the loops' schedules differ).
The EDIT lines name a variant faster than the table's at both shapes.

Ran twice on 2026-11-28 (results/h100-2026-11-28-s13/sweeps/): l08e.txt with "prefetch" and "pipe", then
l08e-2.txt with "pipe+first" too ("pipe" with the first step's weights loaded before the wait, as "prefetch" does),
after l12m.py had set FUSED_INT8_PIPE_SCHEDULES per projection. "pipe+first" lost everywhere and was taken out of
the lessons after it: run the script at commit 3d51e4c to time it again.
"""

import math
import os
import sys
import time

T0 = time.time()
CPU = "--cpu" in sys.argv
if CPU:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402

import utils  # noqa: E402
from bench.common import LLAMA_SHAPES, random_llama  # noqa: E402
from lessons import l08_llama_model as L8  # noqa: E402
from lessons import l12_quantization as L  # noqa: E402

ENV = utils.mode.current()
LINES = []
BUDGET_S = 140


def say(line=""):
    print(line, flush=True)
    LINES.append(line)


def save():
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "sweep_l08e-2.txt"), "w") as f:
            f.write("\n".join(LINES) + "\n")


def gtime(fn):
    """GPU ms of fn() replayed from a CUDA graph, L2 cleared before each repetition; None on the CPU."""
    if CPU:
        fn()
        return None
    import triton.testing

    from bench.common import graphed

    return triton.testing.do_bench(graphed(fn), warmup=5, rep=30)


def first_line(e):
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0][:150] if text else ''}"


if CPU:
    DT, G = torch.float32, 32
    SHAPES = {
        "tiny": L8.ModelArgs(
            vocab_size=100, n_layers=2, dim=64, n_heads=4, n_kv_heads=2, ffn_dim=48, tie_embeddings=False
        )  # fmt: skip
    }
    MAX_LEN, CONTEXT = 24, 16
else:
    DT, G = torch.bfloat16, 128
    SHAPES = {name: L8.ModelArgs(**shape) for name, shape in LLAMA_SHAPES.items()}  # TinyLlama's, then Llama-3.2-1B's
    MAX_LEN, CONTEXT = 768, 640  # bench/lesson12.py: prompt 512 + 256 new, the mean context


def build_model(args):
    torch.manual_seed(0)  # the same random weights every run
    return random_llama(args, DT, ENV.device)


RESULTS = {}  # (shape, fmt, loop, trigger) -> ms


def timed(key, fn, base, ref, store):
    try:
        logits = fn().float().clone()
        rel = float((logits - ref).norm() / ref.norm()) if ref is not None else 0.0
        ms = gtime(fn)
        if ms is not None:
            store[key[1:]] = ms
        timing = "ran" if ms is None else f"{ms:7.4f} ms | {1e3 / ms:6.0f} tokens/s | x{base / ms if base else 1:5.2f}"
        say(f"{' '.join(map(str, key[1:]))} | {timing} | logits {rel:.1e}{'  <-- FAIL' if rel > 5e-2 else ''}")
        return logits
    except Exception as e:  # noqa: BLE001
        say(f"{' '.join(map(str, key[1:]))} | ERROR {first_line(e)}")
        return ref


def run_shape(name, args):
    say(
        f"== {name}: decode step, B=1, context {CONTEXT}, CUDA graph: format loop trigger | time | tokens/s | x bf16 as set"
    )
    model = build_model(args)
    cache = L8.new_cache(model, 1, MAX_LEN)
    cache.k.normal_()
    cache.v.normal_()
    token = torch.tensor([7], device=ENV.device)
    pos = torch.tensor([CONTEXT], dtype=torch.int32, device=ENV.device)
    store = {}
    saved = (L8.DECODE_GEMV_LOOP, L8.DECODE_FUSIONS, L.FUSED_INT8_LOOP, dict(L.QUANTIZED_PDL))
    base = None if CPU else gtime(lambda: L8.decode_step(model, token, pos, cache, L8.TRITON_DECODE))
    try:
        ref = None
        for loop in L8.DECODE_GEMV_LOOPS:
            for trigger in L8.PDL_TRIGGERS:
                L8.DECODE_GEMV_LOOP = loop
                L8.DECODE_FUSIONS = saved[1]._replace(pdl=trigger)
                ref = timed((name, "bf16", loop, trigger), lambda: L8.decode_step(model, token, pos, cache,
                            L8.TRITON_DECODE), base, ref, store)  # fmt: skip
        L8.DECODE_GEMV_LOOP, L8.DECODE_FUSIONS = saved[0], saved[1]
        int8, ref = L.quantize_model(model, 8), None
        for loop in L8.DECODE_GEMV_LOOPS:
            for trigger in L8.PDL_TRIGGERS:
                if time.time() - T0 > BUDGET_S:
                    break
                L.FUSED_INT8_LOOP = loop
                L.QUANTIZED_PDL[8] = trigger
                ref = timed((name, "int8", loop, trigger), lambda: L.quantized_decode_step(int8, token, pos, cache),
                            base, ref, store)  # fmt: skip
        L.FUSED_INT8_LOOP = saved[2]
        L.QUANTIZED_PDL.update(saved[3])
        del int8
        int4 = L.quantize_model(model, 4, G)
        timed((name, "int4", "as set", L.QUANTIZED_PDL[4]), lambda: L.quantized_decode_step(int4, token, pos, cache),
              base, None, store)  # fmt: skip
        del int4
    finally:
        L8.DECODE_GEMV_LOOP, L8.DECODE_FUSIONS, L.FUSED_INT8_LOOP = saved[:3]
        L.QUANTIZED_PDL.update(saved[3])
    for k, ms in store.items():
        RESULTS[(name, *k)] = ms
    if not CPU:
        torch.cuda.empty_cache()
    say(f"  ({time.time() - T0:.0f} s)")


def summary():
    say("== the choice per format: fastest at both shapes (geometric mean) against the table as set")
    table = {"bf16": (L8.DECODE_GEMV_LOOP, L8.DECODE_FUSIONS.pdl), "int8": (L.FUSED_INT8_LOOP, L.QUANTIZED_PDL[8])}
    names = {"bf16": ("DECODE_GEMV_LOOP", "DECODE_FUSIONS.pdl"), "int8": ("FUSED_INT8_LOOP", "QUANTIZED_PDL[8]")}
    shapes = {k[0] for k in RESULTS}
    for fmt, set_as in table.items():
        variants = {k[2:] for k in RESULTS if k[1] == fmt}
        full = [v for v in variants if all((s, fmt, *v) in RESULTS for s in shapes)]
        if not full:
            say(f"{fmt}: no timings")
            continue

        def gm(v, fmt=fmt):
            return math.exp(sum(math.log(RESULTS[(s, fmt, *v)]) for s in shapes) / len(shapes))

        best = min(full, key=gm)
        line = ", ".join(f"{s} {RESULTS[(s, fmt, *best)]:.4f} ms" for s in sorted(shapes))
        if set_as in full:
            say(f"{fmt}: as set {set_as} {gm(set_as):.4f} ms (geometric mean); best {best} {gm(best):.4f} ms ({line})")
        else:
            say(f"{fmt}: best {best} ({line}); the table's {set_as} not timed")
        if best != set_as:
            say(f"  -> EDIT: {names[fmt][0]} = {best[0]!r}; {names[fmt][1]} = {best[1]!r}")
    say(f"total {time.time() - T0:.0f} s")


say(f"lesson 08 sweep e (the decode step's GEMV loops) on {ENV.gpu_name if ENV.is_gpu else 'CPU (interpreter)'}, "
    f"torch {torch.__version__}, triton {__import__('triton').__version__}; DECODE_GEMV_LOOP {L8.DECODE_GEMV_LOOP!r}, "
    f"DECODE_FUSIONS.pdl {L8.DECODE_FUSIONS.pdl!r}, FUSED_INT8_LOOP {L.FUSED_INT8_LOOP!r}, QUANTIZED_PDL {L.QUANTIZED_PDL}")  # fmt: skip
for name, args in SHAPES.items():
    try:
        run_shape(name, args)
    except Exception as e:  # noqa: BLE001
        say(f"{name} stopped: {first_line(e)}")
    save()
summary()
save()
