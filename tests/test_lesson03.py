"""Lesson 03 (vector add: debugging, refusals, measuring): the fixed kernel passes lesson 02's check_add, the
lesson's buggy kernel fails it with both bugs named, add works at the sizes and block shapes the lesson sweeps,
and the names it reuses are lesson 01's and 02's own (one name per meaning).

Sizes are tiny under the interpreter and large on a GPU; inputs are fresh random numbers and outputs start full of
NaN, so an element the kernel never wrote cannot pass.
"""

import functools
import re

import pytest
import torch
import triton
import triton.language as tl

import utils
from utils.lessons import load
from utils.mode import current
from utils.mutants import plant

ENV = current()  # before any @triton.jit below
lesson = load("03")


def test_fixed_kernel_passes_the_check(capsys):
    lesson.check_add(functools.partial(lesson.add, kernel=lesson.add_kernel_fixed))
    assert "✓" in capsys.readouterr().out


@triton.jit
def add_kernel_buggy(x_ptr, y_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    """The notebook's spot-the-bug kernel: y through x's pointer, and a store without a mask."""
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y)


def test_buggy_kernel_gets_both_bugs_named():
    with pytest.raises(AssertionError) as err:
        lesson.check_add(functools.partial(lesson.add, kernel=add_kernel_buggy), quiet=True)
    message = str(err.value)
    assert "past the end" in message and "mask the stores" in message
    assert "y is loaded through x's pointer" in message


def test_the_notebooks_buggy_kernel_is_the_one_tested_here():
    """The spot-the-bug cell is not exported (it is not lesson code): keep this test's copy in step with it."""
    from utils.lessons import solution_source

    lines = [line.strip() for line in solution_source("03", "add_kernel_buggy").splitlines()]
    assert "y = tl.load(x_ptr + offsets, mask=mask)" in lines and "tl.store(out_ptr + offsets, x + y)" in lines


@pytest.mark.parametrize("BLOCK_SIZE, num_warps", [(128, 1), (1024, 4), (4096, 16), (16384, 8)])
def test_add_block_sizes_the_lesson_sweeps(BLOCK_SIZE, num_warps):
    n = ENV.pick(cpu=3 * 16384 + 5, gpu=2**20 + 5)  # several blocks and a ragged tail for every BLOCK_SIZE
    x, y = torch.randn(n, device=ENV.device), torch.randn(n, device=ENV.device)
    out = lesson.add(x, y, out=utils.nan_like(x), BLOCK_SIZE=BLOCK_SIZE, num_warps=num_warps)
    utils.check(out, lesson.add_ref(x.double(), y.double()), name=f"add BLOCK_SIZE={BLOCK_SIZE}", quiet=True)


@pytest.mark.skipif(not ENV.is_gpu, reason="large sizes only on a GPU")
def test_add_at_the_bench_sizes():
    for n in (2**24 + 7, 2**27 + 3):
        x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
        utils.check(lesson.add(x, y, out=utils.nan_like(x)), x.double() + y.double(), quiet=True)


def test_names_are_the_earlier_lessons_own():
    l01, l02 = load("01"), load("02")
    assert lesson.add is l02.add and lesson.add_ref is l02.add_ref and lesson.check_add is l02.check_add
    assert lesson.add_bytes is l01.add_bytes and lesson.add_flops is l01.add_flops
    assert lesson.add_bytes(2**26, 4) == 3 * 2**26 * 4  # what bench/lesson03.py counts


def test_refusals_shown_in_the_notebook():
    x = torch.randn(1000, device=ENV.device)
    utils.refuses(
        {
            "shapes that differ": lambda: lesson.add(x, x[:999]),
            "an out that is one of the inputs": lambda: lesson.add(x, torch.randn_like(x), out=x),
            "a BLOCK_SIZE that is not a power of two": lambda: lesson.add(x, x, BLOCK_SIZE=1000),
            "NumPy arrays": lambda: lesson.add(x.cpu().numpy(), x.cpu().numpy()),
        },
        quiet=True,
    )
    assert lesson.add(x[:0], x[:0]).numel() == 0


def test_a_mask_off_by_one_is_named(monkeypatch, tmp_path):
    """`offsets < n - 1` leaves only the last element unwritten: the hint names the mask first, not the grid."""
    plant(monkeypatch, tmp_path, lesson, "add_kernel_fixed", ("mask = offsets < n", "mask = offsets < n - 1"))
    with pytest.raises(AssertionError, match=r"(?s)last element was never written.*off by one"):
        lesson.check_add(functools.partial(lesson.add, kernel=lesson.add_kernel_fixed), quiet=True)


_START = "offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)"
PLANTED = {  # mistake: (the fixed kernel's text, the mistake's, words of the hint); lesson 02's check_add names them
    "program ids counted from 1": (
        "pid = tl.program_id(axis=0)",
        "pid = tl.program_id(axis=0) + 1",
        "The first block (elements 0 ... 1023) was never written",
    ),
    "offsets counted from 1": ("tl.arange(0, BLOCK_SIZE)", "tl.arange(1, BLOCK_SIZE + 1)", "Only element 0"),
    "every program loads block 0": (
        "x = tl.load(x_ptr + offsets, mask=mask)\n    y = tl.load(y_ptr + offsets, mask=mask)",
        "x = tl.load(x_ptr + tl.arange(0, BLOCK_SIZE))\n    y = tl.load(y_ptr + tl.arange(0, BLOCK_SIZE))",
        "every later block repeats its values",
    ),
    "x * y": ("x + y", "x * y", "x and y are multiplied"),
    "y - x": ("x + y", "y - x", "x is subtracted"),
    "the sum stored into x": ("tl.store(out_ptr + offsets", "tl.store(x_ptr + offsets", "changed its input x"),
    # session 38: the first two were told "each program's offsets must start at pid * BLOCK_SIZE" alone, right
    # offsets or not; the third has its own rule (utils.check), asserted here for the lesson's own kernel
    "the mask compares with BLOCK_SIZE": (
        "mask = offsets < n",
        "mask = offsets < BLOCK_SIZE",
        "offsets < BLOCK_SIZE lets only block 0 through",
    ),
    "the program id of axis 1": (
        "tl.program_id(axis=0)",
        "tl.program_id(axis=1)",
        "tl.program_id(1) is 0 in every program",
    ),
    "the mask offsets <= n": ("mask = offsets < n", "mask = offsets <= n", "a mask off by one (offsets <= n"),
    # (probe0304) add's default BLOCK_SIZE written as a number: both passed, check_add ran only BLOCK_SIZE=1024
    "1024 for BLOCK_SIZE in pid * BLOCK_SIZE": (
        _START,
        "offsets = pid * 1024 + tl.arange(0, BLOCK_SIZE)",
        "has the number 1024 where BLOCK_SIZE belongs (pid * 1024)",
    ),
    "1024 for BLOCK_SIZE in tl.arange": (
        _START,
        "offsets = pid * BLOCK_SIZE + tl.arange(0, 1024)",
        "has the number 1024 where BLOCK_SIZE belongs (tl.arange(0, 1024))",
    ),
    # (session 53) "the programs do not reach the end of the array. Launch triton.cdiv(n, BLOCK_SIZE) programs", a
    # grid lesson 02's add has: the unwritten tail starts where no block ends (4099 - 1024 = 3075; 4099 % 1024 = 3)
    "the mask a block short": (
        "mask = offsets < n",
        "mask = offsets < n - BLOCK_SIZE",
        "Either the mask stops too soon",
    ),
    "the mask offsets < n % BLOCK_SIZE": (
        "mask = offsets < n",
        "mask = offsets < n % BLOCK_SIZE",
        "Either the mask stops too soon",
    ),
}


@pytest.mark.parametrize("mistake", list(PLANTED))
def test_check_add_names_a_planted_mistake(mistake, monkeypatch, tmp_path):
    old, new, words = PLANTED[mistake]
    plant(monkeypatch, tmp_path, lesson, "add_kernel_fixed", (old, new))
    with pytest.raises(AssertionError, match=re.escape(words)):
        lesson.check_add(functools.partial(lesson.add, kernel=lesson.add_kernel_fixed), quiet=True)
