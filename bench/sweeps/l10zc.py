"""Lesson 10 sweep zc, 2026-11-28 (issue 17), after sweep zb: whether more warps an SM speed up the 16-key
group-by's kernel, now that sweep zb found its instructions, not its loads, setting its time.

Run from the repo root: ``PYTHONPATH=$PWD python3 bench/sweeps/l10zc.py`` on a GPU (< 90 s), ``... --cpu`` under the
interpreter (tiny shapes, no timings: a smoke test of the script).

The kernel as set takes about 92 registers a thread (4 warps a program, 5 programs an SM resident): 20 warps an SM
to hide each row's chain of dependent instructions. A cap on registers (the launch's ``maxnreg``) lets more
programs in at the price of spills. This times lesson 10's kernel as set (its launcher, ``num_programs`` as the
grid) at caps of none, 80, 72 and 64 registers and 5 to 8 programs an SM, graphed, each checked exactly against
the float64 truth first, with the registers and spills the compiler reports.
"""

import os
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

DEV = env.device
KERNEL = L.groupby_partials_kernel
SEEN = set()


class Capped:
    """groupby_partials_kernel launched with maxnreg=cap (None: as the lesson launches it)."""

    def __init__(self, cap):
        self.cap = cap

    def __getitem__(self, grid):
        launch = KERNEL[grid]
        extra = {} if self.cap is None or CPU else {"maxnreg": self.cap}
        return lambda *args, **meta: launch(*args, **meta, **extra)


def compiled():
    """Registers and spilled bytes of the kernels compiled since the last call ('-' where Triton does not say)."""
    try:
        new = {id(k): (k.n_regs, k.n_spills) for cache in KERNEL.device_caches.values()
               for k in cache[0].values() if id(k) not in SEEN}  # fmt: skip
    except Exception:  # noqa: BLE001  (the cache's layout is Triton's own; only a figure for information)
        return "-"
    SEEN.update(new)
    return ", ".join(f"{r} registers, {s} spilled" for r, s in new.values()) or "-"


def main():
    t0 = time.time()
    say = Log("l10zc")
    say(f"lesson 10 sweep zc on {env.gpu_name if env.is_gpu else 'CPU (interpreter)'}, torch {torch.__version__}, "
        f"triton {triton.__version__}; GROUPBY_SCHEDULES['partials'] {L.GROUPBY_SCHEDULES['partials']}")  # fmt: skip
    table, nbytes, truth, line = query_setup(say, 40, 16)
    threshold = torch.full((1,), 0.5, dtype=torch.float32, device=DEV)
    sms = env.sm_count or 132
    say(f"\n== {table['key'].numel():.0e} rows, 16 keys, {nbytes / 1e9:.2f} GB; the group-by graphed")
    for cap in (None, 80, 72, 64):
        for per_sm in (5, 6, 8):
            label = f"maxnreg {cap or 'none'}, {per_sm} programs an SM"
            if time.time() - t0 > 75:
                say(f"   {label:40s} SKIPPED (past 75 s)")
                continue
            programs = env.pick(cpu=2, gpu=per_sm * sms)
            with mock.patch.object(L, "groupby_partials_kernel", Capped(cap)):
                got = L._groupby_partials(table, threshold, 16, num_programs=programs)
                ok = torch.equal(got[0], truth[0]) and torch.equal(got[1], truth[1])
                ok = ok and torch.equal(got[2][:-1], truth[2])
                run = graphed(lambda programs=programs: L._groupby_partials(table, threshold, 16,
                                                                            num_programs=programs))  # fmt: skip
            line(label, bench_ms(run), f"checked: {ok}; {compiled()}")
    say(f"done in {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
