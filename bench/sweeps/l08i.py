"""Lesson 08 sweep i, 2026-11-28 (written after l08g and l08h ran on an H200): a persistent GEMV whose pipeline
runs across its row blocks, the measurement before trying a persistent decode step again (issues 15 and 11).

Why: l08g and l08h measured one persistent kernel a layer at 0.54-0.78x lesson 08's launches (H200, triton 3.6).
Their persistent programs walk row blocks one after another, each row block a K loop of 2 to 11 steps: the loop's
pipeline fills and drains once a row block, and with one or two programs an SM nothing else hides the wait. The
lesson's kernels hide it with many resident programs (one a row block). Here a program's row blocks and their K
steps are one flat loop (iteration i: row block pid + (i // K_STEPS) * P, K step i % K_STEPS), pipelined by Triton
as a whole, so the loads of the next row block are in flight while this one's last step is summed and stored.
The sums are the same as one program a row block at the same tile (the same columns added in the same order).

The MLP half of every layer, as l08g (gate/up with SwiGLU, then down with the residual add), the same model, the
same float32 reference, for several tiles (BLOCK_N, BLOCK_K, pipeline depth, warps) and 1, 2 or 4 programs an SM
(a persistent variant only where that many are resident):

  lesson 08's kernels, PDL    decode_gemv twice a layer as the step launches them (the reference point)
  flat, two launches, PDL     the flat loop, one launch a GEMV, launched early (no barrier): does it keep up alone?
  flat, one launch a layer    one persistent kernel a layer, l08g's grid barrier between the phases
  flat, one launch in all     one persistent kernel for all the layers' MLPs

Every variant is checked against the float32 reference (what the MLPs added: x0 would hide a wrong MLP; 5e-2 in
bf16, a rounding flip of x is 3 % of its element's update) and the flat variants of a tile against each other bit
for bit, with l08g's one-program-a-row-block kernel at that tile too (the same sums, so the same bits).

Its first run (H200, results/h200-2026-11-28-s15/sweeps/l08i.txt) hung at the first tile's "one launch in all" at
4 programs an SM and was stopped by its time limit: the residency check had compiled the kernel with n_layers = 1,
which Triton specializes (the layer loop gone: 128 registers a thread, 4 programs an SM), while the launch for all
layers ran another compile (198 registers, 2 an SM), so half its programs never started and the others spun at the
barrier (the two compiles' registers confirmed offline for sm_90). Since that run each of the two is checked.

Run from the repo root: ``PYTHONPATH=$PWD python3 bench/sweeps/l08i.py`` on a GPU (< 300 s),
``... l08i.py --cpu`` under the interpreter (a tiny model, no timings).
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
from bench.sweeps.kit import Log, gtime  # noqa: E402
from bench.sweeps.l08g import _grid_barrier, make_model, phase_kernel, reference  # noqa: E402
from lessons import l08_llama_model as L8  # noqa: E402

ENV = utils.mode.current()
say = Log("l08i")


@triton.jit
def _flat_phase(x_ptr, w_ptr, out_ptr, N, K, pid, P, SWIGLU: tl.constexpr, BLOCK_N: tl.constexpr,
                BLOCK_K: tl.constexpr, PIPE: tl.constexpr):  # fmt: skip
    """This program's share of out = x w^T (row blocks pid, pid + P, ...), its row blocks' K steps one pipelined
    loop. SWIGLU: silu(gate) * up, the up rows N further down w; else x + x w^T into out (the residual, in place).
    K is a multiple of BLOCK_K (the host checks)."""
    k_steps = K // BLOCK_K
    mine = tl.cdiv(tl.maximum(tl.cdiv(N, BLOCK_N) - pid, 0), P)
    cols = tl.arange(0, BLOCK_K)
    acc = tl.zeros([BLOCK_N, BLOCK_K], tl.float32)
    acc_up = tl.zeros([BLOCK_N, BLOCK_K], tl.float32)
    for i in tl.range(0, mine * k_steps, num_stages=PIPE):
        j = i // k_steps
        k = (i - j * k_steps) * BLOCK_K
        rows = (pid + j * P) * BLOCK_N + tl.arange(0, BLOCK_N)
        w_rows = w_ptr + tl.minimum(rows, N - 1).to(tl.int64)[:, None] * K + k + cols[None, :]
        xk = tl.load(x_ptr + k + cols).to(tl.float32)
        acc += tl.load(w_rows).to(tl.float32) * xk[None, :]
        if SWIGLU:
            acc_up += tl.load(w_rows + N * K).to(tl.float32) * xk[None, :]
        if k == K - BLOCK_K:  # this row block's last step: its rows are done
            keep = rows < N
            y = tl.sum(acc, 1).to(x_ptr.dtype.element_ty).to(tl.float32)
            if SWIGLU:
                u = tl.sum(acc_up, 1).to(x_ptr.dtype.element_ty).to(tl.float32)
                y = y * tl.sigmoid(y) * u
            else:
                y += tl.load(out_ptr + rows, mask=keep, other=0.0).to(tl.float32)
            tl.store(out_ptr + rows, y.to(out_ptr.dtype.element_ty), mask=keep)
            acc = tl.zeros([BLOCK_N, BLOCK_K], tl.float32)
            acc_up = tl.zeros([BLOCK_N, BLOCK_K], tl.float32)


@triton.jit
def flat_phase_kernel(x_ptr, w_ptr, out_ptr, N, K, SWIGLU: tl.constexpr, BLOCK_N: tl.constexpr,
                      BLOCK_K: tl.constexpr, PIPE: tl.constexpr, PDL: tl.constexpr):  # fmt: skip
    """One GEMV by a grid of flat-loop programs; PDL: waits before it reads x, lets the next launch after its loop."""
    if PDL:
        gdc_wait()
    _flat_phase(x_ptr, w_ptr, out_ptr, N, K, tl.program_id(0), tl.num_programs(0), SWIGLU, BLOCK_N, BLOCK_K, PIPE)
    if PDL:
        gdc_launch_dependents()


@triton.jit
def mlp_flat_kernel(x_ptr, w13_ptr, w2_ptr, g_ptr, sync_ptr, C, F, n_layers, BN: tl.constexpr, BK1: tl.constexpr,
                    BK2: tl.constexpr, PIPE: tl.constexpr):  # fmt: skip
    """n_layers MLPs in one launch, x updated in place, a grid barrier after each phase (l08g's)."""
    pid = tl.program_id(0)
    P = tl.num_programs(0)
    for layer in range(n_layers):
        w13 = w13_ptr + tl.cast(layer, tl.int64) * 2 * F * C
        w2 = w2_ptr + tl.cast(layer, tl.int64) * C * F
        _flat_phase(x_ptr, w13, g_ptr, F, C, pid, P, True, BN, BK1, PIPE)
        _grid_barrier(sync_ptr, P)
        _flat_phase(g_ptr, w2, x_ptr, C, F, pid, P, False, BN, BK2, PIPE)
        _grid_barrier(sync_ptr, P)


def resident_per_sm(compiled, num_warps) -> int:
    """How many programs of this compiled kernel an SM holds at once (registers, threads, shared memory), from the
    GPU's own properties (an H100's where torch does not give them). As l08h.py's (which runs on import)."""
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    regs = getattr(props, "regs_per_multiprocessor", 65536)
    threads = getattr(props, "max_threads_per_multi_processor", 2048)
    smem = getattr(props, "shared_memory_per_multiprocessor", 233472)
    compiled._init_handles()
    per_program = 32 * num_warps
    return min(regs // max(1, compiled.n_regs * per_program), threads // per_program,
               smem // (compiled.metadata.shared + 1024), 32)  # fmt: skip


def main():
    say(
        f"lesson 08 sweep i (a persistent GEMV pipelined across its row blocks) on "
        f"{ENV.gpu_name if ENV.is_gpu else 'CPU (interpreter)'}, torch {torch.__version__}, "
        f"triton {triton.__version__}, {ENV.sm_count} SMs, PDL: {ENV.supports_pdl}"
    )
    device = "cpu" if CPU else "cuda"
    dtype = torch.float32 if CPU else torch.bfloat16
    pdl = {"launch_pdl": True} if ENV.supports_pdl else {}
    if CPU:
        models = {"tiny": (3, 48, 80)}
        tiles = [(4, 16, 16, 2, 4), (2, 16, 16, 3, 4)]  # BLOCK_N, BLOCK_K gate/up, BLOCK_K down, depth, warps
        per_sm_tries, sms = (1, 3), 1
    else:
        models = {"TinyLlama-1.1B": (22, 2048, 5632), "Llama-3.2-1B": (16, 2048, 8192)}
        tiles = [(4, 1024, 512, 4, 4), (4, 1024, 512, 6, 4), (4, 512, 512, 6, 4), (8, 512, 512, 4, 4),
                 (8, 512, 512, 8, 4), (8, 512, 512, 6, 8), (16, 256, 256, 8, 4), (4, 256, 256, 10, 4)]  # fmt: skip
        per_sm_tries, sms = (1, 2, 4), ENV.sm_count
    for name, (n_layers, C, F) in models.items():
        w13, w2, x0 = make_model(n_layers, C, F, dtype, device)
        truth = reference(w13, w2, x0)
        added = (truth - x0.float()).norm()
        x = x0.clone()
        g = torch.empty(1, F, device=device, dtype=dtype)
        sync = torch.zeros(2, device=device, dtype=torch.int32)
        weight_bytes = (w13.numel() + w2.numel()) * w13.element_size()
        say(f"== {name}: {n_layers} MLPs, C {C}, F {F}, {weight_bytes / 1e6:.0f} MB of weights")

        def check_and_time(label, fn, bits=None):
            x.copy_(x0)
            g.fill_(float("nan"))
            try:
                fn()
                if not CPU:
                    torch.cuda.synchronize()
            except Exception as e:  # noqa: BLE001
                say(f"   {label:44s} ERROR {type(e).__name__}: {str(e).splitlines()[0][:150] if str(e) else ''}")
                return None
            rel = float((x.float() - truth).norm() / added)
            same = "" if bits is None else ("  same bits" if torch.equal(x, bits) else "  <-- NOT the same bits")
            ok = rel < (1e-5 if CPU else 5e-2) and "NOT" not in same
            line = f"   {label:44s} {rel:.1e} from float32{same}" + ("" if ok else "  <-- FAIL")
            result = x.clone()  # before the timing, which runs fn again (x moving on from replay to replay)
            if ok:
                ms = gtime(fn)
                if ms is not None:
                    line += f"  {ms * 1e3:7.1f} us, {ms * 1e3 / n_layers:5.2f} us a layer, {weight_bytes / ms / 1e6:5.0f} GB/s"
            say(line)
            return result if ok else None

        def lesson():
            s1 = L8.gemv_schedule(2 * F, C, "pipe")
            s2 = L8.gemv_schedule(C, F, "pipe")
            for i in range(n_layers):
                L8.decode_gemv(x, w13[i], swiglu=True, out=g, schedule=s1, pdl=L8.DECODE_FUSIONS.pdl, loop="pipe")
                L8.decode_gemv(g, w2[i], residual=x, out=x, schedule=s2, pdl=L8.DECODE_FUSIONS.pdl, loop="pipe")

        check_and_time("lesson 08's kernels, PDL", lesson)
        for bn, bk1, bk2, depth, warps in tiles:
            if C % bk1 or F % bk2:
                say(f"   tile {(bn, bk1, bk2, depth, warps)}: SKIPPED (BLOCK_K divides neither C nor F)")
                continue
            say(f"   tile BLOCK_N {bn}, BLOCK_K {bk1} / {bk2}, depth {depth}, {warps} warps")

            def rows(i, bn=bn, bk1=bk1, bk2=bk2, depth=depth, warps=warps):  # l08g's kernel: one program a row block
                phase_kernel[(triton.cdiv(F, bn),)](x, w13[i], g, F, C, SWIGLU=True, BLOCK_N=bn, BLOCK_K=bk1,
                                                    PIPE=depth, PDL=bool(pdl), num_warps=warps, **pdl)  # fmt: skip
                phase_kernel[(triton.cdiv(C, bn),)](g, w2[i], x, C, F, SWIGLU=False, BLOCK_N=bn, BLOCK_K=bk2,
                                                    PIPE=depth, PDL=bool(pdl), num_warps=warps, **pdl)  # fmt: skip

            bits = check_and_time("one program a row block (l08g's), PDL", lambda: [rows(i) for i in range(n_layers)])
            if bits is None:
                continue
            meta = dict(BN=bn, BK1=bk1, BK2=bk2, PIPE=depth, num_warps=warps)
            resident = {True: 1, False: 1}  # per layer (n_layers 1), in all: two compiled kernels (see the docstring)
            if not CPU:
                for per_layer, n in ((True, 1), (False, n_layers)):
                    compiled = mlp_flat_kernel.warmup(x, w13, w2, g, sync, C, F, n, grid=(1,), **meta)
                    resident[per_layer] = resident_per_sm(compiled, warps)
            for per_sm in per_sm_tries:
                P = per_sm * sms

                def two(P=P, bn=bn, bk1=bk1, bk2=bk2, depth=depth, warps=warps):
                    for i in range(n_layers):
                        flat_phase_kernel[(P,)](x, w13[i], g, F, C, SWIGLU=True, BLOCK_N=bn, BLOCK_K=bk1,
                                                PIPE=depth, PDL=bool(pdl), num_warps=warps, **pdl)  # fmt: skip
                        flat_phase_kernel[(P,)](g, w2[i], x, C, F, SWIGLU=False, BLOCK_N=bn, BLOCK_K=bk2,
                                                PIPE=depth, PDL=bool(pdl), num_warps=warps, **pdl)  # fmt: skip

                def persistent(per_layer, P=P, meta=meta):
                    def run():
                        for i in range(n_layers) if per_layer else [None]:
                            a, b, n = (w13, w2, n_layers) if i is None else (w13[i], w2[i], 1)
                            mlp_flat_kernel[(P,)](x, a, b, g, sync, C, F, n, **meta)

                    return run

                check_and_time(f"  {per_sm} an SM: flat, two launches, PDL", two, bits)
                for per_layer, label in ((True, "one launch a layer"), (False, "one launch in all")):
                    if per_sm > resident[per_layer] or (CPU and per_sm > 1):
                        say(f"     {per_sm} an SM: {label} SKIPPED ({resident[per_layer]} resident an SM at most)")
                    else:
                        check_and_time(f"  {per_sm} an SM: flat, {label}", persistent(per_layer), bits)
        if not CPU:  # read + write as many bytes as the MLPs read: half of them copied, in one launch
            half = (w13.numel() + w2.numel()) // 2
            src, dst = w13.view(-1)[:half], torch.empty(half, device=device, dtype=dtype)
            ms = gtime(lambda: dst.copy_(src))
            say(f"   {'a copy of as many bytes':44s} {ms * 1e3:7.1f} us, {weight_bytes / ms / 1e6:5.0f} GB/s")
    say(f"total {time.time() - T0:.0f} s")


if __name__ == "__main__":
    main()
