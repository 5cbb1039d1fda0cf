"""A picture of a bitonic sorting network (lesson 10): wires left to right, one column per compare-exchange step.

    from utils.pictures.sorting import bitonic_network
    bitonic_network(8)

Each step (k, j) pairs lane i with lane i ^ j; the arrow points to the lane that keeps the larger value (down for
an ascending pair, up for a descending one: a pair sorts ascending when (i & k) == 0). Stages (one k each) are
shaded alternately.
"""

from __future__ import annotations

import matplotlib.pyplot as plt


def bitonic_steps(n: int) -> list[tuple[int, int]]:
    """The (k, j) steps of a bitonic network on n = 2**m wires: k = 2, 4, ..., n; for each, j = k/2, ..., 1."""
    if n < 1 or n & (n - 1):
        raise ValueError(f"a bitonic network needs a power-of-two number of wires, got {n}")
    steps, k = [], 2
    while k <= n:
        j = k // 2
        while j >= 1:
            steps.append((k, j))
            j //= 2
        k *= 2
    return steps


def bitonic_network(n: int = 8, values=None, ax=None):
    """Draws the network on ``n`` wires (a power of two, at most 32); with ``values`` (n numbers), writes what
    each wire holds after every step. Returns the Figure."""
    steps = bitonic_steps(n)
    if n > 32:
        raise ValueError(f"n = {n} wires would not be readable: draw at most 32")
    own = ax is None
    if own:
        fig, ax = plt.subplots(figsize=(1.2 + 0.75 * len(steps), 0.45 * n + 1), layout="constrained")
    else:
        fig = ax.figure
    for i in range(n):
        ax.plot([-0.5, len(steps) - 0.5], [i, i], color="0.6", lw=1, zorder=1)
        ax.text(-0.6, i, f"lane {i}", ha="right", va="center", fontsize=8)
    vals = list(values) if values is not None else None
    stage_of = sorted({k for k, _ in steps})
    for s, (k, j) in enumerate(steps):
        if stage_of.index(k) % 2 == 0:
            ax.axvspan(s - 0.5, s + 0.5, color="0.93", zorder=0, gid="stage")
        for i in range(n):
            partner = i ^ j
            if partner < i:
                continue
            ascending = (i & k) == 0
            lo, hi = (i, partner) if ascending else (partner, i)  # the larger value ends up on `hi`
            colour = "tab:blue" if ascending else "tab:orange"
            arrow = dict(arrowstyle="-|>", color=colour, lw=1.5)
            ax.annotate("", xy=(s, hi), xytext=(s, lo), zorder=2, arrowprops=arrow)
            ax.plot([s, s], [i, partner], "o", color="k", ms=3, zorder=3, gid="compare")
            if vals is not None:
                a, b = vals[i], vals[partner]
                vals[i], vals[partner] = (min(a, b), max(a, b)) if ascending else (max(a, b), min(a, b))
        if vals is not None:
            for i in range(n):
                ax.text(s + 0.12, i - 0.18, f"{vals[i]:g}", fontsize=7, color="0.25")
        ax.text(s, n - 0.3, f"k={k}\nj={j}", ha="center", va="bottom", fontsize=7)
    ax.set_xlim(-2.2, len(steps) - 0.3)
    ax.set_ylim(n + 0.9, -0.8)
    ax.axis("off")
    ax.set_title(f"Bitonic sorting network on {n} lanes: {len(steps)} compare-exchange steps\n"
                 "(blue: ascending pair, orange: descending; the arrow points to the larger value)",
                 loc="left", fontsize=9)  # fmt: skip
    if own:
        plt.close(fig)
    return fig
