"""Lesson 10 sweep ze, 2026-12-05 (issue 17), after sweep zd: the 16-key group-by's programs an SM against the
registers a thread, and where the prepared query's time around the kernel goes.

Compiled for sm_90, ``groupby_partials_kernel`` (as the 16-key query runs it) takes 94 registers a thread: 65,536
registers an SM hold 5 of its programs of 4 warps. Sweep zd's fastest grid, 10 programs an SM, is then two waves
of 5, and 6 an SM (0.554 ms without ``l2_ahead``, against 0.419 at 5) leaves a sixth of the programs to a second
wave of one program an SM. Offline (``utils.offline``, ``maxnreg``), a cap of 80 or 72 registers spills only
outside the loop over whole steps (163 instructions a step either way): 6 or 7 programs an SM would fit at once.
This times, graphed, each checked exactly against the float64 truth:

  - the kernel at ``maxnreg`` None (as today), 88, 80, 72 and 64, 5 to 16 programs an SM, ``l2_ahead`` 2 and 0,
    with the registers and spilled bytes of each compile and the programs an SM that fit at once;
  - ``prepare_query(table, 16)(0.5)`` as make bench times it, as set and with the kernel's fastest; and its parts:
    the graph's replay and the stream's wait alone, then with the finish kernel, then the whole call, and the
    whole call waiting on the stream's synchronize instead of the finish kernel's flag (session 25 ran this when
    the lesson still waited so, with a copy of the flag's wait beside it: results/h200-2026-12-05-s25/sweeps/).

Run from the repo root: ``PYTHONPATH=$PWD python3 bench/sweeps/l10ze.py`` on a GPU (about 60 s), ``... --cpu``
under the interpreter (tiny shapes, no timings: a smoke test). With ``--write`` on a GPU, the kernel's fastest
(programs an SM, l2_ahead), if it has no register cap, becomes this GPU's row of ``GROUPBY_PARTIALS_BY_GPU`` in
``lessons/l10_sort_scan_data.py`` (the solution notebook, the single source, takes the same row by hand).
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

from bench.sweeps import l10zd  # noqa: E402
from bench.sweeps.kit import Log, bench_ms, graphed  # noqa: E402
from bench.sweeps.l10v import query_setup  # noqa: E402
from bench.sweeps.l10zd import checked, prepared_ok  # noqa: E402
from lessons import l10_sort_scan_data as L  # noqa: E402

T0 = time.time()
REGISTERS_PER_SM = 65536


def compiled_kernels(fn):
    """The compiled kernels in a @triton.jit function's caches (every device), by id."""
    found = {}
    try:
        for entry in getattr(fn, "device_caches", {}).values():
            for kernel in entry[0].values():
                found[id(kernel)] = kernel
    except (AttributeError, TypeError, IndexError):  # another triton's layout: the registers go unsaid
        pass
    return found


def registers_of(kernel):
    """(registers a thread, spilled bytes) of a compiled kernel, (None, None) where this triton does not say."""
    try:
        kernel._init_handles()
        return kernel.n_regs, kernel.n_spills
    except Exception:
        return None, None


def fits(registers, warps=4):
    """Programs of `warps` warps that fit on an SM at once by their registers (allocated 8 at a time a thread)."""
    if not registers:
        return None
    return REGISTERS_PER_SM // (-(-registers // 8) * 8 * 32 * warps)


def synchronized_call(prepared, threshold):
    """The prepared query's call, but with the host waiting on the stream's synchronize for the finish kernel's
    numbers (in the mailbox's pinned memory) instead of reading its flag: the way the lesson waited before this
    sweep (in session 25's run the lesson's call was this one, and a copy of today's flag wait was timed beside it)."""
    q = prepared
    q._host_threshold.fill_(threshold)
    q.graph.replay()
    sums, counts, rows = q._dense
    keys, out_sums, mean, out_counts, _ = L.finish_outputs(q.num_keys, q.columns["key"].dtype, rows.device)
    L.query_finish_kernel[(1,)](sums, counts, rows, keys, out_sums, out_counts, mean, q._mailbox.numbers, q.num_keys,
                                BLOCK_SIZE=max(triton.next_power_of_2(q.num_keys), 16))  # fmt: skip
    torch.cuda.current_stream().synchronize()
    bad, n_kept = q._mailbox.numbers.tolist()
    L._refuse_bad_count(bad, q.num_keys)
    return {"key": keys[:n_kept], "sum": out_sums[:n_kept], "count": out_counts[:n_kept], "mean": mean[:n_kept]}


def main():
    say = Log("l10ze")
    say(f"lesson 10 sweep ze on {env.gpu_name if env.is_gpu else 'CPU (interpreter)'}, torch {torch.__version__}, "
        f"triton {triton.__version__}; GROUPBY_SCHEDULES['partials'] {L.GROUPBY_SCHEDULES['partials']}, "
        f"PARTIALS_VARIANT {L.PARTIALS_VARIANT}, GROUPBY_PARTIALS_BY_GPU {L.GROUPBY_PARTIALS_BY_GPU}")  # fmt: skip
    table, nbytes, truth, line = query_setup(say, 50, 16)
    threshold = torch.full((1,), 0.5, dtype=torch.float32, device=env.device)
    sms = env.sm_count or 132
    warps = L.GROUPBY_SCHEDULES["partials"][3]
    best = {}
    say(f"\n== {table['key'].numel():.0e} rows, 16 keys, {nbytes / 1e9:.2f} GB; the group-by graphed")
    caps = (None, 88, 80, 72, 64) if not CPU else (None, 72)
    per_sms = (5, 6, 7, 8, 10, 12, 14, 16) if not CPU else (5,)
    for l2 in (2, 0):
        for cap in caps:
            seen = compiled_kernels(L.groupby_partials_kernel)
            said = False
            for per_sm in per_sms:
                label = f"maxnreg {cap}, {per_sm} programs an SM, l2_ahead {l2}"
                if time.time() - T0 > 150:
                    say(f"   {label:50s} SKIPPED (past 150 s)")
                    continue
                programs = env.pick(cpu=2, gpu=per_sm * sms)
                variant = {"l2_ahead": l2, "maxnreg": cap}

                def run(programs=programs, variant=variant):
                    return L._groupby_partials(table, threshold, 16, num_programs=programs, variant=variant)

                ok = checked(run(), truth)
                if not said:
                    new = [k for i, k in compiled_kernels(L.groupby_partials_kernel).items() if i not in seen]
                    for kernel in new:
                        regs, spills = registers_of(kernel)
                        say(f"   (maxnreg {cap}, l2_ahead {l2}: {regs} registers, {spills} B spilled; "
                            f"{fits(regs, warps)} programs an SM fit at once)")  # fmt: skip
                    said = True
                ms = bench_ms(graphed(run))
                line(label, ms, f"checked: {ok}")
                if ok and ms == ms:
                    best[(per_sm, l2, cap)] = ms
    fastest = min(best, key=best.get) if best else None
    say(f"\n   fastest: {fastest} ({best[fastest]:.4f} ms)" if best else "\n   (no timings: the interpreter)")

    say("\n== prepare_query(table, 16)(0.5), as make bench times it: as set, with the fastest, and its parts")
    picks = [None] + ([fastest] if fastest is not None else [])
    for pick in picks:
        name = "as set" if pick is None else f"{pick[0]} an SM, l2_ahead {pick[1]}, maxnreg {pick[2]}"
        with l10zd.schedule(L) if pick is None else l10zd.schedule(L, pick[0], l2_ahead=pick[1], maxnreg=pick[2]):
            prepared = L.prepare_query(table, 16)
            ok = prepared_ok(prepared(0.5), truth)
            line(f"{name}: the whole call", bench_ms(lambda prepared=prepared: prepared(0.5)), f"checked: {ok}")
            if prepared.graph is not None:
                stream = torch.cuda.current_stream()

                def replay_wait(prepared=prepared):
                    prepared.graph.replay()
                    stream.synchronize()

                def replay_finish_wait(prepared=prepared):
                    prepared.graph.replay()
                    sums, counts, rows = prepared._dense
                    L.query_finish_kernel[(1,)](sums, counts, rows, keys, out_sums, out_counts, mean, numbers, 16,
                                                BLOCK_SIZE=16)  # fmt: skip
                    stream.synchronize()

                keys, out_sums, mean, out_counts, numbers = L.finish_outputs(16, table["key"].dtype, env.device)
                line(f"{name}: replay + wait", bench_ms(replay_wait))
                line(f"{name}: replay + finish kernel + wait", bench_ms(replay_finish_wait))
                line(f"{name}: replay alone (no wait)", bench_ms(prepared.graph.replay))
                ok = prepared_ok(synchronized_call(prepared, 0.5), truth)
                line(f"{name}: the whole call, the stream's synchronize instead of the flag",
                     bench_ms(lambda prepared=prepared: synchronized_call(prepared, 0.5)), f"checked: {ok}")  # fmt: skip
    if "--write" in sys.argv and env.is_gpu and fastest is not None:
        if fastest[2] is None:  # a GPU's row holds (programs an SM, l2_ahead); a cap is PARTIALS_VARIANT's to set
            l10zd.write_row(fastest[:2], say)
        else:
            say(
                f"--write: the fastest has maxnreg {fastest[2]}: set PARTIALS_VARIANT['maxnreg'] by hand; no row written"
            )
    say(f"done in {time.time() - T0:.0f} s")


if __name__ == "__main__":
    main()
