"""Lesson 02 (SIMT vs blocks): its checks on the solution and on each classic mistake planted (with the specific
hint asserted), every launcher's refusals, and empty inputs.

The planted mistakes are small wrong kernels and launchers written here; the checks are the lesson's own
check_* functions, the same ones its notebook calls."""

import functools

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

import utils
import utils.checking
from utils.lessons import load
from utils.mode import current
from utils.mutants import plant

ENV = current()  # before any @triton.jit below: the interpreter is decided here
L = load("02")
DEV = ENV.device


# -- the solution passes every check -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "check, fn",
    [
        ("check_num_programs", "num_programs"),
        ("check_owner", "owner"),
        ("check_whoami", "whoami"),
        ("check_whoami_masked", "whoami_masked"),
        ("check_scale", "scale"),
        ("check_add", "add"),
        ("check_scale_rows", "scale_rows"),
    ],
)
def test_checks_pass_on_the_solution(check, fn, capsys):
    getattr(L, check)(getattr(L, fn))
    assert "✓" in capsys.readouterr().out


def test_cuda_simulation_agrees_with_the_spec():
    x, y = torch.randn(300, device=DEV), torch.randn(300, device=DEV)
    utils.check(L.add_cuda(x, y, threads_per_block=64), L.add_ref(x.double(), y.double()), quiet=True)
    xs, s = torch.randn(3, 40, device=DEV), torch.randn(3, device=DEV)
    utils.check(L.scale_rows_cuda(xs, s), L.scale_rows_ref(xs.double(), s.double()), quiet=True)


def test_cuda_simulation_takes_any_shape_and_refuses_a_block_of_no_threads():
    """A 2-D x is added element for element (x[i] of its list was a whole row: IndexError); threads_per_block of 0
    divided by zero, and a negative one launched no thread and returned NaN without a word."""
    x, y = torch.randn(3, 5, device=DEV), torch.randn(3, 5, device=DEV)
    utils.check(L.add_cuda(x, y, threads_per_block=4), L.add_ref(x.double(), y.double()), quiet=True)
    for bad in (0, -1, 2.5):
        for call in (
            lambda: L.add_cuda(x, y, threads_per_block=bad),
            lambda: L.owners_cuda(10, bad),
            lambda: L.scale_rows_cuda(x, torch.randn(3, device=DEV), threads_per_block=bad),
        ):
            with pytest.raises(ValueError, match="threads_per_block must be a positive int"):
                call()
    with pytest.raises(ValueError, match="s has shape"):
        L.scale_rows_cuda(x, torch.randn(5, device=DEV))
    with pytest.raises(ValueError, match="x must have 2 dimension"):
        L.scale_rows_cuda(torch.randn(5, device=DEV), torch.randn(5, device=DEV))


# -- planted mistakes: the check fails, and says the specific thing ----------------------------------------------


def _fails_with(check, fn, *phrases):
    with pytest.raises(AssertionError) as err:
        check(fn, quiet=True)
    for phrase in phrases:
        assert phrase in str(err.value), f"{phrase!r} not in:\n{err.value}"


def test_num_programs_rounded_down():
    _fails_with(L.check_num_programs, lambda n, B: n // B, "rounds down")


def test_num_programs_one_too_many():
    _fails_with(L.check_num_programs, lambda n, B: n // B + 1, "one program too many")


def test_owner_is_the_lane():
    _fails_with(L.check_owner, lambda i, B: i % B, "the lane of element i")


def test_owner_rounded_up():
    _fails_with(L.check_owner, lambda i, B: (i + B - 1) // B, "rounds up")


@triton.jit
def whoami_offsets_kernel(out_ptr, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(axis=0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    tl.store(out_ptr + offsets, offsets)  # the mistake: the offsets, not the program id


@triton.jit
def whoami_lane_kernel(out_ptr, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(axis=0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    tl.store(out_ptr + offsets, tl.arange(0, BLOCK_SIZE))  # the mistake: the lane, not the program id


@triton.jit
def whoami_num_programs_kernel(out_ptr, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(axis=0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    tl.store(out_ptr + offsets, tl.num_programs(axis=0))  # the mistake: how many programs, not which


@triton.jit
def whoami_by_128_kernel(out_ptr, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(axis=0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    tl.store(out_ptr + offsets, offsets // 128)  # the mistake: right only where BLOCK_SIZE is 128


@triton.jit
def whoami_no_mask_kernel(out_ptr, n, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    tl.store(out_ptr + offsets, pid)  # the mistake: no mask


def _whoami_with(kernel):
    def launcher(n, *, out=None, BLOCK_SIZE=128):
        kernel[(n // BLOCK_SIZE,)](out, BLOCK_SIZE=BLOCK_SIZE)
        return out

    return launcher


@pytest.mark.parametrize(
    "kernel, phrase",
    [
        (whoami_offsets_kernel, "its own offset"),
        (whoami_lane_kernel, "its lane number"),
        # (session 52) these two got "Wrong values in many places"
        (whoami_num_programs_kernel, "the number of programs (tl.num_programs)"),
        (whoami_by_128_kernel, "as if every block were 128 long"),
    ],
)
def test_whoami_stores_the_wrong_number(kernel, phrase):
    _fails_with(L.check_whoami, _whoami_with(kernel), phrase)


def test_whoami_block_start_stored(monkeypatch, tmp_path):
    """pid * BLOCK_SIZE stored, the block's first offset (session 35): 'Wrong values in many places' before."""
    plant(
        monkeypatch,
        tmp_path,
        L,
        "whoami_kernel",
        ("tl.store(out_ptr + offsets, pid)", "tl.store(out_ptr + offsets, pid * BLOCK_SIZE)"),
    )
    _fails_with(L.check_whoami, L.whoami, "block's first offset")


def test_whoami_ids_from_one(monkeypatch, tmp_path):
    """pid + 1 stored (ids counted from 1, as check_owner already names): 'Wrong values in many places' before."""
    plant(
        monkeypatch,
        tmp_path,
        L,
        "whoami_kernel",
        ("tl.store(out_ptr + offsets, pid)", "tl.store(out_ptr + offsets, pid + 1)"),
    )
    _fails_with(L.check_whoami, L.whoami, "every id is one too large")
    plant(monkeypatch, tmp_path, L, "whoami_masked_kernel", ("pid, mask=mask", "pid + 1, mask=mask"))
    _fails_with(L.check_whoami_masked, L.whoami_masked, "every id is one too large")


def test_whoami_masked_without_a_mask():
    def launcher(n, *, out=None, BLOCK_SIZE=128):
        whoami_no_mask_kernel[(triton.cdiv(n, BLOCK_SIZE),)](out, n, BLOCK_SIZE=BLOCK_SIZE)
        return out

    _fails_with(L.check_whoami_masked, launcher, "past the end", "mask the stores")


def test_scale_grid_rounded_down():
    def launcher(x, alpha, *, out=None, BLOCK_SIZE=1024):
        n = x.numel()
        L.scale_kernel[(n // BLOCK_SIZE,)](x, out, alpha, n, BLOCK_SIZE=BLOCK_SIZE)  # the mistake: rounds down
        return out

    _fails_with(L.check_scale, launcher, "never written", "triton.cdiv(n, BLOCK_SIZE)")


@triton.jit
def scale_without_alpha_kernel(x_ptr, out_ptr, alpha, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(axis=0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask), mask=mask)  # the mistake: alpha forgotten


def test_scale_forgets_alpha():
    def launcher(x, alpha, *, out=None, BLOCK_SIZE=1024):
        n = x.numel()
        scale_without_alpha_kernel[(triton.cdiv(n, BLOCK_SIZE),)](x, out, alpha, n, BLOCK_SIZE=BLOCK_SIZE)
        return out

    _fails_with(L.check_scale, launcher, "without multiplying it by alpha")


@triton.jit
def add_wrong_pointer_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(axis=0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(x_ptr + offsets, mask=mask)  # the mistake: x's pointer
    tl.store(out_ptr + offsets, x + y, mask=mask)


@triton.jit
def add_no_mask_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(axis=0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y)  # the mistake: no mask on the store


def test_add_loads_the_wrong_pointer():
    _fails_with(L.check_add, functools.partial(L.add, kernel=add_wrong_pointer_kernel), "loaded through x's pointer")


def test_add_without_a_mask():
    _fails_with(L.check_add, functools.partial(L.add, kernel=add_no_mask_kernel), "past the end", "mask the stores")


def test_add_grid_rounded_down():
    def launcher(x, y, *, out=None):
        n = x.numel()
        L.add_kernel[(n // 1024,)](x, y, out, n, BLOCK_SIZE=1024)  # the mistake: n // BLOCK_SIZE
        return out

    _fails_with(L.check_add, launcher, "never written", "triton.cdiv(n, BLOCK_SIZE)")


@triton.jit
def add_axis_1_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(axis=1) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)  # the mistake: the grid is 1-D
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask), mask=mask)


def test_add_on_the_wrong_grid_axis_is_not_blamed_on_the_grid():
    """Every program writes block 0: the grid is right, tl.program_id(1) is what is wrong."""
    with pytest.raises(AssertionError) as failure:
        L.check_add(functools.partial(L.add, kernel=add_axis_1_kernel), quiet=True)
    message = str(failure.value)
    assert "every program wrote block 0" in message and "tl.program_id(1)" in message, message
    assert "n // BLOCK_SIZE" not in message, message


def test_scale_rows_with_the_wrong_row_stride():
    def launcher(x, s, *, out=None, BLOCK_SIZE=64):
        M, N = x.shape
        grid = (triton.cdiv(N, BLOCK_SIZE), M)
        L.scale_rows_kernel[grid](x, s, out, N, N, N, BLOCK_SIZE=BLOCK_SIZE)  # the mistake: N, not x.stride(0)
        return out

    _fails_with(L.check_scale_rows, launcher, "Row 0 is right but every later row is wrong", "stride")


_BLOCK_START = "offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)"
PLANTED = {  # mistake: (check, launcher, kernel, (the kernel's text, the mistake's), words of the hint)
    "scale adds alpha": ("check_scale", "scale", "scale_kernel", ("alpha * x", "alpha + x"), "alpha is added"),
    "scale's blocks overlap": (
        "check_scale",
        "scale",
        "scale_kernel",
        (_BLOCK_START, _BLOCK_START.replace("pid * BLOCK_SIZE", "pid")),
        "the blocks overlap",
    ),  # fmt: skip
    "add subtracts": ("check_add", "add", "add_kernel", ("x + y", "x - y"), "y is subtracted"),
    "add's blocks overlap": (
        "check_add",
        "add",
        "add_kernel",
        (_BLOCK_START, _BLOCK_START.replace("pid * BLOCK_SIZE", "pid")),
        "the blocks overlap",
    ),  # fmt: skip
    "scale_rows stores with x's stride": (
        "check_scale_rows",
        "scale_rows",
        "scale_rows_kernel",
        ("out_ptr + row_start * stride_om", "out_ptr + row_start * stride_xm"),
        "out is written with x's row stride",
    ),  # fmt: skip
}


PLANTED.update(
    {  # session 28's battery: mistakes that passed, or got only "wrong values in many places"
        "num_programs divides with /": (
            "check_num_programs",
            "num_programs",
            "num_programs",
            ("(n + BLOCK_SIZE - 1) // BLOCK_SIZE", "(n + BLOCK_SIZE - 1) / BLOCK_SIZE"),
            "/ is true division",
        ),
        "num_programs is 1 for n = 0": (
            "check_num_programs",
            "num_programs",
            "num_programs",
            ("return (n + BLOCK_SIZE - 1) // BLOCK_SIZE", "return max(1, (n + BLOCK_SIZE - 1) // BLOCK_SIZE)"),
            "only n = 0 is wrong",
        ),
        "owner divides with /": (
            "check_owner",
            "owner",
            "owner",
            ("i // BLOCK_SIZE", "i / BLOCK_SIZE"),
            "true division",
        ),
        "owner counts from 1": (
            "check_owner",
            "owner",
            "owner",
            ("i // BLOCK_SIZE", "i // BLOCK_SIZE + 1"),
            "program ids count from 0",
        ),
        "scale divides by alpha": ("check_scale", "scale", "scale_kernel", ("alpha * x", "x / alpha"), "x is divided"),
        "scale loads block 0 in every program": (
            "check_scale",
            "scale",
            "scale_kernel",
            ("x_ptr + offsets", "x_ptr + tl.arange(0, BLOCK_SIZE)"),
            "every later block repeats",
        ),
        "scale's grid holds BLOCK_SIZE programs": (
            "check_scale",
            "scale",
            "scale",
            ("grid = (triton.cdiv(n, BLOCK_SIZE),)", "grid = (BLOCK_SIZE,)"),
            "the grid has BLOCK_SIZE programs",
        ),
        "scale returns a tensor of its own": (
            "check_scale",
            "scale",
            "scale",
            ("    scale_kernel[grid](x, out,", "    out = torch.empty_like(x)\n    scale_kernel[grid](x, out,"),
            "must write into the out it is given",
        ),
        "scale writes into x": (
            "check_scale",
            "scale",
            "scale",
            ("scale_kernel[grid](x, out,", "scale_kernel[grid](x, x,"),
            "changed its input x",
        ),
        "add multiplies": ("check_add", "add", "add_kernel", ("x + y", "x * y"), "x and y are multiplied"),
        "add computes y - x": ("check_add", "add", "add_kernel", ("x + y", "y - x"), "x is subtracted"),
        "add returns x + y": (
            "check_add",
            "add",
            "add",
            ("num_warps=num_warps)\n    return out", "num_warps=num_warps)\n    return x + y"),
            "must write into the out it is given",
        ),
        "scale_rows returns a tensor of its own": (
            "check_scale_rows",
            "scale_rows",
            "scale_rows",
            ("    return out\n", "    return out.clone()\n"),
            "must write into the out it is given",
        ),
    }
)


@pytest.mark.parametrize("mistake", list(PLANTED))
def test_check_names_a_planted_mistake(mistake, monkeypatch, tmp_path):
    """A learner's mistake written into the solution's own kernel: the check names it (not "wrong values")."""
    check, launcher, kernel, edit, words = PLANTED[mistake]
    plant(monkeypatch, tmp_path, L, kernel, edit)
    _fails_with(getattr(L, check), getattr(L, launcher), words)


# -- every launcher refuses bad inputs before it launches --------------------------------------------------------


def _x(n=1000, dtype=torch.float32):
    return torch.randn(n, device=DEV, dtype=dtype)


BAD = {
    "add: shapes differ": (lambda: L.add(_x(), _x(999)), ValueError, "must match"),
    "add: mixed dtypes": (lambda: L.add(_x(), _x().half()), TypeError, "dtype"),
    "add: integers": (lambda: L.add(_x().int(), _x().int()), TypeError, "dtype"),
    "add: non-contiguous": (lambda: L.add(_x(2000)[::2], _x(2000)[1::2]), ValueError, "contiguous"),
    "add: numpy": (lambda: L.add(_x().cpu().numpy(), _x().cpu().numpy()), TypeError, "torch.Tensor"),
    "add: None": (lambda: L.add(None, _x()), TypeError, "torch.Tensor"),
    "add: out wrong shape": (lambda: L.add(_x(), _x(), out=torch.empty(999, device=DEV)), ValueError, "shape"),
    "add: out wrong dtype": (
        lambda: L.add(_x(), _x(), out=torch.empty(1000, device=DEV, dtype=torch.float16)),
        TypeError,
        "dtype",
    ),
    "add: out strided": (lambda: L.add(_x(), _x(), out=torch.empty(2000, device=DEV)[::2]), ValueError, "contiguous"),
    "add: out aliases x": (lambda: (lambda x: L.add(x, _x(), out=x))(_x()), ValueError, "shares memory"),
    "add: out overlaps y": (
        lambda: (lambda b: L.add(_x(), b[:1000], out=b[500:1500]))(_x(1500)),
        ValueError,
        "shares memory",
    ),
    "add: out a numpy array": (lambda: L.add(_x(), _x(), out=_x().cpu().numpy()), TypeError, "torch.Tensor"),
    "add: BLOCK_SIZE 1000": (lambda: L.add(_x(), _x(), BLOCK_SIZE=1000), ValueError, "power of two"),
    "add: BLOCK_SIZE 0": (lambda: L.add(_x(), _x(), BLOCK_SIZE=0), ValueError, "power of two"),
    "add: num_warps 3": (lambda: L.add(_x(), _x(), num_warps=3), ValueError, "power of two"),
    "add: num_warps 64": (lambda: L.add(_x(), _x(), num_warps=64), ValueError, "at most 32"),
    "add: num_warps True": (lambda: L.add(_x(), _x(), num_warps=True), ValueError, "num_warps"),
    "add: num_warps 4.0": (lambda: L.add(_x(), _x(), num_warps=4.0), ValueError, "num_warps"),
    "add: BLOCK_SIZE 2**21": (lambda: L.add(_x(), _x(), BLOCK_SIZE=2**21), ValueError, "BLOCK_SIZE=2097152.*at most"),
    "scale: BLOCK_SIZE 2**21": (lambda: L.scale(_x(), 2.0, BLOCK_SIZE=2**21), ValueError, "BLOCK_SIZE=2097152"),
    "whoami: BLOCK_SIZE 2**21": (lambda: L.whoami(2**21, BLOCK_SIZE=2**21), ValueError, "BLOCK_SIZE=2097152"),
    "whoami_masked: BLOCK_SIZE 2**21": (
        lambda: L.whoami_masked(10, BLOCK_SIZE=2**21),
        ValueError,
        "BLOCK_SIZE=2097152",
    ),
    "scale_rows: BLOCK_SIZE 2**21": (
        lambda: L.scale_rows(_x(1000).view(10, 100), _x(10), BLOCK_SIZE=2**21),
        ValueError,
        "BLOCK_SIZE=2097152",
    ),
    "scale: alpha a string": (lambda: L.scale(_x(), "2"), TypeError, "alpha"),
    "scale: alpha None": (lambda: L.scale(_x(), None), TypeError, "alpha"),
    "scale: alpha a tensor": (lambda: L.scale(_x(), _x(1)), TypeError, "alpha"),
    "scale: alpha nan": (lambda: L.scale(_x(), float("nan")), ValueError, "finite"),
    "scale: BLOCK_SIZE 3": (lambda: L.scale(_x(), 2.0, BLOCK_SIZE=3), ValueError, "power of two"),
    "scale: out aliases x": (lambda: (lambda x: L.scale(x, 2.0, out=x))(_x()), ValueError, "shares memory"),
    "scale: out wrong dtype": (
        lambda: L.scale(_x(), 2.0, out=torch.empty(1000, device=DEV, dtype=torch.float16)),
        TypeError,
        "dtype",
    ),
    "scale: integers": (lambda: L.scale(_x().int(), 2.0), TypeError, "dtype"),
    "whoami: not a multiple": (lambda: L.whoami(1000, BLOCK_SIZE=128), ValueError, "multiple"),
    "whoami: negative n": (lambda: L.whoami(-128, BLOCK_SIZE=128), ValueError, "at least 0"),
    "whoami: float n": (lambda: L.whoami(128.0, BLOCK_SIZE=128), TypeError, "int"),
    "whoami: BLOCK_SIZE 100": (lambda: L.whoami(1000, BLOCK_SIZE=100), ValueError, "power of two"),
    "whoami: out wrong shape": (lambda: L.whoami(256, out=torch.empty(128, device=DEV)), ValueError, "shape"),
    "whoami: n past 2**31": (lambda: L.whoami(2**31, BLOCK_SIZE=128), ValueError, "2\\*\\*31"),
    "whoami_masked: n None": (lambda: L.whoami_masked(None), TypeError, "int"),
    "whoami_masked: BLOCK_SIZE 6": (lambda: L.whoami_masked(100, BLOCK_SIZE=6), ValueError, "power of two"),
    "whoami_masked: out fp16": (
        lambda: L.whoami_masked(100, out=torch.empty(100, device=DEV, dtype=torch.float16)),
        TypeError,
        "dtype",
    ),
    "scale_rows: 1-D x": (lambda: L.scale_rows(_x(), _x(1)), ValueError, "dimension"),
    "scale_rows: columns strided": (
        lambda: L.scale_rows(_x(1000).view(10, 100).T, _x(100)),
        ValueError,
        "stride",
    ),
    "scale_rows: s wrong length": (lambda: L.scale_rows(_x(1000).view(10, 100), _x(9)), ValueError, "shape"),
    "scale_rows: s wrong dtype": (lambda: L.scale_rows(_x(1000).view(10, 100), _x(10).half()), TypeError, "dtype"),
    "scale_rows: out aliases x": (
        lambda: (lambda x: L.scale_rows(x, _x(10), out=x))(_x(1000).view(10, 100)),
        ValueError,
        "shares memory",
    ),
    "scale_rows: BLOCK_SIZE 48": (
        lambda: L.scale_rows(_x(1000).view(10, 100), _x(10), BLOCK_SIZE=48),
        ValueError,
        "power",
    ),
    "scale_rows: too many rows": (
        lambda: L.scale_rows(_x(65536).view(65536, 1), _x(65536)),
        ValueError,
        "65535",
    ),
}
if ENV.interpret:
    BAD["add: bfloat16 under the interpreter"] = (
        lambda: L.add(_x().bfloat16(), _x().bfloat16()),
        TypeError,
        "bfloat16",
    )
    BAD["scale: bfloat16 under the interpreter"] = (lambda: L.scale(_x().bfloat16(), 2.0), TypeError, "bfloat16")
if ENV.is_gpu:
    BAD["add: tensors on the CPU"] = (lambda: L.add(torch.randn(10), torch.randn(10)), ValueError, r"\.cuda\(\)")


@pytest.mark.parametrize("case", list(BAD))
def test_launchers_refuse_bad_inputs(case):
    call, error, words = BAD[case]
    with pytest.raises(error, match=words):
        call()


def test_refusals_come_before_any_launch(monkeypatch):
    """A kernel that would fail if launched: every refusal above must come first (the launchers raise before)."""

    class Exploding:
        def __getitem__(self, grid):
            raise RuntimeError("launched")

    monkeypatch.setattr(L, "add_kernel", Exploding())
    utils.refuses({"mismatched shapes": lambda: L.add(_x(), _x(999))}, quiet=True)


def test_add_refuses_past_32_bit_offsets(monkeypatch):
    monkeypatch.setattr(utils.checking, "INT32_LIMIT", 1000)  # a smaller limit, so no 8 GB tensor is needed
    with pytest.raises(ValueError, match="32-bit offsets"):
        L.add(_x(1001), _x(1001))
    with pytest.raises(ValueError, match="32-bit offsets"):
        L.scale(_x(1001), 2.0)


# -- empty inputs give empty results ------------------------------------------------------------------------------


def test_empty_inputs_give_empty_results():
    e = torch.empty(0, device=DEV)
    assert L.add(e, e).shape == (0,)
    assert L.add(torch.empty(3, 0, device=DEV), torch.empty(3, 0, device=DEV)).shape == (3, 0)
    assert L.scale(e, 2.0).shape == (0,)
    assert L.whoami(0).shape == (0,) and L.whoami_masked(0).shape == (0,)
    assert L.scale_rows(torch.empty(0, 5, device=DEV), e).shape == (0, 5)
    assert L.scale_rows(torch.empty(4, 0, device=DEV), torch.randn(4, device=DEV)).shape == (4, 0)
    assert L.num_programs(0, 128) == 0


def test_add_accepts_any_contiguous_shape_and_allocates_its_output():
    x, y = torch.randn(3, 5, 7, device=DEV), torch.randn(3, 5, 7, device=DEV)
    out = L.add(x, y)
    assert out.shape == x.shape and out.dtype == x.dtype and out.device == x.device
    utils.check(out, x.double() + y.double(), quiet=True)


# -- session 52: the held-out battery's answers of the wrong type, and a check given the wrong thing


@pytest.mark.parametrize(
    "answer, says",
    [
        (lambda n, B: str((n + B - 1) // B), r"returned '\d+' \(str\); it should return an int"),  # passed before
        (lambda n, B: [(n + B - 1) // B], r"returned \[\d+\] \(list\); it should return an int"),  # crashed
        (lambda n, B: None, r"returned None: did the function forget to `return`"),  # crashed: float(None)
        (lambda n, B: torch.tensor((n + B - 1) // B), r"returned tensor\(\d+\) \(Tensor\); it should return an int"),
        (lambda n, B: float((n + B - 1) // B), r"returned \d+\.0 \(float\).*Triton refuses a grid of floats"),
        (lambda n, B: np.ceil(n / B), r"returned \d+\.0 \(float64\).*np.ceil"),  # passed: a grid it crashes
        (lambda n, B: True if n else 0, r"returned True \(bool\)"),
    ],
)
def test_num_programs_of_the_wrong_type_is_told(answer, says):
    with pytest.raises(AssertionError, match=says):
        L.check_num_programs(answer, quiet=True)


@pytest.mark.parametrize(
    "answer, says",
    [
        (lambda i, B: str(i // B), r"returned '\d+' \(str\)"),
        (lambda i, B: np.floor(i / B), r"returned \d+\.0 \(float64\).*np.floor"),
        (lambda i, B: float(i // B), r"returned \d+\.0 \(float\)"),
    ],
)
def test_owner_of_the_wrong_type_is_told(answer, says):
    with pytest.raises(AssertionError, match=says):
        L.check_owner(answer, quiet=True)


def test_num_programs_with_fractions_still_gets_the_true_division_hint():
    """A fraction is a value mistake, told where it is, before the type of the answers is looked at."""
    _fails_with(L.check_num_programs, lambda n, B: n / B, "true division")


@pytest.mark.parametrize(
    "check", ["check_num_programs", "check_owner", "check_whoami", "check_whoami_masked", "check_scale", "check_add",
              "check_scale_rows"],
)  # fmt: skip
def test_a_check_given_a_result_instead_of_the_function_says_so(check):
    """check_scale(scale(x, 2.0)) crashed inside the check: "'Tensor' object is not callable"."""
    name = check.removeprefix("check_")
    with pytest.raises(TypeError, match=rf"{check} takes the function {name} itself.*{check}\({name}\)"):
        getattr(L, check)(torch.zeros(3, device=DEV))


def test_a_grid_of_numpy_floats_is_explained():
    """grid = (np.ceil(n / BLOCK_SIZE),) holds a numpy float: the explanation of a float grid now matches it too."""
    import utils.crashes

    x = torch.randn(100, device=DEV)
    with pytest.raises(Exception) as err:
        L.scale_kernel[(np.ceil(100 / 16),)](x, torch.empty_like(x), 2.0, 100, BLOCK_SIZE=16)
    assert "The grid holds a float" in (utils.crashes.explain(err.value) or ""), err.value


def test_num_programs_and_owner_with_round_are_told():
    """round(n / B) and round(i / B) got "Wrong values in many places"."""
    _fails_with(L.check_num_programs, lambda n, B: round(n / B), "round() rounds to the nearest")
    _fails_with(L.check_owner, lambda i, B: round(i / B), "round() rounds to the nearest")


def test_owner_one_too_small_or_the_inverse_mapping_is_told():
    """(session 52) i // B - 1 and i * B (the first element of block i) got "Wrong values in many places"."""
    _fails_with(L.check_owner, lambda i, B: i // B - 1, "every id is one too small")
    _fails_with(L.check_owner, lambda i, B: i * B, "the first element of block i")


def test_the_cuda_simulation_refuses_a_count_or_an_input_it_cannot_take():
    """cuda_blocks(-5, 4) gave -1 blocks, owners_cuda(-1, 4) an empty result and owners_cuda(2.5, 4) "can't multiply
    sequence by non-int"; add_cuda of lists an AttributeError from require_same_shape."""
    for bad in (-5, 2.5):
        with pytest.raises(ValueError, match=r"n must be an int >= 0"):
            L.cuda_blocks(bad, 4)
        with pytest.raises(ValueError, match=r"n must be an int >= 0"):
            L.owners_cuda(bad, 4)
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        L.add_cuda([1.0], [2.0])
    assert L.cuda_blocks(0, 4) == 0 and L.owners_cuda(0, 4).numel() == 0


SESSION53_BATTERY = {  # (session 53, held-out battery) mistake: (check, fn, the mistake as a function, hint words)
    "num_programs n // B + 1, 0 for n = 0": (
        "check_num_programs",
        lambda n, B: n // B + 1 if n else 0,
        "(for n > 0) is one program too many when n is a multiple",
    ),
    "owner (i - 1) // B": ("check_owner", lambda i, B: (i - 1) // B, "went to the program before"),
    "owner (i + 1) // B": ("check_owner", lambda i, B: (i + 1) // B, "went to the next program"),
    "owner i // B * B": ("check_owner", lambda i, B: i // B * B, "the first element of i's block"),
}


@pytest.mark.parametrize("mistake", list(SESSION53_BATTERY))
def test_session_53_battery_of_arithmetic_mistakes_is_named(mistake):
    """Each got "Wrong values in many places", or "scattered places ... a block's first or last lane"."""
    check, fn, words = SESSION53_BATTERY[mistake]
    _fails_with(getattr(L, check), fn, words)


@pytest.mark.parametrize(
    "edit, words",
    [
        ((_BLOCK_START, _BLOCK_START.replace("pid *", "(pid - 1) *")), "the block before its own"),
        ((_BLOCK_START, _BLOCK_START.replace("pid *", "(pid + 1) *")), "the block after its own"),
    ],
    ids=["pid - 1", "pid + 1"],
)
def test_whoami_writing_a_neighbouring_block_is_named(edit, words, monkeypatch, tmp_path):
    """(session 53) (pid - 1) * BLOCK_SIZE got "The last 128 elements were never written ... Launch
    triton.cdiv(n, BLOCK_SIZE) programs", a grid the launcher already has; (pid + 1) * BLOCK_SIZE "Scattered elements
    were never written: the offsets skip elements"."""
    plant(monkeypatch, tmp_path, L, "whoami_kernel", edit)
    _fails_with(L.check_whoami, L.whoami, words)


def test_scale_with_1024_for_block_size_is_named(monkeypatch, tmp_path):
    """(session 53) check_add named it, check_scale said "every program wrote block 0, or only one program ran"."""
    edit = (_BLOCK_START, _BLOCK_START.replace("pid * BLOCK_SIZE", "pid * 1024"))
    plant(monkeypatch, tmp_path, L, "scale_kernel", edit)
    _fails_with(L.check_scale, L.scale, "has the number 1024 where BLOCK_SIZE belongs")


@pytest.mark.skipif(not ENV.interpret, reason="the launches' grids are watched under the interpreter only")
@pytest.mark.parametrize(
    "grid, words",
    [("(n,)", "one per element, as CUDA starts a thread"), ("(n // BLOCK_SIZE + 1,)", "one program too many")],
)
def test_scale_launching_more_programs_than_blocks_is_told(grid, words, monkeypatch, tmp_path):
    """(session 53, held-out battery) grid = (n,), a program per element as CUDA's threads (the very mistake this
    lesson is about), passed: every extra program's lanes are masked off, so the output is right. So did n // BLOCK_SIZE
    + 1, which Exercise 1's check calls one program too many (check_scale had no n a multiple of BLOCK_SIZE)."""
    plant(monkeypatch, tmp_path, L, "scale", ("grid = (triton.cdiv(n, BLOCK_SIZE),)", f"grid = {grid}"))
    _fails_with(L.check_scale, L.scale, "is right, but its launch started", words, "(triton.cdiv(n, BLOCK_SIZE),)")
