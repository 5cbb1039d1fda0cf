"""A picture of the GPU's memory hierarchy and of one streaming multiprocessor (SM) with its warps.

:func:`memory_hierarchy` draws H100 SXM figures by default; pass ``spec=`` (a dict with any of the keys of
:data:`H100_SXM`) for another GPU. Sizes and the HBM bandwidth are NVIDIA's published figures (H100 datasheet and
Hopper whitepaper); latencies and the L2 bandwidth are not published, and are shown as approximate values
(``≈``) of the kind microbenchmarks report. They are for orders of magnitude, not for napkin math to three digits.

Like the other pictures, the figure is closed in pyplot before it is returned, so a notebook shows it once, as the
cell's value. Pass ``ax=`` to draw into your own axes (then only the hierarchy is drawn, without the SM).
"""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle

#: H100 SXM: datasheet and Hopper whitepaper; "≈" values are typical microbenchmark results, not published
H100_SXM = {
    "name": "NVIDIA H100 SXM",
    "sms": 132,
    "clock_ghz": 1.98,  # maximum boost clock
    "schedulers_per_sm": 4,  # SM sub-partitions, one warp scheduler each
    "warps_per_sm": 64,  # resident warps (2,048 threads)
    "fp32_lanes_per_sm": 128,
    "register_reads_per_lane": 3,  # an FMA reads three 32-bit operands per lane per cycle
    "tensor_cores_per_sm": 4,
    "registers_kb_per_sm": 256,  # 65,536 x 32-bit
    "smem_kb_per_sm": 256,  # L1 and shared memory together
    "smem_max_kb": 228,  # the most of it a kernel may use as shared memory
    "smem_bytes_per_clock": 128,  # 32 banks x 4 bytes, per SM
    "l2_mb": 50,
    "l2_note": "≈ 2-3x HBM",
    "hbm": "HBM3",
    "hbm_gb": 80,
    "hbm_tbs": 3.35,
    "latency_cycles": {"registers": "≈ 1", "smem": "≈ 30", "l2": "≈ 250", "hbm": "≈ 500-700"},
}

_LEVEL_COLOURS = ("#c6dbef", "#9ecae1", "#6baed6", "#3182bd")
_FONT = 12


def _levels(s: dict) -> list[dict]:
    """The four levels, fastest first, with the lines of text each box shows."""
    lat = s["latency_cycles"]
    smem_tbs = s["sms"] * s["smem_bytes_per_clock"] * s["clock_ghz"] / 1e3
    # the register file feeds every FP32 lane three 4-byte operands a cycle (tensor cores read more still)
    reg_tbs = s["sms"] * s["fp32_lanes_per_sm"] * s["register_reads_per_lane"] * 4 * s["clock_ghz"] / 1e3
    total = lambda kb: f"{s['sms'] * kb / 1024:,.0f} MB in all"  # noqa: E731
    return [
        {
            "name": "Registers",
            "where": "per SM",
            "lines": [
                f"{s['registers_kb_per_sm']} KB per SM ({total(s['registers_kb_per_sm'])})",
                f"latency {lat['registers']} cycle; ≈ {reg_tbs:,.0f} TB/s in all (3 operands a lane a cycle)",
            ],
        },
        {
            "name": "L1 / shared memory",
            "where": "per SM",
            "lines": [
                f"{s['smem_kb_per_sm']} KB per SM (up to {s['smem_max_kb']} KB shared)",
                f"latency {lat['smem']} cycles; ≈ {smem_tbs:,.0f} TB/s in all",
            ],
        },
        {
            "name": "L2 cache",
            "where": "shared by all SMs",
            "lines": [
                f"{s['l2_mb']} MB, shared by all {s['sms']} SMs",
                f"latency {lat['l2']} cycles; bandwidth {s['l2_note']}",
            ],
        },
        {
            "name": f"{s['hbm']} (global memory)",
            "where": "off chip",
            "lines": [f"{s['hbm_gb']} GB per GPU", f"latency {lat['hbm']} cycles; {s['hbm_tbs']:g} TB/s"],
        },
    ]


def _draw_hierarchy(ax, s: dict) -> None:
    levels = _levels(s)
    n = len(levels)
    height, gap = 1.0, 0.22
    for i, level in enumerate(levels):
        width = 7.0 + 1.3 * i  # a pyramid: small and fast on top, big and slow at the bottom
        y = (n - 1 - i) * (height + gap)
        box = FancyBboxPatch(
            (-width / 2, y),
            width,
            height,
            boxstyle="round,pad=0.02,rounding_size=0.12",
            facecolor=_LEVEL_COLOURS[i],
            edgecolor="#08306b",
            lw=1.5,
            gid=f"level:{level['name']}",
        )
        ax.add_patch(box)
        ax.text(0, y + 0.73, level["name"], ha="center", va="center", fontsize=_FONT + 2, weight="bold")
        ax.text(0, y + 0.45, level["lines"][0], ha="center", va="center", fontsize=_FONT)
        ax.text(0, y + 0.19, level["lines"][1], ha="center", va="center", fontsize=_FONT - 1)
    top = n * (height + gap) - gap
    x_arrow = -(7.0 + 1.3 * (n - 1)) / 2 - 0.5
    ax.add_patch(
        FancyArrowPatch(
            (x_arrow, 0.1), (x_arrow, top - 0.1), arrowstyle="<|-|>", mutation_scale=18, color="#444444", lw=1.5
        )
    )
    ax.text(x_arrow - 0.2, top - 0.1, "smaller,\nfaster", ha="right", va="top", fontsize=_FONT - 1)
    ax.text(x_arrow - 0.2, 0.1, "bigger,\nslower", ha="right", va="bottom", fontsize=_FONT - 1)
    # which levels live inside each SM and which are shared
    x_brace = (7.0 + 1.3 * (n - 1)) / 2 + 0.3
    per_sm, shared = (2 * (height + gap), top), (0, 2 * (height + gap) - gap)
    for (lo, hi), text in ((per_sm, "inside\neach SM"), (shared, "shared\nby all SMs")):
        ax.plot([x_brace, x_brace + 0.15, x_brace + 0.15, x_brace], [lo, lo, hi, hi], color="#444444", lw=1.5)
        ax.text(x_brace + 0.3, (lo + hi) / 2, text, ha="left", va="center", fontsize=_FONT - 1)
    ax.set_xlim(x_arrow - 1.5, x_brace + 1.9)
    ax.set_ylim(-0.2, top + 0.15)
    ax.set_aspect("auto")
    ax.axis("off")


def _draw_sm(ax, s: dict) -> None:
    ax.add_patch(
        FancyBboxPatch(
            (0, 0),
            10,
            9.0,
            boxstyle="round,pad=0.05,rounding_size=0.3",
            facecolor="#f7f7f7",
            edgecolor="#333333",
            lw=2,
            gid="sm",
        )
    )
    ax.text(5, 8.6, f"One SM (of {s['sms']})", ha="center", va="center", fontsize=_FONT + 2, weight="bold")
    k = s["schedulers_per_sm"]
    warps_each = s["warps_per_sm"] // k
    regs_each = s["registers_kb_per_sm"] // k
    lanes_each = s["fp32_lanes_per_sm"] // k
    tc_each = max(1, s["tensor_cores_per_sm"] // k)
    for j in range(k):
        col, row = j % 2, j // 2
        x0, y0 = 0.3 + col * 4.85, 5.05 - row * 3.35
        ax.add_patch(
            FancyBboxPatch(
                (x0, y0),
                4.55,
                3.1,
                boxstyle="round,pad=0.02,rounding_size=0.15",
                facecolor="white",
                edgecolor="#555555",
                lw=1.2,
                gid="subpartition",
            )
        )
        ax.text(x0 + 2.27, y0 + 2.75, "warp scheduler", ha="center", va="center", fontsize=_FONT - 1, weight="bold")
        # the resident warps: one bar each, 32 threads wide; the scheduler issues for one warp per cycle
        bar_w, bar_h = 4.0 / warps_each * 0.8, 0.9
        for w in range(warps_each):
            ax.add_patch(
                Rectangle(
                    (x0 + 0.25 + w * 4.0 / warps_each, y0 + 1.55),
                    bar_w,
                    bar_h,
                    facecolor="#fd8d3c" if w == 0 else "#fdd0a2",
                    edgecolor="none",
                    gid="warp",
                )
            )
        ax.text(x0 + 2.27, y0 + 1.2, f"{warps_each} warps × 32 threads", ha="center", va="center", fontsize=_FONT - 2)
        ax.text(x0 + 2.27, y0 + 0.7, f"{regs_each} KB registers", ha="center", va="center", fontsize=_FONT - 2)
        ax.text(
            x0 + 2.27,
            y0 + 0.28,
            f"{lanes_each} FP32 lanes · {tc_each} tensor core",
            ha="center",
            va="center",
            fontsize=_FONT - 2,
        )
    ax.add_patch(
        FancyBboxPatch(
            (0.3, 0.35),
            9.4,
            1.15,
            boxstyle="round,pad=0.02,rounding_size=0.15",
            facecolor=_LEVEL_COLOURS[1],
            edgecolor="#08306b",
            lw=1.2,
            gid="smem",
        )
    )
    ax.text(5, 0.93, f"L1 / shared memory: {s['smem_kb_per_sm']} KB", ha="center", va="center", fontsize=_FONT)
    ax.text(
        5,
        -0.55,
        f"A warp: 32 threads, one instruction at a time. Up to {s['warps_per_sm']} warps\n"
        f"({s['warps_per_sm'] * 32:,} threads) live on an SM; while one waits for memory,\n"
        f"its scheduler issues for another. A Triton program runs on one SM.",
        ha="center",
        va="top",
        fontsize=_FONT - 1,
    )
    ax.set_xlim(-0.2, 10.2)
    ax.set_ylim(-2.6, 9.3)
    ax.axis("off")


def memory_hierarchy(ax=None, spec: dict | None = None):
    """The memory hierarchy (registers, L1/shared memory, L2, HBM: size, latency, bandwidth) beside one SM with
    its warp schedulers and resident warps. H100 SXM numbers unless ``spec`` overrides keys of :data:`H100_SXM`.

    Returns the matplotlib Figure. With ``ax`` given, draws only the hierarchy into it.
    """
    s = {**H100_SXM, **(spec or {})}
    s["latency_cycles"] = {**H100_SXM["latency_cycles"], **s.get("latency_cycles", {})}
    if ax is not None:
        _draw_hierarchy(ax, s)
        return ax.figure
    fig, (left, right) = plt.subplots(
        1, 2, figsize=(15, 7), gridspec_kw={"width_ratios": [1, 1.45]}, layout="constrained"
    )
    _draw_sm(left, s)
    _draw_hierarchy(right, s)
    fig.suptitle(f"{s['name']}: where data lives (≈: typical measured values, not published)", fontsize=_FONT + 3)
    plt.close(fig)
    return fig
