"""Sweep: fused linear cross-entropy's chunk size (lesson 11) at T=16384 H=4096 V=128256 bf16, against eager
F.cross_entropy(x @ W.T) and Liger-Kernel's fused version (when installed): time (do_bench) and peak memory.
python3 bench/sweeps/l11.py [--cpu]"""

import os
import sys

cpu = "--cpu" in sys.argv
if cpu:
    os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from lessons.l11_backward_passes import default_chunk, fused_linear_cross_entropy  # noqa: E402
from utils import timing  # noqa: E402

out = open(os.path.join(os.environ["OUT"], "sweep_l11.txt"), "w") if os.environ.get("OUT") else None


def say(*a):
    line = " ".join(str(x) for x in a)
    print(line, flush=True)
    if out:
        out.write(line + "\n")
        out.flush()


dev = "cpu" if cpu else "cuda"
dt = torch.float32 if cpu else torch.bfloat16
T, H, V = (64, 32, 300) if cpu else (16384, 4096, 128256)
torch.manual_seed(0)
x = torch.randn(T, H, device=dev, dtype=dt).requires_grad_()
W = (torch.randn(V, H, device=dev, dtype=dt) / H**0.5).requires_grad_()
labels = torch.randint(0, V, (T,), device=dev)


def eager():
    return torch.autograd.grad(F.cross_entropy(x @ W.T, labels), (x, W))


def fused(chunk):
    return lambda: torch.autograd.grad(fused_linear_cross_entropy(x, W, labels, chunk=chunk), (x, W))


def timed(fn):
    if cpu:
        fn()
        return float("nan"), float("nan")
    import triton

    fn()
    peak = timing.peak_memory(fn) / 1e6
    ms = triton.testing.do_bench(fn, warmup=3, rep=200)
    return ms, peak


ref = [g.float() for g in eager()]
flops = 6 * T * H * V
say(f"T={T} H={H} V={V} default_chunk={default_chunk(T, H, V)}")
base_ms, base_mb = timed(eager)
say(f"eager: {base_ms:.2f} ms {flops / base_ms / 1e9:.0f} TFLOP/s peak {base_mb:.0f} MB")
candidates = {f"chunk={c}": fused(c) for c in ((8, 16, 64) if cpu else (512, 1024, 2048, 4096, 8192))}
try:
    from liger_kernel.transformers.functional import LigerFusedLinearCrossEntropyFunction as Liger  # noqa: F401

    candidates["liger"] = lambda: torch.autograd.grad(Liger.apply(x, W, labels), (x, W))
except Exception as e:  # noqa: BLE001
    try:
        from liger_kernel.ops.fused_linear_cross_entropy import LigerFusedLinearCrossEntropyFunction as Liger

        candidates["liger"] = lambda: torch.autograd.grad(Liger.apply(x, W, labels), (x, W))
    except Exception as e2:  # noqa: BLE001
        say("liger unavailable:", str(e).splitlines()[0], "|", str(e2).splitlines()[0])
best = None
for name, fn in candidates.items():
    try:
        got = fn()
        err = max(float((g.float() - r).abs().max() / r.abs().max().clamp_min(1e-30)) for g, r in zip(got, ref))
        ok = err < (2e-2 if not cpu else 1e-4)
        del got
        ms, mb = timed(fn)
        say(
            f"{name}: {'ok' if ok else 'FAIL'} relerr {err:.2e} {ms:.2f} ms {flops / ms / 1e9:.0f} TFLOP/s "
            f"x eager {base_ms / ms:.3f} peak {mb:.0f} MB ({base_mb / mb:.2f}x lower)"
        )
        if ok and name != "liger" and (best is None or ms < best[1]):
            best = (name, ms, mb)
    except Exception as e:  # noqa: BLE001
        say(f"{name}: ERROR {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    torch.cuda.empty_cache() if not cpu else None
say("best:", best)
