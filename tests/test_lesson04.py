"""Lesson 04 (fused softmax): the lesson's own check on the solution, the classic mistakes planted and named, the
launcher's refusals (all before any launch), empty inputs, and what the check does not cover (GPU sizes, a view
that starts mid-row, 64-bit row offsets).

The values are checked by `check_softmax`, the function the notebook's check cells call: these tests do not restate
it. Each planted mistake is a wrong kernel written here and swapped into the launcher, and must fail the check with
the hint that names it.
"""

import contextlib
import re

import pytest
import torch
import triton
import triton.language as tl

import utils
from lessons import l04_fused_softmax as lesson
from utils.mode import current
from utils.mutants import plant

ENV = current()


def test_check_softmax_passes_on_the_solution(capsys):
    lesson.check_softmax(lesson.softmax)
    assert "✓ softmax matches softmax_ref" in capsys.readouterr().out
    lesson.check_softmax(lesson.softmax, online=False, quiet=True)
    assert capsys.readouterr().out == ""


# -- planted mistakes: each wrong kernel replaces the solution's in the launcher --------------------------------


@triton.jit
def _no_max_kernel(x_ptr, out_ptr, M, N, stride_xm, stride_om, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(axis=0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + row * stride_xm + cols, mask=cols < N, other=float("-inf")).to(tl.float32)
    num = tl.exp(x)  # the mistake: exp(x), not exp(x - max)
    tl.store(out_ptr + row * stride_om + cols, (num / tl.sum(num, axis=0)).to(out_ptr.dtype.element_ty), mask=cols < N)


@triton.jit
def _other_zero_kernel(x_ptr, out_ptr, M, N, stride_xm, stride_om, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(axis=0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + row * stride_xm + cols, mask=cols < N, other=0.0).to(tl.float32)  # the mistake: other=0
    num = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + row * stride_om + cols, (num / tl.sum(num, axis=0)).to(out_ptr.dtype.element_ty), mask=cols < N)


@triton.jit
def _row_stride_n_kernel(x_ptr, out_ptr, M, N, stride_xm, stride_om, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(axis=0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + row * N + cols, mask=cols < N, other=float("-inf")).to(tl.float32)  # the mistake: N
    num = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + row * stride_om + cols, (num / tl.sum(num, axis=0)).to(out_ptr.dtype.element_ty), mask=cols < N)


@triton.jit
def _wrong_axis_kernel(x_ptr, out_ptr, M, N, stride_xm, stride_om, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(axis=1).to(tl.int64)  # the mistake: the grid is (M,), so axis 1 is always 0
    cols = tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + row * stride_xm + cols, mask=cols < N, other=float("-inf")).to(tl.float32)
    num = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + row * stride_om + cols, (num / tl.sum(num, axis=0)).to(out_ptr.dtype.element_ty), mask=cols < N)


@triton.jit
def _unmasked_store_kernel(x_ptr, out_ptr, M, N, stride_xm, stride_om, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(axis=0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + row * stride_xm + cols, mask=cols < N, other=float("-inf")).to(tl.float32)
    num = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + row * stride_om + cols, (num / tl.sum(num, axis=0)).to(out_ptr.dtype.element_ty))  # no mask


@triton.jit
def _no_rescale_online_kernel(x_ptr, out_ptr, M, N, stride_xm, stride_om, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(axis=0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    m = tl.full((), float("-inf"), tl.float32)
    d = tl.full((), 0.0, tl.float32)
    for start in range(0, N, BLOCK_SIZE):
        x = tl.load(x_ptr + row * stride_xm + start + cols, mask=start + cols < N, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        # the mistake: d is not multiplied by exp(m - m_new)
        d = tl.where(m_new == float("-inf"), 0.0, d + tl.sum(tl.exp(x - m_new), axis=0))
        m = m_new
    for start in range(0, N, BLOCK_SIZE):
        mask = start + cols < N
        x = tl.load(x_ptr + row * stride_xm + start + cols, mask=mask, other=float("-inf")).to(tl.float32)
        y = tl.exp(x - m) / d
        tl.store(out_ptr + row * stride_om + start + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _fp16_arithmetic_kernel(x_ptr, out_ptr, M, N, stride_xm, stride_om, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(axis=0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + row * stride_xm + cols, mask=cols < N, other=float("-inf")).to(tl.float16)  # the mistake
    num = tl.exp(x - tl.max(x, axis=0)).to(tl.float16)
    out = (num / tl.sum(num, axis=0).to(tl.float16)).to(tl.float16)
    tl.store(out_ptr + row * stride_om + cols, out.to(out_ptr.dtype.element_ty), mask=cols < N)


@triton.jit
def _mask_off_by_one_kernel(x_ptr, out_ptr, M, N, stride_xm, stride_om, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(axis=0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + row * stride_xm + cols, mask=cols <= N, other=float("-inf")).to(tl.float32)  # the mistake
    num = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + row * stride_om + cols, (num / tl.sum(num, axis=0)).to(out_ptr.dtype.element_ty), mask=cols < N)


PLANTED = {
    "no max subtracted": ("softmax_kernel", _no_max_kernel, "row's maximum is not subtracted"),
    "other=0 in the masked load": ("softmax_kernel", _other_zero_kernel, r"masked lanes are loaded as 0"),
    "rows read N apart": ("softmax_kernel", _row_stride_n_kernel, r"rows are read N elements apart"),
    "program_id on the wrong axis": ("softmax_kernel", _wrong_axis_kernel, r"only row 0 was written"),
    "no mask on the column tail": ("softmax_kernel", _unmasked_store_kernel, r"wrote \d+ element\(s\) past the end"),
    "online sum not rescaled": ("softmax_online_kernel", _no_rescale_online_kernel, r"running sum is not rescaled"),
    "pass 2 with each block's max": (  # planted into the lesson's own kernel: (its text, the mistake's)
        "softmax_online_kernel",
        ("(tl.exp(x - m) / d)", "(tl.exp(x - tl.max(x, axis=0)) / d)"),
        r"block's own max",
    ),
    "fp16 arithmetic on fp32 data": ("softmax_kernel", _fp16_arithmetic_kernel, r"precision problem"),
    "load mask off by one": ("softmax_kernel", _mask_off_by_one_kernel, r"load mask is off by one \(cols <= N\)"),
    "the sum without the max": (  # the numerator exp(x - max), the sum of exp(x): off by exp(max), 0 on overflow
        "softmax_kernel",
        ("out = num / tl.sum(num, axis=0)", "out = num / tl.sum(tl.exp(x), axis=0)"),
        r"sum adds up exp\(x\) without the row's max",
    ),
    "the online sum without the max": (
        "softmax_online_kernel",
        ("d * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)", "d + tl.sum(tl.exp(x), axis=0)"),
        r"sum adds up exp\(x\) without the row's max",
    ),
    # session 28h1: a NaN from a block of -inf (before: "a row whose every entry is masked", which it is not), a
    # running max started at 0 (before: passed; the check's row 7 now lies far below 0), d summed with the old max
    "the online -inf guard dropped": (
        "softmax_online_kernel",
        ('d = tl.where(m_new == float("-inf"), 0.0, d * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0))',
         "d = d * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)"),
        r"a block of nothing but -inf gives m_new = -inf",
    ),
    "the online max started at 0": (
        "softmax_online_kernel",
        ('m = tl.full((), float("-inf"), tl.float32)', "m = tl.full((), 0.0, tl.float32)"),
        r"running max m starts at 0, not -inf",
    ),
    "the online sum with the old max": (
        "softmax_online_kernel",
        ("tl.sum(tl.exp(x - m_new), axis=0)", "tl.sum(tl.exp(x - m), axis=0)"),
        r"every output is 0: the running sum adds tl.exp\(x - m\)",
    ),
    # session 29: each got "off by its own constant factor" or "Wrong values in many places" before
    "divided by the max, not the sum": (
        "softmax_kernel", ("out = num / tl.sum(num, axis=0)", "out = num / tl.max(num, axis=0)"),
        r"output is not divided by the row's sum",
    ),
    "the online pass 2 not divided by d": (
        "softmax_online_kernel", ("(tl.exp(x - m) / d)", "tl.exp(x - m)"), r"output is not divided by the row's sum",
    ),
    "exp2 for exp": (
        "softmax_kernel", ("num = tl.exp(x - tl.max(x, axis=0))", "num = tl.exp2(x - tl.max(x, axis=0))"),
        r"base 2 where softmax takes base e",
    ),
    "the online -inf guard on the old max": (
        "softmax_online_kernel", ('tl.where(m_new == float("-inf")', 'tl.where(m == float("-inf")'),
        r"the -inf guard tests the old max m",
    ),
    "the online sum replaced, not accumulated": (
        "softmax_online_kernel", ("d * tl.exp(m - m_new) + tl.sum", "tl.sum"), r"d holds only the last block's terms",
    ),
    "pass 2 divided by each block's own sum": (
        "softmax_online_kernel", ("(tl.exp(x - m) / d)", "(tl.exp(x - m) / tl.sum(tl.exp(x - m), axis=0))"),
        r"pass 2 divides each block by its own sum",
    ),
    # session 35: the rows of nothing but -inf came out 0, and the hint blamed the row offset
    "masked lanes loaded as -1e9": (
        "softmax_kernel", ('mask=mask, other=float("-inf"))', "mask=mask, other=-1e9)"),
        r"masked lanes are loaded as a finite number",
    ),
    "online masked lanes loaded as -1e9": (
        "softmax_online_kernel", ('other=float("-inf")', "other=-1e9"), r"masked lanes are loaded as a finite number",
    ),
    # session 35: the one-pass attempt, each block written with the running m and d ("Wrong values in many places")
    "the online output written in pass 1": (
        "softmax_online_kernel",
        ("        m = m_new\n    # -- pass 2: read the row again and write exp(x - m) / d\n    for start in range("
         "0, N, BLOCK_SIZE):\n        mask = start + cols < N\n        x = tl.load(x_row + start + cols, mask=mask, "
         'other=float("-inf")).to(tl.float32)\n', "        m = m_new\n        mask = start + cols < N\n"),
        r"the output is written in pass 1",
    ),
    # (session 36) the guard's branches swapped or its test turned round: d is 0 and every output inf (before: "an
    # overflow"); pass 2 without tl.exp (before: "Wrong values in many places")
    "the online -inf guard's branches swapped": (
        "softmax_online_kernel",
        ('tl.where(m_new == float("-inf"), 0.0, d * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0))',
         'tl.where(m_new == float("-inf"), d * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0), 0.0)'),
        r"d is 0 after pass 1",
    ),
    "the online -inf guard's test turned round": (
        "softmax_online_kernel", ('tl.where(m_new == float("-inf")', 'tl.where(m_new != float("-inf")'),
        r"d is 0 after pass 1",
    ),
    "pass 2 without tl.exp": (
        "softmax_online_kernel", ("(tl.exp(x - m) / d)", "((x - m) / d)"), r"tl.exp is missing in pass 2",
    ),
    # (session 37) the one-block kernel without tl.exp: the check's first case was 1x1, where x - max is 0 and the
    # output 0 / 0 = NaN, told as "subtract the row max before tl.exp"; rows of 1000 come first now
    "without tl.exp": (
        "softmax_kernel", ("num = tl.exp(x - tl.max(x, axis=0))", "num = x - tl.max(x, axis=0)"),
        r"tl.exp is missing: num = x - max",
    ),
    # (probe0304) a kernel that stores into x left out NaN, told "Nothing was written ... the grid is empty"; a
    # launcher that ignores the BLOCK_SIZE given (the Triton tutorial's next_power_of_2(N) always) passed, its
    # online kernel never run on the CPU
    "the one-block kernel stores into x": (
        "softmax_kernel", ("tl.store(out_ptr + row * stride_om", "tl.store(x_ptr + row * stride_xm"),
        r"changed its input x",
    ),
    "the online kernel stores into x": (
        "softmax_online_kernel", ("tl.store(out_row", "tl.store(x_row"), r"changed its input x",
    ),
    "the launcher ignores the BLOCK_SIZE given": (
        "softmax", ("if BLOCK_SIZE is None:\n        BLOCK_SIZE =", "if True:\n        BLOCK_SIZE ="),
        r"must use the BLOCK_SIZE it is given",
    ),
    # (probe0304) rows of several blocks written in part: each got "Whole columns were never written ... Use
    # triton.cdiv(N, BLOCK_N) column blocks", a grid of column blocks that softmax has not
    "pass 2 stops after one block": (
        "softmax_online_kernel", ("for start in range(0, N, BLOCK_SIZE):\n        mask", "for start in range(0, "
        "BLOCK_SIZE, BLOCK_SIZE):\n        mask"), r"stops after one block",
    ),
    "pass 2 stores without + start": (
        "softmax_online_kernel", ("tl.store(out_row + start + cols", "tl.store(out_row + cols"),
        r"with later blocks' values",
    ),
    "the launcher runs softmax_kernel on rows longer than BLOCK_SIZE": (
        "softmax", ("kernel = softmax_kernel if BLOCK_SIZE >= N else softmax_online_kernel", "kernel = softmax_kernel"),
        r"the launcher ran softmax_kernel",
    ),
    "pass 2 skips the partial block": (
        "softmax_online_kernel", ("for start in range(0, N, BLOCK_SIZE):\n        mask", "for start in range(0, N "
        "- BLOCK_SIZE, BLOCK_SIZE):\n        mask"), r"last, partial block of each row.*\(pass 2's loop\)",
    ),
    "both loops skip the partial block": (
        "softmax_online_kernel", ("range(0, N, BLOCK_SIZE)", "range(0, N // BLOCK_SIZE * BLOCK_SIZE, BLOCK_SIZE)"),
        r"last, partial block of each row.*\(both loops",
    ),
    # (session 53) a NaN hint about values loaded past the end; "Whole columns were never written ... Use
    # triton.cdiv(N, BLOCK_N) column blocks"; "Wrong values in many places"
    "the max taken with the masked lanes as 0": (
        "softmax_kernel", ("num = tl.exp(x - tl.max(x, axis=0))", "num = tl.exp(x - tl.max(tl.where(mask, x, 0.0), "
        "axis=0))"), r"the row's max is taken with 0 among its values",
    ),
    "pass 2 starts past the first block": (
        "softmax_online_kernel", ("for start in range(0, N, BLOCK_SIZE):\n        mask", "for start in range("
        "BLOCK_SIZE, N, BLOCK_SIZE):\n        mask"), r"first block of each row .* starts past it.*\(pass 2's loop\)",
    ),
    "log-softmax": (
        "softmax_kernel", ("out = num / tl.sum(num, axis=0)", "out = x - tl.max(x, axis=0) - tl.log(tl.sum(num, "
        "axis=0))"), r"the output is log-softmax",
    ),
}  # fmt: skip


@pytest.mark.parametrize("mistake", list(PLANTED))
def test_check_softmax_names_each_planted_mistake(mistake, monkeypatch, tmp_path):
    name, wrong_kernel, hint = PLANTED[mistake]
    if isinstance(wrong_kernel, tuple):  # an edit of the lesson's kernel
        plant(monkeypatch, tmp_path, lesson, name, wrong_kernel)
    else:
        monkeypatch.setattr(lesson, name, wrong_kernel)  # softmax looks its kernels up when it is called
    with pytest.raises(AssertionError, match=hint) as failure:
        lesson.check_softmax(lesson.softmax, quiet=True)
    for other, (_, _, other_hint) in PLANTED.items():  # and no other mistake's hint, which would mislead
        if other_hint != hint:  # (one mistake made in both kernels shares its hint)
            assert not re.search(other_hint, str(failure.value)), f"{mistake} also got the hint for {other}"


def test_a_pass_1_that_never_sets_m_is_named_beside_d_left_at_0(monkeypatch, tmp_path):
    """(session 53) Without `m = m_new` m is -inf in pass 2, and every output exp(x + inf) / d = inf: the output of
    a d left at 0 by the -inf guard (PLANTED), which alone was named ("d is 0 after pass 1")."""
    plant(monkeypatch, tmp_path, lesson, "softmax_online_kernel", ("        m = m_new\n", ""))
    with pytest.raises(AssertionError, match=r"(?s)d is 0 after pass 1.*Or m is still -inf.*never assigns m = m_new"):
        lesson.check_softmax(lesson.softmax, quiet=True)


@pytest.mark.parametrize(
    "name, edit, words",
    [
        ("softmax", ("kernel[(M,)]", "kernel[(1,)]"), "only one program ran"),
        ("softmax", ("kernel[(M,)]", "kernel[(triton.cdiv(M, BLOCK_SIZE),)]"), "only one program ran"),
        ("softmax_kernel", ("cols = tl.arange(0, BLOCK_SIZE)", "cols = row * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)"),
         "the later rows' lanes are all masked off"),
    ],
)  # fmt: skip
def test_only_row_0_written_names_the_grid_and_the_columns_too(name, edit, words, monkeypatch, tmp_path):
    """(probe0304) A grid of one program, and columns offset by row * BLOCK_SIZE (lesson 03's offsets), leave row 0
    alone written, as tl.program_id(axis=1) does: the hint blamed the axis only ("the launcher's grid is (M,)")."""
    plant(monkeypatch, tmp_path, lesson, name, edit)
    with pytest.raises(AssertionError, match=f"(?s)only row 0 was written.*{re.escape(words)}"):
        lesson.check_softmax(lesson.softmax, quiet=True)


@pytest.mark.parametrize("mistake", ["fp16 arithmetic on fp32 data", "load mask off by one"])
def test_check_softmax_sees_small_errors_in_the_values_alone(mistake, monkeypatch):
    """Without the interpreter's memory watch (as on a GPU) the values must fail, in float32 rows of 1000 too: the
    tolerance is relative to softmax's outputs (about 1/N), not the dtype's atol of 1e-5."""
    name, wrong_kernel, hint = PLANTED[mistake]
    monkeypatch.setattr(lesson, name, wrong_kernel)
    monkeypatch.setattr(utils, "watch_memory", contextlib.nullcontext)  # nothing watched: None, as on a GPU
    x = torch.randn(3, 1000, device=ENV.device)
    with pytest.raises(AssertionError, match=hint) as failure:
        lesson._softmax_check_one(lesson.softmax, x, None, "rows of 1000")
    assert "is right" not in str(failure.value)
    assert int(re.search(r"differs from the reference: (\d+) of 3000", str(failure.value)).group(1)) > 1500


def test_check_softmax_wants_the_given_out_returned():
    def allocates_its_own(x, *, out=None, BLOCK_SIZE=None):
        return lesson.softmax(x, BLOCK_SIZE=BLOCK_SIZE)  # ignores out: the right values, in the wrong tensor

    with pytest.raises(AssertionError, match="must write into the out it is given"):
        lesson.check_softmax(allocates_its_own, quiet=True)


def test_check_softmax_wants_empty_inputs_back_empty():
    def launches_on_empty(x, *, out=None, BLOCK_SIZE=None):
        if x.numel() == 0:
            return None
        return lesson.softmax(x, out=out, BLOCK_SIZE=BLOCK_SIZE)

    with pytest.raises(AssertionError, match="should return an empty"):
        lesson.check_softmax(launches_on_empty, quiet=True)


def test_check_softmax_tells_a_crash_on_an_empty_input(monkeypatch, tmp_path):
    """(probe0304) A launcher that returns early only when M == 0 launched a block of 0 columns for (5, 0): Triton's
    "arange's end argument must be greater than the start argument" came out of the check, naming neither size."""
    plant(monkeypatch, tmp_path, lesson, "softmax", ("if M == 0 or N == 0:", "if M == 0:"))
    with pytest.raises(AssertionError, match=r"empty \(5, 0\) input raised .*M == 0 or N == 0"):
        lesson.check_softmax(lesson.softmax, quiet=True)


@pytest.mark.parametrize(
    "returned, words", [("torch.empty_like(x)", "returned another tensor"), ("x", "returned x")], ids=["new", "x"]
)
def test_check_softmax_wants_the_given_out_back_for_an_empty_input(returned, words, monkeypatch, tmp_path):
    """(session 53) A launcher whose early return for an empty input hands back a new empty tensor, or x itself,
    passed: the check called it on empty inputs without an out, and any empty tensor of the shape passed."""
    plant(monkeypatch, tmp_path, lesson, "softmax", ("return out  # nothing", f"return {returned}  # nothing"))
    with pytest.raises(AssertionError, match=rf"empty \(0, 5\) input {words}, not the out it was given"):
        lesson.check_softmax(lesson.softmax, quiet=True)


# -- refusals, all before any launch -----------------------------------------------------------------------------


class _NoLaunch:
    """Stands in for a kernel: any launch fails the test."""

    def __getitem__(self, grid):
        raise AssertionError(f"a kernel was launched (grid {grid}) for an input that should be refused or is empty")


@pytest.fixture
def no_launch(monkeypatch):
    monkeypatch.setattr(lesson, "softmax_kernel", _NoLaunch())
    monkeypatch.setattr(lesson, "softmax_online_kernel", _NoLaunch())


def _bad_calls():
    dev = ENV.device
    x = torch.randn(8, 100, device=dev)
    other = "cpu" if ENV.is_gpu else "meta"  # a device the kernels do not run on
    calls = {
        "x is None": (lambda: lesson.softmax(None), TypeError, "torch.Tensor"),
        "x is a NumPy array": (lambda: lesson.softmax(x.cpu().numpy()), TypeError, "torch.Tensor"),
        "x is 1-D": (lambda: lesson.softmax(x[0]), ValueError, r"2-D .*reshape"),
        "x is 3-D": (lambda: lesson.softmax(x.view(2, 4, 100)), ValueError, r"2-D .*reshape"),
        "x holds integers": (lambda: lesson.softmax(x.int()), TypeError, "dtype int32"),
        "x is float64": (lambda: lesson.softmax(x.double()), TypeError, "dtype float64"),
        "x's columns are strided": (lambda: lesson.softmax(x.t()), ValueError, r"stride\(1\) == 1"),
        "x on another device": (lambda: lesson.softmax(x.to(other)), ValueError, "is on"),
        "x has 2**31 rows": (
            lambda: lesson.softmax(torch.randn(1, 1, device=dev).expand(2**31, 1)),
            ValueError,
            r"2\*\*31 - 1 programs",
        ),
        "out of the wrong shape": (
            lambda: lesson.softmax(x, out=torch.empty(8, 99, device=dev)),
            ValueError,
            "shape",
        ),
        "out of the wrong dtype": (
            lambda: lesson.softmax(x, out=torch.empty(8, 100, device=dev, dtype=torch.float16)),
            TypeError,
            "dtype",
        ),
        "out on another device": (
            lambda: lesson.softmax(x, out=torch.empty(8, 100, device=other)),
            ValueError,
            "is on",
        ),
        "out not contiguous": (
            lambda: lesson.softmax(x, out=torch.empty(100, 8, device=dev).t()),
            ValueError,
            "non-contiguous",
        ),
        "out is x (in place)": (lambda: lesson.softmax(x, out=x), ValueError, "shares memory with the input x"),
        "out overlaps x": (
            lambda: lesson.softmax(x[:4], out=x[2:6]),
            ValueError,
            "shares memory with the input x",
        ),
        "out is a NumPy array": (lambda: lesson.softmax(x, out=x.cpu().numpy()), TypeError, "torch.Tensor"),
        # probe0304: the 2-D message's own advice, x.reshape(-1, x.shape[-1]), fails on a 0-D x
        "a 0-D x": (lambda: lesson.softmax(torch.tensor(1.0, device=ENV.device)), ValueError, "reshape\\(1, 1\\)"),
        "out given by position": (lambda: lesson.softmax(x, torch.empty_like(x)), TypeError, "positional"),
        "BLOCK_SIZE 100": (lambda: lesson.softmax(x, BLOCK_SIZE=100), ValueError, "power of two"),
        "BLOCK_SIZE 0": (lambda: lesson.softmax(x, BLOCK_SIZE=0), ValueError, "power of two"),
        "BLOCK_SIZE -128": (lambda: lesson.softmax(x, BLOCK_SIZE=-128), ValueError, "power of two"),
        "BLOCK_SIZE 128.0": (lambda: lesson.softmax(x, BLOCK_SIZE=128.0), ValueError, "power of two"),
        "BLOCK_SIZE past MAX_BLOCK_SIZE": (
            lambda: lesson.softmax(x, BLOCK_SIZE=2 * lesson.MAX_BLOCK_SIZE),
            ValueError,
            "MAX_BLOCK_SIZE",
        ),
        "num_warps 3": (lambda: lesson.softmax(x, num_warps=3), ValueError, "num_warps"),
        "num_warps 64": (lambda: lesson.softmax(x, num_warps=64), ValueError, "num_warps"),
        "num_warps True": (lambda: lesson.softmax(x, num_warps=True), ValueError, "num_warps"),
        "num_warps 4.0": (lambda: lesson.softmax(x, num_warps=4.0), ValueError, "num_warps"),
    }
    if ENV.interpret:
        calls["bfloat16 under the interpreter"] = (lambda: lesson.softmax(x.bfloat16()), TypeError, "bfloat16")
    return calls


BAD = _bad_calls()


@pytest.mark.parametrize("case", list(BAD))
def test_softmax_refuses_bad_input_before_any_launch(case, no_launch):
    call, error, words = BAD[case]
    with pytest.raises(error, match=words):
        call()


def test_refuses_accepts_every_refusal_at_once(no_launch, capsys):
    utils.refuses({what: call for what, (call, _, _) in BAD.items()})
    assert capsys.readouterr().out.count("✓ refuses") == len(BAD)


@pytest.mark.parametrize("shape", [(0, 5), (5, 0), (0, 0)])
def test_empty_inputs_return_empty_results_without_launching(shape, no_launch):
    x = torch.randn(shape, device=ENV.device, dtype=torch.float16)
    got = lesson.softmax(x)
    assert got.shape == shape and got.dtype == x.dtype and got.device == x.device
    out = torch.empty(shape, device=ENV.device, dtype=torch.float16)
    assert lesson.softmax(x, out=out, BLOCK_SIZE=16) is out


def test_an_empty_input_still_refuses_a_wrong_out(no_launch):
    with pytest.raises(ValueError, match="shape"):
        lesson.softmax(torch.randn(0, 5, device=ENV.device), out=torch.empty(0, 4, device=ENV.device))


# -- beyond the check: sizes only a GPU can run, a view that starts mid-row, the spec, the costs -----------------

BEYOND = ENV.pick(
    cpu=[(2, 129, None), (2, 256, 128), (2, lesson.MAX_BLOCK_SIZE + 1, None)],
    gpu=[(65539, 1000, None), (2**15 + 3, 4093, None), (3, 2**20 + 1, None), (64, 65536, None), (5, 4096, 4096)],
)


@pytest.mark.parametrize("M, N, BLOCK_SIZE", BEYOND)
def test_softmax_at_sizes_beyond_the_check(M, N, BLOCK_SIZE):
    for dtype in (torch.float32, ENV.dtype):
        x = torch.randn(M, N, device=ENV.device, dtype=dtype)
        out = lesson.softmax(x, out=utils.nan_like(x), BLOCK_SIZE=BLOCK_SIZE)
        utils.check(out, lesson.softmax_ref(x.double()), name=f"softmax {M}x{N} {dtype}", quiet=True)


@pytest.mark.parametrize("BLOCK_SIZE", [None, 64])
def test_softmax_of_a_view_that_starts_mid_row(BLOCK_SIZE):
    wide = torch.randn(37, 1000, device=ENV.device)
    x = wide[:, 13:794]  # rows 1000 apart, 781 used, starting at column 13
    out = lesson.softmax(x, out=utils.nan_empty((37, 781), device=ENV.device), BLOCK_SIZE=BLOCK_SIZE)
    utils.check(out, lesson.softmax_ref(x.double()), quiet=True)


def test_softmax_of_an_expanded_view():
    """Stride 0 between rows: every program reads the same row, which is right for a broadcast input."""
    x = torch.randn(1, 300, device=ENV.device).expand(6, 300)
    utils.check(lesson.softmax(x, out=utils.nan_like(x.contiguous())), lesson.softmax_ref(x.double()), quiet=True)


def test_softmax_of_one_column_with_any_column_stride():
    """A column of a transposed row, (M, 1) with stride (1, M), is contiguous to PyTorch: x.contiguous() returns it
    as it is, so refusing it and asking for x.contiguous() sent a learner round in a circle."""
    x = torch.randn(1, 5, device=ENV.device).t()
    assert x.stride(1) != 1 and x.contiguous().stride() == x.stride()
    utils.check(lesson.softmax(x, out=utils.nan_empty((5, 1))), lesson.softmax_ref(x.double()), quiet=True)


def test_softmax_allocates_its_output():
    x = torch.randn(5, 300, device=ENV.device, dtype=torch.float16)
    out = lesson.softmax(x, num_warps=2)
    assert out.shape == x.shape and out.dtype == x.dtype and out.is_contiguous()
    utils.check(out, lesson.softmax_ref(x.double()), quiet=True)


@pytest.mark.skipif(not ENV.is_gpu, reason="needs 2**31 elements on a GPU")
def test_softmax_past_2_to_the_31_elements():
    """row * stride passes 2**31 here: the kernels' int64 row index keeps the last rows where they belong."""
    N = 4096
    M = 2**31 // N + 3
    x = torch.empty(M, N, device="cuda", dtype=torch.float16).normal_()
    out = lesson.softmax(x)
    rows = [0, M // 2, M - 2, M - 1]
    utils.check(out[rows], lesson.softmax_ref(x[rows].double()), name="rows past 2**31 elements", quiet=True)
    del x, out
    torch.cuda.empty_cache()


def test_softmax_ref_is_softmax_over_the_last_dimension():
    """One meaning across the course: every lesson that defines a softmax_ref means torch.softmax over dim -1."""
    import importlib

    from utils.lessons import LESSONS

    others = [importlib.import_module(f"lessons.{p.stem}") for p in sorted(LESSONS.glob("l[0-9]*.py"))]
    others = [m.softmax_ref for m in others if hasattr(m, "softmax_ref") and m.softmax_ref is not lesson.softmax_ref]
    x = torch.randn(3, 4, 777, dtype=torch.float64)
    x[0, 1, ::3] = float("-inf")
    x[1, 2] = float("-inf")  # a row of nothing but -inf: NaN in both
    torch.testing.assert_close(lesson.softmax_ref(x), torch.softmax(x, dim=-1), equal_nan=True)
    for other in others:
        torch.testing.assert_close(lesson.softmax_ref(x), other(x), equal_nan=True)


def test_cost_functions():
    M, N = 16384, 4096
    assert lesson.softmax_bytes(M, N, 4) == 2 * M * N * 4
    assert lesson.softmax_bytes(M, N, 2, kernel="online") == 3 * M * N * 2
    assert lesson.softmax_bytes(M, N, 4, kernel="unfused") == (8 * M * N + 4 * M) * 4
    assert lesson.softmax_bytes(M, N, 4, kernel="unfused") / lesson.softmax_bytes(M, N, 4) == pytest.approx(4, 1e-3)
    assert lesson.softmax_flops(M, N) == 5 * M * N
    with pytest.raises(ValueError, match="kernel must be one of"):
        lesson.softmax_bytes(M, N, 4, kernel="fast")


@pytest.mark.parametrize(
    "M, N, dtype, view",
    [(1, 2**16 + 1, torch.float32, None), (2, 32769, torch.float16, None), (17, 17, torch.float32, None),
     (3, 1009, torch.float16, None), (5, 100, torch.float32, "expanded"), (4, 64, torch.float32, "every other row")],
)  # fmt: skip
def test_softmax_at_peers_shapes(M, N, dtype, view):
    """Liger / PyTorch softmax shapes: a row past MAX_BLOCK_SIZE (the online kernel), primes, one row repeated by
    expand (row stride 0) and rows sliced with a step, against torch.softmax in fp64."""
    g = torch.Generator().manual_seed(4)
    x = torch.randn(M, N, generator=g).to(ENV.device, dtype)
    if view == "expanded":
        x = x[:1].expand(M, N)
    elif view == "every other row":
        x = torch.randn(2 * M, N, generator=g).to(ENV.device, dtype)[::2]
    ref = torch.softmax(x.double(), dim=-1)
    utils.check(lesson.softmax(x), ref, name="softmax", quiet=True, **lesson.softmax_tolerance(dtype, N))
