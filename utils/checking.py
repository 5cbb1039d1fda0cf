"""Checking a learner's result against a reference, with feedback that says where it is wrong and probably why.

Three tools:

* :func:`nan_empty` / :func:`nan_like` allocate outputs pre-filled with a NaN of our own bit pattern
  (:data:`NAN_PAYLOAD`), followed by a hidden run of the same NaN "canaries". An element that still holds those
  bits was never written; a NaN with any other bits was computed by the kernel (no arithmetic produces our
  pattern); a store past the end overwrites a canary, even when it stores a NaN. :func:`check` reports all three.
* :func:`check` compares with a reference computed in higher precision, using a tolerance per dtype with the reason
  for it, and on failure raises ``AssertionError`` with what is wrong, where, and a hint for the classic mistakes.
* :func:`require` validates a launcher's inputs and raises a ``ValueError``/``TypeError`` saying how to fix them.

The functions that raise for a learner set ``__tracebackhide__``: IPython and pytest then show the message and
the learner's own line, not this module's source.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch

from .mode import current, dtype_name

#: elements of hidden NaN canaries after every buffer made by nan_empty (one big block of the largest BLOCK_SIZE)
GUARD = 8192

#: the NaN that nan_empty fills with, as (integer dtype of the same width, bits). Each is a quiet NaN with a payload
#: that no arithmetic produces: NumPy and x86 make 0x7FC00000 or 0xFFC00000 (fp32), CUDA 0x7FFFFFFF, and NaN
#: arithmetic keeps the payload of the NaN that went in, so a computed NaN never has these bits unless it was
#: computed *from* a never-written element.
NAN_PAYLOAD = {
    torch.float16: (torch.int16, 0x7E5A),
    torch.bfloat16: (torch.int16, 0x7FD5),
    torch.float32: (torch.int32, 0x7FD5A5A5),
    torch.float64: (torch.int64, 0x7FFA5A5A5A5A5A5A),
}

#: what check(kind=) may say: the catch-all hint of a kernel talks about running it on a tiny input
KINDS = ("kernel", "python")


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float
    reason: str


#: default tolerances for an element-wise result compared with an fp64 reference
TOLERANCES = {
    torch.float64: Tolerance(1e-10, 1e-10, "fp64 reference arithmetic; only summation order differs"),
    torch.float32: Tolerance(
        1e-5, 1e-5, "fp32 keeps 24 significant bits (≈6e-8 per rounding); sums reordered across a block cost a few ulp"
    ),
    torch.float16: Tolerance(
        1e-3, 2e-3, "fp16 keeps 11 significant bits: rounding the result alone costs up to 4.9e-4 relative"
    ),
    torch.bfloat16: Tolerance(
        1e-2, 1.6e-2, "bf16 keeps 8 significant bits: rounding the result alone costs up to 3.9e-3 relative"
    ),
    # every integer dtype and bool is compared exactly: a kernel either computed the right integer or it did not
    **{
        dt: Tolerance(0, 0, "integers are exact")
        for dt in (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool)
    },
}


def default_tolerance(dtype: torch.dtype) -> Tolerance:
    if dtype not in TOLERANCES:
        raise TypeError(f"no default tolerance for {dtype_name(dtype)}; pass atol=, rtol= and reason=")
    return TOLERANCES[dtype]


def _raise(error: Exception):
    """Raises for a learner from a frame this short: IPython shows the raising frame even when it is hidden."""
    __tracebackhide__ = True
    raise error


def _as_dtype(dtype, what: str = "dtype") -> torch.dtype:
    """A torch.dtype from a torch.dtype or its name ("float32", "torch.float32"); TypeError for anything else."""
    __tracebackhide__ = True
    if isinstance(dtype, torch.dtype):
        return dtype
    if isinstance(dtype, str):
        found = getattr(torch, dtype.strip().removeprefix("torch."), None)
        if isinstance(found, torch.dtype):
            return found
    _raise(TypeError(f"{what} must be a torch dtype such as torch.float32, got {type(dtype).__name__} {dtype!r}."))


# -- allocation -------------------------------------------------------------------------------------------------


def _nan_fill(numel: int, dtype: torch.dtype, device) -> torch.Tensor:
    """``numel`` elements of :data:`NAN_PAYLOAD` (a plain NaN for a dtype without one)."""
    if dtype not in NAN_PAYLOAD:
        return torch.full((numel,), float("nan"), dtype=dtype, device=device)
    int_dtype, bits = NAN_PAYLOAD[dtype]
    return torch.full((numel,), bits, dtype=int_dtype, device=device).view(dtype)


def nan_empty(shape, dtype=torch.float32, device=None) -> torch.Tensor:
    """A contiguous tensor of ``shape`` full of our NaN (:data:`NAN_PAYLOAD`), followed by :data:`GUARD` canaries."""
    if device is None:
        from .mode import current

        device = current().device
    dtype = _as_dtype(dtype)
    shape = tuple(shape) if not isinstance(shape, int) else (shape,)
    numel = 1
    for s in shape:
        numel *= s
    return _nan_fill(numel + GUARD, dtype, device)[:numel].view(shape)


def nan_like(t: torch.Tensor, dtype=None) -> torch.Tensor:
    """:func:`nan_empty` with the shape, dtype and device of ``t``."""
    return nan_empty(t.shape, dtype or t.dtype, t.device)


def never_written(t: torch.Tensor) -> torch.Tensor:
    """A boolean mask (on the CPU) of the elements of ``t`` that still hold nan_empty's NaN, bit for bit.

    For a dtype without a payload (e.g. fp8) every NaN counts; integer tensors are never NaN.
    """
    t = t.detach().cpu()
    if t.dtype not in NAN_PAYLOAD:
        return torch.isnan(t) if t.dtype.is_floating_point else torch.zeros(t.shape, dtype=torch.bool)
    int_dtype, bits = NAN_PAYLOAD[t.dtype]
    return t.view(int_dtype) == bits


def _canaries(out: torch.Tensor):
    """The NaN canaries behind a nan_empty buffer, or None when ``out`` was not made by nan_empty."""
    if not out.is_contiguous() or out.storage_offset() != 0:
        return None
    n = out.numel()
    total = out.untyped_storage().nbytes() // out.element_size()
    if total != n + GUARD:
        return None
    return torch.empty(0, dtype=out.dtype, device=out.device).set_(out.untyped_storage(), n, (GUARD,))


# -- describing where ------------------------------------------------------------------------------------------


def _fmt_list(idx, limit=6) -> str:
    idx = [int(i) for i in idx]
    if len(idx) <= limit:
        return ", ".join(map(str, idx))
    return ", ".join(map(str, idx[:limit])) + f", … ({len(idx)} in all)"


def _index(flat_i: int, shape) -> tuple:
    out = []
    for s in reversed(shape):
        out.append(flat_i % s)
        flat_i //= s
    return tuple(reversed(out))


def _as_rows(t: torch.Tensor) -> torch.Tensor:
    """2-D view: leading dimensions flattened into rows, the last dimension as columns."""
    if t.dim() == 0:
        return t.reshape(1, 1)
    if t.dim() == 1:
        return t.reshape(1, -1)
    return t.reshape(-1, t.shape[-1])


def _is_suffix(mask_flat: torch.Tensor) -> int:
    """Length k if exactly the last k elements are set, else 0."""
    n = mask_flat.numel()
    k = int(mask_flat.sum())
    if k == 0 or k == n:
        return 0
    return k if bool(mask_flat[n - k :].all()) else 0


def _tail(mask_flat: torch.Tensor) -> int:
    """Length k if exactly the last k elements are set and k is at most half of them (a tail, not nearly all)."""
    k = _is_suffix(mask_flat)
    return k if 0 < k <= mask_flat.numel() // 2 else 0


def _plural(name: str) -> str:
    if name.endswith(("s", "x", "ch", "sh")):
        return name + "es"
    return name + "s"


def _names(shape, dims) -> list[tuple[str, str, str]]:
    """(an index, indices, the axis) of each dimension: from ``dims`` if given ("head", "heads", "the head axis"),
    rows and columns in 2-D, "dim d index" otherwise."""
    if dims is not None:
        return [(d, _plural(d), f"the {d} axis") for d in dims]
    if len(shape) == 2:
        return [("row", "rows", "the rows"), ("column", "columns", "the columns")]
    return [(f"dim {d} index", f"dim {d} indices", f"dim {d}") for d in range(len(shape))]


def _indices(idx, size: int, name: str, plural: str) -> str:
    """'heads 1 and 2 (of 4)', 'positions ≥ 1 (of 7)', 'all 4 heads', 'row 3 (of 5)'."""
    idx = [int(i) for i in idx]
    if len(idx) == size:
        return f"all {size} {plural}" if size > 1 else f"the only {name} (0)"
    if len(idx) == 1:
        return f"{name} {idx[0]} (of {size})"
    if idx == list(range(idx[0], size)):
        return f"{plural} ≥ {idx[0]} (of {size})"
    if idx == list(range(idx[-1] + 1)):
        return f"{plural} < {idx[-1] + 1} (of {size})"
    if len(idx) == 2:
        return f"{plural} {idx[0]} and {idx[1]} (of {size})"
    return f"{plural} {_fmt_list(idx)} (of {size})"


def _along(mask: torch.Tensor, d: int) -> torch.Tensor:
    """The indices along dimension ``d`` where ``mask`` has any element set."""
    return torch.nonzero(mask.movedim(d, 0).reshape(mask.shape[d], -1).any(dim=1)).flatten()


#: the share of a wrong region (a slice, a suffix) that may lie within the tolerance by chance, the region still
#: counting as wrong throughout. Under bf16's tolerance (atol 0.01, rtol 0.016) a wrong value lands within it of the
#: right one about 2 tol / (σ √(2π)) of the time for values spread σ: 4 % for σ = 0.3, as lesson 06's attention
#: outputs are at T = 200. There, on an H100, batch 1 read through k's strides was right in 3.9 % of its elements (v;
#: 5.4 % from position 1 on for q), and the 1 % allowed before left the mistake unnamed. 1/8 leaves room for values
#: three times closer; a mistake that spares part of a region is told apart by where the right elements lie
#: (_scattered), not by their number.
BY_CHANCE = 1 / 8

#: a wrong suffix is named only if its right prefix is unlikelier than this by chance, each element right at the
#: suffix's own rate: lesson 04's fp16 arithmetic on fp32 rows was right in 6.7 % of its elements, and once in a CI run
#: the first three (0.067 ** 3, 3e-4) got "Only the last 2997 elements are wrong" for a precision mistake
PREFIX_BY_CHANCE = 1e-6

#: wrong in at most one element of this many, scattered (no row, column or tail), a result is told as wrong in a
#: few places, not many: a mistake of an edge or a special value, not of the formula
FEW = 100

#: fewer elements than this and a region is wrong throughout only if all of it is: in a slice of 8, one element
#: right is one eighth of it, not noise
CHANCE_FROM = 100


def _allowed(n: int, by_chance: float) -> int:
    """How many of a region's ``n`` elements may be right by chance (none in a region under CHANCE_FROM)."""
    return int(n * by_chance) if n >= CHANCE_FROM else 0


def _scattered(right: torch.Tensor, region: torch.Tensor) -> bool:
    """Whether the right elements (``right``) of a wrong ``region`` (both boolean, of the result's shape) lie as chance
    puts them: along every dimension, no index whose part of the region (16 elements or more) is more than half right.
    An index right throughout is a place the mistake spares (position 0 of a causal row is right whatever q is: one
    key, softmax = 1), so the region is not wrong throughout; at 1/8 right by chance, independently, 9 of 16 happen
    about once in 27,000. (Not smaller groups such as one head at one position: chance makes all of such a row right
    at once where one weight decides it, as at position 1 of a causal row, two keys.)"""
    right = right & region
    for e in range(region.dim()):
        n = region.movedim(e, 0).reshape(region.shape[e], -1).sum(dim=1)
        r = right.movedim(e, 0).reshape(region.shape[e], -1).sum(dim=1)
        if bool(((n >= 16) & (2 * r > n)).any()):
            return False
    return True


def _only_along(mask: torch.Tensor, by_chance: float = BY_CHANCE):
    """(d, indices) when ``mask`` is whole slices along one dimension d (set for some indices of d, whatever the
    other indices), leading dimensions first; None otherwise, or for fewer than 2 dimensions. Outside those slices
    nothing may be set; inside, a slice of CHANCE_FROM elements or more counts as whole with up to ``by_chance`` of
    it unset (:data:`BY_CHANCE` for wrong values, which can equal the right ones by chance), provided the unset
    elements lie scattered (see _scattered)."""
    if mask.dim() < 2:
        return None
    for d in range(mask.dim()):
        per = mask.movedim(d, 0).reshape(mask.shape[d], -1)
        count, n = per.sum(dim=1), per.shape[1]
        some, full = count > 0, count >= n - _allowed(n, by_chance)
        if not bool((some == full).all()) or bool(some.all()) or not bool(some.any()):
            continue
        claimed = torch.zeros_like(mask)
        claimed.movedim(d, 0)[some] = True
        if _scattered(~mask, claimed):
            return d, torch.nonzero(some).flatten()
    return None


def _right_by_chance(right: int, n: int, of: str = "of them") -> str:
    """' (but for 4.1 % of them, scattered: within the tolerance by chance)' when a region taken as wrong throughout
    has ``right`` of its ``n`` elements right; '' when it has none."""
    return f" (but for {100 * right / n:.2g} % {of}, scattered: within the tolerance by chance)" if right else ""


def _where(bad: torch.Tensor, shape, dims=None) -> str:
    flat = bad.reshape(-1)
    count = int(flat.sum())
    first = int(torch.nonzero(flat)[0])
    where = f"{count} of {flat.numel()} elements; the first at index {_index(first, shape)}"
    if len(shape) >= 2 or dims is not None:
        names = _names(shape, dims)
        where += "; " + "; ".join(_indices(_along(bad, d), shape[d], *names[d][:2]) for d in range(len(shape)))
    return where


# -- the classic mistakes ---------------------------------------------------------------------------------------


def _hint_unwritten(unwritten: torch.Tensor, shape, dims=None) -> str:
    flat = unwritten.reshape(-1)
    if bool(flat.all()):
        return (
            "Nothing was written. Either no program ran: the grid is empty (n // BLOCK_SIZE is 0 when n < "
            "BLOCK_SIZE; launch triton.cdiv(n, BLOCK_SIZE) programs, rounding up), or the kernel does not call "
            "tl.store on the output pointer, or the launcher returns another tensor than the one the kernel "
            "wrote (`return out`). (The skeleton's stub writes nothing.)"
        )
    names = _names(shape, dims)
    whole = _only_along(unwritten, by_chance=0.01)  # never written is told by bits: no chance, a little slack
    if whole is not None:
        d, idx = whole
        name, plural, axis = names[d]
        which = _indices(idx, shape[d], name, plural)
        if d == len(shape) - 1:
            return (
                f"Whole {plural} were never written ({which}): the blocks along the last dimension do not cover "
                f"it. Use triton.cdiv(N, BLOCK_N) column blocks, or a BLOCK_SIZE of triton.next_power_of_2(N) "
                f"for a row per program, and mask with cols < N."
            )
        return (
            f"Whole {plural} were never written ({which}): the grid has too few programs along {axis}, or "
            f"the program id is mapped to the wrong {name}. One program per {name} needs {shape[d]} programs "
            f"along {axis}, and each program must compute its {name} from tl.program_id (and the stride of "
            f"{axis}). (A kernel that treats the tensor as one flat array launches triton.cdiv(n, BLOCK_SIZE) "
            f"programs.)"
        )
    rows = _as_rows(unwritten)
    if len(shape) >= 3 and bool((rows.any(dim=1) == rows.all(dim=1)).all()):
        return (
            "Whole rows (along the last dimension) were never written: the grid has too few programs, or the "
            "program id is split into the leading indices the wrong way (check the grid's size and how each "
            "program computes its indices and offsets from tl.program_id)."
        )
    k = _is_suffix(flat)
    written = flat.numel() - k
    if k and written & (written - 1) == 0 and k >= written:
        # a grid rounded down leaves fewer elements unwritten than it wrote (less than one block); this is one
        # block of a power-of-two size with more missing after it than in it: the programs all wrote block 0
        return (
            f"Only the first {written} elements were written (one block, if BLOCK_SIZE is {written}) and the {k} "
            f"after them never were: either every program wrote block 0, or only one program ran. Each program's "
            f"offsets must start at pid * BLOCK_SIZE with pid = tl.program_id(axis=0), not tl.arange alone (the "
            f"launcher's grid is 1-D, so tl.program_id(1) is 0 in every program), the mask must compare them with "
            f"n (offsets < BLOCK_SIZE lets only block 0 through), and the grid must hold triton.cdiv(n, BLOCK_SIZE) "
            f"programs. (A grid rounded down would leave less than a block unwritten.)"
        )
    if k == 1:
        return (
            "The last element was never written: the mask is probably off by one (offsets < n - 1, or <= n - 2: "
            "the last valid offset is n - 1, so mask with offsets < n), or, where n is one more than a multiple of "
            "BLOCK_SIZE, the grid rounds down (launch triton.cdiv(n, BLOCK_SIZE) programs)."
        )
    if k and written % 16:  # a grid rounded down stops at a multiple of BLOCK_SIZE: no block of 16 or more ends here
        return (
            f"The last {k} elements were never written, from index {written} on, and no block of 16 or more "
            f"elements ends there (a grid of too few programs stops at a multiple of BLOCK_SIZE). Either the mask "
            f"stops too soon: mask with offsets < n itself, not n - 1, n - BLOCK_SIZE or n % BLOCK_SIZE (the last "
            f"valid offset is n - 1); or the programs' offsets do not step one whole block each: pid * BLOCK_SIZE + "
            f"tl.arange(0, BLOCK_SIZE)."
        )
    if k:
        return (
            f"The last {k} elements were never written: the programs do not reach the end of the array. Launch "
            f"triton.cdiv(n, BLOCK_SIZE) programs (rounding up), not n // BLOCK_SIZE, and give each program the "
            f"offsets pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)."
        )
    return (
        "Scattered elements were never written: the offsets skip elements. Offsets should be "
        "pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE), and the row offset should use the row's stride."
    )


def _hint_nan(nan: torch.Tensor, shape, from_nan_empty: bool) -> str:
    """Why a kernel computes NaN where the reference has a number."""
    rows = _as_rows(nan)
    flat_tail = _tail(nan.reshape(-1))
    col_tail = len(shape) >= 2 and _tail(rows.any(dim=0))
    if flat_tail or col_tail:
        hint = (
            "The NaN sit at the end (of the array, or of every row): values loaded past the end are garbage. "
            "Mask the load (mask=offsets < n) and give it an other= that is neutral for what follows "
            "(other=0.0 before a sum, other=-float('inf') before a max)."
        )
    elif len(shape) >= 2 and rows.shape[1] > 1 and bool((rows.any(dim=1) == rows.all(dim=1)).all()):
        hint = (
            "Whole rows are NaN: one NaN in a row's reduction spreads to the whole row. A row whose every entry "
            "is masked to -inf has max = -inf, so x - max is -inf - (-inf) = NaN and 0/0 follows: guard such "
            "rows. Or exp overflowed to inf in that row: subtract the row max before tl.exp."
        )
    else:
        hint = (
            "Usual causes: exp of a large value overflows to inf (fp32 beyond exp(88.7), fp16 beyond exp(11.1)) "
            "and inf/inf or inf - inf is NaN: subtract the row max before tl.exp; 0/0 in a row that is fully "
            "masked; a load past the end with no mask or no other= (garbage); sqrt or log of a negative number."
        )
    if not from_nan_empty:
        hint += (
            " (The output was not allocated by utils.nan_empty, so these may also be uninitialised memory that "
            "was never written.)"
        )
    return hint


def _hint_wrong(out64, ref64, bad, shape, out_dtype, dims=None, kind="kernel", rtol=0.0) -> str:
    flat_bad = bad.reshape(-1)
    names = _names(shape, dims)
    flat_tol = max(1e-3, 4 * rtol)  # how constant a ratio must be to call it one factor: a few roundings of out
    # swapped strides: a square result that equals the reference transposed
    if len(shape) == 2 and shape[0] == shape[1] and shape[0] > 1:
        if torch.allclose(out64, ref64.T, rtol=1e-2, atol=1e-2, equal_nan=True):
            return (
                "The result equals the reference transposed: the row and column strides are swapped "
                "(stride_xm belongs with the row index, stride_xn with the column index)."
            )
    overflow = torch.isinf(out64) & torch.isfinite(ref64)
    if bool(overflow.any()):
        return (
            f"{int(overflow.sum())} element(s) are ±inf where the reference is finite: an overflow. exp of a "
            f"large value (fp32 beyond exp(88.7), fp16 beyond exp(11.1)): subtract the max first; a division by "
            f"zero; or products summed in fp16 (largest value 65504): accumulate in fp32."
        )
    finite = torch.isfinite(out64) & torch.isfinite(ref64)
    usable = finite & (ref64.abs() > 1e-12)
    if out64.numel() >= 2 and bool(usable.all()):
        ratio = out64 / ref64
        spread = float(ratio.max() - ratio.min())
        f = float(ratio.mean())
        if spread < flat_tol * abs(f) and abs(f - 1) > flat_tol:
            return (
                f"The whole result is off by one constant factor, {f:.4g}: a scale is missing, wrong or applied "
                f"twice (for example attention's 1/sqrt(D), a norm's weight, an alpha, or a mean divided by "
                f"BLOCK_SIZE instead of N)" + (", or the sign is flipped." if abs(f + 1) < 1e-3 else ".")
            )
    if len(shape) >= 2:
        rows = _as_rows(bad)
        # every later row wrong in substance (most of its elements), not by an element or two at the edge
        if rows.shape[0] > 1 and not bool(rows[0].any()) and bool((rows[1:].float().mean(dim=1) > 0.5).all()):
            if len(shape) == 2:
                return (
                    "Row 0 is right but every later row is wrong: the row offset probably uses the wrong stride "
                    "(for example N or BLOCK_SIZE where the tensor's stride(0) belongs — a view of a wider "
                    "tensor has a row stride larger than N)."
                )
        cols = rows.any(dim=0)
        k = _tail(cols)
        if k and bool(rows[:, -k:].any(dim=1).all()):
            return (
                f"The last {k} columns are wrong in every row: the column tail is not masked, or masked loads "
                f"fill with the wrong value (use other=-inf before a max, other=0 before a sum)."
            )
        whole = _only_along(bad)
        if whole is not None and whole[0] < len(shape) - 1:
            d, idx = whole
            name, plural, axis = names[d]
            which = _indices(idx, shape[d], name, plural)
            are = "is" if len(idx) == 1 else "are"
            claimed = bad.movedim(d, 0)[idx]
            of = "of its elements" if len(idx) == 1 else "of their elements"
            entirely = "entirely" + _right_by_chance(int((~claimed).sum()), claimed.numel(), of)
            if int(idx[0]) > 0 and len(idx) == shape[d] - int(idx[0]):
                return (
                    f"Only {which} {are} wrong, {entirely}; {plural} below {int(idx[0])} are right. Whatever depends "
                    f"on the index along {axis} is wrong: the stride of {axis} (a view has a larger stride than "
                    f"its size; a stride of another tensor is right only at {name} 0: each tensor has its own), the "
                    f"mapping from program id to {name}, or a quantity that is zero at {name} 0 (a rotation angle's "
                    f"sign or pair convention, a causal mask's offset)."
                )
            return (
                f"Only {which} {are} wrong, {entirely}; the other {plural} are right. The offset or index along "
                f"{axis} is wrong for those: how the program id maps to a {name}, the stride of {axis}, or an "
                f"index shared between several (e.g. a key/value head serves a group of query heads: "
                f"kv_head = head // (H // KV), not head % KV)."
            )
    if len(shape) >= 2 and shape[-1] >= 2:
        o, r = _as_rows(out64), _as_rows(ref64)
        use = _as_rows(usable)
        if o.shape[0] > 1 and bool(use.all()):
            ratio = o / r
            spread = (ratio.max(dim=1).values - ratio.min(dim=1).values).abs().max()
            if float(spread) < flat_tol * float(ratio.abs().max()):
                return (
                    "Each row is off by its own constant factor: a per-row scale or normaliser is wrong (softmax's "
                    "sum, a norm's rsqrt(mean(x²) + eps)). Check which lanes enter the reduction: masked-off "
                    "lanes must add nothing (other=0 before a sum of squares; in a softmax, other=-inf so that "
                    "exp gives 0), and divide by the row length N, not BLOCK_SIZE."
                )
    start = int(torch.nonzero(flat_bad)[0]) if bool(flat_bad.any()) else 0
    suffix = flat_bad[start:]  # all wrong from the first wrong one on, but for values equal by chance, scattered
    right = int((~suffix).sum())
    if (
        len(shape) >= 2
        and start > 0
        and suffix.numel() > shape[-1]
        and right <= _allowed(suffix.numel(), BY_CHANCE)
        and (right / suffix.numel()) ** start < PREFIX_BY_CHANCE  # a right prefix too long to be chance's
        and _scattered(~bad, (torch.arange(flat_bad.numel()) >= start).reshape(shape))
    ):
        first = _index(start, shape)  # more than a row: an offset that goes wrong, not a tail block
        d = next(i for i, j in enumerate(first) if j > 0)
        name, plural, _ = names[d]
        return (
            f"Only the last {suffix.numel()} elements are wrong{_right_by_chance(right, suffix.numel())}, from index "
            f"{first} on ({name} {first[d]} onwards), and every element before them is right. A kernel over the "
            f"tensor as one flat array would leave its tail block unmasked; a kernel over its {plural} more likely "
            f"computes an offset that is right at {name} 0 and wrong later: a stride of another tensor (each tensor "
            f"has its own strides: check that every load and store uses its own tensor's), or an index taken from "
            f"the wrong program id."
        )
    k = _tail(flat_bad)
    if k:
        return (
            f"Only the last {k} elements are wrong: the tail block is not masked, or masked with the wrong "
            f"bound. Use mask = offsets < n on both tl.load and tl.store."
        )
    rel = float(torch.linalg.vector_norm(out64 - ref64) / torch.linalg.vector_norm(ref64).clamp_min(1e-30))
    # rounding errors of a 16-bit step stay within a few units of its last place, 2**-11 (fp16) or 2**-8 (bf16),
    # even summed over thousands of terms (they grow like sqrt(K)); a formula mistake is off by more
    close_enough = {torch.float16: 1e-2, torch.bfloat16: 5e-2}
    if out_dtype in close_enough and rel < close_enough[out_dtype]:
        return (
            f"The values are close but not close enough (relative error {rel:.1e}), across the whole result: "
            f"a precision problem. Accumulate in fp32 (tl.zeros(..., dtype=tl.float32)) and cast to "
            f"{dtype_name(out_dtype)} once, when storing."
        )
    most_bad = float(flat_bad.float().mean()) > 0.5
    if kind == "kernel" and out_dtype in (torch.float32, torch.float64) and 2**-14 <= rel < 1e-2 and most_bad:
        # most elements off by about what fp16 or bf16 rounding costs (2**-12 and 2**-9 relative on average)
        return (
            f"The values are close but not close enough (relative error {rel:.1e}) across most of the result: "
            f"about what fp16 or bf16 arithmetic gives (they keep 11 and 8 significant bits), though the result is "
            f"{dtype_name(out_dtype)}: a precision problem. Some step computes in 16 bits (a .to(tl.float16) after "
            f"the load, a 16-bit accumulator, exp or sum): compute in fp32 and cast once, when storing."
        )
    count = int(flat_bad.sum())
    if count * FEW <= flat_bad.numel():  # "many places" for 2 elements of 3000 sends a learner after the formula
        where = f"{count} scattered places" if count > 1 else "one place"
        return (
            f"Wrong values in only {where} of {flat_bad.numel()} (listed above), not in whole rows, columns or a "
            f"tail: the mistake spares almost every element. Look at what sets {'them' if count > 1 else 'it'} "
            f"apart: the place (a block's first or last lane, where two programs' tiles meet and both store, a row's "
            f"end) or the inputs there (zero, negative or large values: a special case of the formula)."
        )
    if kind == "python":
        return (
            "Wrong values in many places. Try the function on a tiny input (a few elements, a 2x3 matrix) and "
            "compare it with the reference by eye; check the formula, the indices and which input each step uses."
        )
    return (
        "Wrong values in many places. Run the kernel on a tiny input (a few elements, a 2x3 matrix) and compare "
        "it with the reference by eye; check the formula, the offsets and which pointer each load uses."
    )


class Scaled(NamedTuple):
    """A suspect whose values are ``scale`` times the answer's (a sum never divided by its count, say): check
    compares ``out / scale`` with ``ref / scale``, at the answer's own tolerance, where the same rounding errors,
    ``scale`` times larger in ``out``, would pass ``atol`` on the suspect's large values by chance only. ``scale``
    broadcasts against ``ref`` (``(rows, 1)`` for a factor per row)."""

    ref: object
    scale: object


def _as64(x):
    return torch.as_tensor(x).detach().to("cpu", torch.float64)


def _suspect(out64, suspects, rtol, atol, diagnose=None) -> str | None:
    """The hint of the suspected mistake whose reference ``out`` matches (of several, the closest, and of equally
    close ones the first), else diagnose's, if any. Two references this input cannot tell apart (within a tenth of
    the tolerance of each other everywhere: one mistake's result equals another's here, as alpha's base where no
    row's max moves) are equally close, whatever the output's own rounding favours: the first listed is named, and
    the others it cannot be told from follow it (at most two), since the input gives no ground to choose."""
    if callable(suspects):  # built only now, where out is wrong
        suspects = suspects()
    matched = []  # (hint, excess, want), in the order listed
    for hint, wrong_ref in (suspects or {}).items():
        scale = 1.0
        if isinstance(wrong_ref, Scaled):
            wrong_ref, scale = wrong_ref.ref, _as64(wrong_ref.scale)
        wrong64 = _as64(wrong_ref)
        if wrong64.shape != out64.shape:
            continue
        got, want = out64 / scale, wrong64 / scale
        if not bool(torch.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True).all()):
            continue
        # how much of the tolerance the worst element takes (NaN where both are NaN: matched, nothing taken)
        excess = float(((got - want).abs() / (atol + rtol * want.abs())).nan_to_num(0.0).max()) if got.numel() else 0.0
        matched.append((hint, excess, want))

    def alike(a, b):
        return a.shape == b.shape and bool(torch.isclose(a, b, rtol=rtol / 10, atol=atol / 10, equal_nan=True).all())

    best = None
    for hint, excess, want in matched:
        if best is None or (excess < best[1] and not alike(want, best[2])):
            best = (hint, excess, want)
    if best is None:
        return diagnose(out64) if diagnose is not None else None
    # the first listed of those the input cannot tell from the one found (best itself, where none comes before it)
    first = next(m for m in matched if alike(m[2], best[2]))
    tied = [hint for hint, _, want in matched if hint != first[0] and alike(want, first[2])]
    if not tied:
        return first[0]
    others = "\n".join(f"Or: {hint}" for hint in tied[:2])
    alike_here = "(This input gives the same result for another mistake, so it may be that one instead.)"
    return f"{first[0]}\n{alike_here}\n{others}"


def _described(value) -> str:
    """What a function returned, in a few words: its kind, and its length or shape."""
    if value is None:
        return "None: did it forget to `return`?"
    if isinstance(value, torch.Tensor):
        return f"one tensor of shape {tuple(value.shape)}"
    if isinstance(value, (tuple, list)):
        kinds = ", ".join(type(v).__name__ for v in value[:4]) + (", ..." if len(value) > 4 else "")
        return f"a {type(value).__name__} of {len(value)} ({kinds})"
    if isinstance(value, dict):
        return f"a dict of the keys {', '.join(map(repr, list(value)[:6]))}" + (", ..." if len(value) > 6 else "")
    return f"a {type(value).__name__}"


def returned(got, names, call):
    """``got``, what ``call`` (the function under check, or words for the call) returned, as a check unpacks it;
    AssertionError (naming what came back) if it is not. ``names`` a tuple of result names: a tuple or list of that
    many, returned as a tuple (``values, indices = utils.returned(fn(x), ("values", "indices"), fn)``). ``names`` a
    set of column names: a dict holding a tensor under each (a table), returned as it is. The results' dtypes and
    values are utils.check's to judge."""
    __tracebackhide__ = True
    call = call if isinstance(call, str) else getattr(call, "__name__", "fn")
    if isinstance(names, tuple):
        if isinstance(got, (tuple, list)) and len(got) == len(names):
            return tuple(got)
        want = f"{len(names)} results, ({', '.join(names)})"
    else:
        if isinstance(got, dict) and all(isinstance(got.get(c), torch.Tensor) for c in names):
            return got
        want = f"a table: a dict holding a tensor under each of {', '.join(map(repr, sorted(names)))}"
        if isinstance(got, dict):
            absent = sorted(c for c in names if not isinstance(got.get(c), torch.Tensor))
            want += f" ({', '.join(map(repr, absent))} {'is' if len(absent) == 1 else 'are'} not)"
    _raise(AssertionError(f"{call} should return {want}, but returned {_described(got)}."))


def launched_into(got, out, call, **inputs):
    """Raises AssertionError unless the launcher returned the `out` it was given and left every input (name=(the
    tensor, a copy taken before the call)) as it was: a launcher writes into out, and nowhere else."""
    __tracebackhide__ = True
    for name, (now, before) in inputs.items():
        if not torch.equal(now, before):
            raise AssertionError(
                f"{call} changed its input {name}: the kernel stored into {name}'s pointer. Store into out_ptr, the "
                f"pointer of the out the launcher was given, and pass out (not {name}) as that argument."
            )
    if got is not out:
        raise AssertionError(
            f"{call} must write into the out it is given and return it, but returned "
            f"{type(got).__name__}{'' if got is None else ' (another tensor)'}: launch the kernel on out and "
            f"`return out` (a caller that passes out=... reads its result there)."
        )


# -- the check --------------------------------------------------------------------------------------------------


def check(
    out,
    ref,
    *,
    atol: float | None = None,
    rtol: float | None = None,
    reason: str | None = None,
    dtype: torch.dtype | None = None,
    name: str = "output",
    quiet: bool = False,
    suspects=None,
    dims: tuple[str, ...] | None = None,
    kind: str = "kernel",
    empty_ok: bool = True,
    stray=None,
    diagnose=None,
) -> None:
    """Checks ``out`` against ``ref``; raises AssertionError that teaches, or prints one line on success.

    ``ref`` should be computed in higher precision (fp64, or fp32 for fp16/bf16 results). ``dtype`` is the dtype
    ``out`` must have (default: ``ref``'s unless ``ref`` is fp64 or fp32 and ``out`` is lower precision).
    ``atol``/``rtol`` default to the tolerance of ``out``'s dtype; pass ``reason`` with any other tolerance.

    ``suspects`` names the lesson's classic mistakes: ``{hint: the reference computed as if that mistake were made}``
    (e.g. ``{"the 1/sqrt(D) scale is missing": attention_ref(q, k, v, scale=1.0)}``). When ``out`` is wrong but
    matches one of them within the tolerance, that hint is the one given (of several, the closest); a suspect given
    as ``Scaled(wrong_ref, scale)`` is compared at the answer's scale (see Scaled). ``suspects`` may also be a
    function of no arguments that returns that dict: it is called only where ``out`` is wrong (suspects that cost
    more than the comparison, as attention's at a GPU's shapes, then cost a passing check nothing).
    ``diagnose(out)`` (``out`` in fp64 on the CPU) -> a hint or None names a mistake no whole reference can stand
    for (outputs that some programs overwrite and others never write, say); it is asked when no suspect matches,
    before the general hints.

    ``dims`` names the dimensions (``("batch", "position", "head", "dim")``) so that places are told as "heads 1
    and 2", "positions ≥ 1"; without it a 2-D result has rows and columns and others "dim d indices".
    ``kind="python"`` for a result computed by plain Python rather than a kernel (the general hint then says so).
    An empty ``out`` that matches an empty ``ref`` passes, saying that nothing was compared; pass
    ``empty_ok=False`` where an empty comparison can only be a mistake (a check's random shapes, say).
    """
    __tracebackhide__ = True  # IPython and pytest show the learner the message, not this function's source
    if kind not in KINDS:
        _raise(ValueError(f"check(kind={kind!r}): kind is one of {', '.join(KINDS)}"))
    if not isinstance(out, torch.Tensor):
        _raise(
            AssertionError(
                f"{name} should be a torch.Tensor but is {type(out).__name__}"
                + (" — did the launcher forget to `return out`?" if out is None else ".")
            )
        )
    try:
        ref = torch.as_tensor(ref)
    except (RuntimeError, TypeError, ValueError):
        _raise(
            TypeError(
                f"check(out, ref): ref must be the reference result, a torch.Tensor (or numbers torch.as_tensor "
                f"accepts), got {type(ref).__name__}: pass the tensor the reference function returned."
            )
        )
    if dims is not None:
        dims = tuple(dims)
        if len(dims) != ref.dim() or not all(isinstance(d, str) for d in dims):
            _raise(ValueError(f"check(dims={dims!r}): give one name per dimension of the reference {tuple(ref.shape)}"))
    from .mode import current

    env = current()
    if out.device.type != env.device:
        _raise(
            AssertionError(
                f"{name} is on {out.device.type} but the kernels here run on {env.device}: allocate "
                f"it on the inputs' device (torch.empty_like(x) or device=x.device)."
            )
        )
    if tuple(out.shape) != tuple(ref.shape):
        _raise(
            AssertionError(
                f"{name} has shape {tuple(out.shape)} but the reference has {tuple(ref.shape)}: check "
                f"how the launcher allocates the output."
            )
        )
    if dtype is not None:
        dtype = _as_dtype(dtype, "check(dtype=)")
    if dtype is not None and out.dtype != dtype:
        _raise(
            AssertionError(
                f"{name} has dtype {dtype_name(out.dtype)} but should be {dtype_name(dtype)}: allocate it with "
                f"dtype=torch.{dtype_name(dtype)} (and cast in the kernel with .to(out_ptr.dtype.element_ty) before "
                f"storing)."
            )
        )
    if (
        dtype is None
        and out.dtype != ref.dtype
        and not (
            out.dtype.is_floating_point and ref.dtype.is_floating_point and ref.element_size() > out.element_size()
        )
    ):
        _raise(
            AssertionError(f"{name} has dtype {dtype_name(out.dtype)} but the reference has {dtype_name(ref.dtype)}.")
        )

    if atol is None or rtol is None:
        tol = default_tolerance(out.dtype)
        atol = tol.atol if atol is None else atol
        rtol = tol.rtol if rtol is None else rtol
        reason = reason or tol.reason
    elif reason is None:
        _raise(TypeError("check(): a tolerance other than the default needs reason='why it is this size'"))

    shape = tuple(out.shape)
    if out.numel() == 0 and not empty_ok:
        _raise(
            AssertionError(
                f"{name} is empty (shape {shape}), so nothing was compared and this check cannot pass: the shapes "
                f"it was given have no elements."
            )
        )
    out64 = out.detach().to("cpu", torch.float64)
    ref64 = ref.detach().to("cpu", torch.float64)
    problems = []

    ref_nan = torch.isnan(ref64)
    unwritten = never_written(out) & ~ref_nan
    canaries = _canaries(out)
    if canaries is not None:
        clobbered = ~never_written(canaries)  # bits, not isnan: a store of NaN past the end counts too
        if bool(clobbered.any()):
            beyond = int(torch.nonzero(clobbered)[-1]) + 1
            if bool(unwritten.any()):
                hint = _MISPLACED_STORES
            elif beyond == 1:
                hint = (
                    "exactly one element too many was stored: a mask off by one (offsets <= n where offsets < n "
                    "belongs), or no mask at all where n falls one short of a whole block"
                )
            else:
                hint = (
                    "mask the stores, tl.store(ptr + offsets, value, mask=offsets < n), so the last block stops at "
                    "the end"
                )
            problems.append(
                f"The kernel wrote {int(clobbered.sum())} element(s) past the end of {name} (up to {beyond} elements "
                f"beyond it). Hint: {hint}."
            )

    computed_nan = torch.isnan(out64) & ~unwritten & ~ref_nan
    if bool(unwritten.any()):
        problems.append(
            f"{name} has elements that were never written (still the NaN they were allocated with): "
            f"{_where(unwritten, shape, dims)}.\n"
            f"Hint: {_suspect(out64, suspects, rtol, atol, diagnose) or _hint_unwritten(unwritten, shape, dims)}"
        )
    if bool(computed_nan.any()):
        hint = _suspect(out64, suspects, rtol, atol, diagnose) or _hint_nan(computed_nan, shape, canaries is not None)
        problems.append(
            f"{name} has NaN that the {'kernel' if kind == 'kernel' else 'code'} computed where the reference has "
            f"numbers: {_where(computed_nan, shape, dims)}.\nHint: {hint}"
        )
    values_wrong = bool(computed_nan.any())  # computed, not merely never written: what garbage read in would do
    if not bool(unwritten.any() or computed_nan.any()):  # NaN first: their hints are sharper than the values'
        close = torch.isclose(out64, ref64, rtol=rtol, atol=atol, equal_nan=True)
        bad = ~close
        values_wrong = bool(bad.any())
        if bool(bad.any()):
            hint = _suspect(out64, suspects, rtol, atol, diagnose) or _hint_wrong(
                out64, ref64, bad, shape, out.dtype, dims, kind, rtol
            )
            diff = (out64 - ref64).abs().masked_fill(~bad, 0)
            worst = int(torch.argmax(diff.reshape(-1)))
            wi = _index(worst, shape)
            got, want = _distinct(out64.reshape(-1)[worst].item(), ref64.reshape(-1)[worst].item())
            problems.append(
                f"{name} differs from the reference: {_where(bad, shape, dims)}.\n"
                f"Worst at index {wi}: got {got}, expected {want} (tolerance atol={atol:g}, rtol={rtol:g}: "
                f"{reason}).\nHint: {hint}"
            )
        elif out.dtype.is_floating_point and not bool(out64.any()):
            # all zeros passed: wrong when the reference holds values out's dtype keeps (not ones that underflow to
            # 0) and large enough to mean something (not fp64's rounding noise around a zero), yet within atol
            largest = float(ref64.nan_to_num(0.0, 0.0, 0.0).abs().max()) if ref64.numel() else 0.0
            if largest >= max(torch.finfo(out.dtype).tiny, atol / 100):
                values_wrong = True
                problems.append(
                    f"{name} is all zeros, but the reference is not (its largest value is {largest:.3g}): each element "
                    f"passed only because the reference's values all lie within atol={atol:g} of 0.\nHint: nothing "
                    f"was stored (an empty grid, no tl.store, or a launcher that returns a torch.zeros tensor it never "
                    f"passed to the kernel), or the kernel stores zeros. (Where zeros are right, atol is too large for "
                    f"values this small: scale it to them.)"
                )
    if stray:
        reads = [s for s in stray if getattr(s, "access", "") == "reads"]
        if reads and values_wrong:  # garbage read out there is the likely source of the wrong values: say it first
            rest = [s for s in stray if s not in reads]
            problems.insert(0, _garbage_problem(name, reads))
            if rest:
                problems.append(_stray_problem(name, rest, right=False, misplaced=bool(unwritten.any())))
        else:
            problems.append(_stray_problem(name, stray, right=not problems, misplaced=bool(unwritten.any())))
    if problems:
        _raise(AssertionError("\n".join(problems)))
    if not quiet:
        if out.numel() == 0:
            print(f"✓ {name} is empty (shape {shape}), as the reference is: nothing to compare.")
        else:
            print(
                f"✓ {name} matches the reference: shape {shape}, {dtype_name(out.dtype)}, "
                f"atol={atol:g}, rtol={rtol:g} ({reason})."
            )


def _distinct(got: float, want: float) -> tuple[str, str]:
    """The two numbers with 6 significant digits, or with as many more as it takes to tell them apart (up to 17:
    every float64 distinct): "got -305.75, expected -305.75" says nothing."""
    for digits in (6, 9, 12, 17):
        a, b = f"{got:.{digits}g}", f"{want:.{digits}g}"
        if a != b:
            break
    return a, b


#: the hint for stores that went past the end of an output while elements inside it were never written
_MISPLACED_STORES = (
    "elements inside were never written while others landed outside: the stores went to the wrong places. The "
    "store's offsets are the likelier mistake (a stride or a size of another tensor, rows or heads counted with the "
    "wrong size, a program's start) rather than only its mask: a mask would stop the stray writes but not bring the "
    "missing ones back"
)


#: what a read past the end means when its loads are masked already: the mask is right, the place or the count is not
_OFFSETS_OR_COUNT = (
    "If the loads are masked already, the offsets or the loop's count are the likelier mistake: an offset built "
    "from another size (bytes for elements, a stride of another tensor) or a loop of too many steps reads past the "
    "end too, and a mask would only hide it."
)


def _stray_problem(name: str, stray, right: bool, misplaced: bool = False) -> str:
    """The paragraphs for accesses outside every tensor of their launch (utils.memcheck.Stray or plain lines) and
    for elements two programs wrote differently (utils.memcheck.Race); ``misplaced``: elements of the output were
    never written, so stray writes point at the store's offsets rather than its mask."""
    items = list(stray)
    races = [s for s in items if getattr(s, "access", "") == "overwrites"]
    strays = [s for s in items if s not in races]
    paragraphs = [_outside_problem(name, strays, right, misplaced)] if strays else []
    if races:
        lead = f"{name} is right here, but" if right and not strays else "Also,"
        paragraphs.append(
            f"{lead} two programs of one launch write different values into the same elements (checked under the "
            f"interpreter, which runs the programs one after another: the last one's values are what you see):\n- "
            + "\n- ".join(map(str, races))
            + "\nHint: on a GPU the programs run at the same time and either may win, so the result changes from "
            "run to run. Give every output element one owner: look at which rows or columns each program's mask "
            "lets it store (a mask that lets a program spill into its neighbour's tile, an index off by one)."
        )
    return "\n".join(paragraphs)


def _garbage_problem(name: str, reads: list) -> str:
    """The paragraph that leads when a kernel read outside its tensors and its result is wrong or NaN."""
    return (
        f"The kernel reads memory outside the tensors it was given (checked lane by lane under the interpreter), "
        f"the likely cause of what is wrong in {name} below: the values out there are garbage (NaN, huge numbers, "
        f"another tensor's data), and one of them in a sum spoils the whole row:\n- "
        + "\n- ".join(map(str, reads))
        + "\nHint: mask every tl.load so that it stops at the end of its own tensor (offsets < n; in a K loop, "
        "offs_k < K - k * BLOCK_K at step k; a position or split end clamped to the sequence's length), with "
        f"other=0 before a sum. {_OFFSETS_OR_COUNT} Fix this first; the rest of this report may then go away.\n"
        "What the comparison found:"
    )


def _outside_problem(name: str, strays: list, right: bool, misplaced: bool = False) -> str:
    accesses = {getattr(s, "access", "") for s in strays}
    if misplaced and accesses != {"reads"}:
        hint = f"in {name}, {_MISPLACED_STORES}."
    elif accesses == {"reads"}:
        hint = (
            "a tl.load needs a mask that stops at the end of its own tensor (offsets < n; in a K loop, "
            "offs_k < K - k * BLOCK_K at step k). "
            + (
                f"The values read out there never reached {name} (the store is masked), so no comparison of "
                "outputs can see this; "
                if right
                else ""
            )
            + ("on" if right else "On")
            + " a GPU such a load reads memory that belongs to something else, or stops the program with an "
            f"illegal memory access. {_OFFSETS_OR_COUNT}"
        )
    else:
        hint = (
            "every tl.store (and atomic) needs a mask that keeps it inside its own tensor: a write out there "
            "changes memory that belongs to something else (another tensor, the allocator's bookkeeping). If the "
            "stores are masked already, their offsets are the likelier mistake: a stride of another tensor, or two "
            "strides swapped (each index times its own dimension's stride), sends a masked store out of its tensor "
            "too."
        )
    lead = (
        f"{name} is right, but the kernel touches memory outside the tensors it was given"
        if right
        else "The kernel also touches memory outside the tensors it was given"
    )
    return (
        f"{lead} (checked lane by lane under the interpreter):\n- " + "\n- ".join(map(str, strays)) + f"\nHint: {hint}"
    )


def refuses(calls: dict, *, errors=(ValueError, TypeError), quiet: bool = False) -> None:
    """Each of ``calls`` (``{"what is wrong": lambda: launcher(bad input)}``) must raise one of ``errors``.

    Prints what each refusal said (a learner reads whether the message helps); raises AssertionError naming every
    bad input that was accepted, or that failed with another kind of error (a crash inside Triton is no refusal).
    """
    __tracebackhide__ = True
    if not calls:
        _raise(ValueError("refuses() needs at least one call to try"))
    problems = []
    for what, call in calls.items():
        try:
            call()
        except errors as e:
            if not quiet:
                print(f"✓ refuses {what}: {e}")
        except Exception as e:  # noqa: BLE001 - any other failure is reported, not raised
            problems.append(
                f"{what}: failed with {type(e).__name__} ({e}) instead of a clear "
                f"{' or '.join(x.__name__ for x in errors)} raised by the launcher before any launch"
            )
        else:
            problems.append(
                f"{what}: accepted. Validate the inputs in the launcher (utils.require) and raise a "
                f"ValueError or TypeError that says how to fix them"
            )
    if problems:
        _raise(AssertionError("bad inputs that were not refused:\n- " + "\n- ".join(problems)))


# -- launcher input validation ----------------------------------------------------------------------------------


def require(
    t, name: str, *, dtype=None, ndim: int | None = None, shape=None, contiguous: bool = True, grad: bool = False
) -> None:
    """Raises a ValueError/TypeError that says how to fix a launcher input; does nothing when it is fine.

    ``dtype`` is one dtype or a tuple of accepted dtypes (torch dtypes, or their names such as "float32");
    ``shape`` may hold None for "any size". A tensor that requires grad is refused while autograd records (outside
    ``torch.no_grad()``) unless ``grad`` says the launcher gives it a gradient (lesson 11's autograd Functions): a
    kernel's output has no graph, so a forward-only launcher would cut the input off from its gradient without a
    word (an error at ``backward()`` at best; in a graph with other paths, a gradient short by this one).
    """
    __tracebackhide__ = True
    # launchers call this on every launch: the common path costs a few attribute reads, the messages only on failure
    if not isinstance(t, torch.Tensor):
        _raise(TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}."))
    if t.layout != torch.strided:  # a sparse tensor's values are not where a kernel's offsets would read them
        _raise(TypeError(f"{name} is a {t.layout} tensor, but the kernels read dense memory: pass {name}.to_dense()."))
    if t.is_neg():  # a lazy negation (a view whose values PyTorch negates on read): a kernel reads them unnegated
        _raise(ValueError(f"{name} is a negated view whose memory holds -{name}: pass {name}.resolve_neg() (a copy)."))
    env = current()
    want = env.device
    if t.device.type != want:
        fix = f"{name}.cuda()" if want == "cuda" else f"{name}.cpu()"
        _raise(
            ValueError(
                f"{name} is on {t.device.type}, but the kernels run on {want}: move it with {fix} "
                f"(or create it with device='{want}')."
            )
        )
    if env.interpret and t.dtype == torch.bfloat16:
        _raise(
            TypeError(
                f"{name} is bfloat16, which Triton's interpreter does not support (its results would be silently "
                f"wrong): use {name}.half() or {name}.float() on the CPU; bfloat16 works on a GPU."
            )
        )
    if dtype is not None and not (t.dtype is dtype or (isinstance(dtype, tuple) and t.dtype in dtype)):
        ok = []  # a loop, not a generator: a generator's frame would show in the traceback
        for d in dtype if isinstance(dtype, tuple) else (dtype,):
            ok.append(_as_dtype(d, f"require(dtype=) for {name}"))
        if t.dtype not in ok:
            names = " or ".join(dtype_name(d) for d in ok)
            # the fix names a dtype of the same kind where one is taken: fp16 values to float32, not to int32
            fix = next((d for d in ok if d.is_floating_point == t.dtype.is_floating_point), ok[0])
            _raise(
                TypeError(
                    f"{name} has dtype {dtype_name(t.dtype)}, but this kernel takes {names}: "
                    f"convert it with {name}.to(torch.{dtype_name(fix)})."
                )
            )
    if t.requires_grad and not grad and torch.is_grad_enabled():
        _raise(
            ValueError(
                f"{name} requires grad, but this launcher has no backward pass: its output would carry no gradient "
                f"back to {name}, and autograd would skip it without a word. Call it inside `with torch.no_grad():` "
                f"(or pass {name}.detach()); lesson 11 writes kernels with a backward pass."
            )
        )
    if ndim is not None and t.dim() != ndim:
        _raise(ValueError(f"{name} must have {ndim} dimension(s) but has shape {tuple(t.shape)}."))
    if shape is not None:
        if len(shape) != t.dim() or any(s is not None and s != ts for s, ts in zip(shape, t.shape)):
            want_s = (
                "(" + ", ".join("*" if s is None else str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"
            )
            _raise(ValueError(f"{name} has shape {tuple(t.shape)} but must be {want_s}."))
    if contiguous and not t.is_contiguous():
        _raise(
            ValueError(
                f"{name} is a non-contiguous view (shape {tuple(t.shape)}, strides {t.stride()}): call "
                f"{name}.contiguous() first."
            )
        )


def require_same_shape(a, b, names=("x", "y")) -> None:
    """Raises ValueError when two inputs that must match element for element do not."""
    __tracebackhide__ = True
    if tuple(a.shape) != tuple(b.shape):
        _raise(
            ValueError(
                f"{names[0]} has shape {tuple(a.shape)} but {names[1]} has shape {tuple(b.shape)}; "
                f"they must match (this kernel does not broadcast)."
            )
        )


def _span(t: torch.Tensor) -> tuple[int, int]:
    """The byte range [start, end) of memory that ``t`` can touch."""
    start, n = t.data_ptr(), t.numel()
    if n == 0:
        return start, start
    if t.is_contiguous():
        return start, start + n * t.element_size()
    last = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()) if stride > 0)
    return start, start + (last + 1) * t.element_size()


def _spans_overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    """Whether two byte ranges [start, end) share a byte (an empty range shares none)."""
    return a[0] < a[1] and b[0] < b[1] and a[0] < b[1] and b[0] < a[1]


def overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    """True when the memory ``a`` may touch overlaps the memory ``b`` may touch (aliasing views included)."""
    return a.device == b.device and _spans_overlap(_span(a), _span(b))


def require_out(out, *, shape, dtype, device, inputs: dict | None = None, name: str = "out") -> torch.Tensor:
    """The output a launcher writes into: ``out`` after checking it, or a new tensor when ``out`` is None.

    A given ``out`` must be a contiguous torch.Tensor of exactly ``shape``, ``dtype`` and ``device`` that shares no
    memory with any of ``inputs`` (``{"x": x, ...}``): a kernel that reads an input while it writes over it returns
    a wrong result without a word, and one that writes into a smaller buffer corrupts whatever lies after it. An out
    that requires grad is refused while autograd records, as PyTorch's out= ops refuse it.
    """
    __tracebackhide__ = True
    if not isinstance(dtype, torch.dtype):
        dtype = _as_dtype(dtype, f"require_out(dtype=) for {name}")
    if out is None:
        return torch.empty(shape, dtype=dtype, device=device)
    shape = tuple(int(s) for s in shape)
    device = torch.device(device)
    if not isinstance(out, torch.Tensor):
        _raise(
            TypeError(
                f"{name} must be a torch.Tensor (or None to allocate one), got {type(out).__name__}: pass "
                f"torch.empty({shape}, dtype=torch.{dtype_name(dtype)}, device='{device.type}')."
            )
        )
    if out.layout != torch.strided or out.is_neg():  # written as dense memory: read back other values, or none
        _raise(
            ValueError(
                f"{name} is a {'negated view' if out.is_neg() else f'{out.layout} tensor'}, but the kernel writes "
                f"dense memory: pass torch.empty({shape}, dtype=torch.{dtype_name(dtype)}, device='{device.type}')."
            )
        )
    if out.device.type != device.type:
        _raise(ValueError(f"{name} is on {out.device.type}, but the inputs are on {device.type}: allocate it there."))
    if out.dtype != dtype:
        _raise(
            TypeError(
                f"{name} has dtype {dtype_name(out.dtype)}, but this launcher writes {dtype_name(dtype)}: allocate "
                f"it with dtype=torch.{dtype_name(dtype)}."
            )
        )
    if tuple(out.shape) != shape:
        _raise(ValueError(f"{name} has shape {tuple(out.shape)}, but the result has shape {shape}."))
    if out.requires_grad and torch.is_grad_enabled():  # as PyTorch's out= ops refuse it
        _raise(
            ValueError(
                f"{name} requires grad, but the kernel writes into it outside autograd: what it holds would have no "
                f"graph, and backward() would stop there without a word (PyTorch's out= ops refuse it too). Pass an "
                f"{name} that does not require grad ({name}.detach(), or None to allocate one), or call the launcher "
                f"inside `with torch.no_grad():`."
            )
        )
    if not out.is_contiguous():
        _raise(
            ValueError(
                f"{name} is a non-contiguous view (strides {out.stride()}): the kernel writes a contiguous block, so "
                f"pass a contiguous tensor (torch.empty_like(...)) and copy from it afterwards."
            )
        )
    span = _span(out)  # once, not once per input: launchers call this on every launch
    for what, t in (inputs or {}).items():
        if isinstance(t, torch.Tensor) and t.device == out.device and _spans_overlap(span, _span(t)):
            _raise(
                ValueError(
                    f"{name} shares memory with the input {what}: the kernel would overwrite {what} while still "
                    f"reading it. Pass a separate output (or out=None)."
                )
            )
    return out


#: the most elements one block may hold: Triton refuses a tl.arange or tensor of more (TRITON_MAX_TENSOR_NUMEL)
MAX_BLOCK = 2**20

#: the most warps a program may have: 32 warps of 32 threads, the 1024 threads a CUDA block holds at most
MAX_NUM_WARPS = 32


def require_power_of_two(value, name: str, *, maximum: int = MAX_BLOCK) -> None:
    """Block sizes: a positive power of two (tl.arange needs one), given as a Python int, at most ``maximum``
    (default :data:`MAX_BLOCK`, the largest block Triton takes; a launcher may state a smaller one)."""
    __tracebackhide__ = True
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0 or value & (value - 1):
        _refuse_a_tensor(value, name, "a positive power of two given as a Python int")
        if _whole_power_of_two(value):  # np.int64(16) or 16.0: the right number, but not the Python int Triton takes
            _raise(
                ValueError(
                    f"{name} must be a positive power of two given as a Python int, got {value!r}: pass "
                    f"{name}={int(value)} (int(...) converts it)."
                )
            )
        _raise(
            ValueError(
                f"{name} must be a positive power of two (tl.arange needs one), got {value!r}: try "
                f"triton.next_power_of_2(...)."
            )
        )
    if value > maximum:
        limit = "the largest block Triton takes" if maximum == MAX_BLOCK else "this launch takes"
        _raise(ValueError(f"{name}={value} is more than {limit} (at most {maximum}): pass a smaller one."))


def _refuse_a_tensor(value, name: str, want: str, error=ValueError) -> None:
    """A number held in a tensor where a Python number is wanted (a block size, an eps): told with its fix, .item()
    (a one-element tensor read on the host), rather than as a wrong number."""
    __tracebackhide__ = True
    if isinstance(value, torch.Tensor):
        fix = f"pass {name}=t.item() (a number read on the host)" if value.numel() == 1 else "pass one number"
        _raise(error(f"{name} must be {want}, got a tensor of shape {tuple(value.shape)} ({value.dtype}): {fix}."))


def _whole_power_of_two(value) -> bool:
    """Whether ``value`` is a power of two held in something other than a Python int (a NumPy integer, a float)."""
    import numbers

    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not float(value).is_integer():
        return False
    whole = int(value)
    return whole > 0 and not whole & (whole - 1)


def require_tile(name: str, *sizes: int, maximum: int = MAX_BLOCK) -> None:
    """A tile made of several block sizes (BLOCK_N rows of W by BLOCK_K columns, an accumulator BLOCK_M x
    BLOCK_N): each passed require_power_of_two alone, their product must be at most ``maximum`` elements too (default
    :data:`MAX_BLOCK`), or Triton refuses the tile mid-compile."""
    __tracebackhide__ = True
    numel = 1
    for size in sizes:
        numel *= size
    if numel > maximum:
        _raise(
            ValueError(
                f"{name} holds {' x '.join(map(str, sizes))} = {numel} elements, more than one block takes (at most "
                f"{maximum}): pass smaller blocks."
            )
        )


#: the most programs a grid's axis 1 or 2 takes (axis 0 takes 2**31 - 1)
MAX_GRID_YZ = 65535


def require_launch_options(*, num_warps=None, num_stages=None) -> None:
    """A launch's ``num_warps`` (a power of two from 1 to :data:`MAX_NUM_WARPS`) and ``num_stages`` (a positive
    int), each given as a Python int; None (not given, or "let the launcher choose") is not checked. Checked here,
    not by ``x in (1, 2, 4, ...)``, which lets True and 4.0 through to Triton."""
    __tracebackhide__ = True
    if num_warps is not None:
        warps_ok = isinstance(num_warps, int) and not isinstance(num_warps, bool) and num_warps > 0
        if not warps_ok or num_warps & (num_warps - 1):
            _raise(
                ValueError(
                    f"num_warps must be a power of two from 1 to {MAX_NUM_WARPS} (1, 2, 4, 8, 16 or 32), given as "
                    f"an int, got {num_warps!r}."
                )
            )
        if num_warps > MAX_NUM_WARPS:
            _raise(
                ValueError(
                    f"num_warps={num_warps} is more than a program may have (at most {MAX_NUM_WARPS} warps: 1024 "
                    f"threads): pass {MAX_NUM_WARPS} or fewer."
                )
            )
    if num_stages is not None and (isinstance(num_stages, bool) or not isinstance(num_stages, int) or num_stages < 1):
        _raise(ValueError(f"num_stages must be a positive int (1, 2, 3, ...), got {num_stages!r}."))


def as_int(value):
    """value as a Python int where it is an integer of another type (NumPy's: a pandas column's max() + 1, an
    array's element), so that a launcher's own checks take it as they take an int; anything else (a bool, a float,
    None, a tensor) comes back as it is, for those checks to refuse."""
    import numbers

    if isinstance(value, numbers.Integral) and not isinstance(value, (bool, int)):
        return int(value)
    return value


def require_int(value, name: str, least: int = 1) -> int:
    """A Python or NumPy integer (not a bool, not a float such as 10.5) of at least ``least``: returned as an int."""
    __tracebackhide__ = True
    whole = as_int(value)
    if isinstance(whole, bool) or not isinstance(whole, int) or whole < least:
        want = "a positive int" if least == 1 else f"an int >= {least}"
        _refuse_a_tensor(value, name, want)
        _raise(ValueError(f"{name} must be {want}, got {value!r}"))
    return whole


def require_bool(value, name: str, what: str = "") -> bool:
    """A flag given as True or False (or a NumPy bool): returned as a bool. Anything else is refused, not taken for
    its truth: kernels="no", swiglu=0.5 or a one-element tensor would switch a path on or off silently. ``what``:
    what False (or True) means, told in the message."""
    __tracebackhide__ = True
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    _raise(TypeError(f"{name} must be True or False{f' ({what})' if what else ''}, got {value!r}."))


def require_number(value, name: str, *, positive: bool = False) -> float:
    """A finite Python or NumPy real number (``eps``, ``alpha``): returned as a float."""
    __tracebackhide__ = True
    import numbers

    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        _refuse_a_tensor(value, name, "a real number", TypeError)
        _raise(TypeError(f"{name} must be a real number, got {type(value).__name__} {value!r}."))
    value = float(value)
    if value != value or value in (float("inf"), float("-inf")):
        _raise(ValueError(f"{name} must be finite, got {value}."))
    if positive and value <= 0:
        _raise(ValueError(f"{name} must be positive, got {value}."))
    return value


#: the number of elements a kernel with 32-bit offsets can address
INT32_LIMIT = 2**31


def require_int32_offsets(t: torch.Tensor, name: str) -> None:
    """For kernels that compute 32-bit offsets: refuse a tensor whose last element lies at 2**31 or beyond."""
    __tracebackhide__ = True
    if t.numel() < INT32_LIMIT and t.is_contiguous():
        return  # the common case, decided without Python arithmetic over the shape
    if t.numel() and _span(t)[1] - t.data_ptr() > INT32_LIMIT * t.element_size():
        _raise(
            ValueError(
                f"{name} spans {(_span(t)[1] - t.data_ptr()) // t.element_size()} elements, but this kernel computes "
                f"32-bit offsets, which reach fewer than 2**31: split {name} into parts, or use int64 offsets "
                f"(offsets.to(tl.int64)) in the kernel."
            )
        )
