"""Lesson 10 sweep h, 2026-11-27 (issue 17): where the host's time goes in query() and compact(), the two calls
that wait for the GPU once and so carry the host's work in their timings (make bench: the query at 16 keys 51 % of
copy, its group-by kernel alone 80 %; compaction 65 %).

Run from the repo root: ``PYTHONPATH=$PWD python3 bench/sweeps/l10h.py`` on a GPU (< 90 s), ``... --cpu`` under the
interpreter (tiny shapes, no timings: a smoke test of the script).

What it prints, for the query (1e8 rows, 16 keys) and the compaction (2**28 fp32, half kept):
  - the call timed as make bench times it (do_bench: L2 flushed before each repetition, median);
  - a timeline of 40 calls made as do_bench makes them (flush, start event, the call, end event): the host's
    microseconds before each kernel's launch, in Triton's launch, and from the last launch to the return (the wait
    and what follows it), and the GPU's microseconds from the start event to the end of each kernel and to the end
    event (medians). The kernels are wrapped so that each launch is stamped; nothing else changes;
  - what single steps cost the host (medians of 50 calls after a wait): the input checks, one torch.zeros and one
    torch.full on the GPU, one launch of the group-by's kernel with its arguments ready;
  - a profile (cProfile) of 100 queries: the functions that spend the host's time;
  - the query with its GPU work replayed from a CUDA graph captured once (accumulators zeroed, group-by, finish
    kernel), the threshold written into the graph's buffer and the checks kept: how fast the call would be if the
    host's launches cost one replay; then with only the group-by in the graph (the finish kernel launched as
    query() launches it, into fresh outputs: nothing to copy), and what the query's last host steps cost;
  - compaction without its wait (the count left on the GPU): torch's x[nonzero_static(keep)], the look-back
    kernels, and reduce-then-scan (count, scan of the counts, scatter) at a few schedules, its kernels alone, and
    compact(method="reduce-then-scan")'s timeline.
"""

import cProfile
import io
import os
import pstats
import statistics
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


def say(line=""):
    print(line, flush=True)
    LINES.append(line)
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "sweep_l10h.txt"), "w") as f:
            f.write("\n".join(LINES) + "\n")


def sync():
    if not CPU:
        torch.cuda.synchronize()


class Stamped:
    """A @triton.jit kernel whose launches are stamped: host time before and after Triton's launch, and a CUDA
    event recorded right behind the kernel."""

    def __init__(self, kernel, name, log):
        self.kernel, self.name, self.log = kernel, name, log

    def __getitem__(self, grid):
        launch = self.kernel[grid]

        def stamped(*args, **kwargs):
            before = time.perf_counter()
            result = launch(*args, **kwargs)
            after = time.perf_counter()
            event = None
            if not CPU:
                event = torch.cuda.Event(enable_timing=True)
                event.record()
            self.log.append((self.name, before, after, event))
            return result

        return stamped

    def __getattr__(self, attr):
        return getattr(self.kernel, attr)


def timeline(label, fn, kernels, reps=40):
    """fn() called as do_bench calls it, its kernels (names in module L) stamped; medians over reps."""
    log = []
    saved = {name: getattr(L, name) for name in kernels}
    for name in kernels:
        setattr(L, name, Stamped(saved[name], name, log))
    cache = torch.empty(256 * 2**20 // 4, dtype=torch.int32, device=DEV)
    rows = []
    try:
        fn()
        for _ in range(reps if not CPU else 2):
            sync()
            log.clear()
            start = end = None
            cache.zero_()
            if not CPU:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
            t0 = time.perf_counter()
            fn()
            t_end = time.perf_counter()
            if not CPU:
                end.record()
            sync()
            row = {}
            previous = t0
            for i, (name, before, after, event) in enumerate(log):
                row[f"host before {i}:{name}"] = (before - previous) * 1e6
                row[f"host launch {i}:{name}"] = (after - before) * 1e6
                if event is not None:
                    row[f"GPU start -> end of {i}:{name}"] = start.elapsed_time(event) * 1e3
                previous = after
            row["host after the last launch (wait, result)"] = (t_end - previous) * 1e6
            row["host whole call"] = (t_end - t0) * 1e6
            if not CPU:
                row["GPU start -> end event"] = start.elapsed_time(end) * 1e3
            rows.append(row)
    finally:
        for name in kernels:
            setattr(L, name, saved[name])
    say(f"-- {label}: timeline of {len(rows)} calls as do_bench makes them (medians, us)")
    for key in rows[0]:
        say(f"   {key:60s} {statistics.median(r[key] for r in rows if key in r):9.1f}")


def host_cost(label, fn, calls=50):
    """Median host time of fn(), each call after a wait (the GPU idle, as after a query's own wait)."""
    times = []
    for _ in range(calls if not CPU else 2):
        sync()
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e6)
    sync()
    say(f"   {label:60s} {statistics.median(times):9.1f} us")


def bench_ms(fn):
    if CPU:
        fn()
        return float("nan")
    return timing.bench(fn).ms


def query_table(n, num_keys):
    g = torch.Generator(device=DEV).manual_seed(0)
    table = {
        "key": torch.randint(0, num_keys, (n,), device=DEV, generator=g, dtype=torch.int32),
        "value": torch.randint(-400, 400, (n,), device=DEV, generator=g).float() / 4,
        "x": torch.rand(n, device=DEV, generator=g),
    }
    table["value"][::7] = float("nan")
    return table


def graphed_query(table, threshold, num_keys):
    """query()'s GPU work captured once in a CUDA graph: returns a call that checks its inputs, writes the
    threshold, replays, waits once and slices, as query() does."""
    n, threshold_t = L._groupby_inputs(table, threshold, num_keys)
    keys = torch.empty(num_keys, dtype=table["key"].dtype, device=DEV)
    out_sums, mean = torch.empty((2, num_keys), dtype=torch.float64, device=DEV)
    out_counts = torch.empty(num_keys + 2, dtype=torch.int64, device=DEV)
    saved = L._groupby_inputs

    def work():
        sums, counts, rows = L._groupby_partials(table, threshold, num_keys)
        L.query_finish_kernel[(1,)](sums, counts, rows, keys, out_sums, out_counts, mean, out_counts[num_keys:],
                                    num_keys, BLOCK_SIZE=16)  # fmt: skip

    L._groupby_inputs = lambda table, threshold, num_keys: (n, threshold_t)  # the graph reads this buffer
    try:
        for _ in range(2):
            work()
        sync()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            work()
    finally:
        L._groupby_inputs = saved

    def call(threshold):
        L.require_table(table, [("key", L.KEY_DTYPES), ("value", L.VALUE_DTYPES), ("x", L.VALUE_DTYPES)])
        threshold_t.fill_(threshold)
        graph.replay()
        bad, n_kept = out_counts[num_keys:].tolist()
        L._refuse_bad_count(bad, num_keys)
        return {"key": keys[:n_kept].clone(), "sum": out_sums[:n_kept].clone(), "count": out_counts[:n_kept].clone(),
                "mean": mean[:n_kept].clone()}  # fmt: skip

    return call


def graphed_groupby_query(table, threshold, num_keys):
    """The group-by (accumulators zeroed, groupby_partials_kernel) captured once in a CUDA graph; the finish kernel
    launched as query() launches it, into fresh outputs, then the one wait: no copy of the result needed."""
    n, threshold_t = L._groupby_inputs(table, threshold, num_keys)
    saved = L._groupby_inputs
    acc = {}

    def work():
        acc["out"] = L._groupby_partials(table, threshold, num_keys)

    L._groupby_inputs = lambda table, threshold, num_keys: (n, threshold_t)
    try:
        for _ in range(2):
            work()
        sync()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            work()
    finally:
        L._groupby_inputs = saved
    sums, counts, rows = acc["out"]

    def call(threshold):
        L.require_table(table, [("key", L.KEY_DTYPES), ("value", L.VALUE_DTYPES), ("x", L.VALUE_DTYPES)])
        threshold_t.fill_(threshold)
        graph.replay()
        return L._query_finish(sums, counts, rows, num_keys, table["key"].dtype)

    return call


def rts_no_wait(values, keep, B, W, dense, scan):
    """Compaction by reduce-then-scan without the wait: count the flags per block, scan the counts (one launch
    with scan="lookback"), scatter; returns (out, count on the GPU)."""
    n = values.numel()
    n_blocks = triton.cdiv(n, B)
    counts = torch.empty(n_blocks, dtype=torch.int32, device=DEV)
    L.count_kernel[(n_blocks,)](keep, counts, n, BLOCK_SIZE=B, num_warps=W)
    block_cumsum = L.cumsum(counts, method=scan)
    out = torch.empty_like(values)
    L.compact_kernel[(n_blocks,)](values, keep, block_cumsum, out, n, n, BLOCK_SIZE=B, DENSE=dense, num_warps=W)
    return out, block_cumsum[-1:]


def compact_pieces(x, keep, copy_gbs, nbytes):
    """reduce-then-scan's kernels one by one, and the whole pipeline without its wait, at a few schedules."""
    n = x.numel()
    ref = x[keep]
    say("-- compaction without the wait (the count stays on the GPU, as CUB's DeviceSelect leaves it)")
    idx_static = lambda: x[torch.nonzero_static(keep, size=n, fill_value=0).squeeze(1)]  # noqa: E731
    ms = bench_ms(idx_static)
    say(f"   torch: x[nonzero_static(keep, size=n)] (no wait)                {ms:9.4f} ms "
        f"{nbytes / ms / 1e6 / copy_gbs * 100:5.1f}% copy")  # fmt: skip
    for method in ("lookback-local", "lookback"):
        ms = bench_ms(lambda: L._compact_no_sync(x, keep, method=method))
        say(f"   _compact_no_sync {method:16s}                              {ms:9.4f} ms "
            f"{nbytes / ms / 1e6 / copy_gbs * 100:5.1f}% copy")  # fmt: skip
    for B, W in ((1024, 4), (2048, 4), (2048, 8), (4096, 8), (8192, 8), (8192, 16)):
        for dense in (False, True):
            for scan in ("lookback", "reduce-then-scan"):
                label = f"reduce-then-scan B={B} w={W} dense={int(dense)} scan={scan}"
                if time.time() - T0 > 100:
                    say(f"   {label:64s} SKIPPED (past 100 s)")
                    continue
                out, count = rts_no_wait(x, keep, B, W, dense, scan)
                k = int(count)
                if k != ref.numel() or not torch.equal(out[:k], ref):
                    say(f"   {label:64s} FAIL")
                    continue
                ms = bench_ms(lambda: rts_no_wait(x, keep, B, W, dense, scan))
                say(f"   {label:64s} {ms:9.4f} ms {nbytes / ms / 1e6 / copy_gbs * 100:5.1f}% copy")
    B, W = 2048, 8
    n_blocks = triton.cdiv(n, B)
    counts = torch.empty(n_blocks, dtype=torch.int32, device=DEV)
    ms = bench_ms(lambda: L.count_kernel[(n_blocks,)](keep, counts, n, BLOCK_SIZE=B, num_warps=W))
    say(f"   count_kernel alone B={B} w={W}: {ms * 1e3:.1f} us ({n / ms / 1e6:.0f} GB/s of flags)")
    for scan in ("lookback", "reduce-then-scan"):
        ms = bench_ms(lambda: L.cumsum(counts, method=scan))
        say(f"   cumsum of the {n_blocks} counts, {scan}: {ms * 1e3:.1f} us")
    block_cumsum = L.cumsum(counts)
    out = torch.empty_like(x)
    for dense in (False, True):
        ms = bench_ms(lambda: L.compact_kernel[(n_blocks,)](x, keep, block_cumsum, out, n, n, BLOCK_SIZE=B,
                                                            DENSE=dense, num_warps=W))  # fmt: skip
        say(
            f"   compact_kernel alone B={B} w={W} dense={int(dense)}: {ms * 1e3:.1f} us "
            f"({nbytes / ms / 1e6 / copy_gbs * 100:.1f}% copy for the whole compaction's bytes)"
        )
    timeline("compact(method='reduce-then-scan')", lambda: L.compact(x, keep, BLOCK_SIZE=2048,
             method="reduce-then-scan"), ["count_kernel", "block_sum_kernel", "cumsum_kernel", "compact_kernel"])  # fmt: skip


def main():
    say(f"lesson 10 sweep h (the host's share) on {env.gpu_name if env.is_gpu else 'CPU (interpreter)'}, "
        f"torch {torch.__version__}, triton {triton.__version__}")  # fmt: skip
    n_copy = 2**28 if not CPU else 4096
    src = torch.randint(0, 9, (n_copy,), device=DEV, dtype=torch.int32)
    dst = torch.empty_like(src)
    copy_ms = bench_ms(lambda: dst.copy_(src))
    copy_gbs = 2 * n_copy * 4 / copy_ms / 1e6
    say(f"copy 2^28 int32: {copy_ms:.4f} ms, {copy_gbs:.1f} GB/s (the '% copy' below)")
    del src, dst

    num_keys, n = 16, (10**8 if not CPU else 3000)
    table = query_table(n, num_keys)
    nbytes = L.query_bytes(n)
    want = L.query(table, 0.5, num_keys)

    def pct(ms):
        return f"{ms:.4f} ms {nbytes / ms / 1e6 / copy_gbs * 100:5.1f}% copy"

    say("")
    say(f"== query, {n:.0e} rows, {num_keys} keys (method {L.groupby_method(num_keys)}, finish {L.QUERY_FINISH})")
    say(f"   query() as make bench times it: {pct(bench_ms(lambda: L.query(table, 0.5, num_keys)))}")
    sums_rows = lambda: L._groupby_partials(table, 0.5, num_keys)  # noqa: E731
    say(f"   _groupby_partials alone, no wait: {pct(bench_ms(sums_rows))}")
    timeline("query()", lambda: L.query(table, 0.5, num_keys), ["groupby_partials_kernel", "query_finish_kernel"])
    say("-- single steps on the host, each after a wait")
    host_cost("require_table (the three columns)", lambda: L.require_table(
        table, [("key", L.KEY_DTYPES), ("value", L.VALUE_DTYPES), ("x", L.VALUE_DTYPES)]))  # fmt: skip
    host_cost("_groupby_inputs (require_table, threshold, torch.full)", lambda: L._groupby_inputs(table, 0.5, 16))
    host_cost("torch.zeros(49, int64) on the GPU", lambda: torch.zeros(49, dtype=torch.int64, device=DEV))
    host_cost("torch.full((1,), 0.5) on the GPU", lambda: torch.full((1,), 0.5, device=DEV))
    host_cost("torch.empty(16) on the GPU", lambda: torch.empty(16, device=DEV))
    host_cost("_partials_programs", lambda: L._partials_programs(10**8 // 256, 6, 2))
    host_cost("_columns_prefetch", lambda: L._columns_prefetch(table, 256))
    host_cost("_groupby_partials (all of it, no wait)", sums_rows)
    host_cost("query() (all of it, its wait included)", lambda: L.query(table, 0.5, num_keys))

    sums, counts, rows = L._accumulators(num_keys, DEV)
    thr = torch.full((1,), 0.5, device=DEV)
    programs = L._partials_programs(triton.cdiv(n, 256), 6, 2)
    block, unroll, _, warps = L.GROUPBY_SCHEDULES["partials"]

    def launch_only():
        L.groupby_partials_kernel[(programs,)](table["key"], table["value"], table["x"], thr, sums, counts, rows, n,
                                               num_keys, BLOCK_SIZE=block, KEYS=16, UNROLL=unroll, NIBBLES=True,
                                               FMA=True, PREFETCH=True, L2_AHEAD=0 if CPU else 2, WIDE=False,
                                               num_warps=warps)  # fmt: skip

    host_cost("groupby_partials_kernel[grid](...) alone, arguments ready", launch_only)
    fin = [torch.empty(16, dtype=torch.int32, device=DEV), *torch.empty((2, 16), dtype=torch.float64, device=DEV),
           torch.empty(18, dtype=torch.int64, device=DEV)]  # fmt: skip
    host_cost("query_finish_kernel[(1,)](...) alone, arguments ready", lambda: L.query_finish_kernel[(1,)](
        sums, counts, rows, fin[0], fin[1], fin[3], fin[2], fin[3][16:], 16, BLOCK_SIZE=16))  # fmt: skip

    say("-- cProfile of 100 queries (host time by function, tottime)")
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(100 if not CPU else 2):
        L.query(table, 0.5, num_keys)
    prof.disable()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(22)
    for line in text.getvalue().splitlines():
        if line.strip():
            say("   " + line.rstrip()[:150])

    if not CPU:
        say("-- the query's GPU work from a CUDA graph (checks kept, threshold written, one replay, one wait)")
        call = graphed_query(table, 0.5, num_keys)
        got = call(0.5)
        same = all(torch.equal(got[k], want[k]) for k in want)
        say(f"   graphed query: {'same result as query()' if same else 'FAIL: differs from query()'}; "
            f"{pct(bench_ms(lambda: call(0.5)))}")  # fmt: skip
        host_cost("graphed query (all of it, its wait included)", lambda: call(0.5))
        call = graphed_groupby_query(table, 0.5, num_keys)
        got = call(0.5)
        same = all(torch.equal(got[k], want[k]) for k in want)
        say(
            f"   graph of the group-by only, finish launched as usual: "
            f"{'same result as query()' if same else 'FAIL: differs from query()'}; {pct(bench_ms(lambda: call(0.5)))}"
        )
        timeline("group-by graphed, finish as usual", lambda: call(0.5), ["query_finish_kernel"])
        say("-- the query's last steps on the host, the GPU idle")
        counts = torch.zeros(18, dtype=torch.int64, device=DEV)
        cols = [torch.zeros(16, device=DEV) for _ in range(4)]
        host_cost("out_counts[16:].tolist() (nothing to wait for)", lambda: counts[16:].tolist())
        host_cost("four slices col[:n]", lambda: [c[:9] for c in cols])
        host_cost("four col.narrow(0, 0, n)", lambda: [c.narrow(0, 0, 9) for c in cols])
        host_cost("torch.cuda.Event().record()", lambda: torch.cuda.Event(enable_timing=True).record())
    del table

    say("")
    n = 2**28 if not CPU else 5000
    x = torch.randint(0, 9, (n,), device=DEV).float()
    keep = torch.rand(n, device=DEV) < 0.5
    nbytes = L.compact_bytes(n, int(keep.sum()), 4)
    say(f"== compact, 2^28 fp32 half kept (method {L.COMPACT_METHOD})")
    ms = bench_ms(lambda: L.compact(x, keep))
    say(f"   compact() as make bench times it: {ms:.4f} ms {nbytes / ms / 1e6 / copy_gbs * 100:5.1f}% copy")
    ms = bench_ms(lambda: L._compact_no_sync(x, keep, method=L.COMPACT_METHOD))
    say(f"   _compact_no_sync alone, no wait: {ms:.4f} ms {nbytes / ms / 1e6 / copy_gbs * 100:5.1f}% copy")
    timeline("compact()", lambda: L.compact(x, keep), ["compact_lookback_local_kernel", "compact_lookback_kernel"])
    host_cost("compact() (all of it, its wait included)", lambda: L.compact(x, keep))
    host_cost("_compact_no_sync (no wait)", lambda: L._compact_no_sync(x, keep, method=L.COMPACT_METHOD))
    host_cost("_lookback_state(131072)", lambda: L._lookback_state(131072, DEV))
    host_cost("torch.empty_like(x)", lambda: torch.empty_like(x))
    compact_pieces(x, keep, copy_gbs, nbytes)
    say(f"done in {time.time() - T0:.0f} s")


if __name__ == "__main__":
    main()
