"""utils.order: the interpreter's launches run their programs in another order, as a GPU may."""

import pytest
import torch
import triton
import triton.language as tl

from utils import order
from utils.mode import current

pytestmark = pytest.mark.skipif(not current().interpret, reason="a GPU runs its programs in its own order")


@triton.jit
def rank_kernel(ticket_ptr, out_ptr):
    pid = tl.program_id(0) * tl.num_programs(1) + tl.program_id(1)
    tl.store(out_ptr + pid, tl.atomic_add(ticket_ptr, 1))  # how many programs ran before this one


def ranks(grid=(4, 3)):
    """For each program (x-major), when it ran: 0 for the first."""
    ticket = torch.zeros(1, dtype=torch.int32)
    out = torch.full((grid[0] * grid[1],), -1, dtype=torch.int32)
    rank_kernel[grid](ticket, out)
    return out


def test_the_interpreter_runs_programs_in_order_and_programs_in_changes_it_inside_its_block_only():
    in_order = torch.arange(12, dtype=torch.int32)
    assert torch.equal(ranks(), in_order)
    with order.programs_in("reversed") as changed:
        assert changed and torch.equal(ranks(), in_order.flip(0))
    with order.programs_in("shuffled", seed=1):
        first, again = ranks(), ranks()
    with order.programs_in("shuffled", seed=2):
        other = ranks()
    assert torch.equal(first.sort().values, in_order)  # every program ran once
    assert not torch.equal(first, in_order) and torch.equal(first, again) and not torch.equal(first, other)
    with order.programs_in_order(None) as changed:
        assert not changed and torch.equal(ranks(), in_order)
    assert torch.equal(ranks(), in_order)  # put back


def test_blocks_nest_and_an_error_inside_puts_the_order_back():
    in_order = torch.arange(12, dtype=torch.int32)
    with order.programs_in("reversed"):
        with order.programs_in("shuffled", seed=1):
            inner = ranks()
        assert torch.equal(ranks(), in_order.flip(0))
    assert not torch.equal(inner, in_order.flip(0))
    with pytest.raises(KeyError), order.programs_in("reversed"):
        raise KeyError("a failing check")
    assert torch.equal(ranks(), in_order)


@pytest.mark.parametrize("spec", ["backwards", "shuffled:x", "reversed:3", ""])
def test_a_bad_order_is_refused(spec):
    with pytest.raises(ValueError, match="give reversed, or shuffled:SEED"):
        order.parse(spec)
    if spec.partition(":")[0] not in order.ORDERS:
        with pytest.raises(ValueError, match="give one of"), order.programs_in(spec.partition(":")[0]):
            pass


def test_parse_reads_pytests_option():
    assert order.parse("reversed") == ("reversed", 0)
    assert order.parse("shuffled:7") == ("shuffled", 7)
