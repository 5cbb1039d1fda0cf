"""Lesson 10's planted exclusive scan under the pinned Triton: tl.cumsum(x) - x at small blocks, compared exactly."""
import torch, triton, triton.language as tl
print("triton", triton.__version__, torch.cuda.get_device_name())

@triton.jit
def excl(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0)
    tl.store(out_ptr + offs, tl.cumsum(x, axis=0) - x, mask=offs < n)

@triton.jit
def incl(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0)
    tl.store(out_ptr + offs, tl.cumsum(x, axis=0), mask=offs < n)

for dtype in (torch.int32, torch.float32):
    for B in (16, 32, 64, 128, 1024):
        for w in (1, 4):
            n = 3 * B - 5
            x = torch.randint(-8, 9, (n,), device="cuda").to(dtype)
            for name, k in (("incl", incl), ("excl", excl)):
                out = torch.full_like(x, -999)
                k[(triton.cdiv(n, B),)](x, out, n, BLOCK_SIZE=B, num_warps=w)
                blocks = x.view(-1)[: n].split(B)
                ref = torch.cat([b.cumsum(0).to(dtype) - (b if name == "excl" else 0) for b in blocks])
                bad = (out != ref).sum().item()
                print(f"{str(dtype)[6:]} B={B} warps={w} {name}: {'ok' if bad == 0 else f'{bad} of {n} wrong; first {(out != ref).nonzero()[0].item()} got {out[(out != ref).nonzero()[0]].item()} want {ref[(out != ref).nonzero()[0]].item()}'}", flush=True)
