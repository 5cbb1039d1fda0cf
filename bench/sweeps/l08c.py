"""Lesson 08 sweep c, 2026-11-23 (session 7): the decode step's GEMVs launched early (programmatic dependent launch,
issues 11 and 15). Run from the repo root: ``PYTHONPATH=$PWD python3 bench/sweeps/l08c.py`` on the GPU (< 150 s),
``--cpu`` under the interpreter (tiny shapes, no timings: a smoke test; the interpreter has no PDL).

Every time here is the GPU's: the call captured in a CUDA graph (bench.common.graphed), the replay timed by
triton.testing.do_bench (L2 cleared before each repetition), as bench/sweeps/l12c.py times it.

Part A, lesson 08's batch-1 step, TinyLlama-1.1B's shape (random bf16 weights, 22 layers, 6 launches a layer), at
640 and 4096 tokens of context: in order (DECODE_FUSIONS.pdl False), then each of PDL_TRIGGERS (where a GEMV launched
early lets the next kernel launch: "start", "after wait", "after loop"), without and with DECODE_FUSIONS.attention_pdl
(flash-decoding's two kernels launched early too). The check first: the step's logits and the cache rows it wrote,
each variant against in order, bit for bit, on 8 graph replays in a row (a variant that fails is not timed).
  -> edit: DECODE_FUSIONS's pdl and attention_pdl in solutions/08_llama_model.ipynb (``class DecodeFusions``'s cell).
Part B, lesson 12's quantized step (int4 g128 and int8, the same model quantized): QUANTIZED_PDL likewise, by format.
  -> edit: QUANTIZED_PDL in solutions/12_quantization.ipynb (next to QUANTIZED_ROPE_IN_QKV).
Earlier runs of this script (results/h100-2026-11-23-s7/sweeps/l08c-first.txt, l08c.txt) had no attention variants.
% of roof (bf16 only) = decode_bytes at that context (the weights once and the cache) / the copy bandwidth measured
here.
"""

import contextlib
import math
import os
import sys
import time

T0 = time.time()
CPU = "--cpu" in sys.argv
if CPU:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch

import utils
from lessons import l07_llm_layer as L7
from lessons import l08_llama_model as L8
from lessons import l12_quantization as L12

ENV = utils.mode.current()
LINES = []
BUDGET_S = 135


def say(line=""):
    print(line, flush=True)
    LINES.append(line)


def save():
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "sweep_l08c.txt"), "w") as f:
            f.write("\n".join(LINES) + "\n")


def late(limit=BUDGET_S):
    return time.time() - T0 > limit


def gtime(fn):
    """GPU ms of fn() replayed from a CUDA graph, L2 cleared before each repetition; None on the CPU."""
    if CPU:
        fn()
        return None
    import triton.testing

    from bench.common import graphed

    return triton.testing.do_bench(graphed(fn), warmup=5, rep=40)


def first_line(e):
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0][:150] if text else ''}"


@contextlib.contextmanager
def settings(pdl, attention=False, quantized=None):
    """DECODE_FUSIONS.pdl (or lesson 12's QUANTIZED_PDL) and .attention_pdl while a step runs and is captured;
    restored after."""
    fusions, qpdl = L8.DECODE_FUSIONS, L12.QUANTIZED_PDL
    L8.DECODE_FUSIONS = fusions._replace(pdl=pdl, attention_pdl=attention)
    L12.QUANTIZED_PDL = dict.fromkeys(qpdl, pdl) if quantized else qpdl
    try:
        yield
    finally:
        L8.DECODE_FUSIONS, L12.QUANTIZED_PDL = fusions, qpdl


if CPU:
    DT = torch.float32
    ARGS = L8.ModelArgs(vocab_size=100, n_layers=2, dim=64, n_heads=4, n_kv_heads=2, ffn_dim=48, tie_embeddings=False)
    CONTEXTS = ((16, 24),)
    G = 32
else:
    DT = torch.bfloat16
    ARGS = L8.ModelArgs(vocab_size=32000, n_layers=22, dim=2048, n_heads=32, n_kv_heads=4, ffn_dim=5632,
                        tie_embeddings=False)  # fmt: skip
    CONTEXTS = ((640, 768), (4096, 4352))  # (context, the cache's max_len)
    G = 128

say(f"lesson 08 sweep c (the decode step's GEMVs launched early: programmatic dependent launch) on "
    f"{ENV.gpu_name if ENV.is_gpu else 'CPU (interpreter)'}, torch {torch.__version__}, triton "
    f"{__import__('triton').__version__}, {ENV.sm_count} SMs, PDL available: {ENV.supports_pdl}")  # fmt: skip


def build_model():
    torch.manual_seed(0)  # bench/sweeps/l12b.py's and l12c.py's random weights
    layers = [L7.random_weights(ARGS.layer, DT, ENV.device) for _ in range(ARGS.n_layers)]
    embed = (0.1 * torch.randn(ARGS.vocab_size, ARGS.dim, device=ENV.device)).to(DT)
    norm = torch.ones(ARGS.dim, device=ENV.device, dtype=DT)
    head = (torch.randn(ARGS.vocab_size, ARGS.dim, device=ENV.device) / math.sqrt(ARGS.dim)).to(DT)
    return L8.Model(ARGS, embed, layers, norm, head)


def copy_gbs():
    if CPU:
        return None
    from bench.common import plain_copy_gbs

    return plain_copy_gbs()


def replays(step, cache, pos, n=8):
    """n steps in a row replayed from one CUDA graph (run directly on the CPU): the logits of each and the rows
    written, pos advancing."""
    saved = pos.clone()
    logits = []
    if CPU:
        run = step
    else:
        out = {}
        graph = L8.capture(lambda: out.__setitem__("logits", step()), (cache.k, cache.v))
        run = lambda: graph.replay() or out["logits"]  # noqa: E731
    for _ in range(n):
        logits.append(run().clone())
        pos += 1
    rows = (
        cache.k[:, :, saved.item() : saved.item() + n].clone(),
        cache.v[:, :, saved.item() : saved.item() + n].clone(),
    )
    pos.copy_(saved)
    return torch.stack(logits), rows


BEST = {}


def show(v):
    pdl, attention = v
    return f"pdl={pdl!r}" + (", attention too" if attention else "")


def part(label, model, step_for, quantized=False, bytes_per_token=None):
    gbs = COPY
    for context, max_len in CONTEXTS:
        if late():
            say(f"{label} context {context} | SKIPPED (time budget)")
            continue
        cache = L8.new_cache(model, 1, max_len)
        cache.k.normal_()
        cache.v.normal_()
        token = torch.tensor([7], device=ENV.device)
        pos = torch.tensor([context], dtype=torch.int32, device=ENV.device)
        step = step_for(model, token, pos, cache)
        seen = {}
        off = (False, False)
        variants = [off, *((t, a) for a in (False, True) for t in L8.PDL_TRIGGERS)]  # (GEMVs' pdl, attention_pdl)
        for v in variants:
            try:
                with settings(*v, quantized=quantized):
                    seen[v] = replays(step, cache, pos)
            except Exception as e:  # noqa: BLE001
                say(f"{label} context {context} {show(v)} | check ERROR {first_line(e)}")
        good = [off] if off in seen else []
        for v in variants[1:]:
            if v not in seen or off not in seen:
                continue
            (a, (ka, va)), (b, (kb, vb)) = seen[v], seen[off]
            same = torch.equal(a, b) and torch.equal(ka, kb) and torch.equal(va, vb)
            say(f"check: {label} context {context}: 8 replayed steps, {show(v)} vs in order: logits and cache rows "
                f"{'bit for bit the same' if same else 'DIFFER: max %.3g  <-- FAIL' % (a - b).abs().max().item()}")  # fmt: skip
            if same:
                good.append(v)
        base = None
        for v in good:
            name = show(v)
            if late():
                say(f"{label} context {context} {name} | SKIPPED (time budget)")
                continue
            try:
                with settings(*v, quantized=quantized):
                    ms = gtime(step)
            except Exception as e:  # noqa: BLE001
                say(f"{label} context {context} {name} | ERROR {first_line(e)}")
                continue
            if ms is None:
                say(f"{label} context {context} {name} | ran")
                continue
            base = base or ms
            nbytes = bytes_per_token(context) if bytes_per_token else None
            roof = f" | {nbytes / (ms * 1e-3) / 1e9 / gbs * 100:5.1f} % of roof" if nbytes and gbs else ""
            say(f"{label} context {context} {name} | {ms * 1e3:8.1f} us | {1e3 / ms:6.0f} tokens/s{roof} | "
                f"x{base / ms:5.3f} in order")  # fmt: skip
            BEST.setdefault((label, context), []).append((ms, name))


COPY = copy_gbs()
say(f"copy bandwidth: {COPY:.0f} GB/s" if COPY else "copy bandwidth: n/a (CPU)")
MODEL = build_model()
say("== A. lesson 08's batch-1 step (bf16, 6 launches a layer), CUDA graph")
part("bf16", MODEL, lambda m, t, p, c: (lambda: L8.decode_step(m, t, p, c, L8.TRITON_DECODE)),
     bytes_per_token=lambda ctx: L8.decode_bytes(ARGS, 1, ctx + 1))  # fmt: skip
say(f"  ({time.time() - T0:.0f} s)")
say("== B. lesson 12's quantized batch-1 step (QUANTIZED_PDL), CUDA graph")
for bits in (4, 8):
    if late():
        say(f"int{bits} | SKIPPED (time budget)")
        continue
    qm = L12.quantize_model(MODEL, bits, G)
    part(f"int{bits}" + (f" g{G}" if bits == 4 else ""), qm,
         lambda m, t, p, c: (lambda: L12.quantized_decode_step(m, t, p, c, L12.QUANTIZED_DECODE)),
         quantized=True)  # fmt: skip
    say(f"  ({time.time() - T0:.0f} s)")

say("== summary")
for (label, context), results in BEST.items():
    ms, name = min(results)
    off = dict((n, m) for m, n in results).get("pdl=False")
    say(
        f"{label} context {context}: fastest {name} {ms * 1e3:.1f} us" + (f" (x{off / ms:.3f} in order)" if off else "")
    )
say(
    "EDIT: DECODE_FUSIONS.pdl (bf16), QUANTIZED_PDL[bits]: the trigger fastest at both contexts (False where none"
    " beats in order); DECODE_FUSIONS.attention_pdl = True where 'attention too' wins for bf16 (it is shared)"
)
say(f"total {time.time() - T0:.0f} s")
save()
