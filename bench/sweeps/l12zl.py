"""Lesson 12 sweep zl, issue 15: the decode kernels ask L2 for their weights before they wait (DECODE_L2_AHEAD).

Ran once (session 48, an H100, triton 3.7.1: results/h100-2026-12-07-s48/sweeps/l12zl-triton3.7.1.txt): slower at
every trigger, so DECODE_L2_AHEAD and the kernels' L2_AHEAD came out of the lesson; the script runs at commit
9ca2731.

Run from the repo root: ``PYTHONPATH=$PWD python3 bench/sweeps/l12zl.py`` on the GPU (< 200 s; ``--big`` adds
Llama-3-8B's int4 step, about 90 s more); ``--cpu`` runs a tiny model's steps under the interpreter (nothing timed,
and the interpreter runs no PTX: a smoke test of the script). Prints EDIT lines for DECODE_L2_AHEAD and
QUANTIZED_PDL where a variant wins in both rounds at every shape.

Why: l12ze (results/h100-2026-12-07-s43/sweeps/l12ze.txt) found the int4 step's kernels at the 1B shapes each near a
copy of their own bytes launched alone, the step at about a third of a copy of the model's bytes: the cost is each
kernel's start (its first loads come only after griddepcontrol.wait, about an HBM round trip after the kernel before
ends) rather than its loop. The weights do not depend on the kernel before, so a kernel launched early (PDL) can
ask for them first: with DECODE_L2_AHEAD each program of the int4 stream / pipe and the int8 decode kernels issues
one prefetch.global.L2 for every 128-byte line of its rows of W (and their scales and zero points) before its wait,
while the kernel before still runs, and its loads after the wait find them in L2. The earlier a kernel is let launch,
the longer that window, so each PDL trigger is timed again with it (l08e chose "after loop" without it).

A re-test: l12l (results/h100-2026-11-28-s13/sweeps/l12l.txt, at commit 7f083e3) asked L2 for the rows with lesson
10's bulk prefetch, in the groups and int8 kernels of that day, and lost 0-14 % at every trigger (its reading: the
prefetches compete with the running kernel's loads). Since then the 1B layers run the stream kernel with the packed
dots, their first step's words already loaded before the wait, and the step is 0.55 ms, not 0.71: this asks again,
with one line prefetch a 128-byte line (no bulk copies), and at the new kernels.

Each variant is timed in the whole step replayed from a CUDA graph (L2 cleared before each repetition), between two
timings of the step as set, two rounds (kit.paired_in_step); its logits must be the step's as set bit for bit (the
prefetch changes when bytes arrive, not the sums: a difference is reported as a FAIL).
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
from bench.sweeps.kit import Log, on_gpu, paired_in_step, quantized_decode_steps  # noqa: E402
from lessons import l08_llama_model as L8  # noqa: E402
from lessons import l12_quantization as L12  # noqa: E402

say = Log(f"l12zl-triton{triton.__version__}")
ROUNDS = 2 if on_gpu() else 1


def variants(bits):
    """(label, {(module, name): value}): DECODE_L2_AHEAD on at each PDL trigger for this format, and each trigger
    without it (the triggers were last chosen before the packed dots and the 1B rows)."""
    out = []
    for trigger in L8.PDL_TRIGGERS:
        pdl = {(L12, "QUANTIZED_PDL"): {**L12.QUANTIZED_PDL, bits: trigger}}
        out.append((f"L2 ahead, QUANTIZED_PDL[{bits}] = {trigger!r}", {**pdl, (L12, "DECODE_L2_AHEAD"): True}))
        if trigger != L12.QUANTIZED_PDL[bits]:
            out.append((f"QUANTIZED_PDL[{bits}] = {trigger!r}", pdl))
    return out


say(f"lesson 12 sweep zl on {utils.mode.current().gpu_name if on_gpu() else 'CPU (interpreter)'}, "
    f"torch {torch.__version__}, triton {triton.__version__}; as set: DECODE_L2_AHEAD {L12.DECODE_L2_AHEAD}, "
    f"QUANTIZED_PDL {L12.QUANTIZED_PDL}")  # fmt: skip
wins = {}  # (bits, label) -> [the lowest ratio over rounds, at each shape]
big = "--big" in sys.argv and on_gpu()
for bits in (4, 8):
    names = ["Llama-3.2-1B", "TinyLlama-1.1B"]
    if big and bits == 4:
        from bench.lesson12 import LLAMA3_8B

        names.append(("Llama-3-8B", LLAMA3_8B))
    for name, _, step in quantized_decode_steps(bits, names):
        ref = step().float().clone()
        say(f"== {name}, int{bits}: the step as set")
        for label, switches in variants(bits):  # neither switch may change a sum: the step's bits, exactly
            ratios = paired_in_step(say, label, step, ref, switches, ROUNDS, exact=True)
            if ratios is None or ratios:
                wins.setdefault((bits, label), []).append(min(ratios) if ratios else 0.0)
        say(f"  ({time.time() - T0:.0f} s)")
if on_gpu():
    say("== a variant that won every shape in both rounds (the lowest of its ratios at each shape):")
    for (bits, label), ratios in wins.items():
        mark = "WIN" if all(r > 1.0 for r in ratios) else "   "
        say(f"  {mark} int{bits} {label:48s} | " + ", ".join(f"x{r:.3f}" for r in ratios))
    for bits in (4, 8):
        best = max(((min(r), label) for (b, label), r in wins.items() if b == bits and all(x > 1 for x in r)),
                   default=None)  # fmt: skip
        if best is not None:
            say(f"EDIT lessons int{bits}: {best[1]} (the lowest ratio over shapes x{best[0]:.3f})")
say(f"total {time.time() - T0:.0f} s")
