"""Explorers: the course's pictures with sliders, to build intuition by moving one number at a time.

Each is a thin ``ipywidgets.interactive`` over a plain function of :mod:`utils.pictures` or
:mod:`utils.roofline`: no custom JavaScript, an ``Output`` area and inline matplotlib, so they work the same in
JupyterLab 4, VS Code and Colab. Each returns the widget; end a cell with it to show it.

* :func:`grid_explorer` — n, BLOCK_SIZE and an element index: which program owns what (lesson 02);
* :func:`tile_explorer` — a matmul's output tiles in launch order, row-major or grouped (lesson 05);
* :func:`roofline_explorer` — an arithmetic intensity on a GPU's roofline: which roof binds, the best time.

The widget's ``.f`` is the function it calls with the slider values and ``.result`` what it last returned (a
Figure; for the roofline, a dict with the reading and the Figure), so a test can drive it without a browser.
Sliders redraw when released (``continuous_update=False``): the picture takes a moment to draw.
"""

from __future__ import annotations

import numbers

import ipywidgets as widgets

from . import pictures, roofline

_STYLE = {"description_width": "initial"}
_WIDE = widgets.Layout(width="520px")


def _show(fig) -> None:
    """Shows a Figure in the widget's output area; outside IPython (tests) there is nowhere to show it."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    if get_ipython() is not None:
        from IPython.display import display

        display(fig)


def _powers_of_two(lo: int, hi: int) -> list[int]:
    out, p = [], 1
    while p <= hi:
        if p >= lo:
            out.append(p)
        p *= 2
    return out


def _require_in(value, lo, hi, name, integer=False, why=""):
    """``value`` if it is a number (an integer if ``integer``) from ``lo`` to ``hi``, else a ValueError naming the
    argument and the range: a slider would clamp it silently and show a picture of another value."""
    kind = numbers.Integral if integer else numbers.Real
    if isinstance(value, bool) or not isinstance(value, kind) or not lo <= value <= hi:
        a = "an integer" if integer else "a number"
        raise ValueError(f"{name} must be {a} from {lo:,g} to {hi:,g}{why}, got {value!r}")
    return value


def _int_slider(value, lo, hi, description, name, why=""):
    _require_in(value, lo, hi, name, integer=True, why=why)
    return widgets.IntSlider(
        value=value, min=lo, max=hi, description=description, continuous_update=False, style=_STYLE, layout=_WIDE
    )


def _pow2_slider(value, options, description):
    if value not in options:
        raise ValueError(f"{description} must be one of {options}, got {value!r}")
    return widgets.SelectionSlider(
        options=options, value=value, description=description, continuous_update=False, style=_STYLE, layout=_WIDE
    )


# -- 1-D: program ids over an array ----------------------------------------------------------------------------


def grid_explorer(n: int = 37, BLOCK_SIZE: int = 8, element: int | None = None, max_n: int = 4096):
    """Sliders for ``n`` and ``BLOCK_SIZE`` (powers of two) and an element index; draws
    :func:`utils.pictures.program_grid`: the programs of a 1-D launch, their offsets, the masked tail, and which
    program owns the chosen element."""
    n_w = _int_slider(n, 1, max(max_n, n) if isinstance(n, int) else max_n, "n (elements)", "n")
    block_w = _pow2_slider(BLOCK_SIZE, _powers_of_two(1, 1024), "BLOCK_SIZE")
    why = f" (an index into the n = {n} elements)"
    element_w = _int_slider(n - 1 if element is None else element, 0, n - 1, "element i", "element", why)

    def follow_n(change):  # registered before interactive's own observers, so the index is valid when it draws
        element_w.max = change["new"] - 1

    n_w.observe(follow_n, names="value")

    def draw(n, BLOCK_SIZE, element):
        fig = pictures.program_grid(n, BLOCK_SIZE, element=min(element, n - 1))
        _show(fig)
        return fig

    return widgets.interactive(draw, n=n_w, BLOCK_SIZE=block_w, element=element_w)


# -- 2-D: tiles of a matmul in launch order --------------------------------------------------------------------


def tile_explorer(
    M: int = 300,
    N: int = 330,
    BLOCK_M: int = 32,
    BLOCK_N: int = 32,
    GROUP_M: int | None = None,
    upto: int | None = None,
    max_size: int = 2048,
):
    """Sliders for ``M``, ``N``, ``BLOCK_M``, ``BLOCK_N``, ``GROUP_M`` (none = row-major) and ``upto`` (how many
    programs have started); draws :func:`utils.pictures.tile_grid`, with the blocks of A and B the first ``upto``
    programs read. ``upto`` at its maximum shows every program."""
    blocks = _powers_of_two(16, 256)
    m_w = _int_slider(M, 1, max(max_size, M) if isinstance(M, int) else max_size, "M (rows of C)", "M")
    n_w = _int_slider(N, 1, max(max_size, N) if isinstance(N, int) else max_size, "N (columns of C)", "N")
    bm_w = _pow2_slider(BLOCK_M, blocks, "BLOCK_M")
    bn_w = _pow2_slider(BLOCK_N, blocks, "BLOCK_N")
    if GROUP_M is not None and (isinstance(GROUP_M, bool) or not isinstance(GROUP_M, int) or GROUP_M < 1):
        raise ValueError(f"GROUP_M must be None (row-major) or a positive integer, got {GROUP_M!r}")
    groups = sorted({1, 2, 3, 4, 5, 6, 7, 8, 16} | ({GROUP_M} - {None}))
    group_options = [("none (row-major)", None)] + [(str(g), g) for g in groups]
    group_w = widgets.Dropdown(options=group_options, value=GROUP_M, description="GROUP_M", style=_STYLE)

    def total():
        return pictures.cdiv(m_w.value, bm_w.value) * pictures.cdiv(n_w.value, bn_w.value)

    why = f" (the {total()} programs of this launch; None: all of them)"
    upto_w = _int_slider(total() if upto is None else upto, 1, total(), "programs started (upto)", "upto", why)

    def follow_sizes(change):  # keep upto in range; "all of them" stays "all of them"
        was_all = upto_w.value == upto_w.max
        upto_w.max = total()
        if was_all:
            upto_w.value = upto_w.max

    for w in (m_w, n_w, bm_w, bn_w):
        w.observe(follow_sizes, names="value")

    def draw(M, N, BLOCK_M, BLOCK_N, GROUP_M, upto):
        count = pictures.cdiv(M, BLOCK_M) * pictures.cdiv(N, BLOCK_N)
        fig = pictures.tile_grid(M, N, BLOCK_M, BLOCK_N, GROUP_M=GROUP_M, upto=None if upto >= count else upto)
        _show(fig)
        return fig

    return widgets.interactive(draw, M=m_w, N=n_w, BLOCK_M=bm_w, BLOCK_N=bn_w, GROUP_M=group_w, upto=upto_w)


# -- the roofline ----------------------------------------------------------------------------------------------


def _fmt_time(ms: float) -> str:
    if ms < 1e-3:
        return f"{ms * 1e6:.3g} ns"
    if ms < 1:
        return f"{ms * 1e3:.3g} µs"
    if ms < 1e3:
        return f"{ms:.3g} ms"
    return f"{ms / 1e3:.3g} s"


def roofline_reading(
    intensity: float, ceilings, precision: str = "bf16", *, flops: float | None = None, bytes: float | None = None
) -> dict:
    """What the roofline says about an op of arithmetic ``intensity`` (FLOP/byte) that does ``flops`` FLOPs or
    moves ``bytes`` bytes (give one; the other follows from the intensity).

    Returns :func:`utils.roofline.reading` of that op (the one way the course decides ``bound`` and ``best_ms``):
    ``bound`` ("memory" or "compute"), ``ridge`` (FLOP/byte), ``tflops`` (the attainable rate), ``memory_ms``
    (bytes / bandwidth), ``compute_ms`` (FLOPs / peak) and ``best_ms``, the larger of the two: no kernel can
    finish sooner, however well it is written.
    """
    if (flops is None) == (bytes is None):
        raise TypeError("give exactly one of flops= or bytes=")
    intensity = roofline.require_count(intensity, "the arithmetic intensity")
    if flops is None:
        flops = roofline.require_count(bytes, "bytes") * intensity
    else:
        bytes = roofline.require_count(flops, "flops") / intensity
    return roofline.reading(flops, bytes, ceilings, precision)


def _describe(r: dict, ceilings, precision: str) -> str:
    roof = (
        (
            f"The memory roof binds: {r['flops']:.3g} FLOPs need {r['bytes']:.3g} bytes, and moving them takes "
            f"{_fmt_time(r['memory_ms'])} at {ceilings.bandwidth_gbs:,.0f} GB/s (the math alone: "
            f"{_fmt_time(r['compute_ms'])})"
        )
        if r["bound"] == "memory"
        else (
            f"The {precision} compute roof binds: {r['flops']:.3g} FLOPs take {_fmt_time(r['compute_ms'])} at "
            f"{ceilings.tflops[precision]:,.0f} TFLOP/s (moving the {r['bytes']:.3g} bytes alone: "
            f"{_fmt_time(r['memory_ms'])})"
        )
    )
    return (
        f"{ceilings.gpu}, {precision}: ridge point at {r['ridge']:,.1f} FLOP/byte. {roof}.\n"
        f"Best possible: {r['tflops']:,.3g} TFLOP/s, {_fmt_time(r['best_ms'])}."
    )


def roofline_explorer(
    intensity: float = 10.0, precision: str = "bf16", gpu: str | None = None, work: float = 1e12, unit: str = "FLOPs"
):
    """A point on a GPU's roofline: sliders for the arithmetic intensity (log scale) and the amount of work (in
    FLOPs or bytes), dropdowns for the precision and the GPU (the datasheet table of :mod:`utils.roofline`; on a
    GPU also "this GPU (measured)", measured the first time it is chosen). Says which roof binds and the best
    achievable time, and draws :func:`utils.roofline.plot` with the op sitting on the roof."""
    from .mode import current

    env = current()
    names = [spec.name for spec in roofline.GPUS]
    here = "this GPU (measured)"
    if env.is_gpu:
        names = [here] + names
    if gpu is None:
        spec = roofline.lookup(env.gpu_name) if env.is_gpu else None
        gpu = spec.name if spec is not None else roofline.ILLUSTRATION
    if gpu not in names:
        raise ValueError(f"gpu must be one of {names}, got {gpu!r}")
    if precision not in roofline.PRECISIONS:
        raise ValueError(f"precision must be one of {roofline.PRECISIONS}, got {precision!r}")
    if unit not in ("FLOPs", "bytes"):
        raise ValueError(f"unit must be 'FLOPs' or 'bytes' (what work counts), got {unit!r}")
    _require_in(intensity, 1e-2, 1e4, "intensity", why=" FLOP/byte (the slider's range)")
    _require_in(work, 1e3, 1e16, "work", why=f" {unit} (the slider's range)")

    intensity_w = widgets.FloatLogSlider(
        value=intensity,
        base=10,
        min=-2,
        max=4,
        step=0.05,
        description="intensity (FLOP/byte)",
        readout_format=".3g",
        continuous_update=False,
        style=_STYLE,
        layout=_WIDE,
    )
    work_w = widgets.FloatLogSlider(
        value=work,
        base=10,
        min=3,
        max=16,
        step=0.1,
        description="work",
        readout_format=".3g",
        continuous_update=False,
        style=_STYLE,
        layout=_WIDE,
    )
    unit_w = widgets.ToggleButtons(options=["FLOPs", "bytes"], value=unit, description="work counted in", style=_STYLE)
    precision_w = widgets.Dropdown(
        options=list(roofline.PRECISIONS), value=precision, description="precision", style=_STYLE
    )
    gpu_w = widgets.Dropdown(options=names, value=gpu, description="GPU", style=_STYLE)

    def ceilings_of(name):
        if name == here:
            return roofline.ceilings(measure=True)
        return roofline.from_spec(roofline.lookup(name))

    def draw(intensity, work, unit, precision, gpu):
        c = ceilings_of(gpu)
        if precision not in c.tflops:  # a measured GPU without that precision (bf16 before Ampere)
            print(f"{c.gpu} has no {precision} roof; showing fp32.")
            precision = "fp32"
        amount = {"flops": work} if unit == "FLOPs" else {"bytes": work}
        r = roofline_reading(intensity, c, precision, **amount)
        op = roofline.point("your op", r["flops"], r["bytes"])  # no time given: a dashed line at its intensity
        text = _describe(r, c, precision)
        fig = roofline.plot([op], c, precision=precision)
        ax = fig.axes[0]
        ax.plot(
            [intensity],
            [r["tflops"]],
            marker="*",
            markersize=18,
            color="gold",
            markeredgecolor="black",
            linestyle="none",
            zorder=7,
            label=f"best possible: {r['tflops']:,.3g} TFLOP/s",
            gid="best",
        )
        ax.legend(loc="upper left", fontsize=10)
        print(text)
        _show(fig)
        return {**r, "text": text, "figure": fig}

    return widgets.interactive(draw, intensity=intensity_w, work=work_w, unit=unit_w, precision=precision_w, gpu=gpu_w)
