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
from unittest import mock

CPU = "--cpu" in sys.argv
if CPU:
    os.environ["TRITON_INTERPRET"] = "1"

import utils  # noqa: E402  (sets the interpreter up before triton is imported)

env = utils.mode.current()

import torch  # noqa: E402
import triton  # noqa: E402

from bench.sweeps.l10w import graphed, registers  # noqa: E402
from lessons import l10_sort_scan_data as L  # noqa: E402
from utils import timing  # noqa: E402

DEV = env.device
LINES = []
T0 = time.time()
BUDGET_S = 70


def say(line=""):
    print(line, flush=True)
    LINES.append(line)
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "sweep_l10x.txt"), "w") as f:
            f.write("\n".join(LINES) + "\n")


def bench_ms(fn):
    if CPU:
        fn()
        return float("nan")
    return timing.bench(fn).ms


def main():
    say(f"lesson 10 sweep x on {env.gpu_name if env.is_gpu else 'CPU (interpreter)'}, torch {torch.__version__}, "
        f"triton {triton.__version__}; as set: GROUPBY_SCHEDULES['partials'] {L.GROUPBY_SCHEDULES['partials']}, "
        f"PARTIALS_VARIANT {L.PARTIALS_VARIANT}")  # fmt: skip
    n_copy = 2**28 if not CPU else 4096
    src = torch.randint(0, 9, (n_copy,), device=DEV, dtype=torch.int32)
    dst = torch.empty_like(src)
    copy_ms = bench_ms(lambda: dst.copy_(src))
    copy_gbs = 2 * n_copy * 4 / copy_ms / 1e6
    say(f"copy 2^28 int32: {copy_ms:.4f} ms, {copy_gbs:.1f} GB/s (the '% copy' below)")
    del src, dst

    num_keys, rows = 16, (10**8 if not CPU else 3000)
    table = L.table_from_pandas(L.random_table(rows, num_keys), DEV)
    nbytes = L.query_bytes(rows)
    threshold = torch.full((1,), 0.5, dtype=torch.float32, device=DEV)
    want = [t.cpu() for t in L.groupby_dense_ref(table["key"], table["value"], table["x"], 0.5, num_keys)]

    def line(label, ms, note=""):
        say(f"   {label:62s} {ms:9.4f} ms {nbytes / ms / 1e6 / copy_gbs * 100:5.1f}% copy {note}")

    say(f"\n== {rows:.0e} rows, 16 keys, {nbytes / 1e9:.2f} GB read; the group-by graphed (zeros and kernel)")
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
    timed = []
    for B, U, P, W in schedules:
        label = f"B={B} U={U} P={P} w={W}"
        if time.time() - T0 > BUDGET_S:
            say(f"   {label:62s} SKIPPED (past {BUDGET_S} s)")
            continue

        def run(B=B, U=U, P=P, W=W):  # without groupby_partials' wait (a graph cannot hold it)
            return L._groupby_partials(table, threshold, num_keys, B, U, P, W)

        try:
            got = [t.cpu() for t in L.groupby_partials(table, threshold, num_keys, BLOCK_SIZE=B, UNROLL=U,
                                                       PROGRAMS_PER_SM=P, num_warps=W)]  # fmt: skip
        except ValueError as e:  # UNROLL 4 left the lesson after this sweep's run (no gain): the launcher refuses it
            say(f"   {label:62s} refused: {e}")
            continue
        if not all(torch.equal(g, w) for g, w in zip(got, want)):
            say(f"   {label:62s} FAIL (not the float64 truth)")
            continue
        ms = bench_ms(graphed(run))
        timed.append((ms, (B, U, P, W)))
        line(label, ms, f"{registers()} registers (a new compile)")
    if not timed:
        return
    ms, schedule = min(timed)
    say(f"\nEDIT: GROUPBY_SCHEDULES['partials'] = {schedule}  ({ms:.4f} ms graphed)")
    with mock.patch.multiple(L, GROUPBY_SCHEDULES={**L.GROUPBY_SCHEDULES, "partials": schedule}):
        prepared = L.prepare_query(table, num_keys)
        a, b = L.query(table, 0.5, num_keys), prepared(0.5)
        same = all(torch.equal(a[c], b[c]) for c in a)
        say(f"\n== the query with it: {prepared!r}; same result as query(): {same}")
        for label, fn in (("query()", lambda: L.query(table, 0.5, num_keys)), ("prepared(0.5)", lambda: prepared(0.5))):
            line(label, bench_ms(fn))
    say(f"done in {time.time() - T0:.0f} s")


if __name__ == "__main__":
    main()
