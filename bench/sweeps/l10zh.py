"""Lesson 10 sweep zh, 2026-12-06: what a GPU's blocks add when the look-back publishes its inclusive prefix with a
block total's flag (1), the planted mistake that session 32's H100 run left unnamed.

``check_cumsum`` names the look-back's three wrong last words by what each block added (``status_word_odds``): for
this one, what block b adds past the right prefix must be a sum of some of the blocks before it (those it found
finished), and the odds that a wrong value fits that by chance must fall below 1e-4 within five runs. On the H100
(``results/h100-2026-12-06-s32``) blocks 0-18 of the 79 came out right and the odds stayed above it: with few
predecessors finished, the sums of some of them cover most values near the right one. This plants the mistake as
the test does, runs the check's GPU case (5000 int32 in blocks of 64) ten times, and prints for each run which
blocks are wrong, what each added past the right prefix, the three models' odds, and whether the blocks found
finished could be the first m (a prefix) of them. Session 33's H100 run: they could not (the near-prefix model
named it in 3 runs of 10), and the subset model's odds stayed near 1. Since then each run also runs
status_word_probe's input (only block 0 has a total, V): under this mistake a block adds a multiple of V, printed
in units of V, and the check names it with the odds of both inputs.

Run from the repo root: ``PYTHONPATH=$PWD python3 bench/sweeps/l10zh.py`` on a GPU (< 20 s), ``... --cpu`` under
the interpreter (blocks in order: every block finds its predecessors finished).
"""

import os
import sys
import tempfile

CPU = "--cpu" in sys.argv
if CPU:
    os.environ["TRITON_INTERPRET"] = "1"

import utils  # noqa: E402  (sets the interpreter up before triton is imported)

env = utils.mode.current()

import torch  # noqa: E402
from _pytest.monkeypatch import MonkeyPatch  # noqa: E402

from bench.sweeps.kit import Log  # noqa: E402
from lessons import l10_sort_scan_data as L  # noqa: E402
from utils import mutants  # noqa: E402

say = Log("l10zh")
n, BLOCK = (100, 16) if CPU else (5000, 64)  # the interpreter: every block finished, sums double: few blocks
gen = torch.Generator().manual_seed(32)
x = torch.randint(-8, 9, (n,), generator=gen, dtype=torch.int32)
blocks = torch.nn.functional.pad(x, (0, -n % BLOCK)).view(-1, BLOCK)
x[::BLOCK] += (blocks.sum(1) == 0).int()  # as check_cumsum: no block sums to 0
sums = torch.nn.functional.pad(x, (0, -n % BLOCK)).view(-1, BLOCK).sum(1).tolist()
right = [0] + torch.tensor(sums).cumsum(0).tolist()[:-1]
say(f"{env.gpu_name or 'CPU'}: {n} int32 in blocks of {BLOCK} ({len(sums)} blocks), LOOKBACK {L.LOOKBACK}")
probe = L.status_word_probe(n, BLOCK, generator=gen)
probe_sums = torch.nn.functional.pad(probe, (0, -n % BLOCK)).view(-1, BLOCK).sum(1).tolist()
V = probe_sums[0]
say(f"status_word_probe: block 0's total V = {V}, every other block's 0")


def added(xs):
    """What each block added (its output's first element minus x's)."""
    out = L.cumsum(xs.to(env.device), BLOCK_SIZE=BLOCK, method="lookback").cpu()
    return (out[::BLOCK] - xs[::BLOCK]).tolist()


with MonkeyPatch.context() as m, tempfile.TemporaryDirectory() as folder:
    mutants.plant(m, folder, L, "lookback_prefix", ("(2 << 32) | inclusive", "(1 << 32) | inclusive"))
    runs = []
    for run in range(10):
        before = added(x)
        runs.append(before)
        extra = [b - r for b, r in zip(before, right)]
        wrong = [b for b, e in enumerate(extra) if e]
        odds = L.status_word_odds(before, sums)
        say(f"run {run}: {len(wrong)} wrong blocks, the first {wrong[:1]}; odds {['%.3g' % o for o in odds]}; "
            f"named {L.wrong_status_word(runs, sums)!r:.40}")  # fmt: skip
        say(f"  added past the right prefix: {extra}")
        probed = added(probe)
        multiples = [(b - V) / V for b in probed[1:]]
        named = L.wrong_status_word([probed], probe_sums, also=L.runs_odds(runs, sums))
        say(f"  the probe: {sum(b != V for b in probed[1:])} wrong blocks, odds "
            f"{['%.3g' % o for o in L.status_word_odds(probed, probe_sums)]}, with the runs so far named "
            f"{named!r:.40}; added past V, in V: {multiples}")  # fmt: skip
    say(f"distinct runs: {len({tuple(r) for r in runs})} of {len(runs)}")
