"""Lesson 05 for `make bench`: the lesson's matmuls against torch.matmul (cuBLAS), in fp16 and bf16.

Kernels come from solutions/05_matmul.ipynb (utils.lessons.load), the one source. Shapes are M x N x K: square
ones, and the feed-forward layers of LLMs (M tokens, K model width, N hidden width: Llama-2-7B's 4096 -> 11008,
Llama-3-8B's 4096 -> 14336 and back, a 1B model's 2048 -> 5632). Both sides of each row are timed in this run with
utils.timing.bench; every launcher is called once before timing, so compiling and autotuning are not timed.
cuBLAS is timed before and after the Triton kernels of each shape and the two are averaged: a GPU that warms up
during a run slows down by several per cent, and timing the baseline only first would flatter the kernels after it.

    FLOPs = 2 * M * N * K          bytes = (M * K + K * N + M * N) * element size (read A and B, write C once)

The ladder rows time every step of the lesson at 4096^3 (naive, tiled in row-major order, grouped order, autotuned)
against the same cuBLAS call; the fused-epilogue rows time matmul(a, b, bias, "gelu") against PyTorch's
gelu(a @ b + bias), three kernels.
"""

from __future__ import annotations

SQUARE = [(n, n, n) for n in (1024, 2048, 4096, 8192)]
LLM = [(4096, 11008, 4096), (8192, 14336, 4096), (16384, 4096, 14336), (2048, 5632, 2048)]
FUSED = [(8192, 11008, 4096)]
LADDER = (4096, 4096, 4096)
CUBLAS = "torch.matmul (cuBLAS)"


def _shape(M, N, K) -> str:
    return f"{M}x{N}x{K}"


def run(ceil) -> list[dict]:
    import torch

    from utils import timing
    from utils.lessons import load

    lesson = load("05")
    impls = {"triton": lesson.matmul, "triton persistent+TMA": lesson.matmul_persistent}
    ladder = {
        "ladder 1: naive": lesson.matmul_naive,
        "ladder 2: tiled, row-major": lesson.matmul_tiled,
        "ladder 3: grouped order": lesson.matmul_grouped,
        "ladder 4: autotuned": lesson.matmul_autotuned,
    }
    rows = []
    for dtype_name, dtype in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
        for M, N, K in SQUARE + LLM:
            impls_here = {**ladder, **impls} if (M, N, K) == LADDER else impls
            a = torch.randn(M, K, device="cuda", dtype=dtype)
            b = torch.randn(K, N, device="cuda", dtype=dtype)
            flops, nbytes = 2 * M * N * K, (M * K + K * N + M * N) * a.element_size()
            for fn in impls_here.values():
                fn(a, b)  # compile and autotune before timing anything
            before = timing.bench(lambda: torch.matmul(a, b), flops=flops, bytes=nbytes, label=CUBLAS)
            timed = {
                impl: timing.bench(lambda: fn(a, b), flops=flops, bytes=nbytes, label=impl)
                for impl, fn in impls_here.items()
            }
            after = timing.bench(lambda: torch.matmul(a, b), flops=flops, bytes=nbytes, label=CUBLAS)
            for impl, t in timed.items():
                rows.append(
                    {
                        "lesson": "05",
                        "op": "matmul",
                        "shape": _shape(M, N, K),
                        "dtype": dtype_name,
                        "impl": impl,
                        "ms": t.ms,
                        "baseline": CUBLAS,
                        "baseline_ms": (before.ms + after.ms) / 2,
                        "bytes": nbytes,
                        "flops": flops,
                    }
                )
            a = b = None  # free the memory before the next shape
        for M, N, K in FUSED:
            a = torch.randn(M, K, device="cuda", dtype=dtype)
            b = torch.randn(K, N, device="cuda", dtype=dtype)
            bias = torch.randn(N, device="cuda", dtype=dtype)
            flops, nbytes = 2 * M * N * K, (M * K + K * N + M * N + N) * a.element_size()
            lesson.matmul(a, b, bias, "gelu")
            before = timing.bench(lambda: lesson.matmul_torch(a, b, bias, "gelu"), flops=flops, bytes=nbytes)
            t = timing.bench(lambda: lesson.matmul(a, b, bias, "gelu"), flops=flops, bytes=nbytes)
            after = timing.bench(lambda: lesson.matmul_torch(a, b, bias, "gelu"), flops=flops, bytes=nbytes)
            rows.append(
                {
                    "lesson": "05",
                    "op": "matmul+bias+gelu",
                    "shape": _shape(M, N, K),
                    "dtype": dtype_name,
                    "impl": "triton, fused epilogue",
                    "ms": t.ms,
                    "baseline": "torch gelu(a @ b + bias), 3 kernels",
                    "baseline_ms": (before.ms + after.ms) / 2,
                    "bytes": nbytes,
                    "flops": flops,
                }
            )
            a = b = bias = None
        torch.cuda.empty_cache()
    return rows


if __name__ == "__main__":  # python -m bench.lesson05: this lesson alone, as a table
    import pandas as pd

    from utils import roofline, setup

    print(setup().describe())
    table = pd.DataFrame(run(roofline.ceilings()))
    table["TFLOP/s"] = table.flops / table.ms / 1e9
    table["x baseline"] = table.baseline_ms / table.ms
    print(table[["op", "shape", "dtype", "impl", "ms", "baseline_ms", "TFLOP/s", "x baseline"]].to_string())
