"""Lesson 06 sweep e, issue 12: the next block's scores issued before this block's softmax, in the descriptor kernel.

Run from the repo root: ``PYTHONPATH=$PWD python3 bench/sweeps/l06e.py`` on the GPU (< 90 s); ``--cpu`` under the
interpreter (small shapes, no timings: the variant's results against the lesson's, a smoke test of the script);
``--offline`` the PTX prediction below (no GPU).

Why: attention() trails SDPA (cuDNN) at T >= 2048 (results/h200-2026-11-28-s17/bench-06: 0.80-0.90x), and sweeps
l06 and l06b found nothing in the program order, the tiles, the scale's placement or Triton's warp specialization.
Each step of the lesson's loop runs its two matmuls and the softmax between them one after the other: the tensor
cores wait while the exponentials run, and the exponentials wait for the scores. FlashAttention-3 overlaps them
within a warp group: the scores of block j + 1 (a warp-group MMA, which Hopper runs asynchronously) are issued
before the softmax of block j, so the tensor cores work while the softmax does. Here that is one change to
`_attention_range_tma`: the first block's scores before the loop, and in the loop the next block's keys loaded and
its scores issued first (past the range's end the descriptor reads zeros, and those scores are never used). Whether
Triton keeps that MMA in flight across the softmax (it waits on a warp-group MMA only where its result is used) is
what this measures.

Predicted offline first (``--offline``, no GPU: utils.offline compiles for sm_90 a model of the lesson's loop,
through descriptors made on the GPU so that it compiles without one, BLOCK_M = BLOCK_N = HEAD_DIM = 128, 8 warps, 3
stages, and prints the order of the warp-group MMAs (M), their commits (C), waits (W, with how many groups may stay
in flight) and exponentials (e) in the PTX). Under triton 3.7.1 (2026-12-07): the lesson's loop is
``M8 C W0 e66 M8 C | W0``, and the variant's ``M8 C W0 e66 M8 C | W0`` after the first block's scores: Triton waits
for the next block's scores (wait 0) right after issuing them, before the exponentials, since it keeps a warp-group
MMA in flight across a loop's iterations only where its result is the next one's accumulator. So no overlap is
expected, and the variant holds 255 registers a thread against 188: a loss, unless the GPU says otherwise. The other
road to that overlap, Triton's warp specialization of the loop (``tl.range(..., warp_specialize=True)``, which sweep
l06b timed as no better), compiles for sm_90 to the very same code as without it (the same MMAs, waits and
mbarriers, no ``setmaxnreg``): under 3.7.1 it does nothing on Hopper. For Blackwell (sm_100) the same kernel with
the flag comes out warp-specialized (12 ``setmaxnreg`` and 90 mbarrier operations in its PTX, against none and 42
without), so the flag itself works there.

At make bench's attention shapes, causal and not: the lesson's attention_tma and the variant (the lesson's
attention_kernel with the range function swapped, launched by attention_tma itself), each replayed from a CUDA
graph (kit.gtime) between two timings of the lesson's, and SDPA's time; the variant's output against the lesson's
(bit for bit expected: each block's arithmetic is the same, in the same order). An EDIT line where the variant is
faster by 2 % or more in both pairings.
"""

import inspect
import os
import sys
import time

T0 = time.time()
CPU = "--cpu" in sys.argv or "--offline" in sys.argv
if CPU:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import triton  # noqa: E402

import utils  # noqa: E402
from bench.sweeps.kit import Log, edited, gtime, module_from  # noqa: E402
from lessons import l06_flash_attention as L  # noqa: E402

say = Log("l06e")
ENV = utils.mode.current()
BUDGET_S = float(os.environ.get("BUDGET_S", "90"))

PREAMBLE = (
    "import triton\nimport triton.language as tl\n"
    "import lessons.l06_flash_attention as _lesson\n"
    "globals().update({k: v for k, v in vars(_lesson).items() if not k.startswith('__')})\n\n"
)


def variant_kernel():
    """The lesson's attention_kernel calling _range_ahead: the lesson's _attention_range_tma with the first block's
    scores before the loop and, in the loop, the next block's issued before this block's softmax (past T the
    descriptor reads zeros, and the last scores are never used)."""
    what = "lesson 06's _attention_range_tma"
    k_line = (
        "        k = k_desc.load([b, n, kv_col]).reshape([BLOCK_N, HEAD_DIM])"
        "  # keys n .. n + BLOCK_N (past T: zeros)\n"
    )
    s_line = "        s = tl.dot(q, tl.trans(k))  # unscaled: the scale goes into the exponent below\n"
    ahead = edited(inspect.getsource(L._attention_range_tma.fn), [
        ("def _attention_range_tma(", "def _range_ahead(", 1),
        ("    for n in range(start, end, BLOCK_N):\n" + k_line,
         "    s = tl.dot(q, tl.trans(k_desc.load([b, start, kv_col]).reshape([BLOCK_N, HEAD_DIM])))\n"
         "    for n in range(start, end, BLOCK_N):\n"
         "        k = k_desc.load([b, n + BLOCK_N, kv_col]).reshape([BLOCK_N, HEAD_DIM])  # the next keys\n", 1),
        (s_line, "        s_next = tl.dot(q, tl.trans(k))  # in flight during this block's softmax\n", 1),
        ("        m_i = m_new\n", "        m_i = m_new\n        s = s_next\n", 1),
    ], what)  # fmt: skip
    src = edited(inspect.getsource(L.attention_kernel.fn),
                 [("    acc, l_i, m_i = _attention_range_tma(\n", "    acc, l_i, m_i = _range_ahead(\n", 2)],
                 "lesson 06's attention_kernel")  # fmt: skip
    return module_from(PREAMBLE + ahead + "\n\n" + src, "l06e_ahead").attention_kernel  # both have their @triton.jit


MODEL = """
import triton
import triton.language as tl


@triton.jit
def model_kernel(q_ptr, k_ptr, v_ptr, o_ptr, T, qk_scale, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                 BLOCK_N: tl.constexpr, AHEAD: tl.constexpr, WS: tl.constexpr):
    # the lesson's loop through descriptors (made on the GPU, so that it compiles offline): with AHEAD the next
    # block's scores issued before this block's softmax, with WS Triton's warp specialization of the loop asked for
    q_desc = tl.make_tensor_descriptor(q_ptr, [T, HEAD_DIM], [HEAD_DIM, 1], [BLOCK_M, HEAD_DIM])
    k_desc = tl.make_tensor_descriptor(k_ptr, [T, HEAD_DIM], [HEAD_DIM, 1], [BLOCK_N, HEAD_DIM])
    v_desc = tl.make_tensor_descriptor(v_ptr, [T, HEAD_DIM], [HEAD_DIM, 1], [BLOCK_N, HEAD_DIM])
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    q = q_desc.load([tl.program_id(0) * BLOCK_M, 0])
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    s = tl.dot(q, tl.trans(k_desc.load([0, 0])))
    for n in tl.range(0, T, BLOCK_N, warp_specialize=WS):
        if AHEAD:
            s_next = tl.dot(q, tl.trans(k_desc.load([n + BLOCK_N, 0])))
        else:
            s = tl.dot(q, tl.trans(k_desc.load([n, 0])))
            s_next = s
        v = v_desc.load([n, 0])
        m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s * qk_scale - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        m_i = m_new
        s = s_next
    tl.store(o_ptr + offs_m[:, None] * HEAD_DIM + offs_d[None, :], (acc / l_i[:, None]).to(o_ptr.dtype.element_ty))
"""


def offline_order():
    """The PTX order of MMAs, commits, waits and exponentials in the model loop, the lesson's way and ahead."""
    import re
    import tempfile

    from utils import offline

    if not offline.available():
        say("--offline needs Triton's NVIDIA backend and its ptxas")
        return
    path = os.path.join(tempfile.mkdtemp(prefix="l06e_"), "model.py")
    with open(path, "w") as f:
        f.write(MODEL)
    pointers, ints = dict(q_ptr="bf16", k_ptr="bf16", v_ptr="bf16", o_ptr="bf16"), dict(T=4096, qk_scale=0.1)
    tile = dict(HEAD_DIM=128, BLOCK_M=128, BLOCK_N=128)
    variants = {"lesson": dict(AHEAD=False, WS=False), "ahead": dict(AHEAD=True, WS=False),
                "lesson, warp_specialize": dict(AHEAD=False, WS=True)}  # fmt: skip
    jobs = [offline.job("model_kernel", pointers=pointers, ints=ints, constexprs={**tile, **flags}, num_warps=8,
                        num_stages=3) for flags in variants.values()]  # fmt: skip
    for name, c in zip(variants, offline.compile_kernels(path, jobs, raise_errors=False)):
        if c.error:
            say(f"{name}: ERROR {c.error[-300:]}")
            continue
        marks = []
        for line in (raw.strip() for raw in c.ptx.splitlines()):
            wait = re.match(r"wgmma\.wait_group\.sync\.aligned\s+(\d+)", line)
            if line.startswith("wgmma.mma_async"):
                marks.append("M")
            elif line.startswith("wgmma.commit_group"):
                marks.append(" C ")
            elif wait:
                marks.append(f"W{wait.group(1)} ")
            elif line.startswith("ex2.approx"):
                marks.append("e")
            elif re.match(r"(@%p\d+\s+)?bra", line):
                marks.append("| ")
        order = re.sub(r"(e|M)\1+", lambda m: f"{m.group(1)}{len(m.group(0))} ", "".join(marks))
        say(f"{name:23s}: {' '.join(order.split())} ({c.registers} registers, {c.spill_bytes} bytes spilled, "
            f"{c.ptx.count('setmaxnreg')} setmaxnreg, {c.ptx.count('mbarrier.')} mbarrier operations)")  # fmt: skip


def main():
    if "--offline" in sys.argv:
        say(f"lesson 06 sweep e, offline (sm_90), triton {triton.__version__}: the model loop's PTX order")
        offline_order()
        return
    say(f"lesson 06 sweep e on {ENV.gpu_name if ENV.is_gpu else 'CPU (interpreter)'}, torch {torch.__version__}, "
        f"triton {triton.__version__}")  # fmt: skip
    lesson, ahead = L.attention_kernel, variant_kernel()
    dt = torch.bfloat16 if ENV.is_gpu else torch.float32
    if ENV.is_gpu:
        shapes = [(1, 32, 32, 2048, 128), (1, 32, 32, 4096, 128), (8, 32, 32, 1024, 128), (1, 32, 4, 2048, 128),
                  (1, 32, 4, 2048, 64), (1, 32, 4, 4096, 64)]  # fmt: skip
    else:
        shapes = [(1, 4, 2, 40, 16), (2, 2, 2, 33, 32)]
    for B, H, KV, T, D in shapes:
        for causal in (False, True):
            if time.time() - T0 > BUDGET_S:
                say(f"(budget of {BUDGET_S:.0f} s spent)")
                return
            torch.manual_seed(0)
            q = torch.randn(B, T, H, D, device=ENV.device, dtype=dt)
            k, v = (torch.randn(B, T, KV, D, device=ENV.device, dtype=dt) for _ in range(2))
            label = f"B={B} H={H} KV={KV} T={T} D={D}{' causal' if causal else ''}"

            def run(kernel):
                L.attention_kernel = kernel
                try:
                    return L.attention_tma(q, k, v, causal)
                finally:
                    L.attention_kernel = lesson

            try:
                want, got = run(lesson).clone(), run(ahead).clone()
            except Exception as e:  # noqa: BLE001 - a variant that does not compile is a finding
                say(f"{label:36s} | ERROR {type(e).__name__}: {' '.join(str(e).split())[:200]}")
                continue
            same = torch.equal(want, got)
            rel = float((got.float() - want.float()).norm() / want.float().norm())
            if not same and rel > 1e-2:
                say(f"{label:36s} | FAIL: the variant's output is {rel:.1e} from the lesson's")
                continue
            qs, ks, vs = (t.transpose(1, 2) for t in (q, k, v))
            sdpa = gtime(lambda: F.scaled_dot_product_attention(qs, ks, vs, is_causal=causal,  # noqa: B023
                                                                 enable_gqa=KV != H))  # fmt: skip
            times = []
            for _ in range(2):
                before = gtime(lambda: run(lesson))  # noqa: B023
                mine = gtime(lambda: run(ahead))  # noqa: B023
                times.append((before, mine, gtime(lambda: run(lesson))))  # noqa: B023
            if not ENV.is_gpu:
                say(f"{label:36s} | ran; {'the same bits' if same else f'{rel:.1e} apart'}")
                continue
            ratios = [(b + a) / 2 / m for b, m, a in times]
            line = "; ".join(
                f"{m:.4f} ms between {b:.4f} and {a:.4f} (x{r:.3f})" for (b, m, a), r in zip(times, ratios)
            )
            say(f"{label:36s} | {line} | lesson {times[0][0]:.4f} = {sdpa / times[0][0]:.3f}x SDPA, variant "
                f"{sdpa / times[0][1]:.3f}x | {'the same bits' if same else f'{rel:.1e} apart'}")  # fmt: skip
            if min(ratios) >= 1.02:
                say(f"  -> EDIT: _attention_range_tma issues the next block's scores before the softmax ({label})")
    say(f"total {time.time() - T0:.0f} s")


main()
