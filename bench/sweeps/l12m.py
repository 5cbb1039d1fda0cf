"""Lesson 12 sweep m (issue 15): FUSED_INT8_PIPE_SCHEDULES, the fused int8 decode kernel with lesson 08's pipelined
loop (FUSED_INT8_LOOP = "pipe"), one schedule a projection, and then the int8 step with them against "prefetch".

Run from the repo root: ``PYTHONPATH=$PWD python3 bench/sweeps/l12m.py`` on the GPU (< 250 s),
``PYTHONPATH=$PWD python3 bench/sweeps/l12m.py --cpu`` under the interpreter (a tiny model, no timings: a smoke test).

Why: l08e.py (results/h100-2026-11-28-s13/sweeps/l08e.txt) took lesson 08's bf16 step 3-6 % faster with the
pipelined loop, so the int8 step, at 1.49x the old bf16 step, fell to 1.42x; the int8 kernel with the same loop at
one untuned schedule (8, 512, 4, 4) was 4 % faster than "prefetch" at Llama-3.2-1B's shape and 6 % slower at
TinyLlama's. Here each projection as the step calls it (launched early, QUANTIZED_PDL[8] as set; the graph of one
call, L2 cleared): "prefetch" at its table row, then "pipe" candidates (BLOCK_N, BLOCK_K, num_warps, num_stages);
then each shape's int8 step with "prefetch" as set and with "pipe" at the winners, against lesson 08's bf16 step.
Prints the EDIT lines for FUSED_INT8_PIPE_SCHEDULES (per (N, K); None: the best geometric mean) and FUSED_INT8_LOOP.
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
BUDGET_S = 230


def say(line=""):
    print(line, flush=True)
    LINES.append(line)


def save():
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "sweep_l12m.txt"), "w") as f:
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


GS = L8.GemvSchedule
if CPU:
    CANDIDATES = [GS(4, 32, 4, 3), GS(2, 64, 4, 4)]
else:
    CANDIDATES = [GS(bn, bk, 4, st) for bn in (4, 8, 16) for bk in (512, 1024) for st in (3, 4)] + [
        GS(2, 512, 4, 3), GS(8, 512, 2, 4), GS(4, 2048, 4, 3)]  # fmt: skip
EARLY = {"pdl": L.QUANTIZED_PDL[8]} if L.QUANTIZED_PDL.get(8) else {}
BEST = {}  # (N, K) -> (ms, schedule, label)
PREFETCH_MS = {}  # (N, K) -> ms
SCORES = {}  # schedule -> {(shape, label): ms}
STEPS = {}  # (shape, variant) -> ms


def projections(args):
    C, F, V = args.dim, args.ffn_dim, args.vocab_size
    qkv = (args.n_heads + 2 * args.n_kv_heads) * args.head_dim
    return {"qkv": (qkv, C, qkv, {"norm": True, "rope": True}), "wo": (C, C, C, {"residual": True}),
            "gate/up": (F, C, 2 * F, {"norm": True, "swiglu": True}), "down": (C, F, C, {"residual": True}),
            "head": (V, C, V, {"norm": True, "logits": True})}  # fmt: skip


def shape_call(args, N, K, rows, call):
    W = (torch.randn(rows, K, device=ENV.device) / math.sqrt(K)).to(DT)
    w = L.quantize_int8_ref(W)
    x = torch.randn(1, K, device=ENV.device, dtype=DT)
    norm = (1 + 0.1 * torch.randn(K, device=ENV.device)).to(DT)
    if call.get("rope"):
        H, KV, D = args.n_heads, args.n_kv_heads, args.head_dim
        cos, sin = L8.rope_cache(args, MAX_LEN, DT)
        pos = torch.tensor([CONTEXT], dtype=torch.int32, device=ENV.device)
        k_cache, v_cache = (torch.zeros(1, MAX_LEN, KV, D, device=ENV.device, dtype=DT) for _ in range(2))
        q = torch.empty(1, H, D, device=ENV.device, dtype=DT)
        ref = L8.decode_qkv_rope_ref(x.float(), L.dequantize(w, torch.float32), cos.float(), sin.float(), pos,
                                     k_cache.float(), v_cache.float(), norm=norm.float(), eps=1e-5)  # fmt: skip

        def fn(s):
            return L.quantized_decode_qkv_rope(x, w, cos, sin, pos, k_cache, v_cache, norm=norm, out=q, schedule=s,
                                               **EARLY)  # fmt: skip

        return fn, ref
    kw = {"swiglu": call.get("swiglu", False)}
    if call.get("norm"):
        kw["norm"] = norm
    if call.get("residual"):
        kw["residual"] = torch.randn(1, N, device=ENV.device, dtype=DT)
    out = torch.empty(1, N, device=ENV.device, dtype=torch.float32 if call.get("logits") else DT)
    ref = L.quantized_decode_gemv_ref(
        x.float(), w, **{k: v.float() if torch.is_tensor(v) else v for k, v in kw.items()}
    )
    return (lambda s: L.quantized_decode_gemv(x, w, out=out, schedule=s, **kw, **EARLY)), ref


def sweep_shape(name, args, label, N, K, rows, call):
    fn, ref = shape_call(args, N, K, rows, call)
    table = L.FUSED_GEMV_SCHEDULES.get((8, N, K), L.FUSED_GEMV_SCHEDULES[(8, None)])
    say(f"{name} {label} ({N}, {K}) int8 | {L.w8a16_bytes(1, rows, K) / 1e6:.1f} MB")
    saved = L.FUSED_INT8_LOOP
    try:
        cands = [s._replace(BLOCK_N=max(1, s.BLOCK_N // 2)) if call.get("swiglu") else s for s in CANDIDATES]
        for loop, s in [("prefetch", table)] + [("pipe", s) for s in dict.fromkeys(cands)]:
            if time.time() - T0 > BUDGET_S - 60:
                say(f"{label} | {loop} | {s} | SKIPPED (time budget)")
                continue
            L.FUSED_INT8_LOOP = loop
            try:
                y = fn(s).float()
                err = float((y - ref).abs().max())
                tol = 2e-2 * float(ref.abs().max()) + 1e-3
                if not math.isfinite(err) or err > tol:
                    say(f"{label} | {loop} | {s} | FAIL max error {err:.3g} (tolerance {tol:.3g})")
                    continue
                ms = gtime(lambda s=s: fn(s))
                ms = 1.0 if ms is None else ms
                was = PREFETCH_MS.get((N, K))
                say(f"{label} | {loop} | {tuple(s)} | {ms * 1e3:8.2f} us | x{was / ms if was else 1.0:5.2f} prefetch")
                if loop == "prefetch":
                    PREFETCH_MS[(N, K)] = ms
                    continue
                if not call.get("swiglu"):
                    SCORES.setdefault(s, {})[(name, label)] = ms
                if (N, K) not in BEST or ms < BEST[(N, K)][0]:
                    BEST[(N, K)] = (ms, s, f"{name} {label}")
            except Exception as e:  # noqa: BLE001
                say(f"{label} | {loop} | {s} | ERROR {first_line(e)}")
    finally:
        L.FUSED_INT8_LOOP = saved


def steps(name, args):
    model = build_model(args)
    cache = L8.new_cache(model, 1, MAX_LEN)
    cache.k.normal_()
    cache.v.normal_()
    token = torch.tensor([7], device=ENV.device)
    pos = torch.tensor([CONTEXT], dtype=torch.int32, device=ENV.device)
    int8 = L.quantize_model(model, 8)
    saved_loop, saved_table = L.FUSED_INT8_LOOP, dict(L.FUSED_INT8_PIPE_SCHEDULES)
    try:
        STEPS[(name, "bf16")] = gtime(lambda: L8.decode_step(model, token, pos, cache, L8.TRITON_DECODE))
        L.FUSED_INT8_LOOP = "prefetch"
        STEPS[(name, "int8 prefetch")] = gtime(lambda: L.quantized_decode_step(int8, token, pos, cache))
        L.FUSED_INT8_LOOP = "pipe"
        STEPS[(name, "int8 pipe as set")] = gtime(lambda: L.quantized_decode_step(int8, token, pos, cache))
        for key, (_ms, s, _label) in BEST.items():
            L.FUSED_INT8_PIPE_SCHEDULES[key] = s
        STEPS[(name, "int8 pipe, winners")] = gtime(lambda: L.quantized_decode_step(int8, token, pos, cache))
    finally:
        L.FUSED_INT8_LOOP = saved_loop
        L.FUSED_INT8_PIPE_SCHEDULES.clear()
        L.FUSED_INT8_PIPE_SCHEDULES.update(saved_table)
    base = STEPS[(name, "bf16")]
    for (shape, variant), ms in STEPS.items():
        if shape == name:
            say(f"{name} step | {variant} | " + ("ran" if ms is None else f"{ms:7.4f} ms | x{base / ms:5.2f} bf16"))


say(f"lesson 12 sweep m (the int8 decode kernel's pipelined loop) on {ENV.gpu_name if ENV.is_gpu else 'CPU'}, torch "
    f"{torch.__version__}, triton {__import__('triton').__version__}; QUANTIZED_PDL {L.QUANTIZED_PDL}, lesson 08 loop "
    f"{L8.DECODE_GEMV_LOOP!r} pdl {L8.DECODE_FUSIONS.pdl!r}")  # fmt: skip
for name, args in SHAPES.items():
    say(f"== {name}: each projection as the step calls it: label | loop | schedule | time | x prefetch")
    for label, (N, K, rows, call) in projections(args).items():
        if (N, K) in PREFETCH_MS:
            continue  # the same projection at the other shape
        try:
            sweep_shape(name, args, label, N, K, rows, call)
        except Exception as e:  # noqa: BLE001
            say(f"{label} | ERROR {first_line(e)}")
        if not CPU:
            torch.cuda.empty_cache()
        save()
    say(f"  ({time.time() - T0:.0f} s)")
for name, args in SHAPES.items():
    try:
        steps(name, args)
    except Exception as e:  # noqa: BLE001
        say(f"{name} steps stopped: {first_line(e)}")
    if not CPU:
        torch.cuda.empty_cache()
    save()
say("== the edits (solutions/12_quantization.ipynb: FUSED_INT8_PIPE_SCHEDULES, FUSED_INT8_LOOP)")
for (N, K), (ms, s, label) in BEST.items():
    was = PREFETCH_MS.get((N, K))
    say(
        f"{label} ({N}, {K}): {s!r} x{was / ms if was else 1.0:.2f} prefetch -> EDIT: FUSED_INT8_PIPE_SCHEDULES[({N}, {K})] = {s!r},"
    )
best = {}
for per in SCORES.values():
    for k, ms in per.items():
        best[k] = min(best.get(k, float("inf")), ms)
full = {s: per for s, per in SCORES.items() if len(per) == len(best)}
if full and not CPU:
    gm = {s: math.exp(sum(math.log(per[k] / best[k]) for k in per) / len(per)) for s, per in full.items()}
    s = min(gm, key=gm.get)
    say(f"default: {s!r} ({gm[s]:.3f}x the best per shape) -> EDIT: FUSED_INT8_PIPE_SCHEDULES[None] = {s!r},")
ok = [n for n in SHAPES if STEPS.get((n, "int8 pipe, winners")) and STEPS.get((n, "int8 prefetch"))]
if ok and len(ok) == len(SHAPES):
    faster = all(STEPS[(n, "int8 pipe, winners")] < STEPS[(n, "int8 prefetch")] for n in ok)
    say("-> EDIT: FUSED_INT8_LOOP = 'pipe' (with the rows above)" if faster else "-> FUSED_INT8_LOOP = 'prefetch'")
say(f"total {time.time() - T0:.0f} s")
save()
