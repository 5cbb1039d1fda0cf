"""The course's interpreter behaves as the compiler does where Triton's own interpreter did not (utils.parity): `and`,
`or` and `not` on blocks lane by lane; an `if` on a block refused. Compiled on a GPU, the same kernels check that
the compiler agrees."""

import warnings
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl

# `from utils import mode`, not `from utils.mode import current`: utils.offline copies the jit functions and constants
# of a module named that way, and utils.mode's annotated `_ENV: Env | None` does not import alone
from utils import mode, offline

ENV = mode.current()


@triton.jit
def _and_mask_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.arange(0, BLOCK_SIZE)
    mask = (offs < n) and (offs >= 2)  # a learner's Python habit: compiled, logical_and lane by lane
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask, other=0.0), mask=offs < BLOCK_SIZE)


@triton.jit
def _or_not_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.arange(0, BLOCK_SIZE)
    outside = not (offs < n)  # compiled: __not__ lane by lane
    keep = (offs < 2) or outside or (offs == 5)
    tl.store(out_ptr + offs, tl.where(keep, 1.0, 0.0))


@triton.jit
def _constants_kernel(out_ptr, FLAG: tl.constexpr, OTHER: tl.constexpr, BLOCK_SIZE: tl.constexpr):
    offs = tl.arange(0, BLOCK_SIZE)
    value = FLAG and OTHER  # constexprs: Python's own short-circuit
    if not FLAG or OTHER > 3:
        value = 7
    tl.store(out_ptr + offs, tl.full([BLOCK_SIZE], value, tl.float32))


def test_and_on_blocks_is_lane_by_lane():
    """Before, the interpreter took (offs < n) for True and kept offs >= 2 alone: lanes past n were loaded."""
    x = torch.arange(16, dtype=torch.float32, device=ENV.device) + 1
    out = torch.full_like(x, float("nan"))
    with warnings.catch_warnings():  # compiled, Triton may warn that `and` on blocks is deprecated (not from its cache)
        warnings.simplefilter("ignore", UserWarning)
        _and_mask_kernel[(1,)](x, out, 10, BLOCK_SIZE=16)
    want = torch.where((torch.arange(16, device=ENV.device) < 10) & (torch.arange(16, device=ENV.device) >= 2), x, 0)
    assert torch.equal(out, want), out


def test_or_and_not_on_blocks_are_lane_by_lane():
    out = torch.full((16,), float("nan"), device=ENV.device)
    _or_not_kernel[(1,)](torch.empty(16, device=ENV.device), out, 10, BLOCK_SIZE=16)
    offs = torch.arange(16, device=ENV.device)
    assert torch.equal(out, ((offs < 2) | (offs >= 10) | (offs == 5)).float()), out


@pytest.mark.parametrize("flag, other, want", [(0, 5, 7), (1, 2, 2), (1, 5, 7), (1, 0, 0)])
def test_and_or_not_on_constants_short_circuit(flag, other, want):
    out = torch.full((16,), float("nan"), device=ENV.device)
    _constants_kernel[(1,)](out, FLAG=flag, OTHER=other, BLOCK_SIZE=16)
    assert bool((out == want).all()), out


SCALE = 0.5  # a plain float: the compiler refuses it inside a kernel
HALF = tl.constexpr(0.5)  # a constexpr: allowed


@triton.jit
def _global_float_kernel(out_ptr, BLOCK_SIZE: tl.constexpr):
    offs = tl.arange(0, BLOCK_SIZE)
    tl.store(out_ptr + offs, tl.full([BLOCK_SIZE], SCALE, tl.float32))


@triton.jit
def _global_constexpr_kernel(out_ptr, BLOCK_SIZE: tl.constexpr):
    offs = tl.arange(0, BLOCK_SIZE)
    tl.store(out_ptr + offs, tl.full([BLOCK_SIZE], HALF, tl.float32))


def test_a_global_that_is_not_a_constexpr_is_refused_as_compiled():
    """Before, the interpreter read any global and the kernel failed only on a GPU; a constexpr one still runs."""
    out = torch.full((16,), float("nan"), device=ENV.device)
    with pytest.raises(Exception, match=r"Cannot access global variable SCALE from within @jit'ed"):
        _global_float_kernel[(1,)](out, BLOCK_SIZE=16)
    _global_constexpr_kernel[(1,)](out, BLOCK_SIZE=16)
    assert bool((out == 0.5).all()), out


def test_a_kernel_called_like_a_function_is_refused_and_leaves_the_language_as_it_was():
    """Compiled, calling a kernel without a grid is refused at once. Triton's interpreter ran it as a helper's call:
    it swapped triton.language for its interpreted functions for good (a later test of that swap then failed,
    depending on the order the tests ran in) and failed on whatever came first."""
    before = tl.arange
    with pytest.raises(RuntimeError, match=r"Cannot call @triton\.jit'd outside of the scope of a kernel"):
        _global_constexpr_kernel(torch.empty(16, device=ENV.device), BLOCK_SIZE=16)
    assert tl.arange is before


@triton.jit
def _carried_kernel(x_ptr, out_ptr, STEPS: tl.constexpr, BLOCK_SIZE: tl.constexpr):
    offs = tl.arange(0, BLOCK_SIZE)
    last = tl.zeros((BLOCK_SIZE,), dtype=tl.float32)  # assigned before the loops: carried out of them
    total = tl.zeros((BLOCK_SIZE,), dtype=tl.float32)
    for i in range(STEPS):
        for j in range(2):
            step = tl.load(x_ptr + offs) * (i + j)  # first assigned here: lives only inside the loop
            total += step
            last = step
    for k in tl.static_range(2):
        unrolled = total * k  # unrolled when compiled: defined after it
    tl.store(out_ptr + offs, total + last + unrolled)


@triton.jit
def _after_for_kernel(x_ptr, out_ptr, BLOCK_SIZE: tl.constexpr):
    offs = tl.arange(0, BLOCK_SIZE)
    total = tl.zeros((BLOCK_SIZE,), dtype=tl.float32)
    for i in range(2):
        scale = tl.load(x_ptr + offs + i)
        total += scale
    tl.store(out_ptr + offs, total * scale)


@triton.jit
def _after_inner_loop_kernel(x_ptr, out_ptr, BLOCK_SIZE: tl.constexpr):
    offs = tl.arange(0, BLOCK_SIZE)
    last = tl.zeros((BLOCK_SIZE,), dtype=tl.float32)
    for i in range(2):
        for j in range(2):
            step = tl.load(x_ptr + offs) * (i + j)
        last = step  # compiled, step is gone here (the interpreter kept it from the second pass on)
    tl.store(out_ptr + offs, last)


@triton.jit
def _after_while_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.arange(0, BLOCK_SIZE)
    i = 0
    while i < n:
        seen = tl.load(x_ptr + offs)
        i += 1
    tl.store(out_ptr + offs, seen)


def test_a_name_first_assigned_in_a_loop_does_not_exist_after_it():
    """Compiled, a loop's body is a region of its own: names first assigned in it are gone after it (not its counter:
    a use of it compiles); a name assigned before the loop is carried out, and a static_range is unrolled. The
    interpreter kept every name, so a kernel that used one after its loop passed on a laptop and failed on a GPU."""
    x = torch.arange(16, device=ENV.device, dtype=torch.float32)
    out = torch.full((16,), float("nan"), device=ENV.device)
    _carried_kernel[(1,)](x, out, STEPS=3, BLOCK_SIZE=16)
    total = x * sum(i + j for i in range(3) for j in range(2))
    torch.testing.assert_close(out, total + x * 3 + total, rtol=0, atol=0)
    for kernel, name, args in [
        (_after_for_kernel, "scale", ()),
        (_after_inner_loop_kernel, "step", ()),
        (_after_while_kernel, "seen", (2,)),
    ]:
        with pytest.raises(Exception, match=rf"\b{name} is not defined"):
            kernel[(1,)](x, out, *args, BLOCK_SIZE=16)


@triton.jit
def _doubled(x):
    return x * 2  # a helper may return a value


@triton.jit
def _early_return_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    if tl.program_id(0) * BLOCK_SIZE >= n:
        return  # a bare return ends a program early
    tl.store(out_ptr + offs, _doubled(tl.load(x_ptr + offs, mask=offs < n)), mask=offs < n)


@triton.jit
def _returns_a_value_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.arange(0, BLOCK_SIZE)
    return tl.load(x_ptr + offs, mask=offs < n) * 2


def test_a_kernel_that_returns_a_value_is_refused_as_compiled():
    """Compiled, a launched kernel that returns a value fails (PassManager::run failed); the interpreter dropped the
    value, so `return out` in a kernel passed on a laptop. A bare return and a helper's value are fine both ways."""
    x = torch.arange(16, device=ENV.device, dtype=torch.float32)
    out = torch.full((32,), float("nan"), device=ENV.device)
    _early_return_kernel[(2,)](x, out, 16, BLOCK_SIZE=16)
    torch.testing.assert_close(out[:16], 2 * x, rtol=0, atol=0)
    assert bool(out[16:].isnan().all()), out  # the second program returned before storing
    with pytest.raises(Exception, match=r"PassManager::run failed|returns no value"):
        _returns_a_value_kernel[(1,)](x, out, 16, BLOCK_SIZE=16)


# -- an `if` decided at run time (its condition a tensor) against one decided when the kernel compiles (a constexpr)


@triton.jit
def _then_only_kernel(x_ptr, out_ptr, flag_ptr, BLOCK_SIZE: tl.constexpr):
    offs = tl.arange(0, BLOCK_SIZE)
    if tl.load(flag_ptr) > 0:
        y = tl.load(x_ptr + offs)  # compiled: gone after the if
    tl.store(out_ptr + offs, y)


@triton.jit
def _else_only_kernel(x_ptr, out_ptr, flag_ptr, BLOCK_SIZE: tl.constexpr):
    offs = tl.arange(0, BLOCK_SIZE)
    pid = tl.program_id(0)
    if pid + tl.load(flag_ptr) == 1:
        tl.store(out_ptr + offs, tl.zeros((BLOCK_SIZE,), dtype=tl.float32))
    else:
        y = tl.load(x_ptr + offs)
    tl.store(out_ptr + offs, y)


@triton.jit
def _then_type_kernel(x_ptr, out_ptr, flag_ptr, BLOCK_SIZE: tl.constexpr):
    offs = tl.arange(0, BLOCK_SIZE)
    acc = 0  # an int32 number: the branch makes it a block of fp32
    if tl.load(flag_ptr) > 0:
        acc = tl.load(x_ptr + offs).to(tl.float32)
    tl.store(out_ptr + offs, acc)


@triton.jit
def _else_type_kernel(x_ptr, out_ptr, flag_ptr, BLOCK_SIZE: tl.constexpr):
    offs = tl.arange(0, BLOCK_SIZE)
    acc = tl.zeros((BLOCK_SIZE,), dtype=tl.float32)
    if tl.load(flag_ptr) > 0:
        acc += 1.0
    else:
        acc = tl.load(x_ptr + offs).to(tl.float16)
    tl.store(out_ptr + offs, acc)


@triton.jit
def _named_flag_kernel(x_ptr, out_ptr, flag_ptr, BLOCK_SIZE: tl.constexpr):
    offs = tl.arange(0, BLOCK_SIZE)
    flag = BLOCK_SIZE > 8  # a plain assignment makes a tensor of it, compiled too: `if flag` is decided at run time
    if flag:
        y = tl.load(x_ptr + offs)
    tl.store(out_ptr + offs, y)


@triton.jit
def _int_argument_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.arange(0, BLOCK_SIZE)
    if n > 0:  # a tensor compiled, but a constexpr when n == 1 (Triton specializes it)
        y = tl.load(x_ptr + offs)
    tl.store(out_ptr + offs, y)


@triton.jit
def _static_parameter_kernel(x_ptr, out_ptr, flag_ptr, HAS_SCALE: tl.constexpr, BLOCK_SIZE: tl.constexpr):
    offs = tl.arange(0, BLOCK_SIZE)
    acc = 0
    if HAS_SCALE:  # decided when the kernel compiles: names and types as Python has them
        scale = tl.load(x_ptr + offs)
        acc = scale.to(tl.float32)
    tl.store(out_ptr + offs, scale + acc)


@triton.jit
def _static_expression_kernel(x_ptr, out_ptr, flag_ptr, BLOCK_SIZE: tl.constexpr):
    offs = tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + offs)
    acc = 0
    if BLOCK_SIZE > 8 and x.dtype == tl.float32:
        y = x * 2
        acc = y
    if tl.cdiv(BLOCK_SIZE, 8) > 1:  # a helper of constexprs gives a constexpr
        acc = acc + 1.0
    tl.store(out_ptr + offs, y + acc)


@triton.jit
def _static_constexpr_name_kernel(x_ptr, out_ptr, flag_ptr, BLOCK_SIZE: tl.constexpr):
    offs = tl.arange(0, BLOCK_SIZE)
    flag: tl.constexpr = BLOCK_SIZE > 8  # a tl.constexpr stays one: `if flag` is decided when the kernel compiles
    acc = 0
    if flag:
        y = tl.load(x_ptr + offs)
        acc = y * 3
    tl.store(out_ptr + offs, y + acc)


@triton.jit
def _dynamic_both_branches_kernel(x_ptr, out_ptr, flag_ptr, BLOCK_SIZE: tl.constexpr):
    offs = tl.arange(0, BLOCK_SIZE)
    acc = tl.zeros((BLOCK_SIZE,), dtype=tl.float32)
    if tl.load(flag_ptr) > 0:
        y = tl.load(x_ptr + offs)
        acc += 1.0  # a type kept: fine
    else:
        y = tl.zeros((BLOCK_SIZE,), dtype=tl.float32)
    tl.store(out_ptr + offs, y + acc)


@triton.jit
def _dynamic_uses_only_kernel(x_ptr, out_ptr, flag_ptr, BLOCK_SIZE: tl.constexpr):
    offs = tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + offs)
    if tl.load(flag_ptr) > 0:
        doubled = x * 2  # used only inside its branch: fine
        tl.store(out_ptr + offs, doubled)
    else:
        tl.store(out_ptr + offs, x)


@triton.jit
def _above(x, k):
    if k > 1:  # compiled, a constexpr when the caller computed one
        y = x * k
    return y


@triton.jit
def _helper_argument_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offs = tl.arange(0, BLOCK_SIZE)
    tl.store(out_ptr + offs, _above(tl.load(x_ptr + offs), n * 2))


def _if_launch(kernel, flag, *constexprs):
    x = torch.arange(16, device=ENV.device, dtype=torch.float32)
    out = torch.full((16,), float("nan"), device=ENV.device)
    kernel[(1,)](x, out, torch.tensor([flag], device=ENV.device, dtype=torch.int32), *constexprs, BLOCK_SIZE=16)
    return x, out


@pytest.mark.parametrize("flag", [0, 1])
@pytest.mark.parametrize("kernel", [_then_only_kernel, _else_only_kernel, _named_flag_kernel], ids=lambda k: k.__name__)
def test_a_name_first_assigned_in_one_branch_of_a_run_time_if_does_not_exist_after_it(kernel, flag):
    """Compiled, each branch of an `if` on a tensor is a region of its own: a name first assigned in one of them does
    not exist after the `if`, whichever branch a program takes (`flag = BLOCK_SIZE > 8` is a tensor too: a plain
    assignment makes one of a constexpr). The interpreter kept the name when its branch ran."""
    with pytest.raises(Exception, match=r"\by is not defined"):
        _if_launch(kernel, flag)


@pytest.mark.parametrize(
    "kernel, words",
    [
        (_then_type_kernel, r"`acc` is of type int32\[\], but the then block redefines it as fp32\[constexpr\[16\]\]"),
        (_else_type_kernel, r"`acc` is of type fp32\[constexpr\[16\]\], but the else block redefines it as fp16\["),
    ],
    ids=["then", "else"],
)
def test_a_run_time_if_that_changes_a_variables_type_is_refused(kernel, words):
    """Compiled, a variable live before an `if` on a tensor keeps its type through both branches. Under the
    interpreter, refused when the branch that changes it runs (the other branch is not run there)."""
    with pytest.raises(Exception, match=rf"initial value for {words}"):
        _if_launch(kernel, 1 if kernel is _then_type_kernel else 0)


def test_an_if_on_an_int_argument_is_decided_at_run_time_unless_it_is_1():
    """An int argument is a tensor compiled, and `if n > 0` is decided at run time; Triton specializes an int equal
    to 1 into a constexpr, and the same `if` is decided when the kernel compiles: both are taken as compiled."""
    x = torch.arange(16, device=ENV.device, dtype=torch.float32)
    out = torch.full((16,), float("nan"), device=ENV.device)
    with pytest.raises(Exception, match=r"\by is not defined"):
        _int_argument_kernel[(1,)](x, out, 5, BLOCK_SIZE=16)
    _int_argument_kernel[(1,)](x, out, 1, BLOCK_SIZE=16)
    torch.testing.assert_close(out, x, rtol=0, atol=0)


def test_an_if_on_a_helpers_int_argument_is_left_to_the_compiler():
    """A helper's int argument may be a constexpr its caller computed: `n * 2` with n == 1 is constexpr 2 compiled,
    and the helper's `if k > 1` is decided when it compiles. The interpreter holds a tensor there, and does not refuse
    (compiled with n == 3, the same helper is refused: a case left to the compiler)."""
    x = torch.arange(16, device=ENV.device, dtype=torch.float32)
    out = torch.full((16,), float("nan"), device=ENV.device)
    _helper_argument_kernel[(1,)](x, out, 1, BLOCK_SIZE=16)
    torch.testing.assert_close(out, 2 * x, rtol=0, atol=0)


@pytest.mark.parametrize(
    "kernel, constexprs, want",
    [
        (_static_parameter_kernel, (True,), lambda x: 2 * x),
        (_static_expression_kernel, (), lambda x: 4 * x + 1),
        (_static_constexpr_name_kernel, (), lambda x: 4 * x),
        (_dynamic_both_branches_kernel, (), lambda x: x + 1),
        (_dynamic_uses_only_kernel, (), lambda x: 2 * x),
    ],
    ids=[
        "constexpr parameter",
        "constexpr expression",
        "name: tl.constexpr",
        "run time, both branches",
        "run time, uses",
    ],
)
def test_ifs_the_compiler_takes_run(kernel, constexprs, want):
    """An `if` on a constexpr (a parameter, an expression of them, a `name: tl.constexpr`) is decided when the kernel
    compiles: a name first assigned in it, or a type changed, is fine. An `if` on a tensor that defines a name in
    both branches with one type, or only uses names, is fine too."""
    x, out = _if_launch(kernel, 1, *constexprs)
    torch.testing.assert_close(out, want(x), rtol=0, atol=0)


@pytest.mark.slow
@pytest.mark.skipif(not offline.available(), reason="needs Triton's NVIDIA backend and its ptxas")
def test_the_compiler_takes_and_refuses_the_same_ifs():
    """The kernels above compiled for an H100 (utils.offline): the compiler refuses and takes what the interpreter
    now does, in the same words."""
    pointers = dict(x_ptr="fp32", out_ptr="fp32", flag_ptr="i32")
    cases = {  # kernel: (ints, constexprs, the error's words or None)
        "_then_only_kernel": ({}, {}, "y is not defined"),
        "_else_only_kernel": ({}, {}, "y is not defined"),
        "_named_flag_kernel": ({}, {}, "y is not defined"),
        "_then_type_kernel": ({}, {}, "but the then block redefines it as fp32[constexpr[16]]"),
        "_else_type_kernel": ({}, {}, "but the else block redefines it as fp16[constexpr[16]]"),
        "_int_argument_kernel": (dict(n=5), {}, "y is not defined"),
        "_helper_argument_kernel": (dict(n=1), {}, None),
        "_static_parameter_kernel": ({}, dict(HAS_SCALE=True), None),
        "_static_expression_kernel": ({}, {}, None),
        "_static_constexpr_name_kernel": ({}, {}, None),
        "_dynamic_both_branches_kernel": ({}, {}, None),
        "_dynamic_uses_only_kernel": ({}, {}, None),
    }
    jobs = [
        offline.job(
            name,
            pointers={k: v for k, v in pointers.items() if k in globals()[name].arg_names},
            ints=ints,
            constexprs=dict(BLOCK_SIZE=16, **constexprs),
        )
        for name, (ints, constexprs, _) in cases.items()
    ]
    jobs.append(offline.job("_int_argument_kernel", pointers=dict(x_ptr="fp32", out_ptr="fp32"), ints=dict(n=1),
                            constexprs=dict(BLOCK_SIZE=16)))  # fmt: skip
    results = offline.compile_kernels(Path(__file__), jobs, raise_errors=False)
    wrong = []
    for (name, (_, _, words)), result in zip([*cases.items(), ("_int_argument_kernel", ({}, {}, None))], results):
        if (words is None and result.error) or (words is not None and words not in (result.error or "")):
            wrong.append(f"{name}: want {words!r}, got {result.error!r}")
    assert not wrong, "\n".join(wrong)
