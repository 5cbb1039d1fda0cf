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

import torch  # noqa: E402

import utils  # noqa: E402
from bench.common import random_llama  # noqa: E402
from bench.sweeps.kit import Log, gtime  # noqa: E402
from lessons import l08_llama_model as L8  # noqa: E402
from lessons import l12_quantization as L12  # noqa: E402

say = Log("l12zg")
ENV = utils.mode.current()
ROUNDS = 1 if CPU else 2
if CPU:
    DT, G, MAX_LEN, CONTEXT = torch.float32, 32, 24, 16
    SHAPES = {"tiny": L8.ModelArgs(vocab_size=100, n_layers=2, dim=64, n_heads=4, n_kv_heads=2, ffn_dim=48,
                                   tie_embeddings=False)}  # fmt: skip
else:
    DT, G, MAX_LEN, CONTEXT = torch.bfloat16, 128, 768, 640  # make bench's decode rows: 512 + 256, the mean context
    SHAPES = {"Llama-3.2-1B": "Llama-3.2-1B", "TinyLlama-1.1B": "TinyLlama-1.1B"}


def variants():
    """(label, module, name, value): each variant is one module-level switch set to value."""
    out = [(f"QUANTIZED_PDL[4] = {t!r}", L12, "QUANTIZED_PDL", {**L12.QUANTIZED_PDL, 4: t})
           for t in (*L8.PDL_TRIGGERS, False) if t != L12.QUANTIZED_PDL[4]]  # fmt: skip
    out += [(f'attention "ticket", n_splits {n}', L8, "DECODE_FUSIONS",
             L8.DECODE_FUSIONS._replace(attention="ticket", n_splits=n)) for n in (None, 4, 8, 16)]  # fmt: skip
    out += [('attention "one-pass"', L8, "DECODE_FUSIONS", L8.DECODE_FUSIONS._replace(attention="one-pass"))]
    out += [(f'attention "split+combine", n_splits {n}', L8, "DECODE_FUSIONS",
             L8.DECODE_FUSIONS._replace(attention="split+combine", n_splits=n)) for n in (4, 8, 16)]  # fmt: skip
    out += [(f'INT4_DOTS = "{d}"', L12, "INT4_DOTS", d) for d in ("mma", "pairs") if d != L12.INT4_DOTS]
    out += [("attention_pdl False", L8, "DECODE_FUSIONS", L8.DECODE_FUSIONS._replace(attention_pdl=False))]
    tma = not L8.USE_TMA_DECODE_ATTENTION
    out += [(f"USE_TMA_DECODE_ATTENTION = {tma}", L8, "USE_TMA_DECODE_ATTENTION", tma)]
    return out


def run_shape(name, shape):
    torch.manual_seed(0)
    model = random_llama(shape, DT, ENV.device)
    qmodel = L12.quantize_model(model, 4, group_size=G)
    del model
    cache = L8.new_cache(qmodel, 1, MAX_LEN)
    cache.k.normal_()
    cache.v.normal_()
    token = torch.tensor([7], device=ENV.device)
    pos = torch.tensor([CONTEXT], dtype=torch.int32, device=ENV.device)

    def step():
        return L12.quantized_decode_step(qmodel, token, pos, cache)

    ref = step().float().clone()
    say(f"== {name}: the int4 step as set (FUSED_INT4_KERNEL at its shapes, QUANTIZED_PDL[4] "
        f"{L12.QUANTIZED_PDL[4]!r}, {L8.DECODE_FUSIONS})")  # fmt: skip
    for label, module, name, value in variants():
        was = getattr(module, name)
        try:
            setattr(module, name, value)
            got = step().float()
            rel = float((got - ref).norm() / ref.norm())
            if rel > 5e-2:
                say(f"  {label:44s} | FAIL: logits {rel:.1e} from the step as set")
                continue
            times = []
            for _ in range(ROUNDS):  # the step as set, the variant, the step as set again
                setattr(module, name, was)
                before = gtime(step)
                setattr(module, name, value)
                ms = gtime(step)
                setattr(module, name, was)
                times.append((before, ms, gtime(step)))
            if CPU:
                say(f"  {label:44s} | ran; logits {rel:.1e}")
            else:
                line = "; ".join(f"{ms:.4f} ms between {b:.4f} and {a:.4f} (x{(b + a) / 2 / ms:.3f})"
                                 for b, ms, a in times)  # fmt: skip
                say(f"  {label:44s} | {line}; logits {rel:.1e}")
        except Exception as e:  # noqa: BLE001
            first = str(e).strip().splitlines()[0][:150] if str(e).strip() else ""
            say(f"  {label:44s} | ERROR {type(e).__name__}: {first}")
        finally:
            setattr(module, name, was)
    say(f"  ({time.time() - T0:.0f} s)")
    if not CPU:
        torch.cuda.empty_cache()


say(f"lesson 12 sweep zg on {ENV.gpu_name if ENV.is_gpu else 'CPU (interpreter)'}, torch {torch.__version__}, "
    f"triton {__import__('triton').__version__}")  # fmt: skip
for name, shape in SHAPES.items():
    run_shape(name, shape)
say(f"total {time.time() - T0:.0f} s")
