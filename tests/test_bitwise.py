"""utils.bitwise: exact inputs really give exact sums in any order, and the assertion fails on a one-ulp difference."""

import pytest
import torch

from utils.bitwise import (
    SIGNIFICAND_BITS,
    assert_bitwise_equal,
    bitwise_equal,
    exact_budget,
    exact_matmul_inputs,
    exact_values,
    ulp_distance,
)

FLOATS = [torch.float64, torch.float32, torch.float16, torch.bfloat16]


def _one_ulp_up(t: torch.Tensor, index) -> torch.Tensor:
    """A copy of t with one element moved to the next representable number of its dtype."""
    bumped = t.clone()
    value = bumped[index].reshape(1)
    bumped[index] = torch.nextafter(value, torch.full_like(value, float("inf")))[0]
    return bumped


# -- assert_bitwise_equal ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_one_ulp_difference_fails_and_says_where(dtype):
    a = (torch.randn(5, 7, dtype=torch.float64) * 3).to(dtype)
    b = _one_ulp_up(a, (3, 4))
    assert int(ulp_distance(a, b).max()) == 1
    with pytest.raises(AssertionError) as e:
        assert_bitwise_equal(a, b, name="C tile")
    message = str(e.value)
    assert "C tile" in message and "1 of 35 elements differ" in message
    assert "largest distance 1 ulp" in message and "(3, 4)" in message
    assert not bitwise_equal(a, b)
    assert torch.allclose(a.double(), b.double(), rtol=1e-2)  # what a tolerance would have let through


def test_identical_bits_pass_nans_included():
    a = torch.tensor([1.0, float("nan"), -0.0, float("inf")])
    assert_bitwise_equal(a, a.clone())
    assert bitwise_equal(a, a.clone())


def test_the_worst_element_and_the_count_are_reported():
    a = torch.zeros(100, dtype=torch.float16) + 1
    b = a.clone()
    b[10] = 1 + 2**-10  # 1 ulp above 1 in fp16
    b[60] = 1 + 5 * 2**-10  # 5 ulps
    with pytest.raises(
        AssertionError, match=r"2 of 100 elements differ .*largest distance 5 ulp.*first at index \(10,\)"
    ):
        assert_bitwise_equal(a, b)


def test_signed_zeros_are_different_bits():
    with pytest.raises(AssertionError, match="only the sign of a zero differs"):
        assert_bitwise_equal(torch.tensor([0.0]), torch.tensor([-0.0]))


def test_shape_and_dtype_must_match():
    with pytest.raises(AssertionError, match="shapes differ"):
        assert_bitwise_equal(torch.zeros(3), torch.zeros(4))
    with pytest.raises(AssertionError, match="dtypes differ, float32 and float16"):
        assert_bitwise_equal(torch.zeros(3), torch.zeros(3, dtype=torch.float16))


def test_ulp_distance_counts_representable_numbers_across_zero():
    tiny = torch.tensor([2**-149], dtype=torch.float32)  # the smallest positive fp32 (subnormal)
    assert int(ulp_distance(tiny, -tiny)) == 2  # -tiny, -0/+0, +tiny
    assert int(ulp_distance(torch.tensor([1.0]), torch.tensor([2.0]))) == 2**23  # one binade of fp32
    with pytest.raises(TypeError, match="one dtype"):
        ulp_distance(torch.zeros(1), torch.zeros(1, dtype=torch.float16))


def _fp32_sum(terms: torch.Tensor) -> torch.Tensor:
    """Sum over dim 1, one fp32 addition at a time (torch's own sums on the CPU accumulate floats in double)."""
    total = torch.zeros(terms.shape[0], *terms.shape[2:], dtype=torch.float32)
    for k in range(terms.shape[1]):
        total = total + terms[:, k].float()
    return total


# -- exact inputs ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("K", [1, 70, 1000, 2**14])
def test_exact_inputs_make_every_order_of_fp32_sums_exact(dtype, K):
    a, b = exact_matmul_inputs(3, 5, K, dtype, device="cpu", seed=K)
    exact = a.double() @ b.double()
    products = a.float()[:, :, None] * b.float()[None, :, :]  # (3, K, 5): every product, in fp32
    assert torch.equal(products.double(), a.double()[:, :, None] * b.double()[None, :, :])  # products are exact
    orders = {
        "left to right": _fp32_sum(products),
        "right to left": _fp32_sum(products.flip(1)),
        "in blocks of 16, then the blocks": _fp32_sum(torch.stack([_fp32_sum(p) for p in products.split(16, 1)], 1)),
    }
    for order, total in orders.items():
        assert total.dtype == torch.float32
        assert torch.equal(total.double(), exact), f"{order}: fp32 sum not exact for {dtype}, K={K}"
    assert (a.double().abs() < 2 ** exact_budget(K, dtype)[0]).all()


def test_without_exact_inputs_the_order_changes_the_bits():
    """The same sums on random inputs: the test above could fail, and does when the inputs are not exact."""
    products = torch.randn(50, 1000, dtype=torch.float32)
    forward, backward = _fp32_sum(products), _fp32_sum(products.flip(1))
    assert not bitwise_equal(forward, backward)
    assert torch.allclose(forward, backward, rtol=1e-4, atol=1e-4)


def test_exact_over_a_few_terms_in_fp16():
    """Inputs for an fp16 accumulator emptied every 16 terms: each 16-term sum is exact in fp16, the total is not."""
    a, b = exact_matmul_inputs(
        4, 6, 256, torch.float16, acc_dtype=torch.float16, exact_over=16, signed=False, device="cpu", seed=1
    )  # on the CPU: the sums below are torch's own fp16 additions, one at a time
    assert (a >= 0).all() and (b >= 0).all()
    products = a[:, :, None].double() * b[None, :, :].double()
    for chunk in products.split(16, dim=1):
        running = torch.zeros(4, 6, dtype=torch.float16)
        for k in range(chunk.shape[1]):
            running = running + chunk[:, k].half()  # rounds to fp16 at every addition
        assert torch.equal(running.double(), chunk.sum(1))
    whole = torch.zeros(4, 6, dtype=torch.float16)
    for k in range(256):
        whole = whole + products[:, k].half()
    assert not torch.equal(whole.double(), products.sum(1)), "the totals should outgrow fp16's 11 bits"


def test_budget_refuses_what_cannot_be_exact():
    with pytest.raises(ValueError, match="too long"):
        exact_budget(2**23, torch.float16)
    with pytest.raises(TypeError, match="fp16, bf16 or fp32"):
        exact_budget(16, torch.int32)
    with pytest.raises(ValueError, match="positive int"):
        exact_budget(0)
    bits, exponents = exact_budget(16, torch.bfloat16)
    assert bits <= SIGNIFICAND_BITS[torch.bfloat16]


def test_exact_values_are_representable_and_fresh_unless_seeded():
    g = torch.Generator().manual_seed(0)
    v = exact_values((1000,), torch.bfloat16, bits=8, exponents=3, device="cpu", generator=g)
    assert v.dtype == torch.bfloat16 and (v.double().abs() <= 255).all() and (v != 0).any()
    with pytest.raises(ValueError, match="not exact"):
        exact_values((1000,), torch.bfloat16, bits=11, exponents=0, device="cpu")
    first, _ = exact_matmul_inputs(4, 4, 8, device="cpu")
    second, _ = exact_matmul_inputs(4, 4, 8, device="cpu")
    assert not torch.equal(first, second)
    assert torch.equal(
        exact_matmul_inputs(4, 4, 8, device="cpu", seed=3)[0], exact_matmul_inputs(4, 4, 8, device="cpu", seed=3)[0]
    )
