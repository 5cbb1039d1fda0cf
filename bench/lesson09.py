"""Lesson 09 for `make bench`: what fp16 accumulation and split-K buy on this GPU, each against torch.matmul.

- fp16 accumulation: the same 128 x 128 x 32 tiles accumulating in fp32 (`matmul_tiled`), in fp16
  (`matmul_fp16acc`), and in fp16 flushed into fp32 every 4 K steps (`matmul_flushed`), fp16 inputs at 4096^3.
  On data-centre GPUs both accumulators run at the same tensor-core rate; GeForce cards list fp16 accumulation at
  twice the rate.
- split-K at a decoder's shape (16 tokens, 4096 -> 4096): too few tiles to fill the GPU without it.

flops = matmul_flops(M, N, K) = 2 M N K; bytes = matmul_bytes(M, N, K, 2) = (M K + K N + M N) * 2 (lesson 01's counts:
fp16 in and out; split-K's fp32 partials are extra traffic it pays).
"""

import torch

from bench.common import Row, paired
from lessons.l01_gpu_hardware import matmul_bytes, matmul_flops
from lessons.l09_test_debug_tune import FP16ACC_TILE, matmul_flushed, matmul_fp16acc, matmul_splitk, matmul_tiled


def _costs(M, N, K):
    return dict(flops=matmul_flops(M, N, K), bytes=matmul_bytes(M, N, K, 2))  # fp16


def run() -> list[Row]:
    rows = []
    M = N = K = 4096
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    rows += paired(
        {
            "fp32 accumulator (same tiles)": lambda: matmul_tiled(a, b, **FP16ACC_TILE),
            "fp16 accumulator": lambda: matmul_fp16acc(a, b),
            "fp16, flushed every 4 steps": lambda: matmul_flushed(a, b, FLUSH_EVERY=4),
        },
        ("torch.matmul", lambda: a @ b),
        lesson="09",
        op="matmul accumulator",
        shape=f"{M}x{N}x{K}",
        dtype="fp16",
        **_costs(M, N, K),
    )
    M, N, K = 16, 4096, 4096
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    rows += paired(
        {f"split-K = {s}": (lambda s=s: matmul_splitk(a, b, SPLIT_K=s)) for s in (1, 4, 16)},
        ("torch.matmul", lambda: a @ b),
        lesson="09",
        op="split-K matmul",
        shape=f"{M}x{N}x{K}",
        dtype="fp16",
        **_costs(M, N, K),
    )
    return rows
