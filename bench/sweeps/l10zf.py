"""Lesson 10 sweep zf, 2026-12-05 (issue 17), after sweep ze: where the host's time goes in a prepared query's call.

Sweep ze timed ``prepare_query(table, 16)(0.5)`` on an H200 at 0.450 ms as make bench times it, its graph's replay
and the stream's wait alone at 0.422 ms and with the finish kernel at 0.4245: about 25 µs of the call is Python
around them, and after the wait every µs of it is timed (the GPU has nothing left to do). This reads the host's
clock (``time.perf_counter_ns``) at each stage of the call, 300 calls, and says each stage's median and 90th
percentile:

  - before the replay (the threshold's check, the columns' layout, the threshold written to pinned memory);
  - the replay; the finish's buffers and its launch; the wait; what follows it (the two numbers, the slices);
  - the result dropped (its tensors freed, as make bench's loop drops it before its end event);

with the finish's outputs as the lesson makes them (views of one allocation, not cut when every key had rows) and
as before (three allocations, always cut). Then the prepared query's graph against graphs of fewer nodes (the kernel
alone; with the accumulators' zeroing), replayed alone: what the nodes before the kernel cost on the GPU.

Run from the repo root: ``PYTHONPATH=$PWD python3 bench/sweeps/l10zf.py`` on a GPU (< 30 s), ``... --cpu`` under the
interpreter (a smoke test: no graph, so only the stages a plain run has).
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

from bench.sweeps.kit import Log, bench_ms, graphed  # noqa: E402
from lessons import l10_sort_scan_data as L  # noqa: E402

T0 = time.time()


def outputs(num_keys, key_dtype, device, one_storage):
    """The finish's outputs (keys, sums, means, counts, the two numbers): the lesson's (finish_outputs, views of one
    allocation) or three allocations, as it made them before."""
    if one_storage:
        return L.finish_outputs(num_keys, key_dtype, device)
    keys = torch.empty(num_keys, dtype=key_dtype, device=device)
    out_sums, mean = torch.empty((2, num_keys), dtype=torch.float64, device=device)
    out_counts = torch.empty(num_keys + 2, dtype=torch.int64, device=device)
    return keys, out_sums, mean, out_counts[:num_keys], out_counts[num_keys:]


def staged_call(q, threshold, marks, one_storage=True):
    """PreparedQuery.__call__ and _query_finish as written in the lesson, with the host's clock read between
    stages (marks: a list the times are appended to); one_storage=False: the outputs in three allocations and
    always cut to the length, as before."""
    clock = time.perf_counter_ns
    marks.append(clock())
    threshold = utils.require_number(threshold, "threshold")
    if q._layout() != q._where:
        raise ValueError("the columns were replaced")
    if q.graph is None:
        q.threshold.fill_(threshold)
        sums, counts, rows = q._group_by()
        marks.append(clock())
    else:
        q._host_threshold.fill_(threshold)
        marks.append(clock())
        q.graph.replay()
        sums, counts, rows = q._dense
        marks.append(clock())
    num_keys, mailbox = q.num_keys, q._mailbox
    sums = sums.contiguous()
    keys, out_sums, mean, out_counts, numbers = outputs(num_keys, q.columns["key"].dtype, rows.device, one_storage)
    block = max(min(triton.next_power_of_2(num_keys), 1024), 16)
    if mailbox is None:
        L.query_finish_kernel[(1,)](sums, counts, rows, keys, out_sums, out_counts, mean, numbers, num_keys,
                                    BLOCK_SIZE=block)  # fmt: skip
        marks.append(clock())
        bad, n_kept = numbers.tolist()
        marks.append(clock())
    else:
        run = mailbox.next_run()
        L.query_finish_kernel[(1,)](sums, counts, rows, keys, out_sums, out_counts, mean, mailbox.numbers, num_keys,
                                    BLOCK_SIZE=block, flag_ptr=mailbox.flag, run=run, FLAG=True)  # fmt: skip
        marks.append(clock())
        bad, n_kept = mailbox.wait(run)
        marks.append(clock())
    L._refuse_bad_count(bad, num_keys)
    if n_kept == num_keys and one_storage:  # as the lesson: every key had rows, nothing to cut
        result = {"key": keys, "sum": out_sums, "count": out_counts, "mean": mean}
    else:
        result = {"key": keys[:n_kept], "sum": out_sums[:n_kept], "count": out_counts[:n_kept], "mean": mean[:n_kept]}
    marks.append(clock())
    return result


def main():
    say = Log("l10zf")
    say(f"lesson 10 sweep zf on {env.gpu_name if env.is_gpu else 'CPU (interpreter)'}, torch {torch.__version__}, "
        f"triton {triton.__version__}; GROUPBY_PARTIALS_BY_GPU {L.GROUPBY_PARTIALS_BY_GPU}")  # fmt: skip
    rows = 10**8 if not CPU else 3000
    table = L.table_from_pandas(L.random_table(rows, 16), env.device)
    q = L.prepare_query(table, 16)
    truth = L.to_frame(q(0.5))
    calls = 300 if not CPU else 3
    stages = (["before the replay", "the replay", "finish: buffers + launch", "the wait (the flag)", "after the wait"]
              if q.graph is not None else ["checks + group-by launches", "finish: buffers + launch",
                                           "the wait (the numbers' copy)", "after the wait"])  # fmt: skip
    stages.append("the result dropped")
    for one_storage in (True, False):
        times = {s: [] for s in stages}
        for _ in range(calls):
            marks = []
            result = staged_call(q, 0.5, marks, one_storage)
            del result
            marks.append(time.perf_counter_ns())
            for s, (a, b) in zip(stages, zip(marks, marks[1:])):
                times[s].append((b - a) / 1e3)
        same = L.to_frame(staged_call(q, 0.5, [], one_storage)).equals(truth)
        say(
            f"\n== {rows:.0e} rows, 16 keys, {calls} calls, the outputs "
            f"{'as the lesson: views of one allocation' if one_storage else 'in three allocations, as before'}: the host's "
            f"µs per stage (median, 90th percentile); the staged call's result equals the prepared query's: {same}"
        )
        for s in stages:
            ordered = sorted(times[s])
            say(f"   {s:32s} {ordered[len(ordered) // 2]:9.1f} µs {ordered[int(len(ordered) * 0.9)]:9.1f} µs")
    graph_nodes(say, table, q)
    say(f"done in {time.time() - T0:.0f} s")


def graph_nodes(say, table, q):
    """The prepared query's graph against graphs of fewer nodes, each replayed alone (make bench's timer): the
    group-by kernel alone (accumulators zeroed once, outside), with the accumulators' zeroing, and the prepared
    query's own graph (the threshold's copy from pinned memory too): what each node before the kernel costs."""
    if q.graph is None:
        say("\n(no graph under the interpreter: the graph's nodes are not timed)")
        return
    threshold = torch.full((1,), 0.5, dtype=torch.float32, device=env.device)
    sums, counts, rows = L._accumulators(16, env.device)
    (block, unroll, per_sm, warps), variant = L.partials_defaults()
    n = table["key"].numel()
    programs = L._partials_programs(triton.cdiv(n, block * unroll), per_sm, unroll)

    def kernel_only():  # the launcher's kernel on accumulators zeroed once: the graph holds the kernel alone
        L.groupby_partials_kernel[(programs,)](
            table["key"], table["value"], table["x"], threshold, sums, counts, rows, n, 16, BLOCK_SIZE=block,
            KEYS=16, UNROLL=unroll, NIBBLES=True, FMA=2 if variant["groups"] else 1, PREFETCH=True,
            L2_AHEAD=variant["l2_ahead"], WIDE=False, num_warps=warps,
        )  # fmt: skip

    say("\n== the prepared query's graph against fewer nodes, each replayed alone")
    for label, fn in (
        ("the group-by kernel alone", kernel_only),
        ("+ the accumulators' zeroing", lambda: L._groupby_partials(table, threshold, 16)),
    ):
        say(f"   {label:40s} {bench_ms(graphed(fn)):9.4f} ms")
    say(f"   {'+ the threshold copied in (the prepared graph)':40s} {bench_ms(q.graph.replay):9.4f} ms")


if __name__ == "__main__":
    main()
