"""Lesson 10 sweep zg, 2026-12-05 (issue 17), after sweep ze: the 16-key group-by's loop over whole steps two steps
a trip, against one a trip, in the same run; and "pairs", a program's steps two side by side.

A trip of the prefetching loop loads the next step while it adds the current one, so both live in registers at
once, and the loaded values are copied into the current ones' registers at the trip's end. Two steps a trip trade
the two sets' roles instead: compiled for sm_90 (``utils.offline``, ``sass_loops``) the loop issues 148
instructions a step instead of 163 (133 instead of 146 without ``l2_ahead``). This times, graphed, each checked
exactly against the float64 truth:

  - the kernel before (one step a trip: ``git show c326d44:lessons/l10_sort_scan_data.py >
    bench/sweeps/_l10zg_before.py``, left untracked so that it travels to the GPU machine), now, and now with
    ``PARTIALS_VARIANT["pairs"]`` (a program's steps two side by side: one L2 prefetch and one address a pair,
    142 instructions a step offline), at 10, 16, 20 and 24 programs an SM, ``l2_ahead`` 2, 1 and 0;
  - ``prepare_query(table, 16)(0.5)`` as make bench times it, before and now (now also waiting by
    ``HostMailbox``'s flag), as set and with now's fastest.

Run from the repo root: ``PYTHONPATH=$PWD python3 bench/sweeps/l10zg.py`` on a GPU (< 60 s), ``... --cpu`` under
the interpreter (tiny shapes, no timings: a smoke test). With ``--write`` on a GPU, now's fastest (programs an SM,
l2_ahead, and True if pairs won) becomes this GPU's row of ``GROUPBY_PARTIALS_BY_GPU`` in
``lessons/l10_sort_scan_data.py`` (the solution notebook, the single source, takes it by hand).
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
from bench.sweeps.l10v import query_setup  # noqa: E402
from bench.sweeps.l10zd import before_module, checked, prepared_ok, schedule, write_row  # noqa: E402
from lessons import l10_sort_scan_data as L  # noqa: E402

T0 = time.time()


def main():
    say = Log("l10zg")
    say(f"lesson 10 sweep zg on {env.gpu_name if env.is_gpu else 'CPU (interpreter)'}, torch {torch.__version__}, "
        f"triton {triton.__version__}; GROUPBY_SCHEDULES['partials'] {L.GROUPBY_SCHEDULES['partials']}, "
        f"PARTIALS_VARIANT {L.PARTIALS_VARIANT}, GROUPBY_PARTIALS_BY_GPU {L.GROUPBY_PARTIALS_BY_GPU}")  # fmt: skip
    table, nbytes, truth, line = query_setup(say, 46, 16)
    threshold = torch.full((1,), 0.5, dtype=torch.float32, device=env.device)
    sms = env.sm_count or 132
    old = before_module("_l10zg_before")
    modules = ([("before", old)] if old is not None else []) + [("now", L)]
    if old is None:
        say("(no _l10zg_before.py beside this script: the kernel before is not timed)")
    best = {}
    say(f"\n== {table['key'].numel():.0e} rows, 16 keys, {nbytes / 1e9:.2f} GB; the group-by graphed")
    runs = [("before", old, False)] if old is not None else []
    runs += [("now", L, False), ("now, pairs", L, True)]
    for l2 in (2, 1, 0):
        for per_sm in (10, 16, 20, 24) if not CPU else (10,):
            for name, M, pairs in runs:
                label = f"{name}: {per_sm} programs an SM, l2_ahead {l2}"
                if time.time() - T0 > 120:
                    say(f"   {label:46s} SKIPPED (past 120 s)")
                    continue
                programs = env.pick(cpu=2, gpu=per_sm * sms)
                variant = {"l2_ahead": l2, **({"pairs": True} if pairs else {})}

                def run(M=M, programs=programs, variant=variant):
                    return M._groupby_partials(table, threshold, 16, num_programs=programs, variant=variant)

                ok = checked(run(), truth)
                ms = bench_ms(graphed(run))
                line(label, ms, f"checked: {ok}")
                if ok and M is L and ms == ms:
                    best[(per_sm, l2, pairs)] = ms
    fastest = min(best, key=best.get) if best else None
    if fastest is not None:
        say(f"\n   fastest: {fastest[0]} programs an SM, l2_ahead {fastest[1]}, pairs {fastest[2]} "
            f"({best[fastest]:.4f} ms)")  # fmt: skip
    say("\n== prepare_query(table, 16)(0.5), as make bench times it")
    for name, M in modules:
        for pick in [None] + ([fastest] if name == "now" and fastest is not None else []):
            label = (
                f"{name}: as set" if pick is None else f"{name}: {pick[0]} an SM, l2_ahead {pick[1]}, pairs {pick[2]}"
            )
            with schedule(M) if pick is None else schedule(M, pick[0], l2_ahead=pick[1], pairs=pick[2]):
                prepared = M.prepare_query(table, 16)
                ok = prepared_ok(prepared(0.5), truth)
                line(label, bench_ms(lambda prepared=prepared: prepared(0.5)), f"checked: {ok}")
    if "--write" in sys.argv and env.is_gpu and fastest is not None:
        write_row(fastest if fastest[2] else fastest[:2], say)  # pairs, where it won, in the GPU's own row
    say(f"done in {time.time() - T0:.0f} s")


if __name__ == "__main__":
    main()
