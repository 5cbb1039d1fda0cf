"""`make bench`: every lesson's solution kernels against their PyTorch baselines, in one run, on one GPU.

    python -m bench [--only 03 05] [--out results]

Each ``bench/lessonNN.py`` (found by its file name) defines ``run() -> list[bench.common.Row]``. This command measures
the GPU's ceilings first (copy bandwidth, matmul rates), runs the lessons, and writes ``bench.csv``, ``bench.md`` and
``roofline.png`` (``bench.report``) with the GPU and versions.
"""

from __future__ import annotations

import argparse
import importlib
import platform
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def lessons() -> list[str]:
    """The lesson numbers that have a ``bench/lessonNN.py``, in order."""
    return sorted(p.stem.removeprefix("lesson") for p in HERE.glob("lesson[0-9][0-9].py"))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=None, help="lessons to run, e.g. --only 04 05 (default: all)")
    parser.add_argument("--out", default=str(ROOT / "results"), help="folder for bench.csv, bench.md, roofline.png")
    args = parser.parse_args(argv)
    chosen = lessons() if args.only is None else args.only
    unknown = sorted(set(chosen) - set(lessons()))
    if unknown:
        parser.error(f"no bench/lesson{unknown[0]}.py (lessons with a bench: {', '.join(lessons())})")

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

    from bench import report
    from bench.common import plain_copy_gbs
    from utils import roofline

    print(env.describe())
    ceil = roofline.measure_ceilings()
    plain = plain_copy_gbs()
    print(
        f"ceilings measured here: copy {ceil.bandwidth_gbs:.0f} GB/s; "
        + ", ".join(f"{k} {v:.0f} TFLOP/s" for k, v in ceil.tflops.items())
    )
    rows = []
    for lesson in chosen:
        t0 = time.time()
        got = importlib.import_module(f"bench.lesson{lesson}").run()
        print(f"lesson {lesson}: {len(got)} comparisons in {time.time() - t0:.0f} s", flush=True)
        rows += got
    table = report.enrich(rows, ceil)
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
    pd.DataFrame([{**meta, **r} for r in table]).to_csv(out / "bench.csv", index=False)
    header = (
        f"Measured by `make bench` on **{env.gpu_name}** ({stamp}), torch {meta['torch']}, triton "
        f"{meta['triton']}. Ceilings measured in the same run: copy {ceil.bandwidth_gbs:.0f} GB/s (read + "
        f"write; a plain loop of torch copies timed with CUDA events gives {plain:.0f} GB/s, "
        f"{100 * ceil.bandwidth_gbs / plain:.1f}% of it), matmul "
        + ", ".join(f"{k} {v:.0f}" for k, v in ceil.tflops.items())
        + " TFLOP/s. `× baseline` = baseline time / Triton time (above 1: Triton is faster); `roof %` = share of "
        "the measured copy bandwidth (memory-bound ops) or of the measured cuBLAS matmul rate (compute-bound ops) at "
        "the op's intensity. These are measured ceilings, not limits: a kernel can pass 100%."
    )
    (out / "bench.md").write_text(report.markdown(table, header))
    fig = report.roofline_figure(table, ceil, f"make bench on {env.gpu_name}")
    fig.savefig(out / "roofline.png", dpi=110, bbox_inches="tight")
    print(report.markdown(table, header))
    print(f"wrote {out / 'bench.csv'}, {out / 'bench.md'}, {out / 'roofline.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
