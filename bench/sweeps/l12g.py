"""Lesson 12 sweep g (issue 15): the int4 GEMV (M = 1) towards the HBM roofline, and the int4 matmul at M = 16
against bf16 cuBLAS. Run from the repo root: `PYTHONPATH=$PWD python3 bench/sweeps/l12g.py` (`--cpu`: tiny shapes
under the interpreter, a smoke test of the script).

Candidates, all through `w4a16_fast(x, w, schedule=...)`, next to bf16 cuBLAS `x @ w.T` in the same process:
- M = 1: `w4a16_stream_kernel` ("stream": every thread holds the same 16 bytes of all BLOCK_N rows, sums kept per
  word, nothing reduced across threads inside the loop) at a few (BLOCK_N, BLOCK_K, warps) and splits, against the
  previous table's kernels ("gemv" (16, 256), "slab" (32, 512, split 4));
- M = 16: `w4a16_scaled_tile_kernel` ("scaled_swap" / "scaled": several groups a step, (q - z) * s rounded once to
  x's dtype in the tile, one dot a step) at a few tiles and splits, against the previous table's "tile_swap" /
  "tile" (one group a step, one dot a group);
- the four projection shapes of bench/lesson12.py (1B 2048->8192, 8192->2048; 8B 4096->14336, 14336->4096), int4
  groups of 128, bf16; groups of 32 at the 8B up projection (M = 1 and 16).

Timing as bench/sweeps/l12.py: each candidate is captured in one CUDA graph calling it R times on R copies of the
weights (R x the bytes > 150 MB, so every call reads HBM, not L2); the replay's time / R is one call. cuBLAS is timed
the same way. After each shape, one line times cuBLAS, today's default and the shape's best as bench/lesson12.py does
(`bench.common.graphed`: one call a replay, L2 flushed, the graph's launch included): the figures issue 15 is about.
Every candidate is first checked against the fp32 PyTorch spec (x @ dequantize(w).T); a FAIL line is
never chosen. One line a candidate: shape, candidate, ms, GB/s (`w4a16_bytes`: packed codes + scales + zero points +
x + y), % of the measured copy bandwidth (the roof of issue 15), x cuBLAS (> 1: faster). "default" is what
`w4a16_fast` picks today (FAST_SCHEDULES, else the heuristic).

The edits the summary prints (solutions/12_quantization.ipynb, the cell with FAST_SCHEDULES; then
`python -m utils.notebooks`):
  - each indented "(4, M, N, K): FastSchedule(...)," line replaces the FAST_SCHEDULES entry with that key;
  - "STREAM_TILE = ..." and "GEMV_KERNEL[4] = ..." (the M = 1 heuristic: the stream tile with the best geometric
    mean over the four g128 shapes, and whether it beats "gemv" there);
  - "TILE_KERNEL = ...; SCALED_BLOCK_K = ..." (the M = 16 heuristic, the same way).
Past 120 s the remaining shapes and candidates are skipped, each shape said on one line.
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

from lessons import l12_quantization as L  # noqa: E402

DEV = env.device
DT = torch.float16 if CPU else torch.bfloat16
SM = env.sm_count or 132
T0 = time.time()
BUDGET = 120.0  # seconds after the imports; the rest of the shapes are skipped past it
LINES = []
FS = L.FastSchedule

if CPU:  # (label, K, N, M, group size)
    SHAPES = [("tiny up", 256, 48, 1, 32), ("tiny down", 300, 24, 1, 128), ("tiny down", 300, 24, 5, 128)]
else:
    SHAPES = [(label, K, N, M, 128) for M in (1, 16) for label, K, N in (
        ("1B up 2048->8192", 2048, 8192), ("1B down 8192->2048", 8192, 2048),
        ("8B up 4096->14336", 4096, 14336), ("8B down 14336->4096", 14336, 4096))]  # fmt: skip
    SHAPES += [("8B up 4096->14336", 4096, 14336, M, 32) for M in (1, 16)]  # last: the first skipped if time is short

# M = 1: the stream kernel's (BLOCK_N, BLOCK_K, num_warps, num_stages); BLOCK_K = 1024 num_warps keeps a program's
# rows in-thread; num_stages 2: the next step's words, scales and zero points loaded ahead, 3: its x too
# (the last two: more steps a program)
STREAM = [(8, 2048, 2, 3), (8, 2048, 2, 2), (4, 2048, 2, 3), (8, 1024, 2, 3), (16, 1024, 4, 3)]
# M = 16: the scaled tile's (kernel, BLOCK_N, BLOCK_K, num_warps, num_stages), at splits 1, the heuristic's and twice
# it (a runtime argument: no new compile); the plain "scaled", x @ W.T, at the heuristic's split only
SCALED = [("scaled_swap", 64, 256, 4, 4), ("scaled_swap", 128, 256, 8, 4), ("scaled_swap", 64, 256, 4, 3),
          ("scaled", 64, 256, 4, 4)]  # fmt: skip
FEW = 2  # at groups of 32: the first FEW of each list only (each new group size is a new compile of each kernel)
# the previous FAST_SCHEDULES (before this sweep) at the g128 shapes: (M, N, K) -> its entry; g32: its heuristic
OLD = {
    (1, 8192, 2048): FS("gemv", 1, 16, 256, 1, 4, 2),
    (1, 2048, 8192): FS("slab", 1, 32, 512, 4, 4, 2),
    (1, 14336, 4096): FS("gemv", 1, 16, 256, 1, 4, 2),
    (1, 4096, 14336): FS("gemv", 1, 16, 256, 1, 4, 2),
    (16, 8192, 2048): FS("tile_swap", 16, 64, 128, 1, 4, 4),
    (16, 2048, 8192): FS("tile_swap", 16, 64, 128, 8, 4, 4),
    (16, 14336, 4096): FS("tile_swap", 16, 64, 128, 1, 4, 4),
    (16, 4096, 14336): FS("tile", 16, 64, 128, 4, 4, 3),
}
OLD_G32 = {1: FS("gemv", 1, 16, 256, 1, 4, 2), 16: FS("tile_swap", 16, 64, 32, 1, 4, 4)}
if CPU:
    STREAM = [(8, 128, 2, 2), (4, 256, 4, 3)]
    SCALED = [("scaled_swap", 16, 128, 4, 2), ("scaled", 32, 128, 4, 2)]
    OLD = {(1, 24, 300): FS("gemv", 1, 16, 128, 1, 4, 2), (5, 24, 300): FS("tile_swap", 16, 16, 128, 1, 4, 2)}
    OLD_G32 = {1: FS("gemv", 1, 16, 128, 1, 4, 2)}


def say(line):
    print(line, flush=True)
    LINES.append(line)


def budget_left():
    return CPU or time.time() - T0 < BUDGET


def copy_gbs():
    if CPU:
        return 3000.0
    src = torch.empty(1 << 28, dtype=torch.float32, device=DEV)  # 1 GiB
    dst = torch.empty_like(src)
    dst.copy_(src)
    torch.cuda.synchronize()
    ms = triton.testing.do_bench(lambda: dst.copy_(src), warmup=10, rep=100)
    del src, dst
    return 2 * (1 << 30) / ms / 1e6


def graph_ms(calls):
    """One CUDA graph calling each of ``calls`` once (after a warm-up on a side stream); ms a call."""
    if CPU:
        for c in calls:
            c()
        return float("nan")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for c in calls:
            c()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for c in calls:
            c()
    ms = triton.testing.do_bench(graph.replay, warmup=5, rep=25)
    del graph
    return ms / len(calls)


def copies_for(nbytes):
    return 1 if CPU else max(2, min(24, math.ceil(150e6 / nbytes)))


CEIL = 3000.0
RESULTS = {}  # (label, M, G) -> [(ms, name, schedule)]
BASE = {}  # (label, M, G) -> cuBLAS ms


def run(key, name, sched, w4s, x, ref, nbytes):
    label, M, G = key
    head = f"{label:20s} M={M:<2d} g{G:<3d} {name:44s}"
    try:
        y = L.w4a16_fast(x, w4s[0], schedule=sched)
        err = (y.float() - ref).abs().max().item()
        tol = 2e-2 * ref.abs().max().item() + 1e-3
        if not math.isfinite(err) or err > tol:
            say(f"{head} FAIL max error {err:.3g} (tolerance {tol:.3g})")
            return
        ms = graph_ms([lambda w=w: L.w4a16_fast(x, w, schedule=sched) for w in w4s])
        gbs = nbytes / ms / 1e6
        say(f"{head} {ms:8.4f} ms {gbs:6.0f} GB/s {100 * gbs / CEIL:5.1f}% of roof x{BASE[key] / ms:5.2f} cuBLAS")
        RESULTS.setdefault(key, []).append((ms, name, sched))
    except Exception as e:  # noqa: BLE001 - one failure never loses the others
        first = str(e).strip().splitlines()[0][:150] if str(e).strip() else ""
        say(f"{head} ERROR {type(e).__name__}: {first}")


def candidates(M, N, K, G):
    """(name, FastSchedule) for one shape: today's default first, then the previous table's, then the new ones."""
    default = L.fast_schedule(4, M, N, K, G)
    out = [(f"default {tuple(default)}", default)]
    old = OLD.get((M, N, K)) if G == 128 else OLD_G32.get(M)
    if old is not None:
        out.append((f"old table {old.kernel} {tuple(old)[1:]}", old))
    if M == 1:
        for BN, BK, warps, stages in STREAM if G == 128 else STREAM[:FEW]:
            BK = max(G, min(BK, triton.next_power_of_2(K)))
            split = L.gemv_split(N, K, BN, BK, SM)
            for sp in sorted({1, split, 2 * split}):  # SPLIT_K is a runtime argument: no new compile
                s = FS("stream", 1, BN, BK, sp, warps, stages)
                out.append((f"stream {tuple(s)[1:]}", s))
    else:
        for kind, BN, BK, warps, stages in SCALED if G == 128 else SCALED[:FEW]:
            BK = max(G, min(BK, triton.next_power_of_2(K)))
            tiles, steps = triton.cdiv(N, BN), triton.cdiv(K, BK)
            sp = 1
            while tiles * sp * 2 <= 4 * SM and steps >= sp * 2 * 4:  # about 4 programs an SM, >= 4 steps each
                sp *= 2
            for split in sorted({1, sp, 2 * sp}) if kind == "scaled_swap" else [sp]:
                s = FS(kind, 16, BN, BK, split, warps, stages)
                out.append((f"{kind} {tuple(s)[1:]}", s))
    seen, unique = set(), []
    for name, s in out:
        if s not in seen:
            seen.add(s)
            unique.append((name, s))
    return unique


def shape(label, K, N, M, G):
    key = (label, M, G)
    if not budget_left():
        say(f"{label} M={M} g{G}: skipped, the sweep's time is spent")
        return
    w = torch.randn(N, K, device=DEV, dtype=DT) / math.sqrt(K)
    w4 = L.quantize_int4_ref(w, G)
    n4 = copies_for(w4.nbytes)
    w4s = [w4] + [L.Int4Weight(w4.packed.clone(), w4.scale.clone(), w4.zero.clone(), w4.K, G) for _ in range(n4 - 1)]
    ws = [w] + [w.clone() for _ in range(copies_for(w.nbytes) - 1)]
    x = torch.randn(M, K, device=DEV, dtype=DT)
    ref = x.float() @ L.dequantize(w4, torch.float32).T
    BASE[key] = graph_ms([lambda w=w: x @ w.T for w in ws])
    say(f"{label:20s} M={M:<2d} g{G:<3d} {'bf16 cuBLAS x @ w.T (CUDA graph)':44s} {BASE[key]:8.4f} ms "
        f"{L.bf16_linear_bytes(M, N, K) / BASE[key] / 1e6:6.0f} GB/s")  # fmt: skip
    nbytes = L.w4a16_bytes(M, N, K, G)
    for name, s in candidates(M, N, K, G):
        if budget_left():
            run(key, name, s, w4s, x, ref, nbytes)
    if not CPU and RESULTS.get(key):  # -- as make bench times it, for the figures
        try:
            bench_style(key, w, w4, x, nbytes)
        except Exception as e:  # noqa: BLE001
            say(f"  as make bench times it: ERROR {type(e).__name__}: {str(e).strip().splitlines()[0][:150]}")
    del ws, w4s
    if not CPU:
        torch.cuda.empty_cache()
    say(f"  ({time.time() - T0:.0f} s)")


def bench_style(key, w, w4, x, nbytes):
    """cuBLAS, today's default and this shape's best, each as bench/lesson12.py's "(CUDA graph)" rows time them: one
    call a replay of bench.common.graphed's graph, L2 flushed before each (do_bench), launch included."""
    from bench.common import graphed

    best = min(RESULTS[key], key=lambda r: r[0])[2]
    one = lambda fn: triton.testing.do_bench(graphed(fn), warmup=5, rep=25)  # noqa: E731
    base = one(lambda: x @ w.T)
    default = one(lambda: L.w4a16_fast(x, w4))
    mine = one(lambda: L.w4a16_fast(x, w4, schedule=best))
    pct = lambda ms: 100 * nbytes / ms / 1e6 / CEIL  # noqa: E731
    say(f"  as make bench times it (one call a graph replay, L2 flushed): cuBLAS {base:.4f} ms; default "
        f"{default:.4f} ms {pct(default):4.1f}% of roof x{base / default:4.2f}; best {mine:.4f} ms {pct(mine):4.1f}% "
        f"of roof x{base / mine:4.2f}")  # fmt: skip


def geomean_pick(M, kinds, field):
    """{config: geometric mean over the g128 shapes at this M of time / the shape's best}, for the candidates of
    ``kinds``, each config at its best split; only configs timed at every shape."""
    score = {}
    keys = [k for k in RESULTS if k[1] == M and k[2] == 128]
    for key in keys:
        best = min(r[0] for r in RESULTS[key])
        for ms, _name, s in RESULTS[key]:
            if s is not None and s.kernel in kinds:
                c = field(s)
                score.setdefault(c, {})
                score[c][key] = min(score[c].get(key, 1e9), ms / best)
    full = {c: v for c, v in score.items() if len(v) == len(keys) and keys}
    return {c: math.exp(sum(map(math.log, v.values())) / len(v)) for c, v in full.items()}


def summary():
    say("")
    say("== best per shape (issue 15: M = 1 >= 80% of roof, M = 16 >= 2.5x cuBLAS); FAST_SCHEDULES lines to put in "
        "(solutions/12_quantization.ipynb, each in place of the entry with its key) ==")  # fmt: skip
    for (label, M, G), rows in RESULTS.items():
        ms, name, s = min(rows, key=lambda r: r[0] if r[0] == r[0] else 0)
        default = next((r for r in rows if r[1].startswith("default")), None)
        K, N = next((k, n) for lab, k, n, m, g in SHAPES if lab == label)
        pct = 100 * L.w4a16_bytes(M, N, K, G) / ms / 1e6 / CEIL if ms == ms else float("nan")
        gain = f", x{default[0] / ms:.2f} the default" if default and ms == ms else ""
        say(f"{label:20s} M={M:<2d} g{G:<3d} {ms:.4f} ms  {pct:5.1f}% of roof  x{BASE[(label, M, G)] / ms:4.2f} "
            f"cuBLAS  {name}{gain}")  # fmt: skip
        if s is not None and G == 128:
            say(f"    (4, {M}, {N}, {K}): FastSchedule{tuple(s)!r},")
    m1 = geomean_pick(1, ("stream",), lambda s: (s.BLOCK_N, s.BLOCK_K, s.num_warps, s.num_stages))
    old = geomean_pick(1, ("gemv", "slab"), lambda s: "old")
    if m1:
        c = min(m1, key=m1.get)
        gemv = old.get("old", float("inf"))
        say(f"M=1 heuristic: STREAM_TILE = {c!r}  (geometric mean {m1[c]:.2f}x the best per shape; the old table's "
            f"gemv/slab {gemv:.2f}x) -> GEMV_KERNEL[4] = {'stream' if m1[c] <= gemv else 'gemv'!r}")  # fmt: skip
    m16 = geomean_pick(16, ("scaled", "scaled_swap"), lambda s: (s.kernel, s.BLOCK_K))
    if m16:
        (kind, BK) = min(m16, key=m16.get)
        say(f"M=16 heuristic: TILE_KERNEL = {kind!r}; SCALED_BLOCK_K = {BK}  (geometric mean {m16[(kind, BK)]:.2f}x "
            "the best per shape; where the old table's tile won, keep its FAST_SCHEDULES lines above)")  # fmt: skip
    say(f"total {time.time() - T0:.0f} s")


if __name__ == "__main__":
    CEIL = copy_gbs()
    say(f"lesson 12 sweep g on {env.gpu_name if env.is_gpu else 'the CPU (interpreter)'}, torch {torch.__version__}, "
        f"triton {triton.__version__}, {SM} SMs; copy {CEIL:.0f} GB/s (1 GiB copy_, do_bench) = the roof")  # fmt: skip
    for args in SHAPES:
        try:
            shape(*args)
        except Exception as e:  # noqa: BLE001
            say(f"{args[0]} M={args[3]}: stopped: {type(e).__name__}: {e}")
    summary()
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "sweep_l12g.txt"), "w") as f:
            f.write("\n".join(LINES) + "\n")
