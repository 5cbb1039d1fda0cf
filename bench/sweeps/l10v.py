"""Lesson 10 sweep v, 2026-11-28 (issue 17): where the 16-key query kernel's last fifth of the bandwidth goes.

Run from the repo root: ``PYTHONPATH=$PWD python3 bench/sweeps/l10v.py`` on a GPU (< 90 s), ``... --cpu`` under the
interpreter (tiny shapes, no timings: a smoke test of the script).

groupby_partials_kernel alone reached 79.5 % of a copy's bandwidth on an H100 (session 8, sweep l10c), the query
with its wait 67-71 %, and the figure moved by up to ten points from run to run. This sweep takes the kernel apart
with one probe kernel in its shape (persistent, the next step's three columns loaded while the current step adds)
that does less and less of its work:
  - MODE 0: the filter and a plain fp32 sum of what passes: the bytes and nothing else (the read ceiling);
  - MODE 1: the one-hot over 16 keys, sums in fp32 (not what the lesson may do: fp32 sums are not pandas');
  - MODE 2: the one-hot over 16 keys, sums in fp64, as the lesson's kernel adds (without its counters);
each with R rows a thread side by side in memory (R = 4: one 16-byte load a column), BLOCK rows a step, W warps and
P programs an SM. Beside them: the lesson's kernel as set and at a few grids, and torch's sum of each column.
Everything next to a copy of 2**28 int32 timed here ('% copy'), timed as make bench times (utils.timing).

If MODE 0 stays near 80 % too, the kernel is at this load structure's ceiling and only the loads can help; if MODE
2 with R = 4 beats the lesson's kernel, R rows a thread is the lesson's next step. The probes' results are checked
against each other (MODE 1 and 2 against torch's sums).
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

from bench.sweeps.kit import Log, bench_ms, copy_gbs  # noqa: E402
from lessons import l10_sort_scan_data as L  # noqa: E402

DEV = env.device
T0 = time.time()
BUDGET_S = 80
say = Log("l10v")


def query_setup(say, width, num_keys=16):
    """What sweeps v, w and x time on: a copy's GB/s (said), a table of 10**8 rows (3000 under the interpreter)
    and num_keys keys, its bytes, the truth (groupby_dense_ref at threshold 0.5: sums, counts, rows) and
    line(label, ms, note), which says a timing with its % of the copy."""
    copy = copy_gbs(say)
    rows = 10**8 if not CPU else 3000
    table = L.table_from_pandas(L.random_table(rows, num_keys), DEV)
    nbytes = L.query_bytes(rows)
    truth = L.groupby_dense_ref(table["key"], table["value"], table["x"], 0.5, num_keys)

    def line(label, ms, note=""):
        say(f"   {label:{width}s} {ms:9.4f} ms {nbytes / ms / 1e6 / copy * 100:5.1f}% copy {note}")

    return table, nbytes, truth, line


@triton.jit
def probe_load(key_ptr, value_ptr, x_ptr, step, rows, n, STEP: tl.constexpr):
    offs = step * STEP + rows
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m, other=0)
    key = tl.load(key_ptr + offs, mask=m, other=0)
    value = tl.load(value_ptr + offs, mask=m, other=0)
    return m, x, key, value


@triton.jit
def probe_add(acc1, acc2, slots, code, v, MODE: tl.constexpr):
    """One row a thread (code: its key or -1, v: its value or 0) added to the (BLOCK, KEYS) one-hot sums."""
    hit = code[:, None] == slots[None, :]
    if MODE == 1:
        acc1 += tl.where(hit, v[:, None], 0.0)
    else:
        acc2 += hit.to(tl.float64) * v.to(tl.float64)[:, None]
    return acc1, acc2


@triton.jit
def probe_kernel(key_ptr, value_ptr, x_ptr, threshold, out_ptr, n, BLOCK: tl.constexpr, R: tl.constexpr,
                 KEYS: tl.constexpr, MODE: tl.constexpr):  # fmt: skip
    """out[0:KEYS] += each key's sum (MODE 1, 2) or out[0] += the sum of every value that passes (MODE 0), by
    programs that each take the steps p, p + P, ...; a step is BLOCK * R rows, R side by side in a thread."""
    STEP: tl.constexpr = BLOCK * R
    rows = tl.arange(0, BLOCK)[:, None] * R + tl.arange(0, R)[None, :]
    slots = tl.arange(0, KEYS)
    acc0 = tl.zeros((BLOCK, R), tl.float32)
    acc1 = tl.zeros((BLOCK, KEYS), tl.float32)
    acc2 = tl.zeros((BLOCK, KEYS), tl.float64)
    n_steps = tl.cdiv(n, STEP)
    step = tl.program_id(0)
    m, x, key, value = probe_load(key_ptr, value_ptr, x_ptr, step, rows, n, STEP)
    for _ in range(0, tl.cdiv(n_steps - tl.program_id(0), tl.num_programs(0))):
        step += tl.num_programs(0)
        m_n, x_n, key_n, value_n = probe_load(key_ptr, value_ptr, x_ptr, step, rows, n, STEP)
        good = m & (x > threshold) & (key >= 0) & (key < KEYS) & (value == value)
        v = tl.where(good, value, 0.0)
        if MODE == 0:
            acc0 += v
        else:
            code = tl.where(good, key, -1)
            if R == 1:
                acc1, acc2 = probe_add(acc1, acc2, slots, tl.reshape(code, (BLOCK,)), tl.reshape(v, (BLOCK,)), MODE)
            elif R == 2:
                c0, c1 = tl.split(code)
                v0, v1 = tl.split(v)
                acc1, acc2 = probe_add(acc1, acc2, slots, c0, v0, MODE)
                acc1, acc2 = probe_add(acc1, acc2, slots, c1, v1, MODE)
            else:  # R == 4: the thread's four rows, split in halves twice (in registers: R is the inner dimension)
                ca, cb = tl.split(tl.reshape(code, (BLOCK, 2, 2)))
                va, vb = tl.split(tl.reshape(v, (BLOCK, 2, 2)))
                c0, c1 = tl.split(ca)
                c2, c3 = tl.split(cb)
                v0, v1 = tl.split(va)
                v2, v3 = tl.split(vb)
                acc1, acc2 = probe_add(acc1, acc2, slots, c0, v0, MODE)
                acc1, acc2 = probe_add(acc1, acc2, slots, c1, v1, MODE)
                acc1, acc2 = probe_add(acc1, acc2, slots, c2, v2, MODE)
                acc1, acc2 = probe_add(acc1, acc2, slots, c3, v3, MODE)
        m, x, key, value = m_n, x_n, key_n, value_n
    if MODE == 0:
        tl.atomic_add(out_ptr, tl.sum(tl.sum(acc0, axis=1), axis=0).to(tl.float64))
    elif MODE == 1:
        tl.atomic_add(out_ptr + slots, tl.sum(acc1, axis=0).to(tl.float64))
    else:
        tl.atomic_add(out_ptr + slots, tl.sum(acc2, axis=0))


def probe(table, threshold, out, mode, BLOCK, R, W, P):
    out.zero_()
    n = table["key"].numel()
    programs = max(1, min(triton.cdiv(n, BLOCK * R), P * (env.sm_count or 1) if not CPU else 2))
    probe_kernel[(programs,)](table["key"], table["value"], table["x"], threshold, out, n, BLOCK=BLOCK, R=R, KEYS=16,
                              MODE=mode, num_warps=W)  # fmt: skip
    return out


def main():
    say(f"lesson 10 sweep v on {env.gpu_name if env.is_gpu else 'CPU (interpreter)'}, torch {torch.__version__}, "
        f"triton {triton.__version__}; GROUPBY_SCHEDULES['partials'] {L.GROUPBY_SCHEDULES['partials']}, "
        f"PARTIALS_VARIANT {L.PARTIALS_VARIANT}")  # fmt: skip
    num_keys = 16
    table, nbytes, truth, line = query_setup(say, 58, num_keys)
    rows, want = table["key"].numel(), truth[0]  # each key's fp64 sum

    say(f"\n== {rows:.0e} rows, 16 keys, {nbytes / 1e9:.2f} GB read")
    line("torch: key.sum(), value.sum(), x.sum() (3 launches)",
         bench_ms(lambda: (table["key"].sum(), table["value"].sum(), table["x"].sum())))  # fmt: skip
    sums, counts, n_rows = L.groupby_partials(table, 0.5, num_keys)
    line("groupby_partials as set (kernel + 3 zeros)", bench_ms(lambda: L.groupby_partials(table, 0.5, num_keys)),
         "ok" if torch.equal(sums, want) else "FAIL")  # fmt: skip
    for P, W in ((4, 4), (8, 4), (3, 8), (4, 8)):
        got = L.groupby_partials(table, 0.5, num_keys, PROGRAMS_PER_SM=P, num_warps=W)[0]
        ms = bench_ms(lambda: L.groupby_partials(table, 0.5, num_keys, PROGRAMS_PER_SM=P, num_warps=W))
        line(f"groupby_partials P={P} W={W}", ms, "ok" if torch.equal(got, want) else "FAIL")

    out = torch.zeros(16, dtype=torch.float64, device=DEV)
    threshold = 0.5
    configs = [
        (128, 1, 4, 6),
        (256, 1, 8, 3),
        (128, 2, 4, 6),
        (128, 4, 4, 4),
        (128, 4, 4, 6),
        (256, 4, 8, 2),
        (256, 4, 8, 3),
        (256, 2, 8, 3),
    ]  # (BLOCK, R, W, P)
    for mode in (0, 1, 2):
        say(f"\n-- MODE {mode}: {('the bytes and a plain sum', 'one-hot, fp32 sums', 'one-hot, fp64 sums')[mode]}")
        for BLOCK, R, W, P in configs:
            label = f"probe MODE={mode} BLOCK={BLOCK} R={R} W={W} P={P}"
            if time.time() - T0 > BUDGET_S:
                say(f"   {label:58s} SKIPPED (past {BUDGET_S} s)")
                continue
            got = probe(table, threshold, out, mode, BLOCK, R, W, P).clone()
            if mode == 0:
                ok = torch.allclose(got[0], want.sum(), rtol=1e-4)
            else:
                ok = torch.allclose(got, want, rtol=1e-4 if mode == 1 else 1e-12)
            line(label, bench_ms(lambda: probe(table, threshold, out, mode, BLOCK, R, W, P)), "ok" if ok else "FAIL")
    say(f"\ndone in {time.time() - T0:.0f} s")


if __name__ == "__main__":
    main()
