"""Lesson 12 sweep b, 2026-11-23: the fused batch-1 decode step for quantized weights (branch wt-l12b-fused).

Run from the repo root (branch wt-l12b-fused merged): ``PYTHONPATH=$PWD python3 bench/sweeps/l12b.py`` on the GPU
(< 150 s), ``PYTHONPATH=$PWD python3 bench/sweeps/l12b.py --cpu`` under the interpreter (tiny shapes, no timings, < 60 s).

Every time here is the GPU's: the call captured in a CUDA graph (bench.common.graphed), the replay timed by
triton.testing.do_bench, which clears L2 before each repetition (so the weights are read from HBM, not L2), as
bench/sweeps/l08.py times lesson 08's fused step. ``copy`` = a torch copy of the same number of bytes (read + write = the
op's bytes) in a graph, timed the same way; ``% copy`` = copy ms / candidate ms. Every candidate is compared with
its reference first (FAIL: the max error; a FAIL is never chosen). One line a candidate, printed as it finishes.
Order: part C (the figure that matters), then B shape by shape (each skipped past 120 s), then D (past 135 s
skipped); the summary ("== best per shape", with the EDIT lines) always prints.

Part C, the decode step: TinyLlama-1.1B's shape (random weights, as bench/lesson12.py builds it: 22 layers, hidden
2048, 32 query heads sharing 4, MLP 5632, vocabulary 32000, untied head), batch 1, 640 tokens in the cache
(max_len 768, bench/lesson12.py's mean context), CUDA graph: bf16 with lesson 08's fused step
(lessons.l08_llama_model.decode_step, TRITON_DECODE) and unfused (TRITON_DECODE_UNFUSED), int4 g128 and int8
(lessons.l12_quantization.quantize_model, the LM head quantized too) fused (quantized_decode_step,
QUANTIZED_DECODE) and unfused (quantized_decode_step with TRITON_DECODE_UNFUSED: the quantized products through
h @ w.T and the fast GEMVs, as before this branch). ms a token, tokens/s, x against bf16 fused (the targets: int4
>= 2x, int8 >= 1.5x), % copy of the step's bytes (weights as stored + the KV cache); then each fused variant's
logits against its own unfused step's (relative difference, same argmax).
  -> edit: USE_FUSED_DECODE = False in solutions/12_quantization.ipynb (the export cell with
     ``def w4a16_decode_kernel``) only if the summary says so (unfused faster for both formats).
Part B, the fused quantized GEMV (w4a16_decode_gemv / w8a16_decode_gemv) per projection, called as the step calls
it: qkv 2560x2048 with the norm in front, wo 2048x2048 + residual, gate/up 2x5632x2048 with the norm and SwiGLU,
down 2048x5632 + residual, the LM head 32000x2048 with the norm into fp32 logits. Candidate = lesson 08's
GemvSchedule(BLOCK_N, BLOCK_K, num_warps, num_stages): BLOCK_N rows of W a program (with SwiGLU their up rows
too), BLOCK_K columns a step (int4: a whole number of groups of 128), num_stages >= 2 = the next step's codes
prefetched into registers. The first candidate of each list is the table's current row. GB/s counts the format's
own bytes (w4a16_bytes / w8a16_bytes of the (rows, K) weight). Ratios: "x bf16 fused" against lesson 08's
decode_gemv on the bf16 weight at the same shape and epilogue (its own table schedule), "x plain" against this
lesson's plain quantized GEMV (w4a16_fast / w8a16_fast, FAST_SCHEDULES) without the norm, SwiGLU or residual.
  -> edit: FUSED_GEMV_SCHEDULES[(bits, N, K)] = GemvSchedule(...) (the key printed; N: the outputs, for gate/up
     the F = 5632 outputs of SwiGLU) in the same cell, then ``python -m utils.notebooks``; the "(bits, None)" EDIT
     line (the candidate with the best geometric mean over the five shapes) replaces the default row.
Part D: part C's fused int4 and int8 steps again with part B's winners put in FUSED_GEMV_SCHEDULES (what the
edits above would give).
"""

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
from lessons import l12_quantization as L

ENV = utils.mode.current()
LINES = []
BUDGET_S = 135
GS = L8.GemvSchedule


def say(line=""):
    print(line, flush=True)
    LINES.append(line)


def save():
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "sweep_l12b.txt"), "w") as f:
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
    return "   n/a  " if ms is None else f"{ms * 1e3:8.2f} us"


def first_line(e):
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0][:150] if text else ''}"


if CPU:
    DT, G = torch.float32, 32
    ARGS = L8.ModelArgs(vocab_size=100, n_layers=2, dim=64, n_heads=4, n_kv_heads=2, ffn_dim=48, tie_embeddings=False)
    MAX_LEN, CONTEXT = 24, 16
else:
    DT, G = torch.bfloat16, 128
    ARGS = L8.ModelArgs(vocab_size=32000, n_layers=22, dim=2048, n_heads=32, n_kv_heads=4, ffn_dim=5632,
                        tie_embeddings=False)  # fmt: skip
    MAX_LEN, CONTEXT = 768, 640  # bench/lesson12.py: prompt 512 + 256 new, the mean context
C_, F_, V_ = ARGS.dim, ARGS.ffn_dim, ARGS.vocab_size
QKV = (ARGS.n_heads + 2 * ARGS.n_kv_heads) * ARGS.head_dim
# name: (N outputs, K, rows of W, keyword arguments of the call as the step makes it (norm / residual filled in))
SHAPES = {
    "gate/up": (F_, C_, 2 * F_, {"norm": True, "swiglu": True}),
    "down": (C_, F_, C_, {"residual": True}),
    "qkv": (QKV, C_, QKV, {"norm": True}),
    "wo": (C_, C_, C_, {"residual": True}),
    "head": (V_, C_, V_, {"norm": True, "logits": True}),
}
if CPU:
    CANDIDATES = {4: [GS(4, 64, 4, 2), GS(8, 32, 4, 1)], 8: [GS(4, 32, 4, 2), GS(8, 64, 4, 1)]}
else:
    CANDIDATES = {  # (BLOCK_N, BLOCK_K, num_warps, num_stages); the table's current row is tried first
        4: [GS(4, 1024, 4, 2), GS(16, 256, 4, 2), GS(8, 1024, 4, 2), GS(16, 512, 8, 2), GS(8, 512, 4, 1),
            GS(2, 2048, 4, 2)],
        8: [GS(4, 1024, 4, 2), GS(16, 256, 4, 2), GS(8, 512, 8, 2), GS(4, 512, 4, 2), GS(8, 512, 4, 1),
            GS(2, 2048, 4, 2)],
    }  # fmt: skip


def table_row(bits, N, K):
    return L.FUSED_GEMV_SCHEDULES.get((bits, N, K), L.FUSED_GEMV_SCHEDULES[(bits, None)])


# ---------------------------------------------------------------------------------------------------------------
say(f"lesson 12 sweep b (fused quantized decode) on {ENV.gpu_name if ENV.is_gpu else 'CPU (interpreter)'}, torch "
    f"{torch.__version__}, triton {__import__('triton').__version__}, {ENV.sm_count} SMs")  # fmt: skip


def build_model():
    torch.manual_seed(0)  # the same random weights every run
    layers = [L7.random_weights(ARGS.layer, DT, ENV.device) for _ in range(ARGS.n_layers)]
    embed = (0.1 * torch.randn(V_, C_, device=ENV.device)).to(DT)
    norm = torch.ones(C_, device=ENV.device, dtype=DT)
    head = (torch.randn(V_, C_, device=ENV.device) / math.sqrt(C_)).to(DT)
    return L8.Model(ARGS, embed, layers, norm, head)


STEP = {}  # variant -> ms
STEP_D = {}


def part_c():
    say(f"== C. decode step, B=1, context {CONTEXT}, cache max_len {MAX_LEN}, CUDA graph: variant | time | "
        f"tokens/s | x bf16 fused | % copy")  # fmt: skip
    model = build_model()
    models = {"bf16": model, f"int4 g{G}": L.quantize_model(model, 4, G), "int8": L.quantize_model(model, 8)}
    cache = L8.new_cache(model, 1, MAX_LEN)
    cache.k.normal_()
    cache.v.normal_()
    token = torch.tensor([7], device=ENV.device)
    pos = torch.tensor([CONTEXT], dtype=torch.int32, device=ENV.device)
    kv = L8.kv_cache_bytes(ARGS, 1, CONTEXT + 1)
    logits = {}
    for name, m in models.items():
        nbytes = L.model_weight_bytes(m) + kv
        copy = None if late() else gtime(copy_fn(nbytes))
        say(f"{name}: copy of the step's bytes ({nbytes / 1e6:.1f} MB: weights as stored + KV cache) | {fmt(copy)}")
        if name == "bf16":
            variants = {"fused (lesson 08)": (L8.decode_step, L8.TRITON_DECODE),
                        "unfused (lesson 08, cuBLAS)": (L8.decode_step, L8.TRITON_DECODE_UNFUSED)}  # fmt: skip
        else:
            variants = {"fused": (L.quantized_decode_step, L.QUANTIZED_DECODE),
                        "unfused": (L.quantized_decode_step, L8.TRITON_DECODE_UNFUSED)}  # fmt: skip
        for vname, (step, ops) in variants.items():
            key = f"{name} {vname}"
            if late():
                say(f"{key} | SKIPPED (time budget)")
                continue
            try:
                logits[key] = step(m, token, pos, cache, ops).float()  # same pos every time: rewrites the same row
                ms = gtime(lambda step=step, m=m, ops=ops: step(m, token, pos, cache, ops))
                STEP[key] = ms
                if ms is None:
                    say(f"{key} | ran")
                else:
                    base = STEP.get("bf16 fused (lesson 08)")
                    ratio = f"x{base / ms:5.2f}" if base else "  n/a"
                    say(f"{key} | {ms:7.4f} ms | {1e3 / ms:6.0f} tokens/s | {ratio} bf16 fused | "
                        f"{100 * copy / ms if copy else float('nan'):5.1f}% copy")  # fmt: skip
            except Exception as e:  # noqa: BLE001
                say(f"{key} | ERROR {first_line(e)}")
    for name in models:
        fused, unfused = (
            ("fused (lesson 08)", "unfused (lesson 08, cuBLAS)") if name == "bf16" else ("fused", "unfused")
        )
        a, b = logits.get(f"{name} {fused}"), logits.get(f"{name} {unfused}")
        if a is not None and b is not None:
            rel = float((a - b).norm() / b.norm())
            same = bool(a.argmax(-1).eq(b.argmax(-1)).all())
            say(f"check: {name} fused vs its unfused step: relative logit difference {rel:.2e}, same argmax: {same}"
                + ("" if rel < 5e-2 else "  <-- FAIL"))  # fmt: skip
    return models, cache, token, pos


BEST = {}  # (bits, N, K) -> (ms, schedule, shape's label)
TABLE_MS = {}  # (bits, N, K) -> ms of the table's current row
SCORES = {}  # bits -> {schedule: {shape's label: ms}}


def part_b():
    say("== B. fused quantized GEMV (graph, L2 cleared): shape | format | candidate | time | GB/s | % copy | "
        "x bf16 fused | x plain quantized GEMV")  # fmt: skip
    for label, (N, K, rows, call) in SHAPES.items():
        if late(120):
            say(f"{label} ({N}, {K}): SKIPPED (time budget)")
            continue
        try:
            sweep_shape(label, N, K, rows, call)
        except Exception as e:  # noqa: BLE001
            say(f"{label} ({N}, {K}) | ERROR {first_line(e)}")
        if not CPU:
            torch.cuda.empty_cache()
        say(f"  ({time.time() - T0:.0f} s)")


def sweep_shape(label, N, K, rows, call):
    W = (torch.randn(rows, K, device=ENV.device) / math.sqrt(K)).to(DT)
    x = torch.randn(1, K, device=ENV.device, dtype=DT)
    kw = {"swiglu": call.get("swiglu", False)}
    if call.get("norm"):
        kw["norm"] = (1 + 0.1 * torch.randn(K, device=ENV.device)).to(DT)
    if call.get("residual"):
        kw["residual"] = torch.randn(1, N, device=ENV.device, dtype=DT)  # out is another buffer: the same traffic
    out = torch.empty(1, N, device=ENV.device, dtype=torch.float32 if call.get("logits") else DT)
    bf16 = gtime(lambda: L8.decode_gemv(x, W, out=out, **kw))  # lesson 08's fused GEMV, its own table schedule
    ref_kw = {k: v.float() if torch.is_tensor(v) else v for k, v in kw.items()}
    for bits in (4, 8):
        w = L.quantize_int4_ref(W, G) if bits == 4 else L.quantize_int8_ref(W)
        ref = L.quantized_decode_gemv_ref(x.float(), w, **ref_kw)
        nbytes = L.w4a16_bytes(1, rows, K, G) if bits == 4 else L.w8a16_bytes(1, rows, K)
        copy = gtime(copy_fn(nbytes))
        plain_fn = L.w4a16_fast if bits == 4 else L.w8a16_fast
        plain = gtime(lambda plain_fn=plain_fn, w=w: plain_fn(x, w))
        fmt_name = f"int{bits}" + (f" g{G}" if bits == 4 else "")
        say(f"{label} ({N}, {K}) {fmt_name} | copy {fmt(copy)} | lesson 08 bf16 fused {fmt(bf16)} | plain "
            f"quantized GEMV {fmt(plain)}")  # fmt: skip
        row = table_row(bits, N, K)
        if bits == 4:
            row = row._replace(BLOCK_K=max(row.BLOCK_K, G))  # as fused_gemv_schedule does
        for s in [row] + [c for c in CANDIDATES[bits] if c != row]:
            if late(BUDGET_S):
                say(f"{label} {fmt_name} | {s} | SKIPPED (time budget)")
                continue
            try:
                y = L.quantized_decode_gemv(x, w, out=out, schedule=s, **kw)
                err = float((y.float() - ref).abs().max())
                tol = 2e-2 * float(ref.abs().max()) + 1e-3
                if not math.isfinite(err) or err > tol:
                    say(f"{label} {fmt_name} | {s} | FAIL max error {err:.3g} (tolerance {tol:.3g})")
                    continue
                ms = gtime(lambda s=s, w=w: L.quantized_decode_gemv(x, w, out=out, schedule=s, **kw))
                if ms is None:
                    say(f"{label} {fmt_name} | {s} | ran, max error {err:.2g}")
                    ms = 1.0  # the CPU: no timing, a placeholder so the summary runs end to end
                else:
                    say(f"{label} {fmt_name} | {s} | {fmt(ms)} | {nbytes / ms / 1e6:6.0f} GB/s | "
                        f"{100 * copy / ms:5.1f}% copy | x{bf16 / ms:5.2f} bf16 fused | x{plain / ms:5.2f} plain")  # fmt: skip
                key = (bits, N, K)
                if key not in BEST or ms < BEST[key][0]:
                    BEST[key] = (ms, s, label)
                if s == row:
                    TABLE_MS[key] = ms
                SCORES.setdefault(bits, {}).setdefault(s, {})[label] = ms
            except Exception as e:  # noqa: BLE001
                say(f"{label} {fmt_name} | {s} | ERROR {first_line(e)}")


def part_d(models, cache, token, pos):
    say("== D. the fused quantized steps again with part B's winners in FUSED_GEMV_SCHEDULES")
    saved = dict(L.FUSED_GEMV_SCHEDULES)
    try:
        for (bits, N, K), (_ms, s, _label) in BEST.items():
            L.FUSED_GEMV_SCHEDULES[(bits, N, K)] = s
        for name, m in models.items():
            if name == "bf16":
                continue
            if late():
                say(f"{name} fused, winners | SKIPPED (time budget)")
                continue
            try:
                ms = gtime(lambda m=m: L.quantized_decode_step(m, token, pos, cache, L.QUANTIZED_DECODE))
                STEP_D[name] = ms
                base = STEP.get("bf16 fused (lesson 08)")
                if ms is None:
                    say(f"{name} fused, winners | ran")
                else:
                    say(f"{name} fused, winners | {ms:7.4f} ms | {1e3 / ms:6.0f} tokens/s | "
                        f"x{base / ms if base else float('nan'):5.2f} bf16 fused")  # fmt: skip
            except Exception as e:  # noqa: BLE001
                say(f"{name} fused, winners | ERROR {first_line(e)}")
    finally:
        L.FUSED_GEMV_SCHEDULES.clear()
        L.FUSED_GEMV_SCHEDULES.update(saved)


def summary():
    say("== best per shape (solutions/12_quantization.ipynb, the export cell with FUSED_GEMV_SCHEDULES; then "
        "`python -m utils.notebooks`)")  # fmt: skip
    for (bits, N, K), (ms, s, label) in BEST.items():
        was = TABLE_MS.get((bits, N, K))
        gain = f" (the table's row {was * 1e3:.2f} us: x{was / ms:.2f})" if was and not CPU else ""
        say(f"gemv {label} int{bits} ({N}, {K}): {s} {fmt(None if CPU else ms)}{gain}  -> EDIT: "
            f"FUSED_GEMV_SCHEDULES[({bits}, {N}, {K})] = {s!r},")  # fmt: skip
    for bits, scores in SCORES.items():  # the default row: best geometric mean of time / best, over every shape
        best = {}
        for per in scores.values():
            for label, ms in per.items():
                best[label] = min(best.get(label, float("inf")), ms)
        full = {s: per for s, per in scores.items() if len(per) == len(best)}
        if not full or CPU:
            continue
        gm = {s: math.exp(sum(math.log(per[k] / best[k]) for k in per) / len(per)) for s, per in full.items()}
        s = min(gm, key=gm.get)
        say(f"int{bits} default (geometric mean {gm[s]:.2f}x the best per shape over {len(best)} shapes)  -> EDIT: "
            f"FUSED_GEMV_SCHEDULES[({bits}, None)] = {s!r},")  # fmt: skip
    for name in (f"int4 g{G}", "int8"):
        f, u = STEP.get(f"{name} fused"), STEP.get(f"{name} unfused")
        base = STEP.get("bf16 fused (lesson 08)")
        if f and u and base:
            d = STEP_D.get(name)
            after = f"; with the winners {d:.4f} ms (x{base / d:.2f} bf16 fused)" if d else ""
            say(f"decode step {name}: fused {f:.4f} ms (x{base / f:.2f} bf16 fused) vs unfused {u:.4f} ms "
                f"(x{base / u:.2f}){after}")  # fmt: skip
    steps = [STEP.get(f"{n} {v}") for n in (f"int4 g{G}", "int8") for v in ("fused", "unfused")]
    if all(isinstance(ms, float) for ms in steps):  # (int4 fused, int4 unfused, int8 fused, int8 unfused)
        fused_wins = steps[0] < steps[1] or steps[2] < steps[3]
        say("-> keep USE_FUSED_DECODE = True" if fused_wins else "-> EDIT: USE_FUSED_DECODE = False (unfused faster)")
    say(f"total {time.time() - T0:.0f} s")


state = None
try:
    state = part_c()
except Exception as e:  # noqa: BLE001
    say(f"part C stopped: {first_line(e)}")
save()
try:
    part_b()
except Exception as e:  # noqa: BLE001
    say(f"part B stopped: {first_line(e)}")
save()
if state is not None:
    try:
        part_d(*state)
    except Exception as e:  # noqa: BLE001
        say(f"part D stopped: {first_line(e)}")
state = None
summary()
save()
