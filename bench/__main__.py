"""`make bench`: every lesson's solution kernels against their PyTorch baselines, in one run, on one GPU.

    python -m bench [--only 03 05] [--out results]

Each ``bench/lessonNN.py`` defines ``run(ceil) -> list[dict]``: one row per comparison, both sides timed in this
run. This driver measures the GPU's ceilings first (copy bandwidth, matmul rates), adds ratios and the fraction of
the roof each kernel reaches, and writes ``bench.csv``, ``bench.md`` and ``roofline.png`` with the GPU and versions.
"""

from __future__ import annotations

import argparse
import importlib
import math
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LESSONS = ("03", "04", "05", "06")


def _fmt(x, digits=3):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return ""
    return f"{x:.{digits}g}" if isinstance(x, float) else str(x)


def plain_copy_gbs(nbytes: int = 1 << 30, copies: int = 50) -> float:
    """Copy bandwidth without the harness: CUDA events around back-to-back 1 GiB copies (best of three), as a
    cross-check of utils.roofline's measured ceiling."""
    import torch

    src = torch.empty(nbytes // 4, dtype=torch.float32, device="cuda").normal_()
    dst = torch.empty_like(src)
    dst.copy_(src)
    best = float("inf")
    for _ in range(3):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(copies):
            dst.copy_(src)
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) / copies)
    return 2 * nbytes / best / 1e6


def enrich(rows, ceil):
    """Adds GB/s, TFLOP/s, the ratio to the baseline and the fraction of the roof measured in this run."""
    from utils import roofline

    out = []
    for r in rows:
        r = dict(r)
        ms, bytes_, flops = r["ms"], r.get("bytes"), r.get("flops")
        r["GB/s"] = bytes_ / ms / 1e6 if bytes_ else None
        r["TFLOP/s"] = flops / ms / 1e9 if flops else None
        r["ratio"] = r["baseline_ms"] / ms if r.get("baseline_ms") else None
        if r["TFLOP/s"] and bytes_ and r["dtype"] in ceil.tflops:
            # the roofline's bound at this intensity: copy bandwidth below the ridge, the matmul rate above it
            r["roof %"] = 100 * r["TFLOP/s"] / roofline.attainable(flops / bytes_, ceil, r["dtype"])
        elif r["GB/s"]:
            r["roof %"] = 100 * r["GB/s"] / ceil.bandwidth_gbs
        else:
            r["roof %"] = None
        out.append(r)
    return out


def roofline_figure(rows, ceil, title):
    """Every measured kernel on the roofline, one colour per op (rows repeat a kernel once per baseline)."""
    import matplotlib

    from utils import roofline

    points = {}
    for r in rows:
        key = (r["op"], r["shape"], r["dtype"], r["impl"])
        if r.get("flops") and r.get("bytes") and key not in points:
            points[key] = roofline.point("", r["flops"], r["bytes"], r["ms"])
    fig = roofline.plot(list(points.values()), ceil, precision="bf16", title=title)
    ax = fig.axes[0]
    ops = sorted({key[0] for key in points})
    colours = matplotlib.colormaps["tab10"]
    for i, op in enumerate(ops):
        mine = [p for key, p in points.items() if key[0] == op]
        ax.scatter(
            [p["intensity"] for p in mine],
            [p["tflops"] for p in mine],
            s=55,
            color=colours(i % 10),
            edgecolor="black",
            linewidth=0.5,
            zorder=7,
            label=op,
        )
    ax.legend(loc="upper left", fontsize=9, ncol=2)
    return fig


def markdown(rows, header: str) -> str:
    cols = [
        "lesson",
        "op",
        "shape",
        "dtype",
        "impl",
        "ms",
        "GB/s",
        "TFLOP/s",
        "baseline",
        "baseline_ms",
        "ratio",
        "roof %",
    ]
    lines = [
        header,
        "",
        "| " + " | ".join(c if c != "ratio" else "× baseline" for c in cols) + " |",
        "|" + "---|" * len(cols),
    ]
    for r in rows:
        lines.append("| " + " | ".join(_fmt(r.get(c)) for c in cols) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=list(LESSONS), help="lessons to run, e.g. --only 04 05")
    parser.add_argument("--out", default=str(ROOT / "results"), help="folder for bench.csv, bench.md, roofline.png")
    args = parser.parse_args(argv)

    from utils import setup

    env = setup(quiet=True)
    if not env.is_gpu:
        print(
            "make bench needs an NVIDIA GPU: here kernels would run in Triton's interpreter on the CPU, where "
            f"timings mean nothing ({env.reason}). Run it on a GPU machine.",
            file=sys.stderr,
        )
        return 2
    import pandas as pd

    from utils import roofline

    print(env.describe())
    ceil = roofline.measure_ceilings()
    plain = plain_copy_gbs()
    print(
        f"ceilings measured here: copy {ceil.bandwidth_gbs:.0f} GB/s; "
        + ", ".join(f"{k} {v:.0f} TFLOP/s" for k, v in ceil.tflops.items())
    )
    rows = []
    for lesson in args.only:
        try:
            module = importlib.import_module(f"bench.lesson{lesson}")
        except ModuleNotFoundError:
            print(f"lesson {lesson}: no bench/lesson{lesson}.py yet, skipped")
            continue
        t0 = time.time()
        got = module.run(ceil)
        print(f"lesson {lesson}: {len(got)} comparisons in {time.time() - t0:.0f} s")
        rows += got
    rows = enrich(rows, ceil)
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    meta = {
        "gpu": env.gpu_name,
        "torch": env.versions["torch"],
        "triton": env.versions["triton"],
        "python": platform.python_version(),
        "date": stamp,
        "copy GB/s": round(ceil.bandwidth_gbs, 1),
        "plain torch copy GB/s": round(plain, 1),
        **{f"{k} TFLOP/s (matmul)": round(v, 1) for k, v in ceil.tflops.items()},
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    frame = pd.DataFrame([{**meta, **r} for r in rows])
    frame.to_csv(out / "bench.csv", index=False)
    header = (
        f"Measured by `make bench` on **{env.gpu_name}** ({stamp}), torch {meta['torch']}, triton "
        f"{meta['triton']}. Ceilings measured in the same run: copy {ceil.bandwidth_gbs:.0f} GB/s (read + "
        f"write; a plain loop of torch copies timed with CUDA events gives {plain:.0f} GB/s, "
        f"{100 * ceil.bandwidth_gbs / plain:.1f}% of it), matmul "
        + ", ".join(f"{k} {v:.0f}" for k, v in ceil.tflops.items())
        + " TFLOP/s. "
        "`× baseline` = baseline time / Triton time (above 1: Triton is faster); `roof %` = share of the copy "
        "bandwidth (memory-bound ops) or of the measured matmul rate (compute-bound ops)."
    )
    (out / "bench.md").write_text(markdown(rows, header))
    fig = roofline_figure(rows, ceil, f"make bench on {env.gpu_name}")
    fig.savefig(out / "roofline.png", dpi=110, bbox_inches="tight")
    print(markdown(rows, header))
    print(f"wrote {out / 'bench.csv'}, {out / 'bench.md'}, {out / 'roofline.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
