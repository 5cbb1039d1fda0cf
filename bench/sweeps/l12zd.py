"""Lesson 12 sweep zd (issue 15): the int4 GEMV's dots in packed bf16 arithmetic, by inline PTX.

The stream kernels spend, per code, an AND (the code and 2**23's exponent), a subtraction and an fp32 multiply-add
(_pick): about 3.4 instructions a code before loads and addresses. Packed bf16 pairs halve that: one LOP3 puts two
codes of a word (bits 0-3 and 16-19 after a shift) under bf16's exponent of 128 (0x4300: 128 + q, exact), one
``sub.rn.bf16x2`` takes 128 + z away (q - z, exact), one ``fma.rn.bf16x2`` multiplies by x's matching pair and adds:
per word of eight codes 3 shifts, 4 LOP3, 4 subtractions, 4 multiply-adds and 3 instructions to add the pair's two
halves in fp32, about 2.25 a code. The cost: each product and the four-term sums of a word are rounded to bf16
(8 bits), where the fp32 dots are exact; the words' sums are added in fp32 as before. Sweeps n (22 % fewer
instructions, no gain) and o (the loads alone 16-22 us at Llama-3-8B's projections, with the dots 23-34) left open
whether halving them pays. This measures it:

- A. a probe of the pipelined stream loop ("pipe", M = 1, K whole steps) with MATH 0 (the lesson's fp32 dots) or
  1 (bf16x2), and LOADS 1 (as the lesson) or 0 (W's first step loaded once and varied each step by an XOR: the
  compute alone), at tiles, at Llama-3-8B's up / down and Llama-3.2-1B's up / down projections; each MATH checked
  against the fp32 reference before it is timed; against a copy of the same bytes and the table's kernel.
- B. the batch-1 decode step (random weights, 640 tokens of cache, CUDA graph) at TinyLlama-1.1B's,
  Llama-3.2-1B's and Llama-3-8B's shapes: bf16 (lesson 08), int4 as set, int4 with a copy of the lesson's
  ``w4a16_decode_stream_kernel`` (made from its source at run time: its two calls of the dots replaced) with the
  bf16x2 dots, "stream" and "pipe", a few FUSED_STREAM_SCHEDULES[None] rows at Llama-3-8B's; logits compared.

Run from the repo root: ``PYTHONPATH=$PWD OUT=$OUT python3 bench/sweeps/l12zd.py`` on the GPU (about 6 minutes;
``--a`` / ``--b`` one part only), ``PYTHONPATH=$PWD python3 bench/sweeps/l12zd.py --cpu`` under the interpreter
(tiny shapes, the fp32 dots only: no PTX there; a smoke test of the script, no timings).
"""

import inspect
import os
import sys
import time

T0 = time.time()
CPU = "--cpu" in sys.argv
if CPU:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

import utils  # noqa: E402
from bench.sweeps.kit import Log, edited, gtime, module_from  # noqa: E402
from lessons import l08_llama_model as L8  # noqa: E402
from lessons import l12_quantization as L  # noqa: E402
from lessons.l12_quantization import _stream_word_sums, _x_by_code_and_sum  # noqa: E402

ENV = utils.mode.current()
say = Log("l12zd")
BUDGET_A, BUDGET_S = 170, 370
GS = L8.GemvSchedule

# one word (8 codes, code s at bits 4s..4s+3) times x's four pairs (x[8j+s], x[8j+s+4]), s = 0..3; $6 = the
# bf16 pair (128 + z, 128 + z); out: the fp32 sum of the eight (q - z) x
WORD_DOT_PTX = """{
.reg .b32 t, d0, d1, d2, d3, s, a, b;
lop3.b32 d0, $1, 0x000F000F, 0x43004300, 0xEA;
shr.u32 t, $1, 4;
lop3.b32 d1, t, 0x000F000F, 0x43004300, 0xEA;
shr.u32 t, $1, 8;
lop3.b32 d2, t, 0x000F000F, 0x43004300, 0xEA;
shr.u32 t, $1, 12;
lop3.b32 d3, t, 0x000F000F, 0x43004300, 0xEA;
sub.rn.bf16x2 d0, d0, $6;
sub.rn.bf16x2 d1, d1, $6;
sub.rn.bf16x2 d2, d2, $6;
sub.rn.bf16x2 d3, d3, $6;
mul.rn.bf16x2 s, d0, $2;
fma.rn.bf16x2 s, d1, $3, s;
fma.rn.bf16x2 s, d2, $4, s;
fma.rn.bf16x2 s, d3, $5, s;
shl.b32 a, s, 16;
and.b32 b, s, 0xFFFF0000;
add.f32 $0, a, b;
}"""
# MATH 2: the same with two chains of two products a half (their sums added in fp32): one rounding fewer in each
# chain, four instructions more a word (an emulation in fp64 on the CPU, with the output rounded to bf16, put the
# four-product chains up to 1.19x the lesson's check's tolerance, chains of two 0.92x, single products rounded to bf16 and summed in fp32 0.77x)
WORD_DOT2_PTX = WORD_DOT_PTX.replace(
    """fma.rn.bf16x2 s, d2, $4, s;
fma.rn.bf16x2 s, d3, $5, s;
shl.b32 a, s, 16;
and.b32 b, s, 0xFFFF0000;
add.f32 $0, a, b;""",
    """mul.rn.bf16x2 d2, d2, $4;
fma.rn.bf16x2 d2, d3, $5, d2;
shl.b32 a, s, 16;
and.b32 b, s, 0xFFFF0000;
add.f32 t, a, b;
shl.b32 a, d2, 16;
and.b32 b, d2, 0xFFFF0000;
add.f32 t, t, a;
add.f32 $0, t, b;""",
)
assert WORD_DOT2_PTX != WORD_DOT_PTX
_PTX = tl.constexpr(WORD_DOT_PTX)
_PTX2 = tl.constexpr(WORD_DOT2_PTX)


@triton.jit
def _x_pairs(xk, GROUPS: tl.constexpr, WORDS: tl.constexpr):
    """x's BLOCK_K numbers as bf16 pairs for the words of a step: four (GROUPS, WORDS) int32, pair s holding
    x[8 j + s] in its low half and x[8 j + 4 + s] in its high half (the codes a LOP3 takes together)."""
    b = xk.to(tl.bfloat16).to(tl.int16, bitcast=True).to(tl.int32) & 0xFFFF
    lo, hi = tl.split(tl.permute(tl.reshape(b, (GROUPS, WORDS, 2, 4)), (0, 1, 3, 2)))  # x[8j + s], x[8j + 4 + s]
    p = lo | (hi << 16)  # (GROUPS, WORDS, 4)
    e, o = tl.split(tl.reshape(p, (GROUPS, WORDS, 2, 2)))  # s = 2 u + v
    p0, p2 = tl.split(e)
    p1, p3 = tl.split(o)
    return p0, p1, p2, p3


@triton.jit
def _ptx_word_sums(word, p0, p1, p2, p3, zero, scale, MATH: tl.constexpr = 1):
    """Σ (q - z) x s over each word of a (BLOCK_N, GROUPS, WORDS) tile, the eight products in bf16 pairs (MATH 1:
    chains of four products, 2: of two)."""
    zb = (zero.to(tl.int32) * 65537) | 0x43004300  # (128 + z, 128 + z) as a bf16 pair
    args = [word, p0[None], p1[None], p2[None], p3[None], zb[:, :, None]]
    if MATH == 1:
        t = tl.inline_asm_elementwise(_PTX, "=r,r,r,r,r,r,r", args, dtype=tl.float32, is_pure=True, pack=1)
    else:
        t = tl.inline_asm_elementwise(_PTX2, "=r,r,r,r,r,r,r", args, dtype=tl.float32, is_pure=True, pack=1)
    return t * scale.to(tl.float32)[:, :, None]


@triton.jit
def _x_math(xk, GROUPS: tl.constexpr, WORDS: tl.constexpr, MATH: tl.constexpr):
    """_x_by_code_and_sum's nine values (MATH 0), or the four pairs in the first four places (MATH 1, 2)."""
    if MATH == 0:
        x0, x1, x2, x3, x4, x5, x6, x7, x_sum = _x_by_code_and_sum(xk, GROUPS, WORDS)
    else:
        x0, x1, x2, x3 = _x_pairs(xk, GROUPS, WORDS)
        x4, x5, x6, x7, x_sum = x0, x0, x0, x0, x0
    return x0, x1, x2, x3, x4, x5, x6, x7, x_sum


@triton.jit
def _sums_math(MATH: tl.constexpr, word, x0, x1, x2, x3, x4, x5, x6, x7, x_sum, scale, zero):
    if MATH == 0:
        return _stream_word_sums(word, x0, x1, x2, x3, x4, x5, x6, x7, x_sum, scale, zero)
    else:
        return _ptx_word_sums(word, x0, x1, x2, x3, zero, scale, MATH)


@triton.jit
def probe(x_ptr, packed_ptr, scale_ptr, zero_ptr, out_ptr, N, K, stride_pn, stride_sn, GROUP_SIZE: tl.constexpr,
          BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PIPE: tl.constexpr, MATH: tl.constexpr,
          LOADS: tl.constexpr):  # fmt: skip
    GROUPS: tl.constexpr = BLOCK_K // GROUP_SIZE
    WORDS: tl.constexpr = GROUP_SIZE // 8
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_n = offs_n < N
    rows_n = tl.minimum(offs_n, N - 1).to(tl.int64)
    offs_g = tl.arange(0, GROUPS)
    offs_k = tl.arange(0, BLOCK_K)
    cols = offs_g[:, None] * WORDS + tl.arange(0, WORDS)[None, :]
    p_tile = packed_ptr + rows_n[:, None, None] * stride_pn + cols[None, :, :]
    s_tile = rows_n[:, None] * stride_sn + offs_g[None, :]
    acc = tl.zeros((BLOCK_N, GROUPS, WORDS), tl.float32)
    word0 = tl.load(p_tile)
    groups = K // GROUP_SIZE
    for g0 in tl.range(0, groups, GROUPS, num_stages=PIPE):
        if LOADS:
            word = tl.load(p_tile + g0 * WORDS)
        else:
            word = word0 ^ g0  # the compute alone: W's first step, varied so that nothing is hoisted
        scale = tl.load(scale_ptr + s_tile + g0)
        zero = tl.load(zero_ptr + s_tile + g0)
        xk = tl.load(x_ptr + g0 * GROUP_SIZE + offs_k).to(tl.float32)
        x0, x1, x2, x3, x4, x5, x6, x7, x_sum = _x_math(xk, GROUPS, WORDS, MATH)
        acc += _sums_math(MATH, word, x0, x1, x2, x3, x4, x5, x6, x7, x_sum, scale, zero)
    y = tl.sum(tl.sum(acc, axis=2), axis=1)
    tl.store(out_ptr + offs_n, y, mask=mask_n)


def late(limit):
    return time.time() - T0 > limit


def us(ms):
    return "   n/a  " if ms is None else f"{ms * 1e3:8.2f} us"


def first_line(e):
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0][:160] if text else ''}"


if CPU:
    DT, G = torch.float32, 32
    SHAPES = {"tiny": (24, 512)}
    TILES = [(4, 256, 2, 2)]
    MATHS = (0,)
else:
    DT, G = torch.bfloat16, 128
    SHAPES = {"8B up": (14336, 4096), "8B down": (4096, 14336), "1B up": (8192, 2048), "1B down": (2048, 8192)}
    TILES = [(8, 512, 4, 3), (4, 1024, 2, 3), (8, 1024, 2, 3), (16, 1024, 2, 3), (8, 2048, 2, 3)]
    MATHS = (0, 1, 2)


def part_a():
    say("== A. GEMV probe, M = 1: shape | (BLOCK_N, BLOCK_K, warps, PIPE) | MATH | LOADS | time | % copy | x table | "
        "registers, spills")  # fmt: skip
    for label, (N, K) in SHAPES.items():
        if late(BUDGET_A):
            say(f"{label}: SKIPPED (time budget)")
            continue
        torch.manual_seed(0)
        w = torch.randn(N, K, device=ENV.device, dtype=DT) / K**0.5
        w4 = L.quantize_int4_ref(w, G)
        words = w4.packed.view(torch.int32)
        x = torch.randn(1, K, device=ENV.device, dtype=DT)
        nbytes = L.w4a16_bytes(1, N, K, G)
        src = torch.empty(max(nbytes // 2, 1), dtype=torch.int8, device=ENV.device)
        dst = torch.empty_like(src)
        copy_ms = gtime(lambda: dst.copy_(src))
        ref = L.wxa16_ref(x.float(), w4)[0]
        table_ms = gtime(lambda: L.w4a16_fast(x, w4))
        say(f"{label} ({N}, {K}), {nbytes / 1e6:.1f} MB: copy of as many bytes {us(copy_ms)}, the table's kernel "
            f"{us(table_ms)} ({L.fast_schedule(4, 1, N, K, G)})")  # fmt: skip
        out = torch.empty(N, device=ENV.device, dtype=torch.float32)
        for bn, bk, nw, pipe in TILES:
            if bk > K:
                continue
            for math_ in MATHS:
                for loads in (1, 0):
                    if late(BUDGET_A):
                        break

                    def run(bn=bn, bk=bk, nw=nw, pipe=pipe, math_=math_, loads=loads):
                        return probe[(triton.cdiv(N, bn),)](x, words, w4.scale, w4.zero, out, N, K, words.stride(0),
                                                            w4.scale.stride(0), GROUP_SIZE=G, BLOCK_N=bn, BLOCK_K=bk,
                                                            PIPE=pipe, MATH=math_, LOADS=loads, num_warps=nw,
                                                            num_stages=1)  # fmt: skip

                    tag = f"{label} | {(bn, bk, nw, pipe)} | {math_} | {loads}"
                    try:
                        k = run()
                        if loads:
                            err = float((out - ref).norm() / ref.norm())
                            if not err < (1e-4 if math_ == 0 else 1e-2):
                                say(f"{tag} | WRONG: {err:.2e} from the fp32 reference")
                                continue
                        ms = gtime(run)
                    except Exception as e:  # noqa: BLE001
                        say(f"{tag} | ERROR {first_line(e)}")
                        continue
                    regs = f"{getattr(k, 'n_regs', '?')} regs, {getattr(k, 'n_spills', '?')} spills"
                    if ms is None:
                        say(f"{tag} | ran | {regs}")
                        continue
                    note = f" | err {err:.1e}" if loads else ""
                    say(f"{tag} | {us(ms)} | {100 * copy_ms / ms:5.1f}% copy | x{table_ms / ms:5.2f} | {regs}{note}")
        say(f"  ({time.time() - T0:.0f} s)")
        if not CPU:
            torch.cuda.empty_cache()


def ptx_decode_kernel(math_):
    """A copy of the lesson's w4a16_decode_stream_kernel with the bf16x2 dots (MATH = 1), made from its source in
    a module of its own (Triton reads a kernel's source from its file)."""
    src = inspect.getsource(L.w4a16_decode_stream_kernel.fn)
    edits = [
        ("def w4a16_decode_stream_kernel(", "def w4a16_decode_stream_ptx_kernel(", 1),
        ("    PDL: tl.constexpr = 0,  # as w4a16_decode_kernel's\n):",
         f"    PDL: tl.constexpr = 0,  # as w4a16_decode_kernel's\n    MATH: tl.constexpr = {math_},\n):", 1),
        ("= _x_by_code_and_sum(xk, GROUPS, WORDS)", "= _x_math(xk, GROUPS, WORDS, MATH)", 2),
        ("_stream_word_sums(", "_sums_math(MATH, ", 4),
    ]  # fmt: skip
    src = edited(src, edits)
    helpers = "\n\n".join(inspect.getsource(f.fn) for f in (_x_pairs, _ptx_word_sums, _x_math, _sums_math))
    text = (
        "import triton\nimport triton.language as tl\n"
        "from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait\n"
        "from lessons.l12_quantization import _decode_epilogue, _rope_epilogue, _stream_word_sums, "
        "_x_by_code_and_sum\n\n"
        f"_PTX = tl.constexpr({WORD_DOT_PTX!r})\n_PTX2 = tl.constexpr({WORD_DOT2_PTX!r})\n\n\n{helpers}\n\n\n{src}"
    )
    return module_from(text, f"l12zd_decode{math_}").w4a16_decode_stream_ptx_kernel


def model_args(name):
    from bench.common import LLAMA_SHAPES

    if CPU:
        return L8.ModelArgs(vocab_size=100, n_layers=2, dim=256, n_heads=4, n_kv_heads=2, ffn_dim=256,
                            tie_embeddings=False)  # fmt: skip
    if name == "Llama-3-8B":
        return L8.ModelArgs(vocab_size=128256, n_layers=32, dim=4096, n_heads=32, n_kv_heads=8, ffn_dim=14336,
                            rope_theta=500000.0, tie_embeddings=False)  # fmt: skip
    return L8.ModelArgs(**LLAMA_SHAPES[name])


def part_b():
    from bench.common import random_llama

    variants = {} if CPU else {m: ptx_decode_kernel(m) for m in (1, 2)}
    original = L.w4a16_decode_stream_kernel
    max_len, context = (24, 16) if CPU else (768, 640)
    say(f"== B. decode step, B=1, context {context}, CUDA graph: model | variant | time | tokens/s | x bf16")
    for name in ("Llama-3-8B", "TinyLlama-1.1B", "Llama-3.2-1B") if not CPU else ("tiny",):
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

        def int4_step():
            return L.quantized_decode_step(int4, token, pos, cache)

        step("bf16", lambda: L8.decode_step(model, token, pos, cache, L8.TRITON_DECODE))
        saved = L.FUSED_INT4_KERNEL, L.FUSED_STREAM_SCHEDULES[None]
        try:
            for kind in ("stream", "pipe"):
                L.FUSED_INT4_KERNEL = kind
                L.clear_schedule_cache()
                L.w4a16_decode_stream_kernel = original
                step(f"int4 {kind} fp32 dots", int4_step)
                for m, variant in variants.items():
                    L.w4a16_decode_stream_kernel = variant
                    step(f"int4 {kind} bf16x2 dots {m}", int4_step)
                    a, b = logits.get(f"int4 {kind} bf16x2 dots {m}"), logits.get(f"int4 {kind} fp32 dots")
                    ref = logits.get("bf16")
                    if a is not None and b is not None and ref is not None:
                        say(f"{name} | check {kind} {m}: bf16x2 vs fp32 dots' logits "
                            f"{float((a - b).norm() / b.norm()):.2e} apart; against bf16's: "
                            f"{float((a - ref).norm() / ref.norm()):.2e} and {float((b - ref).norm() / ref.norm()):.2e};"
                            f" same argmax as fp32 dots {bool(a.argmax(-1).eq(b.argmax(-1)).all())}")  # fmt: skip
            if name == "Llama-3-8B" and variants:
                L.FUSED_INT4_KERNEL = "stream"
                L.w4a16_decode_stream_kernel = variants[2]
                for s in (GS(16, 1024, 2, 3), GS(8, 2048, 2, 3), GS(8, 1024, 1, 3), GS(16, 2048, 2, 2),
                          GS(4, 1024, 1, 3), GS(8, 4096, 4, 2)):  # fmt: skip
                    L.FUSED_STREAM_SCHEDULES[None] = s
                    L.clear_schedule_cache()
                    step(f"int4 stream bf16x2 dots 2, None row {tuple(s)}", int4_step)
        finally:
            L.FUSED_INT4_KERNEL, L.FUSED_STREAM_SCHEDULES[None] = saved
            L.w4a16_decode_stream_kernel = original
            L.clear_schedule_cache()
        model.decoders.clear()
        del model, cache, int4
        if not CPU:
            torch.cuda.empty_cache()
        say(f"  ({time.time() - T0:.0f} s)")


say(f"lesson 12 sweep zd (int4 dots in bf16 pairs) on {ENV.gpu_name if ENV.is_gpu else 'CPU (interpreter)'}, "
    f"torch {torch.__version__}, triton {triton.__version__}, {ENV.sm_count} SMs")  # fmt: skip
if "--b" not in sys.argv:
    part_a()
if "--a" not in sys.argv:
    part_b()
say(f"total {time.time() - T0:.0f} s")
