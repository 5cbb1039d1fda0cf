"""Lesson 04 for `make bench`: the solution's softmax against torch.softmax and torch.compile of the same op.

Each matrix holds 2**26 elements (256 MB in fp32, 128 MB in bf16: larger than the L2, so the timings measure
HBM), at N = 1024, 4096, 16384, in fp32 and bf16; plus the unfused softmax_ref, whose 4x the traffic the lesson
predicts, and rows longer than one block (the online kernel). bytes = 2 * M * N * element_size (read x once, write
once: the op's minimum, credited to every implementation); flops = 5 * M * N (max, subtract, exp, sum, divide).
torch.compile is compiled afresh for each shape (dynamic=False) and warmed up before it is timed.
"""

import torch

from utils.lessons import load
from utils.timing import bench

SHAPES = [(65536, 1024), (16384, 4096), (4096, 16384)]
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def _softmax_torch(x):
    return torch.softmax(x, dim=-1)


def _row(shape, dtype, ms, baseline, baseline_ms, element_size):
    M, N = shape
    return {
        "lesson": "04",
        "op": "softmax",
        "shape": f"{M}x{N}",
        "dtype": dtype,
        "impl": "triton",
        "ms": ms,
        "baseline": baseline,
        "baseline_ms": baseline_ms,
        "bytes": 2 * M * N * element_size,
        "flops": 5 * M * N,
    }


def run(ceil) -> list[dict]:
    lesson = load("04")
    rows = []
    for name, dtype in DTYPES.items():
        for M, N in SHAPES:
            x = torch.randn(M, N, device="cuda", dtype=dtype)
            nbytes = 2 * x.numel() * x.element_size()
            torch.compiler.reset()
            compiled = torch.compile(_softmax_torch, dynamic=False)
            compiled(x)  # compile outside the timing
            ours = bench(lambda: lesson.softmax(x), bytes=nbytes)
            eager = bench(lambda: torch.softmax(x, dim=-1), bytes=nbytes)
            inductor = bench(lambda: compiled(x), bytes=nbytes)
            rows.append(_row((M, N), name, ours.ms, "torch.softmax", eager.ms, x.element_size()))
            rows.append(_row((M, N), name, ours.ms, "torch.compile", inductor.ms, x.element_size()))
            if (M, N, name) == (16384, 4096, "fp32"):  # the lesson's prediction: about 4x the unfused version
                unfused = bench(lambda: lesson.softmax_ref(x), bytes=nbytes)
                rows.append(_row((M, N), name, ours.ms, "softmax_ref (unfused)", unfused.ms, x.element_size()))
            del x
    for M, N in [(512, 131072)]:  # past MAX_BLOCK_SIZE: the online kernel, two reads and one write
        x = torch.randn(M, N, device="cuda")
        nbytes = 2 * x.numel() * x.element_size()
        ours = bench(lambda: lesson.softmax(x), bytes=nbytes)
        eager = bench(lambda: torch.softmax(x, dim=-1), bytes=nbytes)
        rows.append(_row((M, N), "fp32", ours.ms, "torch.softmax", eager.ms, x.element_size()))
    return rows
