"""Lesson 11's RMSNorm at 16384 x 4096 bf16: each kernel alone, its parameters, and the whole fwd+bwd."""
import os, time
import torch, triton, triton.language as tl
from triton.testing import do_bench
import utils
utils.setup(quiet=True)
from lessons import l11_backward_passes as L
from bench.common import graphed

OUT = os.environ.get("OUT")
log = open(os.path.join(OUT, "diag11.txt"), "w") if OUT else None
def say(*a):
    s = " ".join(str(x) for x in a); print(s, flush=True)
    if log: log.write(s + "\n"); log.flush()

@triton.jit
def bwd_staged(dy_ptr, x_ptr, w_ptr, rstd_ptr, dx_ptr, dw_ptr, M, C, stride_dym, stride_xm, stride_dxm,
               ROWS: tl.constexpr, BLOCK_C: tl.constexpr, ACC: tl.constexpr, STAGES: tl.constexpr):
    pid = tl.program_id(0)
    n_programs = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_C)
    w = tl.load(w_ptr + cols, mask=cols < C, other=0.0).to(ACC)
    dw = tl.zeros((BLOCK_C,), ACC)
    for tile in tl.range(pid, tl.cdiv(M, ROWS), n_programs, num_stages=STAGES):
        rows = tile * ROWS + tl.arange(0, ROWS).to(tl.int64)
        mask = (rows[:, None] < M) & (cols[None, :] < C)
        x = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :], mask=mask, other=0.0).to(ACC)
        dy = tl.load(dy_ptr + rows[:, None] * stride_dym + cols[None, :], mask=mask, other=0.0).to(ACC)
        rstd = tl.load(rstd_ptr + rows, mask=rows < M, other=0.0)
        xhat = x * rstd[:, None]
        dyw = dy * w[None, :]
        dx = rstd[:, None] * (dyw - xhat * (tl.sum(dyw * xhat, axis=1) / C)[:, None])
        tl.store(dx_ptr + rows[:, None] * stride_dxm + cols[None, :], dx.to(dx_ptr.dtype.element_ty), mask=mask)
        dw += tl.sum(dy * xhat, axis=0)
    tl.store(dw_ptr + pid.to(tl.int64) * C + cols, dw, mask=cols < C)

say(torch.cuda.get_device_name(), "torch", torch.__version__, "triton", triton.__version__)
M, C = 16384, 4096
x = torch.randn(M, C, device="cuda", dtype=torch.bfloat16); w = torch.randn(C, device="cuda", dtype=torch.bfloat16)
dy = torch.randn(M, C, device="cuda", dtype=torch.bfloat16)
y = torch.empty_like(x); dx = torch.empty_like(x); rstd = torch.empty(M, device="cuda")
copy = do_bench(lambda: y.copy_(x)); say(f"copy of x: {copy*1e3:.1f}us = {2*M*C*2/copy/1e6:.0f} GB/s")
xr = x.float(); ref_rstd = torch.rsqrt(xr.pow(2).mean(1) + 1e-6)
for ROWS in (1, 2, 4):
    for wp in (4, 8, 16):
        try:
            f = lambda: L.rmsnorm_forward_kernel[(triton.cdiv(M, ROWS),)](x, w, y, rstd, M, C, C, C, 1e-6, ROWS=ROWS, BLOCK_C=4096, ACC=tl.float32, num_warps=wp)
            f(); torch.cuda.synchronize(); ok = torch.allclose(rstd, ref_rstd, rtol=1e-3)
            ms = do_bench(f); say(f"fwd ROWS={ROWS} warps={wp}: {ms*1e3:.1f}us {2*M*C*2/ms/1e6:.0f} GB/s {'OK' if ok else 'FAIL'}")
        except Exception as e: say("fwd", ROWS, wp, "ERR", str(e).splitlines()[0][:120])
L.rmsnorm_forward_kernel[(M,)](x, w, y, rstd, M, C, C, C, 1e-6, ROWS=1, BLOCK_C=4096, ACC=tl.float32, num_warps=8)
xhat = xr * ref_rstd[:, None]; dyw = dy.float() * w.float()
ref_dx = ref_rstd[:, None] * (dyw - xhat * (dyw * xhat).mean(1, keepdim=True)); ref_dw = (dy.float() * xhat).sum(0)
sms = torch.cuda.get_device_properties(0).multi_processor_count
for per_sm in (1, 2, 4, 8):
    for ROWS in (1, 2):
        for wp in (4, 8, 16):
            for stages in (0, 2, 3):
                P = min(per_sm * sms, triton.cdiv(M, ROWS)); part = torch.empty(P, C, device="cuda")
                try:
                    if stages == 0:
                        f = lambda: L.rmsnorm_backward_kernel[(P,)](dy, x, w, rstd, dx, part, M, C, C, C, C, ROWS=ROWS, BLOCK_C=4096, ACC=tl.float32, num_warps=wp)
                    else:
                        f = lambda: bwd_staged[(P,)](dy, x, w, rstd, dx, part, M, C, C, C, C, ROWS=ROWS, BLOCK_C=4096, ACC=tl.float32, STAGES=stages, num_warps=wp)
                    f(); torch.cuda.synchronize()
                    ok = torch.allclose(dx.float(), ref_dx, atol=2e-2, rtol=2e-2) and torch.allclose(part.sum(0), ref_dw, atol=1.0, rtol=1e-2)
                    ms = do_bench(f); say(f"bwd P={per_sm}xSM ROWS={ROWS} warps={wp} stages={stages}: {ms*1e3:.1f}us {3*M*C*2/ms/1e6:.0f} GB/s {'OK' if ok else 'FAIL'}")
                except Exception as e: say("bwd", per_sm, ROWS, wp, stages, "ERR", str(e).splitlines()[0][:120])
xg = x.clone().requires_grad_(); wg = w.clone().requires_grad_()
whole = lambda: torch.autograd.grad(L.rmsnorm_with_grad(xg, wg, 1e-6), (xg, wg), dy)
whole(); ms = do_bench(whole); say(f"whole fwd+bwd (as bench): {ms*1e3:.1f}us {5*M*C*2/ms/1e6:.0f} GB/s")
t = time.perf_counter(); n = 200
for _ in range(n): whole()
say(f"host us per whole call (no sync): {(time.perf_counter()-t)/n*1e6:.0f}"); torch.cuda.synchronize()
try:
    g = graphed(whole); ms = do_bench(g); say(f"whole fwd+bwd, CUDA graph: {ms*1e3:.1f}us {5*M*C*2/ms/1e6:.0f} GB/s")
except Exception as e: say("graph ERR", str(e).splitlines()[0][:150])
