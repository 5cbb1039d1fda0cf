"""Lesson 12 sweep c, 2026-11-23: RoPE and the KV-cache write in the quantized qkv GEMV (branch wt-l12c, issue 15).

Run from the repo root (branch wt-l12c merged): ``PYTHONPATH=$PWD python3 bench/sweeps/l12c.py`` on the GPU (< 150 s),
``PYTHONPATH=$PWD python3 bench/sweeps/l12c.py --cpu`` under the interpreter (tiny shapes, no timings, < 60 s).

Every time here is the GPU's: the call captured in a CUDA graph (bench.common.graphed), the replay timed by
triton.testing.do_bench (L2 cleared before each repetition), as bench/sweeps/l12b.py times it. Every candidate is
compared with its reference first (FAIL: the error; a FAIL is never chosen). One line a candidate, printed as it
finishes; the summary (with the EDIT lines) always prints.

Part A, the decode step: TinyLlama-1.1B's shape (random weights, as bench/sweeps/l12b.py builds it: 22 layers,
hidden 2048, 32 query heads sharing 4, head size 64, MLP 5632, vocabulary 32000, untied head), batch 1, 640 tokens
in the cache (max_len 768), CUDA graph. bf16 with lesson 08's fused step (decode_step, TRITON_DECODE, its
DECODE_FUSIONS: RoPE already in its qkv GEMV) is the baseline; then int4 g128 and int8 (quantize_model, the LM head
quantized too) through lessons.l12_quantization.quantized_decode_step (QUANTIZED_DECODE), each with
QUANTIZED_ROPE_IN_QKV = True (the qkv GEMV turns q and k and writes k and v into the cache: 6 launches a layer) and
False (the qkv GEMV, then lesson 08's rope_kv_write: 7). ms a token, tokens/s, x against bf16 fused (issue 15's
targets: int4 >= 2x, int8 >= 1.5x), x against the same format without the fusion. Checked first: each format's
logits and the cache row written, with against without the fusion (relative difference, same argmax).
  -> edit: QUANTIZED_ROPE_IN_QKV = False in solutions/12_quantization.ipynb (the export cell with
     ``def w4a16_decode_kernel``, next to USE_FUSED_DECODE) only if the summary says so (slower for both formats).
Part B, the qkv projection alone (2560 x 2048, the norm in front, pos 640): quantized_decode_qkv_rope (one launch)
against quantized_decode_gemv + lesson 08's rope_kv_write (two), at the table's schedule (FUSED_GEMV_SCHEDULES's
row for (bits, 2560, 2048): BLOCK_N rows a program = BLOCK_N / 2 pairs) and a few others. Checked against the
unfused pair's q and cache row.
  -> edit: FUSED_GEMV_SCHEDULES[(bits, 2560, 2048)] = GemvSchedule(...) in the same cell (the key printed; it is
     the qkv GEMV's row with or without the fusion), then ``python -m utils.notebooks``: only if the summary's
     EDIT line says it beats the table's row by more than 3 %.
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
        with open(os.path.join(out, "sweep_l12c.txt"), "w") as f:
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


def fmt(ms):
    return "   n/a  " if ms is None else f"{ms * 1e3:8.2f} us"


def first_line(e):
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0][:150] if text else ''}"


@contextlib.contextmanager
def rope_in_qkv(on):
    """QUANTIZED_ROPE_IN_QKV set while the step is run and captured (quantized_decode_step reads it at each call)."""
    saved = L.QUANTIZED_ROPE_IN_QKV
    L.QUANTIZED_ROPE_IN_QKV = on
    try:
        yield
    finally:
        L.QUANTIZED_ROPE_IN_QKV = saved


if CPU:
    DT, G = torch.float32, 32
    ARGS = L8.ModelArgs(vocab_size=100, n_layers=2, dim=64, n_heads=4, n_kv_heads=2, ffn_dim=48, tie_embeddings=False)
    MAX_LEN, CONTEXT = 24, 16
    CANDIDATES = {4: [GS(8, 32, 4, 2), GS(16, 64, 4, 1)], 8: [GS(8, 32, 4, 2), GS(16, 64, 4, 1)]}
else:
    DT, G = torch.bfloat16, 128
    ARGS = L8.ModelArgs(vocab_size=32000, n_layers=22, dim=2048, n_heads=32, n_kv_heads=4, ffn_dim=5632,
                        tie_embeddings=False)  # fmt: skip
    MAX_LEN, CONTEXT = 768, 640  # bench/lesson12.py: prompt 512 + 256 new, the mean context
    CANDIDATES = {  # (BLOCK_N rows = BLOCK_N / 2 pairs, BLOCK_K, num_warps, num_stages); the table's row first
        4: [GS(8, 1024, 4, 2), GS(16, 256, 4, 2), GS(8, 512, 4, 2)],
        8: [GS(8, 512, 4, 2), GS(16, 256, 4, 2), GS(4, 1024, 4, 2)],
    }
C_, V_ = ARGS.dim, ARGS.vocab_size
H_, KV_, D_ = ARGS.n_heads, ARGS.n_kv_heads, ARGS.head_dim
QKV = (H_ + 2 * KV_) * D_
FORMATS = (f"int4 g{G}", "int8")

say(f"lesson 12 sweep c (RoPE + cache write in the quantized qkv GEMV) on "
    f"{ENV.gpu_name if ENV.is_gpu else 'CPU (interpreter)'}, torch {torch.__version__}, triton "
    f"{__import__('triton').__version__}, {ENV.sm_count} SMs")  # fmt: skip


def build_model():
    torch.manual_seed(0)  # the same random weights every run (bench/sweeps/l12b.py's)
    layers = [L7.random_weights(ARGS.layer, DT, ENV.device) for _ in range(ARGS.n_layers)]
    embed = (0.1 * torch.randn(V_, C_, device=ENV.device)).to(DT)
    norm = torch.ones(C_, device=ENV.device, dtype=DT)
    head = (torch.randn(V_, C_, device=ENV.device) / math.sqrt(C_)).to(DT)
    return L8.Model(ARGS, embed, layers, norm, head)


STEP = {}  # "format on/off" -> ms
QKV_MS = {}  # (bits, schedule or "unfused") -> ms
OK = {}  # format -> the check passed


def part_a():
    say(f"== A. decode step, B=1, context {CONTEXT}, cache max_len {MAX_LEN}, CUDA graph: variant | time | tokens/s | "
        f"x bf16 fused | x the same format without RoPE in its qkv GEMV")  # fmt: skip
    model = build_model()
    cache = L8.new_cache(model, 1, MAX_LEN)
    cache.k.normal_()
    cache.v.normal_()
    token = torch.tensor([7], device=ENV.device)
    pos = torch.tensor([CONTEXT], dtype=torch.int32, device=ENV.device)
    try:
        L8.decode_step(model, token, pos, cache, L8.TRITON_DECODE)
        base = gtime(lambda: L8.decode_step(model, token, pos, cache, L8.TRITON_DECODE))
        STEP["bf16"] = base
        say(f"bf16 fused (lesson 08) | {fmt(base)}" + ("" if base is None else f" | {1e3 / base:6.0f} tokens/s"))
    except Exception as e:  # noqa: BLE001
        say(f"bf16 fused (lesson 08) | ERROR {first_line(e)}")
    for name, bits in zip(FORMATS, (4, 8)):
        if late():
            say(f"{name} | SKIPPED (time budget)")
            continue
        m = L.quantize_model(model, bits, G)
        seen = {}
        for on in (False, True):  # the check first: the same logits and cache row with and without the fusion
            with rope_in_qkv(on):
                cache.k[:, :, CONTEXT].zero_()
                cache.v[:, :, CONTEXT].zero_()
                try:
                    logits = L.quantized_decode_step(m, token, pos, cache, L.QUANTIZED_DECODE).float()
                    seen[on] = (logits, cache.k[:, :, CONTEXT].float().clone(), cache.v[:, :, CONTEXT].float().clone())
                except Exception as e:  # noqa: BLE001
                    say(f"{name} rope_in_qkv={on} | ERROR {first_line(e)}")
        if len(seen) < 2:
            continue
        (a, ka, va), (b, kb, vb) = seen[True], seen[False]
        rel = float((a - b).norm() / b.norm())
        rel_k = float((ka - kb).norm() / kb.norm())
        rel_v = float((va - vb).norm() / vb.norm())
        same = bool(a.argmax(-1).eq(b.argmax(-1)).all())
        OK[name] = rel < 1e-2 and rel_k < 1e-2 and rel_v < 1e-2 and same
        say(f"check: {name} with vs without: logits {rel:.2e}, k row {rel_k:.2e}, v row {rel_v:.2e} (relative), "
            f"same argmax: {same}" + ("" if OK[name] else "  <-- FAIL"))  # fmt: skip
        for on in (False, True):
            key = f"{name} {'on' if on else 'off'}"
            if late():
                say(f"{key} | SKIPPED (time budget)")
                continue
            try:
                with rope_in_qkv(on):
                    ms = gtime(lambda m=m: L.quantized_decode_step(m, token, pos, cache, L.QUANTIZED_DECODE))
                STEP[key] = ms
                label = f"{name} QUANTIZED_ROPE_IN_QKV={on}"
                if ms is None:
                    say(f"{label} | ran")
                    continue
                base, off = STEP.get("bf16"), STEP.get(f"{name} off")
                say(f"{label} | {ms:7.4f} ms | {1e3 / ms:6.0f} tokens/s | "
                    f"x{base / ms if base else float('nan'):5.2f} bf16 fused | x{off / ms:5.3f} without")  # fmt: skip
            except Exception as e:  # noqa: BLE001
                say(f"{key} | ERROR {first_line(e)}")
        del m
        if not CPU:
            torch.cuda.empty_cache()
    say(f"  ({time.time() - T0:.0f} s)")


def part_b():
    say(f"== B. the qkv projection ({QKV} x {C_}, norm in front, pos {CONTEXT}), graph: format | candidate | time | "
        f"x unfused (GEMV + rope_kv_write, the table's schedule)")  # fmt: skip
    fake = L8.ModelArgs(vocab_size=1, n_layers=1, dim=H_ * D_, n_heads=H_, n_kv_heads=KV_, ffn_dim=1)
    cos, sin = L8.rope_cache(fake, MAX_LEN, DT)
    W = (torch.randn(QKV, C_, device=ENV.device) / math.sqrt(C_)).to(DT)
    x = torch.randn(1, C_, device=ENV.device, dtype=DT)
    norm = (1 + 0.1 * torch.randn(C_, device=ENV.device)).to(DT)
    pos = torch.tensor([CONTEXT], dtype=torch.int32, device=ENV.device)
    k, v = (torch.randn(1, MAX_LEN, KV_, D_, device=ENV.device, dtype=DT) for _ in range(2))
    q = torch.empty(1, H_, D_, device=ENV.device, dtype=DT)
    for name, bits in zip(FORMATS, (4, 8)):
        if late():
            say(f"{name} | SKIPPED (time budget)")
            continue
        w = L.quantize_int4_ref(W, G) if bits == 4 else L.quantize_int8_ref(W)
        row = L.fused_gemv_schedule(bits, QKV, C_, G if bits == 4 else 1)  # the table's row (as the step takes it)

        def unfused(w=w, row=row):
            qkv = L.quantized_decode_gemv(x, w, norm=norm, schedule=row).view(1, H_ + 2 * KV_, D_)
            return L8.rope_kv_write(qkv, cos, sin, pos, k, v, out=q)

        try:
            q_ref = unfused().float().clone()
            k_ref, v_ref = k[0, CONTEXT].float().clone(), v[0, CONTEXT].float().clone()
            ms = gtime(unfused)
            QKV_MS[(bits, "unfused")] = ms
            say(f"{name} | unfused {row} | {fmt(ms)}")
        except Exception as e:  # noqa: BLE001
            say(f"{name} | unfused | ERROR {first_line(e)}")
            continue
        for s in [row] + [c for c in CANDIDATES[bits] if c != row]:
            if late():
                say(f"{name} | {s} | SKIPPED (time budget)")
                continue
            try:
                k[0, CONTEXT].zero_()
                v[0, CONTEXT].zero_()
                got = L.quantized_decode_qkv_rope(x, w, cos, sin, pos, k, v, norm=norm, out=q, schedule=s).float()
                errs = [float((a - b).abs().max() / (b.abs().max() + 1e-6))
                        for a, b in ((got, q_ref), (k[0, CONTEXT].float(), k_ref), (v[0, CONTEXT].float(), v_ref))]  # fmt: skip
                if not all(math.isfinite(e) and e < 2e-2 for e in errs):
                    say(f"{name} | {s} | FAIL relative errors q, k, v {', '.join(f'{e:.3g}' for e in errs)}")
                    continue
                ms = gtime(lambda w=w, s=s: L.quantized_decode_qkv_rope(x, w, cos, sin, pos, k, v, norm=norm, out=q,
                                                                        schedule=s))  # fmt: skip
                QKV_MS[(bits, s)] = ms
                tag = " (the table's row)" if s == row else ""
                if ms is None:
                    say(f"{name} | fused {s}{tag} | ran, errors {max(errs):.2g}")
                else:
                    un = QKV_MS.get((bits, "unfused"))
                    say(f"{name} | fused {s}{tag} | {fmt(ms)} | x{un / ms if un else float('nan'):5.2f} unfused")
            except Exception as e:  # noqa: BLE001
                say(f"{name} | fused {s} | ERROR {first_line(e)}")
    say(f"  ({time.time() - T0:.0f} s)")


def summary():
    say("== summary (solutions/12_quantization.ipynb, the export cell with QUANTIZED_ROPE_IN_QKV and "
        "FUSED_GEMV_SCHEDULES; then `python -m utils.notebooks`)")  # fmt: skip
    base = STEP.get("bf16")
    gains = {}
    for name in FORMATS:
        on, off = STEP.get(f"{name} on"), STEP.get(f"{name} off")
        if isinstance(on, float) and isinstance(off, float) and OK.get(name):
            gains[name] = off / on
            vs = f" (x{base / on:.2f} / x{base / off:.2f} bf16 fused)" if base else ""
            say(f"decode step {name}: with RoPE in the qkv GEMV {on:.4f} ms, without {off:.4f} ms: x{off / on:.3f}{vs}")
    if len(gains) == len(FORMATS):
        if any(g > 1.0 for g in gains.values()):
            say("-> keep QUANTIZED_ROPE_IN_QKV = True")
        else:
            say("-> EDIT: QUANTIZED_ROPE_IN_QKV = False (slower for both formats)")
    for bits in (4, 8):
        timed = {s: ms for (b, s), ms in QKV_MS.items() if b == bits and s != "unfused" and isinstance(ms, float)}
        if not timed:
            continue
        row = L.fused_gemv_schedule(bits, QKV, C_, G if bits == 4 else 1)
        best = min(timed, key=timed.get)
        if best != row and row in timed and timed[best] < 0.97 * timed[row]:
            say(f"qkv int{bits}: {best} {fmt(timed[best])} vs the table's {row} {fmt(timed[row])}  -> EDIT: "
                f"FUSED_GEMV_SCHEDULES[({bits}, {QKV}, {C_})] = {best!r},")  # fmt: skip
        else:
            say(f"qkv int{bits}: keep the table's {row}")
    say(f"total {time.time() - T0:.0f} s")


for part in (part_a, part_b):
    try:
        part()
    except Exception as e:  # noqa: BLE001
        say(f"{part.__name__} stopped: {first_line(e)}")
    save()
summary()
save()
