"""Lesson 10 sweep (issue 17: segmented sort of rows <= 4096 at >= 1.0x torch.sort). Run from the repo root:
`PYTHONPATH=$PWD python3 bench/sweeps/l10s.py`; `--cpu` runs tiny shapes under the interpreter (a smoke test of
the script, not a measurement).

What it compares, at make bench's shapes (2**24 fp32 in all: 4096x4096, 16384x1024, 65536x256), each next to
torch.sort(x, dim=-1) (values + int64 indices) timed here, in one process, every call captured in a CUDA graph
(bench.common.graphed) and timed by triton.testing.do_bench on the replay (the host's launch cost is gone on both
sides):
  - bitonic_sort_tiled (new): a row as a (BLOCK/32, 32) tile, the steps with j < 32 as warp shuffles, ROWS rows a
    program; the ROWS and warps of BITONIC_TILED_SCHEDULES' line for that row length, and their neighbours;
  - for comparison (no edit): exercise 1's bitonic_sort_kernel (every step through shared memory; at 4096 launched
    directly, past bitonic_sort's limit of 1024), sort_rows as the lesson sets it (tl.sort on packed int64 keys,
    values + indices: what make bench times), and a values-only tl.sort kernel written here.
Every candidate is checked first against torch.sort's values, exactly (FAIL lines are never chosen); sort_rows
also against its indices (stable sort). GB/s credits 16 bytes an element for every line (read x, write values,
write int64 indices), as bench/lesson10.py does, though the bitonic kernels write no indices.

Which line maps to which edit in solutions/10_sort_scan_data.ipynb (then `python -m utils.notebooks`):
  - "tiled ROWS=r w=w" at NxN... (rows of N)  -> BITONIC_TILED_SCHEDULES[N] = (r, w)
    (the 256 line's winner may also set the 64 line to (4 * r, w): same elements a program; the 1024 line's winner
    the 512 line to (2 * r, w) likewise, and the 4096 line's the 2048 line to (r, w // 2))
If a tiled line beats torch.sort at 4096x4096, issue 17's rows of 4096 are met by bitonic_sort_tiled; the lead may
then point bench/lesson10.py's prose at it. The "best per shape" summary at the end prints the edit for each
shape's fastest tiled line, and the fastest line of all.
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

from lessons import l10_sort_scan_data as L  # noqa: E402

DEV = env.device
T0 = time.time()
LINES = []
BEST = {}  # shape -> (ms, candidate, edit): the tiled lines (they have an edit)
FASTEST = {}  # shape -> (ms, candidate): every line
BUDGET_S = 135  # the lead's limit is 150 s: later candidates are skipped (and say so) past this


def say(line):
    print(line, flush=True)
    LINES.append(line)


def first_line(e):
    return (str(e).strip().splitlines() or [type(e).__name__])[0][:160]


def bench(fn):
    if CPU:
        start = time.perf_counter()
        fn()
        return (time.perf_counter() - start) * 1e3
    from bench.common import graphed

    return triton.testing.do_bench(graphed(fn), warmup=10, rep=50)


def fmt(shape, name, ms, nbytes):
    return f"{shape:12s} {name:36s} {ms:9.4f} ms {nbytes / ms / 1e6:8.1f} GB/s"


@triton.jit
def _tl_sort_values_kernel(x_ptr, out_ptr, N, stride, BLOCK_SIZE: tl.constexpr):
    """A values-only tl.sort of one row a program (for comparison: sort_rows sorts packed int64 keys)."""
    row = tl.program_id(0).to(tl.int64)
    idx = tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + row * stride + idx, mask=idx < N, other=float("inf"))
    tl.store(out_ptr + row * stride + idx, tl.sort(x), mask=idx < N)


def tl_sort_values(x, out, num_warps):
    M, N = x.shape
    B = triton.next_power_of_2(N)
    _tl_sort_values_kernel[(M,)](x, out, N, x.stride(0), BLOCK_SIZE=B, num_warps=num_warps)
    return out


def exercise_kernel(x, out, num_warps):
    """Exercise 1's bitonic_sort_kernel launched directly (bitonic_sort refuses rows past MAX_BITONIC)."""
    M, N = x.shape
    B = triton.next_power_of_2(N)
    L.bitonic_sort_kernel[(M,)](x, out, N, x.stride(0), out.stride(0), BLOCK_SIZE=B, LOG_BLOCK=B.bit_length() - 1,
                                num_warps=num_warps)  # fmt: skip
    return out


def run(shape, name, fn, check, nbytes, base_ms, edit=None):
    """Check fn once, time it, print one line; remember the fastest per shape."""
    if time.time() - T0 > BUDGET_S:
        say(f"{shape:12s} {name:36s} SKIPPED (past {BUDGET_S} s)")
        return
    try:
        problem = check(fn())
        if problem:
            say(f"{shape:12s} {name:36s} FAIL {problem}")
            return
        ms = bench(fn)
        say(fmt(shape, name, ms, nbytes) + f"  x{base_ms / ms:.2f} vs torch.sort")
        if edit and (shape not in BEST or ms < BEST[shape][0]):
            BEST[shape] = (ms, name, edit)
        if shape not in FASTEST or ms < FASTEST[shape][0]:
            FASTEST[shape] = (ms, name)
    except Exception as e:  # one failure never loses the others
        say(f"{shape:12s} {name:36s} ERROR {type(e).__name__}: {first_line(e)}")


# (N, [(ROWS, num_warps) of the tiled kernel], exercise kernel's warps, tl.sort values-only warps); 4096 first: the
# row length issue 17 misses
PLAN = [
    (4096, [(1, 4), (1, 8), (1, 16), (1, 32), (2, 16)], 16, 16),
    (1024, [(1, 2), (1, 4), (1, 8), (2, 4), (2, 8), (4, 8)], 4, 4),
    (256, [(1, 1), (2, 2), (4, 4), (8, 4), (8, 8), (16, 8)], 4, 2),
]


def sweep(N, tiled, exercise_warps, tl_sort_warps):
    M = (4 if N >= 1024 else 16) if CPU else 2**24 // N
    shape = f"{M}x{N}"
    x = torch.randn(M, N, device=DEV)
    nbytes = M * N * 16
    ref_v, ref_i = torch.sort(x, dim=-1, stable=True)
    out = torch.empty_like(x)

    def check_values(got):
        got = got[0] if isinstance(got, tuple) else got
        if not torch.equal(got, ref_v):
            return f"values differ from torch.sort at {int((got != ref_v).sum())} of {got.numel()} elements"
        return None

    def check_sort_rows(got):
        problem = check_values(got)
        if problem is None and not torch.equal(got[1], ref_i):
            problem = "indices differ from torch.sort(stable=True)"
        return problem

    try:
        base_ms = bench(lambda: torch.sort(x, dim=-1))
    except Exception as e:
        say(f"{shape:12s} {'[torch.sort]':36s} ERROR {type(e).__name__}: {first_line(e)}")
        return
    say(fmt(shape, "[torch.sort] (values + indices)", base_ms, nbytes))
    for rows, w in tiled:
        run(shape, f"tiled ROWS={rows} w={w}", lambda: L.bitonic_sort_tiled(x, out=out, ROWS=rows, num_warps=w),
            check_values, nbytes, base_ms, edit=f"BITONIC_TILED_SCHEDULES[{N}] = ({rows}, {w})")  # fmt: skip
    run(shape, "sort_rows as set (values + indices)", lambda: L.sort_rows(x), check_sort_rows, nbytes, base_ms)
    run(shape, f"exercise 1 kernel w={exercise_warps}", lambda: exercise_kernel(x, out, exercise_warps),
        check_values, nbytes, base_ms)  # fmt: skip
    if CPU:  # tl.sort's reductions run element by element under the interpreter
        say(f"{shape:12s} {'tl.sort values-only':36s} SKIPPED (--cpu)")
    else:
        run(shape, f"tl.sort values-only w={tl_sort_warps}", lambda: tl_sort_values(x, out, tl_sort_warps),
            check_values, nbytes, base_ms)  # fmt: skip


for plan in PLAN:
    try:
        sweep(*plan)
    except Exception as e:
        say(f"rows of {plan[0]} ERROR {type(e).__name__}: {first_line(e)}")
    if not CPU:
        torch.cuda.empty_cache()
    say(f"-- rows of {plan[0]} done at {time.time() - T0:.0f} s")

if time.time() - T0 < BUDGET_S:  # the lesson's own check at its GPU shapes (rows up to 4096), the table as set
    try:
        L.check_bitonic_sort(L.bitonic_sort_tiled, quiet=True, max_row=L.MAX_BITONIC_TILED)
        say(f"{'check':12s} {'check_bitonic_sort(bitonic_sort_tiled)':36s} ok")
    except Exception as e:
        say(f"{'check':12s} {'check_bitonic_sort(bitonic_sort_tiled)':36s} FAIL {first_line(e)}")

say("\nbest per shape (fastest checked tiled line -> its edit; then the fastest line of all):")
for shape, (ms, name, edit) in BEST.items():
    say(f"  {shape:12s} {ms:9.4f} ms  {name:36s} -> {edit}")
    if shape in FASTEST and FASTEST[shape][1] != name:
        say(f"  {shape:12s} {FASTEST[shape][0]:9.4f} ms  {FASTEST[shape][1]:36s} (fastest of all: no edit)")
say(f"total {time.time() - T0:.0f} s (triton {triton.__version__}, torch {torch.__version__}, {env.gpu_name or 'CPU'})")
if os.environ.get("OUT"):
    with open(os.path.join(os.environ["OUT"], "sweep_l10s.txt"), "w") as f:
        f.write("\n".join(LINES) + "\n")
