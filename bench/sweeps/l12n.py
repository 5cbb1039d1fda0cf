"""Lesson 12 sweep n (issue 15): the int4 stream kernels with the denormal dots (DENORMAL_DOTS), alone and in the
batch-1 decode step, at the 1B shapes and at Llama-3-8B's.

The stream kernels spent three instructions a code (an AND-OR, a subtraction of 2**23, a multiply-add) and, at the
tables' tiles, 4.5 to 8.2 SASS instructions a code in all (sm_90, offline). With the codes read as denormal floats
the AND-OR and the subtraction become one AND: 3.5 at the in-thread tiles (BLOCK_K = 1024 x num_warps). This sweep
times that on the GPU:

- A. the int4 GEMV at M = 1 (w4a16_fast) at five projections: the table's schedule with DENORMAL_DOTS off and on,
  then in-thread candidates with it on ("pipe" and "stream", BLOCK_N 4 / 8 / 16, 1 / 2 / 4 warps, depth 2 and 3;
  split-K 2 where K is long), each checked against the exact path before it is timed; against cuBLAS bf16 and a copy
  of the same bytes, all replayed from CUDA graphs with L2 cleared.
- B. the decode step (random weights, batch 1, 640 tokens of cache, CUDA graph) at TinyLlama-1.1B's, Llama-3.2-1B's
  and Llama-3-8B's shapes: bf16 (lesson 08), int4 with DENORMAL_DOTS off and on, int8; at Llama-3-8B's, the int4
  step also with other rows for FUSED_STREAM_SCHEDULES[None] (its projections have no rows of their own).

Run from the repo root: ``PYTHONPATH=$PWD OUT=$OUT python3 bench/sweeps/l12n.py`` on the GPU (about 6 minutes),
``PYTHONPATH=$PWD python3 bench/sweeps/l12n.py --cpu`` under the interpreter (tiny shapes, no timings). ``--a`` or
``--b``: one part only.
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
from bench.sweeps.kit import Log, gtime  # noqa: E402
from lessons import l08_llama_model as L8  # noqa: E402
from lessons import l12_quantization as L  # noqa: E402

ENV = utils.mode.current()
say = Log("l12n")
BUDGET_A, BUDGET_S = 260, 520  # part A stops taking new candidates at 260 s; part B stops at 520 s
GS = L8.GemvSchedule
FS = L.FastSchedule


def late(limit):
    return time.time() - T0 > limit


def us(ms):
    return "   n/a  " if ms is None else f"{ms * 1e3:8.2f} us"


def first_line(e):
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0][:160] if text else ''}"


class denormal:
    """with denormal(flag): DENORMAL_DOTS set to flag inside."""

    def __init__(self, flag):
        self.flag = flag

    def __enter__(self):
        self.saved, L.DENORMAL_DOTS = L.DENORMAL_DOTS, self.flag

    def __exit__(self, *exc):
        L.DENORMAL_DOTS = self.saved


if CPU:
    DT, G = torch.float32, 32
    SHAPES = {"tiny": (24, 256)}
    WARPS, ROWS = (1, 2), (4, 8)
else:
    DT, G = torch.bfloat16, 128
    SHAPES = {"1B up": (8192, 2048), "1B down": (2048, 8192), "8B up": (14336, 4096), "8B down": (4096, 14336),
              "3.2-1B head": (128256, 2048)}  # fmt: skip
    WARPS, ROWS = (1, 2, 4), (4, 8, 16)

say(f"lesson 12 sweep n (int4: the denormal dots) on {ENV.gpu_name if ENV.is_gpu else 'CPU (interpreter)'}, torch "
    f"{torch.__version__}, triton {__import__('triton').__version__}, {ENV.sm_count} SMs")  # fmt: skip


def candidates(N, K):
    """In-thread tiles (BLOCK_K = 1024 x num_warps, no wider than K's power of two) for "pipe" (depth 2, 3) and
    "stream" (2: words ahead, 3: x too); split-K 2 too where K is long."""
    out = []
    k2 = 1 << (K - 1).bit_length()
    for w in WARPS:
        bk = min(1024 * w, k2) if not CPU else 64 * w
        for bn in ROWS:
            for kind, depths in (("pipe", (2, 3)), ("stream", (2, 3))):
                for st in depths:
                    for split in (1, 2) if K >= 8192 else (1,):
                        out.append(FS(kind, 1, bn, bk, split, w, st))
    return out


def part_a():
    say("== A. int4 GEMV, M = 1, g128, bf16 x (graph, L2 cleared): shape | schedule | denormal | time | GB/s | "
        "% copy | x table exact | x cuBLAS")  # fmt: skip
    for label, (N, K) in SHAPES.items():
        if late(BUDGET_A):
            say(f"{label}: SKIPPED (time budget)")
            continue
        torch.manual_seed(0)
        w = torch.randn(N, K, device=ENV.device, dtype=DT) / K**0.5
        w4 = L.quantize_int4_ref(w, G)
        x = torch.randn(1, K, device=ENV.device, dtype=DT)
        nbytes = L.w4a16_bytes(1, N, K, G)
        src = torch.empty(max(nbytes // 2, 1), dtype=torch.int8, device=ENV.device)
        dst = torch.empty_like(src)
        copy_ms = gtime(lambda: dst.copy_(src))  # a copy reading and writing as many bytes as the GEMV reads
        blas_ms = gtime(lambda: x @ w.T)
        with denormal(False):
            table = L.fast_schedule(4, 1, N, K, G)
            ref = L.w4a16_fast(x, w4, schedule=table).float()
            base = gtime(lambda: L.w4a16_fast(x, w4, schedule=table))
        say(f"{label} ({N}, {K}) {nbytes / 1e6:.1f} MB | copy of {nbytes / 1e6:.1f} MB read+written {us(copy_ms)} | "
            f"cuBLAS bf16 {us(blas_ms)} | table {table} exact {us(base)}")  # fmt: skip

        def row(s, flag, name=None):
            try:
                with denormal(flag):
                    got = L.w4a16_fast(x, w4, schedule=s).float()
                    err = float((got - ref).norm() / ref.norm())
                    if not err < 1e-4:
                        say(
                            f"{label} | {name or s} | {flag} | WRONG: relative difference {err:.2e} from the exact path"
                        )
                        return None
                    ms = gtime(lambda: L.w4a16_fast(x, w4, schedule=s))
            except Exception as e:  # noqa: BLE001
                say(f"{label} | {name or s} | {flag} | ERROR {first_line(e)}")
                return None
            if ms is None:
                say(f"{label} | {name or s} | {flag} | ran (diff {err:.1e})")
                return None
            gbs = nbytes / ms / 1e6
            say(f"{label} | {name or s} | {flag} | {us(ms)} | {gbs:6.0f} GB/s | {100 * copy_ms / ms:5.1f}% copy | "
                f"x{base / ms:5.2f} | x{blas_ms / ms:5.2f} cuBLAS")  # fmt: skip
            return ms

        row(table, True, "table")
        best = None
        for s in candidates(N, K):
            if late(BUDGET_A):
                say(f"{label}: candidates SKIPPED from here (time budget)")
                break
            ms = row(s, True)
            if ms is not None and (best is None or ms < best[0]):
                best = (ms, s)
        if best:
            say(f"-> {label}: best {best[1]} {us(best[0])}, x{base / best[0]:.2f} the table's exact kernel, "
                f"{100 * copy_ms / best[0]:.1f}% of the copy")  # fmt: skip
        say(f"  ({time.time() - T0:.0f} s)")
        if not CPU:
            torch.cuda.empty_cache()


def model_args(name):
    from bench.common import LLAMA_SHAPES

    if CPU:
        return L8.ModelArgs(vocab_size=100, n_layers=2, dim=64, n_heads=4, n_kv_heads=2, ffn_dim=48,
                            tie_embeddings=False)  # fmt: skip
    if name == "Llama-3-8B":
        return L8.ModelArgs(vocab_size=128256, n_layers=32, dim=4096, n_heads=32, n_kv_heads=8, ffn_dim=14336,
                            rope_theta=500000.0, tie_embeddings=False)  # fmt: skip
    return L8.ModelArgs(**LLAMA_SHAPES[name])


def part_b():
    from bench.common import random_llama

    max_len, context = (24, 16) if CPU else (768, 640)
    say(f"== B. decode step, B=1, context {context}, CUDA graph: model | variant | time | tokens/s | x bf16")
    for name in ("TinyLlama-1.1B", "Llama-3.2-1B", "Llama-3-8B") if not CPU else ("tiny",):
        if late(BUDGET_S):
            say(f"{name}: SKIPPED (time budget)")
            continue
        torch.manual_seed(0)
        model = random_llama(model_args(name), DT, ENV.device)
        int4 = L.quantize_model(model, 4, G)
        cache = L8.new_cache(model, 1, max_len)
        cache.k.normal_()
        cache.v.normal_()
        token = torch.tensor([7], device=ENV.device)
        pos = torch.tensor([context], dtype=torch.int32, device=ENV.device)
        times, logits = {}, {}

        def step(key, fn):
            if late(BUDGET_S + 40):
                say(f"{name} | {key} | SKIPPED (time budget)")
                return
            try:
                logits[key] = fn().float()
                ms = gtime(fn)
            except Exception as e:  # noqa: BLE001
                say(f"{name} | {key} | ERROR {first_line(e)}")
                return
            times[key] = ms
            base = times.get("bf16")
            say(f"{name} | {key} | " + ("ran" if ms is None else f"{ms:7.4f} ms | {1e3 / ms:6.0f} tokens/s | "
                                        f"x{base / ms if base else float('nan'):5.2f} bf16"))  # fmt: skip

        step("bf16", lambda: L8.decode_step(model, token, pos, cache, L8.TRITON_DECODE))
        for flag in (False, True):
            with denormal(flag):
                step(
                    f"int4 {L.FUSED_INT4_KERNEL} denormal={flag}",
                    lambda: L.quantized_decode_step(int4, token, pos, cache),
                )
        a, b = (
            logits.get(f"int4 {L.FUSED_INT4_KERNEL} denormal=True"),
            logits.get(f"int4 {L.FUSED_INT4_KERNEL} denormal=False"),
        )
        if a is not None and b is not None:
            rel = float((a - b).norm() / b.norm())
            say(f"{name} | check: denormal vs exact step logits, relative difference {rel:.2e}, same argmax "
                f"{bool(a.argmax(-1).eq(b.argmax(-1)).all())}" + ("" if rel < 1e-3 else "  <-- FAIL"))  # fmt: skip
        if name == "Llama-3-8B" or CPU:
            saved_row, saved_kind = L.FUSED_STREAM_SCHEDULES[None], L.FUSED_INT4_KERNEL
            rows = [GS(4, 1024, 1, 2), GS(8, 1024, 1, 2), GS(8, 1024, 1, 3), GS(4, 2048, 2, 2), GS(8, 2048, 2, 2),
                    GS(8, 2048, 2, 3), GS(16, 1024, 1, 2), GS(4, 4096, 4, 2)]  # fmt: skip
            try:
                for s in rows if not CPU else rows[:1]:
                    L.FUSED_STREAM_SCHEDULES[None] = s
                    L.clear_schedule_cache()
                    step(
                        f"int4 stream denormal, None row {tuple(s)}",
                        lambda: L.quantized_decode_step(int4, token, pos, cache),
                    )
            finally:
                L.FUSED_STREAM_SCHEDULES[None], L.FUSED_INT4_KERNEL = saved_row, saved_kind
                L.clear_schedule_cache()
        del int4
        if not late(BUDGET_S):
            int8 = L.quantize_model(model, 8)
            step("int8", lambda: L.quantized_decode_step(int8, token, pos, cache))
            del int8
        for m in (model,):
            m.decoders.clear()
        del model, cache
        if not CPU:
            torch.cuda.empty_cache()
        say(f"  ({time.time() - T0:.0f} s)")


if "--b" not in sys.argv:
    part_a()
if "--a" not in sys.argv:
    part_b()
say(f"total {time.time() - T0:.0f} s")
