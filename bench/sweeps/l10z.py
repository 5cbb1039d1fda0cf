"""Lesson 10 sweep z, 2026-11-28 (issue 17): compaction with more elements a program.

Sweeps h and i found no schedule of reduce-then-scan past 57.7 % of a copy on the H200 (1024 flags a block, 4
warps), and at a tenth kept it takes as long as at half kept: the time goes to the blocks, not the bytes. Each
of its 262,144 programs loads 1024 flags and values, scans them (barriers), scatters, and ends; nothing overlaps
a block's loads with its own scan.

The prototype here gives each program a segment of CHUNKS chunks of CHUNK elements: the count pass counts a
segment (a loop, one number a segment), the counts are scanned as before (lesson 10's reduce-then-scan), and the
scatter walks its segment chunk by chunk with a running offset. Two ways to keep loads in flight during a chunk's
scan: Triton's pipeliner (the chunk loop as ``tl.range(..., num_stages=S)``: 16-byte ``cp.async`` S - 1 chunks
ahead) or the next chunk loaded by hand before the current one is scanned (PREFETCH).

Run on an H200 (results/h200-2026-11-28-s19/sweeps/l10z.txt, l10z-near.txt): 8 blocks of 1024 a program at 4
warps, no pipelining, 0.587 ms, 75.3 % of copy at half kept (62.3 % at a tenth), against 0.766 ms (57.7 %) for the
lesson's one block a program; pipelining and the hand prefetch slower everywhere. Lesson 10 took it as
COMPACT_CHUNKS = 8 (count_kernel and compact_kernel walk CHUNKS blocks).

Run from the repo root: ``PYTHONPATH=$PWD python3 bench/sweeps/l10z.py`` on a GPU (< 150 s), ``... --cpu`` under the
interpreter (tiny sizes, no timings: a check of the prototype against x[keep]).

``--host``: the third run, the lesson's launcher against the prototype (host's time a call, graphed).
``--near``: the second run's candidates, around the first run's winner (chunks of 512 to 2048, 2 to 16 of them a
segment, 2 to 8 warps, no pipelining).

Prints, for 2**28 fp32 at half and a tenth kept, beside a copy of 2**28 int32 (the '% copy', bytes =
compact_bytes), timed as make bench times a row (utils.timing): the lesson's compact_on_device as set, then each
candidate (count, scan, scatter: the same no-wait contract), each checked exactly against x[keep] first.
"""

import os
import sys
import time

CPU = "--cpu" in sys.argv
if CPU:
    os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

import utils  # noqa: E402  (sets the interpreter up before triton is imported)
from bench.sweeps.kit import Log, bench_ms, copy_gbs  # noqa: E402
from lessons import l10_sort_scan_data as L  # noqa: E402

env = utils.mode.current()
DEV = env.device
say = Log("l10z")
T0 = time.time()
BUDGET_S = 140


@triton.jit
def count_segments_kernel(keep_ptr, counts_ptr, n, CHUNK: tl.constexpr, CHUNKS: tl.constexpr):
    """counts[p] = the set flags of segment p (CHUNKS chunks of CHUNK)."""
    pid = tl.program_id(0)
    base = pid.to(tl.int64) * (CHUNK * CHUNKS)
    acc = tl.zeros((CHUNK,), tl.int32)
    for c in range(CHUNKS):
        offs = base + c * CHUNK + tl.arange(0, CHUNK)
        acc += tl.load(keep_ptr + offs, mask=offs < n, other=0).to(tl.int32)
    tl.store(counts_ptr + pid, tl.sum(acc, axis=0))


@triton.jit
def compact_segments_kernel(values_ptr, keep_ptr, seg_cumsum_ptr, out_ptr, n, n_out, CHUNK: tl.constexpr,
                            CHUNKS: tl.constexpr, STAGES: tl.constexpr, PREFETCH: tl.constexpr):  # fmt: skip
    """Segment p's kept values to out, chunk by chunk: destination = the kept before the segment
    (seg_cumsum[p - 1]) + the kept in its earlier chunks (a running count) + the kept before it in its chunk."""
    pid = tl.program_id(0)
    base = pid.to(tl.int64) * (CHUNK * CHUNKS)
    before = tl.load(seg_cumsum_ptr + pid - 1, mask=pid > 0, other=0).to(tl.int64)
    cols = tl.arange(0, CHUNK)
    if PREFETCH:
        offs = base + cols
        k = tl.load(keep_ptr + offs, mask=offs < n, other=0).to(tl.int32)
        v = tl.load(values_ptr + offs, mask=offs < n)
        for c in range(CHUNKS):
            offs_next = offs + CHUNK  # past the segment's end: the next segment's, loaded and unused
            k_next = tl.load(keep_ptr + offs_next, mask=(offs_next < n) & (c + 1 < CHUNKS), other=0).to(tl.int32)
            v_next = tl.load(values_ptr + offs_next, mask=(offs_next < n) & (c + 1 < CHUNKS))
            incl = tl.cumsum(k, axis=0)
            dest = before + (incl - k)
            tl.store(out_ptr + dest, v, mask=(k != 0) & (dest < n_out))
            before += tl.sum(k, axis=0)
            offs, k, v = offs_next, k_next, v_next
    else:
        for c in tl.range(0, CHUNKS, num_stages=STAGES):
            offs = base + c * CHUNK + cols
            k = tl.load(keep_ptr + offs, mask=offs < n, other=0).to(tl.int32)
            v = tl.load(values_ptr + offs, mask=offs < n)
            incl = tl.cumsum(k, axis=0)
            dest = before + (incl - k)
            tl.store(out_ptr + dest, v, mask=(k != 0) & (dest < n_out))
            before += tl.sum(k, axis=0)


def compact_segments(values, keep, out, CHUNK, CHUNKS, num_warps, STAGES=1, PREFETCH=False, count_warps=None):
    """(out, n_kept): the kept values first in out, n_kept a one-element tensor on the GPU; no wait."""
    n = values.numel()
    seg = CHUNK * CHUNKS
    n_seg = triton.cdiv(n, seg)
    counts = torch.empty(n_seg, dtype=torch.int32, device=values.device)
    count_segments_kernel[(n_seg,)](keep, counts, n, CHUNK=CHUNK, CHUNKS=CHUNKS, num_warps=count_warps or num_warps)
    seg_cumsum = L._reduce_then_scan(counts, torch.empty_like(counts), 1024, 4)
    compact_segments_kernel[(n_seg,)](values, keep, seg_cumsum, out, n, n, CHUNK=CHUNK, CHUNKS=CHUNKS, STAGES=STAGES,
                                      PREFETCH=PREFETCH, num_warps=num_warps)  # fmt: skip
    return out, seg_cumsum[-1:]


def host_and_graph():
    """--host: where the lesson's compact_on_device (8 blocks a program, and one) loses to the prototype: its
    host's time a call (wall clock of 200 calls in a row, no wait inside, then one), and the GPU's work alone
    (replayed from a CUDA graph), beside the prototype's both ways."""
    from bench.sweeps.kit import graphed

    gbs = copy_gbs(say)
    n = 2**28 if not CPU else 5003
    x = torch.randint(0, 9, (n,), device=DEV).float()
    out = torch.empty_like(x)
    keep = torch.rand(n, device=DEV) < 0.5
    ref = x[keep]
    nbytes = L.compact_bytes(n, ref.numel(), 4)
    calls = {
        "lesson compact_on_device CHUNKS=8": lambda: L.compact_on_device(x, keep, out=out, CHUNKS=8),
        "lesson compact_on_device CHUNKS=1": lambda: L.compact_on_device(x, keep, out=out, CHUNKS=1),
        "prototype CHUNK=1024 CHUNKS=8 w=4": lambda: compact_segments(x, keep, out, 1024, 8, 4),
    }
    for label, fn in calls.items():
        got, count = fn()
        k = int(count)
        ok = k == ref.numel() and torch.equal(got[:k], ref)
        if env.is_gpu:
            torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(200):
                fn()
            host_us = (time.perf_counter() - t) / 200 * 1e6
            torch.cuda.synchronize()
            wall_us = (time.perf_counter() - t) / 200 * 1e6
        else:
            host_us = wall_us = float("nan")
        ms = bench_ms(fn)
        gms = bench_ms(graphed(fn))
        say(
            f"   {label:36s} {'ok' if ok else 'FAIL'}  host {host_us:7.1f} us a call, wall {wall_us:7.1f} us; "
            f"timed {ms:.4f} ms {nbytes / ms / 1e6 / gbs * 100:5.1f}% copy; graphed {gms:.4f} ms "
            f"{nbytes / gms / 1e6 / gbs * 100:5.1f}% copy"
        )


def main():
    if "--host" in sys.argv:
        say(f"lesson 10 sweep z --host on {env.gpu_name if env.is_gpu else 'CPU (interpreter)'}")
        return host_and_graph()
    say(f"lesson 10 sweep z on {env.gpu_name if env.is_gpu else 'CPU (interpreter)'}, torch {torch.__version__}, "
        f"triton {triton.__version__}; COMPACT_SCHEDULES {L.COMPACT_SCHEDULES}")  # fmt: skip
    gbs = copy_gbs(say)
    n = 2**28 if not CPU else 5003
    x = torch.randint(0, 9, (n,), device=DEV).float()
    out = torch.empty_like(x)
    if CPU:
        candidates = [(c, k, w, s, p) for c, k, w, s, p in ((64, 4, 1, 1, False), (64, 4, 1, 2, False),
                                                            (128, 8, 2, 1, True), (32, 1, 1, 1, True))]  # fmt: skip
    elif "--near" in sys.argv:  # second run: around the first run's winner (1024, 8, 4 warps, no pipelining)
        candidates = [(c, k, w, 1, False) for c in (512, 1024, 2048) for k in (2, 4, 8, 16) for w in (2, 4, 8)
                      if 4 <= c // (32 * w) <= 16]  # fmt: skip
    else:
        candidates = [(c, k, w, s, p) for c in (1024, 2048, 4096) for k in (8, 32) for w in (4, 8)
                      for s, p in ((1, False), (3, False), (1, True)) if c // (32 * w) >= 4]  # fmt: skip
    results = {}
    for density in (0.5, 0.1):
        keep = torch.rand(n, device=DEV) < density
        ref = x[keep]
        nbytes = L.compact_bytes(n, ref.numel(), 4)

        def pct(ms, nbytes=nbytes):
            return f"{ms:9.4f} ms {nbytes / ms / 1e6 / gbs * 100:5.1f}% copy"

        say(f"\n== compaction, {n} fp32, {density:.0%} kept")
        say(f"   {'x[keep] (waits)':62s} {pct(bench_ms(lambda: x[keep]))}")
        ms = bench_ms(lambda: L.compact_on_device(x, keep, out=out))
        say(f"   {'lesson: compact_on_device as set':62s} {pct(ms)}")
        for CHUNK, CHUNKS, W, S, P in candidates:
            label = f"segments CHUNK={CHUNK} CHUNKS={CHUNKS} w={W} " + ("prefetch" if P else f"stages={S}")
            if time.time() - T0 > BUDGET_S:
                say(f"   {label:62s} SKIPPED (past {BUDGET_S} s)")
                continue
            out.fill_(float("nan"))
            try:
                got, count = compact_segments(x, keep, out, CHUNK, CHUNKS, W, S, P)
                k = int(count)
            except Exception as e:  # a candidate that does not compile says so and the sweep goes on
                say(f"   {label:62s} ERROR {type(e).__name__}: {str(e)[:80]}")
                continue
            if k != ref.numel() or not torch.equal(got[:k], ref):
                say(f"   {label:62s} FAIL")
                continue
            ms = bench_ms(lambda: compact_segments(x, keep, out, CHUNK, CHUNKS, W, S, P))
            results.setdefault((CHUNK, CHUNKS, W, S, P), []).append(ms)
            say(f"   {label:62s} {pct(ms)}")
        del keep, ref
    if results and not CPU:
        best = min(results, key=lambda c: results[c][0])
        say(f"\nfastest at half kept: {best} {results[best]}")
    say(f"done in {time.time() - T0:.0f} s")


if __name__ == "__main__":
    main()
