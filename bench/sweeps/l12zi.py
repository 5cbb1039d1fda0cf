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

import torch  # noqa: E402

import utils  # noqa: E402
from bench.common import random_llama  # noqa: E402
from bench.sweeps.kit import Log, gtime  # noqa: E402
from lessons import l08_llama_model as L8  # noqa: E402
from lessons import l12_quantization as L12  # noqa: E402

say = Log("l12zi")
ENV = utils.mode.current()
ROUNDS = 1 if CPU else 2
BUDGET_S = int(os.environ.get("BUDGET_S", 150))
PIPE = [(16, 512, 2, 3), (8, 512, 2, 3), (16, 512, 2, 4), (16, 1024, 2, 3), (8, 1024, 2, 3), (16, 512, 4, 3)]
STREAM = [(16, 1024, 2, 2), (16, 512, 2, 3), (8, 512, 2, 3), (16, 512, 4, 3), (32, 512, 2, 3)]
if CPU:
    DT, G, MAX_LEN, CONTEXT = torch.float32, 32, 24, 16
    SHAPES = {"tiny": L8.ModelArgs(vocab_size=100, n_layers=2, dim=64, n_heads=4, n_kv_heads=2, ffn_dim=48,
                                   tie_embeddings=False)}  # fmt: skip
else:
    DT, G, MAX_LEN, CONTEXT = torch.bfloat16, 128, 768, 640  # make bench's decode rows: 512 + 256, the mean context
    SHAPES = {"Llama-3.2-1B": "Llama-3.2-1B", "TinyLlama-1.1B": "TinyLlama-1.1B"}


def kernel_table():
    kind = L12.FUSED_INT4_KERNEL
    return dict(kind) if isinstance(kind, dict) else {None: kind}


def variants(head, args):
    """(label, {name: value}): the head's kernel and row, every other row as set."""
    table = kernel_table()
    now = L12.fused_int4_kernel(*head)
    rows = {"pipe": L12.FUSED_PIPE_SCHEDULES, "stream": L12.FUSED_STREAM_SCHEDULES}
    out = []
    for kind, tiles in (("pipe", PIPE), ("stream", STREAM)):
        name = "FUSED_PIPE_SCHEDULES" if kind == "pipe" else "FUSED_STREAM_SCHEDULES"
        current = rows[kind].get(head, rows[kind][None])
        for t in tiles:
            s = L8.GemvSchedule(*t)
            if kind == now and s == current:
                continue  # the step as set
            out.append(
                (f'head "{kind}" {t}', {"FUSED_INT4_KERNEL": {**table, head: kind}, name: {**rows[kind], head: s}})
            )
    # the MMA dots at one shape each, where l12zh timed them faster alone (1B gate/up x1.07, TinyLlama's down x1.01):
    # this model's gate/up (N counts the gate rows) and down
    for shape in ((args.ffn_dim, args.dim), (args.dim, args.ffn_dim)):
        out.append((f'INT4_DOTS "mma" at {shape} only', {"INT4_DOTS": {shape: "mma", None: "pairs"}}))
    # the MMAs in two or four chains (int4_mma_ptx(4, chains)): one chain waits on each MMA before the next
    for chains in (2, 4):
        ptx = L12.int4_mma_ptx(4, chains)
        gate_up = {(args.ffn_dim, args.dim): "mma", None: "pairs"}
        out.append((f'INT4_DOTS "mma", {chains} chains', {"INT4_DOTS": "mma", "INT4_MMA_PTX": ptx}))
        out.append((f'"mma", {chains} chains, gate/up only', {"INT4_DOTS": gate_up, "INT4_MMA_PTX": ptx}))
    return out


def run_shape(label, shape):
    torch.manual_seed(0)
    model = random_llama(shape, DT, ENV.device)
    qmodel = L12.quantize_model(model, 4, group_size=G)
    del model
    head = (qmodel.args.vocab_size, qmodel.args.dim)
    cache = L8.new_cache(qmodel, 1, MAX_LEN)
    cache.k.normal_()
    cache.v.normal_()
    token = torch.tensor([7], device=ENV.device)
    pos = torch.tensor([CONTEXT], dtype=torch.int32, device=ENV.device)

    def step():
        return L12.quantized_decode_step(qmodel, token, pos, cache)

    kind = L12.fused_int4_kernel(*head)
    table = L12.FUSED_PIPE_SCHEDULES if kind == "pipe" else L12.FUSED_STREAM_SCHEDULES
    ref = step().float().clone()
    say(f'== {label}: the head {head} as set: "{kind}" {tuple(table.get(head, table[None]))}')
    for name_, switches in variants(head, qmodel.args):
        if time.time() - T0 > BUDGET_S:
            say(f"  (budget of {BUDGET_S} s spent: the rest not timed)")
            break
        was = {k: getattr(L12, k) for k in switches}

        def put(values):
            for k, v in values.items():
                setattr(L12, k, v)

        try:
            put(switches)
            got = step().float()
            rel = float((got - ref).norm() / ref.norm())
            if rel > 5e-2:
                say(f"  {name_:32s} | FAIL: logits {rel:.1e} from the step as set")
                continue
            times = []
            for _ in range(ROUNDS):  # the step as set, the variant, the step as set again
                put(was)
                before = gtime(step)
                put(switches)
                ms = gtime(step)
                put(was)
                times.append((before, ms, gtime(step)))
            if CPU:
                say(f"  {name_:32s} | ran; logits {rel:.1e}")
                continue
            ratios = [(b + a) / 2 / ms for b, ms, a in times]
            line = "; ".join(
                f"{ms:.4f} ms between {b:.4f} and {a:.4f} (x{r:.3f})" for (b, ms, a), r in zip(times, ratios)
            )
            say(f"  {name_:32s} | {line}; logits {rel:.1e}")
            if min(ratios) > 1.01 and "INT4_DOTS" in switches:
                chains = switches.get("INT4_MMA_PTX", L12.INT4_MMA_PTX).count("add.f32") // 4 + 1
                say(f"  -> EDIT: INT4_DOTS = {switches['INT4_DOTS']!r}; INT4_MMA_PTX = int4_mma_ptx(4, {chains})")
            elif min(ratios) > 1.01:
                table_name = [k for k in switches if k != "FUSED_INT4_KERNEL"][0]
                t = switches[table_name][head]
                say(f"  -> EDIT: FUSED_INT4_KERNEL[{head}] = \"{switches['FUSED_INT4_KERNEL'][head]}\"; "
                    f"{table_name}[{head}] = {t!r}")  # fmt: skip
        except Exception as e:  # noqa: BLE001
            first = str(e).strip().splitlines()[0][:150] if str(e).strip() else ""
            say(f"  {name_:32s} | ERROR {type(e).__name__}: {first}")
        finally:
            put(was)
    say(f"  ({time.time() - T0:.0f} s)")
    if not CPU:
        torch.cuda.empty_cache()


say(f"lesson 12 sweep zi on {ENV.gpu_name if ENV.is_gpu else 'CPU (interpreter)'}, torch {torch.__version__}, "
    f"triton {__import__('triton').__version__}")  # fmt: skip
for label, shape in SHAPES.items():
    run_shape(label, shape)
say(f"total {time.time() - T0:.0f} s")
