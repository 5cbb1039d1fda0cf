"""Lesson 12 sweep zm, issue 15: the M = 1 int4 GEMV with x's bf16 pairs loaded in place (no layout conversion).

Run from the repo root: ``PYTHONPATH=$PWD python3 bench/sweeps/l12zm.py`` on the GPU (< 90 s); ``--cpu`` under the
interpreter (no timings, and the interpreter runs no PTX: it checks the pairs' bit arithmetic against torch, and
that the patched kernel runs). Nothing to edit: on an H100 (session 48, triton 3.7.1,
results/h100-2026-12-07-s48/sweeps/l12zm-triton3.7.1.txt) the same bits, x1.04 at the 8B up row, x0.37 at the 8B
down row and x0.93-0.99 at the others.

Why: offline (session 47, utils.offline, sm_90, bf16 x, the packed dots at FAST_SCHEDULES's int4 M = 1 rows) the
pipelined loop of w4a16_stream_kernel turns x's BLOCK_K numbers into the pairs the dots take (_x_pairs: a reshape, a
permute and splits) through shared memory: under triton 3.7.1, 9 BAR.SYNC a step at the down projections (K = 8192,
14336) and 13 at the 1B up one, where 3.6 has 5 and 11; session 46 timed the graphed GEMV 5-9 % slower under 3.7.1.
Loading x as int32 words instead (each word two neighbouring bf16 numbers) gives each thread the four words under
its own codes, and the pairs (x[8j + s] low, x[8j + 4 + s] high) come from two bit operations each, in the thread:
offline the loop keeps 3 barriers a step at every row under both trions (the cp.async pipeline's), with about the
same instructions (180-291 against 165-289 under 3.7.1; at the 1B up row under 3.6, 586 against 479 and more
registers, 168 against 128).

The decode step's kernel has the same conversion: offline, w4a16_decode_stream_kernel at Llama-3.2-1B's layer rows
(FUSED_STREAM_SCHEDULES, launched early, the packed dots) runs 8 (qkv, wo), 16 (gate/up) and 12 (down) barriers a
step under 3.7.1, and 3, 3, 32 and 7 under 3.6. There a copy with the pairs in place at wo and down (no norm) kept
8 and 12 barriers a step under 3.7.1 offline (and under 3.6 went from 3 to 8 at wo), so this sweep does not time it.
Why (session 48, its TTGIR): that loop loads x into registers, and Triton gives a load a layout of its own (here 4
words a thread, threads 2 x 16 over groups and words) whatever its use wants (4 threads along a group's words, each
holding the 4 words under its own codes, both warps the same), so the four pairs still cross threads through
shared memory; in the GEMV's pipelined loop x comes through shared memory anyway (cp.async), and its read from
there takes the dots' layout, which is why the barriers go there and not here (l12zn loads x in the dots' layout
in the decode kernel). Offline under 3.6 the lesson's decode kernel spills 16 bytes at Llama-3.2-1B's down and
gate/up rows; none under 3.7.1.

Each FAST_SCHEDULES int4 M = 1 row: the lesson's kernel and the patched one, the patched output the lesson's bit for
bit (the same pairs, the same PTX dots: anything else is a FAIL), then replayed from a CUDA graph (L2 cleared before
each repetition) between two timings of the lesson's kernel, two rounds.
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
from bench.sweeps.kit import (  # noqa: E402
    LESSON12_GLOBALS,
    X_WORDS,
    Log,
    edited,
    gtime,
    int4_gemv_case,
    module_from,
    on_gpu,
)
from lessons import l12_quantization as L  # noqa: E402

say = Log(f"l12zm-triton{triton.__version__}")
ROUNDS = 2

PAIRS_AT = (
    X_WORDS
    + '''
@triton.jit
def _x_pairs_at(x_ptr, GROUPS: tl.constexpr, WORDS: tl.constexpr):
    """_x_pairs's four bf16 pairs of a step, (GROUPS, WORDS) int32 each, from x's numbers read as int32 words: the
    four words under each code word (16 bytes), the pairs made from them in the thread."""
    u0, u1, u2, u3 = _words_loaded(x_ptr, 0, GROUPS, WORDS)
    return _pairs_of(u0, u1, u2, u3)
'''
)


def patched_kernel():
    """A copy of the lesson's w4a16_stream_kernel whose pipelined loop takes x's pairs from _x_pairs_at where the
    packed dots run (DOTS set, not MMA), in a module of its own (Triton reads a kernel's source from its file)."""
    src = inspect.getsource(L.w4a16_stream_kernel.fn)
    edits = [
        ("def w4a16_stream_kernel(", "def w4a16_stream_pairs_kernel(", 1),
        ("""            xk = tl.load(x_ptr + g0 * GROUP_SIZE + offs_k).to(tl.float32)
            x0, x1, x2, x3, x4, x5, x6, x7, x_sum = _x_for_dots(xk, GROUPS, WORDS, DOTS, MMA)
""", """            if DOTS != "" and not MMA:
                x0, x1, x2, x3 = _x_pairs_at(x_ptr + g0 * GROUP_SIZE, GROUPS, WORDS)
                x4, x5, x6, x7, x_sum = x0, x1, x2, x3, x0
            else:
                xk = tl.load(x_ptr + g0 * GROUP_SIZE + offs_k).to(tl.float32)
                x0, x1, x2, x3, x4, x5, x6, x7, x_sum = _x_for_dots(xk, GROUPS, WORDS, DOTS, MMA)
""", 1),
    ]  # fmt: skip
    return module_from(f"{LESSON12_GLOBALS}{PAIRS_AT}\n\n{edited(src, edits)}", "l12zm_pairs")


def check_pairs(module):
    """_x_pairs_at against the pairs computed by torch from the same 16-bit patterns (int16 x: no bf16 needed)."""

    @triton.jit
    def pairs_kernel(x_ptr, out_ptr, GROUPS: tl.constexpr, WORDS: tl.constexpr):
        p0, p1, p2, p3 = module._x_pairs_at(x_ptr, GROUPS, WORDS)
        cell = tl.arange(0, GROUPS)[:, None] * WORDS + tl.arange(0, WORDS)[None, :]
        n = GROUPS * WORDS
        tl.store(out_ptr + cell, p0)
        tl.store(out_ptr + n + cell, p1)
        tl.store(out_ptr + 2 * n + cell, p2)
        tl.store(out_ptr + 3 * n + cell, p3)

    groups, words = 2, 16
    device = utils.mode.current().device
    bits = torch.randint(-(2**15), 2**15, (groups * words * 8,), dtype=torch.int16, device=device)
    out = torch.full((4, groups, words), -1, dtype=torch.int32, device=device)
    pairs_kernel[(1,)](bits, out, GROUPS=groups, WORDS=words)
    u16 = bits.to(torch.int32) & 0xFFFF
    code = u16.view(groups, words, 8)  # x[8 j + c]
    want = torch.stack([code[..., s] | (code[..., 4 + s] << 16) for s in range(4)])
    same = torch.equal(out.cpu(), want.cpu())
    say(f"_x_pairs_at against torch's pairs of the same bits: {'the same' if same else 'FAIL: different'}")
    return same


module = patched_kernel()
say(f"lesson 12 sweep zm on {utils.mode.current().gpu_name if on_gpu() else 'CPU (interpreter)'}, "
    f"torch {torch.__version__}, triton {triton.__version__}")  # fmt: skip
ok = check_pairs(module)
dtype = torch.bfloat16 if on_gpu() else torch.float32
rows = [(key[2], key[3], s) for key, s in L.FAST_SCHEDULES.items() if key[0] == 4 and key[1] == 1]
if CPU:
    rows = [(64, 256, L.FastSchedule("pipe", 1, 4, 128, 1, 4, 3))]
original = L.w4a16_stream_kernel
say("shape (N x K) | row | lesson's kernel | pairs in place | x | bits")
for N, K, s in rows:
    w, x, want, out, nbytes = int4_gemv_case(N, K, 32 if CPU else 128, dtype)

    def run(kernel, x=x, w=w, out=out, s=s):
        L.w4a16_stream_kernel = kernel  # int4_gemv_kernel looks it up at each call; FAST_PREPARED keys on it
        try:
            return L.w4a16_fast(x, w, out=out, schedule=s)
        finally:
            L.w4a16_stream_kernel = original

    try:
        ref = run(original).clone()
        got = run(module.w4a16_stream_pairs_kernel).clone()
        same = torch.equal(ref, got)
        if not same:
            say(f"{N}x{K} | {tuple(s)} | FAIL: the patched kernel's output is not the lesson's bit for bit")
            ok = False
            continue
        if not on_gpu():
            say(f"{N}x{K} | {tuple(s)} | ran, the same bits")
            continue
        line = []
        for _ in range(ROUNDS):
            before = gtime(lambda: run(original))
            ms = gtime(lambda: run(module.w4a16_stream_pairs_kernel))
            after = gtime(lambda: run(original))
            line.append(
                f"{1e3 * ms:.1f} us between {1e3 * before:.1f} and {1e3 * after:.1f} (x{(before + after) / 2 / ms:.3f})"
            )
        say(f"{N}x{K} | {tuple(s)} | " + "; ".join(line) + " | the same bits")
    except Exception as e:  # noqa: BLE001
        say(
            f"{N}x{K} | {tuple(s)} | ERROR {type(e).__name__}: {str(e).strip().splitlines()[0][:150] if str(e).strip() else ''}"
        )
        ok = False
say(f"{'all checks passed' if ok else 'a check FAILED'}; total {time.time() - T0:.0f} s")
