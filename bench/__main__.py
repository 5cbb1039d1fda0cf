"""`make bench`: every lesson's solution kernels against their PyTorch baselines, in one run, on one GPU.

    python -m bench [--only 03 05] [--out results]
    python -m bench --merge run1 run2 --out results   # one report from runs made apart (each within a time limit)

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
import traceback
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
    parser.add_argument("--merge", nargs="+", metavar="DIR", help="write one report from the bench.csv of each DIR")
    args = parser.parse_args(argv)
    if args.merge:
        return merge(args.merge, Path(args.out))
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
    rows, failed = [], []
    for lesson in chosen:
        t0 = time.time()
        try:
            got = importlib.import_module(f"bench.lesson{lesson}").run()
        except Exception:  # noqa: BLE001 - one lesson's failure must not lose the others' measurements
            traceback.print_exc()
            failed.append(lesson)
            print(f"lesson {lesson}: FAILED after {time.time() - t0:.0f} s (traceback above)", flush=True)
            if torch_cuda_broken():
                print("the CUDA context is broken (an illegal memory access?): stopping here", flush=True)
                break
            continue
        print(f"lesson {lesson}: {len(got)} comparisons in {time.time() - t0:.0f} s", flush=True)
        rows += got
        partial(rows, ceil, meta, out)  # a run stopped by a time limit keeps the lessons it finished
    table = report.enrich(rows, ceil)
    out.mkdir(parents=True, exist_ok=True)
    pd.DataFrame([{**meta, **r} for r in table]).to_csv(out / "bench.csv", index=False)
    (out / "bench-partial.csv").unlink(missing_ok=True)
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
    if failed:
        header += f" **Failed in this run, no rows: lesson {', '.join(failed)}.**"
    (out / "bench.md").write_text(report.markdown(table, header))
    fig = report.roofline_figure(table, ceil, f"make bench on {env.gpu_name}")
    fig.savefig(out / "roofline.png", dpi=110, bbox_inches="tight")
    print(report.markdown(table, header))
    print(f"wrote {out / 'bench.csv'}, {out / 'bench.md'}, {out / 'roofline.png'}")
    return 1 if failed else 0


def partial(rows, ceil, meta: dict, out: Path) -> None:
    """The rows measured so far, as ``bench-partial.csv`` in ``out``, in bench.csv's columns (``--merge`` reads it
    once renamed); removed when the run completes."""
    import pandas as pd

    from bench import report

    out.mkdir(parents=True, exist_ok=True)
    pd.DataFrame([{**meta, **r} for r in report.enrich(rows, ceil)]).to_csv(out / "bench-partial.csv", index=False)


def torch_cuda_broken() -> bool:
    """True when CUDA calls fail (after an illegal memory access every later call does)."""
    import torch

    try:
        torch.cuda.synchronize()
        return False
    except Exception:  # noqa: BLE001
        return True


def merge(folders: list[str], out: Path) -> int:
    """One bench.csv / bench.md / roofline.png from the bench.csv of runs made apart on the same GPU."""
    import pandas as pd

    from bench import report

    for f in folders:
        if not (Path(f) / "bench.csv").is_file():
            found = "no bench.csv in that folder"
            if (Path(f) / "bench-partial.csv").is_file():
                found += " (a run stopped early left bench-partial.csv: rename it to merge what it measured)"
            raise SystemExit(f"--merge {f}: {found}; give the folders that `python -m bench --out DIR` wrote.")
    frames = [pd.read_csv(Path(f) / "bench.csv", dtype={"lesson": str}) for f in folders]
    frame = pd.concat(frames, ignore_index=True)
    gpus = set(frame["gpu"])
    if len(gpus) != 1:
        raise SystemExit(f"the runs were made on different GPUs ({', '.join(sorted(gpus))}): not one report")
    first = frame.iloc[0]
    ceil = report.ceilings_of(first)
    out.mkdir(parents=True, exist_ok=True)
    frame.to_csv(out / "bench.csv", index=False)
    rows = frame.to_dict("records")
    header = report.header_of(frames)
    (out / "bench.md").write_text(report.markdown(rows, header))
    report.roofline_figure(rows, ceil, f"make bench on {first['gpu']}").savefig(
        out / "roofline.png", dpi=110, bbox_inches="tight"
    )
    print(f"merged {len(rows)} rows from {len(folders)} runs into {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
