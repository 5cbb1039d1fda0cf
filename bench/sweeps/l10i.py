"""Lesson 10 sweep i, 2026-11-27 (issue 17), after sweep h: COMPACT_SCHEDULES["reduce-then-scan"] at finer steps,
and the prepared query as the lesson ships it.

Run from the repo root: ``PYTHONPATH=$PWD python3 bench/sweeps/l10i.py`` on a GPU (< 120 s), ``... --cpu`` under the
interpreter (tiny shapes, no timings: a smoke test of the script).

What it prints, each next to a copy of 2**28 int32 measured here (the '% copy'), timed as make bench times them
(utils.timing: do_bench, L2 flushed before each repetition, median):
  - compaction of 2**28 fp32, half and a tenth kept, bytes = compact_bytes: reduce-then-scan (COMPACT_LOADS as
    set: dense) at BLOCK_SIZE 256 to 2048 and 1 to 8 warps, by compact_on_device (no wait: the count stays on the
    GPU), each checked exactly against x[keep] first; then the five fastest by compact() (with its one wait) and
    lookback-local as set, both ways;
  - the query at 1e8 rows and 16 keys: query() and prepare_query(...)(0.5) (the group-by replayed from a CUDA
    graph), each checked against the other first.
The EDIT line names the fastest no-wait schedule at half kept: COMPACT_SCHEDULES["reduce-then-scan"] = (B, W) in
solutions/10_sort_scan_data.ipynb, then ``python -m utils.notebooks``.
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

from lessons import l10_sort_scan_data as L  # noqa: E402
from utils import timing  # noqa: E402

DEV = env.device
LINES = []
T0 = time.time()
BUDGET_S = 100


def say(line=""):
    print(line, flush=True)
    LINES.append(line)
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "sweep_l10i.txt"), "w") as f:
            f.write("\n".join(LINES) + "\n")


def bench_ms(fn):
    if CPU:
        fn()
        return float("nan")
    return timing.bench(fn).ms


def main():
    say(f"lesson 10 sweep i on {env.gpu_name if env.is_gpu else 'CPU (interpreter)'}, torch {torch.__version__}, "
        f"triton {triton.__version__}; COMPACT_LOADS {L.COMPACT_LOADS!r}")  # fmt: skip
    n_copy = 2**28 if not CPU else 4096
    src = torch.randint(0, 9, (n_copy,), device=DEV, dtype=torch.int32)
    dst = torch.empty_like(src)
    copy_ms = bench_ms(lambda: dst.copy_(src))
    copy_gbs = 2 * n_copy * 4 / copy_ms / 1e6
    say(f"copy 2^28 int32: {copy_ms:.4f} ms, {copy_gbs:.1f} GB/s (the '% copy' below)")
    del src, dst

    n = 2**28 if not CPU else 5000
    x = torch.randint(0, 9, (n,), device=DEV).float()
    out = torch.empty_like(x)
    best = None
    schedules = [(b, w) for b in (256, 512, 1024, 2048) for w in (1, 2, 4, 8) if b // (32 * w) >= 1]
    for density in (0.5, 0.1):
        keep = torch.rand(n, device=DEV) < density
        ref = x[keep]
        nbytes = L.compact_bytes(n, ref.numel(), 4)

        def pct(ms, nbytes=nbytes):
            return f"{ms:9.4f} ms {nbytes / ms / 1e6 / copy_gbs * 100:5.1f}% copy"

        say(f"\n== compaction, 2^28 fp32, {density:.0%} kept")
        say(f"   {'x[keep] (waits)':58s} {pct(bench_ms(lambda: x[keep]))}")
        timed = []
        for B, W in schedules:
            label = f"compact_on_device reduce-then-scan B={B} w={W}"
            if time.time() - T0 > BUDGET_S:
                say(f"   {label:58s} SKIPPED (past {BUDGET_S} s)")
                continue
            got, count = L.compact_on_device(x, keep, out=out, BLOCK_SIZE=B, num_warps=W, method="reduce-then-scan")
            k = int(count)
            if k != ref.numel() or not torch.equal(got[:k], ref):
                say(f"   {label:58s} FAIL")
                continue
            ms = bench_ms(lambda: L.compact_on_device(x, keep, out=out, BLOCK_SIZE=B, num_warps=W,
                                                      method="reduce-then-scan"))  # fmt: skip
            timed.append((ms, B, W))
            say(f"   {label:58s} {pct(ms)}")
        ms = bench_ms(lambda: L.compact_on_device(x, keep, out=out, method="lookback-local"))
        say(f"   {'compact_on_device lookback-local (as set)':58s} {pct(ms)}")
        ms = bench_ms(lambda: L.compact(x, keep, method="lookback-local"))
        say(f"   {'compact() lookback-local (as set, waits)':58s} {pct(ms)}")
        for _, B, W in sorted(timed)[:5]:
            got = L.compact(x, keep, BLOCK_SIZE=B, num_warps=W, method="reduce-then-scan")
            ok = torch.equal(got, ref)
            ms = bench_ms(lambda: L.compact(x, keep, BLOCK_SIZE=B, num_warps=W, method="reduce-then-scan"))
            say(f"   {f'compact() reduce-then-scan B={B} w={W} (waits)':58s} {pct(ms)} {'' if ok else 'FAIL'}")
        if density == 0.5 and timed:
            best = min(timed)
        del keep, ref
    if best is not None:
        say(f"\nEDIT: COMPACT_SCHEDULES['reduce-then-scan'] = ({best[1]}, {best[2]})  (no wait, half kept: "
            f"{best[0]:.4f} ms)")  # fmt: skip
    del x, out

    num_keys, rows = 16, (10**8 if not CPU else 3000)
    table = L.table_from_pandas(L.random_table(rows, num_keys), DEV)
    nbytes = L.query_bytes(rows)
    prepared = L.prepare_query(table, num_keys)
    a, b = L.query(table, 0.5, num_keys), prepared(0.5)
    same = all(torch.equal(a[c], b[c]) for c in a)
    say(f"\n== query, {rows:.0e} rows, {num_keys} keys: {prepared!r}; same result as query(): {same}")
    for label, fn in (("query()", lambda: L.query(table, 0.5, num_keys)), ("prepared(0.5)", lambda: prepared(0.5))):
        ms = bench_ms(fn)
        say(f"   {label:58s} {ms:9.4f} ms {nbytes / ms / 1e6 / copy_gbs * 100:5.1f}% copy")
    say(f"done in {time.time() - T0:.0f} s")


if __name__ == "__main__":
    main()
