"""Lesson 03 for `make bench`: the course's vector add against torch.add, fp32, from 2**20 to 2**28 elements.

bytes and flops come from lesson 01's counts: add_bytes = 3 * n * itemsize (read x, read y, write out), add_flops = n.
"""

import torch

from bench.common import Row, paired
from lessons.l03_vector_add import add, add_bytes, add_flops


def run() -> list[Row]:
    rows = []
    for log2n in (20, 24, 26, 28):
        n = 2**log2n
        x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
        rows += paired(
            {"triton": lambda: add(x, y)},
            ("torch.add", lambda: torch.add(x, y)),
            lesson="03",
            op="vector add",
            shape=f"2^{log2n}",
            dtype="fp32",
            bytes=add_bytes(n, x.element_size()),
            flops=add_flops(n),
        )
        x = y = None  # free the memory before the next size
    return rows
