"""utils.checking: each classic mistake, planted in a real kernel, fails the check with the hint that names it."""

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

import utils
from utils import Scaled, check, nan_empty, refuses, require, require_out, require_same_shape, watch_memory
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


@triton.jit
def add_kernel_axis_1(x_ptr, y_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(1) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)  # 0 in every program of a 1-D grid
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask), mask=mask)


@triton.jit
def add_kernel_fp16(x_ptr, y_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask).to(tl.float16)  # fp32 data, added in fp16
    tl.store(out_ptr + offsets, x + tl.load(y_ptr + offsets, mask=mask).to(tl.float16), mask=mask)


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


@triton.jit
def add_kernel_mask_short(x_ptr, y_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n - 1  # the mistake: the last valid offset is n - 1
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask), mask=mask)


@pytest.mark.parametrize("n", [1000, 129])
def test_the_last_element_unwritten_points_to_the_mask(n):
    """One element short at the end is a mask off by one far more often than a grid rounded down (which leaves
    n % BLOCK_SIZE elements: 1 only where n is one past a multiple of the block); the hint names the mask first."""
    out, ref = launch_add(add_kernel_mask_short, n)
    with pytest.raises(AssertionError, match=r"(?s)last element was never written.*off by one.*offsets < n\b"):
        check(out, ref)


def test_grid_too_small_points_to_cdiv():
    out, ref = launch_add(add_kernel, 1000, grid_fn=lambda n, b: n // b)
    with pytest.raises(AssertionError, match=r"(?s)never written.*last 104 elements.*triton\.cdiv"):
        check(out, ref)


@pytest.mark.parametrize("n", [256, 1000])
def test_every_program_writing_block_0_is_not_called_a_short_grid(n):
    out, ref = launch_add(add_kernel_axis_1, n)
    with pytest.raises(AssertionError, match=r"(?s)first 128 elements were written.*every program wrote block 0"):
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


def test_row_stride_hint_needs_the_later_rows_wrong_in_substance():
    """One element off at the end of each later row is no row-stride mistake."""
    ref = torch.randn(5, 100, dtype=torch.float64)
    out = ref.clone().float()
    out[1:, -1] += 1.0
    with pytest.raises(AssertionError) as failure:
        check(out.to(DEV), ref)
    assert "Row 0 is right" not in str(failure.value)


def test_fp16_arithmetic_on_fp32_data_is_called_a_precision_problem():
    out, ref = launch_add(add_kernel_fp16, 1000)
    with pytest.raises(AssertionError, match=r"(?s)precision problem.*compute in fp32"):
        check(out, ref)


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


def test_launch_options_are_ints_in_range():
    from utils.checking import require_launch_options

    require_launch_options()
    require_launch_options(num_warps=None, num_stages=None)  # None: the launcher chooses
    for w in (1, 2, 4, 8, 16, 32):
        require_launch_options(num_warps=w, num_stages=3)
    for bad in (0, 3, 64, True, 4.0, "4"):  # True == 1 and 4.0 == 4 would pass `in (1, 2, 4, ...)`
        with pytest.raises(ValueError, match="num_warps"):
            require_launch_options(num_warps=bad)
    for bad in (0, -1, True, 2.0, "3"):
        with pytest.raises(ValueError, match="num_stages must be a positive int"):
            require_launch_options(num_stages=bad)


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


def test_the_worst_value_is_printed_with_the_digits_that_tell_it_apart():
    """An exact check that misses by one ulp of fp64: six digits would print the same number twice."""
    want = torch.tensor([1.0, -305.75], dtype=torch.float64, device=DEV)
    got = want.clone()
    got[1] = torch.nextafter(got[1], torch.tensor(0.0, dtype=torch.float64, device=DEV))
    with pytest.raises(AssertionError) as e:
        check(got, want, atol=0, rtol=0, reason="exact", quiet=True)
    assert "got -305.75, expected -305.75 " not in str(e.value)
    assert "got -305.74999999999994, expected -305.75 " in str(e.value)


def test_default_tolerance_separates_one_rounding_from_two_roundings():
    x = torch.rand(10000, dtype=torch.float64) + 1
    check(x.to(DEV).half(), x, quiet=True)  # one rounding to fp16 is within the fp16 tolerance
    with pytest.raises(AssertionError):
        check(x.to(DEV).bfloat16().half(), x)  # a bf16 rounding on the way is not


def test_integer_and_bool_outputs_are_compared_exactly():
    """session 35: int8, uint8, int16 and bool had no default tolerance, so check raised a TypeError that asked the
    learner for atol=, rtol= and reason=; every integer dtype and bool is compared exactly, as int32 and int64 were."""
    for dt in (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool):
        want = torch.tensor([1, 0, 1], dtype=dt, device=DEV)
        check(want.clone(), want, quiet=True)
        with pytest.raises(AssertionError, match=r"atol=0, rtol=0: integers are exact"):
            check(torch.tensor([1, 1, 1], dtype=dt, device=DEV), want)


def test_a_reference_that_is_not_a_tensor_is_named():
    """session 35: check(out, None) raised torch's "Could not infer dtype of NoneType"."""
    for ref in (None, "abc", object()):
        with pytest.raises(TypeError, match=f"ref must be the reference result.*got {type(ref).__name__}"):
            check(torch.zeros(3, device=DEV), ref)


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
    with pytest.raises(ValueError, match=r"shape \(6,\) but must be \(5,\)\."):  # a 1-tuple as Python writes it
        require(x[0], "x", shape=(5,))
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


def test_of_suspects_this_input_cannot_tell_apart_the_first_listed_is_named_and_the_other_after_it():
    """(session 37) Lesson 06's "tl.exp with LOG2E" (everywhere) and "p with tl.exp, alpha with tl.exp2" give the same
    result where no row's max moves in a later key block: the output's own rounding then made either the closer,
    and the hint changed from run to run. References within a tenth of the tolerance of each other are a tie (the
    first listed is named, then the other: session 38's GPU case of lesson 08, one key block, gave "p with tl.exp"
    for a kernel whose both exponentials were tl.exp); where they differ by more, the closer one alone is named."""
    x = torch.randn(6, 8, dtype=torch.float64, device=current().device)
    ref, first = x.softmax(dim=-1), (2 * x).softmax(dim=-1)
    alike = first * (1 + 1e-9)  # another mistake whose result, on this input, is the first's
    out = (alike * (1 + 2e-9)).float()  # rounded nearer to the second reference, by chance
    for order in ((("first", first), ("alike", alike)), (("alike", alike), ("first", first))):
        # the first listed is named, the other follows it: the input gives no ground to choose between them
        with pytest.raises(AssertionError, match=rf"Hint: {order[0][0]}\n.*same result.*\nOr: {order[1][0]}$"):
            check(out.double(), ref, atol=1e-5, rtol=1e-5, reason="a test", suspects=dict(order))
    apart = first + 4e-6 * x.sign()  # a second mistake 0.4 of the tolerance away: the closer is named
    with pytest.raises(AssertionError, match="Hint: apart"):
        check(apart.clone(), ref, atol=1e-5, rtol=1e-5, reason="a test", suspects={"first": first, "apart": apart})
    with pytest.raises(AssertionError) as error:  # told apart: no "Or"
        check(apart.clone(), ref, atol=1e-5, rtol=1e-5, reason="a test", suspects={"first": first, "apart": apart})
    assert "Or: " not in str(error.value)


def test_suspects_given_as_a_function_are_built_only_where_the_output_is_wrong():
    """(session 38) Attention's suspects at a GPU's shapes cost far more than the comparison: given as a function,
    a passing check never calls it, and a failing one calls it once and names its match."""
    x = torch.randn(6, 8, dtype=torch.float64, device=current().device)
    calls = []

    def suspects():
        calls.append(1)
        return {"doubled": 2 * x, "halved": x / 2}

    check(x.clone(), x, quiet=True, suspects=suspects)
    assert not calls
    with pytest.raises(AssertionError, match="Hint: halved"):
        check(x / 2, x, quiet=True, suspects=suspects)
    assert len(calls) == 1


@triton.jit
def _mask_off_by_one_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n, other=0.0), mask=offsets <= n)


def test_one_element_past_the_end_names_a_mask_off_by_one():
    """A store masked with offsets <= n writes one element past out: "mask the stores" (as an unmasked store is
    told) misleads a learner whose store is masked (a helper's battery, session 28)."""
    x = torch.randn(100, device=current().device)
    out = nan_empty(100)
    _mask_off_by_one_kernel[(triton.cdiv(100, 32),)](x, out, 100, BLOCK_SIZE=32)
    with pytest.raises(AssertionError, match=r"(?s)wrote 1 element\(s\) past the end.*off by one \(offsets <= n"):
        check(out, x)


@triton.jit
def _row_stride_doubled_kernel(x_ptr, out_ptr, N, BLOCK_SIZE: tl.constexpr):
    row, cols = tl.program_id(0), tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + row * N + cols, mask=cols < N)
    tl.store(out_ptr + row * 2 * N + cols, x, mask=cols < N)  # the mistake: another tensor's row stride, 2 N


def test_stores_past_the_end_with_rows_never_written_point_at_the_offsets():
    """Rows stored at twice their stride: the later half of out never written, the rest past its end. Its mask is
    right: "mask the stores" (lesson 06's stride mistakes got it, session 28) sent the learner to the wrong line."""
    x = torch.randn(6, 40, device=current().device)
    with watch_memory() as stray:  # under the interpreter, the lanes out there too
        out = nan_empty((6, 40))
        _row_stride_doubled_kernel[(6,)](x, out, 40, BLOCK_SIZE=64)
    with pytest.raises(AssertionError) as e:
        check(out, x, stray=stray)
    message = str(e.value)
    assert "past the end" in message and "the stores went to the wrong places" in message, message
    assert "mask the stores" not in message and "needs a mask that keeps it inside" not in message, message


def test_of_two_matching_suspects_the_closer_is_named():
    """At bf16's tolerance two blurred attentions (a scale applied twice with tl.exp, or with tl.exp2) both matched
    on the H100, and the first was named: the closer one is."""
    ref = torch.linspace(1, 2, 64, dtype=torch.float64, device=current().device)
    near, nearer = ref * 1.04, ref * 1.03
    out = (ref * 1.032).float()  # within 1 % of both, 3 % off the answer
    with pytest.raises(AssertionError, match="the nearer one"):
        check(out, ref, atol=1e-3, rtol=1e-2, reason="test", suspects={"the near one": near, "the nearer one": nearer})


def test_a_scaled_suspect_is_compared_at_the_answers_scale():
    """A sum never divided by its count is count times the answer, and so are its rounding errors: compared as is,
    at the answer's atol, it did not match (lesson 06's attention without / l_i in bf16, session 28's H100 run);
    Scaled(ref, count) divides both by count first."""
    dev = current().device
    ref = torch.randn(50, 8, dtype=torch.float64, device=dev) * 0.05
    count = torch.linspace(20, 80, 50, dtype=torch.float64, device=dev)[:, None]
    noise = 1 + 4e-3 * torch.randn(50, 8, dtype=torch.float64, device=dev)  # bf16-sized errors, relative
    out = (ref * count * noise + 2e-3 * count * torch.randn(50, 8, device=dev)).float()  # and absolute, times count
    tol = dict(atol=1e-2, rtol=1.6e-2, reason="bf16's")
    with pytest.raises(AssertionError) as e:
        check(out, ref, **tol, suspects={"not divided": ref * count})
    assert "not divided" not in str(e.value)
    with pytest.raises(AssertionError, match="not divided"):
        check(out, ref, **tol, suspects={"not divided": Scaled(ref * count, count)})


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


def test_triton_interpret_is_read_as_triton_reads_it(monkeypatch):
    """TRITON_INTERPRET=true (or on, yes) turns Triton's interpreter on as =1 does: the course must then say
    interpreter, not "compiled" on a GPU whose kernels the interpreter runs."""
    from triton import knobs

    from utils import mode

    for value in ("1", "true", "True", "on", "yes", "0", "false", ""):
        monkeypatch.setenv("TRITON_INTERPRET", value)
        assert mode._interpret_asked() == knobs.runtime.interpret, value
    monkeypatch.setenv("TRITON_INTERPRET", "true")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a GPU is there: the variable alone decides
    usable, reason, _ = mode._probe_gpu()
    assert not usable and "TRITON_INTERPRET=true" in reason


def test_a_broken_cuda_context_is_told_apart_from_a_working_one(monkeypatch):
    """utils.mode.broken_cuda_context, which tests/conftest.py asks after every test (a broken context ends the
    process: the tests after it would all fail on the same error). Without CUDA, or before it is used, there is
    nothing to ask; a sync that raises is the error's first line; one that returns is a working context."""
    from utils import mode

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)

    def broken():
        raise torch.AcceleratorError("CUDA error: an illegal memory access was encountered\nSearch for ...")

    monkeypatch.setattr(torch.cuda, "synchronize", broken)
    assert mode.broken_cuda_context() == "CUDA error: an illegal memory access was encountered"
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    assert mode.broken_cuda_context() is None
    monkeypatch.setattr(torch.cuda, "synchronize", broken)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    assert mode.broken_cuda_context() is None  # CUDA never used in this process: nothing to break


def test_require_out_allocates_or_refuses_with_the_fix():
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
    from utils import require_int, require_int32_offsets, require_number, require_power_of_two

    for ok in (1, 2, 1024):
        require_power_of_two(ok, "BLOCK_SIZE")
    for bad in (0, -4, 3, 1000, 2.0, True, "64", None):
        with pytest.raises(ValueError, match="BLOCK_SIZE must be a positive power of two"):
            require_power_of_two(bad, "BLOCK_SIZE")
    for whole in (np.int64(16), 16.0):  # the right number in the wrong type: say so, not "a power of two" alone
        with pytest.raises(ValueError, match=r"given as a Python int, got .*16.*: pass BLOCK_SIZE=16 "):
            require_power_of_two(whole, "BLOCK_SIZE")
    assert require_number(1e-6, "eps", positive=True) == 1e-6
    with pytest.raises(TypeError, match="eps must be a real number"):
        require_number("1e-6", "eps")
    for bad in (float("nan"), float("inf"), 0.0):
        with pytest.raises(ValueError, match="eps must be"):
            require_number(bad, "eps", positive=True)
    # (session 53) a number held in a tensor: told to read it with .item(), not "try triton.next_power_of_2"
    with pytest.raises(ValueError, match=r"BLOCK_SIZE must be .* got a tensor of shape \(\) .*BLOCK_SIZE=t.item\(\)"):
        require_power_of_two(torch.tensor(128), "BLOCK_SIZE")
    with pytest.raises(ValueError, match=r"k must be a positive int, got a tensor of shape \(1,\).*k=t.item\(\)"):
        require_int(torch.tensor([4]), "k")
    with pytest.raises(TypeError, match=r"eps must be a real number, got a tensor of shape \(2,\).*pass one number"):
        require_number(torch.tensor([1e-6, 1e-5]), "eps")
    require_power_of_two(2**20, "BLOCK_SIZE")  # Triton's largest block
    # (session 53) flags: True or False (NumPy's too), never taken for their truth
    assert utils.require_bool(np.True_, "causal") is True and utils.require_bool(False, "causal") is False
    for bad in ("no", 0, 1.0, None, torch.tensor(True)):
        with pytest.raises(TypeError, match=r"kernels must be True or False \(False runs the references\), got"):
            utils.require_bool(bad, "kernels", "False runs the references")
    with pytest.raises(ValueError, match=r"BLOCK_SIZE=2097152 is more than the largest block Triton takes"):
        require_power_of_two(2**21, "BLOCK_SIZE")
    with pytest.raises(ValueError, match=r"BLOCK_SIZE=64 is more than this launch takes \(at most 32\)"):
        require_power_of_two(64, "BLOCK_SIZE", maximum=32)
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


def test_require_refuses_sparse_tensors_and_negated_views_in_and_out():
    """(session 37) A sparse tensor was called "a non-contiguous view" with strides (0, 0) and told to call
    .contiguous(), which keeps it sparse; a lazily negated view (x._neg_view(), what some conjugations give) ran,
    the kernel reading its memory unnegated: a silently wrong sign. Both refused with the fix, as input and as out."""
    d = current().device
    x = torch.randn(4, 6, device=d)
    with pytest.raises(TypeError, match=r"x is a torch\.sparse_coo tensor.*x\.to_dense\(\)"):
        require(x.to_sparse(), "x", dtype=torch.float32)
    with pytest.raises(ValueError, match=r"x is a negated view.*x\.resolve_neg\(\)"):
        require(x._neg_view(), "x", dtype=torch.float32)
    require(x._neg_view().resolve_neg(), "x", dtype=torch.float32)
    for bad, words in ((x.to_sparse(), "torch.sparse_coo tensor"), (torch.empty_like(x)._neg_view(), "negated view")):
        with pytest.raises(
            ValueError, match=rf"out is a {words}, but the kernel writes dense memory: pass torch\.empty"
        ):
            require_out(bad, shape=(4, 6), dtype=torch.float32, device=d)


def test_require_refuses_an_input_that_requires_grad_while_autograd_records():
    """(session 37) A forward-only launcher's output has no graph: an input that requires grad would get no gradient
    through it, without a word where another path reaches it too. Refused while autograd records, named with the
    fix; under torch.no_grad() (or detached, or with grad=True: lesson 11's Functions) it is fine."""
    w = torch.ones(6, device=current().device, requires_grad=True)
    with pytest.raises(
        ValueError, match=r"weight requires grad.*no backward pass.*torch\.no_grad\(\).*weight\.detach\(\)"
    ):
        require(w, "weight", dtype=torch.float32)
    with torch.no_grad():
        require(w, "weight", dtype=torch.float32)
    with torch.inference_mode():
        require(w, "weight", dtype=torch.float32)
    require(w.detach(), "weight", dtype=torch.float32)
    require(w, "weight", dtype=torch.float32, grad=True)
    # the other refusals come first where both apply: the dtype's fix is what to do before anything else
    with pytest.raises(TypeError, match="dtype float64"):
        require(w.double().detach().requires_grad_(), "weight", dtype=torch.float32)


def test_require_out_refuses_an_out_that_requires_grad_while_autograd_records():
    """(session 53) An out that requires grad (a leaf made with requires_grad=True) was overwritten by the kernel and
    handed back still requiring grad, with no graph behind it: backward() through it reaches no input, without a
    word. PyTorch's out= ops refuse it; so does require_out now, with the fix, unless autograd is off."""
    d = current().device
    out = torch.empty(6, 4, device=d, requires_grad=True)
    with pytest.raises(ValueError, match=r"out requires grad.*out\.detach\(\).*torch\.no_grad\(\)"):
        require_out(out, shape=(6, 4), dtype=torch.float32, device=d)
    with torch.no_grad():
        assert require_out(out, shape=(6, 4), dtype=torch.float32, device=d) is out
    detached = out.detach()
    assert require_out(detached, shape=(6, 4), dtype=torch.float32, device=d) is detached


# -- issue 10: NaN told apart, places named, hints that fit ------------------------------------------------------


@triton.jit
def softmax_without_max_kernel(x_ptr, out_ptr, N, stride_m, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + row * stride_m + cols, mask=cols < N, other=-float("inf"))
    e = tl.exp(x)  # the max is not subtracted: exp overflows to inf, and inf / inf is NaN
    tl.store(out_ptr + row * stride_m + cols, e / tl.sum(e, axis=0), mask=cols < N)


@triton.jit
def rmsnorm_kernel(
    x_ptr, out_ptr, N, stride_m, eps, OTHER: tl.constexpr, MEAN_OVER_BLOCK: tl.constexpr, BLOCK_N: tl.constexpr
):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + row * stride_m + cols, mask=cols < N, other=OTHER)
    if MEAN_OVER_BLOCK:
        ms = tl.sum(x * x, axis=0) / BLOCK_N  # the classic: divides by the block, not by the row length
    else:
        ms = tl.sum(x * x, axis=0) / N
    tl.store(out_ptr + row * stride_m + cols, x * tl.rsqrt(ms + eps), mask=cols < N)


@triton.jit
def add_kernel_stores_nan_past_the_end(x_ptr, y_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n
    value = tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.where(mask, value, float("nan")))  # unmasked: NaN lands past the end


def rmsnorm_ref(x, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)


def test_nan_empty_fills_with_our_payload_and_arithmetic_never_makes_it():
    from utils.checking import NAN_PAYLOAD, never_written

    for dtype, (int_dtype, bits) in NAN_PAYLOAD.items():
        t = nan_empty((2, 3), dtype, "cpu")
        assert torch.isnan(t.float()).all() and (t.view(int_dtype) == bits).all(), dtype
        assert never_written(t).all()
        if dtype != torch.bfloat16:  # the CPU computes bf16 through fp32; the others natively
            computed = torch.zeros(3, dtype=dtype) / torch.zeros(3, dtype=dtype)
            assert torch.isnan(computed).all() and not never_written(computed).any(), dtype


def test_a_computed_nan_is_not_called_never_written():
    x = rand(5, 20).clamp(-1, 1) * 60  # below exp's overflow (88.7 in fp32) everywhere...
    x[:, [3, 11]] = 100.0  # ...but here, in every row and not at its end: inf / inf is NaN there
    out = nan_empty(x.shape, device=DEV)
    softmax_without_max_kernel[(5,)](x, out, 20, x.stride(0), BLOCK_N=32)
    with pytest.raises(AssertionError) as e:
        check(out, torch.softmax(x.double(), dim=1))
    message = str(e.value)
    assert "NaN that the kernel computed" in message and "subtract the row max before tl.exp" in message
    assert "never written" not in message
    with pytest.raises(AssertionError, match="the max is not subtracted"):  # a lesson's suspect wins, NaN and all
        check(out, torch.softmax(x.double(), dim=1), suspects={"the max is not subtracted": out.clone()})


def test_never_written_and_computed_nan_are_both_reported():
    ref = torch.arange(1.0, 9.0, dtype=torch.float64)
    out = nan_empty(8, device=DEV)
    out[:4] = ref[:4].float()
    out[4:6] = torch.zeros(2) / torch.zeros(2)  # 0/0: NaN with the hardware's bits, not ours
    with pytest.raises(AssertionError) as e:
        check(out, ref)
    message = str(e.value)
    assert "never written" in message and "2 of 8 elements; the first at index (6,)" in message
    assert "NaN that the kernel computed" in message and "2 of 8 elements; the first at index (4,)" in message


def test_computed_nan_at_the_end_points_to_other():
    ref = torch.rand(3, 10, dtype=torch.float64)
    out = nan_empty(ref.shape, device=DEV)
    out.copy_(ref)
    out[:, -2:] = float("inf") - float("inf")  # what garbage past the end of each row gives
    with pytest.raises(AssertionError, match=r"(?s)NaN sit at the end.*other="):
        check(out, ref)


def test_whole_rows_of_computed_nan_point_to_fully_masked_rows():
    ref = torch.rand(4, 6, dtype=torch.float64)
    out = ref.float().to(DEV)
    out[1] = float("nan")
    with pytest.raises(AssertionError, match=r"(?s)Whole rows are NaN.*-inf - \(-inf\).*nan_empty"):
        check(out, ref)  # not allocated by nan_empty: the hint says these may be uninitialised memory


def test_a_nan_stored_past_the_end_is_counted():
    out, ref = launch_add(add_kernel_stores_nan_past_the_end, 1000)
    with pytest.raises(AssertionError, match=r"wrote 24 element\(s\) past the end"):
        check(out, ref)


def test_empty_grid_names_the_grid_and_cdiv():
    x, y = rand(1), rand(1)
    out, ref = nan_empty(1, device=DEV), x.double() + y.double()
    add_kernel[(1 // 128,)](x, y, out, 1, BLOCK_SIZE=128)  # n // BLOCK_SIZE: no program at all
    with pytest.raises(AssertionError) as e:
        check(out, ref)
    message = str(e.value)
    assert "Nothing was written" in message and "grid is empty" in message
    assert "triton.cdiv(n, BLOCK_SIZE)" in message and "tl.store" in message and "return out" in message


def test_later_rows_never_written_is_about_rows_not_cdiv():
    x = rand(7, 37)
    out = nan_empty(x.shape, device=DEV)
    scale_rows_kernel[(5,)](  # a grid of 5 programs for 7 rows
        x, out, 37, x.stride(0), x.stride(1), out.stride(0), out.stride(1), False, False, BLOCK_N=64
    )
    with pytest.raises(AssertionError) as e:
        check(out, 2 * x.double())
    message = str(e.value)
    assert "Whole rows were never written (rows ≥ 5 (of 7))" in message and "program id" in message
    assert "The last 74 elements" not in message


def test_per_row_factor_advice_fits_a_norm_and_is_not_given_for_one_element_rows():
    x = rand(4, 24)
    out = nan_empty(x.shape, device=DEV)
    rmsnorm_kernel[(4,)](x, out, 24, x.stride(0), 1e-6, OTHER=1.0, MEAN_OVER_BLOCK=False, BLOCK_N=32)
    with pytest.raises(AssertionError, match=r"(?s)own constant factor.*per-row scale or normaliser.*rsqrt"):
        check(out, rmsnorm_ref(x.double()))  # masked lanes loaded as 1 add to every row's sum of squares
    rmsnorm_kernel[(4,)](x, out, 24, x.stride(0), 1e-6, OTHER=0.0, MEAN_OVER_BLOCK=True, BLOCK_N=32)
    with pytest.raises(AssertionError, match=r"(?s)one constant factor, 1\.155.*BLOCK_SIZE instead of N"):
        check(out, rmsnorm_ref(x.double()))  # sqrt(32 / 24): the same in every row
    rmsnorm_kernel[(4,)](x, out, 24, x.stride(0), 1e-6, OTHER=0.0, MEAN_OVER_BLOCK=False, BLOCK_N=32)
    check(out, rmsnorm_ref(x.double()), quiet=True)

    ref = torch.rand(6, 1, dtype=torch.float64) + 1
    wrong = ref * torch.tensor([[1.5], [2.0], [0.5], [3.0], [1.25], [0.75]], dtype=torch.float64)
    with pytest.raises(AssertionError) as e:  # rows of one element: "constant per row" is true of any result
        check(wrong.float().to(DEV), ref)
    assert "constant factor" not in str(e.value)


def test_a_whole_result_off_by_one_factor():
    ref = torch.rand(3, 5, dtype=torch.float64) + 0.5
    with pytest.raises(AssertionError, match=r"one constant factor, 0\.125.*scale"):
        check((ref / 8).float().to(DEV), ref)


def test_tail_of_wrong_values_is_bounded():
    ref = torch.rand(100, dtype=torch.float64) + 1
    out = ref.float().to(DEV)
    out[-3:] += 1
    with pytest.raises(AssertionError, match="Only the last 3 elements are wrong"):
        check(out, ref)
    out = ref.float().to(DEV) * torch.linspace(1.5, 3, 100, device=DEV)
    out[0] = ref[0]
    with pytest.raises(AssertionError) as e:  # everything after the first element: not a tail
        check(out, ref)
    assert "Only the last" not in str(e.value)


def test_a_wrong_suffix_longer_than_a_row_points_at_an_offset():
    """Everything from the second batch's second position on wrong (a load with another tensor's batch stride, in
    lesson 06): "the tail block is not masked" sent a learner to a mask that was right."""
    ref = torch.rand(2, 5, 4, 8, dtype=torch.float64) + 1
    out = ref.float().to(DEV)
    out[1, 1:] *= 2.5 + torch.rand(4, 4, 8, device=DEV)
    with pytest.raises(AssertionError) as e:
        check(out, ref)
    message = str(e.value)
    assert "from index (1, 1, 0, 0) on" in message and "a stride of another tensor" in message, message
    assert "tail block is not masked" not in message, message


def test_a_short_right_prefix_that_chance_explains_is_not_an_offset():
    """Session 31's CI: lesson 04's fp16 arithmetic on fp32 rows of 1000 was right in 6.7 % of its elements by chance,
    the first three among them, and got "Only the last 2997 elements are wrong" (an offset) for a precision mistake.
    Three right at 6.7 % is chance (3e-4); a prefix of a whole row at that rate is not."""
    g = torch.Generator().manual_seed(4)
    ref = torch.rand(3, 1000, generator=g, dtype=torch.float64) + 1
    wrong = ref * (1 + 1e-3 * (torch.rand(3, 1000, generator=g, dtype=torch.float64) + 0.5))
    by_chance = torch.rand(3, 1000, generator=g) < 0.067
    by_chance.view(-1)[:3] = True
    out = torch.where(by_chance, ref, wrong)
    out.view(-1)[3] = wrong.view(-1)[3]
    with pytest.raises(AssertionError) as e:
        check(out.float().to(DEV), ref)
    assert "Only the last" not in str(e.value), str(e.value)
    out = torch.where(by_chance, ref, wrong)
    out[0] = ref[0]  # a whole row right: a place the mistake spares
    out[1, 0] = wrong[1, 0]
    with pytest.raises(AssertionError, match="Row 0 is right but every later row is wrong|Only the last 2000"):
        check(out.float().to(DEV), ref)  # (the rows' own hint comes first)


def test_a_whole_slice_wrong_but_one_value_equal_by_chance_is_still_named():
    """Batch 1 of a (2, 20, 4, 16) result wrong but one element, equal by chance: lesson 06's "v read with k's
    strides" got another hint about one run in fifty. 1 % of a slice may be right; a small slice must be whole."""
    ref = torch.rand(2, 20, 4, 16, dtype=torch.float64) + 1
    out = ref.float().to(DEV)
    out[1] *= 2.5
    out[1, 3, 2, 5] = ref[1, 3, 2, 5].float()
    with pytest.raises(AssertionError, match=r"Only dim 0 index 1 \(of 2\) is wrong, entirely"):
        check(out, ref)
    small = ref[:, :2, :2, :2].contiguous()  # slices of 8: one right element is not noise there
    out = small.float().to(DEV)
    out[1] *= 2.5
    out[1, 0, 0, 0] = small[1, 0, 0, 0].float()
    with pytest.raises(AssertionError) as e:
        check(out, small)
    assert "is wrong, entirely" not in str(e.value)


def _batch_1_wrong(right_share, spared=(), seed=0):
    """A (2, 50, 4, 32) bf16 result, batch 1 wrong but for a random ``right_share`` of its elements (equal by chance
    under bf16's loose tolerance, as 4-6 % of lesson 06's attention outputs were on an H100) and the places
    ``spared`` (indices into batch 1, right whatever the mistake)."""
    g = torch.Generator().manual_seed(seed)
    ref = torch.randn(2, 50, 4, 32, generator=g, dtype=torch.float64)
    out = ref.clone()
    out[1] += 0.5 + torch.rand(50, 4, 32, generator=g, dtype=torch.float64)
    by_chance = torch.rand(50, 4, 32, generator=g) < right_share
    out[1][by_chance] = ref[1][by_chance]
    for place in spared:
        out[1][place] = ref[1][place]
    return out.to(torch.bfloat16).to(DEV), ref


def test_a_slice_wrong_but_for_a_few_percent_right_by_chance_is_still_named():
    """Lesson 06 on an H100 (bf16): batch 1 read through k's strides was right in 3.9 % of its elements, by chance
    within bf16's tolerance, and the 1 % then allowed gave "Wrong values in many places" for v; for q (position 0 of a
    causal row is right whatever q is) the suffix from position 1 on, 5.4 % right, did not count either. One head at
    one position may be right whole by chance (at position 1, two keys, one weight decides the row): still chance."""
    out, ref = _batch_1_wrong(0.04)
    with pytest.raises(AssertionError, match=r"Only dim 0 index 1 \(of 2\) is wrong, entirely \(but for 4") as e:
        check(out, ref)
    assert "scattered: within the tolerance by chance" in str(e.value)
    out, ref = _batch_1_wrong(0.04, spared=[(7, 3)])  # one head at one position right at once: one weight decides it
    with pytest.raises(AssertionError, match=r"Only dim 0 index 1 \(of 2\) is wrong, entirely"):
        check(out, ref)
    out, ref = _batch_1_wrong(0.05, spared=[0, (1, 2)])  # position 0 right: not the slice, but the suffix after it
    with pytest.raises(AssertionError) as e:
        check(out, ref)
    message = str(e.value)
    assert "from index (1, 1, 0, 0) on" in message and "a stride of another tensor" in message, message
    assert "is wrong, entirely" not in message, message


@pytest.mark.parametrize(
    "right_share, spared, says",
    [
        (0.03, [slice(0, 4)], "from index (1, 4, 0, 0) on"),  # positions < 4 spared: 8 % of the slice, not by chance
        (0.03, [(slice(None), slice(None), 5)], None),  # column 5 spared in every row: 3 %, all in one place
        (0.3, [], None),  # 30 % right, scattered: more than chance gives, a mistake that misses much of the slice
    ],
    ids=["positions spared", "a column spared", "30 % right"],
)
def test_right_elements_that_chance_does_not_explain_keep_the_slice_unnamed(right_share, spared, says):
    """Right elements are put down to chance only when few (1/8 of the region at most) and scattered: a place the
    mistake spares (whole positions, a column) or a large share right means that batch 1 is not wrong throughout.
    Positions < 4 spared leave a suffix wrong from position 4 on (its 3 % right by chance)."""
    out, ref = _batch_1_wrong(right_share, spared)
    with pytest.raises(AssertionError) as e:
        check(out, ref)
    message = str(e.value)
    assert "is wrong, entirely" not in message, message
    if says is None:
        assert "by chance" not in message, message
    else:
        assert says in message, message


def test_places_in_4d_results_are_named_by_dimension():
    ref = torch.rand(2, 5, 4, 8, dtype=torch.float64) + 1  # (batch, position, head, dim)
    dims = ("batch", "position", "head", "dim")
    out = ref.float().to(DEV)
    out[:, :, 1:3] += 1
    with pytest.raises(AssertionError) as e:
        check(out, ref, dims=dims)
    message = str(e.value)
    assert "all 2 batches; all 5 positions; heads 1 and 2 (of 4); all 8 dims" in message
    assert "Only heads 1 and 2 (of 4) are wrong, entirely" in message
    with pytest.raises(AssertionError, match=r"dim 2 indices 1 and 2 \(of 4\)"):
        check(out, ref)  # without names: per-dimension index sets, not flattened rows

    out = ref.float().to(DEV)
    out[:, 1:] *= -1  # wrong from position 1 on (a rotation with the wrong sign is right at position 0)
    with pytest.raises(AssertionError, match=r"(?s)positions ≥ 1 \(of 5\).*Only positions ≥ 1 \(of 5\) are wrong"):
        check(out, ref, dims=dims)

    out = nan_empty(ref.shape, device=DEV)
    out[:, :, :2] = ref[:, :, :2].float()
    with pytest.raises(AssertionError, match=r"Whole heads were never written \(heads ≥ 2 \(of 4\)\)"):
        check(out, ref, dims=dims)
    with pytest.raises(ValueError, match="one name per dimension"):
        check(out, ref, dims=("batch", "head"))


def test_the_general_hint_of_python_code_does_not_talk_about_kernels():
    ref = torch.rand(20, dtype=torch.float64)
    wrong = torch.rand(20, dtype=torch.float64).float().to(DEV)
    with pytest.raises(AssertionError) as e:
        check(wrong, ref, kind="python")
    assert "Try the function on a tiny input" in str(e.value) and "kernel" not in str(e.value)
    with pytest.raises(AssertionError, match="Run the kernel on a tiny input"):
        check(wrong, ref)
    with pytest.raises(ValueError, match="kind"):
        check(wrong, ref, kind="notebook")


def test_empty_results_are_said_to_be_empty(capsys):
    empty = torch.empty(0, 4, device=DEV)
    check(empty, torch.empty(0, 4, dtype=torch.float64))
    assert "is empty (shape (0, 4)), as the reference is: nothing to compare" in capsys.readouterr().out
    with pytest.raises(AssertionError, match="nothing was compared"):
        check(empty, torch.empty(0, 4, dtype=torch.float64), empty_ok=False)


def test_require_accepts_dtype_names_and_never_contradicts_itself():
    from utils import require_out

    x = rand(3)
    require(x, "x", dtype="float32")
    require(x, "x", dtype=("float16", "torch.float32"))
    with pytest.raises(TypeError) as e:
        require(x.double(), "x", dtype="float32")
    assert "has dtype float64, but this kernel takes float32" in str(e.value)
    with pytest.raises(TypeError, match="must be a torch dtype such as torch.float32, got str 'floot32'"):
        require(x, "x", dtype="floot32")
    assert require_out(None, shape=(2,), dtype="float16", device=DEV).dtype == torch.float16
    assert nan_empty(2, "float16", DEV).dtype == torch.float16
    with pytest.raises(AssertionError, match="should be float16"):
        check(x, x.double(), dtype="float16")


def test_the_harness_frames_are_hidden_from_tracebacks():
    """Every frame of utils.checking between the learner's call and the error hides itself (pytest and IPython)."""
    import utils.checking

    failing = {
        "check": lambda: check(nan_empty(4, device=DEV), torch.zeros(4, dtype=torch.float64)),
        "refuses": lambda: refuses({"nothing": lambda: None}, quiet=True),
        "require": lambda: require(rand(3), "x", dtype="float64"),
        "require with a bad dtype name": lambda: require(rand(3), "x", dtype="floot32"),
    }
    for what, call in failing.items():
        with pytest.raises((AssertionError, TypeError)) as e:
            call()
        frames = [tb.tb_frame for tb in _walk(e.value.__traceback__)]
        harness = [f for f in frames if f.f_code.co_filename == utils.checking.__file__]
        assert harness, what
        assert all(f.f_locals.get("__tracebackhide__") for f in harness), (what, [f.f_code.co_name for f in harness])
        # IPython shows the raising frame even when it is hidden: it is the three-line _raise, not the checker
        assert harness[-1].f_code.co_name == "_raise", (what, harness[-1].f_code.co_name)


def _walk(tb):
    while tb is not None:
        yield tb
        tb = tb.tb_next


def test_the_interpreters_nan_warnings_are_silenced():
    import inspect
    import warnings

    from utils import mode

    if not current().interpret:
        pytest.skip("compiled kernels: no interpreter to warn")

    @triton.jit
    def cast_nan_kernel(x_ptr, out_ptr, BLOCK_SIZE: tl.constexpr):
        offs = tl.arange(0, BLOCK_SIZE)
        tl.store(out_ptr + offs, tl.load(x_ptr + offs).to(tl.int32).to(tl.float32))  # NumPy: "invalid value"

    def warned(quiet: bool) -> list[str]:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            if quiet:
                mode._quiet_interpreter_nan_warnings()
            cast_nan_kernel[(1,)](nan_empty(16, device=DEV), nan_empty(16, device=DEV), BLOCK_SIZE=16)
        return [str(w.message) for w in seen if "invalid value" in str(w.message)]

    assert warned(quiet=False), "the kernel no longer makes NumPy warn: this test cannot fail"
    assert not warned(quiet=True)
    # utils.setup installs the filter when it turns the interpreter on (pytest restores the filters it found
    # around each test, so the installed one is checked in the setup code rather than in warnings.filters)
    assert "_quiet_interpreter_nan_warnings()" in inspect.getsource(mode._detect)


@triton.jit
def _twice(x):
    return x * 2


@triton.jit
def _helpers_in_a_loop_kernel(x_ptr, out_ptr, n, STEPS: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    for _ in range(STEPS):
        x = _twice(x) + tl.sum(x, axis=0) * 0  # a helper of this module and one of triton.language's
    tl.store(out_ptr + offs, x, mask=offs < n)


@pytest.mark.skipif(not current().interpret, reason="the interpreter's language swap; compiled kernels have none")
def test_the_interpreter_swaps_the_language_once_a_launch(monkeypatch):
    """utils.mode makes the helpers' calls inside a launch skip Triton's swap of triton.language, which the launch
    has made already: same results, a number of swaps that does not grow with the helper calls, and
    triton.language exactly as it was once the launch is over (also after a launch that fails)."""
    from triton.runtime import interpreter

    assert getattr(interpreter._patch_lang, "once_per_launch", False), "utils.mode did not install the speed-up"
    swaps = []
    builtin = interpreter._patch_builtin
    monkeypatch.setattr(interpreter, "_patch_builtin", lambda *a: swaps.append(a[0]) or builtin(*a))
    before = {name: getattr(tl, name) for name in ("load", "store", "sum", "arange")}
    x = torch.arange(10, dtype=torch.float32)
    counts = []
    _helpers_in_a_loop_kernel[(1,)](x, nan_empty(10), 10, STEPS=1, BLOCK=4)  # Triton's first swaps differ
    for steps in (1, 6):
        out = nan_empty(10)
        swaps.clear()
        _helpers_in_a_loop_kernel[(3,)](x, out, 10, STEPS=steps, BLOCK=4)
        torch.testing.assert_close(out, x * 2**steps)
        counts.append(len(swaps))
    assert counts[0] == counts[1], f"swaps of triton.language for 1 and 6 helper calls a program: {counts}"
    assert {name: getattr(tl, name) for name in before} == before, "triton.language was not put back"
    with pytest.raises(Exception, match="not_a_tensor|NoneType|unsupported"):
        _helpers_in_a_loop_kernel[(1,)](None, out, 10, STEPS=1, BLOCK=4)
    assert {name: getattr(tl, name) for name in before} == before, "a failed launch left triton.language swapped"
    out = nan_empty(10)
    _helpers_in_a_loop_kernel[(3,)](x, out, 10, STEPS=2, BLOCK=4)  # the bookkeeping survived the failure
    torch.testing.assert_close(out, x * 4)


@pytest.mark.skipif(not current().interpret, reason="the interpreter's dtype lookups; compiled kernels have none")
def test_the_kept_numpy_dtypes_are_those_triton_gives():
    """(session 37) utils.mode keeps _get_np_dtype's answers (Triton builds its table at every operation): for every
    dtype, a block of it, a pointer and a block of pointers, asked twice, the answer is Triton's own."""
    from triton.runtime import interpreter

    kept = interpreter._get_np_dtype
    assert getattr(kept, "kept", None) is not None, "utils.mode did not install the kept lookups"
    own = kept.kept
    names = ["int1", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float16", "bfloat16"]
    names += ["float32", "float64", "float8e5", "float8e4nv"]
    kinds = [getattr(tl, name) for name in names] + [tl.pointer_type(tl.float16), tl.pointer_type(tl.int8)]
    for kind in kinds:
        for asked in (kind, tl.block_type(kind, [4]), tl.block_type(kind, [2, 8]), kind):
            assert kept(asked) == own(asked), f"{asked}: kept {kept(asked)}, Triton's own {own(asked)}"
    with pytest.raises(KeyError):  # a dtype Triton has no NumPy type for is refused as Triton refuses it
        kept(tl.void)


@pytest.mark.skipif(not current().interpret, reason="the interpreter's language swap; compiled kernels have none")
def test_the_listed_builtins_are_swapped_as_triton_swaps_them():
    """utils.mode lists triton.language's builtins once instead of at every launch: the list must swap exactly what
    Triton's own scan swaps, package by package, and everything must be put back."""
    from triton.runtime import interpreter

    listed = interpreter._patch_builtin
    assert hasattr(listed, "triton_own"), "utils.mode did not install the listed swap"
    for package in (tl, tl.tensor, tl.math, tl.core):
        swapped = {}
        for name, patch in (("listed", listed), ("triton", listed.triton_own)):
            scope = interpreter._LangPatchScope()
            patch(package, interpreter.interpreter_builder, scope)
            swapped[name] = {attr for _, attr, _ in scope._changes}
            scope.restore()
        assert swapped["listed"] == swapped["triton"], f"{package}: {swapped['listed'] ^ swapped['triton']}"
        if package is not tl.core:  # Triton leaves part of core swapped after a helper's call: nothing to swap then
            assert swapped["listed"], f"nothing of {package} swapped"


def test_an_error_far_beyond_rounding_is_not_called_a_precision_problem():
    """2.5 % off everywhere (GELU with its cubic term lost, say) is a formula mistake: fp16 rounding costs 2**-11
    per step, and even an fp16 accumulator stays well under 1 %."""
    ref = torch.randn(64, 64, dtype=torch.float64)
    noise = 0.025 * torch.where(torch.rand(64, 64) < 0.5, -1.0, 1.0).double()
    for dtype in (torch.float16, torch.float32):
        out = (ref * (1 + noise)).to(dtype).to(DEV)
        with pytest.raises(AssertionError) as failure:
            check(out, ref)
        assert "precision problem" not in str(failure.value)


def test_reads_outside_lead_the_report_when_the_values_are_wrong():
    """Garbage read past a tensor's end is the likely cause of NaN or wrong values: that paragraph comes first."""
    from utils.memcheck import Stray

    ref = torch.randn(8, 8, dtype=torch.float64)
    out = ref.float().clone()
    out[:, 3] = float("nan")
    stray = [Stray("k", "reads", "b_ptr", True, 256, 4, lanes=8, farthest=32)]
    with pytest.raises(AssertionError) as failure:
        check(out.to(DEV), ref, stray=stray)
    message = str(failure.value)
    assert message.startswith("The kernel reads memory outside") and "likely cause" in message
    assert message.index("`k` reads 8 lane(s)") < message.index("has NaN that the kernel computed")
    with pytest.raises(AssertionError) as failure:  # right values: the reads are reported after, as before
        check(ref.float().to(DEV), ref, stray=stray)
    assert str(failure.value).startswith("output is right, but the kernel touches memory")


def test_diagnose_names_what_no_suspect_stands_for():
    """check(diagnose=...) is asked, with out in fp64, only when no suspect matches, and its hint is the one given;
    a diagnosis of None leaves the general hint."""
    ref = torch.arange(6.0, device=DEV)
    out = ref.clone()
    out[3] = -1.0
    seen = []

    def diagnose(got):
        seen.append(got.dtype)
        return "element 3 is the sentinel -1"

    with pytest.raises(AssertionError, match="Hint: element 3 is the sentinel -1"):
        check(out, ref, quiet=True, diagnose=diagnose)
    assert seen == [torch.float64]
    with pytest.raises(AssertionError, match="Hint: a suspect"):
        check(out, ref, quiet=True, suspects={"a suspect": out.double()}, diagnose=diagnose)
    assert len(seen) == 1, "diagnose was asked though a suspect matched"
    with pytest.raises(AssertionError) as failure:
        check(out, ref, quiet=True, diagnose=lambda got: None)
    assert "sentinel" not in str(failure.value) and "Hint:" in str(failure.value)


def test_a_few_scattered_wrong_elements_are_not_called_many_places():
    """Two wrong elements of 3072 (a block's edge, a special input) got "Wrong values in many places", which sends a
    learner after the formula that is right everywhere else."""
    ref = torch.randn(64, 48, dtype=torch.float64)
    out = ref.float().to(DEV)
    out[3, 5] += 1
    out[10, 7] -= 3
    with pytest.raises(AssertionError) as e:
        check(out, ref)
    assert "only 2 scattered places of 3072" in str(e.value) and "many places" not in str(e.value)
    out = ref.float().to(DEV)
    out[0, 0] += 0.5
    with pytest.raises(AssertionError, match="only one place of 3072"):
        check(out, ref)


def test_an_output_of_zeros_does_not_pass_a_reference_within_atol_of_zero():
    """A launcher that returns torch.zeros it never passed to the kernel passed every check whose reference lies
    within atol of 0 (gradients of 1e-6 under fp32's atol of 1e-5); zeros still pass a reference of zeros, or of
    fp64 noise around one."""
    ref = torch.randn(100, dtype=torch.float64) * 1e-6
    with pytest.raises(AssertionError, match="all zeros, but the reference is not"):
        check(torch.zeros(100, device=DEV), ref)
    check(torch.zeros(100, device=DEV), torch.zeros(100, dtype=torch.float64), quiet=True)
    check(torch.zeros(100, device=DEV), ref * 1e-11, quiet=True)
    check(ref.float().to(DEV), ref, quiet=True)


def test_returned_names_what_came_back_where_a_check_unpacks_results():
    """(session 36) A check that unpacks fn's results (values, indices = fn(...)) raised Python's own "not enough
    values to unpack" or "cannot unpack non-iterable NoneType" for a learner's function that returned one tensor or
    forgot its return; utils.returned names what came back and what was expected."""
    from utils import returned

    t = torch.zeros(3)
    assert returned((t, t), ("values", "indices"), "f") == (t, t)
    assert returned([t, t], ("values", "indices"), "f") == (t, t)
    table = {"key": t, "sum": t, "extra": 1}
    assert returned(table, {"key", "sum"}, "q") is table
    cases = [
        (None, "forget to `return`"),
        (t, "one tensor of shape (3,)"),
        ((t,), "a tuple of 1 (Tensor)"),
        ((t, t, t), "a tuple of 3"),
        ("values", "a str"),
    ]
    for got, words in cases:
        with pytest.raises(AssertionError, match=r"f should return 2 results, \(values, indices\), but returned") as e:
            returned(got, ("values", "indices"), "f")
        assert words in str(e.value)

    def sort_rows(x):  # the function itself: its name is the call's
        return x

    with pytest.raises(AssertionError, match=r"^sort_rows should return 2 results"):
        returned(t, ("values", "indices"), sort_rows)
    with pytest.raises(AssertionError, match=r"'sum' is not\)") as e:
        returned({"key": t, "sum": [1.0]}, {"key", "sum"}, "q")
    with pytest.raises(AssertionError, match="a table: a dict holding a tensor under each of 'key', 'sum'"):
        returned((t, t), {"key", "sum"}, "q")
