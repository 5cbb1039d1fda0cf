"""Lesson 04's solution (fused softmax): both kernels at awkward shapes, the values that break careless kernels,
and the launcher's refusals.

The reference is softmax_ref in fp64, cross-checked against torch.softmax; inputs are fresh random numbers each
time and outputs start full of NaN. On a GPU the shapes reach 2**15 + 3 rows and a row of 2**20 + 1 elements.
"""

import pytest
import torch

import utils
from utils.lessons import load
from utils.mode import current

ENV = current()
lesson = load("04")

DTYPES = ENV.pick(
    cpu=[torch.float32, torch.float16],  # the interpreter has no bfloat16
    gpu=[torch.float32, torch.float16, torch.bfloat16],
)

# (M, N): rows that fit one block (N <= MAX_BLOCK_SIZE)
ONE_BLOCK = ENV.pick(
    cpu=[(1, 1), (5, 1), (2, 2), (3, 1000), (37, 781), (1, 4096), (2, 129)],
    gpu=[
        (1, 1),
        (5, 1),
        (2, 2),
        (3, 1000),
        (1823, 781),
        (1, 16384),
        (4099, 4095),
        (3, 16383),
        (65539, 1000),
        (2**15 + 3, 4093),
    ],
)
# (M, N, BLOCK_SIZE): rows read in several blocks; None = the launcher's choice for rows past MAX_BLOCK_SIZE
ONLINE = ENV.pick(
    cpu=[(1, 1, 16), (4, 127, 16), (3, 1000, 128), (2, 3001, 1024), (2, 256, 128)],
    gpu=[
        (1, 1, 16),
        (4, 127, 16),
        (3, 1000, 128),
        (1000, 3001, 1024),
        (7, 100_003, None),
        (3, 2**20 + 1, None),
        (64, 65536, None),
    ],
)


def _ref(x):
    return lesson.softmax_ref(x.double())


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("M, N", ONE_BLOCK)
def test_softmax_one_block(M, N, dtype):
    x = torch.randn(M, N, device=ENV.device, dtype=dtype)
    utils.check(lesson.softmax(x, out=utils.nan_like(x)), _ref(x), name=f"softmax {M}x{N}", quiet=True)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("M, N, BLOCK_SIZE", ONLINE)
def test_softmax_online(M, N, BLOCK_SIZE, dtype):
    x = torch.randn(M, N, device=ENV.device, dtype=dtype)
    out = lesson.softmax(x, out=utils.nan_like(x), BLOCK_SIZE=BLOCK_SIZE)
    utils.check(out, _ref(x), name=f"online softmax {M}x{N} BLOCK_SIZE={BLOCK_SIZE}", quiet=True)


def test_long_rows_take_the_online_kernel():
    """Past MAX_BLOCK_SIZE the launcher must not try to hold the row in one block."""
    N = lesson.MAX_BLOCK_SIZE + 1
    x = torch.randn(2, N, device=ENV.device)
    utils.check(lesson.softmax(x, out=utils.nan_like(x)), _ref(x), quiet=True)


def _special_rows(N, device):
    x = torch.randn(7, N, device=device)
    x[1, ::3] = float("-inf")  # scattered -inf, as an attention mask writes
    x[2, : N // 2] = float("-inf")  # a -inf prefix: whole blocks of it for the online kernel
    x[3, :-1] = float("-inf")  # a single finite value: exactly 1 there
    x[4] = (x[4] * 1e4).clamp(-6e4, 6e4)  # exp(x) alone overflows; fits fp16
    x[5] = float("-inf")  # nothing but -inf: NaN, as torch.softmax gives
    x[6, -1] = float("-inf")  # -inf in the tail block only
    return x


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("BLOCK_SIZE", [None, 128, 64])
@pytest.mark.parametrize("N", [1000, 1, 128])
def test_softmax_special_values_match_torch(N, BLOCK_SIZE, dtype):
    x = _special_rows(N, ENV.device).to(dtype)
    out = lesson.softmax(x, out=utils.nan_like(x), BLOCK_SIZE=BLOCK_SIZE)
    want = torch.softmax(x.double(), dim=1)
    utils.check(out, want, name=f"special values N={N} BLOCK_SIZE={BLOCK_SIZE}", quiet=True)
    assert torch.isnan(out[5]).all(), "a row of nothing but -inf should give NaN, as torch.softmax does"
    if N > 1:
        assert torch.isfinite(out[[0, 1, 2, 3, 4, 6]]).all()


def test_reference_agrees_with_torch_softmax():
    x = _special_rows(777, ENV.device).double()
    torch.testing.assert_close(lesson.softmax_ref(x), torch.softmax(x, dim=1), equal_nan=True)


@pytest.mark.parametrize("BLOCK_SIZE", [None, 64])
def test_softmax_of_a_row_strided_view(BLOCK_SIZE):
    wide = torch.randn(37, 1000, device=ENV.device)
    x = wide[:, 13:794]  # rows 1000 apart, 781 used, starting mid-row
    out = lesson.softmax(x, out=utils.nan_empty((37, 781), device=ENV.device), BLOCK_SIZE=BLOCK_SIZE)
    utils.check(out, _ref(x), quiet=True)


def test_softmax_allocates_its_output():
    x = torch.randn(5, 300, device=ENV.device, dtype=torch.float16)
    out = lesson.softmax(x)
    assert out.shape == x.shape and out.dtype == x.dtype and out.is_contiguous()
    utils.check(out, _ref(x), quiet=True)


_x = lambda: torch.randn(8, 100, device=ENV.device)  # noqa: E731
BAD = {
    "1-D": (lambda x: lesson.softmax(x[0]), ValueError, "2 dimension"),
    "3-D": (lambda x: lesson.softmax(x.reshape(2, 4, 100)), ValueError, "2 dimension"),
    "integers": (lambda x: lesson.softmax(x.int()), TypeError, "dtype"),
    "float64": (lambda x: lesson.softmax(x.double()), TypeError, "dtype"),
    "columns not contiguous": (lambda x: lesson.softmax(x.t()), ValueError, "stride"),
    "wrong out shape": (lambda x: lesson.softmax(x, out=torch.empty(8, 99, device=ENV.device)), ValueError, "shape"),
    "wrong out dtype": (
        lambda x: lesson.softmax(x, out=torch.empty(8, 100, device=ENV.device, dtype=torch.float16)),
        TypeError,
        "dtype",
    ),
}


@pytest.mark.parametrize("case", list(BAD))
def test_softmax_refuses_bad_inputs(case):
    call, error, words = BAD[case]
    with pytest.raises(error, match=words):
        call(_x())


@pytest.mark.skipif(not ENV.is_gpu, reason="a CPU tensor is only wrong when the kernels run on a GPU")
def test_softmax_refuses_cpu_tensors_on_the_gpu():
    with pytest.raises(ValueError, match=r"\.cuda\(\)"):
        lesson.softmax(torch.randn(4, 100))
