"""Lesson 05 sweep b, 2026-11-23: matmul at odd and small shapes (issue 12; branch wt-l05m).

Run from the repo root (branch wt-l05m merged): ``PYTHONPATH=$PWD python3 bench/sweeps/l05b.py`` on the GPU
(< 150 s, compile time included), ``PYTHONPATH=$PWD python3 bench/sweeps/l05b.py --cpu`` under the interpreter (tiny
shapes, no timings, < 60 s).

Every time here is the GPU's: the call captured in a CUDA graph (bench.common.graphed), the replay timed by
triton.testing.do_bench (L2 cleared before each repetition), next to torch.matmul (cuBLAS) captured and timed the same
way in the same process. Each candidate is first compared with torch.matmul on the same inputs (FAIL: the max error;
a FAIL is never chosen). One line a candidate, printed as it finishes: shape, candidate, us, TFLOP/s, x cuBLAS
(above 1: faster than cuBLAS). Shapes in order of importance; past 135 s the rest is skipped, and the summary
("== best per shape", with the EDIT lines) always prints.

Shapes (M x N x K): 3000x5000x1000 fp16 (issue 12's awkward shape: 480 tiles of 128 x 256 = 3.6 rounds of 132 SMs,
K = 15 whole steps of 64 and a tail of 40), 1024^3 fp16 (32 tiles of 128 x 256 for 132 SMs), 2048x5632x2048 fp16
(a 1B model's MLP), 777x4096x4096 fp16 (M = 777: a short last row of tiles, 112 tiles of 128 x 256 = 0.85 round),
3000x5000x1000 bf16. And 3072x5120x1024 fp16, the awkward shape's aligned twin (the same 480 tiles of 128 x 256
and 16 steps of 64, but every size a multiple of the tiles and every row 128-byte aligned): the "== twin" line
compares the two per FLOP. If the twin is much nearer cuBLAS, the awkward shape loses to its odd sizes (misaligned
rows, masks, the tail); if not, to the short K loop and the last round, whatever the sizes.

Candidates (config = BLOCK_M x BLOCK_N x BLOCK_K, warps, stages; GROUP_M = 8):
  plain    lessons.l05_matmul.matmul_kernel at a fixed config (the autotuner's .fn, as matmul() launches it)
  peeled   matmul_peeled_kernel at a fixed config: the K loop without a K mask, the tail step peeled off
  tma      matmul_tma_kernel (persistent, TMA, flattened loops) at a fixed config, NUM_SMS programs
  persist  matmul_persistent_kernel at a fixed config
  splitk   lesson 09's matmul_splitk (fp32 partials, summed by torch: deterministic), 1024^3 only
  matmul() / matmul_peeled() / matmul_persistent_tma()  the launchers as shipped: autotuned over what prune_configs /
           prune_tma_configs keep (the wave-aware prune: wave_prune, TILE_SPEED, WAVE_SLACK); the pick is printed
The first candidate of each shape, "plain 128x256x64 w8 s4", is what matmul() picked before the wave-aware prune at
these shapes (results/h100-2026-11-23/sweeps/l05-configs.txt), the baseline of the "x old" column.

  -> edits, all in solutions/05_matmul.ipynb, then ``python -m utils.notebooks``:
     * the export cell with ``def wave_estimate``: if the best plain/peeled config of a shape is not among the
       "wave_prune keeps" line of that shape, raise its tile's TILE_SPEED entry (or WAVE_SLACK) until it is;
       if a kept config is far slower than the best, lower its TILE_SPEED.
     * the MATMUL_CONFIGS list in the same cell: add the best plain config of a shape if it is not in the list
       (the EDIT line prints it as make_config(...)).
     * bench/lesson05.py: if "peeled" beats "plain" at the same config on the awkward shapes, the "triton, peeled K"
       row is the one to quote in the lesson's "Extra: the K tail, peeled off" cell.
"""

import os
import sys
import time

T0 = time.time()
CPU = "--cpu" in sys.argv
if CPU:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402
import triton  # noqa: E402

import utils  # noqa: E402
from lessons import l05_matmul as L  # noqa: E402

ENV = utils.mode.current()
LINES = []
BUDGET_S = 135
RESULTS = {}  # shape label -> [(us, name, ok)]


def say(line=""):
    print(line, flush=True)
    LINES.append(line)


def save():
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "sweep_l05b.txt"), "w") as f:
            f.write("\n".join(LINES) + "\n")


def late():
    return time.time() - T0 > BUDGET_S


def first_line(e):
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0][:150] if text else ''}"


def gtime(fn):
    """GPU ms of fn() replayed from a CUDA graph, L2 cleared before each repetition; None on the CPU."""
    if CPU:
        fn()
        return None
    import triton.testing

    from bench.common import graphed

    replay = graphed(fn)
    return triton.testing.do_bench(replay, warmup=5, rep=25)


def cfg(BM, BN, BK, w, s):
    return dict(BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK, num_warps=w, num_stages=s)


def name_of(c):
    return f"{c['BLOCK_M']}x{c['BLOCK_N']}x{c['BLOCK_K']} w{c['num_warps']} s{c['num_stages']}"


def plain(a, b, out, c):
    (M, K), N = a.shape, b.shape[1]
    align = L.row_alignment(K, N, a.stride(0), b.stride(0), out.stride(0))
    L.matmul_kernel.fn[L.matmul_grid(M, N)](
        *L.matmul_args(a, b, out, None), GROUP_M=8, HAS_BIAS=False, ACTIVATION=None, ALIGN=align, **c
    )
    return out


def peeled(a, b, out, c):
    return L.matmul_peeled(a, b, out=out, GROUP_M=8, **c)


def persist(a, b, out, c):
    (M, K), N = a.shape, b.shape[1]
    align = L.row_alignment(K, N, a.stride(0), b.stride(0), out.stride(0))
    L.matmul_persistent_kernel.fn[L.persistent_grid(M, N)](
        *L.matmul_args(a, b, out, None), GROUP_M=8, NUM_SMS=L.NUM_SMS, HAS_BIAS=False, ACTIVATION=None, ALIGN=align, **c
    )
    return out


def tma(a, b, out, c):
    (M, K), N = a.shape, b.shape[1]
    triton.set_allocator(L.tma_scratch)
    L.matmul_tma_kernel.fn[L.persistent_grid(M, N)](
        a, b, out, a, M, N, K, GROUP_M=8, NUM_SMS=L.NUM_SMS, HAS_BIAS=False, ACTIVATION=None, **c
    )
    return out


def splitk(a, b, out, c, split=2):
    from lessons.l09_test_debug_tune import matmul_splitk

    return matmul_splitk(a, b, out=out, SPLIT_K=split, BLOCK_M=c["BLOCK_M"], BLOCK_N=c["BLOCK_N"], BLOCK_K=c["BLOCK_K"])


KINDS = {"plain": plain, "peeled": peeled, "persist": persist, "tma": tma, "splitk": splitk}
OLD = cfg(128, 256, 64, 8, 4)  # what matmul() picked at these shapes before the wave-aware prune

if CPU:
    SHAPES = [((37, 40, 72), torch.float16), ((20, 33, 17), torch.float16)]
    SMALL = cfg(16, 16, 16, 4, 1)
    CANDIDATES = {
        (37, 40, 72): [("plain", SMALL), ("peeled", SMALL), ("peeled", cfg(16, 32, 32, 4, 1)), ("tma", SMALL),
                       ("persist", SMALL), ("splitk", SMALL)],
        (20, 33, 17): [("plain", SMALL), ("peeled", SMALL)],
    }  # fmt: skip
else:
    SHAPES = [
        ((3000, 5000, 1000), torch.float16),
        ((3072, 5120, 1024), torch.float16),
        ((1024, 1024, 1024), torch.float16),
        ((2048, 5632, 2048), torch.float16),
        ((777, 4096, 4096), torch.float16),
        ((3000, 5000, 1000), torch.bfloat16),
    ]
    CORE = [("plain", OLD), ("peeled", OLD), ("plain", cfg(64, 128, 64, 4, 4)), ("tma", cfg(128, 256, 64, 8, 3)),
            ("tma", cfg(128, 128, 64, 4, 4))]  # fmt: skip
    CANDIDATES = {
        (3000, 5000, 1000): CORE
        + [
            ("plain", cfg(128, 256, 64, 8, 3)),
            ("peeled", cfg(128, 256, 64, 8, 3)),
            ("plain", cfg(128, 256, 128, 8, 2)),
            ("peeled", cfg(128, 256, 32, 8, 5)),
            ("plain", cfg(128, 128, 64, 8, 4)),
            ("persist", OLD),
        ],  # fmt: skip
        (1024, 1024, 1024): CORE
        + [
            ("plain", cfg(64, 128, 64, 4, 3)),
            ("plain", cfg(128, 64, 64, 4, 4)),
            ("plain", cfg(64, 64, 64, 4, 4)),
            ("plain", cfg(128, 128, 64, 8, 4)),
            ("tma", cfg(64, 128, 64, 4, 4)),
            ("splitk", cfg(128, 128, 64, 4, 3)),
        ],  # fmt: skip
        (3072, 5120, 1024): [("plain", OLD), ("peeled", OLD), ("tma", cfg(128, 256, 64, 8, 3))],
        (2048, 5632, 2048): CORE + [("plain", cfg(128, 256, 64, 8, 3))],
        (777, 4096, 4096): CORE + [("plain", cfg(64, 256, 64, 4, 4))],
    }
    CANDIDATES[(3000, 5000, 1000, "bf16")] = [("plain", OLD), ("peeled", OLD), ("tma", cfg(128, 256, 64, 8, 3))]

say(
    f"lesson 05 sweep b (odd and small shapes) on {ENV.gpu_name if ENV.is_gpu else 'CPU (interpreter)'}, torch "
    f"{torch.__version__}, triton {triton.__version__}, {ENV.sm_count} SMs"
)


def picked(kernel):
    best = getattr(kernel, "best_config", None)
    if best is None:
        return "?"
    k = best.kwargs
    return f"{k['BLOCK_M']}x{k['BLOCK_N']}x{k['BLOCK_K']} w{best.num_warps} s{best.num_stages}"


def run_shape(shape, dtype):
    M, N, K = shape
    dname = utils.dtype_name(dtype)
    label = f"{M}x{N}x{K} {dname}"
    key = shape if dtype == torch.float16 else (*shape, "bf16")
    torch.manual_seed(0)
    a = (torch.randn(M, K, device=ENV.device) * K**-0.25).to(dtype)
    b = (torch.randn(K, N, device=ENV.device) * K**-0.25).to(dtype)
    ref = (a.float() @ b.float()).to(dtype)
    flops = L.matmul_flops(M, N, K)
    tol = 0.05
    try:
        base_ms = gtime(lambda: torch.matmul(a, b))
    except Exception as e:
        say(f"== {label}: cuBLAS failed: {first_line(e)}")
        return
    say(f"== {label}: cuBLAS {'n/a' if base_ms is None else f'{base_ms * 1e3:.1f} us'}")
    elem = a.element_size()
    kept = L.wave_prune(L.fitting_configs(L.MATMUL_CONFIGS, elem), M, N)
    say(
        f"   wave_prune keeps: {[name_of({**c.kwargs, 'num_warps': c.num_warps, 'num_stages': c.num_stages}) for c in kept]}"
    )
    results = RESULTS.setdefault(label, [])
    old_ms = None
    launchers = [("matmul()", L.matmul, L.matmul_kernel), ("matmul_peeled()", L.matmul_peeled, L.matmul_peeled_kernel)]
    if K * elem % 16 == 0 and N * elem % 16 == 0:
        launchers.append(("matmul_persistent_tma()", L.matmul_persistent_tma, L.matmul_tma_kernel))
    todo = [(f"{kind} {name_of(c)}", KINDS[kind], c) for kind, c in CANDIDATES[key]]
    todo += [(name, (lambda a, b, out, c, fn=fn: fn(a, b, out=out)), kernel) for name, fn, kernel in launchers]
    for name, fn, c in todo:
        if late():
            say(f"   {name}: skipped (past {BUDGET_S} s)")
            continue
        out = torch.empty(M, N, device=ENV.device, dtype=dtype)
        try:
            fn(a, b, out, c)
            err = (out.float() - ref.float()).abs().max().item()
            ok = err <= tol and not out.isnan().any().item()
            ms = gtime(lambda: fn(a, b, out, c))
        except Exception as e:
            say(f"   {name}: ERROR {first_line(e)}")
            continue
        extra = f" pick={picked(c)}" if not isinstance(c, dict) else ""
        if name == f"plain {name_of(OLD)}" and ok:
            old_ms = ms
        if ms is None:
            say(f"   {name}: {'OK' if ok else f'FAIL max err {err:.3g}'} (no timing on the CPU){extra}")
        else:
            x_old = f" {old_ms / ms:.3f}x old" if old_ms else ""
            say(
                f"   {name}: {ms * 1e3:8.1f} us {flops / ms / 1e9:7.1f} TFLOP/s {base_ms / ms:.3f}x cuBLAS{x_old} "
                f"{'OK' if ok else f'FAIL max err {err:.3g}'}{extra}"
            )
        if ok:
            results.append((1.0, name, 1.0) if ms is None else (ms, name, base_ms))  # (on the CPU: a placeholder)


for shape, dtype in SHAPES:
    if late():
        say(f"== {shape} {utils.dtype_name(dtype)}: skipped (past {BUDGET_S} s)")
        continue
    try:
        run_shape(shape, dtype)
    except Exception as e:
        say(f"== {shape}: ERROR {first_line(e)}")
    if not CPU:
        torch.cuda.empty_cache()

say("")
say("== best per shape (correct candidates only)")
for label, results in RESULTS.items():
    if not results:
        say(f"   {label}: nothing timed")
        continue
    ms, name, base_ms = min(results)
    say(f"   {label}: {name} {ms * 1e3:.1f} us = {base_ms / ms:.3f}x cuBLAS")
    fixed = [r for r in results if r[1].split()[0] in ("plain", "peeled")]
    if fixed:
        fms, fname, _ = min(fixed)
        kind, tile, w, s = fname.split()
        BM, BN, BK = tile.split("x")
        say(
            f"   EDIT ({label}): best fixed config = {fname}: it must be among 'wave_prune keeps' above (else raise "
            f"TILE_SPEED[({BM}, {BN})]); if not in MATMUL_CONFIGS add make_config({BM}, {BN}, {BK}, "
            f"num_warps={w[1:]}, num_stages={s[1:]})"
        )
    times = {n: t for t, n, _ in results}
    for c in (OLD, cfg(128, 256, 64, 8, 3)):
        if f"plain {name_of(c)}" in times and f"peeled {name_of(c)}" in times:
            ratio = times[f"plain {name_of(c)}"] / times[f"peeled {name_of(c)}"]
            say(f"   peeled K vs plain at {name_of(c)}: {ratio:.3f}x (above 1: peeling pays)")
twin = {label: {n: (t, b) for t, n, b in results} for label, results in RESULTS.items()}
TWIN = ((37, 40, 72), (20, 33, 17)) if CPU else ((3000, 5000, 1000), (3072, 5120, 1024))  # (odd, aligned twin)
odd, even = (twin.get("{}x{}x{} float16".format(*shape), {}) for shape in TWIN)
for name in sorted(set(odd) & set(even)):
    (t_odd, b_odd), (t_even, b_even) = odd[name], even[name]
    flops_ratio = L.matmul_flops(*TWIN[0]) / L.matmul_flops(*TWIN[1])
    say(
        f"== twin {name}: TFLOP/s at {'x'.join(map(str, TWIN[0]))} / at {'x'.join(map(str, TWIN[1]))} = "
        f"{flops_ratio * t_even / t_odd:.3f} (x cuBLAS {b_odd / t_odd:.3f} vs {b_even / t_even:.3f})"
    )
say(f"done in {time.time() - T0:.0f} s")
save()
