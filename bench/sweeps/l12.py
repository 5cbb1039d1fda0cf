"""Lesson 12 sweep, 2026-11-23: int4 / int8 weight-only GEMV (M = 1) and few-row matmul (M = 16) schedules, every
candidate timed INSIDE CUDA graphs (run from the repo root: `PYTHONPATH=$PWD python3 bench/sweeps/l12.py`; `--cpu` runs
tiny shapes under the interpreter as a smoke test; `--no-decode` skips the end-to-end part).

Why graphs: on the H100 box the host needs 50-80 us to launch a Triton kernel, longer than these kernels run, so
plain do_bench timings partly measured the host (yesterday's sweep did). Here each candidate is captured in one
CUDA graph that calls it R times on R copies of the weights (R x the bytes > 150 MB, so every call reads HBM, not
L2), and the replay's time / R is one call as a decode step's graph sees it (the launch gap between kernels
included, the host excluded). cuBLAS's bf16 `x @ w.T` is timed the same way at the same shape.

Every candidate is checked against the fp32 PyTorch spec (x @ dequantize(w).T) first; a FAIL line is never chosen.
One line a candidate: shape, candidate, ms, GB/s (the format's own bytes: packed codes + scales + zero points + x +
y), % of the measured copy bandwidth, ratio to cuBLAS (> 1: faster).

The edits the summary maps to (solutions/12_quantization.ipynb, the cell with FAST_SCHEDULES; then
`python -m utils.notebooks`):
  - the indented "(bits, M, N, K): FastSchedule(...)," lines: put them into the FAST_SCHEDULES dict, each in place
    of the entry with the same key (or as a new entry);
  - "int4 M=1 default: GEMV_KERNEL[4] = ...; GEMV_BLOCK_N[4] = ...; GEMV_BLOCK_K[4] = ...; GEMV_WARPS, GEMV_STAGES
    = ..." (the config with the best geometric mean over the four M = 1 shapes) replaces those constants; the int8
    line the same for GEMV_BLOCK_N[8] / GEMV_BLOCK_K[8] (GEMV_WARPS / GEMV_STAGES are shared: take int4's);
  - "int4 at M=16: TILE_KERNEL = ..." sets TILE_KERNEL.
Order: M = 1 (1B up/down, 8B up/down), M = 16 (the same), TinyLlama's five projection shapes at M = 1 (what its
decode runs), TinyLlama's decode per token (bf16 / int8 / int4, lesson 08's CUDA-graphed generate: only if under
95 s by then, a model skipped past 125 s); past 135 s the remaining shapes are skipped, each said on one line.
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
BUDGET = 135.0
LINES = []
G = 32 if CPU else 128


def say(line):
    print(line, flush=True)
    LINES.append(line)


def budget_left():
    return CPU or time.time() - T0 < BUDGET


if CPU:
    SHAPES = {"tiny up": (256, 48), "tiny down": (300, 24)}  # (K, N)
    M16 = 5
else:
    SHAPES = {
        "1B up 2048->8192": (2048, 8192),
        "1B down 8192->2048": (8192, 2048),
        "8B up 4096->14336": (4096, 14336),
        "8B down 14336->4096": (14336, 4096),
    }
    M16 = 16


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


RESULTS = {}  # (label, op) -> [(ms, name, schedule or None)]
CEIL = None


def run(label, op, name, make_call, ref, nbytes, base_ms, sched=None):
    """make_call(i) -> a call on weight copy i; copy 0 is checked, then all copies are timed in one graph."""
    try:
        y = make_call(0)()
        err = (y.float() - ref).abs().max().item()
        tol = 2e-2 * ref.abs().max().item() + 1e-3
        if not math.isfinite(err) or err > tol:
            say(f"{label:26s} {op:5s} {name:46s} FAIL max error {err:.3g} (tolerance {tol:.3g})")
            return
        ms = graph_ms([make_call(i) for i in range(NCOPY[0])])
        gbs = nbytes / ms / 1e6
        say(f"{label:26s} {op:5s} {name:46s} {ms:8.4f} ms {gbs:7.0f} GB/s {100 * gbs / CEIL:5.1f}% of copy "
            f"x{base_ms / ms:5.2f} vs cuBLAS")  # fmt: skip
        RESULTS.setdefault((label, op), []).append((ms, name, sched))
    except Exception as e:  # noqa: BLE001 - one failure never loses the others
        first = str(e).strip().splitlines()[0][:150] if str(e).strip() else ""
        say(f"{label:26s} {op:5s} {name:46s} ERROR {type(e).__name__}: {first}")


NCOPY = [1]


def fs(kind, BM, BN, BK, split, warps, stages):
    return L.FastSchedule(kind, BM, BN, BK, split, warps, stages)


# int4 M = 1: (kernel, BLOCK_N, BLOCK_K, warps, stages); "gemv" (16, 256, 4, 2) is yesterday's best old kernel
SLAB = [("slab", 16, 1024, 4, 2), ("slab", 8, 1024, 4, 2), ("slab", 32, 1024, 4, 2), ("slab", 16, 2048, 4, 2),
        ("slab", 32, 512, 4, 2), ("slab", 16, 1024, 4, 1), ("gemv", 16, 256, 4, 2)]  # fmt: skip
# TinyLlama's decode shapes (M = 1, int4 and int8): the default and a few (after M = 16, if time is left)
TINY = {"TinyLlama wqkv 2048->2560": (2048, 2560), "TinyLlama wo 2048->2048": (2048, 2048),
        "TinyLlama w13 2048->11264": (2048, 11264), "TinyLlama w2 5632->2048": (5632, 2048),
        "TinyLlama head 2048->32000": (2048, 32000)}  # fmt: skip
SLAB_TINY = [("slab", 8, 1024, 4, 2), ("slab", 16, 1024, 4, 2), ("slab", 8, 512, 4, 2), ("slab", 16, 2048, 4, 2)]
GEMV8_TINY = [(16, 256, 4, 1), (16, 256, 4, 2), (16, 512, 4, 2)]
# int8 M = 1: (BLOCK_N, BLOCK_K, warps, stages)
GEMV8 = [(16, 256, 4, 1), (16, 256, 4, 2), (32, 256, 4, 2), (16, 512, 4, 2)]
# M = 16, int4: (kernel, BLOCK_N, warps, stages) at BLOCK_K = the group, split 1 and the heuristic's split
TILES = [("tile", 32, 4, 4), ("tile", 64, 4, 4), ("tile", 64, 4, 3), ("tile_swap", 64, 4, 4)]
if CPU:
    SLAB = [("slab", 16, 64, 4, 2), ("slab", 8, 128, 2, 1), ("gemv", 16, 64, 4, 2)]
    TINY = {"TinyLlama tiny": (96, 33)}
    SLAB_TINY, GEMV8_TINY = [("slab", 8, 64, 4, 2)], [(16, 64, 4, 1)]
    GEMV8 = [(16, 64, 4, 1), (8, 128, 2, 2)]
    TILES = [("tile", 16, 4, 2), ("tile_swap", 32, 4, 2)]


def splits(N, K, BN, BK, double=False):
    s = L.gemv_split(N, K, BN, BK, SM)
    return sorted({1, s, 2 * s} if double else {1, s})


def shape_part(M, shapes=None, slab=None, gemv8=None):
    shapes, slab, gemv8 = shapes or SHAPES, slab or SLAB, gemv8 or GEMV8
    for label, (K, N) in shapes.items():
        if not budget_left():
            say(f"{label} M={M}: skipped, the sweep's time is spent")
            continue
        lab = f"{label} M={M}"
        w = torch.randn(N, K, device=DEV, dtype=DT) / math.sqrt(K)
        w4, w8 = L.quantize_int4_ref(w, G), L.quantize_int8_ref(w)
        NCOPY[0] = copies_for(w4.nbytes)
        ws = [w] + [w.clone() for _ in range(copies_for(w.nbytes) - 1)]
        w4s = [w4] + [L.Int4Weight(w4.packed.clone(), w4.scale.clone(), w4.zero.clone(), w4.K, G)
                      for _ in range(NCOPY[0] - 1)]  # fmt: skip
        n8 = copies_for(w8.nbytes)
        w8s = [w8] + [L.Int8Weight(w8.q.clone(), w8.scale.clone()) for _ in range(n8 - 1)]
        x = torch.randn(M, K, device=DEV, dtype=DT)
        ref4 = x.float() @ L.dequantize(w4, torch.float32).T
        ref8 = x.float() @ L.dequantize(w8, torch.float32).T
        base = graph_ms([lambda w=w: x @ w.T for w in ws])
        say(f"{lab:26s} bf16  {'cuBLAS x @ w.T (baseline, CUDA graph)':46s} {base:8.4f} ms "
            f"{L.bf16_linear_bytes(M, N, K) / base / 1e6:7.0f} GB/s")  # fmt: skip
        b4, b8 = L.w4a16_bytes(M, N, K, G), L.w8a16_bytes(M, N, K)
        # -- int4
        default4 = L.fast_schedule(4, M, N, K, G)
        run(lab, "int4", f"default {tuple(default4)}", lambda i: lambda: L.w4a16_fast(x, w4s[i]), ref4, b4, base,
            default4)  # fmt: skip
        cands = []
        if M == 1:
            for kind, BN, BK, warps, stages in slab:
                BK = max(G, min(BK, triton.next_power_of_2(K)))
                first = (kind, BN, BK, warps, stages) == slab[0]  # the first config: twice the split too
                for sp in splits(N, K, BN, BK, first) if kind == "slab" else [1]:
                    cands.append(fs(kind, 1, BN, BK, sp, warps, stages))
        else:
            run(lab, "int4", "lesson's exercise kernel w4a16 (tl.dot)", lambda i: lambda: L.w4a16(x, w4s[i]), ref4,
                b4, base)  # fmt: skip
            for kind, BN, warps, stages in TILES:
                sp = max(1, L.gemv_split(N, K, BN, G, SM))
                for split in sorted({1, sp}):
                    cands.append(fs(kind, 16, BN, G, split, warps, stages))
        for s in dict.fromkeys(cands):
            if s != default4 and budget_left():
                run(lab, "int4", f"{s.kernel} {tuple(s)[1:]}",
                    lambda i, s=s: lambda: L.w4a16_fast(x, w4s[i], schedule=s), ref4, b4, base, s)  # fmt: skip
        # -- int8
        NCOPY[0] = n8
        default8 = L.fast_schedule(8, M, N, K)
        run(lab, "int8", f"default {tuple(default8)}", lambda i: lambda: L.w8a16_fast(x, w8s[i]), ref8, b8, base,
            default8)  # fmt: skip
        cands8 = []
        if M == 1:
            for BN, BK, warps, stages in gemv8:
                BK = min(BK, triton.next_power_of_2(K))
                for sp in sorted({1, L.gemv_split(N, K, BN, BK, SM)}):
                    cands8.append(fs("gemv", 1, BN, BK, sp, warps, stages))
        else:
            for BN in (32, 64):
                sp = max(1, L.gemv_split(N, K, BN, 128, SM))
                for split in sorted({1, sp}):
                    cands8.append(fs("tile", 16, BN, 128, split, 4, 4))
        for s in dict.fromkeys(cands8):
            if s != default8 and budget_left():
                run(lab, "int8", f"{s.kernel} {tuple(s)[1:]}",
                    lambda i, s=s: lambda: L.w8a16_fast(x, w8s[i], schedule=s), ref8, b8, base, s)  # fmt: skip
        del ws, w4s, w8s
        if not CPU:
            torch.cuda.empty_cache()
        say(f"  ({time.time() - T0:.0f} s)")


def decode_part():
    """TinyLlama-1.1B's shape (random weights), batch 1: ms per token with lesson 08's CUDA-graphed generate."""
    if CPU or "--no-decode" in sys.argv:
        say("decode per token: skipped (--cpu or --no-decode)")
        return
    if time.time() - T0 > 95:
        say("decode per token: skipped, the sweep's time is spent")
        return
    from bench import lesson12 as B
    from lessons import l08_llama_model as L8

    model = B.tinyllama()
    models = {"bf16": model, "int8": L.quantize_model(model, 8), "int4 g128": L.quantize_model(model, 4, 128)}
    prompt, new = 128, 64
    ids = torch.randint(0, model.args.vocab_size, (1, prompt), device=DEV)
    per = {}
    for name, m in models.items():
        if time.time() - T0 > 125:
            say(f"decode {name}: skipped, the sweep's time is spent")
            continue
        try:
            L8.generate(m, ids, 2, max_len=prompt + new)  # compile, capture
            t1 = triton.testing.do_bench(lambda m=m: L8.generate(m, ids, 1, max_len=prompt + new), warmup=1, rep=3)
            tn = triton.testing.do_bench(lambda m=m: L8.generate(m, ids, new, max_len=prompt + new), warmup=1, rep=3)
            per[name] = (tn - t1) / (new - 1)
            base = per.get("bf16", per[name])
            say(
                f"TinyLlama decode B=1 {name:10s} {per[name]:8.4f} ms a token  {1e3 / per[name]:7.0f} tokens/s  "
                f"x{base / per[name]:5.2f} vs bf16 (lesson 08's graphed generate, prompt {prompt}, {new} new)"
            )
        except Exception as e:  # noqa: BLE001
            say(f"TinyLlama decode {name}: ERROR {type(e).__name__}: {str(e).strip().splitlines()[0][:150]}")


def summary():
    say("")
    say("== best per shape; FAST_SCHEDULES lines to put in (solutions/12_quantization.ipynb, the FAST_SCHEDULES "
        "cell, each in place of the entry with its key) ==")  # fmt: skip
    for (lab, op), rows in RESULTS.items():
        ms, name, s = min(rows, key=lambda r: r[0] if r[0] == r[0] else 0)
        default = next((r for r in rows if r[1].startswith("default")), None)
        gain = f" (default {default[0]:.4f} ms, x{default[0] / ms:.2f})" if default and ms == ms else ""
        say(f"{lab:26s} {op}: {ms:.4f} ms  {name}{gain}")
        if s is not None and default is not None and not name.startswith("default"):
            label, M = lab.rsplit(" M=", 1)
            K, N = {**SHAPES, **TINY}[label]
            say(f"    ({4 if op == 'int4' else 8}, {M}, {N}, {K}): FastSchedule{tuple(s)!r},")
    for op, bits in (("int4", 4), ("int8", 8)):  # the M = 1 default: best geometric mean of time / best per shape
        score = {}
        for (lab, o), rows in RESULTS.items():
            if o != op or not lab.endswith(" M=1") or lab.rsplit(" M=", 1)[0] not in SHAPES:  # the four main shapes
                continue
            best = min(r[0] for r in rows)
            for ms, _name, s in rows:
                if s is not None and s.kernel in ("gemv", "slab"):
                    key = (s.kernel, s.BLOCK_N, s.BLOCK_K, s.num_warps, s.num_stages)
                    score.setdefault(key, {})
                    score[key][lab] = min(score[key].get(lab, 1e9), ms / best)  # its best split at that shape
        most = max((len(v) for v in score.values()), default=0)
        full = {k: v for k, v in score.items() if len(v) == most}
        if full:
            gm = {k: math.exp(sum(map(math.log, v.values())) / len(v)) for k, v in full.items()}
            k = min(gm, key=gm.get)
            say(f"{op} M=1 default (geometric mean {gm[k]:.2f}x the best per shape): "
                + (f"GEMV_KERNEL[4] = {k[0]!r}; " if bits == 4 else "")
                + f"GEMV_BLOCK_N[{bits}] = {k[1]}; GEMV_BLOCK_K[{bits}] = {k[2]}; GEMV_WARPS, GEMV_STAGES = {k[3]}, "
                f"{k[4]}")  # fmt: skip
    best = {}
    for (lab, o), rows in RESULTS.items():
        if o == "int4" and lab.endswith(f" M={M16}"):
            for kind in ("tile", "tile_swap"):
                times = [r[0] for r in rows if r[2] is not None and r[2].kernel == kind]
                if times:
                    best.setdefault(kind, []).append(min(times))
    if len(best) == 2 and len(best["tile"]) == len(best["tile_swap"]) and not CPU:
        ratio = math.exp(sum(math.log(a / b) for a, b in zip(best["tile"], best["tile_swap"])) / len(best["tile"]))
        say(
            f"int4 at M={M16}: tile / tile_swap time, geometric mean {ratio:.2f} -> TILE_KERNEL = "
            f"{'tile_swap' if ratio > 1 else 'tile'!r}"
        )
    say(f"total {time.time() - T0:.0f} s")


if __name__ == "__main__":
    CEIL = copy_gbs()
    say(f"lesson 12 sweep on {env.gpu_name if env.is_gpu else 'the CPU (interpreter)'}, torch {torch.__version__}, "
        f"triton {triton.__version__}, {SM} SMs; copy {CEIL:.0f} GB/s (1 GiB copy_, do_bench)")  # fmt: skip
    for part in (
        lambda: shape_part(1),
        lambda: shape_part(M16),
        lambda: shape_part(1, TINY, SLAB_TINY, GEMV8_TINY),
        decode_part,
    ):
        try:
            part()
        except Exception as e:  # noqa: BLE001
            say(f"part stopped: {type(e).__name__}: {e}")
    summary()
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "sweep_l12.txt"), "w") as f:
            f.write("\n".join(LINES) + "\n")
