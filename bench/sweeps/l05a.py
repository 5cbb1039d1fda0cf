"""Lesson 05 sweep a, 2026-11-23: matmul at odd shapes, padded or not (issue 12; branch wt-l05a).

Run from the repo root (branch wt-l05a merged): ``PYTHONPATH=$PWD python3 bench/sweeps/l05a.py`` on the GPU
(< 150 s, compile time included), ``PYTHONPATH=$PWD python3 bench/sweeps/l05a.py --cpu`` under the interpreter (tiny
shapes, no timings, < 60 s).

Why: compiled offline for sm_90, matmul_kernel at 3000x5000x1000 (ALIGN = 8) and at its aligned twin 3072x5120x1024
(ALIGN = 16) has the same K loop: the same 16-byte cp.async copies and wgmma, 16 predicate instructions more a step
(solutions/05_matmul.ipynb, "Odd shapes"). Yet sweep b measured 0.647x cuBLAS there against 0.846x at the twin
(results/h100-2026-11-23-s6/sweeps/l05b.txt), the persistent TMA kernel 0.722x against 0.901x. What the compiler
cannot see is where the rows start in memory: at a pitch of 2000 bytes (K = 1000 fp16) 7 rows in 8 start off a
128-byte cache line, and a 64-element (128-byte) piece of such a row touches two lines instead of one: counted per
K step of a 128 x 256 x 64 tile, 552 line requests instead of 384 (+44 %; A +88 %, B +22 %). And where K or N is not
a multiple of 8 (2999x3001x4093, 4095x4097x1000) ALIGN falls to 1 and the kernel loads one element at a time.

The lesson's fix is to copy A and B into padded buffers first (``matmul(..., pad=...)``, ``pad_operands``): rule
"unaligned" pads what is not a whole number of 16-byte vectors (K and N rounded up to 8 fp16 elements, zeros past K,
C computed into a padded buffer and copied back when N grows); rule "lines_a" also moves every row of A to a
128-byte boundary (A's pieces are the short ones: 128 bytes a row a step), "lines" those of A and B. This sweep times,
per shape, in one process:
  matmul pad=never       the launcher as it was (before): no copies
  matmul pad=unaligned   the copies the "unaligned" rule makes, then the kernel, then C copied back if padded
  matmul pad=lines_a     the same with A's rows on 128-byte lines
  matmul pad=lines       the same with A's and B's rows on 128-byte lines
  kernel on <rule> data  matmul_launch on inputs padded beforehand: the kernel alone (copies not timed), the
                         diagnostic: if "kernel on lines data" at 3000x5000x1000 is near the twin per FLOP, the
                         line splits are the cost; if it is near "pad=never", they are not
  kernel on lines data, C on lines too   the same with C's rows on 128-byte lines as well (C is written once)
  kernel on rows off the lines   at the twins only: the round sizes with A's and B's rows 16 bytes longer, so 7 in 8
                         start off a line: if it is as slow per FLOP as the odd shape, the rows' placement is the cost
  copies alone <rule>    pad_operands alone: what the copies cost
Each launcher is autotuned (padded inputs are tuned apart: stride_am, stride_bk and ALIGN are in the key).

Every time is the GPU's: the call captured in a CUDA graph (bench.common.graphed), the replay timed by
triton.testing.do_bench (L2 cleared before each repetition), next to torch.matmul (cuBLAS) captured and timed the same
way. Each candidate is first compared with torch.matmul in fp32 on the same inputs (FAIL: the max error; a FAIL is
never chosen). One line a candidate, printed as it finishes: shape, candidate, us, TFLOP/s, x cuBLAS, x before.
Past 135 s the rest is skipped; the summary always prints.

  -> edits, all in solutions/05_matmul.ipynb (the export cell with ``PAD_RULE``), then ``python -m utils.notebooks``:
     * ``PAD_RULE = "<rule>"``: the EDIT line names the rule with the best geometric mean over the shapes at or above
       PAD_MIN_FLOPS ("never" if no rule beats it by 2 %).
     * ``PAD_MIN_FLOPS``: the EDIT line says whether padding paid at 1000^3 (2.0 GFLOP, just under today's 2.1).
     * bench/lesson05.py times matmul() (the rule in PAD_RULE) and "triton, no padding" at the odd shapes.
"""

import math
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
RESULTS = {}  # shape label -> {candidate: (ms, cuBLAS ms)}
SAME = {}  # shape label -> {rule: the earlier rule whose buffers it would make}


def say(line=""):
    print(line, flush=True)
    LINES.append(line)


def save():
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "sweep_l05a.txt"), "w") as f:
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


def picked():
    best = getattr(L.matmul_kernel, "best_config", None)
    if best is None:
        return ""
    k = best.kwargs
    return f" pick={k['BLOCK_M']}x{k['BLOCK_N']}x{k['BLOCK_K']} w{best.num_warps} s{best.num_stages}"


if CPU:
    SHAPES = [((37, 45, 70), torch.float16), ((16, 24, 40), torch.float16), ((20, 33, 17), torch.float16),
              ((32, 48, 64), torch.float16)]  # fmt: skip
    TWINS = {(37, 45, 70): (32, 48, 64)}
else:
    SHAPES = [
        ((3000, 5000, 1000), torch.float16),  # issue 12's shape: ALIGN = 8, rows off the 128-byte lines
        ((3072, 5120, 1024), torch.float16),  # its aligned twin: the same 480 tiles of 128 x 256, 16 K steps
        ((2999, 3001, 4093), torch.float16),  # ALIGN = 1: K and N odd
        ((4095, 4097, 1000), torch.float16),  # ALIGN = 1: N odd
        ((3072, 3072, 4096), torch.float16),  # 2999x3001x4093's twin
        ((3000, 5000, 1000), torch.bfloat16),
        ((1000, 1000, 1000), torch.float16),  # small: do the copies pay below PAD_MIN_FLOPS?
        ((2999, 3001, 4093), torch.bfloat16),
    ]
    TWINS = {(3000, 5000, 1000): (3072, 5120, 1024), (2999, 3001, 4093): (3072, 3072, 4096)}
TWIN_OF = set(TWINS.values())

say(
    f"lesson 05 sweep a (odd shapes, padded or not) on {ENV.gpu_name if ENV.is_gpu else 'CPU (interpreter)'}, torch "
    f"{torch.__version__}, triton {triton.__version__}, {ENV.sm_count} SMs; PAD_RULE = {L.PAD_RULE!r}, "
    f"PAD_MIN_FLOPS = {L.PAD_MIN_FLOPS:.3g}"
)


def run_shape(shape, dtype):
    M, N, K = shape
    label = f"{M}x{N}x{K} {utils.dtype_name(dtype)}"
    torch.manual_seed(0)
    a = (torch.randn(M, K, device=ENV.device) * K**-0.25).to(dtype)
    b = (torch.randn(K, N, device=ENV.device) * K**-0.25).to(dtype)
    ref = a.float() @ b.float()
    flops = L.matmul_flops(M, N, K)
    try:
        base_ms = gtime(lambda: torch.matmul(a, b))
    except Exception as e:
        say(f"== {label}: cuBLAS failed: {first_line(e)}")
        return
    elem = a.element_size()
    align = L.row_alignment(K, N, K, N, N)
    say(
        f"== {label}: cuBLAS {'n/a' if base_ms is None else f'{base_ms * 1e3:.1f} us'}; ALIGN = {align} "
        f"({align * elem} bytes), A's rows start every {K * elem} bytes, B's every {N * elem}"
    )
    results = RESULTS.setdefault(label, {})
    out = torch.empty(M, N, device=ENV.device, dtype=dtype)
    rules = ["never"] if shape in TWIN_OF else list(L.PAD_RULES)
    todo = []
    for rule in rules:  # skip a rule whose copies are the same as a rule before it (nothing more to pad)
        padded = L.pad_operands(a, b, out, None, rule)
        same = next((r for r, p in todo if all(x.stride() == y.stride() for x, y in zip(padded[:3], p[:3]))), None)
        if same is not None and rule != "never":
            say(f"   pad={rule}: the same buffers as pad={same}, not timed again")
            SAME.setdefault(label, {})[rule] = same
            continue
        todo.append((rule, padded))
    candidates = []
    for rule, padded in todo:
        candidates.append((f"matmul pad={rule}", lambda rule=rule: L.matmul(a, b, out=out, pad=rule), None))
        if rule != "never":
            pa, pb, pc, _ = padded
            candidates.append((f"kernel on {rule} data", lambda pa=pa, pb=pb, pc=pc: L.matmul_launch(pa, pb, pc), pc))
            candidates.append((f"copies alone {rule}", lambda rule=rule: L.pad_operands(a, b, out, None, rule), "copy"))
        if rule == "lines" and pc is out:  # C's rows on 128-byte lines too: does the one write of C pay for its rows?
            line = 128 // elem
            cl = torch.empty(M, L.round_up(N, line), device=ENV.device, dtype=dtype)[:, :N]
            name = "kernel on lines data, C on lines too"
            candidates.append((name, lambda pa=pa, pb=pb, cl=cl: L.matmul_launch(pa, pb, cl), cl))
    if shape in TWIN_OF:  # the reverse test: round sizes, rows moved off the 128-byte lines by 16 bytes
        vec = 16 // elem
        ao = torch.empty(M, K + vec, device=ENV.device, dtype=dtype)[:, :K]
        bo = torch.empty(K, N + vec, device=ENV.device, dtype=dtype)[:, :N]
        ao.copy_(a), bo.copy_(b)
        name = f"kernel on rows off the lines (pitches {K + vec}, {N + vec})"
        candidates.append((name, lambda: L.matmul_launch(ao, bo, out), out))
    before = None
    for name, fn, result in candidates:
        if late():
            say(f"   {name}: skipped (past {BUDGET_S} s)")
            continue
        try:
            out.fill_(float("nan"))
            got = fn()
            ms = gtime(fn)
        except Exception as e:
            say(f"   {name}: ERROR {first_line(e)}")
            continue
        if isinstance(result, str):  # the copies: nothing to compare
            say(f"   {name}: {'(no timing on the CPU)' if ms is None else f'{ms * 1e3:8.1f} us'}")
            continue
        c = (result if result is not None else got)[:, :N]
        err = (c.float() - ref).abs().max().item()
        ok = err <= 0.05 and not c.isnan().any().item()
        verdict = "OK" if ok else f"FAIL max err {err:.3g}"
        extra = picked()
        if ms is None:
            say(f"   {name}: {verdict} (no timing on the CPU)")
            ms = base_ms = 1.0  # a placeholder, so that the summary runs
        else:
            before = before or (ms if name == "matmul pad=never" and ok else None)
            x_before = f" {before / ms:.3f}x before" if before else ""
            say(
                f"   {name}: {ms * 1e3:8.1f} us {flops / ms / 1e9:7.1f} TFLOP/s {base_ms / ms:.3f}x cuBLAS{x_before} "
                f"{verdict}{extra}"
            )
        if ok:
            results[name] = (ms, base_ms)


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
say("== best per shape (correct launchers only: copies included)")
scores = {rule: [] for rule in L.PAD_RULES}  # x cuBLAS of each rule at the shapes at or above PAD_MIN_FLOPS
small = {}
MIN_FLOPS = 0 if CPU else L.PAD_MIN_FLOPS  # on the CPU every shape is tiny: exercise the EDIT line
for label, results in RESULTS.items():
    launchers = {name.split("=")[1]: t for name, t in results.items() if name.startswith("matmul pad=")}
    if not launchers:
        say(f"   {label}: nothing timed")
        continue
    best = min(launchers, key=lambda r: launchers[r][0])
    ms, base_ms = launchers[best]
    say(f"   {label}: pad={best} {ms * 1e3:.1f} us = {base_ms / ms:.3f}x cuBLAS")
    M, N, K = map(int, label.split()[0].split("x"))
    if len(launchers) < 2:
        continue
    for rule in L.PAD_RULES:  # a rule not timed here makes the same buffers as an earlier one: count that one's time
        timed = rule
        while timed not in launchers and timed in SAME.get(label, {}):
            timed = SAME[label][timed]
        if timed not in launchers:
            continue
        ms, base_ms = launchers[timed]
        (scores if L.matmul_flops(M, N, K) >= MIN_FLOPS else small).setdefault(rule, []).append(base_ms / ms)
    for rule, (lms, _) in launchers.items():
        if f"kernel on {rule} data" in results:
            kms = results[f"kernel on {rule} data"][0]
            say(
                f"   {label}: pad={rule} {lms * 1e3:.1f} us = the kernel alone {kms * 1e3:.1f} us + copies and launches"
            )
for odd, twin in TWINS.items():
    o, t = RESULTS.get(f"{'x'.join(map(str, odd))} float16", {}), RESULTS.get(f"{'x'.join(map(str, twin))} float16")
    if not o or not t or "matmul pad=never" not in t:
        continue
    per_flop = L.matmul_flops(*odd) / L.matmul_flops(*twin)
    t_ms = t["matmul pad=never"][0]
    for name, (ms, _) in o.items():
        say(f"== twin {odd}: {name} runs at {per_flop * t_ms / ms:.3f} of the twin's TFLOP/s (1: no odd-shape cost)")
    for name, (ms, _) in t.items():
        if name != "matmul pad=never":
            say(f"== twin {twin}: {name} runs at {t_ms / ms:.3f} of its TFLOP/s on rows on the lines")
geo = {r: math.exp(sum(map(math.log, v)) / len(v)) for r, v in scores.items() if v}
if geo:
    say("   geometric mean x cuBLAS at or above PAD_MIN_FLOPS: " + ", ".join(f"{r} {g:.3f}" for r, g in geo.items()))
    best = max(geo, key=geo.get)
    rule = best if geo[best] > 1.02 * geo.get("never", 0) else "never"
    say(f"   EDIT: PAD_RULE = {rule!r} (now {L.PAD_RULE!r})")
for rule, ratios in small.items():
    if rule != "never" and ratios and small.get("never"):
        pays = ratios[0] > 1.02 * small["never"][0]
        say(
            f"   EDIT (PAD_MIN_FLOPS): below it, pad={rule} at {ratios[0]:.3f}x cuBLAS vs never {small['never'][0]:.3f}x"
            f": {'lower PAD_MIN_FLOPS below 2e9' if pays else 'keep it'}"
        )
say(f"done in {time.time() - T0:.0f} s")
save()
