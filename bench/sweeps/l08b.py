"""Lesson 08 sweep b, 2026-11-23: fewer launches a layer in the decode step (issue 11; branch wt-l08d).

Run from the repo root (branch wt-l08d merged): ``PYTHONPATH=$PWD python3 bench/sweeps/l08b.py`` on the GPU (< 150 s),
``PYTHONPATH=$PWD python3 bench/sweeps/l08b.py --cpu`` under the interpreter (tiny shapes, no timings, < 60 s).

Every time here is the GPU's: the call captured in a CUDA graph (bench.common.graphed), the replay timed by
triton.testing.do_bench, which clears L2 before each repetition, as bench/sweeps/l08.py times the step. ``copy`` = a
torch copy of the same number of bytes (read + write = the step's decode_bytes, as bench/lesson08.py counts them),
in a graph, timed the same way; ``% copy`` = copy ms / candidate ms; ``x today`` = today's ms / candidate ms. Every
candidate is compared with a reference first (FAIL: the error; a FAIL is never chosen). One line a candidate, printed
as it finishes. Order: part A (the step, the figure that matters), then B (attention alone, past 110 s skipped),
then C (lesson 12's int4 step, past 125 s skipped); the summary ("== best", with the EDIT line) always prints.

Part A, the decode step (lessons.l08_llama_model.decode_step, TRITON_DECODE), TinyLlama-1.1B's shape with random
weights (22 layers, hidden 2048, 32 query heads sharing 4, D = 64, MLP 5632, vocabulary 32000, untied head), bf16,
B = 1, context 640 (cache max_len 768, bench/lesson08.py's) and 4096 (max_len 4224). Candidate = DECODE_FUSIONS:
rope_in_qkv (RoPE and the cache write in the qkv GEMV's epilogue, decode_qkv_rope), attention = "split+combine"
(two launches, today's), "ticket" (one launch, the last split combines; n_splits None = decode_split's, or the
number printed), "one-pass" (one split a (sequence, kv head), normalised in place). "today" = (False,
"split+combine"). Each candidate's logits against today's (relative difference, same argmax) and its new cache row
against today's (max difference), and today's logits against REF_DECODE (the PyTorch references).
  -> edit: DECODE_FUSIONS = DecodeFusions(...) in solutions/08_llama_model.ipynb (the export cell with
     ``def decode_qkv_rope_kernel``), then ``python -m utils.notebooks``: the summary's EDIT line (the candidate
     with the best geometric mean of "x today" over the two contexts, among those that passed).
Part B, decode attention alone (decode_attention_fused with variant=...), 8192 cached tokens, B=1 H=32 KV=4 D=64 and
B=4 H=32 KV=8 D=128, against today's decode_attention (split+combine), GB/s = decode_attention_bytes / time.
Informative: if "ticket" loses here by much but wins in part A, the step's short context is what it wins on.
Part C, lesson 12's int4 g128 step (lessons.l12_quantization.quantized_decode_step, QUANTIZED_DECODE, as
bench/sweeps/l12b.py builds it) with today's attention and with each one-launch attention (lesson 12's step takes
lesson 08's decode attention through DECODE_FUSIONS; its qkv GEMV is its own, so rope_in_qkv does not apply).
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
from lessons import l08_llama_model as L  # noqa: E402

ENV = utils.mode.current()
LINES = []
BUDGET_S = 135
DF = L.DecodeFusions
TODAY = DF(rope_in_qkv=False, attention="split+combine")
CANDIDATES = [
    TODAY,
    DF(True, "split+combine"),
    DF(False, "ticket"),
    DF(False, "one-pass"),
    DF(True, "ticket"),
    DF(True, "one-pass"),
    DF(True, "ticket", 4),
    DF(True, "ticket", 8 if not CPU else 2),
]


def say(line=""):
    print(line, flush=True)
    LINES.append(line)


def save():
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "sweep_l08b.txt"), "w") as f:
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

    replay = graphed(fn)
    return triton.testing.do_bench(replay, warmup=5, rep=30)


def copy_fn(nbytes):
    src = torch.empty(max(nbytes // 4, 1), dtype=torch.int16, device=ENV.device)  # read nbytes / 2, write as much
    dst = torch.empty_like(src)
    return lambda: dst.copy_(src)


def fmt(ms):
    return "    n/a   " if ms is None else f"{ms:8.4f} ms"


def first_line(e):
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0][:150] if text else ''}"


def label(f):
    n = "" if f.n_splits is None else f", n_splits={f.n_splits}"
    return f"rope_in_qkv={f.rope_in_qkv!s:5} attention={f.attention}{n}" + (" (today)" if f == TODAY else "")


def edit(f):
    n = "" if f.n_splits is None else f", n_splits={f.n_splits}"
    return f"DECODE_FUSIONS = DecodeFusions(rope_in_qkv={f.rope_in_qkv}, attention={f.attention!r}{n})"


if CPU:
    DT = torch.float32
    ARGS = L.ModelArgs(vocab_size=100, n_layers=2, dim=64, n_heads=4, n_kv_heads=2, ffn_dim=48, tie_embeddings=False)
    CONTEXTS = [(16, 24), (37, 40)]  # (context, max_len)
    ATT_SHAPES = [(1, 4, 2, 16, 40), (2, 4, 1, 32, 70)]
    G = 32
else:
    DT = torch.bfloat16
    ARGS = L.ModelArgs(vocab_size=32000, n_layers=22, dim=2048, n_heads=32, n_kv_heads=4, ffn_dim=5632,
                       tie_embeddings=False)  # fmt: skip
    CONTEXTS = [(640, 768), (4096, 4224)]
    ATT_SHAPES = [(1, 32, 4, 64, 8192), (4, 32, 8, 128, 8192)]
    G = 128


def build_model():
    torch.manual_seed(0)  # the same random weights every run, as bench/sweeps/l12b.py builds them
    C_, V_ = ARGS.dim, ARGS.vocab_size
    layers = [L7.random_weights(ARGS.layer, DT, ENV.device) for _ in range(ARGS.n_layers)]
    embed = (0.1 * torch.randn(V_, C_, device=ENV.device)).to(DT)
    norm = torch.ones(C_, device=ENV.device, dtype=DT)
    head = (torch.randn(V_, C_, device=ENV.device) / math.sqrt(C_)).to(DT)
    return L.Model(ARGS, embed, layers, norm, head)


def rel(a, b):
    return float((a.float() - b.float()).norm() / b.float().norm())


# ---------------------------------------------------------------------------------------------------------------
say(f"lesson 08 sweep b (decode fusions) on {ENV.gpu_name if ENV.is_gpu else 'CPU (interpreter)'}, torch "
    f"{torch.__version__}, triton {__import__('triton').__version__}, {ENV.sm_count} SMs")  # fmt: skip
SAVED = L.DECODE_FUSIONS
say(f"the table now: {edit(SAVED)}")
STEP = {}  # context -> {fusions: ms}
model = cache = None
try:
    model = build_model()
except Exception as e:  # noqa: BLE001
    say(f"model | ERROR {first_line(e)}")


def part_a():
    say("== A. decode step, B=1, CUDA graph: context | candidate | time | % copy | x today | tokens/s | checks")
    for context, max_len in CONTEXTS:
        if late(100):
            say(f"context {context}: SKIPPED (time budget)")
            continue
        cache = L.new_cache(model, 1, max_len)
        cache.k.normal_()
        cache.v.normal_()
        k0, v0 = cache.k.clone(), cache.v.clone()
        token = torch.tensor([7], device=ENV.device)
        pos = torch.tensor([context], dtype=torch.int32, device=ENV.device)
        nbytes = L.decode_bytes(ARGS, 1, context + 1)
        copy = gtime(copy_fn(nbytes))
        say(f"context {context} (max_len {max_len}): copy of decode_bytes = {nbytes / 1e6:.1f} MB | {fmt(copy)}")
        STEP[context] = {}
        base = base_row = None
        try:  # the PyTorch references, the same cache: today's logits against them
            ref = L.decode_step(model, token, pos, cache, L.REF_DECODE)
        except Exception as e:  # noqa: BLE001
            ref = None
            say(f"  REF_DECODE | ERROR {first_line(e)}")
        for f in CANDIDATES:
            if late():
                say(f"  {context} | {label(f)} | SKIPPED (time budget)")
                continue
            try:
                L.DECODE_FUSIONS = f
                cache.k.copy_(k0)
                cache.v.copy_(v0)
                logits = L.decode_step(model, token, pos, cache, L.TRITON_DECODE)  # same pos: rewrites one row
                row = torch.cat([cache.k[:, 0, context].flatten(), cache.v[:, 0, context].flatten()])
                checks, ok = "", True
                if f == TODAY:
                    base, base_row = logits, row
                    if ref is not None:
                        r = rel(logits, ref)  # the baseline is timed whatever this says: flagged, not skipped
                        checks = (
                            ("" if r < 5e-2 else "(!) ")
                            + f"vs REF_DECODE: rel {r:.1e}, same argmax {bool(logits.argmax(-1).eq(ref.argmax(-1)).all())}"
                        )
                elif base is not None:
                    r = rel(logits, base)
                    d = float((row.float() - base_row.float()).abs().max() / base_row.float().abs().max())
                    ok = r < 5e-2 and d < 2e-2  # the new k, v rows: a bf16 rounding or two, relative to their max
                    checks = (f"vs today: rel {r:.1e}, same argmax {bool(logits.argmax(-1).eq(base.argmax(-1)).all())}, "
                              f"cache row max diff / max {d:.1e}")  # fmt: skip
                if not ok:
                    say(f"  {context} | {label(f)} | FAIL {checks}")
                    continue
                ms = gtime(lambda: L.decode_step(model, token, pos, cache, L.TRITON_DECODE))
                STEP[context][f] = ms
                if ms is None:
                    say(f"  {context} | {label(f)} | ran | {checks}")
                else:
                    today = STEP[context].get(TODAY)
                    x = f"x{today / ms:5.2f}" if today else "  n/a"
                    say(f"  {context} | {label(f)} | {fmt(ms)} | {100 * copy / ms:5.1f}% copy | {x} today | "
                        f"{1e3 / ms:6.0f} tokens/s | {checks}")  # fmt: skip
            except Exception as e:  # noqa: BLE001
                say(f"  {context} | {label(f)} | ERROR {first_line(e)}")
            finally:
                L.DECODE_FUSIONS = SAVED
        cache = None
        if not CPU:
            torch.cuda.empty_cache()
        say(f"  ({time.time() - T0:.0f} s)")
        save()


def part_b():
    say("== B. decode attention alone (graph, L2 cleared): shape | variant | time | GB/s | % copy | x today")
    for B, H, KV, D, ctx in ATT_SHAPES:
        if late(110):
            say(f"B={B} H={H} KV={KV} D={D} context={ctx}: SKIPPED (time budget)")
            continue
        shape = f"B={B} H={H} KV={KV} D={D} context={ctx}"
        try:
            q = torch.randn(B, H, D, device=ENV.device, dtype=DT)
            k, v = (torch.randn(B, ctx, KV, D, device=ENV.device, dtype=DT) for _ in range(2))
            lengths = torch.full((B,), ctx, dtype=torch.int32, device=ENV.device)
            ref = L.decode_attention_ref(q.float(), k.float(), v.float(), lengths)
            nbytes = L.decode_attention_bytes(B, H, KV, D, ctx, q.element_size())
            copy = gtime(copy_fn(nbytes))
            out = torch.empty_like(q)
            today = None
            for variant, n in (("split+combine", None), ("ticket", None), ("ticket", 32), ("one-pass", None)):
                name = variant + ("" if n is None else f", n_splits={n}") + (" (today)" if variant[0] == "s" else "")
                try:
                    L.decode_attention_fused(q, k, v, lengths, out=out, variant=variant, n_splits=n)
                    err = float((out.float() - ref).abs().max())
                    if err > 3e-2:
                        say(f"  {shape} | {name} | FAIL max error {err:.2e}")
                        continue
                    ms = gtime(lambda variant=variant, n=n: L.decode_attention_fused(q, k, v, lengths, out=out,
                                                                                      variant=variant, n_splits=n))  # fmt: skip
                    if ms is None:
                        say(f"  {shape} | {name} | ran (max error {err:.1e})")
                        continue
                    today = today or ms
                    say(f"  {shape} | {name} | {ms * 1e3:8.2f} us | {nbytes / ms / 1e6:7.0f} GB/s | "
                        f"{100 * copy / ms:5.1f}% copy | x{today / ms:5.2f} today")  # fmt: skip
                except Exception as e:  # noqa: BLE001
                    say(f"  {shape} | {name} | ERROR {first_line(e)}")
        except Exception as e:  # noqa: BLE001
            say(f"  {shape} | ERROR {first_line(e)}")
        save()


def part_c():
    say(f"== C. lesson 12's int4 g{G} step (quantized_decode_step, QUANTIZED_DECODE), B=1, context "
        f"{CONTEXTS[0][0]}: attention | time | x today's attention")  # fmt: skip
    if late(125):
        say("SKIPPED (time budget)")
        return
    from lessons import l12_quantization as L12

    context, max_len = CONTEXTS[0]
    qmodel = L12.quantize_model(model, 4, G)
    cache = L.new_cache(model, 1, max_len)
    cache.k.normal_()
    cache.v.normal_()
    token = torch.tensor([7], device=ENV.device)
    pos = torch.tensor([context], dtype=torch.int32, device=ENV.device)
    base = today = None
    for f in (TODAY, DF(False, "ticket"), DF(False, "one-pass")):
        if late():
            say(f"  {f.attention} | SKIPPED (time budget)")
            continue
        try:
            L.DECODE_FUSIONS = f
            logits = L12.quantized_decode_step(qmodel, token, pos, cache, L12.QUANTIZED_DECODE)
            if base is None:
                base = logits
            r = rel(logits, base)
            if r > 5e-2:
                say(f"  {f.attention} | FAIL rel {r:.1e} against today's attention")
                continue
            ms = gtime(lambda: L12.quantized_decode_step(qmodel, token, pos, cache, L12.QUANTIZED_DECODE))
            if ms is None:
                say(f"  {f.attention} | ran (rel {r:.1e})")
                continue
            today = today or ms
            say(f"  {f.attention} | {fmt(ms)} | x{today / ms:5.2f} | {1e3 / ms:6.0f} tokens/s | rel {r:.1e}")
        except Exception as e:  # noqa: BLE001
            say(f"  {f.attention} | ERROR {first_line(e)}")
        finally:
            L.DECODE_FUSIONS = SAVED


for part in (part_a, part_b, part_c):
    if model is None:
        break
    try:
        part()
    except Exception as e:  # noqa: BLE001
        say(f"{part.__name__} | ERROR {first_line(e)}")
    save()

say("== best")
scores = {}
for context, row in STEP.items():
    timed = {f: ms for f, ms in row.items() if ms is not None}
    if timed:
        f, ms = min(timed.items(), key=lambda kv: kv[1])
        today = timed.get(TODAY)
        x = f" (x{today / ms:.2f} today's {today:.4f} ms)" if today else ""
        say(f"context {context}: {label(f)} | {ms:.4f} ms{x}")
    for f, ms in timed.items():
        if timed.get(TODAY):
            scores.setdefault(f, []).append(math.log(timed[TODAY] / ms))
full = {f: s for f, s in scores.items() if len(s) == len(STEP)}
if full:
    best = max(full, key=lambda f: sum(full[f]))
    say(f"best geometric mean over the contexts: {label(best)} (x{math.exp(sum(full[best]) / len(full[best])):.2f})")
    say(f"EDIT solutions/08_llama_model.ipynb (cell with def decode_qkv_rope_kernel): {edit(best)}")
else:
    say("no timings (CPU smoke run, or every candidate failed): no EDIT")
say(f"total {time.time() - T0:.0f} s")
save()
