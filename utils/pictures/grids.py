"""Pictures of how Triton programs cover their data.

* :func:`program_grid` — a 1-D array cut into blocks of ``BLOCK_SIZE``, one block per program id, drawn one
  program per row so that row ``pid``, column ``j`` is element ``pid * BLOCK_SIZE + j``; the tail of the last
  block, past ``n``, is hatched (those lanes are switched off by the mask).
* :func:`tile_grid` — an output matrix cut into ``BLOCK_M x BLOCK_N`` tiles, each labelled with the program id
  that computes it: row-major, or grouped as in Triton's matmul tutorial. ``upto=k`` shows only the first ``k``
  programs and which row-blocks of A and column-blocks of B they read (what must sit in L2 at once).

The arithmetic lives in small pure functions (:func:`cdiv`, :func:`owner`, :func:`block_offsets`,
:func:`masked_lanes`, :func:`tile_of`, :func:`tile_order`, :func:`live_blocks`): the pictures draw what those
return, and the tests check them. Every artist a test may look for carries a ``gid`` ("tail", "offset", "tile",
"order", ...).

A picture made here is closed in pyplot before it is returned, so a notebook shows it once, as the cell's value
(``fig = program_grid(...)`` shows nothing; ``display(fig)`` does). Pass ``ax=`` to draw into your own figure.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib import colormaps
from matplotlib.patches import Rectangle

#: programs drawn in full by program_grid; beyond this the middle ones are left out (a "⋮" row)
MAX_ROWS = 16
#: program_grid writes each cell's offset in it when a block has at most this many lanes
TEXT_LANES = 32
#: tile_grid draws (and labels) tiles one by one up to this many; beyond, it draws one image, unlabelled
MAX_TILE_LABELS = 400

_PROGRAM_COLOURS = colormaps["tab10"]
_ORDER_COLOURS = colormaps["viridis"]
_LIVE = "#f28e2b"  # the row-blocks of A / column-blocks of B read by the first `upto` programs


# -- arithmetic ------------------------------------------------------------------------------------------------


def _positive(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def cdiv(a: int, b: int) -> int:
    """Ceiling division, as ``triton.cdiv``: how many blocks of ``b`` items cover ``a`` items."""
    return -(-int(a) // int(b))


def num_programs(n: int, BLOCK_SIZE: int) -> int:
    """Programs in a 1-D launch over ``n`` elements: ``cdiv(n, BLOCK_SIZE)`` (rounding up covers the tail)."""
    return cdiv(_positive("n", n), _positive("BLOCK_SIZE", BLOCK_SIZE))


def owner(i: int, BLOCK_SIZE: int) -> int:
    """The program id whose block holds element ``i``: ``i // BLOCK_SIZE`` (its lane is ``i % BLOCK_SIZE``)."""
    BLOCK_SIZE = _positive("BLOCK_SIZE", BLOCK_SIZE)
    if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or i < 0:
        raise ValueError(f"element index must be an integer >= 0, got {i!r}")
    return int(i) // BLOCK_SIZE


def block_offsets(pid: int, BLOCK_SIZE: int) -> np.ndarray:
    """The offsets program ``pid`` computes: ``pid * BLOCK_SIZE + arange(BLOCK_SIZE)``."""
    BLOCK_SIZE = _positive("BLOCK_SIZE", BLOCK_SIZE)
    return int(pid) * BLOCK_SIZE + np.arange(BLOCK_SIZE)


def masked_lanes(n: int, BLOCK_SIZE: int) -> int:
    """Lanes of the last program whose offsets are ``>= n``: the ones ``mask = offsets < n`` switches off."""
    return num_programs(n, BLOCK_SIZE) * BLOCK_SIZE - n


def tile_of(pid: int, M: int, N: int, BLOCK_M: int, BLOCK_N: int, GROUP_M: int | None = None) -> tuple[int, int]:
    """The tile ``(pid_m, pid_n)`` of an ``M x N`` output that program ``pid`` computes.

    Row-major when ``GROUP_M`` is None: program ids sweep a row of tiles, then the next row. Grouped (as in
    Triton's matmul tutorial): ``GROUP_M`` rows of tiles are swept column by column, so programs that run at the
    same time share row-blocks of A and column-blocks of B; the last group may have fewer rows.
    """
    num_pid_m = cdiv(_positive("M", M), _positive("BLOCK_M", BLOCK_M))
    num_pid_n = cdiv(_positive("N", N), _positive("BLOCK_N", BLOCK_N))
    if not 0 <= pid < num_pid_m * num_pid_n:
        raise ValueError(
            f"pid {pid} is outside the grid of {num_pid_m} x {num_pid_n} = {num_pid_m * num_pid_n} programs"
        )
    if GROUP_M is None:
        return pid // num_pid_n, pid % num_pid_n
    GROUP_M = _positive("GROUP_M", GROUP_M)
    in_group = GROUP_M * num_pid_n  # programs per group of GROUP_M tile rows
    first_m = (pid // in_group) * GROUP_M  # the group's first tile row
    rows = min(num_pid_m - first_m, GROUP_M)  # the last group can be shorter
    k = pid % in_group  # position inside the group: down a column, then the next column
    return first_m + k % rows, k // rows


def tile_order(M: int, N: int, BLOCK_M: int, BLOCK_N: int, GROUP_M: int | None = None) -> np.ndarray:
    """``order[pid_m, pid_n]`` = the program id that computes that tile (a permutation of the program ids)."""
    num_pid_m, num_pid_n = cdiv(M, BLOCK_M), cdiv(N, BLOCK_N)
    order = np.full((num_pid_m, num_pid_n), -1, dtype=np.int64)
    for pid in range(num_pid_m * num_pid_n):
        order[tile_of(pid, M, N, BLOCK_M, BLOCK_N, GROUP_M)] = pid
    return order


def live_blocks(order: np.ndarray, upto: int) -> tuple[list[int], list[int]]:
    """Row-blocks of A and column-blocks of B that programs ``0 .. upto-1`` read.

    Tile ``(m, n)`` of C = A @ B needs row-block ``m`` of A and column-block ``n`` of B, so these are what the
    first ``upto`` programs want in L2 at the same time.
    """
    m, n = np.nonzero(np.asarray(order) < upto)
    return sorted(set(m.tolist())), sorted(set(n.tolist()))


def shown_programs(count: int, max_rows: int = MAX_ROWS, keep=()) -> list[int | None]:
    """The program ids program_grid draws, in order, with ``None`` standing for a run of programs left out.

    All of them when ``count <= max_rows``; otherwise the first few, the ones in ``keep`` and the last one.
    """
    if count <= max_rows:
        return list(range(count))
    keep = {int(k) for k in keep if 0 <= k < count}
    want = set(range(max(1, max_rows - 2 - 2 * len(keep)))) | keep | {count - 1}
    shown: list[int | None] = []
    for pid in sorted(want):
        if shown and pid != shown[-1] + 1:
            shown.append(None)
        shown.append(pid)
    return shown


# -- drawing helpers -------------------------------------------------------------------------------------------


def _new_axes(ax, figsize):
    """(fig, ax, made_here)."""
    if ax is not None:
        return ax.figure, ax, False
    fig, ax = plt.subplots(figsize=figsize, layout="constrained")
    return fig, ax, True


def _finish(fig, made_here):
    if made_here:
        plt.close(fig)  # shown once, as the returned value, not a second time by the inline backend
    return fig


def _ink(rgba) -> str:
    """Black or white text, whichever reads better on ``rgba``."""
    r, g, b = rgba[:3]
    return "black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.5 else "white"


def _lighten(rgba, amount=0.7):
    return tuple(c + (1 - c) * amount for c in rgba[:3]) + (1.0,)


# -- program_grid ----------------------------------------------------------------------------------------------


def program_grid(
    n: int,
    BLOCK_SIZE: int,
    highlight: int | None = None,
    ax=None,
    *,
    element: int | None = None,
    max_rows: int = MAX_ROWS,
):
    """Draws which program id handles which element of an ``n``-element array, and returns the Figure.

    One row per program: row ``pid``, column ``j`` is offset ``pid * BLOCK_SIZE + j`` (``j`` is the lane of
    ``tl.arange(0, BLOCK_SIZE)``), coloured by program. The lanes of the last program past ``n`` are hatched: the
    mask ``offsets < n`` switches them off. ``highlight`` outlines one program; ``element`` outlines one element
    and says which program owns it. With more than ``max_rows`` programs the middle ones are left out ("⋮").
    """
    n = _positive("n", n)
    BLOCK_SIZE = _positive("BLOCK_SIZE", BLOCK_SIZE)
    count = num_programs(n, BLOCK_SIZE)
    masked = masked_lanes(n, BLOCK_SIZE)
    if highlight is not None and not 0 <= highlight < count:
        raise ValueError(
            f"highlight={highlight} is not a program id: n={n}, BLOCK_SIZE={BLOCK_SIZE} launches "
            f"programs 0..{count - 1}"
        )
    if element is not None and not 0 <= element < n:
        raise ValueError(f"element={element} is not an index of an array of n={n} elements (0..{n - 1})")
    element_pid = None if element is None else owner(element, BLOCK_SIZE)
    keep = [p for p in (highlight, element_pid) if p is not None]
    rows = shown_programs(count, max_rows, keep)

    width = min(15.0, max(8.5, 0.5 * BLOCK_SIZE + 3)) if BLOCK_SIZE <= TEXT_LANES else 13.0
    fig, ax, made_here = _new_axes(ax, (width, 0.5 * len(rows) + 2.0))

    # -- cells: one image, a row per shown program
    image = np.ones((len(rows), BLOCK_SIZE, 4))
    for r, pid in enumerate(rows):
        if pid is None:
            continue
        colour = _PROGRAM_COLOURS(pid % _PROGRAM_COLOURS.N)
        image[r, :] = colour
        if pid == count - 1 and masked:
            image[r, BLOCK_SIZE - masked :] = _lighten(colour)
    ax.imshow(
        image,
        aspect="auto",
        interpolation="nearest",
        gid="cells",
        extent=(-0.5, BLOCK_SIZE - 0.5, len(rows) - 0.5, -0.5),
    )
    if BLOCK_SIZE <= 64:  # white lines between cells
        ax.set_xticks(np.arange(-0.5, BLOCK_SIZE), minor=True)
    ax.set_yticks(np.arange(-0.5, len(rows)), minor=True)
    ax.grid(which="minor", color="white", linewidth=1.5)
    ax.tick_params(which="minor", length=0)

    # -- offsets in the cells, or each row's range beside it when the cells are too small to hold them
    size = 13 if BLOCK_SIZE <= 8 else 11 if BLOCK_SIZE <= 16 else 8
    for r, pid in enumerate(rows):
        if pid is None:
            ax.text((BLOCK_SIZE - 1) / 2, r, "⋮", ha="center", va="center", fontsize=16, gid="gap")
            continue
        offsets = block_offsets(pid, BLOCK_SIZE)
        if BLOCK_SIZE <= TEXT_LANES:
            for j, off in enumerate(offsets):
                inside = off < n
                ink = _ink(image[r, j]) if inside else "0.35"
                ax.text(
                    j,
                    r,
                    str(off),
                    ha="center",
                    va="center",
                    fontsize=size,
                    color=ink,
                    gid="offset",
                    fontstyle="normal" if inside else "italic",
                )
        else:
            last = min(offsets[-1], n - 1)
            ax.text(
                BLOCK_SIZE - 0.5 + 0.01 * BLOCK_SIZE,
                r,
                f" {offsets[0]}…{last}",
                ha="left",
                va="center",
                fontsize=11,
                gid="range",
            )

    # -- the masked tail of the last program
    if masked and rows[-1] == count - 1:
        ax.add_patch(
            Rectangle(
                (BLOCK_SIZE - masked - 0.5, len(rows) - 1.5),
                masked,
                1,
                fill=False,
                hatch="//",
                edgecolor="0.3",
                linewidth=1.5,
                gid="tail",
            )
        )

    # -- highlights
    if highlight is not None:
        r = rows.index(highlight)
        ax.add_patch(
            Rectangle((-0.5, r - 0.5), BLOCK_SIZE, 1, fill=False, edgecolor="black", linewidth=3.5, gid="highlight")
        )
    if element is not None:
        r, j = rows.index(element_pid), element % BLOCK_SIZE
        ax.add_patch(Rectangle((j - 0.5, r - 0.5), 1, 1, fill=False, edgecolor="crimson", linewidth=3.5, gid="element"))

    # -- axes and title
    ax.set_yticks(range(len(rows)), ["⋮" if p is None else f"pid {p}" for p in rows], fontsize=12)
    if BLOCK_SIZE <= 16:
        ax.set_xticks(range(BLOCK_SIZE))
    ax.tick_params(labelsize=12)
    ax.set_xlabel("lane j of tl.arange(0, BLOCK_SIZE):   offset = pid * BLOCK_SIZE + j", fontsize=12)
    lines = [f"n = {n}, BLOCK_SIZE = {BLOCK_SIZE}:  grid = (cdiv({n}, {BLOCK_SIZE}),) = ({count},) programs"]
    if masked:
        lines.append(f"hatched: {masked} lane{'s' if masked > 1 else ''} past n, switched off by mask = offsets < n")
    else:
        lines.append("n is a multiple of BLOCK_SIZE: no lane is masked off")
    if element is not None:
        lines.append(
            f"element {element}: pid {element} // {BLOCK_SIZE} = {element_pid}, "
            f"lane {element} % {BLOCK_SIZE} = {element % BLOCK_SIZE}"
        )
    ax.set_title("\n".join(lines), fontsize=13, loc="left")
    for side in ("top", "right", "left", "bottom"):
        ax.spines[side].set_visible(False)
    return _finish(fig, made_here)


# -- tile_grid -------------------------------------------------------------------------------------------------


def tile_grid(M: int, N: int, BLOCK_M: int, BLOCK_N: int, GROUP_M: int | None = None, upto: int | None = None, ax=None):
    """Draws the ``M x N`` output of a matmul cut into ``BLOCK_M x BLOCK_N`` tiles, each labelled with the
    program id that computes it, and returns the Figure.

    Row-major order when ``GROUP_M`` is None, grouped order otherwise (thick lines between groups). Tiles that
    stick out past M or N are drawn partial, with their full footprint dashed and hatched outside the matrix.
    ``upto=k`` colours and labels only programs ``0 .. k-1`` and draws A (left) and B (top) with the row-blocks
    and column-blocks those programs read.
    """
    order = tile_order(M, N, BLOCK_M, BLOCK_N, GROUP_M)
    num_pid_m, num_pid_n = order.shape
    total = order.size
    if upto is not None and not 1 <= upto <= total:
        raise ValueError(f"upto={upto} must be between 1 and the number of programs, {total}")
    live = total if upto is None else upto

    full_w, full_h = num_pid_n * BLOCK_N, num_pid_m * BLOCK_M
    strip = 0.12 * max(full_w, full_h)  # width of the A and B strips
    gap = 0.04 * max(full_w, full_h)
    left = strip + gap if upto is not None else 0
    aspect = (full_h + left) / (full_w + left)
    width = 9.0 if aspect <= 1 else float(np.clip(9.0 / aspect, 8.0, 9.0))
    fig, ax, made_here = _new_axes(ax, (width, float(np.clip(width * aspect, 3.5, 9.0)) + 1.5))

    def colour(pid):
        return _ORDER_COLOURS(0.15 + 0.85 * pid / max(live - 1, 1)) if pid < live else (0.92, 0.92, 0.92, 1.0)

    if total <= MAX_TILE_LABELS:  # few tiles: one patch each, labelled with its program id
        size = float(np.clip(150 / max(num_pid_m, num_pid_n), 7, 16))
        for m in range(num_pid_m):
            for n in range(num_pid_n):
                pid = int(order[m, n])
                x0, y0 = n * BLOCK_N, m * BLOCK_M
                w, h = min(BLOCK_N, N - x0), min(BLOCK_M, M - y0)
                if w < BLOCK_N or h < BLOCK_M:  # the part past M or N: computed, then masked off
                    ax.add_patch(
                        Rectangle(
                            (x0, y0),
                            BLOCK_N,
                            BLOCK_M,
                            facecolor="white",
                            edgecolor="0.45",
                            hatch="//",
                            linestyle="--",
                            linewidth=1,
                            zorder=1,
                            gid="overhang",
                        )
                    )
                ax.add_patch(
                    Rectangle(
                        (x0, y0), w, h, facecolor=colour(pid), edgecolor="white", linewidth=1.5, zorder=2, gid="tile"
                    )
                )
                if pid < live:
                    ax.text(
                        x0 + w / 2,
                        y0 + h / 2,
                        str(pid),
                        ha="center",
                        va="center",
                        fontsize=size,
                        color=_ink(colour(pid)),
                        zorder=3,
                        gid="order",
                    )
    else:  # many tiles: one image (thousands of patches take seconds to draw), no labels
        image = np.array([[colour(int(pid)) for pid in row] for row in order])
        ax.imshow(image, extent=(0, full_w, full_h, 0), interpolation="nearest", zorder=1, gid="tiles")
        for x0, y0, w, h in ((N, 0, full_w - N, full_h), (0, M, N, full_h - M)):
            if w > 0 and h > 0:  # the parts of the edge tiles past N or M
                ax.add_patch(
                    Rectangle(
                        (x0, y0),
                        w,
                        h,
                        facecolor="white",
                        edgecolor="0.45",
                        hatch="//",
                        linewidth=0.5,
                        zorder=2,
                        gid="overhang",
                    )
                )
    ax.add_patch(Rectangle((0, 0), N, M, fill=False, edgecolor="black", linewidth=2.5, zorder=4, gid="matrix"))
    if GROUP_M is not None:
        for g in range(GROUP_M, num_pid_m, GROUP_M):
            ax.plot([0, N], [g * BLOCK_M] * 2, color="crimson", linewidth=3, zorder=5, gid="group")

    title = f"C = A @ B: {M} x {N} in {BLOCK_M} x {BLOCK_N} tiles\n{num_pid_m} x {num_pid_n} = {total} programs, " + (
        "row-major order" if GROUP_M is None else f"grouped order (GROUP_M = {GROUP_M})"
    )
    if upto is not None:
        a_rows, b_cols = live_blocks(order, upto)
        for m in range(num_pid_m):
            y0, h = m * BLOCK_M, min(BLOCK_M, M - m * BLOCK_M)
            ax.add_patch(
                Rectangle(
                    (-left, y0),
                    strip,
                    h,
                    facecolor=_LIVE if m in a_rows else "0.92",
                    edgecolor="white",
                    linewidth=1.5,
                    gid="a_block",
                )
            )
        for n in range(num_pid_n):
            x0, w = n * BLOCK_N, min(BLOCK_N, N - n * BLOCK_N)
            ax.add_patch(
                Rectangle(
                    (x0, -left),
                    w,
                    strip,
                    facecolor=_LIVE if n in b_cols else "0.92",
                    edgecolor="white",
                    linewidth=1.5,
                    gid="b_block",
                )
            )
        ax.text(-left + strip / 2, -gap, "A", ha="center", va="bottom", fontsize=14, weight="bold")
        ax.text(-gap, -left + strip / 2, "B", ha="right", va="center", fontsize=14, weight="bold")
        title += (
            f"\nprograms 0..{upto - 1} read {len(a_rows)} row-block{'s' if len(a_rows) > 1 else ''} of A"
            f" + {len(b_cols)} column-block{'s' if len(b_cols) > 1 else ''} of B"
            f" = {len(a_rows) + len(b_cols)} (orange)"
        )

    pad = 0.02 * max(full_w, full_h)
    ax.set_xlim(-left - pad, full_w + pad)
    ax.set_ylim(full_h + pad, -left - pad)  # row 0 at the top, like the matrix
    ax.set_aspect("equal")
    ax.set_xlabel(f"column (N = {N})", fontsize=12)
    ax.set_ylabel(f"row (M = {M})", fontsize=12)
    ax.tick_params(labelsize=11)
    # ticks on the tile edges when there are few, else matplotlib's, but never over the A and B strips
    ax.set_xticks(
        [n * BLOCK_N for n in range(num_pid_n + 1)]
        if num_pid_n <= 8
        else [t for t in ax.get_xticks() if 0 <= t <= full_w]
    )
    ax.set_yticks(
        [m * BLOCK_M for m in range(num_pid_m + 1)]
        if num_pid_m <= 8
        else [t for t in ax.get_yticks() if 0 <= t <= full_h]
    )
    ax.set_title(title, fontsize=12, loc="left")
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    return _finish(fig, made_here)
