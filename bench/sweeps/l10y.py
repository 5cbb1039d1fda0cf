"""Lesson 10 sweep y, 2026-11-28 (issue 17; written after session 17's GPU time, not yet run): where the prepared
query's time goes beyond its kernel.

make bench on an H200 (results/h200-2026-11-28-s16) timed prepare_query(...)(0.5) at 0.551 ms, 51.4 % of a copy,
where its group-by kernel alone, replayed from a graph, took 0.456 ms (sweep l10w). Counting the host's launches
(the threshold's fill, the replay, the finish kernel, the wait for two numbers) gives about 30-40 us, not 95. This
times, each as make bench times a row (utils.timing: L2 flushed before each repetition, median), at 10**8 rows and
16 keys:
  - prepared(0.5), as make bench calls it;
  - the prepared graph's replay alone (no wait), and with a wait after it;
  - the replay, then the finish kernel and its two numbers read, without the threshold's fill;
  - the group-by's graph replayed with gtime (graphed, back to back), as sweep l10w times the kernel;
so that the gap splits into the GPU's own work in the timing loop (the L2 flush's dirty lines, the graph's launch)
and the host's (the wait, the result's slices). Each result is first checked against the float64 truth.

Run from the repo root: ``PYTHONPATH=$PWD python3 bench/sweeps/l10y.py`` on a GPU (< 60 s), ``... --cpu`` under the
interpreter (tiny shapes, no timings: a smoke test of the script).
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

from bench.sweeps.kit import Log, bench_ms, gtime  # noqa: E402
from bench.sweeps.l10v import query_setup  # noqa: E402
from lessons import l10_sort_scan_data as L  # noqa: E402

T0 = time.time()


def main():
    say = Log("l10y")
    say(f"lesson 10 sweep y on {env.gpu_name if env.is_gpu else 'CPU (interpreter)'}, torch {torch.__version__}, "
        f"triton {triton.__version__}; PARTIALS_VARIANT {L.PARTIALS_VARIANT}")  # fmt: skip
    num_keys = 16
    table, nbytes, truth, line = query_setup(say, 44, num_keys)
    prepared = L.prepare_query(table, num_keys)
    result = prepared(0.5)
    sums, counts, rows = truth
    present = rows > 0
    ok = torch.equal(result["count"].cpu(), counts[present].cpu()) and torch.allclose(
        result["sum"].double().cpu(), sums[present].cpu(), rtol=1e-9, atol=1e-6
    )
    say(f"prepared query against the float64 truth: {'ok' if ok else 'FAIL (nothing timed)'}; {prepared!r}")
    if not ok:
        return
    say(f"\n== {table['key'].numel():.0e} rows, {num_keys} keys, {nbytes / 1e9:.2f} GB read")
    line("prepared(0.5), as make bench times it", bench_ms(lambda: prepared(0.5)))
    if prepared.graph is None:  # the interpreter: no graph to take apart
        say("no graph (the interpreter): the rest needs a GPU")
        return
    graph = prepared.graph
    line("the graph's replay alone (no wait)", bench_ms(graph.replay))

    def replay_wait():
        graph.replay()
        torch.cuda.current_stream().synchronize()

    line("the replay, then a wait", bench_ms(replay_wait))
    sums_d, counts_d, rows_d = prepared._dense

    def replay_finish():
        graph.replay()
        return L._finish_query(sums_d, counts_d, rows_d, num_keys, table["key"].dtype)

    line("the replay, then the finish and its wait", bench_ms(replay_finish))
    line("the group-by graphed (gtime, as l10w)", gtime(lambda: L._groupby_partials(table, prepared.threshold, 16)))
    say(f"total {time.time() - T0:.0f} s")


if __name__ == "__main__":
    main()
