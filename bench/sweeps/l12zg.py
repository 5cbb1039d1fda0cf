"""Lesson 12 sweep zg, issue 15: the 1B int4 decode steps' levers beside the GEMV tiles (l08f.py sweeps those).

Run from the repo root: ``PYTHONPATH=$PWD python3 bench/sweeps/l12zg.py`` on the GPU (< 150 s); ``--cpu`` runs a tiny
model's steps under the interpreter (nothing timed: a smoke test of every variant and its logits check).

Why: `l12ze` (results/h100-2026-12-07-s43/sweeps/l12ze.txt) put attention and its combine at about 6 us a layer of the
int4 step at both 1B shapes (the bytes they read: 1.3 MB), 15-20 % of the step, and the early launches' trigger was
last chosen with the fp32 dots and the bf16 step's tiles (results/h100-2026-11-28-s13/sweeps/l08e.txt). Each variant
below changes one switch of the int4 step; the step is replayed from a CUDA graph (L2 cleared before each
repetition) in rounds, the step as set timed before and after each variant, so that a drift of the machine shows as
the two as-set timings apart. Variants:
  - QUANTIZED_PDL[4]: each of lesson 08's PDL_TRIGGERS, and False (no early launch);
  - DECODE_FUSIONS.attention "ticket" (one launch: the last split of a head combines) at n_splits None, 4, 8, 16,
    launched early as the step's attention_pdl says (session 44: the ticket kernel takes PDL too; session 6's
    l08b timed it launched in order, 3-20 % slower than two launches), and "one-pass" (one split a kv head);
  - "split+combine" at n_splits 4, 8, 16 (None: decode_split's);
  - INT4_DOTS flipped (session 44: the decode kernels' int4 dots on the tensor cores, "mma", or the packed bf16
    pairs);
  - DECODE_FUSIONS.attention_pdl False;
  - USE_TMA_DECODE_ATTENTION flipped.
Every variant's logits against the step as set (the same math: a change past 5e-2 is a FAIL, not a timing).
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

say = Log("l12zg")
ROUNDS = 2 if on_gpu() else 1


def variants():
    """(label, {(module, name): value}): each variant is one module-level switch set to value."""
    out = [(f"QUANTIZED_PDL[4] = {t!r}", {(L12, "QUANTIZED_PDL"): {**L12.QUANTIZED_PDL, 4: t}})
           for t in (*L8.PDL_TRIGGERS, False) if t != L12.QUANTIZED_PDL[4]]  # fmt: skip
    fusions = lambda **kw: {(L8, "DECODE_FUSIONS"): L8.DECODE_FUSIONS._replace(**kw)}  # noqa: E731
    out += [(f'attention "ticket", n_splits {n}', fusions(attention="ticket", n_splits=n)) for n in (None, 4, 8, 16)]
    out += [('attention "one-pass"', fusions(attention="one-pass"))]
    out += [(f'attention "split+combine", n_splits {n}', fusions(attention="split+combine", n_splits=n))
            for n in (4, 8, 16)]  # fmt: skip
    out += [(f'INT4_DOTS = "{d}"', {(L12, "INT4_DOTS"): d}) for d in ("mma", "pairs") if d != L12.INT4_DOTS]
    out += [("attention_pdl False", fusions(attention_pdl=False))]
    tma = not L8.USE_TMA_DECODE_ATTENTION
    out += [(f"USE_TMA_DECODE_ATTENTION = {tma}", {(L8, "USE_TMA_DECODE_ATTENTION"): tma})]
    return out


say(f"lesson 12 sweep zg on {utils.mode.current().gpu_name if on_gpu() else 'CPU (interpreter)'}, "
    f"torch {__import__('torch').__version__}, triton {__import__('triton').__version__}")  # fmt: skip
for name, _, step in quantized_decode_steps():
    ref = step().float().clone()
    say(f"== {name}: the int4 step as set (FUSED_INT4_KERNEL at its shapes, QUANTIZED_PDL[4] "
        f"{L12.QUANTIZED_PDL[4]!r}, {L8.DECODE_FUSIONS})")  # fmt: skip
    for label, switches in variants():
        paired_in_step(say, label, step, ref, switches, ROUNDS)
    say(f"  ({time.time() - T0:.0f} s)")
say(f"total {time.time() - T0:.0f} s")
