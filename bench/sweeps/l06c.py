"""Lesson 06 sweep c, 2026-11-28: the descriptor kernel with its descriptors built on the GPU (issue 12: attention
against SDPA at every size).

attention_tma builds three TensorDescriptors on the host, and Triton encodes each into a TMA descriptor at every
launch: about 200 us of host a call on the H100 machine (results/h100-2026-11-28-s11/bench-06), which a short kernel
cannot hide and utils.launch cannot prepare (a descriptor holds its tensor's address). So attention() takes the
pointer kernel, prepared, below TMA_MIN_FLOPS. Built by each program with tl.make_tensor_descriptor instead (as
lesson 05's TMA matmul builds its own), the descriptors leave a launch of pointers and integers, which can be
prepared. What does building them on the GPU cost the kernel? At make bench's shapes, bf16, causal and not:
  host descriptors   attention_tma, called from Python (the lesson's kernel as it is)
  GPU descriptors    the lesson's attention_kernel, called from a wrapper kernel that builds the three descriptors,
                     its launch prepared (utils.launch), called from Python
  pointers           attention_pointers (its launches prepared), called from Python
each also replayed from a CUDA graph (the GPU's work alone), each against SDPA timed before and after it (the
H100's clocks fall under load). Each candidate is first compared with attention_ref in fp32 (a FAIL is never chosen).
The EDIT lines at the end say what attention() should take: the GPU descriptors from which size, or as it is.

Run from the repo root: ``PYTHONPATH=$PWD python3 bench/sweeps/l06c.py`` on a GPU with TMA (about 2 minutes),
``... l06c.py --cpu`` under the interpreter (which emulates descriptors; tiny shapes, no timings: a smoke test).
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
import torch.nn.functional as F  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

import utils  # noqa: E402
from lessons import l06_flash_attention as L  # noqa: E402
from utils import launch  # noqa: E402

ENV = utils.mode.current()
LINES = []


def say(line=""):
    print(line, flush=True)
    LINES.append(line)
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "sweep_l06c.txt"), "w") as f:
            f.write("\n".join(LINES) + "\n")


@triton.jit
def attention_gpu_desc_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr, B, T, H, KV, GROUP, qk_scale, stride_qb, stride_qt, stride_kb, stride_kt,
    stride_vb, stride_vt, stride_ob, stride_ot, stride_oh,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, IS_CAUSAL: tl.constexpr,
):  # fmt: skip
    """The lesson's attention_kernel, its (B, T, heads * D) descriptors built here, by each program (as _tiles
    describes them on the host)."""
    q_desc = tl.make_tensor_descriptor(q_ptr, shape=[B, T, H * HEAD_DIM], strides=[stride_qb, stride_qt, 1],
                                       block_shape=[1, BLOCK_M, HEAD_DIM])  # fmt: skip
    k_desc = tl.make_tensor_descriptor(k_ptr, shape=[B, T, KV * HEAD_DIM], strides=[stride_kb, stride_kt, 1],
                                       block_shape=[1, BLOCK_N, HEAD_DIM])  # fmt: skip
    v_desc = tl.make_tensor_descriptor(v_ptr, shape=[B, T, KV * HEAD_DIM], strides=[stride_vb, stride_vt, 1],
                                       block_shape=[1, BLOCK_N, HEAD_DIM])  # fmt: skip
    L.attention_kernel(q_desc, k_desc, v_desc, o_ptr, T, H, GROUP, qk_scale, stride_ob, stride_ot, stride_oh,
                       HEAD_DIM, BLOCK_M, BLOCK_N, IS_CAUSAL)  # fmt: skip


def scratch(size, alignment, stream):
    """Global memory for the descriptors the programs build (Triton asks for it at each launch)."""
    return torch.empty(size, device=ENV.device, dtype=torch.int8)


PREPARED = launch.Table()


def attention_gpu_desc(q, k, v, causal=True):
    """attention_tma's result through attention_gpu_desc_kernel, its launch prepared after the first call."""
    B, T, H, D = q.shape
    KV = k.shape[2]
    out = torch.empty(q.shape, device=q.device, dtype=q.dtype)
    key = launch.signature(q, k, v, causal)
    prepared = PREPARED.get(key)
    if prepared is not None and prepared(q, k, v, out):
        return out
    BLOCK_M, BLOCK_N, num_warps, num_stages = L.attention_config(D, causal, q.element_size())
    grid = (triton.cdiv(T, BLOCK_M) * B * H,)
    args = (q, k, v, out, B, T, H, KV, H // KV, L.LOG2E / math.sqrt(D), q.stride(0), q.stride(1), k.stride(0),
            k.stride(1), v.stride(0), v.stride(1), out.stride(0), out.stride(1), out.stride(2))  # fmt: skip
    meta = dict(HEAD_DIM=D, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, IS_CAUSAL=causal, num_warps=num_warps,
                num_stages=num_stages)  # fmt: skip
    triton.set_allocator(scratch)
    attention_gpu_desc_kernel[grid](*args, **meta)
    PREPARED.keep(key, launch.prepare, attention_gpu_desc_kernel, grid, *args, allocator=scratch, **meta)
    return out


def timed(fn, graph):
    """ms of fn() (its own launch from Python, or replayed from a CUDA graph), L2 cleared before each repetition."""
    if CPU:
        fn()
        return None
    import triton.testing

    from bench.common import graphed

    return triton.testing.do_bench(graphed(fn) if graph else fn, warmup=5, rep=40)


SHAPES = ENV.pick(  # (B, T, H, KV, D): make bench's (bench/lesson06.py)
    cpu=[(1, 40, 4, 2, 16)],
    gpu=[(1, 333, 32, 4, 64), (1, 512, 32, 4, 64), (1, 2048, 32, 4, 64), (1, 2048, 32, 4, 128),
         (1, 2048, 32, 32, 128), (8, 1024, 32, 4, 64), (8, 1024, 32, 32, 128), (1, 4096, 32, 4, 64),
         (1, 8192, 32, 4, 128)],
)  # fmt: skip
DTYPE = torch.float32 if CPU else torch.bfloat16
say(
    f"lesson 06 sweep c (attention's descriptors built on the GPU) on "
    f"{ENV.gpu_name if ENV.is_gpu else 'CPU (interpreter)'}, torch {torch.__version__}, triton {triton.__version__}"
)
CANDIDATES = {
    "host descriptors": L.attention_tma,
    "GPU descriptors": attention_gpu_desc,
    "pointers": L.attention_pointers,
}
wins = []  # (flops, causal, {candidate: ms from Python}, {candidate: ms from a graph})
with torch.no_grad():
    for B, T, H, KV, D in SHAPES:
        q, k, v = L.random_qkv(B, T, H, KV, D, DTYPE, device=ENV.device)
        qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
        for causal in (True, False):
            flops = L.attention_flops(B, H, T, D, causal)
            ref = L.attention_ref(q.float(), k.float(), v.float(), causal)

            def sdpa(causal=causal):
                return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal, enable_gqa=KV != H)

            say(f"== B={B} T={T} H={H} KV={KV} D={D} {'causal' if causal else 'not causal'}, {flops:.2e} FLOPs")
            python, graph = {}, {}
            for name, fn in CANDIDATES.items():
                got = fn(q, k, v, causal)
                got = fn(q, k, v, causal)  # the second call: the prepared launch, where there is one
                err = (got.float() - ref).abs().max().item()
                if not err <= 3e-2:
                    say(f"   {name:18s} FAIL: max error {err:.3g}")
                    continue
                for mode, table in (("python", python), ("graph", graph)):
                    before = timed(sdpa, mode == "graph")
                    ms = timed(lambda fn=fn, causal=causal: fn(q, k, v, causal), mode == "graph")
                    after = timed(sdpa, mode == "graph")
                    if ms is None:
                        say(f"   {name:18s} {mode:6s} checked (max error {err:.2g}), not timed under the interpreter")
                        continue
                    table[name] = ms
                    base = (before + after) / 2
                    say(f"   {name:18s} {mode:6s} {ms:8.4f} ms  x SDPA {base / ms:5.3f}")
            wins.append((flops, causal, python, graph))
        q = k = v = qt = kt = vt = None

if not CPU and wins:
    slower = [g["GPU descriptors"] / g["host descriptors"] for _, _, _, g in wins if len(g) == 3]
    worst = max(slower) if slower else float("inf")
    say(f"GPU descriptors against host descriptors, replayed from graphs: {min(slower):.3f}x-{worst:.3f}x the time")
    # from Python: the smallest problem from which the GPU descriptors beat the prepared pointers at every size above
    order = sorted(wins, key=lambda w: w[0])
    lead = [w[0] for w in order if len(w[2]) == 3 and w[2]["GPU descriptors"] <= w[2]["pointers"]]
    threshold = next((f for f in lead if all(w[2]["GPU descriptors"] <= w[2]["pointers"] for w in order
                                              if w[0] >= f and len(w[2]) == 3)), None)  # fmt: skip
    if worst <= 1.02 and threshold is not None:
        say(f"-> EDIT: attention() takes the GPU descriptors (prepared) from TMA_MIN_FLOPS = {threshold:.1e}")
    else:
        say("-> no edit: the GPU descriptors cost the kernel more than 2 % somewhere, or never beat the pointers")
say(f"total {time.time() - T0:.0f} s")
