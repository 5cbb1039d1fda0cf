"""Lesson 10 sweep x, 2026-11-28 (issue 17), after sweep w: four blocks of rows a step (UNROLL 4) for the 16-key
group-by's kernel.

Run from the repo root: ``PYTHONPATH=$PWD python3 bench/sweeps/l10x.py`` on a GPU (< 90 s), ``... --cpu`` under the
interpreter (tiny shapes, no timings: a smoke test of the script).

Sweep w (an H200) left the kernel at 0.44-0.46 ms, graphed, against 0.297 for its bytes alone: it issues about 93
instructions a row at two blocks a step (offline, sm_90: 187 a step on the main path, 78 more every seventh step
to empty the 4-bit counters). At four blocks a step the main path takes 347 for 4 rows (87 a row), the counters
empty every third step: about 6 % fewer instructions a row, for 104 registers instead of 90 (4 programs of 4
warps an SM fit). This times UNROLL 4 at a few grids beside UNROLL 2 as set, graphed, each checked exactly
against the float64 truth first, then query() and prepare_query(...)(0.5) with the fastest, as make bench times
them. The EDIT line names the fastest: GROUPBY_SCHEDULES["partials"] in solutions/10_sort_scan_data.ipynb.

Run once on an H200 (results/h200-2026-11-28-s16/sweeps/l10x.txt) with UNROLL 4 in the kernel: 0.442 ms at best
against 0.445 for UNROLL 2 at the same grid, under 1 %. UNROLL 4 was taken out of the lesson after it (forty
lines of kernel for nothing measurable); its rows now report the launcher's refusal.
"""

import os
import sys
import time

CPU = "--cpu" in sys.argv
if CPU:
    os.environ["TRITON_INTERPRET"] = "1"

import utils  # noqa: E402  (sets the interpreter up before triton is imported)

env = utils.mode.current()

import torch  # noqa: E402
import triton  # noqa: E402

from bench.sweeps.kit import Log  # noqa: E402
from bench.sweeps.l10v import query_setup  # noqa: E402
from bench.sweeps.l10w import query_with, time_group_by  # noqa: E402
from lessons import l10_sort_scan_data as L  # noqa: E402

T0 = time.time()
BUDGET_S = 70


def main():
    say = Log("l10x")
    say(f"lesson 10 sweep x on {env.gpu_name if env.is_gpu else 'CPU (interpreter)'}, torch {torch.__version__}, "
        f"triton {triton.__version__}; as set: GROUPBY_SCHEDULES['partials'] {L.GROUPBY_SCHEDULES['partials']}, "
        f"PARTIALS_VARIANT {L.PARTIALS_VARIANT}")  # fmt: skip
    num_keys = 16
    table, nbytes, truth, line = query_setup(say, 62, num_keys)
    say(f"\n== {table['key'].numel():.0e} rows, 16 keys, {nbytes / 1e9:.2f} GB read; the group-by graphed (zeros and "
        f"kernel)")  # fmt: skip
    schedules = [
        L.GROUPBY_SCHEDULES["partials"],
        (128, 2, 8, 4),
        (128, 4, 4, 4),
        (128, 4, 3, 4),
        (128, 4, 5, 4),
        (128, 4, 8, 4),
        (64, 4, 8, 2),
        (256, 4, 2, 8),
        (128, 2, 6, 4),
    ]  # fmt: skip  (the first again last)
    timed = time_group_by(say, line, table, truth, [("schedule", s, {}) for s in schedules], T0, BUDGET_S)
    query_with(say, line, table, num_keys, timed, T0)


if __name__ == "__main__":
    main()
