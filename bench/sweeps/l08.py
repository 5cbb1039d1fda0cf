"""Lesson 08 sweep: flash-decoding's schedule, the batch-1 decode GEMV, and the whole decode step fused vs unfused.

Run from the repo root (branch wt-l08-s5 merged): ``PYTHONPATH=$PWD python3 bench/sweeps/l08.py`` on the GPU (< 150 s),
``PYTHONPATH=$PWD python3 bench/sweeps/l08.py --cpu`` under the interpreter (tiny shapes, no timings).
``--llama32`` (added 2026-11-28): parts B and C at Llama-3.2-1B's shapes (qkv 3072 x 2048, gate/up 8192, down
2048 x 8192, head 128256; 16 layers, 8 KV heads) instead of TinyLlama's; its output goes to sweep_l08-llama32.txt.

Every time here is the GPU's: the call captured in a CUDA graph (bench.common.graphed), the replay timed by
triton.testing.do_bench, which clears L2 before each repetition (so an 8 MB cache is read from HBM, not L2).
``copy`` = a torch copy of the same number of bytes (read + write = the op's bytes), in a graph, timed the same
way; ``% copy`` = copy ms / candidate ms. Each candidate is compared with the reference first (FAIL: max error).
Order of the run: part C first (the figure that matters most), then A (skipped past 100 s), then B (past 135 s);
the summary ("== best per shape") always prints, with the EDIT lines.

Part A, decode attention (lessons.l08_llama_model.decode_attention with schedule=DecodeSchedule(...)) against
torch SDPA on the same cache, context 640 and 8192, B = 1 and 8, heads 32/4 D=64 and 32/8 D=128.
Candidate = (BLOCK_N, PROGRAMS_PER_SM, MIN_BLOCK_N, num_warps, num_stages); "old" = the schedule before this
round (64 keys, 2 programs per SM, no shrinking, 4 warps, 3 stages).
  -> edit: DECODE_ATTENTION_SCHEDULES[D] = DecodeSchedule(...) in solutions/08_llama_model.ipynb (the export cell
     with ``def decode_split``), then ``make notebooks``.
Part B, decode_gemv (B = 1) as a plain product (one compile per candidate, shared by the shapes; w13 as its 2 F
rows) against cuBLAS x @ w.T, then the best candidate called as the fused step calls it (qkv with the norm, wo +
residual, gate/up with norm and SwiGLU, down + residual, LM head with the norm into fp32).
Candidate = (BLOCK_N, BLOCK_K, num_warps, num_stages), num_stages >= 2 = the next K step prefetched into
registers (PREFETCH), 1 = none; the first is the table's None row.
  -> edit: DECODE_GEMV_SCHEDULES[(N, K)] = GemvSchedule(...) (key printed; None = every other shape) in the export
     cell with ``def decode_gemv``.
Part C, the decode step (TinyLlama-1.1B shape, random weights, B = 1, 640 tokens in the cache, CUDA graph):
fused (the defaults) vs the unfused step (cuBLAS matmuls, the same attention), and each with the old attention
schedule, against a copy of decode_bytes.
  -> edit: USE_TRITON_GEMV = False in the ``def decode_gemv`` cell if "unfused" beats "fused".
"""

import math
import os
import sys
import time

T0 = time.time()
CPU = "--cpu" in sys.argv
LLAMA32 = "--llama32" in sys.argv  # 2026-11-28: parts B and C at Llama-3.2-1B's shapes instead of TinyLlama's
if CPU:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import utils  # noqa: E402
from lessons import l08_llama_model as L  # noqa: E402
from lessons.l07_llm_layer import Weights  # noqa: E402

ENV = utils.mode.current()
LINES = []
BUDGET_S = 135
DS, GS = L.DecodeSchedule, L.GemvSchedule


def say(line=""):
    print(line, flush=True)
    LINES.append(line)


def save():
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "sweep_l08-llama32.txt" if LLAMA32 else "sweep_l08.txt"), "w") as f:
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
    src = torch.empty(max(nbytes // 4, 1), dtype=torch.int16, device=ENV.device)
    dst = torch.empty_like(src)
    return lambda: dst.copy_(src)


def fmt(ms):
    return "   n/a  " if ms is None else f"{ms * 1e3:8.2f} us"


def maxerr(a, b):
    return float((a.float() - b.float()).abs().max())


if CPU:
    DTYPE, TOL = torch.float32, 1e-4
    ATT_SHAPES = [(1, 4, 2, 16, 40), (2, 4, 1, 32, 70)]
    GEMV_SHAPES = {"qkv": (40, 64), "wo": (64, 64), "w13": (48, 64), "w2": (64, 48), "lm_head": (100, 64)}
    ARGS = L.ModelArgs(vocab_size=100, n_layers=2, dim=64, n_heads=4, n_kv_heads=2, ffn_dim=48, tie_embeddings=False)
    MAX_LEN, CONTEXT = 24, 16
else:
    DTYPE, TOL = torch.bfloat16, 3e-2
    ATT_SHAPES = [(B, 32, KV, D, ctx) for KV, D in ((4, 64), (8, 128)) for ctx in (640, 8192) for B in (1, 8)]
    GEMV_SHAPES = {
        "qkv": (2560, 2048),
        "wo": (2048, 2048),
        "w13": (5632, 2048),
        "w2": (2048, 5632),
        "lm_head": (32000, 2048),
    }
    ARGS = L.ModelArgs(vocab_size=32000, n_layers=22, dim=2048, n_heads=32, n_kv_heads=4, ffn_dim=5632,
                       tie_embeddings=False)  # fmt: skip
    if LLAMA32:  # its projections as the step calls them, and the model (bench.common.LLAMA_SHAPES)
        GEMV_SHAPES = {"qkv": (3072, 2048), "wo": (2048, 2048), "w13": (8192, 2048), "w2": (2048, 8192),
                       "lm_head": (128256, 2048)}  # fmt: skip
        ARGS = L.ModelArgs(vocab_size=128256, n_layers=16, dim=2048, n_heads=32, n_kv_heads=8, ffn_dim=8192,
                           rope_theta=500000.0, tie_embeddings=True)  # fmt: skip
    MAX_LEN, CONTEXT = 768, 640  # bench/lesson08.py: prompt 512 + 256 new, the mean context

OLD_ATT = DS(64, 2, 64, 4, 3)
ATT_CANDIDATES = {  # the first of each list is the table's current row
    64: [L.DECODE_ATTENTION_SCHEDULES[64], OLD_ATT, DS(64, 2, 16, 4, 2), DS(64, 8, 16, 4, 2), DS(64, 16, 16, 4, 2),
         DS(32, 4, 16, 4, 2), DS(128, 4, 32, 8, 2), DS(64, 4, 16, 8, 2), DS(64, 4, 16, 4, 3), DS(64, 4, 64, 4, 2)],
    128: [L.DECODE_ATTENTION_SCHEDULES[128], OLD_ATT, DS(64, 2, 16, 4, 2), DS(64, 8, 16, 4, 2), DS(32, 4, 16, 4, 2),
          DS(64, 4, 16, 8, 2), DS(64, 4, 16, 4, 3), DS(32, 8, 16, 4, 3)],
}  # fmt: skip
GEMV_CANDIDATES = [L.DECODE_GEMV_SCHEDULES[None], GS(4, 1024, 4, 1), GS(2, 2048, 4, 2), GS(2, 2048, 4, 1), GS(8, 512, 4, 3), GS(16, 256, 4, 3),
                   GS(8, 1024, 8, 3)]  # fmt: skip

# ---------------------------------------------------------------------------------------------------------------
say(f"lesson 08 sweep on {ENV.gpu_name if ENV.is_gpu else 'CPU (interpreter)'}, torch {torch.__version__}, "
    f"triton {__import__('triton').__version__}, {ENV.sm_count} SMs")  # fmt: skip
# ---------------------------------------------------------------------------------------------------------------
say(f"== C. decode step, B=1, context {CONTEXT}, cache max_len {MAX_LEN}, CUDA graph: variant | time | % copy")
step_ms = {}
try:
    a = ARGS
    C_, F_, H, KV, D, V = a.dim, a.ffn_dim, a.n_heads, a.n_kv_heads, a.head_dim, a.vocab_size
    gen = torch.Generator(device=ENV.device).manual_seed(0)

    def rnd(*shape, scale=None):
        scale = scale or 1 / math.sqrt(shape[-1])
        return (torch.randn(*shape, device=ENV.device, generator=gen) * scale).to(DTYPE)

    def ones_ish(n):
        return (1 + 0.1 * torch.randn(n, device=ENV.device, generator=gen)).to(DTYPE)

    layers = [Weights(ones_ish(C_), rnd((H + 2 * KV) * D, C_), rnd(C_, H * D), ones_ish(C_), rnd(2 * F_, C_),
                      rnd(C_, F_)) for _ in range(a.n_layers)]  # fmt: skip
    model = L.Model(a, rnd(V, C_, scale=1.0), layers, ones_ish(C_), rnd(V, C_))
    cache = L.new_cache(model, 1, MAX_LEN)
    cache.k.normal_()
    cache.v.normal_()
    token = torch.tensor([7], device=ENV.device)
    pos = torch.tensor([CONTEXT], dtype=torch.int32, device=ENV.device)
    nbytes = L.decode_bytes(a, 1, CONTEXT + 1)
    copy = gtime(copy_fn(nbytes))
    say(f"copy of decode_bytes = {nbytes / 1e6:.1f} MB | {fmt(copy)}")
    logits = {}
    variants = {
        "fused (decode_gemv + new attention schedule)": (L.TRITON_DECODE, None),
        "unfused (cuBLAS + new attention schedule)": (L.TRITON_DECODE_UNFUSED, None),
        "fused, old attention schedule": (L.TRITON_DECODE, OLD_ATT),
        "unfused, old attention schedule (the step before this round)": (L.TRITON_DECODE_UNFUSED, OLD_ATT),
    }
    saved = dict(L.DECODE_ATTENTION_SCHEDULES)
    for vname, (ops, att) in variants.items():
        if late():
            say(f"{vname} | SKIPPED (time budget)")
            continue
        try:
            if att is not None:
                L.DECODE_ATTENTION_SCHEDULES.update({d: att for d in saved})
            out = L.decode_step(model, token, pos, cache, ops)  # same pos every time: rewrites the same row
            logits[vname] = out
            ms = gtime(lambda ops=ops: L.decode_step(model, token, pos, cache, ops))
            step_ms[vname] = ms
            if ms is None:
                say(f"{vname} | ran")
            else:
                say(f"{vname} | {fmt(ms)} | {100 * copy / ms:5.1f}% copy | {1e3 / ms:6.0f} tokens/s")
        except Exception as e:  # noqa: BLE001
            say(f"{vname} | ERROR {str(e).splitlines()[0][:150]}")
        finally:
            L.DECODE_ATTENTION_SCHEDULES.clear()
            L.DECODE_ATTENTION_SCHEDULES.update(saved)
    base = logits.get("unfused (cuBLAS + new attention schedule)")
    for vname, lg in logits.items():
        if base is not None and lg is not base:
            rel = float((lg - base).norm() / base.norm())
            same = bool(lg.argmax(-1).eq(base.argmax(-1)).all())
            say(f"check: {vname} vs unfused: relative logit difference {rel:.2e}, same argmax: {same}"
                + ("" if rel < 5e-2 else "  <-- FAIL"))  # fmt: skip
except Exception as e:  # noqa: BLE001
    say(f"decode step | ERROR {str(e).splitlines()[0][:200]}")
model = cache = logits = None
if not CPU:
    torch.cuda.empty_cache()
save()

say("== A. decode attention (graph, L2 cleared): shape | candidate | time | GB/s | % copy | x SDPA")
best_att = {}  # (shape) -> (ms, schedule)
for B, H, KV, D, ctx in ATT_SHAPES:
    shape = f"B={B} H={H} KV={KV} D={D} context={ctx}"
    try:
        q = torch.randn(B, H, D, device=ENV.device, dtype=DTYPE)
        k, v = (torch.randn(B, ctx, KV, D, device=ENV.device, dtype=DTYPE) for _ in range(2))
        lengths = torch.full((B,), ctx, dtype=torch.int32, device=ENV.device)
        ref = L.decode_attention_ref(q.float(), k.float(), v.float(), lengths)
        nbytes = L.decode_attention_bytes(B, H, KV, D, ctx, q.element_size())
        kt, vt = k.transpose(1, 2), v.transpose(1, 2)
        sdpa = None if CPU else gtime(lambda: F.scaled_dot_product_attention(q[:, :, None], kt, vt, enable_gqa=True))
        copy = gtime(copy_fn(nbytes))
        say(f"{shape} | torch SDPA | {fmt(sdpa)} | copy {fmt(copy)}")
    except Exception as e:  # noqa: BLE001
        say(f"{shape} | setup ERROR {str(e).splitlines()[0][:150]}")
        continue
    for s in ATT_CANDIDATES[64 if D <= 64 else 128]:
        if late(100):
            say(f"{shape} | {tuple(s)} | SKIPPED (time budget)")
            continue
        tag = "old" if s == OLD_ATT else ("default" if s == L.decode_schedule(D) else "")
        try:
            out = torch.empty_like(q)
            L.decode_attention(q, k, v, lengths, out=out, schedule=s)
            err = maxerr(out, ref)
            if not err <= TOL:
                say(f"{shape} | {tuple(s)} {tag} | FAIL max error {err:.3g}")
                continue
            ms = gtime(lambda s=s, out=out: L.decode_attention(q, k, v, lengths, out=out, schedule=s))
            splits = L.decode_split(B, KV, ctx, head_dim=D, schedule=s)
            if ms is None:
                say(f"{shape} | {tuple(s)} {tag} | ok (err {err:.2g}) splits={splits}")
                continue
            say(f"{shape} | DecodeSchedule{tuple(s)} {tag} | {fmt(ms)} | {nbytes / ms / 1e6:7.0f} GB/s | "
                f"{100 * copy / ms:5.1f}% copy | x{sdpa / ms:5.2f} SDPA | (n_splits, split_len, BLOCK_N)={splits}")  # fmt: skip
            if shape not in best_att or ms < best_att[shape][0]:
                best_att[shape] = (ms, s, copy, sdpa)
        except Exception as e:  # noqa: BLE001
            say(f"{shape} | {tuple(s)} {tag} | ERROR {str(e).splitlines()[0][:150]}")
save()

# ---------------------------------------------------------------------------------------------------------------
say(
    "== B. decode GEMV at B=1 (plain x @ w.T; w13 as its 2F rows): name (N, K) | candidate | time | GB/s | % copy | x cuBLAS"
)
best_gemv = {}
for name, (N, K) in GEMV_SHAPES.items():
    try:
        swiglu = name == "w13"
        rows = 2 * N if swiglu else N
        x = torch.randn(1, K, device=ENV.device, dtype=DTYPE)
        w = (torch.randn(rows, K, device=ENV.device) / math.sqrt(K)).to(DTYPE)
        norm = (1 + 0.1 * torch.randn(K, device=ENV.device)).to(DTYPE)
        residual = torch.randn(1, N, device=ENV.device, dtype=DTYPE)
        kwargs = {
            "qkv": {"norm": norm},
            "wo": {"residual": residual},
            "w13": {"norm": norm, "swiglu": True},
            "w2": {"residual": residual},
            "lm_head": {"norm": norm},
        }[name]
        out_dtype = torch.float32 if name == "lm_head" else DTYPE
        ref = L.decode_gemv_ref(x.float(), w.float(), eps=1e-5, **{k: (t.float() if torch.is_tensor(t) else t)
                                                                      for k, t in kwargs.items()})  # fmt: skip
        plain_ref = x.float() @ w.float().T
        nbytes = w.numel() * w.element_size()
        cublas = gtime(lambda: x @ w.T)
        copy = gtime(copy_fn(nbytes))
        say(f"{name} ({N}, {K}) | cuBLAS x @ w.T alone | {fmt(cublas)} | copy {fmt(copy)}"
            + ("" if cublas is None else f" | cuBLAS {nbytes / cublas / 1e6:.0f} GB/s, {100 * copy / cublas:.1f}% copy"))  # fmt: skip
    except Exception as e:  # noqa: BLE001
        say(f"{name} ({N}, {K}) | setup ERROR {str(e).splitlines()[0][:150]}")
        continue
    for s in GEMV_CANDIDATES:
        if late():
            say(f"{name} ({N}, {K}) | {tuple(s)} | SKIPPED (time budget)")
            continue
        try:  # the plain product (one compile per schedule, shared by the shapes), checked against x @ w.T
            out = torch.empty(1, rows, device=ENV.device, dtype=DTYPE)
            L.decode_gemv(x, w, out=out, schedule=s)
            err = maxerr(out, plain_ref)
            if not err <= TOL * max(1.0, float(ref.abs().max())):
                say(f"{name} ({N}, {K}) | {tuple(s)} | FAIL max error {err:.3g}")
                continue
            ms = gtime(lambda s=s, out=out: L.decode_gemv(x, w, out=out, schedule=s))
            if ms is None:
                say(f"{name} ({N}, {K}) | {tuple(s)} | ok (err {err:.2g})")
                continue
            say(f"{name} ({N}, {K}) | GemvSchedule{tuple(s)} | {fmt(ms)} | {nbytes / ms / 1e6:7.0f} GB/s | "
                f"{100 * copy / ms:5.1f}% copy | x{cublas / ms:5.2f} cuBLAS")  # fmt: skip
            if name not in best_gemv or ms < best_gemv[name][0]:
                best_gemv[name] = (ms, s, copy, cublas, (N, K))
        except Exception as e:  # noqa: BLE001
            say(f"{name} ({N}, {K}) | {tuple(s)} | ERROR {str(e).splitlines()[0][:150]}")
    if (name in best_gemv or CPU) and not late():  # the best, called as the fused step calls it
        s = best_gemv[name][1] if name in best_gemv else GEMV_CANDIDATES[0]
        try:
            out = torch.empty(1, N, device=ENV.device, dtype=out_dtype)
            L.decode_gemv(x, w, eps=1e-5, out=out, schedule=s, **kwargs)
            err = maxerr(out, ref)
            if not err <= TOL * max(1.0, float(ref.abs().max())):
                say(f"{name} ({N}, {K}) | fused {tuple(s)} | FAIL max error {err:.3g}")
            else:
                ms = gtime(lambda s=s, out=out: L.decode_gemv(x, w, eps=1e-5, out=out, schedule=s, **kwargs))
                if ms is None:
                    say(f"{name} ({N}, {K}) | fused {tuple(s)} | ok (err {err:.2g})")
                else:
                    say(f"{name} ({N}, {K}) | fused as in the step, GemvSchedule{tuple(s)} | {fmt(ms)} | "
                        f"{nbytes / ms / 1e6:7.0f} GB/s | {100 * copy / ms:5.1f}% copy | x{cublas / ms:5.2f} cuBLAS")  # fmt: skip
        except Exception as e:  # noqa: BLE001
            say(f"{name} ({N}, {K}) | fused {tuple(s)} | ERROR {str(e).splitlines()[0][:150]}")
    x = w = None
save()

# ---------------------------------------------------------------------------------------------------------------
say("== best per shape")
for shape, (ms, s, copy, sdpa) in best_att.items():
    say(f"attention {shape}: DecodeSchedule{tuple(s)} {ms * 1e3:.2f} us, {100 * copy / ms:.1f}% copy, "
        f"x{sdpa / ms:.2f} SDPA")  # fmt: skip
for D in sorted({int(sh.split(" D=")[1].split()[0]) for sh in best_att}):  # the schedule whose worst ratio
    # to the best of each shape is the highest, over that head_dim's shapes
    shapes = [sh for sh in best_att if f" D={D} " in sh]
    if not shapes:
        continue
    score = {}
    for line in LINES:
        for sh in shapes:
            if line.startswith(sh + " | DecodeSchedule"):
                cand = line.split(" | ")[1].split(")")[0] + ")"
                ms = float(line.split(" | ")[2].split()[0]) / 1e3
                score.setdefault(cand, {})[sh] = best_att[sh][0] / ms
    full = {c: min(r.values()) for c, r in score.items() if len(r) == len(shapes)}
    if full:
        c = max(full, key=full.get)
        say(f"EDIT: DECODE_ATTENTION_SCHEDULES[{D}] = {c}   (worst over D={D} shapes: {100 * full[c]:.0f}% of best)")
for name, (ms, s, copy, cublas, key) in best_gemv.items():
    say(f"gemv {name} {key}: GemvSchedule{tuple(s)} {ms * 1e3:.2f} us, {100 * copy / ms:.1f}% copy, "
        f"x{cublas / ms:.2f} cuBLAS  -> EDIT: DECODE_GEMV_SCHEDULES[{key}] = GemvSchedule{tuple(s)}"
        + ("  (= the None row already: no edit)" if s == L.DECODE_GEMV_SCHEDULES[None] else ""))  # fmt: skip
bests = {tuple(b[1]) for b in best_gemv.values()}
if len(best_gemv) == len(GEMV_SHAPES) and len(bests) == 1:
    say(f"every shape's best is the same -> EDIT: DECODE_GEMV_SCHEDULES[None] = GemvSchedule{bests.pop()}")
if step_ms and all(v is not None for v in step_ms.values()):
    f, u = (
        step_ms.get("fused (decode_gemv + new attention schedule)"),
        step_ms.get("unfused (cuBLAS + new attention schedule)"),
    )
    if f and u:
        say(f"decode step: fused {f:.3f} ms vs unfused {u:.3f} ms -> "
            + ("keep USE_TRITON_GEMV = True" if f <= u else "EDIT: USE_TRITON_GEMV = False"))  # fmt: skip
say(f"total {time.time() - T0:.0f} s")
save()
