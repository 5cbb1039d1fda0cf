"""Lesson 04 for `make bench`: the solution's softmax against torch.softmax and torch.compile of the same op.

Each matrix holds 2**26 elements (256 MB in fp32, 128 MB in bf16: larger than the L2, so the timings measure HBM),
at N = 1024, 4096, 16384, in fp32 and bf16; plus the unfused softmax_ref at 16384 x 4096 in fp32 (the lesson's
prediction: about 4x), and 512 rows of 131072 in fp32, past MAX_BLOCK_SIZE (the online kernel). Every side is
credited with the op's minimum traffic, softmax_bytes(M, N, itemsize) (read x once, write out once), and
softmax_flops(M, N). torch.compile is compiled afresh for each shape (dynamic=False), outside the timing.
"""

import torch

from bench.common import Row, paired
from lessons.l04_fused_softmax import softmax, softmax_bytes, softmax_flops, softmax_ref

SHAPES = [(65536, 1024), (16384, 4096), (4096, 16384)]
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
LONG_ROWS = (512, 131072)  # fp32, against torch.softmax only


def _softmax_torch(x):
    return torch.softmax(x, dim=-1)


def run() -> list[Row]:
    rows = []
    cases = [(name, dtype, M, N) for name, dtype in DTYPES.items() for M, N in SHAPES]
    cases.append(("fp32", torch.float32, *LONG_ROWS))
    for name, dtype, M, N in cases:
        x = torch.randn(M, N, device="cuda", dtype=dtype)
        ours = {"triton": lambda: softmax(x)}
        meta = dict(
            lesson="04",
            op="softmax",
            shape=f"{M}x{N}",
            dtype=name,
            bytes=softmax_bytes(M, N, x.element_size()),
            flops=softmax_flops(M, N),
        )
        rows += paired(ours, ("torch.softmax", lambda: torch.softmax(x, dim=-1)), **meta)
        if (M, N) != LONG_ROWS:
            torch.compiler.reset()
            compiled = torch.compile(_softmax_torch, dynamic=False)
            rows += paired(ours, ("torch.compile", lambda: compiled(x)), **meta)
        if (name, M, N) == ("fp32", 16384, 4096):  # the lesson's prediction: about 4x the unfused version
            rows += paired(ours, ("softmax_ref (unfused)", lambda: softmax_ref(x)), **meta)
        x = None  # free the memory before the next shape
    return rows
