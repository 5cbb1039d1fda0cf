"""Lesson 10 sweep zb, 2026-11-28 (issue 17), after sweep za: how long the 16-key group-by's instructions take with
its loads served from L2, at the full 10**8 rows, to tell an instruction-bound kernel from one whose loads and
instructions overlap badly.

Run from the repo root: ``PYTHONPATH=$PWD python3 bench/sweeps/l10zb.py`` on a GPU (< 60 s), ``... --cpu`` under the
interpreter (tiny shapes, no timings: a smoke test of the script).

Sweep za's part 1 timed the lesson's kernel on a table small enough for L2 and measured the grid's fixed cost
instead (3e6 rows over 792 programs). Here the kernel walks all 10**8 rows, as make bench's does, but reads row
``i % WRAP``: with WRAP = 2**21 (24 MB) every load after the first pass comes from L2, and the time is the
instructions' (plus L2's latency); with WRAP = 0 it reads every row from memory, the same kernel otherwise. The
kernel is the lesson's add (partials_add_rows, nibbles and "groups", the NaN rows folded), a plain persistent loop
(no prefetch), then, for the comparison, lesson 10's kernel as set. Sums are checked against the float64 truth of
the rows it read (WRAP = 0: the table's; WRAP > 0: each row counted as often as the loop read it).
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
import triton.language as tl  # noqa: E402

from bench.sweeps.kit import Log, bench_ms, graphed  # noqa: E402
from bench.sweeps.l10v import query_setup  # noqa: E402
from lessons import l10_sort_scan_data as L  # noqa: E402
from lessons.l10_sort_scan_data import nibbles_flush, partials_add_rows  # noqa: E402

DEV = env.device


@triton.jit
def groupby_wrap_kernel(key_ptr, value_ptr, x_ptr, threshold_ptr, sums_ptr, counts_ptr, rows_ptr, n, num_keys,
                        WRAP: tl.constexpr, BLOCK: tl.constexpr, UNROLL: tl.constexpr, KEYS: tl.constexpr,
                        MASKED: tl.constexpr = True):  # fmt: skip
    """groupby_partials_kernel's sums, counts and rows (nibbles, "groups") over rows 0..n-1, each read at i % WRAP
    (WRAP = 0: at i); a plain persistent loop, no prefetch. MASKED=False: the loads without masks (the add still
    compares each row with n)."""
    slots = tl.arange(0, KEYS)
    acc_s = tl.zeros((BLOCK, KEYS), tl.float64)
    acc_rc = tl.zeros((BLOCK, KEYS), tl.int32)
    r_acc = tl.zeros((BLOCK, 1), tl.int64)
    c_acc = tl.zeros((BLOCK, 1), tl.int64)
    n_bad = tl.zeros((BLOCK, 1), tl.int32)
    threshold = tl.load(threshold_ptr)
    rows = tl.arange(0, BLOCK)[:, None]
    it = 0
    for step in range(tl.program_id(0), tl.cdiv(n, BLOCK * UNROLL), tl.num_programs(0)):
        for u in tl.static_range(UNROLL):
            offs = step * (BLOCK * UNROLL) + u * BLOCK + rows
            at = offs % WRAP if WRAP > 0 else offs
            if MASKED:
                x = tl.load(x_ptr + at, mask=offs < n, other=0)
                key = tl.load(key_ptr + at, mask=offs < n, other=0)
                value = tl.load(value_ptr + at, mask=offs < n, other=0).to(tl.float64)
            else:  # n a multiple of BLOCK * UNROLL (the launcher checks): every step whole
                x = tl.load(x_ptr + at)
                key = tl.load(key_ptr + at)
                value = tl.load(value_ptr + at).to(tl.float64)
            acc_s, acc_rc, r_acc, c_acc, n_bad = partials_add_rows(acc_s, acc_rc, r_acc, c_acc, n_bad, slots, offs, x,
                                                                   key, value, threshold, n, num_keys, True, 2)  # fmt: skip
        it += 1
        if it % (15 // UNROLL) == 0:
            acc_rc = nibbles_flush(acc_rc, r_acc, c_acc, slots)
            r_acc = tl.zeros((BLOCK, 1), tl.int64)
            c_acc = tl.zeros((BLOCK, 1), tl.int64)
    acc_rc = nibbles_flush(acc_rc, r_acc, c_acc, slots)
    keep = slots < num_keys
    tl.atomic_add(sums_ptr + slots, tl.sum(acc_s, axis=0), mask=keep)
    tl.atomic_add(counts_ptr + slots, tl.sum(acc_rc >> 16, axis=0).to(tl.int64), mask=keep)
    tl.atomic_add(rows_ptr + slots, tl.sum(acc_rc & 0xFFFF, axis=0).to(tl.int64), mask=keep)
    tl.atomic_add(rows_ptr + num_keys, tl.sum(tl.sum(n_bad, axis=1), axis=0).to(tl.int64))


def group_by_wrap(table, threshold_t, n, wrap, BLOCK=128, UNROLL=2, warps=4, per_sm=5, masked=True):
    assert masked or n % (BLOCK * UNROLL) == 0
    sums, counts, rows = L._accumulators(16, DEV)
    steps = triton.cdiv(n, BLOCK * UNROLL)
    programs = max(1, min(steps, env.pick(cpu=2, gpu=per_sm * (env.sm_count or 132))))
    programs = max(programs, triton.cdiv(steps, (2**16 - 1) // UNROLL))
    groupby_wrap_kernel[(programs,)](table["key"], table["value"], table["x"], threshold_t, sums, counts, rows, n, 16,
                                     WRAP=wrap, BLOCK=BLOCK, UNROLL=UNROLL, KEYS=16, MASKED=masked,
                                     num_warps=warps)  # fmt: skip
    return sums, counts, rows


def main():
    t0 = time.time()
    say = Log("l10zb")
    say(f"lesson 10 sweep zb on {env.gpu_name if env.is_gpu else 'CPU (interpreter)'}, torch {torch.__version__}, "
        f"triton {triton.__version__}")  # fmt: skip
    table, nbytes, truth, line = query_setup(say, 60, 16)
    n = table["key"].numel()
    threshold = torch.full((1,), 0.5, dtype=torch.float32, device=DEV)
    say(f"\n== {n:.0e} rows, 16 keys, {nbytes / 1e9:.2f} GB if every row comes from memory")
    line("lesson kernel as set (graphed)", bench_ms(graphed(lambda: L._groupby_partials(table, threshold, 16))))
    wraps = (0, 2**21, 2**18) if not CPU else (0, 512)
    for wrap in wraps:
        for per_sm in (5, 8):
            label = f"plain loop, rows read at i % {wrap}" if wrap else "plain loop, every row from memory"
            label += f", {per_sm} programs an SM"
            sums, counts, rows = group_by_wrap(table, threshold, n, wrap, per_sm=per_sm)
            if wrap:  # row j is read once per pass, and n // wrap times in all, plus once if j < n % wrap
                reads = torch.full((wrap,), n // wrap, dtype=torch.int64, device=DEV)
                reads[: n % wrap] += 1
                part = {c: table[c][:wrap] for c in ("key", "value", "x")}
                passed = (part["x"] > 0.5) & ~torch.isnan(part["value"])
                want_s = torch.zeros(16, dtype=torch.float64, device=DEV).index_add_(
                    0, part["key"].long(), torch.where(passed, part["value"].double() * reads, 0.0)
                )
                ok = torch.equal(sums, want_s)
            else:
                ok = torch.equal(sums, truth[0]) and torch.equal(counts, truth[1]) and torch.equal(rows[:-1], truth[2])
            ms = bench_ms(graphed(lambda wrap=wrap, per_sm=per_sm: group_by_wrap(table, threshold, n, wrap,
                                                                                  per_sm=per_sm)))  # fmt: skip
            line(label, ms, f"checked: {ok}")
    if n % 256 == 0:
        for wrap in wraps[:2]:
            sums, counts, rows = group_by_wrap(table, threshold, n, wrap, masked=False)
            ok = wrap > 0 or (torch.equal(sums, truth[0]) and torch.equal(counts, truth[1]))
            ms = bench_ms(graphed(lambda wrap=wrap: group_by_wrap(table, threshold, n, wrap, masked=False)))
            line(f"plain loop, loads unmasked, rows at i % {wrap}, 5 an SM", ms, f"checked: {ok}")
    say(f"done in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
