"""Lesson 10 sweep, third round (issue 17: compaction and the 16-key query at >= 70 % of copy). Run from the repo
root: `PYTHONPATH=$PWD python3 bench/sweeps/l10c.py`; `--cpu` runs tiny shapes under the interpreter (a smoke test
of the script, not a measurement).

What it compares, each next to a copy of 2**28 int32 measured here (the '% copy'), in one process:
  - compaction of 2**28 fp32, half kept and 10 % kept, bytes = compact_bytes (flags + values read, kept values
    written), against x[keep]: the default (reduce-then-scan at its schedule), compact_lookback_kernel as make bench
    times it, and the new compact_lookback_local_kernel ("lookback-local": a value and a slot an element, 32-bit
    offsets in the block) over COMPACT_LOCAL's variants: 1 or 4 elements a thread, its value loads, ticket or
    program-id order, a register cap (maxnreg), each block's values prefetched into L2 before the look-back
    (Hopper's bulk prefetch: bytes in flight that hold no register) and the schedule. Why: a memory-bound kernel's speed follows the
    bytes it has in flight on each SM, and those follow registers an element (the look-back scan: 61 registers for
    32 elements a thread, 8 programs of 4096 an SM, 93 % of copy; compact_lookback_kernel: 138, 3 programs, 47 %;
    compact_lookback_local_kernel at (2048, 4): 48, 10 programs, 20480 elements an SM).
  - the query at 1e8 rows and 16 keys (filter + group-by + the keys present + mean, one wait), bytes = query_bytes
    (key, value, x read once): the group-by's kernel alone (no wait, as l10b timed it); the query as make bench
    times it, finished by torch ops (QUERY_FINISH "torch", ten small launches after the group-by) or by
    query_finish_kernel ("kernel", one launch); the group-by's kernel asking the rows 1, 2 or 4 steps ahead into L2
    (PARTIALS_VARIANT["l2_ahead"]: bytes in flight that hold no register), alone and in the query; and, to show what
    the wait itself costs, the group-by + the finish kernel without it.
Every candidate is checked before it is timed (FAIL lines are never chosen): compactions exactly against x[keep], at
an odd size of many blocks first, then at full size; the query's result exactly against groupby_dense_ref (values
are multiples of 1/4: exact fp64 sums in any order), and against pandas with the lesson's check_query. Timed as
bench/lesson10.py times them (utils.timing: triton's do_bench, L2 flushed before each repetition, median; both
compact and query wait for the GPU once, inside the call).

Which line maps to which edit in solutions/10_sort_scan_data.ipynb (then `python -m utils.notebooks`):
  - compact "lookback-local B=2048 w=4 p1 masked-late r=- ticket L2"  -> COMPACT_METHOD = "lookback-local";
    COMPACT_SCHEDULES["lookback-local"] = (2048, 4); COMPACT_LOCAL = {"per_thread": 1, "loads": "masked-late",
    "ticket": True, "maxnreg": None, "prefetch": True}   (r=40: "maxnreg": 40; "pid": "ticket": False; no "L2":
    "prefetch": False)
  - compact "reduce-then-scan B=2048 w=8 dense"  -> COMPACT_METHOD = "reduce-then-scan" (the default as it is)
  - groupby "groupby_partials kernel alone, l2_ahead=2 P=5"  -> PARTIALS_VARIANT["l2_ahead"] = 2;
    GROUPBY_SCHEDULES["partials"] = (128, 2, 5, 4)
  - query "query() finish=kernel l2_ahead=2"  -> QUERY_FINISH = "kernel"; PARTIALS_VARIANT["l2_ahead"] = 2
The "best per shape" summary at the end prints the edit for each shape's winner.
"""

import math
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
NOMINAL = 3000.0  # GB/s, the H100 copy ceiling of results/h100-2026-11-23
T0 = time.time()
LINES = []
BEST = {}  # (group, shape) -> (ms, candidate, edit)
BUDGET_S = 135  # the lead's limit is 150 s: later candidates are skipped (and say so) past this
COPY = {"GB/s": NOMINAL}


def say(line):
    print(line, flush=True)
    LINES.append(line)


def bench(fn):
    if CPU:
        start = time.perf_counter()
        fn()
        return (time.perf_counter() - start) * 1e3
    return timing.bench(fn).ms  # make bench's timing: do_bench, L2 flushed, median


def first_line(e):
    return (str(e).strip().splitlines() or [type(e).__name__])[0][:160]


def fmt(group, shape, name, ms, nbytes):
    gbs = nbytes / ms / 1e6
    return (f"{group:8s} {shape:20s} {name:56s} {ms:9.4f} ms {gbs:8.1f} GB/s {100 * gbs / COPY['GB/s']:5.1f}% copy "
            f"({100 * gbs / NOMINAL:5.1f}% of {NOMINAL:.0f})")  # fmt: skip


def baseline(group, shape, name, fn, nbytes):
    try:
        fn()
        ms = bench(fn)
    except Exception as e:
        say(f"{group:8s} {shape:20s} {'[' + name + ']':56s} ERROR {type(e).__name__}: {first_line(e)}")
        return float("nan")
    say(fmt(group, shape, f"[{name}]", ms, nbytes))
    return ms


def run(group, shape, name, fn, check, nbytes, bases, edit):
    """Check fn once, time it, print one line; remember the fastest per shape; return its ms (None if it was not
    timed). bases: {label: ms}."""
    if time.time() - T0 > BUDGET_S:
        say(f"{group:8s} {shape:20s} {name:56s} SKIPPED (past {BUDGET_S} s)")
        return
    try:
        problem = check(fn())
        if problem:
            say(f"{group:8s} {shape:20s} {name:56s} FAIL {problem}")
            return
        ms = bench(fn)
        ratios = "  ".join(f"x{b / ms:.2f} vs {label}" for label, b in bases.items())
        say(fmt(group, shape, name, ms, nbytes) + "  " + ratios)
        key = (group, shape)
        if edit and (key not in BEST or ms < BEST[key][0]):
            BEST[key] = (ms, name, edit)
        return ms
    except Exception as e:  # one failure never loses the others
        say(f"{group:8s} {shape:20s} {name:56s} ERROR {type(e).__name__}: {first_line(e)}")


def measure_copy():
    n = 4096 if CPU else 2**28
    src = torch.randint(0, 9, (n,), device=DEV, dtype=torch.int32)
    dst = torch.empty_like(src)
    ms = bench(lambda: dst.copy_(src))
    COPY["GB/s"] = 2 * n * 4 / ms / 1e6
    say(f"copy     {'2^28 int32' if not CPU else n:<20} {'[dst.copy_(src)]':56s} {ms:9.4f} ms {COPY['GB/s']:8.1f} GB/s "
        f"(the '% copy' below is of this)")  # fmt: skip


class Settings:
    """Sets module-level switches of the lesson for one call, and puts them back."""

    def __init__(self, **values):
        self.values = values

    def __enter__(self):
        self.old = {k: getattr(L, k) for k in self.values}
        for k, v in self.values.items():
            setattr(L, k, v)

    def __exit__(self, *exc):
        for k, v in self.old.items():
            setattr(L, k, v)


# -- compaction -------------------------------------------------------------------------------------------------

LATE, DENSE, EARLY = "masked-late", "dense-early", "masked-early"


def compact_call(x, keep, cand):
    method, B, w = cand[:3]
    if method == "lookback-local":
        per_thread, loads, ticket, maxnreg, prefetch = cand[3:]
        variant = {"per_thread": per_thread, "loads": loads, "ticket": ticket, "maxnreg": maxnreg, "prefetch": prefetch}
        with Settings(COMPACT_LOCAL=variant):
            return L.compact(x, keep, BLOCK_SIZE=B, method=method, num_warps=w)
    with Settings(COMPACT_LOADS=cand[3]):
        return L.compact(x, keep, BLOCK_SIZE=B, method=method, num_warps=w)


def compact_label(cand):
    method, B, w = cand[:3]
    if method == "lookback-local":
        per_thread, loads, ticket, maxnreg, prefetch = cand[3:]
        order = ("ticket" if ticket else "pid") + (" L2" if prefetch else "")
        return f"lookback-local B={B} w={w} p{per_thread} {loads} r={maxnreg or '-'} {order}"
    if method == "lookback":
        return f"lookback B={B} w={w} {cand[3]} (compact_lookback_kernel)"
    return f"reduce-then-scan B={B} w={w} {'dense' if cand[3] == DENSE else 'masked'}"


def compact_edit(cand):
    method, B, w = cand[:3]
    edit = f'COMPACT_METHOD = "{method}"; COMPACT_SCHEDULES["{method}"] = ({B}, {w})'
    if method == "lookback-local":
        per_thread, loads, ticket, maxnreg, prefetch = cand[3:]
        return edit + (f'; COMPACT_LOCAL = {{"per_thread": {per_thread}, "loads": "{loads}", "ticket": {ticket}, '
                       f'"maxnreg": {maxnreg}, "prefetch": {prefetch}}}')  # fmt: skip
    return edit + f'; COMPACT_LOADS = "{cand[3]}"'


def compact_candidates():
    """(method, BLOCK_SIZE, num_warps, COMPACT_LOADS) or, for lookback-local, (method, BLOCK_SIZE, num_warps,
    per_thread, loads, ticket, maxnreg, prefetch). The comments: registers a thread (ptxas, offline) and the
    programs an SM they allow."""
    if CPU:
        return [("reduce-then-scan", 64, 2, DENSE), ("lookback", 64, 2, LATE),
                ("lookback-local", 64, 2, 1, LATE, True, None, False), ("lookback-local", 64, 2, 4, DENSE, False, 40, True)]  # fmt: skip
    return [
        ("reduce-then-scan", 2048, 8, DENSE),  # the default (58 % in l10b)
        ("lookback", 4096, 4, LATE),  # compact_lookback_kernel as make bench times it (47 %)
        ("lookback-local", 2048, 4, 1, LATE, True, None, False),  # 48 registers: 10 programs of 2048 an SM
        ("lookback-local", 2048, 4, 1, LATE, True, None, True),  # the same, each block's values prefetched into L2
        ("lookback-local", 2048, 4, 1, LATE, True, 40, False),  # 12 of 2048
        ("lookback-local", 2048, 4, 1, LATE, True, 40, True),
        ("lookback-local", 1024, 4, 1, LATE, True, None, False),  # 38: 13 of 1024
        ("lookback-local", 1024, 4, 1, LATE, True, 32, True),  # 16 of 1024
        ("lookback-local", 2048, 8, 1, LATE, True, None, True),
        ("lookback-local", 4096, 8, 1, LATE, True, None, False),  # 61: 4 of 4096
        ("lookback-local", 4096, 8, 1, LATE, True, 48, True),  # 5 of 4096
        ("lookback-local", 4096, 4, 1, LATE, True, None, True),  # 110: 4 of 4096, 32 elements a thread
        ("lookback-local", 4096, 4, 1, LATE, True, 80, True),  # 6 of 4096
        ("lookback-local", 2048, 4, 1, DENSE, True, None, False),  # 60: the values' trip overlaps the look-back
        ("lookback-local", 4096, 8, 1, DENSE, True, None, False),
        ("lookback-local", 2048, 4, 1, EARLY, True, None, False),
        ("lookback-local", 2048, 4, 1, LATE, False, None, True),  # program-id order: no ticket round trip first
        ("lookback-local", 2048, 4, 1, LATE, False, 40, True),
        ("lookback-local", 2048, 4, 4, LATE, True, None, True),  # 16-byte loads, rearranged for the scatter
        ("lookback-local", 2048, 4, 4, DENSE, True, None, False),
    ]


def compact_sweep():
    n = 5000 if CPU else 2**28
    cands = compact_candidates()
    # each candidate first at an odd size of many blocks (the look-back's waits), exactly
    many = 3001 if CPU else 2**22 + 3
    xs = torch.randint(-3, 4, (many,), device=DEV, dtype=torch.int32).float()
    ks = xs > 0
    safe = []
    for cand in cands:
        try:
            ok = torch.equal(compact_call(xs, ks, cand), xs[ks])
            say(f"compact  n={many:<18d} {compact_label(cand):56s} {'ok' if ok else 'FAIL'}")
            if ok:
                safe.append(cand)
        except Exception as e:
            say(f"compact  n={many:<18d} {compact_label(cand):56s} ERROR {type(e).__name__}: {first_line(e)}")
    del xs, ks
    x = torch.randint(0, 9, (n,), device=DEV).float()
    shape_n = f"2^{round(math.log2(n))}" if not CPU else f"{n}"
    for density in (0.5, 0.1):
        keep = torch.rand(n, device=DEV) < density
        ref = x[keep]
        shape = f"{shape_n} fp32 {density:.0%} kept"
        nbytes = L.compact_bytes(n, ref.numel(), 4)
        base = baseline("compact", shape, "x[keep]", lambda: x[keep], nbytes)
        bases = {"x[keep]": base}
        for cand in safe:
            run("compact", shape, compact_label(cand), lambda: compact_call(x, keep, cand),
                lambda got: None if torch.equal(got, ref) else "differs from x[keep]", nbytes, bases,
                compact_edit(cand) if density == 0.5 else None)  # fmt: skip
        del keep, ref


# -- the query at 16 keys ----------------------------------------------------------------------------------------


def query_table(n, num_keys, seed):
    g = torch.Generator(device=DEV).manual_seed(seed)
    table = {
        "key": torch.randint(0, num_keys, (n,), device=DEV, generator=g, dtype=torch.int32),
        "value": torch.randint(-400, 400, (n,), device=DEV, generator=g).float() / 4,
        "x": torch.rand(n, device=DEV, generator=g),
    }
    table["value"][::7] = float("nan")
    return table


def finish_no_wait(table, num_keys):
    """The query's GPU work with the finish kernel, without the wait: the group-by, then query_finish_kernel."""
    sums, counts, rows = L._groupby_partials(table, 0.5, num_keys)
    keys = torch.empty(num_keys, dtype=table["key"].dtype, device=DEV)
    out_sums, mean = torch.empty((2, num_keys), dtype=torch.float64, device=DEV)
    out_counts = torch.empty(num_keys + 2, dtype=torch.int64, device=DEV)
    L.query_finish_kernel[(1,)](sums, counts, rows, keys, out_sums, out_counts, mean, out_counts[num_keys:], num_keys,
                                BLOCK_SIZE=16)  # fmt: skip
    return keys, out_sums, out_counts


def query_16_keys():
    num_keys = 16
    n = 3000 if CPU else 10**8
    table = query_table(n, num_keys, 16)
    ref_sums, ref_counts, ref_rows = L.groupby_dense_ref(table["key"], table["value"], table["x"], 0.5, num_keys)
    present = ref_rows > 0
    shape = f"{n:.0e} rows 16 keys"
    nbytes = L.query_bytes(n)

    def check_dense(got):
        sums, counts, rows = got
        same = torch.equal(torch.nan_to_num(sums, 7e300), torch.nan_to_num(ref_sums, 7e300))
        ok = same and torch.equal(counts, ref_counts) and torch.equal(rows[:num_keys], ref_rows)
        return None if ok else "the dense arrays differ from groupby_dense_ref"

    def check_result(got):
        ok = (torch.equal(got["key"].long(), torch.nonzero(present).flatten())
              and torch.equal(got["sum"], ref_sums[present]) and torch.equal(got["count"], ref_counts[present]))  # fmt: skip
        return None if ok else "the query's result differs from the dense reference"

    def check_no_wait(got):
        keys, sums, counts = got
        k = int(present.sum())
        ok = torch.equal(keys[:k].long(), torch.nonzero(present).flatten()) and torch.equal(sums[:k], ref_sums[present])
        return None if ok and torch.equal(counts[:k], ref_counts[present]) else "differs from the dense reference"

    def ahead(steps):
        return Settings(PARTIALS_VARIANT={**L.PARTIALS_VARIANT, "l2_ahead": steps})

    B, U, P, w = L.GROUPBY_SCHEDULES["partials"]
    base = run("groupby", shape, "groupby_partials kernel alone (no wait), as set",
               lambda: L._groupby_partials(table, 0.5, num_keys), check_dense, nbytes, {},
               f'PARTIALS_VARIANT["l2_ahead"] = {L.PARTIALS_VARIANT["l2_ahead"]} (as set)')  # fmt: skip
    bases = {"kernel alone": base} if base else {}
    for steps, programs in ((1, P), (2, P), (4, P), (2, P - 1), (2, P + 1)) if not CPU else ((2, P),):
        edit = f'PARTIALS_VARIANT["l2_ahead"] = {steps}; GROUPBY_SCHEDULES["partials"] = ({B}, {U}, {programs}, {w})'
        with ahead(steps):
            run("groupby", shape, f"groupby_partials kernel alone, l2_ahead={steps} P={programs}",
                lambda: L._groupby_partials(table, 0.5, num_keys, PROGRAMS_PER_SM=programs), check_dense, nbytes,
                bases, edit)  # fmt: skip
    pandas_ok = True  # the finish kernel is chosen only if the lesson's own check passes with it, every plan
    with Settings(QUERY_FINISH="kernel"):
        try:
            for method in ("atomic", "partials", "packed", "sorted"):
                L.check_query(lambda t, th, k, method=method: L.query(t, th, k, method=method), quiet=True)
            say(f"query    {'check_query (pandas)':20s} {'finish=kernel, every plan':56s} ok")
        except Exception as e:
            pandas_ok = False
            say(f"query    {'check_query (pandas)':20s} {'finish=kernel, every plan':56s} FAIL {first_line(e)}")
    for finish, steps in (("torch", 0), ("kernel", 0), ("kernel", 2), ("kernel", 4)):
        edit = f'QUERY_FINISH = "{finish}"; PARTIALS_VARIANT["l2_ahead"] = {steps}'
        with Settings(QUERY_FINISH=finish), ahead(steps):
            run("query", shape, f"query() finish={finish} l2_ahead={steps}", lambda: L.query(table, 0.5, num_keys),
                check_result, nbytes, bases, edit if finish == "torch" or pandas_ok else None)  # fmt: skip
    run("query", shape, "groupby + query_finish_kernel, no wait", lambda: finish_no_wait(table, num_keys),
        check_no_wait, nbytes, bases, None)  # fmt: skip
    host_us = host_time(lambda: L._groupby_partials(table, 0.5, num_keys))
    say(f"host     {shape:20s} {'_groupby_partials: Python + 3 launches, no wait':56s} {host_us:9.1f} us a call "
        f"(a timed query waits for it after the L2 flush, which takes about {flush_us():.0f} us)")  # fmt: skip


def host_time(fn, calls=200):
    """The host's time per call of fn, the GPU left to queue the work: what a launch costs in Python."""
    fn()
    if not CPU:
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls if not CPU else 2):
        fn()
    elapsed = time.perf_counter() - start
    if not CPU:
        torch.cuda.synchronize()
    return elapsed / (calls if not CPU else 2) * 1e6


def flush_us():
    """How long do_bench's L2 flush (zeroing 256 MB) takes on the GPU."""
    if CPU:
        return float("nan")
    cache = torch.empty(256 * 2**20 // 4, dtype=torch.int32, device=DEV)
    return bench(lambda: cache.zero_()) * 1e3


measure_copy()
for part in (query_16_keys, compact_sweep):  # the shorter part first: the budget never skips it
    try:
        part()
    except Exception as e:
        say(f"{part.__name__} ERROR {type(e).__name__}: {first_line(e)}")
    if not CPU:
        torch.cuda.empty_cache()
    say(f"-- {part.__name__} done at {time.time() - T0:.0f} s")

say("\nbest per shape (fastest checked candidate, its edit):")
for (group, shape), (ms, name, edit) in BEST.items():
    say(f"  {group:8s} {shape:20s} {ms:9.4f} ms  {name:56s} -> {edit}")
say(f"total {time.time() - T0:.0f} s (triton {triton.__version__}, torch {torch.__version__}, {env.gpu_name or 'CPU'})")
if os.environ.get("OUT"):
    with open(os.path.join(os.environ["OUT"], "sweep_l10c.txt"), "w") as f:
        f.write("\n".join(LINES) + "\n")
