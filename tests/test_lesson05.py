"""Lesson 05's solution kernels, loaded from solutions/05_matmul.ipynb, at awkward shapes; its launchers' errors.

Every kernel is compared with the fp64 reference computed from the same low-precision inputs, on fresh random
inputs, into outputs pre-filled with NaN, with the lesson's own tolerance (fp32 accumulation that grows like
sqrt(K), TF32 for fp32 inputs on the GPU, one rounding of the output). Shapes are tiny under the interpreter, which
runs tl.dot slowly, and large and awkward on the GPU (no size a multiple of a block, a single row, a single column).
"""

import math

import pytest
import torch

import utils
from utils import setup
from utils.lessons import load

ENV = setup(quiet=True)
L = load("05")
DEVICE = ENV.device

#: fp16 is the interpreter's low-precision type (it has no bf16); fp32 goes through TF32 on the GPU
DTYPES = ENV.pick(cpu=[torch.float16, torch.float32], gpu=[torch.float16, torch.bfloat16, torch.float32])
#: one awkward shape for every dtype, and the degenerate ones (a single row, a single column) in the teaching dtype
AWKWARD = ENV.pick(cpu=(37, 45, 70), gpu=(1000, 1337, 999))
EDGES = ENV.pick(cpu=[(1, 29, 33), (20, 1, 17)], gpu=[(1, 4096, 4096), (777, 1, 1000)])
CASES = [(AWKWARD, d) for d in DTYPES] + [(s, ENV.dtype) for s in EDGES]
#: TMA needs rows on 16-byte boundaries: N and K multiples of 8 (M is free); with and without the epilogue
TMA_CASES = ENV.pick(
    cpu=[((37, 40, 72), torch.float16, True), ((1, 24, 40), torch.float16, False)],
    gpu=[
        ((1000, 1336, 1000), torch.bfloat16, True),
        ((1000, 1336, 1000), torch.float16, False),
        ((1, 4096, 4096), torch.bfloat16, False),
    ],
)
# On the GPU every new shape, dtype or epilogue compiles each autotuning configuration: the cases are chosen so
# that each launcher meets every dtype and every degenerate shape, without compiling every combination.


def _name(case):
    (M, N, K), dtype = case[:2]
    return f"{M}x{N}x{K}-{str(dtype).replace('torch.', '')}" + ("-epilogue" if case[2:] == (True,) else "")


def _inputs(M, N, K, dtype, bias=False):
    """Fresh inputs scaled so that entries of C are about 1 (as in the lesson's checks)."""
    a = torch.randn(M, K, device=DEVICE, dtype=dtype) * K**-0.25
    b = torch.randn(K, N, device=DEVICE, dtype=dtype) * K**-0.25
    return a, b, (torch.randn(N, device=DEVICE, dtype=dtype) if bias else None)


def _check(fn, shape, dtype, bias=False, activation=None, **kw):
    M, N, K = shape
    a, b, bias_t = _inputs(M, N, K, dtype, bias)
    extra = {k: v for k, v in (("bias", bias_t), ("activation", activation)) if v is not None}
    out = fn(a, b, **extra, out=utils.nan_empty((M, N), dtype), **kw)
    scale = math.sqrt(K) * a.float().pow(2).mean().sqrt().item() * b.float().pow(2).mean().sqrt().item()
    utils.check(
        out,
        L.matmul_ref(a, b, bias_t, activation),
        **L.matmul_tolerance(dtype, K, scale),
        quiet=True,
        name=f"{fn.__name__} {M}x{N}x{K} {dtype}",
    )
    return out


# -- each rung of the ladder -------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES[:1] + CASES[-2:] if ENV.interpret else CASES, ids=_name)
def test_naive(case):
    shape = (19, 13, 70) if ENV.interpret and case[0] == AWKWARD else case[0]  # a program per element: keep it small
    _check(L.matmul_naive, shape, case[1])


@pytest.mark.parametrize("launcher", ["matmul_tiled", "matmul_grouped", "matmul"])
@pytest.mark.parametrize("case", CASES, ids=_name)
def test_tiled_kernels(launcher, case):
    _check(getattr(L, launcher), *case)


def test_autotuned():
    _check(L.matmul_autotuned, AWKWARD, ENV.dtype)


@pytest.mark.parametrize("bias, activation", [(True, None), (False, "silu"), (True, "gelu")])
def test_fused_epilogue(bias, activation):
    _check(L.matmul, AWKWARD, ENV.dtype, bias=bias, activation=activation)


@pytest.mark.parametrize("case", TMA_CASES, ids=_name)
def test_persistent_tma(case):
    shape, dtype, epilogue = case
    _check(L.matmul_persistent, shape, dtype, bias=epilogue, activation="silu" if epilogue else None)


@pytest.mark.skipif(ENV.interpret, reason="one configuration under the interpreter")
@pytest.mark.parametrize("index", range(len(L.MATMUL_CONFIGS)))
def test_every_autotune_config(index):
    """The autotuner may pick any configuration for some shape: each must be right, not just the fastest here."""
    config = L.MATMUL_CONFIGS[index]
    _check(
        L.matmul_grouped, AWKWARD, ENV.dtype, **config.kwargs, num_warps=config.num_warps, num_stages=config.num_stages
    )


@pytest.mark.skipif(ENV.interpret, reason="one configuration under the interpreter")
@pytest.mark.parametrize("index", range(len(L.PERSISTENT_CONFIGS)))
def test_every_persistent_config(index, monkeypatch):
    """The same for the persistent kernel: with a single configuration the autotuner launches it without tuning."""
    monkeypatch.setattr(L.matmul_persistent_kernel, "configs", [L.PERSISTENT_CONFIGS[index]])
    _check(L.matmul_persistent, TMA_CASES[0][0], ENV.dtype, bias=True, activation="gelu")


@pytest.mark.parametrize("GROUP_M", [1, 3, 4, 8])
@pytest.mark.parametrize("M, N, BLOCK_M, BLOCK_N", [(700, 1000, 64, 128), (64, 64, 64, 64), (1000, 33, 16, 16)])
def test_tile_order(M, N, BLOCK_M, BLOCK_N, GROUP_M):
    """grouped_tile gives every tile to exactly one program, in the order of the loops in tile_order_ref."""
    got = L.tile_order(M, N, BLOCK_M, BLOCK_N, GROUP_M)
    want = L.tile_order_ref(M, N, BLOCK_M, BLOCK_N, GROUP_M)
    utils.check(got, want, atol=0, rtol=0, reason="program ids are whole numbers", quiet=True)
    # a third, independent statement of the order: the one utils.pictures draws
    from utils.pictures import grids

    drawn = torch.from_numpy(grids.tile_order(M, N, BLOCK_M, BLOCK_N, None if GROUP_M == 1 else GROUP_M))
    assert torch.equal(want, drawn.to(want.dtype))


def test_tile_order_ref_is_row_major_for_one_row_per_group():
    order = L.tile_order_ref(300, 500, 100, 100, 1)
    assert torch.equal(order, torch.arange(15, dtype=order.dtype).reshape(3, 5))


# -- the tolerance is a real test: it catches the mistakes it is meant to catch -----------------------------------


def _drop_last_k(a, b, out):
    """A matmul that forgot the last element of K (a classic tail-mask bug)."""
    return L.matmul(a[:, :-1].contiguous(), b[:-1].contiguous(), out=out)


def _fp16_accumulator(a, b, out):
    """A matmul that accumulates in the inputs' precision instead of fp32."""
    acc = torch.zeros(a.shape[0], b.shape[1], dtype=a.dtype, device=a.device)
    for k in range(a.shape[1]):
        acc += a[:, k : k + 1] * b[k : k + 1, :]
    return out.copy_(acc)


@pytest.mark.parametrize("bug", [_drop_last_k, _fp16_accumulator], ids=lambda f: f.__name__)
def test_tolerance_catches_bugs(bug):
    M, N, K = ENV.pick(cpu=(40, 40, 300), gpu=(512, 512, 1000))
    with pytest.raises(AssertionError):
        _check(bug, (M, N, K), torch.float16)


def test_tolerance_grows_like_sqrt_k():
    small = L.matmul_tolerance(torch.float16, 100, 1.0)
    large = L.matmul_tolerance(torch.float16, 10_000, 1.0)
    assert large["atol"] == pytest.approx(10 * small["atol"])
    assert large["rtol"] == small["rtol"] == 2 * 2**-11
    assert L.matmul_tolerance(torch.bfloat16, 100, 1.0)["rtol"] == 2 * 2**-8


# -- launcher input validation ---------------------------------------------------------------------------------


def _ab(M=8, N=4, K=16, dtype=None):
    dtype = dtype or ENV.dtype
    return (torch.randn(M, K, device=DEVICE, dtype=dtype), torch.randn(K, N, device=DEVICE, dtype=dtype))


LAUNCHERS = ["matmul_naive", "matmul_tiled", "matmul_grouped", "matmul_autotuned", "matmul", "matmul_persistent"]


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_refuses_mismatched_inner_dims(launcher):
    a, b = _ab()
    with pytest.raises(ValueError, match="inner dimensions"):
        getattr(L, launcher)(a, b[:8])


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_refuses_wrong_dtypes(launcher):
    a, b = _ab()
    with pytest.raises(TypeError, match="dtype"):
        getattr(L, launcher)(a.int(), b.int())
    with pytest.raises(TypeError, match="dtype"):
        getattr(L, launcher)(a.double(), b.double())
    with pytest.raises(TypeError, match="dtype"):
        getattr(L, launcher)(a, b.float() if ENV.dtype != torch.float32 else b.half())


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_refuses_non_contiguous(launcher):
    a, b = _ab()
    with pytest.raises(ValueError, match="non-contiguous"):
        getattr(L, launcher)(a, torch.randn(4, 16, device=DEVICE, dtype=ENV.dtype).T)
    with pytest.raises(ValueError, match="non-contiguous"):
        getattr(L, launcher)(torch.randn(8, 32, device=DEVICE, dtype=ENV.dtype)[:, ::2], b)


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_refuses_wrong_ndim_and_out(launcher):
    a, b = _ab()
    with pytest.raises(ValueError, match="dimension"):
        getattr(L, launcher)(a[0], b)
    with pytest.raises(ValueError, match="shape"):
        getattr(L, launcher)(a, b, out=torch.empty(8, 5, device=DEVICE, dtype=ENV.dtype))


@pytest.mark.skipif(not ENV.is_gpu, reason="only on the GPU is a CPU tensor the wrong device")
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_refuses_cpu_tensors(launcher):
    a, b = _ab()
    with pytest.raises(ValueError, match="cuda"):
        getattr(L, launcher)(a.cpu(), b.cpu())


@pytest.mark.parametrize("launcher", ["matmul", "matmul_persistent"])
def test_refuses_bad_epilogue(launcher):
    a, b = _ab()
    with pytest.raises(ValueError, match="shape"):
        getattr(L, launcher)(a, b, bias=torch.randn(5, device=DEVICE, dtype=ENV.dtype))
    with pytest.raises(TypeError, match="dtype"):
        getattr(L, launcher)(a, b, bias=torch.randn(4, device=DEVICE, dtype=torch.float64))
    with pytest.raises(ValueError, match="activation"):
        getattr(L, launcher)(a, b, activation="relu")


def test_persistent_refuses_rows_tma_cannot_read():
    a, b = _ab(K=20)  # 20 fp16/bf16 elements = 40 bytes: not a multiple of 16
    with pytest.raises(ValueError, match="16-byte"):
        L.matmul_persistent(a, b)
