"""Bitwise testing: inputs on which every result is exact, and an assertion that fails on a one-ulp difference.

Where an optimisation must not change the output (another tile shape, another program order, a persistent kernel),
"close enough" hides bugs that move a result by a rounding's worth. The Triton team's remedy: build inputs from
small integers times powers of two, so that every product and every partial sum is exact in the accumulator. Then
the order of the additions cannot matter, every correct kernel returns the same bits as the fp64 reference rounded
once to the output dtype, and any difference at all is a bug.

* :func:`exact_budget` says how many bits an input may use for a given dtype and K;
* :func:`exact_values` / :func:`exact_matmul_inputs` build such inputs;
* :func:`ulp_distance` measures how many representable numbers lie between two results;
* :func:`assert_bitwise_equal` raises an AssertionError that says where, how many elements and how far apart.
"""

from __future__ import annotations

import math

import torch

from .mode import dtype_name

#: significant bits (the implicit leading one included) of each floating-point type
SIGNIFICAND_BITS = {torch.float64: 53, torch.float32: 24, torch.float16: 11, torch.bfloat16: 8}
#: the integer type with the same width, to read a float's bits
_BITS_AS = {
    torch.float64: torch.int64,
    torch.float32: torch.int32,
    torch.float16: torch.int16,
    torch.bfloat16: torch.int16,
}
#: bits an input value may use: tl.dot rounds fp32 inputs to TF32 (11 significant bits) on the GPU by default
_INPUT_BITS = {torch.float32: 11, torch.float16: 11, torch.bfloat16: 8}


def exact_budget(K: int, dtype=torch.float16, acc_dtype=torch.float32) -> tuple[int, int]:
    """``(bits, exponents)`` for inputs ``m * 2**-e`` with ``|m| < 2**bits`` and ``e`` in ``0..exponents``.

    Chosen so that a dot product of length ``K`` of two such inputs is exact in ``acc_dtype``: every product is a
    multiple of ``2**(-2 * exponents)`` no larger than ``(2**bits - 1)**2``, so every partial sum, an integer number
    of those units, needs at most ``2 * bits + 2 * exponents + ceil(log2 K)`` significant bits. Each input also fits
    in ``dtype`` (TF32 for fp32, which the GPU's tl.dot uses by default).
    """
    if dtype not in _INPUT_BITS:
        raise TypeError(f"exact inputs are for fp16, bf16 or fp32 tensors, not {dtype_name(dtype)}")
    if acc_dtype not in SIGNIFICAND_BITS:
        raise TypeError(f"acc_dtype must be a floating-point type, not {acc_dtype}")
    if not isinstance(K, int) or K < 1:
        raise ValueError(f"K must be a positive int, got {K!r}")
    room = SIGNIFICAND_BITS[acc_dtype] - math.ceil(math.log2(K))  # bits left for one product
    if room < 2:
        raise ValueError(
            f"K = {K} is too long for exact sums in {dtype_name(acc_dtype)}: even products of ±1 would need "
            f"{math.ceil(math.log2(K)) + 1} significant bits. Test a shorter K (bitwise tests need no large sizes)."
        )
    bits = max(1, min(_INPUT_BITS[dtype], (room + 1) // 4 + 1))  # about half the room for the integers...
    exponents = max(0, min(3, room // 2 - bits))  # ...and the rest for the powers of two, three at most
    return bits, exponents


def exact_values(
    shape, dtype, *, bits: int, exponents: int, signed: bool = True, device=None, generator=None
) -> torch.Tensor:
    """Random ``m * 2**-e``: integers ``|m| < 2**bits`` (zero included; ``m >= 0`` unless ``signed``) times powers of
    two, ``e`` in 0..exponents."""
    if device is None:
        from .mode import current

        device = current().device
    limit = 2**bits - 1
    m = torch.randint(-limit if signed else 0, limit + 1, tuple(shape), generator=generator, dtype=torch.int64)
    e = torch.randint(0, exponents + 1, tuple(shape), generator=generator, dtype=torch.int64)
    values = m.double() * torch.pow(2.0, -e.double())
    out = values.to(dtype)
    if not torch.equal(out.double(), values):  # cannot happen within exact_budget; a guard for other budgets
        raise ValueError(f"{bits}-bit integers times 2**-{exponents} are not exact in {dtype_name(dtype)}")
    return out.to(device)


def exact_matmul_inputs(
    M: int,
    N: int,
    K: int,
    dtype=torch.float16,
    *,
    acc_dtype=torch.float32,
    exact_over=None,
    signed=True,
    device=None,
    seed=None,
):
    """``a`` (M, K) and ``b`` (K, N) in ``dtype`` whose product is exact whatever the order of the sums in
    ``acc_dtype``: every correct kernel returns ``(a.double() @ b.double()).to(dtype)``, bit for bit. Compute that
    reference in fp64 as written: on a GPU, ``a @ b`` of fp16 tensors is cuBLAS's fp16 matmul, which PyTorch lets
    add partial sums in fp16 (``torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction``), so it is no
    exact reference.

    ``exact_over``: make sums of that many terms exact in ``acc_dtype`` instead of all K (for an accumulator that
    is emptied every ``exact_over`` terms). ``seed``: fixed inputs (default: fresh ones from torch's generator)."""
    bits, exponents = exact_budget(exact_over or K, dtype, acc_dtype)
    g = None if seed is None else torch.Generator().manual_seed(seed)
    kw = dict(bits=bits, exponents=exponents, signed=signed, device=device, generator=g)
    a = exact_values((M, K), dtype, **kw)
    b = exact_values((K, N), dtype, **kw)
    return a, b


# -- comparing bits -----------------------------------------------------------------------------------------------


def _ordered(t: torch.Tensor) -> torch.Tensor:
    """The bits of a float as an int64 that counts representable numbers: consecutive floats differ by 1."""
    if t.dtype not in _BITS_AS:
        raise TypeError(f"ulp distances are for floating-point tensors, not {t.dtype}")
    i = t.contiguous().view(_BITS_AS[t.dtype]).to(torch.int64)
    lowest = torch.iinfo(_BITS_AS[t.dtype]).min  # the sign bit alone: -0.0
    return torch.where(i < 0, -(i - lowest), i)  # negative floats count down from -0 (int64 wraps right for fp64)


def ulp_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """How many representable numbers of their dtype lie between ``a`` and ``b`` (0: equal; +0 and -0 count as 0)."""
    if a.dtype != b.dtype:
        raise TypeError(f"ulp_distance needs one dtype, got {a.dtype} and {b.dtype}")
    return (_ordered(a.detach().cpu()) - _ordered(b.detach().cpu())).abs()


def _index(flat: int, shape) -> tuple:
    out = []
    for s in reversed(shape):
        out.append(flat % s)
        flat //= s
    return tuple(reversed(out))


def assert_bitwise_equal(a: torch.Tensor, b: torch.Tensor, name: str = "output", *, quiet: bool = True) -> None:
    """Raises AssertionError unless ``a`` and ``b`` have the same shape, dtype and bits (NaNs included).

    The message names ``name``, how many elements differ, where the first and the worst are, and the largest
    distance in ulps (units in the last place: 1 means the two values are neighbours in their dtype).
    """
    __tracebackhide__ = True
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        raise AssertionError(f"{name}: both sides must be tensors, got {type(a).__name__} and {type(b).__name__}")
    if tuple(a.shape) != tuple(b.shape):
        raise AssertionError(f"{name}: shapes differ, {tuple(a.shape)} and {tuple(b.shape)}")
    if a.dtype != b.dtype:
        raise AssertionError(f"{name}: dtypes differ, {dtype_name(a.dtype)} and {dtype_name(b.dtype)}")
    a_cpu, b_cpu = a.detach().cpu().contiguous(), b.detach().cpu().contiguous()
    if a.dtype in _BITS_AS:
        same = a_cpu.view(_BITS_AS[a.dtype]) == b_cpu.view(_BITS_AS[a.dtype])
    else:
        same = a_cpu == b_cpu
    differ = ~same.reshape(-1)
    count = int(differ.sum())
    if count == 0:
        if not quiet:
            print(f"✓ {name}: all {a.numel()} elements bit-identical ({dtype_name(a.dtype)})")
        return
    shape = tuple(a.shape)
    first = int(torch.nonzero(differ)[0])
    flat_a, flat_b = a_cpu.reshape(-1), b_cpu.reshape(-1)
    if a.dtype in _BITS_AS:
        dist = ulp_distance(flat_a, flat_b).masked_fill(~differ, -1)
        worst = int(torch.argmax(dist))
        far = f"largest distance {int(dist[worst])} ulp"
        if int(dist[worst]) == 0:
            far += " (only the sign of a zero differs)"
    else:
        worst, far = first, "integers"
    raise AssertionError(
        f"{name} is not bit-identical: {count} of {a.numel()} elements differ ({dtype_name(a.dtype)}), {far}; "
        f"first at index {_index(first, shape)}: {flat_a[first].item()!r} vs {flat_b[first].item()!r}; "
        f"worst at index {_index(worst, shape)}: {flat_a[worst].item()!r} vs {flat_b[worst].item()!r}"
    )


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """True when :func:`assert_bitwise_equal` would pass."""
    try:
        assert_bitwise_equal(a, b)
    except AssertionError:
        return False
    return True
