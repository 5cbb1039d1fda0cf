"""Lesson 10 sweep za, 2026-11-28 (issue 17), after sweeps w, x and y: whether the 16-key group-by's kernel is
held back by its instructions or by how its loads overlap them, and a pipelined loop that would overlap them better;
then the prepared query with its finish inside the graph.

Run from the repo root: ``PYTHONPATH=$PWD python3 bench/sweeps/l10za.py`` on a GPU (< 150 s), ``... --cpu`` under
the interpreter (tiny shapes, no timings: a smoke test of the script).

Sweep w (an H200) left the kernel at 0.445-0.456 ms graphed against 0.297 for its bytes alone, and an offline sm_90
compile counts about 93 instructions a row: 9.3e9 for 10**8 rows, about 0.28 ms of issue on 132 SMs. Either bound
alone is 0.28-0.30 ms; the kernel takes half as long again. This prints:
  1. the lesson's kernel as set on a table small enough to stay in L2 (3 * 10**6 rows, 36 MB), replayed 20 times
     back to back without clearing L2, scaled to 10**8 rows: the time its instructions take when the loads come
     from L2, against the same at 10**8 rows from memory;
  2. a prototype of the kernel whose loop is ``tl.range(..., num_stages=S)`` over whole steps (no masks; the last,
     short step after the loop): Triton's pipeliner then copies the columns S - 1 steps ahead into shared memory
     (cp.async), with no registers held for them and no hand prefetch, "ptr"; and the same with the columns read
     through TMA descriptors built on the host, "tma" (the lesson's add and counters, partials_add_rows and
     nibbles_flush, unchanged). Each checked exactly against the float64 truth first, then graphed and timed as
     make bench times a row;
  3. prepare_query(...)(0.5) as make bench times it, against a prototype whose graph also holds the threshold's
     copy from pinned host memory, the finish kernel and the copy of its two numbers to pinned host memory: a call
     is then one replay, one wait and the result's slices (cloned, or not, to see what the clone costs).
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
T0 = time.time()
BUDGET_S = 130


@triton.jit
def pipe_rows(key_src, value_src, x_src, first, rows, n, BLOCK: tl.constexpr, TMA: tl.constexpr,
              MASKED: tl.constexpr):  # fmt: skip
    """The BLOCK rows from `first`: (offs, x, key, value), offs a (BLOCK, 1) column. TMA: the sources are 1-D
    descriptors (rows past n read as 0); otherwise pointers, masked only when MASKED (the short step)."""
    offs = first + rows
    if TMA:
        x = x_src.load([first])[:, None]
        key = key_src.load([first])[:, None]
        value = value_src.load([first])[:, None].to(tl.float64)
    elif MASKED:
        x = tl.load(x_src + offs, mask=offs < n, other=0)
        key = tl.load(key_src + offs, mask=offs < n, other=0)
        value = tl.load(value_src + offs, mask=offs < n, other=0).to(tl.float64)
    else:
        x = tl.load(x_src + offs)
        key = tl.load(key_src + offs)
        value = tl.load(value_src + offs).to(tl.float64)
    return offs, x, key, value


@triton.jit
def add_rows_folded(acc_s, acc_rc, r_acc, c_acc, n_bad, slots, offs, x, key, value, threshold, n, num_keys):
    """partials_add_rows(..., NIBBLES=True, FMA=2) with the NaN rows' -1 code folded into the sums' selects: the
    row's code is its key only if its value is a number, so the group select that zeroes other keys zeroes NaN as
    well, and v needs no select of its own (two fewer 32-bit selects a row)."""
    passed = (offs < n) & (x > threshold)
    good = passed & (key >= 0) & (key < num_keys)
    is_num = good & (value == value)
    code = tl.where(is_num, key, -1)
    in_group = tl.where((code >> 2) == (slots >> 2)[None, :], value, 0.0)
    acc_s += in_group * ((code & 3) == (slots & 3)[None, :]).to(tl.float64)
    shift = (tl.where(good, key, 0) * 4).to(tl.int64)
    r_acc += good.to(tl.int64) << shift
    c_acc += is_num.to(tl.int64) << shift
    n_bad += (passed & ~good).to(tl.int32)
    return acc_s, acc_rc, r_acc, c_acc, n_bad


@triton.jit
def add_rows(acc_s, acc_rc, r_acc, c_acc, n_bad, slots, offs, x, key, value, threshold, n, num_keys,
             FOLD: tl.constexpr):  # fmt: skip
    if FOLD:
        return add_rows_folded(acc_s, acc_rc, r_acc, c_acc, n_bad, slots, offs, x, key, value, threshold, n, num_keys)
    else:
        return partials_add_rows(acc_s, acc_rc, r_acc, c_acc, n_bad, slots, offs, x, key, value, threshold, n,
                                 num_keys, True, 2)  # fmt: skip


@triton.jit
def groupby_pipe_kernel(key_src, value_src, x_src, key_ptr, value_ptr, x_ptr, threshold_ptr, sums_ptr, counts_ptr,
                        rows_ptr, n, num_keys, BLOCK: tl.constexpr, UNROLL: tl.constexpr, KEYS: tl.constexpr,
                        STAGES: tl.constexpr, TMA: tl.constexpr, FOLD: tl.constexpr = False):  # fmt: skip
    """groupby_partials_kernel's sums, counts and rows (variant nibbles + fma "groups", no hand prefetch) with the
    persistent loop over whole steps written tl.range(..., num_stages=STAGES), so that Triton's pipeliner loads
    STAGES - 1 steps ahead; the short last step after it, in program 0. Without the lesson's second pass for
    infinities (the sweep's table has none)."""
    slots = tl.arange(0, KEYS)
    acc_s = tl.zeros((BLOCK, KEYS), tl.float64)
    acc_rc = tl.zeros((BLOCK, KEYS), tl.int32)
    r_acc = tl.zeros((BLOCK, 1), tl.int64)
    c_acc = tl.zeros((BLOCK, 1), tl.int64)
    n_bad = tl.zeros((BLOCK, 1), tl.int32)
    threshold = tl.load(threshold_ptr)
    rows = tl.arange(0, BLOCK)[:, None]
    whole = n // (BLOCK * UNROLL)
    it = 0
    for step in tl.range(tl.program_id(0), whole, tl.num_programs(0), num_stages=STAGES):
        for u in tl.static_range(UNROLL):
            offs, x, key, value = pipe_rows(key_src, value_src, x_src, step * (BLOCK * UNROLL) + u * BLOCK, rows, n,
                                            BLOCK, TMA, False)  # fmt: skip
            acc_s, acc_rc, r_acc, c_acc, n_bad = add_rows(acc_s, acc_rc, r_acc, c_acc, n_bad, slots, offs, x, key,
                                                          value, threshold, n, num_keys, FOLD)  # fmt: skip
        it += 1
        if it % (15 // UNROLL) == 0:  # before a 4-bit counter can pass 15
            acc_rc = nibbles_flush(acc_rc, r_acc, c_acc, slots)
            r_acc = tl.zeros((BLOCK, 1), tl.int64)
            c_acc = tl.zeros((BLOCK, 1), tl.int64)
    if tl.program_id(0) == 0:  # the short step: at most UNROLL blocks more in these counters (<= 14 in all)
        for u in tl.static_range(UNROLL):
            offs, x, key, value = pipe_rows(key_ptr, value_ptr, x_ptr, whole * (BLOCK * UNROLL) + u * BLOCK, rows, n,
                                            BLOCK, False, True)  # fmt: skip
            acc_s, acc_rc, r_acc, c_acc, n_bad = add_rows(acc_s, acc_rc, r_acc, c_acc, n_bad, slots, offs, x, key,
                                                          value, threshold, n, num_keys, FOLD)  # fmt: skip
    acc_rc = nibbles_flush(acc_rc, r_acc, c_acc, slots)
    keep = slots < num_keys
    tl.atomic_add(sums_ptr + slots, tl.sum(acc_s, axis=0), mask=keep)
    tl.atomic_add(counts_ptr + slots, tl.sum(acc_rc >> 16, axis=0).to(tl.int64), mask=keep)
    tl.atomic_add(rows_ptr + slots, tl.sum(acc_rc & 0xFFFF, axis=0).to(tl.int64), mask=keep)
    tl.atomic_add(rows_ptr + num_keys, tl.sum(tl.sum(n_bad, axis=1), axis=0).to(tl.int64))


SEEN = set()


def registers():
    """The registers of the groupby_pipe_kernel compiled since the last call ('-' where none was or Triton does not
    say)."""
    try:
        new = {id(k): k.n_regs for cache in groupby_pipe_kernel.device_caches.values()
               for k in cache[0].values() if id(k) not in SEEN}  # fmt: skip
    except Exception:  # noqa: BLE001  (the cache's layout is Triton's own; only a figure for information)
        return "-"
    SEEN.update(new)
    return max(new.values()) if new else "-"


def group_by_pipe(table, threshold_t, num_keys, BLOCK, UNROLL, STAGES, warps, programs_per_sm, tma, descs=None,
                  fold=False):  # fmt: skip
    """sums, counts, rows (rows[num_keys]: bad keys) by groupby_pipe_kernel; descs: the three TMA descriptors."""
    sums, counts, rows = L._accumulators(num_keys, DEV)
    n = table["key"].numel()
    whole = n // (BLOCK * UNROLL)
    programs = max(1, min(max(whole, 1), env.pick(cpu=2, gpu=programs_per_sm * (env.sm_count or 132))))
    assert triton.cdiv(whole, programs) * UNROLL < 2**16
    cols = [table[c] for c in ("key", "value", "x")]
    src = descs if tma else cols
    groupby_pipe_kernel[(programs,)](*src, *cols, threshold_t, sums, counts, rows, n, num_keys, BLOCK=BLOCK,
                                     UNROLL=UNROLL, KEYS=16, STAGES=STAGES, TMA=tma, FOLD=fold, num_warps=warps)  # fmt: skip
    return sums, counts, rows


def l2_rate(say, truth_of):
    """Part 1: the lesson's kernel as set at 3e6 rows (in L2) replayed back to back, and at 1e8 from memory."""
    small = L.table_from_pandas(L.random_table(3 * 10**6 if not CPU else 3000, 16, seed=7), DEV)
    threshold = torch.full((1,), 0.5, dtype=torch.float32, device=DEV)
    got = L.groupby_partials(small, threshold, 16)
    ok = all(torch.equal(g, w) for g, w in zip(got, truth_of(small)))
    run = graphed(lambda: L._groupby_partials(small, threshold, 16))
    if CPU:
        run()
        say(f"   in L2: checked {ok} (no timing under the interpreter)")
        return
    for _ in range(3):
        run()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = float("inf")
    for _ in range(5):
        start.record()
        for _ in range(20):
            run()
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) / 20)
    n = small["key"].numel()
    say(f"   lesson kernel as set, {n:.0e} rows in L2, 20 replays back to back: {best:.4f} ms a replay, "
        f"{best * 1e8 / n:.4f} ms scaled to 1e8 rows (checked exactly: {ok})")  # fmt: skip


class GraphQuery:
    """prepare_query's graph holding the whole query: the threshold copied in from pinned host memory, the
    group-by, the finish kernel, its two numbers copied out to pinned host memory. CLONE: the result's four
    columns copied out of the graph's buffers (which the next call rewrites) in one launch."""

    def __init__(self, table, num_keys, clone):
        self.num_keys, self.clone = num_keys, clone
        self.host_t = torch.zeros(1, dtype=torch.float32, pin_memory=not CPU)
        self.host_info = torch.zeros(2, dtype=torch.int64, pin_memory=not CPU)
        self.threshold = torch.zeros(1, dtype=torch.float32, device=DEV)
        self.out = torch.empty((4, num_keys), dtype=torch.float64, device=DEV)  # key (as int64 bits), sum, count, mean
        self.info = torch.empty(2, dtype=torch.int64, device=DEV)
        self.table = table

        def body():
            self.threshold.copy_(self.host_t, non_blocking=True)
            sums, counts, rows = L._groupby_partials(self.table, self.threshold, num_keys)
            o = self.out
            L.query_finish_kernel[(1,)](sums, counts, rows, o[0].view(torch.int64), o[1], o[2].view(torch.int64),
                                        o[3], self.info, num_keys, BLOCK_SIZE=16)  # fmt: skip
            self.host_info.copy_(self.info, non_blocking=True)

        self.replay = graphed(body)

    def __call__(self, threshold):
        self.host_t[0] = threshold
        self.replay()
        if not CPU:
            torch.cuda.current_stream().synchronize()
        bad, n_kept = self.host_info.tolist()
        L._refuse_bad_count(bad, self.num_keys)
        out = self.out[:, :n_kept].clone() if self.clone else self.out[:, :n_kept]
        return {"key": out[0].view(torch.int64).to(torch.int32), "sum": out[1], "count": out[2].view(torch.int64),
                "mean": out[3]}  # fmt: skip


def main():
    say = Log("l10za")
    say(f"lesson 10 sweep za on {env.gpu_name if env.is_gpu else 'CPU (interpreter)'}, torch {torch.__version__}, "
        f"triton {triton.__version__}; as set: GROUPBY_SCHEDULES['partials'] {L.GROUPBY_SCHEDULES['partials']}, "
        f"PARTIALS_VARIANT {L.PARTIALS_VARIANT}")  # fmt: skip
    num_keys = 16
    table, nbytes, truth, line = query_setup(say, 58, num_keys)
    threshold = torch.full((1,), 0.5, dtype=torch.float32, device=DEV)

    def truth_of(t):
        return L.groupby_dense_ref(t["key"], t["value"], t["x"], 0.5, num_keys)

    say(f"\n== 1. instructions or overlap: {table['key'].numel():.0e} rows, 16 keys, {nbytes / 1e9:.2f} GB read")
    line("lesson kernel as set, from memory (graphed)", bench_ms(graphed(lambda: L._groupby_partials(table, threshold,
                                                                                                      num_keys))))  # fmt: skip
    l2_rate(say, truth_of)

    say("\n== 2. the pipelined loop (tl.range num_stages), pointers or TMA descriptors")
    from triton.tools.tensor_descriptor import TensorDescriptor

    timed = []
    candidates = [
        (tma, B, U, S, W, P, False)
        for tma in (False, True)
        for (B, U, W, P), stages in (((128, 2, 4, 5), (2, 3, 4)), ((128, 1, 4, 6), (3, 4)), ((256, 2, 8, 2), (3,)))
        for S in stages
    ]
    candidates += [(tma, 128, 2, 3, 4, 5, True) for tma in (False, True)]  # fmt: skip
    for tma, B, U, S, W, P, fold in candidates:
        label = f"{'tma' if tma else 'ptr'}{', folded' if fold else ''} B={B} U={U} stages={S} w={W} P={P}"
        if time.time() - T0 > BUDGET_S:
            say(f"   {label:58s} SKIPPED (past {BUDGET_S} s)")
            continue
        if tma and not env.supports_tma:
            say(f"   {label:58s} skipped: no TMA here")
            continue
        try:
            descs = [TensorDescriptor.from_tensor(table[c], [B]) for c in ("key", "value", "x")] if tma else None

            def run(B=B, U=U, S=S, W=W, P=P, tma=tma, descs=descs, fold=fold):
                return group_by_pipe(table, threshold, num_keys, B, U, S, W, P, tma, descs, fold)

            sums, counts, rows = run()
            if not (torch.equal(sums, truth[0]) and torch.equal(counts, truth[1]) and torch.equal(rows[:-1], truth[2])
                    and rows[-1] == 0):  # fmt: skip
                say(f"   {label:58s} FAIL (not the float64 truth)")
                continue
            ms = bench_ms(graphed(run))
        except Exception as e:  # noqa: BLE001  (a candidate that does not compile is said, not fatal)
            say(f"   {label:58s} ERROR {type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}")
            continue
        timed.append((ms, label))
        line(label, ms, f"{registers()} registers")
    if timed:
        say(f"   fastest: {min(timed)[1]} {min(timed)[0]:.4f} ms")

    say("\n== 3. the prepared query, its finish inside the graph or not")
    prepared = L.prepare_query(table, num_keys)
    want = prepared(0.5)
    for label, fn in (("prepare_query(...)(0.5), as make bench", prepared),
                      ("whole query in the graph, result cloned", GraphQuery(table, num_keys, True)),
                      ("whole query in the graph, result not cloned", GraphQuery(table, num_keys, False))):  # fmt: skip
        try:
            got = fn(0.5)
            same = all(torch.equal(got[c].cpu(), want[c].cpu()) for c in want)
            line(label, bench_ms(lambda fn=fn: fn(0.5)), f"same as prepare_query: {same}")
        except Exception as e:  # noqa: BLE001
            say(f"   {label:58s} ERROR {type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}")
    say(f"done in {time.time() - T0:.0f} s")


if __name__ == "__main__":
    main()
