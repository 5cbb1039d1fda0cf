"""Where a launch's host time goes: each launcher called in a loop under cProfile (tiny GPU work, so host-bound)."""
import cProfile, io, os, pstats, time
import torch
import utils
utils.setup(quiet=True)
from lessons import l05_matmul as L5, l06_flash_attention as L6

OUT = os.environ.get("OUT")
log = open(os.path.join(OUT, "hostprof.txt"), "w") if OUT else None
def say(*a):
    s = " ".join(str(x) for x in a); print(s, flush=True)
    if log: log.write(s + "\n"); log.flush()

bf = torch.bfloat16
a = torch.randn(1024, 1024, device="cuda", dtype=bf); b = torch.randn(1024, 1024, device="cuda", dtype=bf)
q = torch.randn(1, 333, 32, 64, device="cuda", dtype=bf); k = torch.randn(1, 333, 4, 64, device="cuda", dtype=bf); v = torch.randn_like(k)
cases = {
    "torch.matmul 1024": lambda: torch.matmul(a, b),
    "matmul 1024": lambda: L5.matmul(a, b),
    "matmul_kernel direct (no checks)": lambda: L5.matmul_kernel[L5.matmul_grid(1024, 1024)](a, b, a, a, 1024, 1024, 1024, 1024, 1, 1024, 1, 1024, 1, HAS_BIAS=False, ACTIVATION=None, ALIGN=16),
    "persistent+TMA 1024": lambda: L5.matmul_persistent_tma(a, b),
    "attention T=333 (TMA)": lambda: L6.attention(q, k, v, True),
    "attention_pointers T=333": lambda: L6.attention_pointers(q, k, v, True),
    "SDPA T=333": lambda: torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2).repeat_interleave(8, 1), v.transpose(1, 2).repeat_interleave(8, 1), is_causal=True),
}
for name, fn in cases.items():
    try:
        for _ in range(20): fn()
        torch.cuda.synchronize(); n = 300; t = time.perf_counter()
        for _ in range(n): fn()
        host = (time.perf_counter() - t) / n * 1e6; torch.cuda.synchronize()
        say(f"== {name}: {host:.1f} us host per call")
        if "torch" in name or "SDPA" in name: continue
        pr = cProfile.Profile(); pr.enable()
        for _ in range(200): fn()
        pr.disable(); torch.cuda.synchronize()
        s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(14); say(s.getvalue()[-2600:])
    except Exception as e:
        say(name, "ERR", str(e).splitlines()[0][:200])
