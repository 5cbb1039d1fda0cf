"""Lesson 05, round 2: more configurations at the shapes that miss, and the TMA kernel with warp specialisation."""
import os, time
import torch, triton, triton.language as tl
from triton.testing import do_bench
import utils
utils.setup(quiet=True)
from lessons import l05_matmul as L

OUT = os.environ.get("OUT")
log = open(os.path.join(OUT, "diag05b.txt"), "w") if OUT else None
def say(*a):
    s = " ".join(str(x) for x in a); print(s, flush=True)
    if log: log.write(s + "\n"); log.flush()

@triton.jit
def tma_variant(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                GROUP_M: tl.constexpr, NUM_SMS: tl.constexpr, WS: tl.constexpr, FLATTEN: tl.constexpr):
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[N, 1], block_shape=[BLOCK_K, BLOCK_N])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N])
    num_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    for tile in tl.range(tl.program_id(0), num_tiles, NUM_SMS, flatten=FLATTEN):
        pid_m, pid_n = L.grouped_tile(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in tl.range(0, K, BLOCK_K, warp_specialize=WS):
            a = a_desc.load([pid_m * BLOCK_M, k])
            b = b_desc.load([k, pid_n * BLOCK_N])
            acc = tl.dot(a, b, acc)
        c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(c_ptr.dtype.element_ty))

C = lambda *x: dict(zip(("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps", "num_stages"), x))
PLAIN = [C(128, 256, 64, 8, 4), C(128, 128, 64, 4, 3), C(128, 128, 64, 8, 3), C(128, 256, 64, 8, 2), C(64, 256, 64, 4, 3),
         C(128, 256, 32, 8, 5), C(256, 128, 64, 8, 2)]
TMA = [C(128, 256, 64, 8, 3), C(128, 256, 64, 4, 3), C(128, 128, 64, 4, 4), C(128, 128, 64, 8, 4)]
SHAPES = [(3000, 5000, 1000), (4096, 4096, 4096), (8192, 8192, 8192), (1024, 1024, 1024)]
say(torch.cuda.get_device_name(), "torch", torch.__version__, "triton", triton.__version__)
triton.set_allocator(L.tma_scratch)
t0 = time.time()
for dtype in (torch.bfloat16, torch.float16):
    for M, N, K in SHAPES:
        if time.time() - t0 > float(os.environ.get("DIAG_BUDGET", 200)): say("budget spent"); break
        a = torch.randn(M, K, device="cuda", dtype=dtype); b = torch.randn(K, N, device="cuda", dtype=dtype)
        ref = a.float() @ b.float(); tol = 2e-2 * ref.abs().max().item() + 1e-2
        out = torch.empty(M, N, device="cuda", dtype=dtype)
        cub = do_bench(lambda: torch.matmul(a, b))
        say(f"\n== {M}x{N}x{K} {str(dtype)[6:]} cuBLAS {cub*1e3:.1f}us")
        align = L.row_alignment(K, N, a.stride(0), b.stride(0), N)
        def run(label, f):
            try:
                out.fill_(float("nan")); f(); torch.cuda.synchronize()
                err = (out.float() - ref).abs().max().item()
                ms = do_bench(f)
                say(f"   {label}: {ms*1e3:.1f}us {cub/ms:.3f}x {'OK' if err <= tol else f'FAIL err={err:.3g}'}")
            except Exception as e:
                say(f"   {label}: ERR {str(e).splitlines()[0][:150]}")
        for cfg in PLAIN:
            g = (triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"]),)
            run(f"plain {cfg}", lambda g=g, cfg=cfg: L.matmul_kernel.fn[g](a, b, out, a, M, N, K, a.stride(0), 1, b.stride(0), 1, N, 1,
                GROUP_M=8, HAS_BIAS=False, ACTIVATION=None, ALIGN=align, **cfg))
        if N % 8 == 0 and K % 8 == 0:
            for cfg in TMA:
                tiles = triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"])
                g = (min(L.NUM_SMS, tiles),)
                for ws, fl in ((False, False), (False, True), (True, False), (True, True)):
                    run(f"tma ws={ws:d} flatten={fl:d} {cfg}", lambda g=g, cfg=cfg, ws=ws, fl=fl: tma_variant[g](
                        a, b, out, M, N, K, GROUP_M=8, NUM_SMS=L.NUM_SMS, WS=ws, FLATTEN=fl, **cfg))
        del a, b, out, ref; torch.cuda.empty_cache()
say(f"done in {time.time() - t0:.0f} s")
