"""Lesson 12 sweep j (issue 15): the int4 decode kernel with its loop pipelined by Triton (FUSED_INT4_KERNEL =
"pipe": w4a16_decode_stream_kernel with PIPE = num_stages) against "groups" and "stream", alone and in the batch-1
step. bench/sweeps/l12i.py found the plain GEMV 1.04x to 1.78x faster that way; this sweep sets the fused kernel's
schedules (FUSED_PIPE_SCHEDULES) and whether the step takes it.

Run from the repo root: ``PYTHONPATH=$PWD python3 bench/sweeps/l12j.py`` on the GPU (< 160 s),
``PYTHONPATH=$PWD python3 bench/sweeps/l12j.py --cpu`` under the interpreter (tiny shapes, no timings: a smoke test).
With ``--llama32``: part B only, at Llama-3.2-1B's shape (16 layers, MLP 8192, 8 KV heads, vocabulary 128256, the
head tied to the embedding), every kernel at its table's default rows.

As bench/sweeps/l12h.py (its timing, its shapes, its parts), with the pipelined kernel in the stream kernel's
place: part B, the decode step (TinyLlama-1.1B's shape, random weights, batch 1, 640 tokens in the cache, CUDA graph)
with each of FUSED_INT4_KERNELS at its table as set, int8 and bf16; part A, each projection as the step calls it,
the groups kernel at its table row, then the pipe kernel at each candidate GemvSchedule(BLOCK_N, BLOCK_K, num_warps,
num_stages = the pipeline's depth) (gate/up: BLOCK_N halved, as each row brings its up row); part C, the pipe step
with part A's winners. The edits: each "FUSED_PIPE_SCHEDULES[(N, K)] = ..." line, the "[None]" line, and
"FUSED_INT4_KERNEL = 'pipe'" only if the pipe step (part B's or C's) beats part B's fastest other step.
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
BUDGET_S = 140  # part C; part A stops at 90 s (a new shape) and 110 s (a candidate)
GS = L8.GemvSchedule
EARLY = {"pdl": L.QUANTIZED_PDL[4]} if L.QUANTIZED_PDL.get(4) else {}  # as quantized_decode_step launches


def say(line=""):
    print(line, flush=True)
    LINES.append(line)


def save():
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "sweep_l12j-llama32.txt" if LLAMA32 else "sweep_l12j.txt"), "w") as f:
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

    return triton.testing.do_bench(graphed(fn), warmup=5, rep=30)


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
    STREAM = [GS(4, 64, 4, 2), GS(2, 32, 4, 3)]  # the pipe kernel's candidates
else:
    DT, G = torch.bfloat16, 128
    ARGS = L8.ModelArgs(vocab_size=32000, n_layers=22, dim=2048, n_heads=32, n_kv_heads=4, ffn_dim=5632,
                        tie_embeddings=False)  # fmt: skip
    MAX_LEN, CONTEXT = 768, 640  # bench/lesson12.py: prompt 512 + 256 new, the mean context
    # (BLOCK_N, BLOCK_K, num_warps, num_stages = the pipeline's depth): l12i's best tiles for the plain GEMV and
    # their neighbours
    STREAM = [GS(bn, bk, nw, st) for bn in (4, 8, 16) for bk in (512, 1024) for nw in (2, 4) for st in (3,)] + [
        GS(4, 1024, 2, 4), GS(8, 512, 4, 4)]  # fmt: skip
LLAMA32 = "--llama32" in sys.argv and not CPU  # part B only, at Llama-3.2-1B's shape (tied head, 8 KV heads)
if LLAMA32:
    from bench.common import LLAMA_SHAPES

    ARGS = L8.ModelArgs(**LLAMA_SHAPES["Llama-3.2-1B"])
C_, F_, V_ = ARGS.dim, ARGS.ffn_dim, ARGS.vocab_size
QKV = (ARGS.n_heads + 2 * ARGS.n_kv_heads) * ARGS.head_dim
# name: (N outputs, K, rows of W, the call as the step makes it); the largest share of the step's bytes first
SHAPES = (
    {}
    if LLAMA32
    else {
        "gate/up": (F_, C_, 2 * F_, {"norm": True, "swiglu": True}),
        "down": (C_, F_, C_, {"residual": True}),
        "qkv": (QKV, C_, QKV, {"norm": True, "rope": True}),
        "wo": (C_, C_, C_, {"residual": True}),
        "head": (V_, C_, V_, {"norm": True, "logits": True}),
    }
)

say(f"lesson 12 sweep j (int4 decode kernel: the pipelined loop) on "
    f"{ENV.gpu_name if ENV.is_gpu else 'CPU (interpreter)'}, torch {torch.__version__}, triton "
    f"{__import__('triton').__version__}, {ENV.sm_count} SMs; QUANTIZED_PDL {L.QUANTIZED_PDL}")  # fmt: skip


def build_model():
    torch.manual_seed(0)  # the same random weights every run
    layers = [L7.random_weights(ARGS.layer, DT, ENV.device) for _ in range(ARGS.n_layers)]
    embed = (0.1 * torch.randn(V_, C_, device=ENV.device)).to(DT)
    norm = torch.ones(C_, device=ENV.device, dtype=DT)
    head = embed if ARGS.tie_embeddings else (torch.randn(V_, C_, device=ENV.device) / math.sqrt(C_)).to(DT)
    return L8.Model(ARGS, embed, layers, norm, head)


STEP = {}  # variant -> ms


def time_step(key, fn, logits=None):
    if late():
        say(f"{key} | SKIPPED (time budget)")
        return
    try:
        if logits is not None:
            logits[key] = fn().float()
        ms = gtime(fn)
        STEP[key] = ms
        base = STEP.get("bf16")
        if ms is None:
            say(f"{key} | ran")
        else:
            say(f"{key} | {ms:7.4f} ms | {1e3 / ms:6.0f} tokens/s | x{base / ms if base else float('nan'):5.2f} bf16")
    except Exception as e:  # noqa: BLE001
        say(f"{key} | ERROR {first_line(e)}")


def part_b():
    say(f"== B. decode step, B=1, context {CONTEXT}, cache max_len {MAX_LEN}, CUDA graph: variant | time | tokens/s | "
        "x bf16 (lesson 08's fused step)")  # fmt: skip
    model = build_model()
    int4, int8 = L.quantize_model(model, 4, G), L.quantize_model(model, 8)
    cache = L8.new_cache(model, 1, MAX_LEN)
    cache.k.normal_()
    cache.v.normal_()
    token = torch.tensor([7], device=ENV.device)
    pos = torch.tensor([CONTEXT], dtype=torch.int32, device=ENV.device)  # the same row rewritten every time
    time_step("bf16", lambda: L8.decode_step(model, token, pos, cache, L8.TRITON_DECODE))
    logits = {}
    saved = L.FUSED_INT4_KERNEL
    try:
        for kernel in L.FUSED_INT4_KERNELS:
            L.FUSED_INT4_KERNEL = kernel
            time_step(f"int4 g{G} {kernel}", lambda: L.quantized_decode_step(int4, token, pos, cache), logits)
    finally:
        L.FUSED_INT4_KERNEL = saved
    time_step("int8", lambda: L.quantized_decode_step(int8, token, pos, cache))
    a, b = logits.get(f"int4 g{G} pipe"), logits.get(f"int4 g{G} groups")
    if a is not None and b is not None:
        rel = float((a - b).norm() / b.norm())
        same = bool(a.argmax(-1).eq(b.argmax(-1)).all())
        say(f"check: int4 pipe step vs groups step: relative logit difference {rel:.2e}, same argmax: {same}"
            + ("" if rel < 5e-2 else "  <-- FAIL"))  # fmt: skip
    return int4, cache, token, pos


BEST = {}  # (N, K) -> (ms, schedule, label)
GROUPS_MS = {}  # (N, K) -> ms of the groups kernel at its table row
SCORES = {}  # pipe schedule -> {label: ms}, the shapes without SwiGLU (gate/up has a row of its own)


def part_a():
    say("== A. int4 decode kernel alone (graph, L2 cleared): shape | kernel | schedule | time | GB/s | % copy | "
        "x groups")  # fmt: skip
    for label, (N, K, rows, call) in SHAPES.items():
        if late(90):
            say(f"{label} ({N}, {K}): SKIPPED (time budget)")
            continue
        try:
            sweep_shape(label, N, K, rows, call)
        except Exception as e:  # noqa: BLE001
            say(f"{label} ({N}, {K}) | ERROR {first_line(e)}")
        if not CPU:
            torch.cuda.empty_cache()
        say(f"  ({time.time() - T0:.0f} s)")


def shape_call(N, K, rows, call):
    """(fn(schedule) -> the output to check, the fp32 reference) for one projection, called as the step calls it."""
    W = (torch.randn(rows, K, device=ENV.device) / math.sqrt(K)).to(DT)
    w = L.quantize_int4_ref(W, G)
    x = torch.randn(1, K, device=ENV.device, dtype=DT)
    norm = (1 + 0.1 * torch.randn(K, device=ENV.device)).to(DT)
    if call.get("rope"):
        H, KV, D = ARGS.n_heads, ARGS.n_kv_heads, ARGS.head_dim
        cos, sin = L8.rope_cache(ARGS, MAX_LEN, DT)
        pos = torch.tensor([CONTEXT], dtype=torch.int32, device=ENV.device)
        k_cache, v_cache = (torch.zeros(1, MAX_LEN, KV, D, device=ENV.device, dtype=DT) for _ in range(2))
        q = torch.empty(1, H, D, device=ENV.device, dtype=DT)
        ref = L8.decode_qkv_rope_ref(x.float(), L.dequantize(w, torch.float32), cos.float(), sin.float(), pos,
                                     k_cache.float(), v_cache.float(), norm=norm.float(), eps=1e-5)  # fmt: skip

        def fn(s):
            return L.quantized_decode_qkv_rope(x, w, cos, sin, pos, k_cache, v_cache, norm=norm, out=q, schedule=s,
                                               **EARLY)  # fmt: skip

        return fn, ref, w
    kw = {"swiglu": call.get("swiglu", False)}
    if call.get("norm"):
        kw["norm"] = norm
    if call.get("residual"):
        kw["residual"] = torch.randn(1, N, device=ENV.device, dtype=DT)  # out is another buffer: the same traffic
    out = torch.empty(1, N, device=ENV.device, dtype=torch.float32 if call.get("logits") else DT)
    ref = L.quantized_decode_gemv_ref(
        x.float(), w, **{k: v.float() if torch.is_tensor(v) else v for k, v in kw.items()}
    )
    return (lambda s: L.quantized_decode_gemv(x, w, out=out, schedule=s, **kw, **EARLY)), ref, w


def sweep_shape(label, N, K, rows, call):
    fn, ref, w = shape_call(N, K, rows, call)
    nbytes = L.w4a16_bytes(1, rows, K, G)
    copy = gtime(copy_fn(nbytes))
    say(f"{label} ({N}, {K}) int4 g{G} | {nbytes / 1e6:.1f} MB | copy {fmt(copy)}")
    table = L.FUSED_GEMV_SCHEDULES.get((4, N, K), L.FUSED_GEMV_SCHEDULES[(4, None)])
    table = table._replace(BLOCK_K=max(table.BLOCK_K, G))  # as fused_gemv_schedule does
    saved = L.FUSED_INT4_KERNEL
    try:
        # SwiGLU reads each row's up row too: its candidates have half the rows (as many in each thread)
        stream = [s._replace(BLOCK_N=max(1, s.BLOCK_N // 2)) if call.get("swiglu") else s for s in STREAM]
        for kernel, s in [("groups", table)] + [("pipe", s) for s in dict.fromkeys(stream)]:
            if late(110):
                say(f"{label} | {kernel} | {s} | SKIPPED (time budget)")
                continue
            L.FUSED_INT4_KERNEL = kernel
            try:
                y = fn(s).float()
                err = float((y - ref).abs().max())
                tol = 2e-2 * float(ref.abs().max()) + 1e-3
                if not math.isfinite(err) or err > tol:
                    say(f"{label} | {kernel} | {s} | FAIL max error {err:.3g} (tolerance {tol:.3g})")
                    continue
                ms = gtime(lambda s=s: fn(s))
                if ms is None:
                    say(f"{label} | {kernel} | {s} | ran, max error {err:.2g}")
                    ms = 1.0  # the CPU: a placeholder so that the summary runs end to end
                else:
                    was = GROUPS_MS.get((N, K))
                    say(f"{label} | {kernel} | {s} | {fmt(ms)} | {nbytes / ms / 1e6:6.0f} GB/s | "
                        f"{100 * copy / ms:5.1f}% copy | x{was / ms if was else float('nan'):5.2f} groups")  # fmt: skip
                if kernel == "groups":
                    GROUPS_MS[N, K] = ms
                    continue
                if not call.get("swiglu"):
                    SCORES.setdefault(s, {})[label] = ms
                if (N, K) not in BEST or ms < BEST[N, K][0]:
                    BEST[N, K] = (ms, s, label)
            except Exception as e:  # noqa: BLE001
                say(f"{label} | {kernel} | {s} | ERROR {first_line(e)}")
    finally:
        L.FUSED_INT4_KERNEL = saved


def part_c(int4, cache, token, pos):
    say("== C. the int4 step with FUSED_INT4_KERNEL = 'pipe' and part A's winners in FUSED_PIPE_SCHEDULES")
    saved, table = L.FUSED_INT4_KERNEL, dict(L.FUSED_PIPE_SCHEDULES)
    try:
        L.FUSED_INT4_KERNEL = "pipe"
        for key, (_ms, s, _label) in BEST.items():
            L.FUSED_PIPE_SCHEDULES[key] = s
        time_step(f"int4 g{G} pipe, winners", lambda: L.quantized_decode_step(int4, token, pos, cache))
    finally:
        L.FUSED_INT4_KERNEL = saved
        L.FUSED_PIPE_SCHEDULES.clear()
        L.FUSED_PIPE_SCHEDULES.update(table)


def summary():
    say("== the edits (solutions/12_quantization.ipynb, the export cell with FUSED_STREAM_SCHEDULES; then "
        "`python -m utils.notebooks`)")  # fmt: skip
    for (N, K), (ms, s, label) in BEST.items():
        was = GROUPS_MS.get((N, K))
        gain = f" (groups at its table row {was * 1e3:.2f} us: x{was / ms:.2f})" if was and not CPU else ""
        say(f"{label} ({N}, {K}): pipe {s} {fmt(None if CPU else ms)}{gain}  -> EDIT: "
            f"FUSED_PIPE_SCHEDULES[({N}, {K})] = {s!r},")  # fmt: skip
    best = {}
    for per in SCORES.values():
        for label, ms in per.items():
            best[label] = min(best.get(label, float("inf")), ms)
    full = {s: per for s, per in SCORES.items() if len(per) == len(best)}
    if full and not CPU:  # the default row: the best geometric mean of time / the shape's best
        gm = {s: math.exp(sum(math.log(per[k] / best[k]) for k in per) / len(per)) for s, per in full.items()}
        s = min(gm, key=gm.get)
        say(f"pipe default (geometric mean {gm[s]:.2f}x the best per shape over the {len(best)} shapes without "
            f"SwiGLU)  -> EDIT: FUSED_PIPE_SCHEDULES[None] = {s!r},")  # fmt: skip
    base, groups, stream = STEP.get("bf16"), STEP.get(f"int4 g{G} groups"), STEP.get(f"int4 g{G} stream")
    pipe, winners = STEP.get(f"int4 g{G} pipe"), STEP.get(f"int4 g{G} pipe, winners")
    if all(isinstance(ms, float) for ms in (base, groups, stream, pipe)):
        after = f"; pipe with the winners {winners:.4f} ms (x{base / winners:.2f})" if winners else ""
        say(f"decode step int4 g{G}: groups {groups:.4f} ms (x{base / groups:.2f} bf16), stream {stream:.4f} ms "
            f"(x{base / stream:.2f}), pipe as set {pipe:.4f} ms (x{base / pipe:.2f}){after}")  # fmt: skip
        fastest = min(pipe, winners or pipe)
        say("-> EDIT: FUSED_INT4_KERNEL = 'pipe'" if fastest < min(groups, stream) else "-> keep FUSED_INT4_KERNEL")
    say(f"total {time.time() - T0:.0f} s")


state = None
try:
    state = part_b()
except Exception as e:  # noqa: BLE001
    say(f"part B stopped: {first_line(e)}")
save()
try:
    part_a()
except Exception as e:  # noqa: BLE001
    say(f"part A stopped: {first_line(e)}")
save()
if state is not None and SHAPES:
    try:
        part_c(*state)
    except Exception as e:  # noqa: BLE001
        say(f"part C stopped: {first_line(e)}")
state = None
summary()
save()
