"""Lesson 05 diagnosis on a GPU: host cost per call, the autotuner's picks, and every config timed alone."""
import os, sys, time, traceback
import torch, triton, triton.language as tl
from triton.testing import do_bench
import utils
utils.setup(quiet=True)
from lessons import l05_matmul as L

OUT = os.environ.get("OUT")
log = open(os.path.join(OUT, "diag05.txt"), "w") if OUT else None
def say(*a):
    s = " ".join(str(x) for x in a); print(s, flush=True)
    if log: log.write(s + "\n"); log.flush()

say(torch.cuda.get_device_name(), "torch", torch.__version__, "triton", triton.__version__)
# 1. host cost per call (tiny shape: GPU time negligible)
a = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16); b = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
for name, fn in [("torch.matmul", torch.matmul), ("matmul", L.matmul), ("persistent", L.matmul_persistent),
                 ("persistent+TMA", L.matmul_persistent_tma), ("autotuned", L.matmul_autotuned)]:
    try:
        for _ in range(5): fn(a, b)
        torch.cuda.synchronize(); t = time.perf_counter(); n = 300
        for _ in range(n): fn(a, b)
        host = (time.perf_counter() - t) / n * 1e6; torch.cuda.synchronize()
        say(f"host us/call {name}: {host:.1f}")
    except Exception as e: say("host", name, "ERR", str(e).splitlines()[0])
# a variant of tile_dot: rows/cols wrapped (% M, % N) so only K is masked, with contiguity hints (Triton tutorial style)
@triton.jit
def wrap_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, ALIGN: tl.constexpr):
    K, N = K // ALIGN * ALIGN, N // ALIGN * ALIGN
    stride_am, stride_bk, stride_cm = stride_am // ALIGN * ALIGN, stride_bk // ALIGN * ALIGN, stride_cm // ALIGN * ALIGN
    pid_m, pid_n = L.grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    am = tl.max_contiguous(tl.multiple_of(offs_m % M, BLOCK_M), BLOCK_M)
    bn = tl.max_contiguous(tl.multiple_of(offs_n % N, BLOCK_N), BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + am[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + bn[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_K, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_K, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak; b_ptrs += BLOCK_K * stride_bk
    c = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c, acc.to(c_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))

C = lambda *x: dict(zip(("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps", "num_stages"), x))
BIG = [C(128, 256, 64, 8, 4), C(128, 256, 64, 8, 3), C(256, 128, 64, 8, 3), C(128, 128, 64, 4, 4), C(128, 128, 64, 8, 4),
       C(128, 128, 128, 8, 3), C(64, 256, 64, 4, 4), C(64, 128, 64, 4, 4), C(128, 64, 64, 4, 4)]
SMALL = [C(16, 64, 128, 4, 4), C(16, 32, 256, 4, 3), C(32, 64, 128, 4, 4), C(16, 128, 128, 4, 4), C(16, 64, 256, 4, 4),
         C(16, 32, 128, 2, 4), C(16, 32, 256, 2, 4), C(32, 32, 256, 4, 4), C(64, 64, 64, 4, 4)]
SHAPES = [(1024, 1024, 1024), (2048, 2048, 2048), (3000, 5000, 1000), (16, 4096, 4096), (4096, 4096, 4096), (8192, 8192, 8192)]
t_start = time.time()
for dtype in (torch.bfloat16, torch.float16):
    for M, N, K in SHAPES:
        if time.time() - t_start > float(os.environ.get("DIAG_BUDGET", 400)): say("budget spent"); break
        a = torch.randn(M, K, device="cuda", dtype=dtype); b = torch.randn(K, N, device="cuda", dtype=dtype)
        ref = a.float() @ b.float(); tol = 2e-2 * ref.abs().max().item() + 1e-2
        cub = do_bench(lambda: torch.matmul(a, b))
        out = torch.empty(M, N, device="cuda", dtype=dtype)
        picks = []
        for name, fn in [("matmul", L.matmul), ("persistent", L.matmul_persistent), ("persistent+TMA", L.matmul_persistent_tma)]:
            try:
                fn(a, b); ms = do_bench(lambda: fn(a, b))
                kern = {"matmul": L.matmul_kernel, "persistent": L.matmul_persistent_kernel, "persistent+TMA": L.matmul_tma_kernel}[name]
                picks.append(f"{name} {ms*1e3:.1f}us ({cub/ms:.3f}x) pick={kern.best_config}")
            except Exception as e: picks.append(f"{name} ERR {str(e).splitlines()[0][:100]}")
        say(f"\n== {M}x{N}x{K} {str(dtype)[6:]} cuBLAS {cub*1e3:.1f}us")
        for p in picks: say("  ", p)
        align = L.row_alignment(K, N, a.stride(0), b.stride(0), N)
        grid = lambda m: (triton.cdiv(M, m["BLOCK_M"]) * triton.cdiv(N, m["BLOCK_N"]),)
        for cfg in (SMALL if M <= 32 else BIG):
            for kname, kern in (("plain", L.matmul_kernel.fn), ("wrap", wrap_kernel)):
                if kname == "wrap" and M >= 4096 and cfg not in BIG[:3]: continue
                try:
                    out.fill_(float("nan"))
                    args = (a, b, out, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), N, 1)
                    if kname == "plain":
                        f = lambda: kern[grid(cfg)](a, b, out, a, *args[3:], GROUP_M=8, HAS_BIAS=False, ACTIVATION=None, ALIGN=align, **cfg)
                    else:
                        f = lambda: kern[grid(cfg)](*args, GROUP_M=8, ALIGN=align, **cfg)
                    f(); torch.cuda.synchronize()
                    err = (out.float() - ref).abs().max().item()
                    ms = do_bench(f)
                    say(f"   {kname:5s} {cfg['BLOCK_M']}x{cfg['BLOCK_N']}x{cfg['BLOCK_K']} w{cfg['num_warps']} s{cfg['num_stages']}: "
                        f"{ms*1e3:.1f}us {cub/ms:.3f}x {'OK' if err <= tol else f'FAIL err={err:.3g}'}")
                except Exception as e:
                    say(f"   {kname} {cfg}: ERR {str(e).splitlines()[0][:120]}")
        del a, b, out, ref; torch.cuda.empty_cache()
say(f"done in {time.time() - t_start:.0f} s")
