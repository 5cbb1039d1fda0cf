"""From the rows of one ``make bench`` run to what is committed in ``results/``: rates, ratios, roof %, a
markdown table and the roofline figure."""

from __future__ import annotations

import math

from bench.common import Row

COLUMNS = ["lesson", "op", "shape", "dtype", "impl", "ms", "GB/s", "TFLOP/s", "baseline", "baseline_ms", "ratio",
           "roof %"]  # fmt: skip


def _fmt(x, digits=3):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return ""
    return f"{x:.{digits}g}" if isinstance(x, float) else str(x)


def _given(x) -> bool:
    """A count that was recorded: not None, not NaN (an empty CSV cell), positive."""
    return x is not None and not (isinstance(x, float) and math.isnan(x)) and x > 0


def enrich(rows: list[Row], ceil) -> list[dict]:
    """Each row as a dict with GB/s, TFLOP/s, the ratio to its baseline, and the share of the roof at its intensity
    measured in this run: the copy bandwidth below the ridge, the matmul rate above it (``utils.roofline.attainable``).
    A kernel can pass 100%: a measured copy or cuBLAS call is a ceiling we reached, not a law of physics."""
    from utils import roofline

    out = []
    for row in rows:
        r = row.as_dict() if isinstance(row, Row) else dict(row)
        ms, nbytes, flops = r["ms"], r.get("bytes"), r.get("flops")
        r["GB/s"] = nbytes / ms / 1e6 if nbytes else None
        r["TFLOP/s"] = flops / ms / 1e9 if flops else None
        r["ratio"] = r["baseline_ms"] / ms if r.get("baseline_ms") else None
        if r["TFLOP/s"] and nbytes and r["dtype"] in ceil.tflops:
            r["roof %"] = 100 * r["TFLOP/s"] / roofline.attainable(flops / nbytes, ceil, r["dtype"])
        elif r["GB/s"]:
            r["roof %"] = 100 * r["GB/s"] / ceil.bandwidth_gbs
        else:
            r["roof %"] = None
        out.append(r)
    return out


def markdown(rows: list[dict], header: str) -> str:
    lines = [
        header,
        "",
        "| " + " | ".join(c if c != "ratio" else "× baseline" for c in COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    for r in rows:
        lines.append("| " + " | ".join(_fmt(r.get(c)) for c in COLUMNS) + " |")
    return "\n".join(lines) + "\n"


def roofline_figure(rows: list[dict], ceil, title: str):
    """Every measured kernel on the roofline, one colour per op (rows repeat a kernel once per baseline)."""
    import matplotlib

    from utils import roofline

    points = {}
    for r in rows:
        key = (r["op"], r["shape"], r["dtype"], r["impl"])
        if _given(r.get("flops")) and _given(r.get("bytes")) and key not in points:
            points[key] = roofline.point("", r["flops"], r["bytes"], r["ms"])
    fig = roofline.plot(list(points.values()), ceil, precision="bf16", title=title)
    ax = fig.axes[0]
    colours = matplotlib.colormaps["tab10"]
    for i, op in enumerate(sorted({key[0] for key in points})):
        mine = [p for key, p in points.items() if key[0] == op]
        ax.scatter([p["intensity"] for p in mine], [p["tflops"] for p in mine], s=55, color=colours(i % 10),
                   edgecolor="black", linewidth=0.5, zorder=7, label=op)  # fmt: skip
    ax.legend(loc="upper left", fontsize=9, ncol=2)
    return fig


def ceilings_of(row) -> "object":
    """The ceilings a run recorded in its CSV columns, as ``utils.roofline.Ceilings``."""
    from utils import roofline

    if not _given(_cell(row, "copy GB/s")):
        raise SystemExit(f"the run on {row['gpu']} recorded no copy bandwidth (column 'copy GB/s'): no roofline")
    tflops = {c.split(" ")[0]: float(row[c]) for c in row.index if c.endswith("TFLOP/s (matmul)") and _given(row[c])}
    return roofline.Ceilings(bandwidth_gbs=float(row["copy GB/s"]), tflops=tflops, gpu=row["gpu"],
                             source="measured by make bench", measured=True)  # fmt: skip


def _cell(row, column):
    """A run's recorded value, or None where its CSV has no such column."""
    return row[column] if column in row.index else None


def _rate(row, column, unit) -> str:
    """A ceiling a run recorded, for the header: its value and unit, or "not measured" (no column, an empty cell)."""
    value = _cell(row, column)
    return f"{value:.0f} {unit}" if _given(value) else "not measured"


def header_of(frames) -> str:
    """The header of a report merged from several runs: each run's GPU, versions, date and ceilings."""
    runs = []
    for f in frames:
        r = f.iloc[0]
        lessons = ", ".join(sorted(set(f["lesson"])))
        runs.append(
            f"lessons {lessons} on **{r['gpu']}** ({r['date']}), torch {r['torch']}, triton {r['triton']}; copy "
            f"{_rate(r, 'copy GB/s', 'GB/s')} (plain torch copy {_rate(r, 'plain torch copy GB/s', 'GB/s')}), "
            f"bf16 matmul {_rate(r, 'bf16 TFLOP/s (matmul)', 'TFLOP/s')}"
        )
    return (
        "Measured by `make bench` in "
        + str(len(frames))
        + " runs (each lesson's rows, both sides, in one run): "
        + "; ".join(runs)
        + ". `× baseline` = baseline time / Triton time (above 1: Triton is faster); `roof %` = "
        "share of the measured copy bandwidth (memory-bound ops) or of the measured cuBLAS matmul rate "
        "(compute-bound ops) at the op's intensity. These are measured ceilings, not limits: a kernel can pass 100%."
    )
