"""Lesson 05 for `make bench`: the lesson's matmuls against torch.matmul (cuBLAS), in fp16 and bf16.

Shapes are M x N x K: square ones; the feed-forward layers of LLMs (M tokens, K model width, N hidden width:
Llama-2-7B's 4096 -> 11008, Llama-3-8B's 4096 -> 14336 and back, a 1B model's 2048 -> 5632); and the awkward ones
of issue 12: 3000 x 5000 x 1000 (no size a multiple of a tile), 2999 x 3001 x 4093 (K and N not even multiples of 8:
rows off 16-byte boundaries) and 16 x 4096 x 4096 (a decoding step). Each row is
timed by bench.common.paired against cuBLAS in the same run, cuBLAS timed again after each kernel (each kernel is
compared with the two cuBLAS timings around it).

    flops = matmul_flops(M, N, K) = 2 * M * N * K
    bytes = matmul_bytes(M, N, K, e) = (M * K + K * N + M * N) * e   (read A and B, write C once)

At 3000 x 5000 x 1000, 2048 x 5632 x 2048 and 1024^3, "triton, peeled K" is matmul_peeled: matmul with the K tail peeled
off the loop (lesson 05, "Extra: the K tail, peeled off"; autotuned over the same configurations).

At the awkward shapes, "triton, ALIGN=1" is the same kernel as "triton" without the launcher's alignment hint
(lesson 05, "Odd shapes"; tuned on its own: ALIGN is in the autotuner's key): the two rows side by side measure what
the hint is worth. At the shapes in PADDED, "triton, no padding" is matmul(pad="never"): "triton" is matmul() as
shipped, which copies A and B into padded buffers first where PAD_RULE says so (lesson 05, "Odd shapes: what the
compiler can prove, and what it cannot fix"): the two rows measure what the copies are worth, copies included.

At the shapes in HOST_BOUND a kernel takes about as long on the GPU as its launch takes in Python (argument checks and
Triton's dispatch: tens of microseconds on a slow host CPU), so they are timed once more with both sides replayed from
CUDA graphs (`bench.common.graphed`): the "(CUDA graph)" rows are the GPU's work alone.

The ladder rows time every step of the lesson at 4096^3 (naive, tiled in row-major order, grouped order, autotuned,
the final matmul, persistent, persistent + TMA). The fused-epilogue rows time matmul(a, b, bias, "gelu") against
three spellings in PyTorch: gelu(a @ b + bias) (three kernels), gelu(addmm(bias, a, b)) (cuBLAS adds the bias in its
epilogue: two kernels, what F.linear does) and torch.compile of the latter; plus the same matmul without the epilogue.
"""

from __future__ import annotations

import torch

from bench.common import Row, graphed, paired
from lessons.l05_matmul import (
    matmul,
    matmul_autotuned,
    matmul_bytes,
    matmul_flops,
    matmul_grid,
    matmul_grouped,
    matmul_kernel,
    matmul_naive,
    matmul_peeled,
    matmul_persistent,
    matmul_persistent_tma,
    matmul_ref,
    matmul_tiled,
)

SQUARE = [(n, n, n) for n in (1024, 2048, 4096, 8192)]
LLM = [(4096, 11008, 4096), (8192, 14336, 4096), (16384, 4096, 14336), (2048, 5632, 2048)]
AWKWARD = [(3000, 5000, 1000), (2999, 3001, 4093), (16, 4096, 4096)]
#: shapes where matmul() may copy its inputs into padded buffers (PAD_RULE): timed without the copies too
PADDED = {(3000, 5000, 1000), (2999, 3001, 4093)}
#: rows not whole 16-byte vectors: the TMA launcher refuses them, and matmul(pad="never") already has ALIGN = 1
MISALIGNED = {(2999, 3001, 4093)}
#: shapes whose GPU time is near what one launch costs the host in Python: timed once more with both sides replayed
#: from CUDA graphs, the GPU's work alone
HOST_BOUND = [(1024, 1024, 1024), (2048, 2048, 2048), (3000, 5000, 1000), (16, 4096, 4096)]
FUSED = (8192, 11008, 4096)
LADDER = (4096, 4096, 4096)
CUBLAS = "torch.matmul (cuBLAS)"
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
FINAL = {"triton": matmul, "triton persistent": matmul_persistent, "triton persistent+TMA": matmul_persistent_tma}
#: shapes where the K loop is short or K is not a whole number of steps: matmul_peeled is timed there too
PEELED = {(3000, 5000, 1000), (2048, 5632, 2048), (1024, 1024, 1024)}
STEPS = {
    "ladder 1: naive": matmul_naive,
    "ladder 2: tiled, row-major": matmul_tiled,
    "ladder 3: grouped order": matmul_grouped,
    "ladder 4: autotuned": matmul_autotuned,
}


def matmul_unhinted(a, b):
    """matmul(a, b) with ALIGN = 1, what the compiler knows without the launcher's hint (the autotuner tunes it on its
    own: ALIGN is part of its key)."""
    (M, K), N = a.shape, b.shape[1]
    out = torch.empty(M, N, device=a.device, dtype=a.dtype)
    strides = (a.stride(0), a.stride(1), b.stride(0), b.stride(1), out.stride(0), out.stride(1))
    matmul_kernel[matmul_grid(M, N)](a, b, out, a, M, N, K, *strides, HAS_BIAS=False, ACTIVATION=None, ALIGN=1)
    return out


def _shape(M, N, K) -> str:
    return f"{M}x{N}x{K}"


def addmm_gelu(a, b, bias):
    """bias + a @ b in one cuBLAS call (the bias in its epilogue), then GELU: two kernels."""
    return torch.nn.functional.gelu(torch.addmm(bias, a, b), approximate="tanh")


def _matmul_rows(M, N, K, name, dtype) -> list[Row]:
    a = torch.randn(M, K, device="cuda", dtype=dtype)
    b = torch.randn(K, N, device="cuda", dtype=dtype)
    impls = {**STEPS, **FINAL} if (M, N, K) == LADDER else FINAL
    if (M, N, K) in AWKWARD:
        impls = {**FINAL, "triton, ALIGN=1": matmul_unhinted}
    if (M, N, K) in PADDED:
        impls = {**impls, "triton, no padding": lambda a, b: matmul(a, b, pad="never")}
    if (M, N, K) in MISALIGNED:
        impls = {k: v for k, v in impls.items() if k not in ("triton persistent+TMA", "triton, ALIGN=1")}
    if (M, N, K) in PEELED:
        impls = {**impls, "triton, peeled K": matmul_peeled}
    counts = dict(
        lesson="05",
        op="matmul",
        shape=_shape(M, N, K),
        dtype=name,
        bytes=matmul_bytes(M, N, K, a.element_size()),
        flops=matmul_flops(M, N, K),
    )
    rows = paired(
        {impl: (lambda fn=fn: fn(a, b)) for impl, fn in impls.items()}, (CUBLAS, lambda: torch.matmul(a, b)), **counts
    )
    if (M, N, K) in HOST_BOUND:
        graph_impls = {**FINAL, "triton, peeled K": matmul_peeled} if (M, N, K) in PEELED else FINAL
        rows += paired(
            {f"{impl} (CUDA graph)": graphed(lambda fn=fn: fn(a, b)) for impl, fn in graph_impls.items()},
            (f"{CUBLAS}, CUDA graph", graphed(lambda: torch.matmul(a, b))),
            **counts,
        )
    return rows


def _fused_rows(name, dtype) -> list[Row]:
    M, N, K = FUSED
    a = torch.randn(M, K, device="cuda", dtype=dtype)
    b = torch.randn(K, N, device="cuda", dtype=dtype)
    bias = torch.randn(N, device="cuda", dtype=dtype)
    compiled = torch.compile(addmm_gelu)
    impls = {
        "triton, fused epilogue": lambda: matmul(a, b, bias, "gelu"),
        "triton, no epilogue (matmul alone)": lambda: matmul(a, b),
    }
    baselines = {
        "torch gelu(a @ b + bias), 3 kernels": lambda: matmul_ref(a, b, bias, "gelu"),
        "torch gelu(addmm(bias, a, b)), 2 kernels": lambda: addmm_gelu(a, b, bias),
        "torch.compile(gelu(addmm(bias, a, b)))": lambda: compiled(a, b, bias),
    }
    rows = []
    for baseline in baselines.items():
        rows += paired(
            impls if not rows else {"triton, fused epilogue": impls["triton, fused epilogue"]},
            baseline,
            lesson="05",
            op="matmul+bias+gelu",
            shape=_shape(M, N, K),
            dtype=name,
            bytes=matmul_bytes(M, N, K, a.element_size()) + N * a.element_size(),  # and the bias, read once
            flops=matmul_flops(M, N, K),
        )
    return rows


def run() -> list[Row]:
    rows = []
    for name, dtype in DTYPES.items():
        for M, N, K in SQUARE + LLM + AWKWARD:
            rows += _matmul_rows(M, N, K, name, dtype)
            torch.cuda.empty_cache()  # free the inputs before the next shape
        rows += _fused_rows(name, dtype)
        torch.cuda.empty_cache()
    return rows
