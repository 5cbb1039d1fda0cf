"""Lesson 03 for `make bench`: the solution's vector add against torch.add, fp32, from 2**20 to 2**28 elements.

bytes = 3 * n * 4 (read x, read y, write out), flops = n (one addition per element). Both sides are timed here,
in the same run, with utils.timing.bench (median, L2 flushed between repetitions).
"""

import torch

from utils.lessons import load
from utils.timing import bench


def run(ceil) -> list[dict]:
    add = load("03").add
    rows = []
    for log2n in (20, 24, 26, 28):
        n = 2**log2n
        x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
        nbytes = 3 * n * x.element_size()  # read x, read y, write out
        triton_t = bench(lambda: add(x, y), bytes=nbytes, flops=n, label="triton add")
        torch_t = bench(lambda: torch.add(x, y), bytes=nbytes, flops=n, label="torch.add")
        rows.append(
            {
                "lesson": "03",
                "op": "vector add",
                "shape": f"2^{log2n}",
                "dtype": "fp32",
                "impl": "triton",
                "ms": triton_t.ms,
                "baseline": "torch.add",
                "baseline_ms": torch_t.ms,
                "bytes": nbytes,
                "flops": n,
            }
        )
        x = y = None  # free the memory before the next size
    return rows
