"""Lesson 12 sweep zn, issue 15: the int4 decode kernel with x (and the norm) loaded where the dots use them.

Run from the repo root: ``PYTHONPATH=$PWD python3 bench/sweeps/l12zn.py`` on the GPU (< 150 s); ``--cpu`` runs a
tiny model's steps under the interpreter (nothing timed; the interpreter runs no PTX, so there the patched kernels
take the lesson's path: a smoke test of the script and of the patch). Nothing to edit: on an H100 (session 48,
triton 3.7.1, results/h100-2026-12-07-s48/sweeps/l12zn-triton3.7.1.txt) both patched kernels were slower in the
step, x0.90-0.94 at Llama-3.2-1B's shape and x0.65 at TinyLlama's, with the same logits.

Why (session 48, offline: utils.offline, sm_90, triton 3.7.1, FUSED_STREAM_SCHEDULES's rows at Llama-3.2-1B's
shape, launched early, the packed dots): the decode kernel's loop (no PIPE) runs 8 BAR.SYNC a step at wo, 12 at
down and 16 at gate/up. Its x is one contiguous load a step, and Triton gives that load a layout of its own (8
numbers a thread along K); the packed dots want, in each thread, the four bf16 pairs under that thread's own code
words (the same in every warp), so the pairs cross threads through shared memory, 4 conversions a step. Loading x as
int32 words in place with tl.load does not help (l12zm's docstring: the load still takes a layout of its own), but a
16-byte ld.global.v4 written as inline PTX has no layout of its own: it takes its pointer's, the dots' one. With
that, wo's loop has no barrier left (72 registers against 96), down's 4: its scales and zero points are loads of a
layout of their own too, and ``XW = 2`` loads them the same way (one ld.global a number, in the thread that uses it).

With a norm (qkv, gate/up), each thread multiplies its own x by its own norm weights in fp32 and rounds the product
to bf16 as _x_pairs does, so the dots see the same bits; only Σ x² (for 1/rms) is added in another order, so those
steps' logits may differ from the step as set in the last bits (checked within 5e-2 relative, and said); the steps
without a norm must match bit for bit where only wo and down change.

The "pipe" kernel (PIPE > 1; TinyLlama's rows but wo and the head) loads x through shared memory already (cp.async),
so there x is loaded as int32 words with tl.load, as l12zm does in the GEMV, and read from shared memory in the
dots' layout. The inline loads need x (and the norm) 16-byte aligned and K a multiple of 8: the sweep's steps are
(every tensor torch allocates is; a lesson launcher would check and fall back).

Each variant is timed in the whole int4 step replayed from a CUDA graph (L2 cleared before each repetition), between
two timings of the step as set, two rounds (kit.paired_in_step), at Llama-3.2-1B's and TinyLlama's shapes.
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

import utils  # noqa: E402
from bench.sweeps.kit import (  # noqa: E402
    LESSON12_GLOBALS,
    X_WORDS,
    Log,
    edited,
    module_from,
    on_gpu,
    paired_in_step,
    quantized_decode_steps,
)
from lessons import l12_quantization as L  # noqa: E402

say = Log(f"l12zn-triton{triton.__version__}")
ROUNDS = 2 if on_gpu() else 1

HELPERS = (
    X_WORDS
    + '''
@triton.jit
def _words_at(ptr, k0, K, GROUPS: tl.constexpr, WORDS: tl.constexpr):
    """The 8 numbers of ptr (bf16) under each code word of a step (k0 its first column), as 4 int32 words, each
    thread loading those under its own code words with one 16-byte ld.global.v4 (inline PTX: the load takes its
    pointer's layout, the dots'); 0 past K (K a multiple of 8, ptr 16-byte aligned)."""
    j = tl.arange(0, GROUPS)[:, None] * WORDS + tl.arange(0, WORDS)[None, :]
    k = k0 + 8 * j
    ok = k < K
    u0, u1, u2, u3 = tl.inline_asm_elementwise("ld.global.v4.b32 {$0, $1, $2, $3}, [$4];", "=r,=r,=r,=r,l",
                                               [ptr + tl.where(ok, k, 0)], dtype=(tl.int32,) * 4, is_pure=False,
                                               pack=1)
    return tl.where(ok, u0, 0), tl.where(ok, u1, 0), tl.where(ok, u2, 0), tl.where(ok, u3, 0)


@triton.jit
def _normed_word(u, v, sq):
    """One word of x (two bf16) times the same word of the norm, in fp32, rounded to bf16 as _x_pairs rounds it;
    sq + the two x squared."""
    xa = (u << 16).to(tl.float32, bitcast=True)
    xb = (u & -65536).to(tl.float32, bitcast=True)
    na = (v << 16).to(tl.float32, bitcast=True)
    nb = (v & -65536).to(tl.float32, bitcast=True)
    ba = (xa * na).to(tl.bfloat16).to(tl.int16, bitcast=True).to(tl.int32) & 0xFFFF
    bb = (xb * nb).to(tl.bfloat16).to(tl.int16, bitcast=True).to(tl.int32) & 0xFFFF
    return ba | (bb << 16), sq + xa * xa + xb * xb


@triton.jit
def _xw_pairs(u0, u1, u2, u3, v0, v1, v2, v3, sq, NORM: tl.constexpr):
    """The dots' four pairs from x's words (times the norm's with NORM) and the running Σ x² (GROUPS, WORDS)."""
    if NORM:
        u0, sq = _normed_word(u0, v0, sq)
        u1, sq = _normed_word(u1, v1, sq)
        u2, sq = _normed_word(u2, v2, sq)
        u3, sq = _normed_word(u3, v3, sq)
    p0, p1, p2, p3 = _pairs_of(u0, u1, u2, u3)
    return p0, p1, p2, p3, sq


@triton.jit
def _groups_at(ptr, offs, ok, BYTES: tl.constexpr):
    """A (rows, groups) tile of scales (BYTES 2) or zero points (1) at offs, one ld.global a number in the thread
    that uses it (the layout of the use); 0 where not ok."""
    p = ptr + tl.where(ok, offs, 0)
    if BYTES == 2:
        v = tl.inline_asm_elementwise("ld.global.b16 $0, [$1];", "=h,l", [p], dtype=tl.int16, is_pure=False, pack=1)
        v = v.to(ptr.dtype.element_ty, bitcast=True)
    else:
        v = tl.inline_asm_elementwise("ld.global.u8 $0, [$1];", "=r,l", [p], dtype=tl.int32, is_pure=False, pack=1)
        v = v.to(ptr.dtype.element_ty)
    return tl.where(ok, v, 0)
'''
)

# fmt: off
EDITS = [  # (old, new, count) in w4a16_decode_stream_kernel's source
    ("def w4a16_decode_stream_kernel(", "def w4a16_decode_stream_kernel(", 1),
    ("    MMA: tl.constexpr = False,  # DOTS is INT4_MMA_PTX: the dots on the tensor cores, two sets of rows at a time\n):",
     "    MMA: tl.constexpr = False,  # DOTS is INT4_MMA_PTX: the dots on the tensor cores, two sets of rows at a time\n"
     "    XW: tl.constexpr = XW_DEFAULT,\n):", 1),
    ("    sq = tl.zeros((BLOCK_K,), tl.float32)\n",
     "    sq = tl.zeros((BLOCK_K,), tl.float32)\n"
     "    XWON: tl.constexpr = XW > 0 and DOTS != \"\" and not MMA\n"
     "    sqw = tl.zeros((GROUPS, WORDS), tl.float32)  # XWON: Σ x² by word\n", 1),
    # the first step's scales and zero points (PREFETCH)
    ("        scale_next = tl.load(scale_ptr + s_gate, mask=first, other=0.0)\n"
     "        zero_next = tl.load(zero_ptr + s_gate, mask=first, other=0)\n",
     "        if XWON and XW == 2 and PIPE == 1:\n"
     "            scale_next = _groups_at(scale_ptr, s_gate, first, 2)\n"
     "            zero_next = _groups_at(zero_ptr, s_gate, first, 1)\n"
     "        else:\n"
     "            scale_next = tl.load(scale_ptr + s_gate, mask=first, other=0.0)\n"
     "            zero_next = tl.load(zero_ptr + s_gate, mask=first, other=0)\n", 1),
    ("            scale_up_next = tl.load(scale_ptr + s_up, mask=first, other=0.0)\n"
     "            zero_up_next = tl.load(zero_ptr + s_up, mask=first, other=0)\n",
     "            if XWON and XW == 2:\n"
     "                scale_up_next = _groups_at(scale_ptr, s_up, first, 2)\n"
     "                zero_up_next = _groups_at(zero_ptr, s_up, first, 1)\n"
     "            else:\n"
     "                scale_up_next = tl.load(scale_ptr + s_up, mask=first, other=0.0)\n"
     "                zero_up_next = tl.load(zero_ptr + s_up, mask=first, other=0)\n", 1),
    # x (and the norm) ahead of the first step (X_AHEAD: PIPE == 1)
    ("    if X_AHEAD:\n"
     "        x_next = tl.load(x_ptr + offs_k, mask=offs_k < K, other=0.0)\n"
     "        if NORM:\n"
     "            norm_next = tl.load(norm_ptr + offs_k, mask=offs_k < K, other=0.0)\n",
     "    if X_AHEAD and XWON:\n"
     "        xn0, xn1, xn2, xn3 = _words_at(x_ptr, 0, K, GROUPS, WORDS)\n"
     "        nn0, nn1, nn2, nn3 = xn0, xn1, xn2, xn3\n"
     "        if NORM:\n"
     "            nn0, nn1, nn2, nn3 = _words_at(norm_ptr, 0, K, GROUPS, WORDS)\n"
     "    elif X_AHEAD:\n"
     "        x_next = tl.load(x_ptr + offs_k, mask=offs_k < K, other=0.0)\n"
     "        if NORM:\n"
     "            norm_next = tl.load(norm_ptr + offs_k, mask=offs_k < K, other=0.0)\n", 1),
    # the pipelined loop's x (words through shared memory)
    ("            xk = tl.load(x_ptr + g0 * GROUP_SIZE + offs_k).to(tl.float32)\n"
     "            if NORM:\n"
     "                sq += xk * xk\n"
     "                xk = xk * tl.load(norm_ptr + g0 * GROUP_SIZE + offs_k).to(tl.float32)\n"
     "            x0, x1, x2, x3, x4, x5, x6, x7, x_sum = _x_for_dots(xk, GROUPS, WORDS, DOTS, MMA)\n",
     "            if XWON:\n"
     "                u0, u1, u2, u3 = _words_loaded(x_ptr, g0 * GROUP_SIZE, GROUPS, WORDS)\n"
     "                v0, v1, v2, v3 = u0, u1, u2, u3\n"
     "                if NORM:\n"
     "                    v0, v1, v2, v3 = _words_loaded(norm_ptr, g0 * GROUP_SIZE, GROUPS, WORDS)\n"
     "                x0, x1, x2, x3, sqw = _xw_pairs(u0, u1, u2, u3, v0, v1, v2, v3, sqw, NORM)\n"
     "                x4, x5, x6, x7, x_sum = x0, x1, x2, x3, x0\n"
     "            else:\n"
     "                xk = tl.load(x_ptr + g0 * GROUP_SIZE + offs_k).to(tl.float32)\n"
     "                if NORM:\n"
     "                    sq += xk * xk\n"
     "                    xk = xk * tl.load(norm_ptr + g0 * GROUP_SIZE + offs_k).to(tl.float32)\n"
     "                x0, x1, x2, x3, x4, x5, x6, x7, x_sum = _x_for_dots(xk, GROUPS, WORDS, DOTS, MMA)\n", 1),
    # the loop's prefetched scales and zero points
    ("            scale_next = tl.load(scale_ptr + s_gate + g0 + GROUPS, mask=nxt, other=0.0)\n"
     "            zero_next = tl.load(zero_ptr + s_gate + g0 + GROUPS, mask=nxt, other=0)\n",
     "            if XWON and XW == 2:\n"
     "                scale_next = _groups_at(scale_ptr, s_gate + g0 + GROUPS, nxt, 2)\n"
     "                zero_next = _groups_at(zero_ptr, s_gate + g0 + GROUPS, nxt, 1)\n"
     "            else:\n"
     "                scale_next = tl.load(scale_ptr + s_gate + g0 + GROUPS, mask=nxt, other=0.0)\n"
     "                zero_next = tl.load(zero_ptr + s_gate + g0 + GROUPS, mask=nxt, other=0)\n", 1),
    ("                scale_up_next = tl.load(scale_ptr + s_up + g0 + GROUPS, mask=nxt, other=0.0)\n"
     "                zero_up_next = tl.load(zero_ptr + s_up + g0 + GROUPS, mask=nxt, other=0)\n",
     "                if XWON and XW == 2:\n"
     "                    scale_up_next = _groups_at(scale_ptr, s_up + g0 + GROUPS, nxt, 2)\n"
     "                    zero_up_next = _groups_at(zero_ptr, s_up + g0 + GROUPS, nxt, 1)\n"
     "                else:\n"
     "                    scale_up_next = tl.load(scale_ptr + s_up + g0 + GROUPS, mask=nxt, other=0.0)\n"
     "                    zero_up_next = tl.load(zero_ptr + s_up + g0 + GROUPS, mask=nxt, other=0)\n", 1),
    # the loop's x (and the norm)
    ("        k = g0 * GROUP_SIZE + offs_k\n"
     "        if X_AHEAD:\n",
     "        k = g0 * GROUP_SIZE + offs_k\n"
     "        if XWON:\n"
     "            if X_AHEAD:\n"
     "                u0, u1, u2, u3, v0, v1, v2, v3 = xn0, xn1, xn2, xn3, nn0, nn1, nn2, nn3\n"
     "                xn0, xn1, xn2, xn3 = _words_at(x_ptr, g0 * GROUP_SIZE + BLOCK_K, K, GROUPS, WORDS)\n"
     "                if NORM:\n"
     "                    nn0, nn1, nn2, nn3 = _words_at(norm_ptr, g0 * GROUP_SIZE + BLOCK_K, K, GROUPS, WORDS)\n"
     "            else:\n"
     "                u0, u1, u2, u3 = _words_at(x_ptr, g0 * GROUP_SIZE, K, GROUPS, WORDS)\n"
     "                v0, v1, v2, v3 = u0, u1, u2, u3\n"
     "                if NORM:\n"
     "                    v0, v1, v2, v3 = _words_at(norm_ptr, g0 * GROUP_SIZE, K, GROUPS, WORDS)\n"
     "            x0, x1, x2, x3, sqw = _xw_pairs(u0, u1, u2, u3, v0, v1, v2, v3, sqw, NORM)\n"
     "            x4, x5, x6, x7, x_sum = x0, x1, x2, x3, x0\n"
     "        elif X_AHEAD:\n", 1),
    ("        if NORM:  # x * norm now; 1/rms, one number for the whole row, multiplies the sums after the loop\n"
     "            sq += xk * xk\n"
     "            xk = xk * nk\n"
     "        x0, x1, x2, x3, x4, x5, x6, x7, x_sum = _x_for_dots(xk, GROUPS, WORDS, DOTS, MMA)\n",
     "        if not XWON:\n"
     "            if NORM:  # x * norm now; 1/rms, one number for the whole row, multiplies the sums after the loop\n"
     "                sq += xk * xk\n"
     "                xk = xk * nk\n"
     "            x0, x1, x2, x3, x4, x5, x6, x7, x_sum = _x_for_dots(xk, GROUPS, WORDS, DOTS, MMA)\n", 1),
    ("    if PDL == 3:\n        gdc_launch_dependents()\n    # -- write back",
     "    if XWON:\n        sq = tl.sum(sqw, 1)\n    if PDL == 3:\n        gdc_launch_dependents()\n    # -- write back", 1),
]
# fmt: on


def patched_module(xw: int, name: str):
    """A copy of the lesson's w4a16_decode_stream_kernel (same name) with XW's default ``xw``, in a module of its own
    (Triton reads a kernel's source from its file); the lesson's other functions come from the lesson's module."""
    src = edited(inspect.getsource(L.w4a16_decode_stream_kernel.fn), EDITS)
    return module_from(f"{LESSON12_GLOBALS}XW_DEFAULT = {xw}\n\n{HELPERS}\n\n{src}", name)


def check_helpers() -> bool:
    """The patch's x words against torch: the pairs (bits) and Σ x² of x, or of x times a norm rounded to bf16, with
    tl.load's words and (on a GPU: inline PTX) the 16-byte loads, the latter with K short of the step (0 past K).
    The interpreter has no bf16 arithmetic, so there only the pairs of x alone (its 16-bit patterns as int16). The
    helpers are the patched module's (HELPERS_MODULE, a global: a jitted function reads globals, not a closure's
    names)."""
    import triton.language as tl

    @triton.jit
    def helpers_kernel(x_ptr, n_ptr, out_ptr, sq_ptr, K, GROUPS: tl.constexpr, WORDS: tl.constexpr,
                       NORM: tl.constexpr, ASM: tl.constexpr):  # fmt: skip
        if ASM:
            u0, u1, u2, u3 = HELPERS_MODULE._words_at(x_ptr, 0, K, GROUPS, WORDS)
            v0, v1, v2, v3 = HELPERS_MODULE._words_at(n_ptr, 0, K, GROUPS, WORDS)
        else:
            u0, u1, u2, u3 = HELPERS_MODULE._words_loaded(x_ptr, 0, GROUPS, WORDS)
            v0, v1, v2, v3 = HELPERS_MODULE._words_loaded(n_ptr, 0, GROUPS, WORDS)
        sq = tl.zeros((GROUPS, WORDS), tl.float32)
        p0, p1, p2, p3, sq = HELPERS_MODULE._xw_pairs(u0, u1, u2, u3, v0, v1, v2, v3, sq, NORM)
        cell = tl.arange(0, GROUPS)[:, None] * WORDS + tl.arange(0, WORDS)[None, :]
        n = GROUPS * WORDS
        tl.store(out_ptr + cell, p0)
        tl.store(out_ptr + n + cell, p1)
        tl.store(out_ptr + 2 * n + cell, p2)
        tl.store(out_ptr + 3 * n + cell, p3)
        tl.store(sq_ptr, tl.sum(tl.sum(sq, 1), 0))

    device = utils.mode.current().device
    groups, words = 2, 16
    size = groups * words * 8
    cases = (
        [(False, False, size)]
        if not on_gpu()
        else [(norm, asm, K) for norm in (False, True) for asm, K in ((False, size), (True, size), (True, size - 136))]
    )
    ok = True
    for norm, asm, K in cases:
        if on_gpu():
            x = torch.randn(size, device=device, dtype=torch.bfloat16)
            w = (1 + 0.1 * torch.randn(size, device=device)).to(torch.bfloat16)
            y = (x.float() * w.float()).to(torch.bfloat16) if norm else x
            y = torch.where(torch.arange(size, device=device) < K, y, torch.zeros_like(y))  # +0 past K, never -0
            bits, x_bits = y.view(torch.int16), x
        else:  # 16-bit patterns only
            x = torch.randint(-(2**15), 2**15, (size,), dtype=torch.int16, device=device)
            w, bits, x_bits = x, x, None
        out = torch.full((4, groups, words), -1, dtype=torch.int32, device=device)
        sq = torch.full((1,), float("nan"), device=device)
        helpers_kernel[(1,)](x, w, out, sq, K, GROUPS=groups, WORDS=words, NORM=norm, ASM=asm)
        code = (bits.to(torch.int32) & 0xFFFF).view(groups, words, 8)  # x[8 j + c]
        want = torch.stack([code[..., s] | (code[..., 4 + s] << 16) for s in range(4)])
        same = torch.equal(out.cpu(), want.cpu())
        line = f"pairs {'the same' if same else 'FAIL: different'}"
        if x_bits is not None and norm:  # Σ x² is kept only where a norm needs it
            want_sq = float((x_bits.float()[:K] ** 2).sum())
            close = abs(float(sq) - want_sq) <= 1e-5 * want_sq
            line += f"; sum of x^2 {float(sq):.6g} against {want_sq:.6g} ({'close' if close else 'FAIL'})"
            same = same and close
        say(f"helpers, norm {norm}, {'inline 16-byte loads' if asm else 'tl.load'}, K {K} of {size}: {line}")
        ok = ok and same
    return ok


if __name__ == "__main__":
    say(f"lesson 12 sweep zn on {utils.mode.current().gpu_name if on_gpu() else 'CPU (interpreter)'}, "
        f"torch {torch.__version__}, triton {triton.__version__}")  # fmt: skip
    kernels = {
        "x (and norm) in place": patched_module(1, "l12zn_x").w4a16_decode_stream_kernel,
        "x, scales, zero points in place": patched_module(2, "l12zn_xsz").w4a16_decode_stream_kernel,
    }
    HELPERS_MODULE = sys.modules["l12zn_x"]
    if not check_helpers():
        say("FAIL: the helpers are wrong; nothing timed")
        sys.exit(1)
    wins = {}
    for name, _, step in quantized_decode_steps(4):
        ref = step().float().clone()
        say(f"== {name}, int4: the step as set (FUSED_INT4_KERNEL {L.fused_int4_kernel(2048, 2048)!r} at wo)")
        for label, kernel in kernels.items():
            ratios = paired_in_step(say, label, step, ref, {(L, "w4a16_decode_stream_kernel"): kernel}, ROUNDS)
            if ratios is None or ratios:
                wins.setdefault(label, []).append(min(ratios) if ratios else 0.0)
        say(f"  ({time.time() - T0:.0f} s)")
    if on_gpu():
        say("== the lowest ratio over rounds at each shape (above 1: faster than the step as set):")
        for label, ratios in wins.items():
            mark = "WIN" if all(r > 1.0 for r in ratios) else "   "
            say(f"  {mark} {label:36s} | " + ", ".join(f"x{r:.3f}" for r in ratios))
    say(f"total {time.time() - T0:.0f} s")
