"""Lesson 12 sweep l (issue 15): QUANTIZED_L2_AHEAD and QUANTIZED_PDL: the quantized batch-1 decode step with each
GEMV asking all its rows of W into L2 before its PDL wait, at each place the kernel before lets it launch.

Run from the repo root: ``PYTHONPATH=$PWD python3 bench/sweeps/l12l.py`` on the GPU (< 150 s),
``PYTHONPATH=$PWD python3 bench/sweeps/l12l.py --cpu`` under the interpreter (tiny model, no timings: a smoke test;
no prefetch there, so it only runs the variants).

Why: the int4 step moves about 0.55 GB a token at TinyLlama's shape in 0.68 ms, 0.8 TB/s, though each of its
kernels runs within a few microseconds of a copy of its own bytes (l12j.txt): 133 kernels a token, each of a few
MB, each waiting for the one before it. Only x depends on the kernel before; W does not. Launched early (PDL), a
kernel's programs may ask their rows of W into L2 (lesson 10's bulk prefetch, one instruction a run of rows,
holding no register) before they wait, so that the trip from memory overlaps the kernel before and its tail. How
far ahead that reaches depends on when the kernel before lets the next one launch: QUANTIZED_PDL ("start", "after
wait", "after loop": l08c.py chose "after loop" without the prefetch). Each variant's logits are compared bit for
bit with the step without it (a prefetch changes no result).

Prints: for TinyLlama's and Llama-3.2-1B's shapes (random weights, bf16, groups of 128, context 640), the bf16 step
(lesson 08's), then int4 (FUSED_INT4_KERNEL as set) and int8 at each trigger with and without the prefetch; the
time, tokens/s and x bf16. The EDIT lines name the fastest per format when it beats the table as set by 1 % at both
shapes.

Ran once (H100, 2026-11-28, results/h100-2026-11-28-s13/sweeps/l12l.txt) at commit 7f083e3: no gain anywhere (the
prefetch 0-14 % slower at every trigger, both formats, both shapes), so the switch and the kernels' L2_AHEAD were
taken out of lesson 12 after it; check out that commit to run it again.
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
from lessons import l07_llm_layer as L7  # noqa: E402
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
        with open(os.path.join(out, "sweep_l12l.txt"), "w") as f:
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
    from bench.common import LLAMA_SHAPES

    DT, G = torch.bfloat16, 128
    SHAPES = {
        "TinyLlama-1.1B": L8.ModelArgs(
            vocab_size=32000, n_layers=22, dim=2048, n_heads=32, n_kv_heads=4, ffn_dim=5632, tie_embeddings=False
        ),  # fmt: skip
        "Llama-3.2-1B": L8.ModelArgs(**LLAMA_SHAPES["Llama-3.2-1B"]),
    }
    MAX_LEN, CONTEXT = 768, 640  # bench/lesson12.py: prompt 512 + 256 new, the mean context


def build_model(args):
    torch.manual_seed(0)
    layers = [L7.random_weights(args.layer, DT, ENV.device) for _ in range(args.n_layers)]
    embed = (0.1 * torch.randn(args.vocab_size, args.dim, device=ENV.device)).to(DT)
    norm = torch.ones(args.dim, device=ENV.device, dtype=DT)
    head = embed if args.tie_embeddings else (torch.randn(args.vocab_size, args.dim, device=ENV.device) /
                                              math.sqrt(args.dim)).to(DT)  # fmt: skip
    return L8.Model(args, embed, layers, norm, head)


RESULTS = {}  # (shape, bits, trigger, ahead) -> ms


def run_shape(name, args):
    say(f"== {name}: decode step, B=1, context {CONTEXT}, CUDA graph: variant | time | tokens/s | x bf16 | logits")
    model = build_model(args)
    cache = L8.new_cache(model, 1, MAX_LEN)
    cache.k.normal_()
    cache.v.normal_()
    token = torch.tensor([7], device=ENV.device)
    pos = torch.tensor([CONTEXT], dtype=torch.int32, device=ENV.device)  # the same row rewritten every time
    bf16 = gtime(lambda: L8.decode_step(model, token, pos, cache, L8.TRITON_DECODE))
    say(f"bf16 (lesson 08) | {'ran' if bf16 is None else f'{bf16:7.4f} ms | {1e3 / bf16:6.0f} tokens/s'}")
    saved_pdl, saved_ahead = dict(L.QUANTIZED_PDL), dict(L.QUANTIZED_L2_AHEAD)
    for bits in (4, 8):
        if time.time() - T0 > BUDGET_S:
            say(f"int{bits}: SKIPPED (time budget)")
            continue
        qmodel = L.quantize_model(model, bits, G) if bits == 4 else L.quantize_model(model, 8)
        plain = None  # the logits without the prefetch, at the table's trigger
        try:
            for trigger in L8.PDL_TRIGGERS:
                for ahead in (False, True):
                    if time.time() - T0 > BUDGET_S:
                        break
                    key = f"int{bits} pdl={trigger!r} L2_AHEAD={ahead}"
                    try:
                        L.QUANTIZED_PDL[bits] = trigger
                        L.QUANTIZED_L2_AHEAD[bits] = ahead
                        logits = L.quantized_decode_step(qmodel, token, pos, cache).clone()
                        if plain is None:
                            plain = logits
                        same = torch.equal(logits, plain)
                        ms = gtime(lambda: L.quantized_decode_step(qmodel, token, pos, cache))
                        if ms is not None:
                            RESULTS[(name, bits, trigger, ahead)] = ms
                        timing = "ran" if ms is None else f"{ms:7.4f} ms | {1e3 / ms:6.0f} tokens/s | x{bf16 / ms:5.2f}"
                        say(f"{key} | {timing} | {'the same bits' if same else 'DIFFER  <-- FAIL'}")
                    except Exception as e:  # noqa: BLE001
                        say(f"{key} | ERROR {first_line(e)}")
        finally:
            L.QUANTIZED_PDL.update(saved_pdl)
            L.QUANTIZED_L2_AHEAD.update(saved_ahead)
        del qmodel
        if not CPU:
            torch.cuda.empty_cache()
    say(f"  ({time.time() - T0:.0f} s)")


def summary():
    say("== the choice per format: the variant fastest at both shapes (geometric mean), against the table as set")
    for bits in (4, 8):
        table = (L.QUANTIZED_PDL.get(bits), L.QUANTIZED_L2_AHEAD.get(bits, False))
        variants = {(t, a) for (_, b, t, a) in RESULTS if b == bits}
        shapes = {s for (s, b, _, _) in RESULTS if b == bits}
        full = [v for v in variants if all((s, bits, *v) in RESULTS for s in shapes)]
        if not full or table not in full:
            say(f"int{bits}: not enough timings")
            continue

        def gm(v):
            return math.exp(sum(math.log(RESULTS[(s, bits, *v)]) for s in shapes) / len(shapes))

        best = min(full, key=gm)
        gain = gm(table) / gm(best)
        say(f"int{bits}: table {table} -> best {best}: x{gain:.3f}")
        if (
            best != table
            and gain > 1.01
            and all(RESULTS[(s, bits, *best)] < RESULTS[(s, bits, *table)] for s in shapes)
        ):
            say(f"  -> EDIT: QUANTIZED_PDL[{bits}] = {best[0]!r}; QUANTIZED_L2_AHEAD[{bits}] = {best[1]}")
        else:
            say("  -> keep the table")
    say(f"total {time.time() - T0:.0f} s")


say(f"lesson 12 sweep l (the decode step's GEMVs asking their rows into L2 before the wait) on "
    f"{ENV.gpu_name if ENV.is_gpu else 'CPU (interpreter)'}, torch {torch.__version__}, triton "
    f"{__import__('triton').__version__}; FUSED_INT4_KERNEL {L.FUSED_INT4_KERNEL!r}, QUANTIZED_PDL {L.QUANTIZED_PDL}, "
    f"QUANTIZED_L2_AHEAD {L.QUANTIZED_L2_AHEAD}")  # fmt: skip
for name, args in SHAPES.items():
    try:
        run_shape(name, args)
    except Exception as e:  # noqa: BLE001
        say(f"{name} stopped: {first_line(e)}")
    save()
summary()
save()
