"""Lesson 08 sweep g, 2026-11-28 (written, not yet run on a GPU): a grid-wide barrier against a launch boundary, the
measurement before a persistent decode kernel (issues 15 and 11).

Why: at batch 1 every GEMV of the decode step runs within a few microseconds of a copy of its own bytes, and a token
takes about 130 launches (results/h100-2026-11-28-s14: int4 and int8 both at 1.44x the bf16 step although int4
reads half int8's bytes). What is left is the cost of a launch boundary. A persistent kernel replaces boundaries by
grid-wide barriers: every program arrives, the last one lets all go on. Is a barrier cheaper than a boundary that
programmatic dependent launch (PDL) already overlaps? This sweep measures it on the MLP half of a layer (gate/up with
SwiGLU, then down with the residual add), for every layer of a model, the same GEMV code in every variant:

  lesson 08's kernels, PDL   decode_gemv twice a layer as the step launches them (the reference point)
  two launches a layer       the prototype's phase kernels, one program a row block, launched in order
  two launches, PDL          the same, launched early (the next kernel let launch after the loop)
  one launch a layer         one persistent kernel a layer (one program an SM), a barrier between the phases
  one launch for all layers  one persistent kernel for the whole model's MLPs: 2 x layers barriers, no boundary

Each variant is checked against a float32 reference, and the prototype's variants against each other bit for bit
(the same rows, the same loop, the same order: a barrier that let a program read g too early would show). Timings
are CUDA graph replays, L2 cleared before each repetition, at TinyLlama's shape (22 layers, C 2048, F 5632) and
Llama-3.2-1B's (16 layers, C 2048, F 8192), random bf16 weights, each model's weights its own (no L2 reuse).

The barrier: sync[0] counts arrivals, sync[1] is a generation number. A program reads the generation, waits until all
its warps have stored (tl.debug_barrier), adds 1 to the count (acq_rel); the last to arrive puts the count back to 0
and adds 1 to the generation (release); the others spin until the generation moves (acquire). Every program of the
grid must be resident at once (one an SM), or the spinning ones would wait for programs never started. Under the
interpreter, which runs programs one after another, the persistent variants run with one program, which is always
the last to arrive.

Run from the repo root: ``PYTHONPATH=$PWD python3 bench/sweeps/l08g.py`` on a GPU (< 120 s),
``... l08g.py --cpu`` under the interpreter (a tiny model, no timings: a smoke test of every variant).
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
import triton.language as tl  # noqa: E402
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait  # noqa: E402

import utils  # noqa: E402
from lessons import l08_llama_model as L8  # noqa: E402

ENV = utils.mode.current()
LINES = []


def say(line=""):
    print(line, flush=True)
    LINES.append(line)
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "sweep_l08g.txt"), "w") as f:
            f.write("\n".join(LINES) + "\n")


def gtime(fn):
    """GPU ms of fn() replayed from a CUDA graph, L2 cleared before each repetition; None on the CPU."""
    if CPU:
        fn()
        return None
    import triton.testing

    from bench.common import graphed

    return triton.testing.do_bench(graphed(fn), warmup=5, rep=30)


@triton.jit
def _row_block(x_ptr, w_ptr, out_ptr, N, K, rb, SWIGLU: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
               PIPE: tl.constexpr):  # fmt: skip
    """Rows rb * BLOCK_N ... of out = x w^T (SWIGLU: silu(gate) * up, the up rows N further down w; else x + x w^T,
    out being x: the residual add in place, each row read and written by this program only)."""
    rows = rb * BLOCK_N + tl.arange(0, BLOCK_N)
    keep = rows < N
    cols = tl.arange(0, BLOCK_K)
    w_rows = w_ptr + tl.minimum(rows, N - 1).to(tl.int64)[:, None] * K + cols[None, :]
    acc = tl.zeros([BLOCK_N, BLOCK_K], tl.float32)
    acc_up = tl.zeros([BLOCK_N, BLOCK_K], tl.float32)
    full = (K // BLOCK_K) * BLOCK_K
    for k in tl.range(0, full, BLOCK_K, num_stages=PIPE):
        xk = tl.load(x_ptr + k + cols).to(tl.float32)
        acc += tl.load(w_rows + k).to(tl.float32) * xk[None, :]
        if SWIGLU:
            acc_up += tl.load(w_rows + N * K + k).to(tl.float32) * xk[None, :]
    for k in range(full, K, BLOCK_K):
        in_k = k + cols < K
        xk = tl.load(x_ptr + k + cols, mask=in_k, other=0.0).to(tl.float32)
        mask = keep[:, None] & in_k[None, :]
        acc += tl.load(w_rows + k, mask=mask, other=0.0).to(tl.float32) * xk[None, :]
        if SWIGLU:
            acc_up += tl.load(w_rows + N * K + k, mask=mask, other=0.0).to(tl.float32) * xk[None, :]
    y = tl.sum(acc, 1).to(x_ptr.dtype.element_ty).to(tl.float32)
    if SWIGLU:
        u = tl.sum(acc_up, 1).to(x_ptr.dtype.element_ty).to(tl.float32)
        y = y * tl.sigmoid(y) * u
    else:
        y += tl.load(out_ptr + rows, mask=keep, other=0.0).to(tl.float32)
    tl.store(out_ptr + rows, y.to(out_ptr.dtype.element_ty), mask=keep)


@triton.jit
def _grid_barrier(sync_ptr, P):
    """Every one of the P programs waits here until all P have arrived (see the module docstring)."""
    tl.debug_barrier()  # this program's warps have all stored
    gen = tl.atomic_add(sync_ptr + 1, 0, sem="relaxed")
    arrived = tl.atomic_add(sync_ptr, 1, sem="acq_rel")
    if arrived == P - 1:
        tl.atomic_xchg(sync_ptr, 0, sem="relaxed")
        tl.atomic_add(sync_ptr + 1, 1, sem="release")
    else:
        while tl.atomic_add(sync_ptr + 1, 0, sem="acquire") == gen:
            pass
    tl.debug_barrier()


@triton.jit
def phase_kernel(x_ptr, w_ptr, out_ptr, N, K, SWIGLU: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                 PIPE: tl.constexpr, PDL: tl.constexpr):  # fmt: skip
    """One GEMV, one program a row block; PDL: launched early, waits before it reads x, lets the next launch after
    its loop (the weights' loads are the compiler's, after the wait, as lesson 08's "pipe" loop)."""
    if PDL:
        gdc_wait()
    _row_block(x_ptr, w_ptr, out_ptr, N, K, tl.program_id(0), SWIGLU, BLOCK_N, BLOCK_K, PIPE)
    if PDL:
        gdc_launch_dependents()


@triton.jit
def mlp_persistent_kernel(x_ptr, w13_ptr, w2_ptr, g_ptr, sync_ptr, C, F, n_layers,
                          BN1: tl.constexpr, BK1: tl.constexpr, BN2: tl.constexpr, BK2: tl.constexpr,
                          PIPE: tl.constexpr):  # fmt: skip
    """n_layers MLPs in one launch, x updated in place: for each layer g = silu(x w1^T) * (x w3^T), barrier,
    x += g w2^T, barrier. The programs share the row blocks of each phase in turn."""
    pid = tl.program_id(0)
    P = tl.num_programs(0)
    for layer in range(n_layers):
        w13 = w13_ptr + tl.cast(layer, tl.int64) * 2 * F * C
        w2 = w2_ptr + tl.cast(layer, tl.int64) * C * F
        for rb in range(pid, tl.cdiv(F, BN1), P):
            _row_block(x_ptr, w13, g_ptr, F, C, rb, True, BN1, BK1, PIPE)
        _grid_barrier(sync_ptr, P)
        for rb in range(pid, tl.cdiv(C, BN2), P):
            _row_block(g_ptr, w2, x_ptr, C, F, rb, False, BN2, BK2, PIPE)
        _grid_barrier(sync_ptr, P)


def make_model(n_layers, C, F, dtype, device, seed=0):
    gen = torch.Generator(device=device).manual_seed(seed)
    w13 = torch.randn(n_layers, 2 * F, C, generator=gen, device=device, dtype=torch.float32) / C**0.5
    # No norm between the layers here: each MLP adds about (its input)^2 / 8, so x starts small and w2 is scaled
    # down, else x overflows within ten layers (the first run on a GPU: every result NaN, the float32 truth too)
    w2 = torch.randn(n_layers, C, F, generator=gen, device=device, dtype=torch.float32) / (4 * F**0.5)
    x0 = torch.randn(1, C, generator=gen, device=device, dtype=torch.float32) / 4
    return w13.to(dtype), w2.to(dtype), x0.to(dtype)


def reference(w13, w2, x0):
    x = x0.float()
    F = w2.shape[2]
    for w13_l, w2_l in zip(w13.float(), w2.float()):
        gu = x @ w13_l.T
        gate, up = gu[:, :F].to(x0.dtype).float(), gu[:, F:].to(x0.dtype).float()
        g = (gate * torch.sigmoid(gate) * up).to(x0.dtype).float()
        x = (x + (g @ w2_l.T).to(x0.dtype).float()).to(x0.dtype).float()
    return x


def variants(w13, w2, x, g, sync, tiles, programs):
    n_layers, C, F = w13.shape[0], w13.shape[2], w13.shape[1] // 2
    (bn1, bk1, warps1, pipe1), (bn2, bk2, warps2, pipe2) = tiles
    pdl = {"launch_pdl": True} if ENV.supports_pdl else {}

    def lesson():
        s1, s2 = L8.GemvSchedule(bn1, bk1, warps1, pipe1), L8.GemvSchedule(bn2, bk2, warps2, pipe2)
        for i in range(n_layers):
            L8.decode_gemv(x, w13[i], swiglu=True, out=g, schedule=s1, pdl=L8.DECODE_FUSIONS.pdl, loop="pipe")
            L8.decode_gemv(g, w2[i], residual=x, out=x, schedule=s2, pdl=L8.DECODE_FUSIONS.pdl, loop="pipe")

    def two(early):
        def run():
            for i in range(n_layers):
                phase_kernel[(triton.cdiv(F, bn1),)](x, w13[i], g, F, C, SWIGLU=True, BLOCK_N=bn1, BLOCK_K=bk1,
                                                     PIPE=pipe1, PDL=early and bool(pdl), num_warps=warps1,
                                                     **(pdl if early else {}))  # fmt: skip
                phase_kernel[(triton.cdiv(C, bn2),)](g, w2[i], x, C, F, SWIGLU=False, BLOCK_N=bn2, BLOCK_K=bk2,
                                                     PIPE=pipe2, PDL=early and bool(pdl), num_warps=warps2,
                                                     **(pdl if early else {}))  # fmt: skip

        return run

    def persistent(per_layer):
        def run():
            for i in range(n_layers) if per_layer else [None]:
                a, b, n = (w13, w2, n_layers) if i is None else (w13[i], w2[i], 1)
                mlp_persistent_kernel[(programs,)](x, a, b, g, sync, C, F, n, BN1=bn1, BK1=bk1, BN2=bn2, BK2=bk2,
                                                   PIPE=max(pipe1, pipe2), num_warps=max(warps1, warps2))  # fmt: skip

        return run

    return {
        "lesson 08's kernels, PDL": lesson,
        "two launches a layer": two(False),
        "two launches, PDL": two(True),
        "one launch a layer": persistent(True),
        "one launch for all layers": persistent(False),
    }


def main():
    """The sweep (see the module docstring); l08h.py imports this module for its barrier."""
    say(
        f"lesson 08 sweep g (a grid barrier against a launch boundary) on "
        f"{ENV.gpu_name if ENV.is_gpu else 'CPU (interpreter)'}, torch {torch.__version__}, triton {triton.__version__}, "
        f"{ENV.sm_count} SMs, PDL: {ENV.supports_pdl}"
    )
    device = "cpu" if CPU else "cuda"
    dtype = torch.float32 if CPU else torch.bfloat16
    if CPU:
        MODELS = {"tiny": (3, 48, 80, ((4, 16, 4, 2), (4, 32, 4, 2)))}
    else:
        MODELS = {  # tiles: lesson 08's DECODE_PIPE_SCHEDULES rows for gate/up and down (BLOCK_N, BLOCK_K, warps, PIPE)
            "TinyLlama-1.1B": (22, 2048, 5632, ((4, 1024, 4, 4), (4, 512, 4, 4))),
            "Llama-3.2-1B": (16, 2048, 8192, ((4, 1024, 4, 4), (4, 1024, 4, 3))),
        }
    programs = 1 if CPU else ENV.sm_count
    for name, (n_layers, C, F, tiles) in MODELS.items():
        w13, w2, x0 = make_model(n_layers, C, F, dtype, device)
        truth = reference(w13, w2, x0)
        if not torch.isfinite(truth).all():
            say(f"== {name}: the float32 truth is not finite: the model's scales are wrong, nothing to check against")
            continue
        x = x0.clone()
        g = torch.empty(1, F, device=device, dtype=dtype)
        sync = torch.zeros(2, device=device, dtype=torch.int32)
        weight_bytes = (w13.numel() + w2.numel()) * w13.element_size()
        say(f"== {name}: {n_layers} MLPs, C {C}, F {F}, {weight_bytes / 1e6:.0f} MB of weights, {programs} programs "
            f"for the persistent kernels")  # fmt: skip
        runs = variants(w13, w2, x, g, sync, tiles, programs)
        outs = {}
        for label, fn in runs.items():
            x.copy_(x0)
            g.fill_(float("nan"))
            try:
                fn()
                if not CPU:
                    torch.cuda.synchronize()
            except Exception as e:  # noqa: BLE001
                say(f"   {label:28s} ERROR {type(e).__name__}: {str(e).splitlines()[0][:150] if str(e) else ''}")
                continue
            outs[label] = x.clone()
            # what the MLPs added, not x: x0 would hide a wrong MLP
            rel = float((x.float() - truth).norm() / (truth - x0.float()).norm())
            same = "" if label == "lesson 08's kernels, PDL" else (
                "  same bits as two launches" if "two launches a layer" in outs and torch.equal(x, outs["two launches a layer"])
                else "  <-- DIFFERS from two launches")  # fmt: skip
            ok = rel < (1e-5 if CPU else 2e-2)
            say(f"   {label:28s} checked: {rel:.1e} from float32{same}" + ("" if ok else "  <-- FAIL"))
            if not ok or "DIFFERS" in same:
                continue
            ms = gtime(fn)  # x keeps moving from replay to replay: the same work, other numbers
            if ms is not None:
                say(f"   {label:28s} {ms * 1e3:8.1f} us, {ms * 1e3 / n_layers:6.2f} us a layer, "
                    f"{weight_bytes / ms / 1e6:6.0f} GB/s")  # fmt: skip
        if not CPU:  # read + write as many bytes as the MLPs read: half of them copied, in one launch
            half = (w13.numel() + w2.numel()) // 2
            src, dst = w13.view(-1)[:half], torch.empty(half, device=device, dtype=dtype)
            ms = gtime(lambda: dst.copy_(src))
            say(f"   {'a copy of as many bytes':28s} {ms * 1e3:8.1f} us, {weight_bytes / ms / 1e6:6.0f} GB/s")
    say(f"total {time.time() - T0:.0f} s")


if __name__ == "__main__":
    main()
