"""Lesson 03's solution (vector add) at awkward sizes, every dtype it takes, and its launcher's refusals.

Sizes are tiny under the interpreter and large on a GPU, up to 2**27 + 3 elements; inputs are fresh random numbers
each time and outputs start full of NaN, so an element the kernel never wrote cannot pass.
"""

import pytest
import torch

import utils
from utils.lessons import load
from utils.mode import current

ENV = current()
lesson = load("03")

SIZES = ENV.pick(cpu=[1, 2, 31, 1000, 4097, 98_433], gpu=[1, 2, 31, 1000, 4097, 98_433, 2**24 + 7, 2**27 + 3])
DTYPES = ENV.pick(
    cpu=[torch.float32, torch.float16],  # the interpreter has no bfloat16
    gpu=[torch.float32, torch.float16, torch.bfloat16],
)


def _inputs(n, dtype=torch.float32):
    return torch.randn(n, device=ENV.device, dtype=dtype), torch.randn(n, device=ENV.device, dtype=dtype)


@pytest.mark.parametrize("n", SIZES)
def test_add_fp32_matches_fp64_reference(n):
    x, y = _inputs(n)
    utils.check(lesson.add(x, y, out=utils.nan_like(x)), x.double() + y.double(), name=f"add n={n}", quiet=True)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n", [1, 1000, 98_433])
def test_add_each_dtype(n, dtype):
    x, y = _inputs(n, dtype)
    utils.check(lesson.add(x, y, out=utils.nan_like(x)), x.double() + y.double(), name=f"add n={n} {dtype}", quiet=True)


@pytest.mark.parametrize("BLOCK_SIZE, num_warps", [(128, 1), (1024, 4), (4096, 16), (16384, 8)])
def test_add_block_sizes_the_lesson_sweeps(BLOCK_SIZE, num_warps):
    n = ENV.pick(cpu=3 * 16384 + 5, gpu=2**20 + 5)  # several blocks and a ragged tail for every BLOCK_SIZE
    x, y = _inputs(n)
    out = lesson.add(x, y, out=utils.nan_like(x), BLOCK_SIZE=BLOCK_SIZE, num_warps=num_warps)
    utils.check(out, x.double() + y.double(), name=f"add BLOCK_SIZE={BLOCK_SIZE}", quiet=True)


def test_add_allocates_its_output():
    x, y = _inputs(1003)
    out = lesson.add(x, y)
    assert out.shape == x.shape and out.dtype == x.dtype and out.device == x.device
    utils.check(out, x.double() + y.double(), quiet=True)


def test_add_works_on_any_contiguous_shape():
    x, y = torch.randn(3, 5, 7, device=ENV.device), torch.randn(3, 5, 7, device=ENV.device)
    utils.check(lesson.add(x, y, out=utils.nan_like(x)), x.double() + y.double(), quiet=True)


def test_add_ref_is_the_spec():
    x, y = _inputs(100)
    assert torch.equal(lesson.add_ref(x, y), x + y)


_x = lambda: torch.randn(1000, device=ENV.device)  # noqa: E731
BAD = {
    "shapes differ": (lambda x: lesson.add(x, x[:999]), ValueError, "must match"),
    "mixed dtypes": (lambda x: lesson.add(x, x.half()), TypeError, "dtype"),
    "non-contiguous": (lambda x: lesson.add(x[::2], x[1::2]), ValueError, "contiguous"),
    "integers": (lambda x: lesson.add(x.int(), x.int()), TypeError, "dtype"),
    "float64": (lambda x: lesson.add(x.double(), x.double()), TypeError, "dtype"),
    "wrong out shape": (lambda x: lesson.add(x, x, out=torch.empty(999, device=ENV.device)), ValueError, "shape"),
    "wrong out dtype": (
        lambda x: lesson.add(x, x, out=torch.empty(1000, device=ENV.device, dtype=torch.float16)),
        TypeError,
        "dtype",
    ),
}


@pytest.mark.parametrize("case", list(BAD))
def test_add_refuses_bad_inputs(case):
    call, error, words = BAD[case]
    with pytest.raises(error, match=words):
        call(_x())


@pytest.mark.skipif(not ENV.is_gpu, reason="a CPU tensor is only wrong when the kernels run on a GPU")
def test_add_refuses_cpu_tensors_on_the_gpu():
    x = torch.randn(1000)
    with pytest.raises(ValueError, match=r"\.cuda\(\)"):
        lesson.add(x, x)
