"""Lesson 12 sweep n, 2026-11-28 (written, not yet run on a GPU): the int4 decode step's kernel and tiles chosen in
the whole step (issue 15), as sweep l08f chose the bf16 and int8 rows.

Why: the int4 step's tables were chosen one GEMV at a time (FUSED_STREAM_SCHEDULES: l12h.py, 2026-11-27; "stream"
against "pipe": l12j.py), and hold no rows of their own for Llama-3.2-1B's shapes. In the step the GEMVs are launched
early and overlap their neighbours, and there l08f found other winners for bf16 (2.4-4.9 % off the step) and int8
(0.7-7.7 %). On an H200 the int4 step is slower than the int8 one (results/h200-2026-11-28-s15: 0.673 against
0.634 ms a token at TinyLlama's shape) although its GEMVs alone are faster: a table chosen in the step may say why.

What it does, at TinyLlama's shape, then Llama-3.2-1B's while the budget lasts (random weights quantized to int4 in
groups of 128, bf16 activations, context 640, the step replayed from a CUDA graph, L2 cleared before each
repetition): the step as set; the step with each FUSED_INT4_KERNEL ("stream", "pipe"), keeping the faster; then for
each row the step reads, largest weight first, every candidate tile (BLOCK_N, BLOCK_K, num_warps, num_stages) put in
that kernel's table alone, keeping the fastest before the next row (coordinate descent); then the step with all the
winners, its logits against the step as set (the same sums in another order: within bf16, not the same bits). The
EDIT lines name what beat the table by more than 0.5 % of the step. Every table is put back after each shape.

Run from the repo root: ``PYTHONPATH=$PWD python3 bench/sweeps/l12n.py`` on the GPU (< 260 s),
``... l12n.py --cpu`` under the interpreter (a tiny model, no timings: a smoke test; the interpreter's GEMVs take
blocks of their own, so the candidates change nothing there).
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
BUDGET_S = 240


def say(line=""):
    print(line, flush=True)
    LINES.append(line)
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "sweep_l12n.txt"), "w") as f:
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


GS = L8.GemvSchedule
if CPU:
    DT, G = torch.float32, 32
    SHAPES = {
        "tiny": L8.ModelArgs(
            vocab_size=100, n_layers=2, dim=64, n_heads=4, n_kv_heads=2, ffn_dim=64, tie_embeddings=False
        )  # fmt: skip
    }
    MAX_LEN, CONTEXT = 24, 16
    CANDIDATES = {"stream": [GS(4, 32, 2, 3), GS(8, 64, 2, 2)], "pipe": [GS(4, 32, 2, 3)]}
else:
    DT, G = torch.bfloat16, 128
    SHAPES = {name: L8.ModelArgs(**shape) for name, shape in LLAMA_SHAPES.items()}  # TinyLlama's, then Llama-3.2-1B's
    MAX_LEN, CONTEXT = 768, 640  # bench/lesson12.py: prompt 512 + 256 new, the mean context
    CANDIDATES = {  # stream: a warp covers 1024 columns of a row (32 threads x 4 words x 8 codes), so BLOCK_K =
        # 1024 x num_warps keeps each thread's rows in-thread; the table's rows mix that with narrower steps
        "stream": [GS(bn, bk, 2, st) for bn in (4, 8, 16) for bk in (1024, 2048) for st in (2, 3)]
        + [GS(4, 1024, 1, 3), GS(8, 1024, 1, 3), GS(4, 4096, 4, 2), GS(8, 4096, 4, 2)],
        "pipe": [GS(bn, bk, w, st) for bn in (4, 8) for bk in (512, 1024) for w in (2, 4) for st in (3, 4)],
    }


def rows_of(args):
    """The table's keys the step reads, largest weight first: (N, K) -> label."""
    C, F, V = args.dim, args.ffn_dim, args.vocab_size
    qkv = (args.n_heads + 2 * args.n_kv_heads) * args.head_dim
    return {(F, C): "gate/up", (V, C): "head", (C, F): "down", (qkv, C): "qkv", (C, C): "wo"}


def tables():
    return {"stream": L12.FUSED_STREAM_SCHEDULES, "pipe": L12.FUSED_PIPE_SCHEDULES}


def run_shape(name, args):
    torch.manual_seed(0)  # the same random weights every run
    model = random_llama(args, DT, ENV.device)
    qmodel = L12.quantize_model(model, 4, group_size=G)
    model = None
    cache = L8.new_cache(qmodel, 1, MAX_LEN)
    cache.k.normal_()
    cache.v.normal_()
    token = torch.tensor([7], device=ENV.device)
    pos = torch.tensor([CONTEXT], dtype=torch.int32, device=ENV.device)

    def step():
        return L12.quantized_decode_step(qmodel, token, pos, cache)

    saved = {k: dict(t) for k, t in tables().items()}, L12.FUSED_INT4_KERNEL
    ref = step().float().clone()
    base = gtime(step)
    say(f"== {name}: the int4 step as set ({L12.FUSED_INT4_KERNEL}): " + ("ran" if base is None else f"{base:.4f} ms"))
    best_ms, edits, kernel = base, {}, L12.FUSED_INT4_KERNEL
    try:
        for k in ("stream", "pipe"):
            if k == saved[1]:
                continue
            L12.FUSED_INT4_KERNEL = k
            try:
                ms = gtime(step)
            except Exception as e:  # noqa: BLE001
                say(f"kernel {k} | ERROR {first_line(e)}")
                continue
            say(f"kernel {k} | " + ("ran" if ms is None else f"{ms:.4f} ms"))
            if ms is not None and ms < best_ms:
                best_ms, kernel = ms, k
        L12.FUSED_INT4_KERNEL = kernel
        table = tables()[kernel]
        for key, label in rows_of(args).items():
            if time.time() - T0 > BUDGET_S - 30:
                say(f"{label} {key}: SKIPPED (time budget)")
                continue
            was = table.get(key)
            for c in CANDIDATES[kernel]:
                if time.time() - T0 > BUDGET_S - 30:
                    break
                if c.BLOCK_K > key[1] and c.BLOCK_K > 1024:  # a step wider than the row: no candidate
                    continue
                table[key] = c
                try:
                    ms = gtime(step)
                except Exception as e:  # noqa: BLE001
                    say(f"{label} {key} | {kernel} {tuple(c)} | ERROR {first_line(e)}")
                    continue
                say(f"{label} {key} | {kernel} {tuple(c)} | " + ("ran" if ms is None else f"{ms:.4f} ms"))
                if ms is not None and ms < best_ms:
                    best_ms, edits[key] = ms, c
            if key in edits:  # keep the winner for the rows after
                table[key] = edits[key]
            elif was is None:
                del table[key]
            else:
                table[key] = was
        got = step().float()
        rel = float((got - ref).norm() / ref.norm())
        final = gtime(step)
        say(f"{name}: the step with the winners ({kernel}) " + ("ran" if final is None else f"{final:.4f} ms against "
            f"{base:.4f} as set (x{base / final:.3f})") + f"; logits {rel:.1e} from the step as set"
            + ("  <-- FAIL" if not rel <= 5e-2 else ""))  # fmt: skip
        if final is not None and final < base * 0.995 and rel <= 5e-2:
            if kernel != saved[1]:
                say(f"  -> EDIT: FUSED_INT4_KERNEL = {kernel!r}")
            where = "FUSED_STREAM_SCHEDULES" if kernel == "stream" else "FUSED_PIPE_SCHEDULES"
            for key, c in edits.items():
                say(f"  -> EDIT: {where}[{key}] = {c!r},  # {rows_of(args)[key]}")
        else:
            say("  -> keep the tables")
    finally:
        for k, t in tables().items():
            t.clear()
            t.update(saved[0][k])
        L12.FUSED_INT4_KERNEL = saved[1]
    if not CPU:
        torch.cuda.empty_cache()
    say(f"  ({time.time() - T0:.0f} s)")


def main():
    say(
        f"lesson 12 sweep n (the int4 step's kernel and tiles in the step) on "
        f"{ENV.gpu_name if ENV.is_gpu else 'CPU (interpreter)'}, torch {torch.__version__}, "
        f"triton {__import__('triton').__version__}"
    )
    for name, args in SHAPES.items():
        if time.time() - T0 > BUDGET_S - 60:
            say(f"{name}: SKIPPED (time budget)")
            continue
        try:
            run_shape(name, args)
        except Exception as e:  # noqa: BLE001
            say(f"{name} stopped: {first_line(e)}")
    say(f"total {time.time() - T0:.0f} s")


if __name__ == "__main__":
    main()
