"""utils.checking: each classic mistake, planted in a real kernel, fails the check with the hint that names it."""

import pytest
import torch
import triton
import triton.language as tl

from utils import check, nan_empty, refuses, require, require_same_shape
from utils.mode import current

DEV = current().device


def rand(*shape, dtype=torch.float32):
    return torch.randn(*shape, dtype=dtype, device=DEV)


# -- kernels: one right, one per classic mistake -----------------------------------------------------------------


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask), mask=mask)


@triton.jit
def add_kernel_unmasked_store(x_ptr, y_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask))


@triton.jit
def add_kernel_wrong_size(x_ptr, y_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * (BLOCK_SIZE // 2) + tl.arange(0, BLOCK_SIZE)  # steps by half a block
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask), mask=mask)


@triton.jit
def scale_rows_kernel(
    x_ptr,
    out_ptr,
    N,
    stride_xm,
    stride_xn,
    stride_om,
    stride_on,
    ROW_STRIDE_BUG: tl.constexpr,
    SWAP_BUG: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    if ROW_STRIDE_BUG:
        x_ptrs = x_ptr + row * N + cols * stride_xn  # N where stride_xm belongs
    elif SWAP_BUG:
        x_ptrs = x_ptr + row * stride_xn + cols * stride_xm
    else:
        x_ptrs = x_ptr + row * stride_xm + cols * stride_xn
    x = tl.load(x_ptrs, mask=mask)
    tl.store(out_ptr + row * stride_om + cols * stride_on, 2 * x, mask=mask)


@triton.jit
def softmax_kernel(x_ptr, out_ptr, N, stride_m, OTHER: tl.constexpr, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + row * stride_m + cols, mask=cols < N, other=OTHER)
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    tl.store(out_ptr + row * stride_m + cols, e / tl.sum(e, axis=0), mask=cols < N)


@triton.jit
def matmul_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    FP16_ACC: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    if FP16_ACC:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float16)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :])
        acc += tl.dot(a, b).to(acc.dtype)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(tl.float16))


def launch_add(kernel, n, grid_fn=triton.cdiv, block=128):
    x, y = rand(n), rand(n)
    out = nan_empty(n, device=DEV)
    kernel[(max(1, grid_fn(n, block)),)](x, y, out, n, BLOCK_SIZE=block)
    return out, x.double() + y.double()


def scale_rows(x, **bugs):
    out = nan_empty(x.shape, x.dtype, DEV)
    scale_rows_kernel[(x.shape[0],)](
        x,
        out,
        x.shape[1],
        x.stride(0),
        x.stride(1),
        out.stride(0),
        out.stride(1),
        ROW_STRIDE_BUG=bugs.get("row_stride", False),
        SWAP_BUG=bugs.get("swap", False),
        BLOCK_N=triton.next_power_of_2(x.shape[1]),
    )
    return out


# -- the right kernel passes; each mistake fails with its hint ---------------------------------------------------


@pytest.mark.parametrize("n", [1, 1000, 4097])
def test_correct_kernel_passes(n, capsys):
    out, ref = launch_add(add_kernel, n)
    check(out, ref)
    assert "✓" in capsys.readouterr().out


def test_grid_too_small_points_to_cdiv():
    out, ref = launch_add(add_kernel, 1000, grid_fn=lambda n, b: n // b)
    with pytest.raises(AssertionError, match=r"(?s)never written.*last 104 elements.*triton\.cdiv"):
        check(out, ref)


def test_unmasked_store_is_caught_by_canaries():
    out, ref = launch_add(add_kernel_unmasked_store, 1000)
    with pytest.raises(AssertionError, match=r"(?s)past the end.*mask"):
        check(out, ref)


def test_offsets_with_wrong_block_size():
    out, ref = launch_add(add_kernel_wrong_size, 1000)
    with pytest.raises(AssertionError, match=r"(?s)never written.*pid \* BLOCK_SIZE"):
        check(out, ref)


def test_row_offset_with_wrong_stride():
    wide = rand(7, 2 * 37)
    x = wide[:, :37]  # a view: stride(0) is 74, not 37
    with pytest.raises(AssertionError, match=r"(?s)Row 0 is right.*stride"):
        check(scale_rows(x, row_stride=True), 2 * x.double())
    check(scale_rows(x), 2 * x.double(), quiet=True)


def test_swapped_strides():
    x = rand(33, 33)
    with pytest.raises(AssertionError, match=r"(?s)transposed.*strides are swapped"):
        check(scale_rows(x, swap=True), 2 * x.double())


@pytest.mark.parametrize("n", [5, 100])
def test_masked_lanes_with_wrong_other(n):
    x = rand(4, n)
    out = nan_empty(x.shape, device=DEV)
    softmax_kernel[(4,)](x, out, n, x.stride(0), OTHER=0.0, BLOCK_N=triton.next_power_of_2(n) * 2)
    with pytest.raises(AssertionError, match=r"(?s)constant factor.*other=-inf"):
        check(out, torch.softmax(x.double(), dim=1))


def test_fp16_accumulation_is_called_a_precision_problem():
    M, N, K = 32, 32, 2048
    a = torch.randn(M, K, device=DEV).half()
    b = torch.randn(K, N, device=DEV).half()
    ref = a.double() @ b.double()
    for fp16_acc in (False, True):
        c = nan_empty((M, N), torch.float16, DEV)
        matmul_kernel[(2, 2)](a, b, c, M, N, K, FP16_ACC=fp16_acc, BLOCK_M=16, BLOCK_N=16, BLOCK_K=16)
        if fp16_acc:
            with pytest.raises(AssertionError, match=r"(?s)precision problem.*fp32"):
                check(c, ref, atol=0.05, rtol=5e-3, reason="fp16 output of an fp32-accumulated dot over K=2048")
        else:
            check(c, ref, atol=0.05, rtol=5e-3, reason="fp16 output of an fp32-accumulated dot over K=2048")


def test_nothing_written():
    out = nan_empty(10, device=DEV)
    with pytest.raises(AssertionError, match="Nothing was written"):
        check(out, torch.zeros(10, dtype=torch.float64))


# -- mismatches that are not about values ------------------------------------------------------------------------


def test_shape_dtype_and_missing_return():
    ref = torch.zeros(3, 4, dtype=torch.float64)
    with pytest.raises(AssertionError, match=r"shape \(4, 3\)"):
        check(torch.zeros(4, 3, device=DEV), ref)
    with pytest.raises(AssertionError, match=r"should be float16: allocate it with dtype=torch\.float16"):
        check(torch.zeros(3, 4, device=DEV), ref, dtype=torch.float16)
    with pytest.raises(AssertionError, match="return out"):
        check(None, ref)


def test_nan_in_reference_must_be_matched():
    ref = torch.tensor([1.0, float("nan"), 3.0], dtype=torch.float64)
    check(torch.tensor([1.0, float("nan"), 3.0], device=DEV), ref, quiet=True)
    with pytest.raises(AssertionError, match="differs"):
        check(torch.tensor([1.0, 2.0, 3.0], device=DEV), ref)


def test_custom_tolerance_needs_a_reason():
    with pytest.raises(TypeError, match="reason"):
        check(torch.zeros(2, device=DEV), torch.zeros(2, dtype=torch.float64), atol=1, rtol=1)


def test_default_tolerance_separates_one_rounding_from_two_roundings():
    x = torch.rand(10000, dtype=torch.float64) + 1
    check(x.to(DEV).half(), x, quiet=True)  # one rounding to fp16 is within the fp16 tolerance
    with pytest.raises(AssertionError):
        check(x.to(DEV).bfloat16().half(), x)  # a bf16 rounding on the way is not


# -- launcher input validation ------------------------------------------------------------------------------------


def test_require_messages():
    x = rand(4, 6)
    require(x, "x", dtype=(torch.float32, torch.float16), ndim=2, shape=(None, 6))
    with pytest.raises(TypeError, match=r"dtype float64.*x\.to\(torch\.float32\)"):
        require(x.double(), "x", dtype=torch.float32)
    with pytest.raises(ValueError, match="non-contiguous.*contiguous()"):
        require(x.t(), "x")
    with pytest.raises(ValueError, match=r"shape \(4, 6\) but must be \(\*, 5\)"):
        require(x, "x", shape=(None, 5))
    with pytest.raises(ValueError, match="2 dimension"):
        require(x[0], "x", ndim=2)
    with pytest.raises(ValueError, match="must match"):
        require_same_shape(x, x[:3], ("x", "y"))
    with pytest.raises(TypeError, match="torch.Tensor"):
        require([1, 2], "x")


@pytest.mark.skipif(DEV != "cuda", reason="only a GPU run can be handed a tensor on the wrong device")
def test_require_cpu_tensor_on_gpu():
    with pytest.raises(ValueError, match=r"on cpu.*x\.cuda\(\)"):
        require(torch.zeros(3), "x")


# -- suspects, refusals, and behaving as an older GPU -----------------------------------------------------------


def test_a_suspected_mistake_is_named_when_the_result_matches_it():
    x = torch.randn(4, 8, dtype=torch.float64, device=current().device)
    ref = x.softmax(dim=-1)
    no_scale = (2 * x).softmax(dim=-1)
    with pytest.raises(AssertionError, match="forgot the scale"):
        check(no_scale.clone(), ref, suspects={"a different mistake": ref * 3, "forgot the scale": no_scale})
    with pytest.raises(AssertionError) as e:  # no suspect matches: the general hint, not a suspect's
        check(ref * 0.5 + 1, ref, suspects={"forgot the scale": no_scale})
    assert "forgot the scale" not in str(e.value)


def test_refuses_passes_only_when_every_bad_input_raises_a_clear_error(capsys):
    def launcher(x):
        if x < 0:
            raise ValueError("x must be >= 0")
        if x == 0:
            raise IndexError("crashed inside the kernel")
        return x

    refuses({"a negative x": lambda: launcher(-1)})
    assert "✓ refuses a negative x: x must be >= 0" in capsys.readouterr().out
    with pytest.raises(AssertionError, match=r"(?s)zero: failed with IndexError.*one: accepted"):
        refuses({"zero": lambda: launcher(0), "one": lambda: launcher(1), "minus": lambda: launcher(-1)})
    with pytest.raises(ValueError):
        refuses({})


def test_behaving_as_an_older_gpu(monkeypatch):
    from utils import mode

    monkeypatch.delenv(mode.AS_VAR, raising=False)
    assert mode._capability_override((9, 0)) == (9, 0)
    monkeypatch.setenv(mode.AS_VAR, "7.5")
    assert mode._capability_override((9, 0)) == (7, 5)
    for bad in ("9.5", "7.0", "sm80"):  # newer than the GPU, older than the course supports, not a number
        monkeypatch.setenv(mode.AS_VAR, bad)
        with pytest.raises(ValueError, match=mode.AS_VAR):
            mode._capability_override((9, 0))
    t4 = mode.Env(device="cuda", interpret=False, capability=(7, 5), real_capability=(9, 0))
    assert t4.emulated and not t4.supports_tma
    assert mode.Env(device="cuda", interpret=False, capability=(9, 0), real_capability=(9, 0)).supports_tma
    assert not mode.Env(device="cpu", interpret=True).supports_tma


def test_require_out_allocates_or_refuses_with_the_fix():
    from utils import require_out

    dev = current().device
    x = torch.randn(6, 4, device=dev)
    made = require_out(None, shape=(6, 4), dtype=torch.float32, device=dev)
    assert made.shape == (6, 4) and made.dtype == torch.float32
    good = torch.empty(6, 4, device=dev)
    assert require_out(good, shape=(6, 4), dtype=torch.float32, device=dev, inputs={"x": x}) is good
    bad = {
        "a numpy array": (x.cpu().numpy(), TypeError, "torch.Tensor"),
        "the wrong dtype": (torch.empty(6, 4, device=dev, dtype=torch.float16), TypeError, "float32"),
        "the wrong shape": (torch.empty(6, 3, device=dev), ValueError, r"\(6, 3\)"),
        "a strided view": (torch.empty(4, 6, device=dev).t(), ValueError, "non-contiguous"),
        "the input itself": (x, ValueError, "shares memory with the input x"),
    }
    for out, error, message in bad.values():
        with pytest.raises(error, match=message):
            require_out(out, shape=(6, 4), dtype=torch.float32, device=dev, inputs={"x": x})
    buf = torch.empty(40, device=dev)
    a, b = buf[:24].view(6, 4), buf[20:].view(5, 4)  # b starts inside a
    with pytest.raises(ValueError, match="shares memory with the input a"):
        require_out(b[:5].reshape(5, 4), shape=(5, 4), dtype=torch.float32, device=dev, inputs={"a": a})


def test_small_validators_name_the_argument():
    from utils import require_int32_offsets, require_number, require_power_of_two

    for ok in (1, 2, 1024):
        require_power_of_two(ok, "BLOCK_SIZE")
    for bad in (0, -4, 3, 1000, 2.0, True, "64", None):
        with pytest.raises(ValueError, match="BLOCK_SIZE must be a positive power of two"):
            require_power_of_two(bad, "BLOCK_SIZE")
    assert require_number(1e-6, "eps", positive=True) == 1e-6
    with pytest.raises(TypeError, match="eps must be a real number"):
        require_number("1e-6", "eps")
    for bad in (float("nan"), float("inf"), 0.0):
        with pytest.raises(ValueError, match="eps must be"):
            require_number(bad, "eps", positive=True)
    require_int32_offsets(torch.empty(0), "x")  # empty: nothing to address
    require_int32_offsets(torch.empty(1, device="meta").expand(2**31 + 1), "x")  # stride 0: one element touched
    huge = torch.empty(2**31 + 1, dtype=torch.int8, device="meta")
    with pytest.raises(ValueError, match=r"x spans 2147483649 elements.*2\*\*31"):
        require_int32_offsets(huge, "x")


def test_require_refuses_bfloat16_under_the_interpreter():
    x = torch.zeros(4, dtype=torch.bfloat16, device=current().device)
    if current().interpret:
        with pytest.raises(TypeError, match="interpreter does not support"):
            require(x, "x", dtype=(torch.float16, torch.bfloat16))
    else:
        require(x, "x", dtype=(torch.float16, torch.bfloat16))
