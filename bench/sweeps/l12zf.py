"""Lesson 12, issue 15: make bench's decode rows at the 1B shapes with the int4 rows `l08f.py --int4 --wide` chose,
against the table as set, each in a make bench run of its own (bf16, int8, int4 and torchao paired in one run as
make bench pairs them). `l08f` times a step in a sweep, where gains under about 10 % have not held in make bench
before (its docstring); this is the paired timing that decides.

Run from the repo root on the GPU after `l08f.py --int4 --wide` (< 200 s):
``PYTHONPATH=$PWD OUT=$OUT python3 bench/sweeps/l12zf.py $OUT/sweep_l08f-int4.txt``. Writes $OUT/bench-12-1b-edited/
(bench.csv, bench.md) with the sweep's EDIT lines applied; with ``--as-set`` (or no EDIT lines) $OUT/bench-12-1b-as-set/. ``--cpu``: parses the sweep's
file and applies its EDIT lines under the interpreter, nothing timed (a smoke test).
"""

import os
import sys

if "--cpu" in sys.argv:
    os.environ.setdefault("TRITON_INTERPRET", "1")

from lessons import l12_quantization as L12  # noqa: E402

paths = [a for a in sys.argv[1:] if not a.startswith("--")]
edits = []
for path in paths:
    with open(path) as f:
        for line in f:
            if "-> EDIT: " in line:
                edits.append(line.split("-> EDIT: ", 1)[1].split("  #")[0].strip().rstrip(","))
print(f"{len(edits)} EDIT lines from {paths}:", *edits, sep="\n  ")
out = os.environ.get("OUT", "build/l12zf")


def bench_1b(folder):
    import bench.__main__ as driver
    import bench.lesson12 as B

    B.run = lambda: B.decode("TinyLlama-1.1B") + B.decode("Llama-3.2-1B")
    return driver.main(["--only", "12", "--out", os.path.join(out, folder)])


if "--as-set" in sys.argv or not edits:
    sys.exit(0 if "--cpu" in sys.argv else bench_1b("bench-12-1b-as-set"))
for edit in edits:
    exec(edit, vars(L12))  # noqa: S102 - lines this repository's own sweep printed
print("FUSED_INT4_KERNEL", L12.FUSED_INT4_KERNEL, "FUSED_STREAM_SCHEDULES", L12.FUSED_STREAM_SCHEDULES,
      "FUSED_PIPE_SCHEDULES", L12.FUSED_PIPE_SCHEDULES)  # fmt: skip
if "--cpu" in sys.argv:
    sys.exit(0)  # applied; nothing timed on the CPU
sys.exit(bench_1b("bench-12-1b-edited"))
