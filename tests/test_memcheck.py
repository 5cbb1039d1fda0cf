"""utils.watch_memory: under the interpreter, every lane of every load and store must stay inside the tensors its
launch was given. It catches what no output comparison sees (a load past the end whose values are masked away at
the store), and the lessons' checks report it with its own hint."""

import functools

import pytest
import torch
import triton
import triton.language as tl

import utils
from lessons import l02_simt_vs_blocks as L02
from lessons import l07_llm_layer as L07
from lessons import l09_test_debug_tune as L09
from utils.memcheck import tensor_span, watch_memory
from utils.mode import current

ENV = current()


def inside_a_larger_buffer(n, before=0, after=64, dtype=torch.float32):
    """An n-element tensor cut from a larger one: the kernels here stray on purpose, and under the interpreter
    their loads and stores really happen, so the memory they reach must be ours (a store past the end of a real
    allocation corrupts the heap). The watch still flags it: only the tensor given to the launch counts."""
    return torch.randn(before + n + after).to(dtype)[before : before + n]


pytestmark = pytest.mark.skipif(not ENV.interpret, reason="memory is watched under the interpreter only")


@triton.jit
def add_unmasked_loads_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    """The classic that every output check passes: the loads run past the end, the store is masked."""
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + offsets)
    y = tl.load(y_ptr + offsets, mask=offsets < n)
    tl.store(out_ptr + offsets, x + y, mask=offsets < n)


@triton.jit
def shift_kernel(x_ptr, out_ptr, n, SHIFT: tl.constexpr, BLOCK_SIZE: tl.constexpr):
    """out[i] = x[i + SHIFT] with the mask of i: reads before the start (SHIFT < 0) or past the end (> 0)."""
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets + SHIFT, mask=mask), mask=mask)


@triton.jit
def store_past_end_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n, other=0.0))


@triton.jit
def count_kernel(counts_ptr, n, BLOCK_SIZE: tl.constexpr):
    offsets = tl.arange(0, BLOCK_SIZE)
    tl.atomic_add(counts_ptr + offsets, 1, mask=offsets < n + 1)  # one lane too many


def test_an_unmasked_load_is_found_though_the_output_is_right():
    n = 100
    x, y, out = inside_a_larger_buffer(n), torch.randn(n), torch.empty(n)
    with watch_memory() as watch:
        add_unmasked_loads_kernel[(triton.cdiv(n, 64),)](x, y, out, n, BLOCK_SIZE=64)
    assert torch.equal(out, x + y)  # nothing in the output shows it
    assert watch.watched and watch.launches == 1 and len(watch.strays) == 1
    (stray,) = watch.strays
    assert (stray.kernel, stray.access, stray.near, stray.after, stray.lanes) == (
        "add_unmasked_loads_kernel",
        "reads",
        "x_ptr",
        True,
        28,
    )
    assert "28 lane(s) past the end of `x_ptr` (a tensor of 100 element(s)), up to 28" in str(stray)


def test_a_correct_kernel_and_a_view_with_gaps_pass():
    wide = torch.randn(6, 40)
    x = wide[:, :33]  # rows 40 apart: the kernel reads only inside the view's span
    out = torch.empty(6, 33)
    with watch_memory() as watch:
        L02.scale_rows(x, torch.randn(6), out=out)
    assert not watch and watch.launches == 1


@pytest.mark.parametrize("shift, side", [(-3, "before the start"), (5, "past the end")])
def test_reads_before_the_start_and_past_the_end_are_told_apart(shift, side):
    x, out = inside_a_larger_buffer(50, before=8, after=8), torch.empty(50)
    with watch_memory() as watch:
        shift_kernel[(1,)](x, out, 50, SHIFT=shift, BLOCK_SIZE=64)
    assert len(watch.strays) == 1 and side in str(watch.strays[0])
    assert f"up to {abs(shift)} element(s)" in str(watch.strays[0])


def test_stores_and_atomics_outside_are_found():
    x, out = torch.randn(10), inside_a_larger_buffer(10)
    with watch_memory() as watch:
        store_past_end_kernel[(1,)](x, out, 10, BLOCK_SIZE=16)
    assert [(s.access, s.near, s.lanes) for s in watch] == [("writes", "out_ptr", 6)]
    counts = inside_a_larger_buffer(7, dtype=torch.int32).zero_()
    with watch_memory() as watch:
        count_kernel[(1,)](counts, 7, BLOCK_SIZE=8)
    assert [(s.access, s.near, s.lanes) for s in watch] == [("atomically updates", "counts_ptr", 1)]


def test_the_interpreter_is_left_as_it_was_even_after_an_error():
    from triton.runtime import interpreter

    call = interpreter.GridExecutor.__call__
    with pytest.raises(RuntimeError, match="planted"):
        with watch_memory():
            raise RuntimeError("planted")
    assert interpreter.GridExecutor.__call__ is call
    assert not {"create_masked_load", "create_masked_store", "create_atomic_rmw"} & set(
        vars(interpreter.interpreter_builder)
    )
    x, out = torch.randn(10), inside_a_larger_buffer(10)
    with watch_memory() as outer, L09.interpreter_memcheck(x=x, out=out) as inner:  # lesson 09's own, nested
        store_past_end_kernel[(1,)](x, out, 10, BLOCK_SIZE=16)
    assert outer and inner
    assert not set(vars(interpreter.interpreter_builder)) & {"create_masked_load", "create_masked_store"}


def test_tensor_span_covers_views_and_nothing_else():
    base = torch.zeros(10, 8)
    lo, hi = tensor_span(base[2:5, 1:3])
    assert (lo - base.data_ptr(), hi - base.data_ptr()) == ((2 * 8 + 1) * 4, (4 * 8 + 3) * 4)
    lo, hi = tensor_span(torch.empty(0))
    assert lo == hi


def test_check_fails_on_stray_accesses_with_the_right_hint():
    n = 100
    x, y = inside_a_larger_buffer(n), torch.randn(n)
    out = utils.nan_empty(n)
    with watch_memory() as stray:
        add_unmasked_loads_kernel[(2,)](x, y, out, n, BLOCK_SIZE=64)
    with pytest.raises(AssertionError, match=r"(?s)sum is right, but the kernel touches memory outside.*x_ptr.*"
                       r"Hint: a tl.load needs a mask.*no comparison of outputs can see this"):  # fmt: skip
        utils.check(out, x.double() + y.double(), name="sum", quiet=True, stray=stray)
    # wrong values as well: the stray reads lead the report, as their likely cause, then what the comparison found
    with pytest.raises(AssertionError, match=r"(?s)reads memory outside.*likely cause.*x_ptr.*Fix this first.*"
                       r"What the comparison found:.*differs from the reference"):  # fmt: skip
        utils.check(out + 1, x.double() + y.double(), name="sum", quiet=True, stray=stray)
    utils.check(out, x.double() + y.double(), name="sum", quiet=True, stray=[])  # nothing stray: it passes


# -- the lessons' checks use it ----------------------------------------------------------------------------------


def test_lesson02_add_with_unmasked_loads_is_caught():
    with pytest.raises(AssertionError, match=r"(?s)add at n=\d+.* is right, but .*`x_ptr`.*a tl.load needs a mask"):
        L02.check_add(functools.partial(L02.add, kernel=add_unmasked_loads_kernel), quiet=True)


@triton.jit
def rmsnorm_weight_unmasked_kernel(
    x_ptr, res_ptr, w_ptr, out_ptr, sum_ptr, N, eps, BLOCK_SIZE: tl.constexpr, HAS_RESIDUAL: tl.constexpr
):
    """Lesson 07's rmsnorm_kernel with the weight loaded without its mask: x's tail is zero, so x * w is right."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < N
    offsets = row * N + cols
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    if HAS_RESIDUAL:
        x += tl.load(res_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
        tl.store(sum_ptr + offsets, x.to(sum_ptr.dtype.element_ty), mask=mask)
    rstd = tl.rsqrt(tl.sum(x * x, axis=0) / N + eps)
    w = tl.load(w_ptr + cols).to(tl.float32)  # the mistake
    tl.store(out_ptr + offsets, (x * rstd * w).to(out_ptr.dtype.element_ty), mask=mask)


def test_lesson07_rmsnorm_weight_read_past_its_end_is_caught(monkeypatch):
    monkeypatch.setattr(L07, "rmsnorm_kernel", rmsnorm_weight_unmasked_kernel)
    with pytest.raises(AssertionError, match=r"(?s)touches memory outside the tensors.*`w_ptr`.*a tl.load needs"):
        L07.check_rmsnorm(L07.rmsnorm, shapes=[(3, 100)], quiet=True)
    monkeypatch.undo()
    L07.check_rmsnorm(L07.rmsnorm, shapes=[(3, 100)], quiet=True)  # the lesson's own kernel passes the same check


@triton.jit
def block_sum_unmasked_kernel(x_ptr, sums_ptr, n, BLOCK_SIZE: tl.constexpr):
    """Lesson 10's block sums with the load unmasked, its lanes past the end dropped after the load: every sum, and
    so every output of the scan, is still right (and the garbage read cannot overflow an int32 sum)."""
    pid = tl.program_id(0)
    offs = pid.to(tl.int64) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    x = tl.where(offs < n, tl.load(x_ptr + offs), 0)  # the mistake: the load itself is not masked
    tl.store(sums_ptr + pid, tl.sum(x, axis=0))


def test_lesson10_scan_reading_past_its_input_is_caught(monkeypatch):
    from lessons import l10_sort_scan_data as L10

    monkeypatch.setattr(L10, "block_sum_kernel", block_sum_unmasked_kernel)
    with pytest.raises(AssertionError, match=r"(?s)is right, but.*`block_sum_unmasked_kernel` reads .*`x_ptr`"):
        L10.check_cumsum(L10.cumsum, quiet=True)


# -- races: two programs of one launch writing different values into one element --------------------------------


@triton.jit
def tiles_kernel(x_ptr, out_ptr, n, OVERLAP: tl.constexpr, SAME: tl.constexpr, BLOCK_SIZE: tl.constexpr):
    """out = 2 x, a tile a program; OVERLAP: each program also writes the first OVERLAP elements of the next tile
    (a mask off by OVERLAP), with its own value (pid + 1) or, SAME, the value that belongs there."""
    lanes = tl.arange(0, 2 * BLOCK_SIZE)
    offsets = tl.program_id(0) * BLOCK_SIZE + lanes
    mask = (offsets < n) & (lanes < BLOCK_SIZE + OVERLAP)
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    value = 2 * x if SAME else tl.where(lanes < BLOCK_SIZE, 2 * x, tl.program_id(0) + 1.0)
    tl.store(out_ptr + offsets, value, mask=mask)


@triton.jit
def tally_kernel(counts_ptr, BLOCK_SIZE: tl.constexpr):
    """Every program adds 1 to the same counters: atomics, which are meant for it."""
    tl.atomic_add(counts_ptr + tl.arange(0, BLOCK_SIZE), 1.0)


def _tiles(overlap, same, n=100, block=32):
    x = torch.randn(n)
    out = utils.nan_empty(n)
    with watch_memory() as watch:
        tiles_kernel[(triton.cdiv(n, block),)](x, out, n, OVERLAP=overlap, SAME=same, BLOCK_SIZE=block)
    return x, out, watch


def test_two_programs_writing_one_element_differently_is_a_race():
    x, out, watch = _tiles(overlap=2, same=False)  # 4 programs, each spilling 2 elements into the next tile
    assert torch.equal(out, 2 * x), "the interpreter runs the programs in order: the owner writes last"
    (race,) = watch.races
    assert (race.kernel, race.near, race.elements, race.first) == ("tiles_kernel", "out_ptr", 6, 32)
    assert race.programs == ((0, 0, 0), (1, 0, 0))
    assert "programs (0, 0, 0) and (1, 0, 0) both write element 32 of `out_ptr`" in str(race)
    with pytest.raises(AssertionError) as e:
        utils.check(out, 2 * x.double(), name="out", stray=watch, quiet=True)
    assert "out is right here, but two programs of one launch write different values" in str(e.value)
    assert "Give every output element one owner" in str(e.value)


def test_the_same_value_written_twice_and_atomics_are_no_race():
    x, out, watch = _tiles(overlap=2, same=True)
    assert not watch.races and not watch, "both programs write what belongs there: no result depends on the order"
    counts = torch.zeros(8)
    with watch_memory() as watch:
        tally_kernel[(5,)](counts, BLOCK_SIZE=8)
    assert torch.equal(counts, torch.full((8,), 5.0)) and not watch


@triton.jit
def _store_at_kernel(out_ptr, offset, value, ATOMIC: tl.constexpr):
    """Writes value at out_ptr + offset, wherever that is (the mistake: nothing keeps it inside out)."""
    if ATOMIC:
        tl.atomic_add(out_ptr + offset, value)
    else:
        tl.store(out_ptr + offset, value)


@pytest.mark.parametrize("atomic", [False, True])
def test_a_write_outside_every_allocation_of_the_launch_is_reported_and_not_made(atomic):
    """A store (or atomic) that lands in memory the launch was not given, here another tensor's allocation, is
    reported and not made: under the interpreter such a write would change Python's own memory (far enough away, it
    crashes the process and a notebook's kernel). One past a view but inside its allocation is still made, so
    that nan_empty's canaries keep showing it (see utils.check)."""
    out, other = torch.zeros(16), torch.zeros(16)  # two allocations
    offset = (other.data_ptr() - out.data_ptr()) // 4 + 3  # element 3 of other, reached through out
    with watch_memory() as stray:
        _store_at_kernel[(1,)](out, offset, 7.0, ATOMIC=atomic)
    assert torch.equal(other, torch.zeros(16)), "the stray write was made"
    assert stray and "`out_ptr`" in str(stray.strays[0]), "the stray write was not reported"
    buffer = torch.zeros(20)  # a view of 16, 4 more in its allocation: the write is made (and reported)
    with watch_memory() as stray:
        _store_at_kernel[(1,)](buffer[:16], 17, 7.0, ATOMIC=atomic)
    assert buffer[17] == 7.0 and stray, "a write inside the allocation should be made and reported"


@triton.jit
def _load_at_kernel(x_ptr, out_ptr, offset):
    """out[0] = x[offset], wherever that is (the mistake: nothing keeps the read inside x)."""
    tl.store(out_ptr, tl.load(x_ptr + offset))


def test_a_read_outside_every_allocation_of_the_launch_is_reported_and_not_made():
    """A load that lands in memory the launch was not given, here another tensor's allocation, is reported and
    gives 0 instead: under the interpreter a wild read (a page index read from garbage, say) can reach an address
    that is no memory at all and crash the process, and a notebook's kernel, before the check speaks. One past a
    view but inside its allocation is still read (and reported)."""
    x, other, out = torch.zeros(16), torch.full((16,), 5.0), torch.full((1,), float("nan"))
    offset = (other.data_ptr() - x.data_ptr()) // 4 + 3  # element 3 of other, reached through x
    with watch_memory() as stray:
        _load_at_kernel[(1,)](x, out, offset)
    assert out[0] == 0.0, "the stray read was made"
    assert stray and stray.strays[0].access == "reads", "the stray read was not reported"
    buffer = torch.arange(20.0)  # a view of 16, 4 more in its allocation: the read is made (and reported)
    with watch_memory() as stray:
        _load_at_kernel[(1,)](buffer[:16], out, 17)
    assert out[0] == 17.0 and stray, "a read inside the allocation should be made and reported"
