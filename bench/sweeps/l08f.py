"""Lesson 08 sweep f (issues 11 and 15): DECODE_PIPE_SCHEDULES chosen in the step, not one GEMV at a time; with
``--int8``, lesson 12's int8 rows the same way (FUSED_INT8_LOOP by shape and FUSED_INT8_PIPE_SCHEDULES).

Run from the repo root: ``PYTHONPATH=$PWD python3 bench/sweeps/l08f.py [--int8 | --int4]`` on the GPU (< 260 s each),
``PYTHONPATH=$PWD python3 bench/sweeps/l08f.py --cpu`` under the interpreter (a tiny model, no timings: a smoke test).

Why: the table's rows came from l12k.py, which timed each GEMV alone, launched in order. In the step the GEMVs are
launched early (DECODE_FUSIONS.pdl) and overlap their neighbours, and the best tile may differ: l12m.py found the
int8 kernel's per-projection winners, each faster alone, slower together at TinyLlama's shape. TinyLlama's bf16 step
is at the line of issue 11's 70 % (results/h100-2026-11-28-s13: 68.9-70.1 %).

What it does, at TinyLlama's shape, then Llama-3.2-1B's while the budget lasts (random weights, bf16, context 640,
the step replayed from a CUDA graph, L2 cleared before each repetition): the step as set; then for each row the
step uses, largest weight first, every candidate (BLOCK_N, BLOCK_K, num_warps, num_stages) put in that row alone,
keeping the fastest before the next row (coordinate descent); then the step with all the winners, its logits
against the step as set. The EDIT lines name rows whose winner beat the table by more than 0.5 % of the step.
With --int8 the step is lesson 12's int8 step and each row's candidates are "prefetch" at FUSED_GEMV_SCHEDULES's
row and "pipe" at each candidate tile (FUSED_INT8_LOOP becomes a dict by shape): issue 15's int8 1.5x, where
"pipe" lost at TinyLlama's gate/up (results/h100-2026-11-28-s13/sweeps/l12m.txt).
With --int4 (added 2026-11-28, s15; first run on an H200 in s16, results/h200-2026-11-28-s16/sweeps/l08f-int4.txt) the
step is lesson 12's int4 step: first the whole step with each
FUSED_INT4_KERNEL ("stream", "pipe"), the faster kept, then that kernel's table (FUSED_STREAM_SCHEDULES or
FUSED_PIPE_SCHEDULES) row by row as above. Its rows were chosen one GEMV at a time (l12h.py, l12j.py) and hold none of
Llama-3.2-1B's shapes; on an H200 the int4 step is slower than the int8 one although its GEMVs alone are faster
(results/h200-2026-11-28-s15). Its H200 winners for Llama-3.2-1B (0.678 -> 0.618 ms in the sweep) did not hold
in make bench, which pairs each row with its baseline in one run (results/h200-2026-11-28-s16/bench-12-int4-rows:
0.685 ms a token against 0.688 without them): read a gain under about 10 % here as the run's drift until a paired
timing confirms it.
"""

import os
import sys
import time

T0 = time.time()
CPU = "--cpu" in sys.argv
if CPU:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402

import utils  # noqa: E402
from bench.common import LLAMA_SHAPES, random_llama  # noqa: E402
from lessons import l08_llama_model as L8  # noqa: E402
from lessons import l12_quantization as L12  # noqa: E402

ENV = utils.mode.current()
LINES = []
BUDGET_S = int(os.environ.get("BUDGET_S", 240))  # seconds for the whole run (a device call allows at most 600)
ONLY = [a.split("=", 1)[1] for a in sys.argv if a.startswith("--only=")]  # --only=Llama-3.2-1B: that shape alone
KERNEL = [a.split("=", 1)[1] for a in sys.argv if a.startswith("--kernel=")]  # --int4 --kernel=pipe: that kernel's
# table swept at every shape, with no comparison of kernels first (s43's --wide "pipe" tiles never ran: "stream" won)


def say(line=""):
    print(line, flush=True)
    LINES.append(line)


def save():
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "sweep_l08f.txt" if FORMAT == "bf16" else f"sweep_l08f-{FORMAT}.txt"), "w") as f:
            f.write("\n".join(LINES) + "\n")


def gtime(fn):
    """GPU ms of fn() replayed from a CUDA graph, L2 cleared before each repetition; None on the CPU."""
    if CPU:
        fn()
        return None
    import triton.testing

    from bench.common import graphed

    return triton.testing.do_bench(graphed(fn), warmup=5, rep=30)


def first_line(e):
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0][:150] if text else ''}"


if CPU:
    DT, G = torch.float32, 32
    SHAPES = {
        "tiny": L8.ModelArgs(
            vocab_size=100, n_layers=2, dim=64, n_heads=4, n_kv_heads=2, ffn_dim=48, tie_embeddings=False
        )  # fmt: skip
    }
    MAX_LEN, CONTEXT = 24, 16
else:
    DT, G = torch.bfloat16, 128
    SHAPES = {name: L8.ModelArgs(**shape) for name, shape in LLAMA_SHAPES.items()}  # TinyLlama's, then Llama-3.2-1B's
    MAX_LEN, CONTEXT = 768, 640  # bench/lesson12.py: prompt 512 + 256 new, the mean context


def build_model(args):
    torch.manual_seed(0)  # the same random weights every run
    return random_llama(args, DT, ENV.device)


GS = L8.GemvSchedule
INT8 = "--int8" in sys.argv
INT4 = "--int4" in sys.argv
FORMAT = "int8" if INT8 else "int4" if INT4 else "bf16"
if CPU:
    CANDIDATES = [GS(4, 32, 4, 3), GS(2, 64, 4, 2)]
    INT4_CANDIDATES = {"stream": [GS(4, 32, 2, 3), GS(8, 64, 2, 2)], "pipe": [GS(4, 32, 2, 3)]}
else:
    CANDIDATES = [GS(bn, bk, 4, st) for bn in (2, 4, 8) for bk in (512, 1024, 2048) for st in (3, 4)] + [
        GS(4, 1024, 8, 3), GS(8, 1024, 8, 3)]  # fmt: skip
    INT4_CANDIDATES = {  # stream: a warp covers 1024 columns of a row (32 threads x 4 words x 8 codes), so BLOCK_K =
        # 1024 x num_warps keeps each thread's rows in-thread; the table's rows mix that with narrower steps
        "stream": [GS(bn, bk, 2, st) for bn in (4, 8, 16) for bk in (1024, 2048) for st in (2, 3)]
        + [GS(4, 1024, 1, 3), GS(8, 1024, 1, 3), GS(4, 4096, 4, 2), GS(8, 4096, 4, 2)],
        "pipe": [GS(bn, bk, w, st) for bn in (4, 8) for bk in (512, 1024) for w in (2, 4) for st in (3, 4)],
    }
    if "--wide" in sys.argv:  # 2026-12-07, s43: the 1B shapes' K = 2048 is two steps of 1024 columns, so more rows a
        # program, narrower steps and one warp too (l12ze: the int4 gate/up GEMV at Llama-3.2-1B reads 1.2 TB/s)
        INT4_CANDIDATES["pipe"] = [GS(bn, bk, w, 3) for bn in (4, 8, 16) for bk in (256, 512, 1024) for w in (1, 2, 4)
                                   if bn * bk <= 8192] + [GS(8, 512, 2, 2), GS(8, 512, 2, 4), GS(4, 1024, 2, 2), GS(16, 1024, 2, 3),
                                   GS(16, 1024, 4, 3), GS(32, 512, 4, 3), GS(32, 256, 2, 3)]  # fmt: skip


def rows_of(args):
    """The table's keys the step reads, largest weight first: (N, K) -> label."""
    C, F, V = args.dim, args.ffn_dim, args.vocab_size
    qkv = (args.n_heads + 2 * args.n_kv_heads) * args.head_dim
    return {(F, C): "gate/up", (V, C): "head", (C, F): "down", (qkv, C): "qkv", (C, C): "wo"}


def timed(label, step):
    """The step's ms (None on the CPU), said after label; None after an error, said too."""
    try:
        ms = gtime(step)
    except Exception as e:  # noqa: BLE001
        say(f"{label} | ERROR {first_line(e)}")
        return None
    say(f"{label} | " + ("ran" if ms is None else f"{ms:.4f} ms"))
    return ms


def run_shape(name, args):
    model = build_model(args)
    cache = L8.new_cache(model, 1, MAX_LEN)
    cache.k.normal_()
    cache.v.normal_()
    token = torch.tensor([7], device=ENV.device)
    pos = torch.tensor([CONTEXT], dtype=torch.int32, device=ENV.device)
    if FORMAT == "bf16":

        def step():
            return L8.decode_step(model, token, pos, cache, L8.TRITON_DECODE)

    else:
        qmodel = L12.quantize_model(model, 8) if INT8 else L12.quantize_model(model, 4, group_size=G)

        def step():
            return L12.quantized_decode_step(qmodel, token, pos, cache)

    if INT8:
        prefetch_row = {key: L12.FUSED_GEMV_SCHEDULES.get((8, *key), L12.FUSED_GEMV_SCHEDULES[(8, None)])
                        for key in rows_of(args)}  # fmt: skip
    # on a GPU with rows of its own in lesson 08 (DECODE_PIPE_SCHEDULES_BY_GPU, since 2026-11-28 s15) the bf16
    # candidates go in those rows, which the step reads over DECODE_PIPE_SCHEDULES's (the H200 run before them
    # edited the latter)
    own = L8.gpu_pipe_rows()
    tables = [L8.DECODE_PIPE_SCHEDULES, own or {}, L12.FUSED_INT8_PIPE_SCHEDULES, L12.FUSED_STREAM_SCHEDULES,
              L12.FUSED_PIPE_SCHEDULES]  # fmt: skip
    saved = [dict(t) for t in tables], L12.FUSED_INT8_LOOP, L12.FUSED_INT4_KERNEL
    if INT8:  # a loop a shape: the table's loop for every shape to begin with
        L12.FUSED_INT8_LOOP = {None: L12.fused_int8_loop(-1, -1), **{k: L12.fused_int8_loop(*k) for k in rows_of(args)}}
    ref = step().float().clone()
    base = gtime(step)
    say(f"== {name}: the {FORMAT} step as set" + (f" ({L12.FUSED_INT4_KERNEL})" if INT4 else "") + ": "
        + ("ran" if base is None else f"{base:.4f} ms"))  # fmt: skip
    best_ms, edits = base, {}
    try:
        if INT8:
            table, where = L12.FUSED_INT8_PIPE_SCHEDULES, "FUSED_INT8_PIPE_SCHEDULES"
        elif INT4:  # the kernel first, the whole step with each: the faster kept, its table swept
            # the table's kind at this shape's gate/up (FUSED_INT4_KERNEL became a dict by shape in s43); the sweep
            # then runs the whole step with one kind
            as_set = L12.fused_int4_kernel(*next(iter(rows_of(args))))
            kernel = KERNEL[0] if KERNEL else as_set
            for k in [] if KERNEL else L12.FUSED_INT4_KERNELS:
                if k not in INT4_CANDIDATES or k == as_set:
                    continue
                L12.FUSED_INT4_KERNEL = k
                ms = timed(f"kernel {k}", step)
                if ms is not None and ms < best_ms:
                    best_ms, kernel = ms, k
            L12.FUSED_INT4_KERNEL = kernel
            where = "FUSED_STREAM_SCHEDULES" if kernel == "stream" else "FUSED_PIPE_SCHEDULES"
            table = getattr(L12, where)
        else:
            table = own if own is not None else L8.DECODE_PIPE_SCHEDULES
            where = "this GPU's DECODE_PIPE_SCHEDULES_BY_GPU" if own is not None else "DECODE_PIPE_SCHEDULES"
        for key, label in rows_of(args).items():
            if time.time() - T0 > BUDGET_S - 30:
                say(f"{label} {key}: SKIPPED (time budget)")
                continue
            was = (table.get(key), L12.FUSED_INT8_LOOP[key] if INT8 else None)
            if INT4:  # no step wider than the row (past 1024 columns)
                cands = [(kernel, c) for c in INT4_CANDIDATES[kernel] if c.BLOCK_K <= max(key[1], 1024)]
            else:
                cands = ([("prefetch", prefetch_row[key])] if INT8 else []) + [("pipe", c) for c in CANDIDATES]
            for loop, c in cands:
                if time.time() - T0 > BUDGET_S - 30:
                    break
                table[key] = c
                if INT8:
                    L12.FUSED_INT8_LOOP[key] = loop
                ms = timed(f"{label} {key} | {loop} {tuple(c)}", step)
                if ms is not None and ms < best_ms:
                    best_ms, edits[key] = ms, (loop, c)
            if key in edits:  # keep the winner for the rows after
                table[key] = edits[key][1]
                if INT8:
                    L12.FUSED_INT8_LOOP[key] = edits[key][0]
            else:
                if was[0] is None:
                    del table[key]
                else:
                    table[key] = was[0]
                if INT8:
                    L12.FUSED_INT8_LOOP[key] = was[1]
        got = step().float()
        rel = float((got - ref).norm() / ref.norm())
        final = gtime(step)
        say(f"{name}: the step with the winners " + ("ran" if final is None else f"{final:.4f} ms against "
            f"{base:.4f} as set (x{base / final:.3f})") + f"; logits {rel:.1e} from the step as set"
            + ("  <-- FAIL" if rel > 5e-2 else ""))  # fmt: skip
        if final is not None and final < base * 0.995:
            if INT4 and isinstance(saved[2], dict):  # the kind at this shape's rows only (l12zf runs these lines)
                for key in rows_of(args):
                    if saved[2].get(key, saved[2].get(None)) != kernel:
                        say(f"  -> EDIT: FUSED_INT4_KERNEL[{key}] = {kernel!r}  # {rows_of(args)[key]}")
            elif INT4 and kernel != saved[2]:
                say(f"  -> EDIT: FUSED_INT4_KERNEL = {kernel!r}")
            for key, (loop, c) in edits.items():
                if INT8 and loop == "prefetch":
                    say(f"  -> EDIT: FUSED_INT8_LOOP[{key}] = 'prefetch'  # {rows_of(args)[key]}")
                else:
                    say(f"  -> EDIT: {where}[{key}] = {c!r},  # {rows_of(args)[key]}")
        else:
            say("  -> keep the table")
    finally:
        for t, was in zip(tables, saved[0]):
            t.clear()
            t.update(was)
        L12.FUSED_INT8_LOOP, L12.FUSED_INT4_KERNEL = saved[1], saved[2]
    if not CPU:
        torch.cuda.empty_cache()
    say(f"  ({time.time() - T0:.0f} s)")


say(f"lesson 08 sweep f ({FORMAT + ' rows' if FORMAT != 'bf16' else 'DECODE_PIPE_SCHEDULES'} in the step) on {ENV.gpu_name if ENV.is_gpu else 'CPU (interpreter)'}, "
    f"torch {torch.__version__}, triton {__import__('triton').__version__}")  # fmt: skip
for name, args in SHAPES.items():
    if ONLY and name not in ONLY:
        continue
    if time.time() - T0 > BUDGET_S - 60:
        say(f"{name}: SKIPPED (time budget)")
        continue
    try:
        run_shape(name, args)
    except Exception as e:  # noqa: BLE001
        say(f"{name} stopped: {first_line(e)}")
    save()
say(f"total {time.time() - T0:.0f} s")
save()
