"""Lesson 12 sweep zi, issue 15: the LM head's row in the 1B int4 decode steps, and the MMA dots at one shape,
paired in the step.

Run from the repo root: ``PYTHONPATH=$PWD python3 bench/sweeps/l12zi.py`` on the GPU (< 150 s; BUDGET_S in the
environment stops it earlier); ``--cpu`` runs a tiny model's steps under the interpreter (nothing timed: a smoke test
of every variant and its logits check).

Why: the head is the largest kernel of a 1B int4 step (l12ze, results/h100-2026-12-07-s43/sweeps/l12ze.txt: 108 us
of 0.664 ms at Llama-3.2-1B's shape). Timed alone (l12zh, results/h100-2026-12-07-s45/sweeps/l12zh.txt), the fused
head at its row (the "stream" kernel, 16 rows a program, BLOCK_K 1024) took 79.1 us, while the M = 1 GEMV at the
same 128256 x 2048 took 69.2 us at FAST_SCHEDULES's row ("pipe", 16 rows, BLOCK_K 512, 2 warps, 3 stages), a tile
no step sweep has tried for the fused kernel (l08f's tiles have BLOCK_K 1024 or 2048). TinyLlama's head (32000 x
2048) takes FUSED_PIPE_SCHEDULES's default row (4 rows, 4 warps), never chosen for it. Compiled offline for sm_90
(triton 3.7.1, the packed dots, NORM): "pipe" at (16, 512, 2, 3) takes 128 registers and 16-byte cp.async, no spill;
(32, 512, 2, 3) and (16, 1024, 2, 2) spill 4 bytes in "pipe"; "stream" at (8, 1024, 2, 3) spills 24, at (16, 512,
1, 3) 12: those are left out.

Each variant sets the head's kernel (FUSED_INT4_KERNEL) and its row (FUSED_PIPE_SCHEDULES or
FUSED_STREAM_SCHEDULES) and nothing else; the step is replayed from a CUDA graph (L2 cleared before each repetition)
between two timings of the step as set, in two rounds, as in l12zg; logits against the step as set (past 5e-2: a
FAIL). Then INT4_DOTS = "mma" at one shape each (a dict by shape, session 45), where l12zh
(results/h100-2026-12-07-s45/sweeps/l12zh.txt) timed the MMA dots faster than the packed ones alone: Llama-3.2-1B's
gate/up (x1.07) and TinyLlama's down (x1.01); in the whole step, everywhere, they had been 14-18 % slower. Then the
MMA dots with their eight MMAs a call in two or four chains (int4_mma_ptx(4, chains): INT4_MMA_PTX makes each MMA
wait for the one before), everywhere and at gate/up only. EDIT lines
for a variant faster in both rounds by more than 1 %: make bench's paired rows decide.
"""

import os
import sys
import time

T0 = time.time()
CPU = "--cpu" in sys.argv
if CPU:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import utils  # noqa: E402
from bench.sweeps.kit import Log, on_gpu, paired_in_step, quantized_decode_steps  # noqa: E402
from lessons import l08_llama_model as L8  # noqa: E402
from lessons import l12_quantization as L12  # noqa: E402

say = Log("l12zi")
ROUNDS = 2 if on_gpu() else 1
BUDGET_S = int(os.environ.get("BUDGET_S", 150))
PIPE = [(16, 512, 2, 3), (8, 512, 2, 3), (16, 512, 2, 4), (16, 1024, 2, 3), (8, 1024, 2, 3), (16, 512, 4, 3)]
STREAM = [(16, 1024, 2, 2), (16, 512, 2, 3), (8, 512, 2, 3), (16, 512, 4, 3), (32, 512, 2, 3)]


def variants(head, args):
    """(label, {(L12, name): value}, the EDIT line if it wins): the head's kernel and row, every other row as set;
    then the MMA dots at one shape, and in chains."""
    kinds = L12.FUSED_INT4_KERNEL
    kinds = dict(kinds) if isinstance(kinds, dict) else {None: kinds}
    now = L12.fused_int4_kernel(*head)
    out = []
    for kind, tiles in (("pipe", PIPE), ("stream", STREAM)):
        name = "FUSED_PIPE_SCHEDULES" if kind == "pipe" else "FUSED_STREAM_SCHEDULES"
        rows = getattr(L12, name)
        for t in tiles:
            s = L8.GemvSchedule(*t)
            if kind == now and s == rows.get(head, rows[None]):
                continue  # the step as set
            switches = {(L12, "FUSED_INT4_KERNEL"): {**kinds, head: kind}, (L12, name): {**rows, head: s}}
            out.append(
                (f'head "{kind}" {t}', switches, f'FUSED_INT4_KERNEL[{head}] = "{kind}"; {name}[{head}] = {s!r}')
            )
    # the MMA dots at one shape each, where l12zh timed them faster alone (1B gate/up x1.07, TinyLlama's down x1.01):
    # this model's gate/up (N counts the gate rows) and down
    for shape in ((args.ffn_dim, args.dim), (args.dim, args.ffn_dim)):
        dots = {shape: "mma", None: "pairs"}
        out.append((f'INT4_DOTS "mma" at {shape} only', {(L12, "INT4_DOTS"): dots}, f"INT4_DOTS = {dots!r}"))
    # the MMAs in two or four chains (int4_mma_ptx(4, chains)): one chain waits on each MMA before the next
    for chains in (2, 4):
        ptx = {(L12, "INT4_MMA_PTX"): L12.int4_mma_ptx(4, chains)}
        gate_up = {(args.ffn_dim, args.dim): "mma", None: "pairs"}
        edit = f"INT4_MMA_PTX = int4_mma_ptx(4, {chains}); INT4_DOTS = "
        out.append((f'INT4_DOTS "mma", {chains} chains', {(L12, "INT4_DOTS"): "mma", **ptx}, edit + '"mma"'))
        out.append(
            (f'"mma", {chains} chains, gate/up only', {(L12, "INT4_DOTS"): gate_up, **ptx}, edit + repr(gate_up))
        )
    return out


say(f"lesson 12 sweep zi on {utils.mode.current().gpu_name if on_gpu() else 'CPU (interpreter)'}, "
    f"torch {__import__('torch').__version__}, triton {__import__('triton').__version__}")  # fmt: skip
for label, model, step in quantized_decode_steps():
    head = (model.args.vocab_size, model.args.dim)
    kind = L12.fused_int4_kernel(*head)
    table = L12.FUSED_PIPE_SCHEDULES if kind == "pipe" else L12.FUSED_STREAM_SCHEDULES
    ref = step().float().clone()
    say(f'== {label}: the head {head} as set: "{kind}" {tuple(table.get(head, table[None]))}')
    for name, switches, edit in variants(head, model.args):
        if time.time() - T0 > BUDGET_S:
            say(f"  (budget of {BUDGET_S} s spent: the rest not timed)")
            break
        ratios = paired_in_step(say, name, step, ref, switches, ROUNDS)
        if ratios and min(ratios) > 1.01:
            say(f"  -> EDIT: {edit}")
    say(f"  ({time.time() - T0:.0f} s)")
say(f"total {time.time() - T0:.0f} s")
