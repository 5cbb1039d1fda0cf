"""Lesson 10 sweep zd, 2026-12-05 (issue 17), after sweep zc: the 16-key group-by's kernel with fewer instructions
a row, against session 23's kernel in the same run.

Sweeps zb and zc found the kernel bound by its instructions on an H200 (rows read from L2 take as long as rows from
memory). Its main loop, compiled for sm_90 (``cuobjdump -sass``), issued 92 instructions a row; the lesson's kernel
now issues 75 where a step and the next are whole (no masks: ``MASKED=False``; the key's range in one unsigned
compare; ``l2_ahead`` 0, which saves 9 more). This times, graphed, each checked exactly against the float64 truth:

  - the kernel before (session 23's: ``git show f74b8cb:lessons/l10_sort_scan_data.py >
    bench/sweeps/l10zd_before.py``, left untracked so that it travels to the GPU machine) at 6 and 8 programs an SM;
  - the kernel now at 5, 6, 8 and 10 programs an SM, ``l2_ahead`` 2 and 0;
  - prepare_query's run as make bench times it, before and now (now: the threshold copied inside the graph from
    pinned memory), with the schedule as set and with the fastest of the kernel's above.

Run from the repo root: ``PYTHONPATH=$PWD python3 bench/sweeps/l10zd.py`` on a GPU (< 120 s), ``... --cpu`` under
the interpreter (tiny shapes, no timings: a smoke test of the script). With ``--write`` on a GPU, the fastest of the
kernel's (programs an SM, l2_ahead) becomes this GPU's row of ``GROUPBY_PARTIALS_BY_GPU`` in
``lessons/l10_sort_scan_data.py`` (for a make bench run after it on the same machine; the solution notebook, the
single source, takes the same row by hand).
"""

import contextlib
import importlib
import os
import re
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
from bench.sweeps.l10v import query_setup  # noqa: E402
from lessons import l10_sort_scan_data as L  # noqa: E402

T0 = time.time()


def before_module(name="l10zd_before"):
    """An earlier lesson module put beside this script under that name (here session 23's: see the docstring), or
    None where it is not there."""
    try:
        return importlib.import_module(f"bench.sweeps.{name}")
    except ImportError:
        return None


@contextlib.contextmanager
def schedule(M, programs_per_sm=None, **variant):
    """Module M's "partials" plan with programs_per_sm programs an SM and variant over PARTIALS_VARIANT, this
    GPU's row of GROUPBY_PARTIALS_BY_GPU out of the way; as set where programs_per_sm is None."""
    with contextlib.ExitStack() as stack:
        if programs_per_sm is not None:
            block, unroll, _, warps = M.GROUPBY_SCHEDULES["partials"]
            stack.enter_context(
                mock.patch.dict(M.GROUPBY_SCHEDULES, {"partials": (block, unroll, programs_per_sm, warps)})
            )
            stack.enter_context(mock.patch.dict(M.PARTIALS_VARIANT, variant))
            if hasattr(M, "GROUPBY_PARTIALS_BY_GPU"):
                stack.enter_context(mock.patch.object(M, "GROUPBY_PARTIALS_BY_GPU", {}))
        yield


def write_row(pick, say):
    """Sets this GPU's row of GROUPBY_PARTIALS_BY_GPU in the lesson's module file to pick (programs an SM,
    l2_ahead[, pairs]); the GPU's name part is its model (H200 in 'NVIDIA H200')."""
    part = re.search(r"\b[A-Z]\d{2,4}\b", env.gpu_name or "")
    if part is None:
        say(f"--write: no model in the GPU's name {env.gpu_name!r}; nothing written")
        return
    rows = {**L.GROUPBY_PARTIALS_BY_GPU, part.group(0): tuple(pick)}
    path = L.__file__
    source = open(path).read()
    line = f"GROUPBY_PARTIALS_BY_GPU = {rows!r}"
    new, count = re.subn(r"^GROUPBY_PARTIALS_BY_GPU = \{.*\}$", line, source, flags=re.M)
    if count != 1:
        say("--write: GROUPBY_PARTIALS_BY_GPU's line not found in the module; nothing written")
        return
    open(path, "w").write(new)
    say(f"--write: {line} in {path}")


def checked(got, truth):
    return (torch.equal(got[0], truth[0]) and torch.equal(got[1], truth[1])
            and torch.equal(got[2][:-1], truth[2]))  # fmt: skip


def prepared_ok(result, truth):
    sums, counts, rows = truth
    present = rows > 0
    return torch.equal(result["count"].cpu(), counts[present].cpu()) and torch.equal(
        result["sum"].double().cpu(), sums[present].cpu()
    )


def main():
    say = Log("l10zd")
    say(f"lesson 10 sweep zd on {env.gpu_name if env.is_gpu else 'CPU (interpreter)'}, torch {torch.__version__}, "
        f"triton {triton.__version__}; GROUPBY_SCHEDULES['partials'] {L.GROUPBY_SCHEDULES['partials']}, "
        f"PARTIALS_VARIANT {L.PARTIALS_VARIANT}")  # fmt: skip
    table, nbytes, truth, line = query_setup(say, 46, 16)
    threshold = torch.full((1,), 0.5, dtype=torch.float32, device=env.device)
    sms = env.sm_count or 132
    old = before_module()
    modules = ([("before", old)] if old is not None else []) + [("now", L)]
    if old is None:
        say("(no l10zd_before.py beside this script: the kernel before is not timed)")
    best = {}
    say(f"\n== {table['key'].numel():.0e} rows, 16 keys, {nbytes / 1e9:.2f} GB; the group-by graphed")
    for name, M in modules:
        for l2 in (2, 0):
            for per_sm in (5, 6, 8, 10) if name == "now" else (6, 8):
                label = f"{name}: {per_sm} programs an SM, l2_ahead {l2}"
                if time.time() - T0 > 100:
                    say(f"   {label:46s} SKIPPED (past 100 s)")
                    continue
                programs = env.pick(cpu=2, gpu=per_sm * sms)
                variant = {"l2_ahead": l2}

                def run(M=M, programs=programs, variant=variant):
                    return M._groupby_partials(table, threshold, 16, num_programs=programs, variant=variant)

                ok = checked(run(), truth)
                ms = bench_ms(graphed(run))
                line(label, ms, f"checked: {ok}")
                if ok and name == "now" and ms == ms:
                    best[(per_sm, l2)] = ms
    say("\n== prepare_query(table, 16)(0.5), as make bench times it")
    fastest = min(best, key=best.get) if best else (6, 2)
    for name, M in modules:
        schedules = [None] + ([fastest] if name == "now" else [])
        for pick in schedules:
            label = f"{name}: as set" if pick is None else f"{name}: {pick[0]} an SM, l2_ahead {pick[1]}"
            with schedule(M) if pick is None else schedule(M, pick[0], l2_ahead=pick[1]):
                prepared = M.prepare_query(table, 16)
                ok = prepared_ok(prepared(0.5), truth)
                line(label, bench_ms(lambda prepared=prepared: prepared(0.5)), f"checked: {ok}")
    if "--write" in sys.argv and env.is_gpu and best:
        write_row(fastest, say)
    say(f"done in {time.time() - T0:.0f} s")


if __name__ == "__main__":
    main()
