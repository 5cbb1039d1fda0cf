"""Pictures for the attention and decoder-layer lessons: which (query block, key block) tiles a causal flash
attention visits, and the launches of one decoder layer. Plain matplotlib; each returns a Figure.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

#: tile kinds in :func:`causal_tiles`
SKIPPED, MASKED, FULL = 0, 1, 2


def causal_tiles(T: int, BLOCK_M: int, BLOCK_N: int, causal: bool = True) -> np.ndarray:
    """(query blocks, key blocks) array: FULL where a program reads the key block without a mask, MASKED where it
    applies the mask (the diagonal, or the partial last block), SKIPPED where it never visits it. The same ranges
    as the lesson's kernels: unmasked keys [0, start_m) then masked [start_m, min(start_m + BLOCK_M, T)) when
    causal; unmasked [0, T // BLOCK_N * BLOCK_N) then masked up to T when not."""
    for name, value in (("T", T), ("BLOCK_M", BLOCK_M), ("BLOCK_N", BLOCK_N)):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    n_m, n_n = -(-T // BLOCK_M), -(-T // BLOCK_N)
    tiles = np.full((n_m, n_n), SKIPPED)
    for i in range(n_m):
        start_m = i * BLOCK_M
        full_end, masked_end = (start_m, min(start_m + BLOCK_M, T)) if causal else (T // BLOCK_N * BLOCK_N, T)
        for j in range(n_n):
            start_n = j * BLOCK_N
            if start_n < full_end:
                tiles[i, j] = FULL
            elif start_n < masked_end:
                tiles[i, j] = MASKED
    return tiles


def causal_blocks_picture(T: int = 600, BLOCK_M: int = 128, BLOCK_N: int = 64, causal: bool = True):
    """The tiles of :func:`causal_tiles`: blue full (no mask), orange masked, grey skipped."""
    tiles = causal_tiles(T, BLOCK_M, BLOCK_N, causal)
    fig, ax = plt.subplots(figsize=(7, 4))
    cmap = plt.matplotlib.colors.ListedColormap(["#eeeeee", "#ff7f0e", "#1f77b4"])
    ax.imshow(tiles, cmap=cmap, vmin=SKIPPED, vmax=FULL)
    ax.set_xlabel(f"key block (BLOCK_N = {BLOCK_N})")
    ax.set_ylabel(f"query block = program (BLOCK_M = {BLOCK_M})")
    visited = int((tiles != SKIPPED).sum())
    ax.set_title(
        f"T = {T}, {'causal' if causal else 'not causal'}: {visited} of {tiles.size} tiles visited\n"
        "blue: no mask, orange: masked, grey: skipped"
    )
    plt.close(fig)
    return fig


#: the launches of one decoder layer: (name, "triton" or "cublas")
LAYER_STEPS = [
    ("RMSNorm", "triton"),
    ("q k v\nprojection", "cublas"),
    ("RoPE\n(q, k)", "triton"),
    ("flash\nattention", "triton"),
    ("o\nprojection", "cublas"),
    ("residual +\nRMSNorm", "triton"),
    ("gate/up\nprojection", "cublas"),
    ("SwiGLU", "triton"),
    ("down proj\n+ residual", "cublas"),
]


def layer_picture(steps=LAYER_STEPS):
    """One decoder layer as a row of launches: blue boxes cuBLAS, orange ones Triton kernels."""
    colour = {"triton": "#ff7f0e", "cublas": "#1f77b4"}
    fig, ax = plt.subplots(figsize=(13, 2.2))
    for i, (name, kind) in enumerate(steps):
        ax.add_patch(plt.Rectangle((i * 1.4, 0), 1.1, 1, color=colour[kind], alpha=0.85))
        ax.text(i * 1.4 + 0.55, 0.5, name, ha="center", va="center", fontsize=10, color="white", weight="bold")
        if i:
            ax.annotate("", xy=(i * 1.4, 0.5), xytext=(i * 1.4 - 0.3, 0.5), arrowprops={"arrowstyle": "->"})
    ax.set_xlim(-0.1, len(steps) * 1.4)
    ax.set_ylim(-0.1, 1.1)
    ax.axis("off")
    ax.set_title(f"One decoder layer: {len(steps)} launches (blue: cuBLAS, orange: your Triton kernels)")
    plt.close(fig)
    return fig
