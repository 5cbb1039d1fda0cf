"""Lesson 10 sweep w, 2026-11-28 (issue 17), after sweep v: the 16-key group-by's kernel on its own, graphed, at
its variants and grids, beside the bytes alone.

Run from the repo root: ``PYTHONPATH=$PWD python3 bench/sweeps/l10w.py`` on a GPU (< 120 s), ``... --cpu`` under the
interpreter (tiny shapes, no timings: a smoke test of the script).

Sweep v (an H200, results/h200-2026-11-28-s16/sweeps/l10v.txt) found the bytes alone at 95-99 % of a copy with two
or four rows a thread, but `groupby_partials` as set at 36 % (0.79 ms; an H100 ran the same kernel in 0.50 ms in
session 8): the kernel's work per row, not its loads, sets its time. Each row costs KEYS compares, selects and
fp64 multiply-adds; PARTIALS_VARIANT["groups"] (new) compares the row's group of four keys and its lane in the
group once each, 8 compares a row instead of 16 and half the selects, for the same bits.

What it prints, each next to a copy of 2**28 int32 timed here ('% copy'), timed as make bench times
(utils.timing: L2 flushed before each repetition, median), the group-by replayed from a CUDA graph (its three
zeroed accumulators and its kernel; no host time) and checked exactly against the float64 truth first:
  - sweep v's probe with the bytes alone (MODE 0, two rows a thread): the ceiling;
  - groupby_partials as set, then each variant key flipped alone, then "groups" at grids of BLOCK_SIZE, UNROLL,
    programs an SM and warps, with the registers the compiled kernel took (6 programs of 4 warps an SM fit in 80);
  - query() and prepare_query(...)(0.5) with the fastest, as make bench times them.
The EDIT line names the fastest: GROUPBY_SCHEDULES["partials"] and PARTIALS_VARIANT in
solutions/10_sort_scan_data.ipynb, then ``python -m utils.notebooks``.
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

from bench.sweeps.kit import Log, bench_ms, graphed  # noqa: E402
from bench.sweeps.l10v import probe, query_setup  # noqa: E402
from lessons import l10_sort_scan_data as L  # noqa: E402

DEV = env.device
T0 = time.time()
BUDGET_S = 100
SEEN = set()


def registers():
    """The registers of the groupby_partials_kernel compiled since the last call ('-' where none was, or where
    Triton does not say)."""
    try:
        new = {id(k): k.n_regs for cache in L.groupby_partials_kernel.device_caches.values()
               for k in cache[0].values() if id(k) not in SEEN}  # fmt: skip
    except Exception:  # noqa: BLE001  (the cache's layout is Triton's own; only a figure for information)
        return "-"
    SEEN.update(new)
    return max(new.values()) if new else "-"


def time_group_by(say, line, table, truth, candidates, t0, budget_s):
    """Each (label, (BLOCK_SIZE, UNROLL, PROGRAMS_PER_SM, num_warps), variant) checked exactly against truth
    (groupby_dense_ref's three arrays), then the group-by (its zeroed accumulators and kernel) replayed from a CUDA
    graph and timed as make bench times a row; one the launcher refuses is said and skipped. [(ms, schedule,
    variant)]"""
    num_keys = truth[0].numel()
    threshold = torch.full((1,), 0.5, dtype=torch.float32, device=DEV)
    timed = []
    for label, (B, U, P, W), variant in candidates:
        label = f"{label} B={B} U={U} P={P} w={W}"
        if time.time() - t0 > budget_s:
            say(f"   {label:62s} SKIPPED (past {budget_s} s)")
            continue

        def run(B=B, U=U, P=P, W=W, variant=variant):  # without groupby_partials' wait (a graph cannot hold it)
            return L._groupby_partials(table, threshold, num_keys, B, U, P, W, None, variant)

        try:
            got = L.groupby_partials(table, threshold, num_keys, BLOCK_SIZE=B, UNROLL=U, PROGRAMS_PER_SM=P,
                                     num_warps=W, variant=variant)  # fmt: skip
        except ValueError as e:  # e.g. sweep x's UNROLL 4, which left the lesson after that sweep's run
            say(f"   {label:62s} refused: {e}")
            continue
        if not all(torch.equal(g, w) for g, w in zip(got, truth)):
            say(f"   {label:62s} FAIL (not the float64 truth)")
            continue
        ms = bench_ms(graphed(run))
        timed.append((ms, (B, U, P, W), variant))
        line(label, ms, f"{registers()} registers (a new compile)")
    return timed


def query_with(say, line, table, num_keys, timed, t0):
    """The EDIT line for the fastest of timed, then query() and prepare_query(...)(0.5) with it (checked against
    each other), as make bench times them."""
    if not timed:
        return
    ms, schedule, variant = min(timed, key=lambda t: t[0])
    best = {**L.PARTIALS_VARIANT, **variant}
    say(f"\nEDIT: GROUPBY_SCHEDULES['partials'] = {schedule}; PARTIALS_VARIANT = {best}  ({ms:.4f} ms graphed)")
    with mock.patch.multiple(L, GROUPBY_SCHEDULES={**L.GROUPBY_SCHEDULES, "partials": schedule}, PARTIALS_VARIANT=best):
        prepared = L.prepare_query(table, num_keys)
        a, b = L.query(table, 0.5, num_keys), prepared(0.5)
        same = all(torch.equal(a[c], b[c]) for c in a)
        say(f"\n== the query with it: {prepared!r}; same result as query(): {same}")
        for label, fn in (("query()", lambda: L.query(table, 0.5, num_keys)), ("prepared(0.5)", lambda: prepared(0.5))):
            line(label, bench_ms(fn))
    say(f"done in {time.time() - t0:.0f} s")


def main():
    say = Log("l10w")
    say(f"lesson 10 sweep w on {env.gpu_name if env.is_gpu else 'CPU (interpreter)'}, torch {torch.__version__}, "
        f"triton {triton.__version__}; as set: GROUPBY_SCHEDULES['partials'] {L.GROUPBY_SCHEDULES['partials']}, "
        f"PARTIALS_VARIANT {L.PARTIALS_VARIANT}")  # fmt: skip
    num_keys = 16
    table, nbytes, truth, line = query_setup(say, 62, num_keys)
    out = torch.zeros(16, dtype=torch.float64, device=DEV)
    say(f"\n== {table['key'].numel():.0e} rows, 16 keys, {nbytes / 1e9:.2f} GB read")
    line("sweep v's probe, the bytes alone (MODE 0, BLOCK 128, R 2, 4 warps, P 6)",
         bench_ms(graphed(lambda: probe(table, 0.5, out, 0, 128, 2, 4, 6))))  # fmt: skip

    as_set = L.GROUPBY_SCHEDULES["partials"]
    candidates = [("as set", as_set, {})]
    for key, value in L.PARTIALS_VARIANT.items():
        flipped = {"l2_ahead": 0 if value else 2}.get(key, not value)
        candidates.append((f"{key}={flipped}", as_set, {key: flipped}))
    groups = {"groups": True}
    for schedule in ((128, 2, 5, 4), (128, 2, 4, 4), (128, 2, 8, 4), (128, 1, 8, 4), (64, 2, 8, 2), (64, 2, 12, 2),
                     (256, 2, 3, 8), (256, 1, 4, 8), (128, 2, 6, 4)):  # fmt: skip
        candidates.append(("groups", schedule, groups))
        candidates.append(("groups, l2_ahead=0", schedule, {**groups, "l2_ahead": 0}))
    timed = time_group_by(say, line, table, truth, candidates, T0, BUDGET_S)
    query_with(say, line, table, num_keys, timed, T0)


if __name__ == "__main__":
    main()
