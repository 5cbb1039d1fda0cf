"""The course's interpreter behaves as the compiler does where Triton's own interpreter did not (utils.parity): `and`,
`or` and `not` on blocks lane by lane; an `if` on a block refused. Compiled on a GPU, the same kernels check that
the compiler agrees."""

import contextlib

import pytest
import torch
import triton
import triton.language as tl

from utils.mode import current

ENV = current()


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
    with pytest.warns(UserWarning) if not ENV.interpret else contextlib.nullcontext():  # compiled: deprecated for &
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
