"""Checking a learner's result against a reference, with feedback that says where it is wrong and probably why.

Three tools:

* :func:`nan_empty` / :func:`nan_like` allocate outputs pre-filled with NaN, followed by a hidden run of NaN
  "canaries". An element the kernel never wrote stays NaN; a store past the end overwrites a canary. Both are
  reported by :func:`check`.
* :func:`check` compares with a reference computed in higher precision, using a tolerance per dtype with the reason
  for it, and on failure raises ``AssertionError`` with what is wrong, where, and a hint for the classic mistakes.
* :func:`require` validates a launcher's inputs and raises a ``ValueError``/``TypeError`` saying how to fix them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .mode import dtype_name

#: elements of hidden NaN canaries after every buffer made by nan_empty (one big block of the largest BLOCK_SIZE)
GUARD = 8192


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
    torch.int32: Tolerance(0, 0, "integers are exact"),
    torch.int64: Tolerance(0, 0, "integers are exact"),
}


def default_tolerance(dtype: torch.dtype) -> Tolerance:
    if dtype not in TOLERANCES:
        raise TypeError(f"no default tolerance for {dtype}; pass atol=, rtol= and reason=")
    return TOLERANCES[dtype]


# -- allocation -------------------------------------------------------------------------------------------------


def nan_empty(shape, dtype=torch.float32, device=None) -> torch.Tensor:
    """A contiguous tensor of ``shape`` full of NaN, followed in memory by :data:`GUARD` NaN canaries."""
    if device is None:
        from .mode import current

        device = current().device
    shape = tuple(shape) if not isinstance(shape, int) else (shape,)
    numel = 1
    for s in shape:
        numel *= s
    buf = torch.full((numel + GUARD,), float("nan"), dtype=dtype, device=device)
    return buf[:numel].view(shape)


def nan_like(t: torch.Tensor, dtype=None) -> torch.Tensor:
    """:func:`nan_empty` with the shape, dtype and device of ``t``."""
    return nan_empty(t.shape, dtype or t.dtype, t.device)


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


def _where(bad: torch.Tensor, shape) -> str:
    flat = bad.reshape(-1)
    count = int(flat.sum())
    first = int(torch.nonzero(flat)[0])
    where = f"{count} of {flat.numel()} elements; the first at index {_index(first, shape)}"
    if len(shape) >= 2:
        rows = torch.nonzero(_as_rows(bad).any(dim=1)).flatten()
        cols = torch.nonzero(_as_rows(bad).any(dim=0)).flatten()
        n_rows, n_cols = _as_rows(bad).shape
        where += (
            f"; rows {_fmt_list(rows)} ({len(rows)} of {n_rows} rows)"
            f"; columns {_fmt_list(cols)} ({len(cols)} of {n_cols} columns)"
        )
    return where


# -- the classic mistakes ---------------------------------------------------------------------------------------


def _hint_unwritten(unwritten: torch.Tensor, shape) -> str:
    flat = unwritten.reshape(-1)
    if bool(flat.all()):
        return (
            "Nothing was written. Does the kernel call tl.store on the output pointer, and does the launcher "
            "pass the output tensor it returns? (The skeleton's stub writes nothing.)"
        )
    k = _is_suffix(flat)
    if k:
        return (
            f"The last {k} elements were never written: the programs do not reach the end of the array. Launch "
            f"triton.cdiv(n, BLOCK_SIZE) programs (rounding up), not n // BLOCK_SIZE, and give each program the "
            f"offsets pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)."
        )
    if len(shape) >= 2:
        rows = _as_rows(unwritten)
        full_rows = rows.all(dim=1)
        if bool((rows.any(dim=1) == full_rows).all()):
            return (
                "Whole rows were never written: the grid has too few programs along the rows, or program_id "
                "is mapped to the wrong row."
            )
        full_cols = rows.all(dim=0)
        if bool((rows.any(dim=0) == full_cols).all()):
            return (
                "Whole columns were never written: the column blocks do not cover N. Use triton.cdiv(N, "
                "BLOCK_N) column blocks, or a BLOCK_SIZE of triton.next_power_of_2(N) for a row per program."
            )
    return (
        "Scattered elements were never written: the offsets skip elements. Offsets should be "
        "pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE), and the row offset should use the row's stride."
    )


def _hint_wrong(out64, ref64, bad, shape, out_dtype) -> str:
    flat_bad = bad.reshape(-1)
    # swapped strides: a square result that equals the reference transposed
    if len(shape) == 2 and shape[0] == shape[1] and shape[0] > 1:
        if torch.allclose(out64, ref64.T, rtol=1e-2, atol=1e-2, equal_nan=True):
            return (
                "The result equals the reference transposed: the row and column strides are swapped "
                "(stride_xm belongs with the row index, stride_xn with the column index)."
            )
    if len(shape) >= 2:
        rows = _as_rows(bad)
        if rows.shape[0] > 1 and not bool(rows[0].any()) and bool(rows[1:].any(dim=1).all()):
            return (
                "Row 0 is right but every later row is wrong: the row offset probably uses the wrong stride "
                "(for example N or BLOCK_SIZE where the tensor's stride(0) belongs — a view of a wider "
                "tensor has a row stride larger than N)."
            )
        cols = rows.any(dim=0)
        k = _is_suffix(cols)
        if k and bool(rows[:, -k:].any(dim=1).all()):
            return (
                f"The last {k} columns are wrong in every row: the column tail is not masked, or masked loads "
                f"fill with the wrong value (use other=-inf before a max, other=0 before a sum)."
            )
    if len(shape) >= 2:
        o, r = _as_rows(out64), _as_rows(ref64)
        ratio = o / r
        usable = r.abs() > 1e-12
        if bool(usable.all(dim=1).all()):
            spread = (ratio.max(dim=1).values - ratio.min(dim=1).values).abs().max()
            if float(spread) < 1e-3 * float(ratio.abs().max()):
                return (
                    "Each row is off by a constant factor: the normaliser (a row sum) is wrong. If masked-off "
                    "lanes are loaded with other=0, exp(0 - max) adds to the sum: load them with other=-inf "
                    "(exp(-inf) = 0), or sum with the mask applied."
                )
    k = _is_suffix(flat_bad)
    if k:
        return (
            f"Only the last {k} elements are wrong: the tail block is not masked, or masked with the wrong "
            f"bound. Use mask = offsets < n on both tl.load and tl.store."
        )
    rel = float(torch.linalg.vector_norm(out64 - ref64) / torch.linalg.vector_norm(ref64).clamp_min(1e-30))
    if out_dtype in (torch.float16, torch.bfloat16) and rel < 5e-2:
        return (
            f"The values are close but not close enough (relative error {rel:.1e}), across the whole result: "
            f"a precision problem. Accumulate in fp32 (tl.zeros(..., dtype=tl.float32)) and cast to "
            f"{dtype_name(out_dtype)} once, when storing."
        )
    return (
        "Wrong values in many places. Run the kernel on a tiny input (a few elements, a 2x3 matrix) and compare "
        "it with the reference by eye; check the formula, the offsets and which pointer each load uses."
    )


def _suspect(out64, suspects, rtol, atol) -> str | None:
    """The hint of the first suspected mistake whose reference ``out`` matches, if any."""
    for hint, wrong_ref in (suspects or {}).items():
        wrong64 = torch.as_tensor(wrong_ref).detach().to("cpu", torch.float64)
        if wrong64.shape == out64.shape and bool(
            torch.isclose(out64, wrong64, rtol=rtol, atol=atol, equal_nan=True).all()
        ):
            return hint
    return None


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
    suspects: dict | None = None,
) -> None:
    """Checks ``out`` against ``ref``; raises AssertionError that teaches, or prints one line on success.

    ``ref`` should be computed in higher precision (fp64, or fp32 for fp16/bf16 results). ``dtype`` is the dtype
    ``out`` must have (default: ``ref``'s unless ``ref`` is fp64 or fp32 and ``out`` is lower precision).
    ``atol``/``rtol`` default to the tolerance of ``out``'s dtype; pass ``reason`` with any other tolerance.

    ``suspects`` names the lesson's classic mistakes: ``{hint: the reference computed as if that mistake were made}``
    (e.g. ``{"the 1/sqrt(D) scale is missing": attention_ref(q, k, v, scale=1.0)}``). When ``out`` is wrong but
    matches one of them within the tolerance, that hint is the one given.
    """
    __tracebackhide__ = True  # IPython and pytest show the learner the message, not this function's source
    if not isinstance(out, torch.Tensor):
        raise AssertionError(
            f"{name} should be a torch.Tensor but is {type(out).__name__}"
            + (" — did the launcher forget to `return out`?" if out is None else ".")
        )
    ref = torch.as_tensor(ref)
    from .mode import current

    env = current()
    if out.device.type != env.device:
        raise AssertionError(
            f"{name} is on {out.device.type} but the kernels here run on {env.device}: allocate "
            f"it on the inputs' device (torch.empty_like(x) or device=x.device)."
        )
    if tuple(out.shape) != tuple(ref.shape):
        raise AssertionError(
            f"{name} has shape {tuple(out.shape)} but the reference has {tuple(ref.shape)}: check "
            f"how the launcher allocates the output."
        )
    if dtype is not None and out.dtype != dtype:
        raise AssertionError(
            f"{name} has dtype {out.dtype} but should be {dtype}: allocate it with that dtype "
            f"(and cast in the kernel with .to(out_ptr.dtype.element_ty) before storing)."
        )
    if (
        dtype is None
        and out.dtype != ref.dtype
        and not (
            out.dtype.is_floating_point and ref.dtype.is_floating_point and ref.element_size() > out.element_size()
        )
    ):
        raise AssertionError(f"{name} has dtype {out.dtype} but the reference has {ref.dtype}.")

    if atol is None or rtol is None:
        tol = default_tolerance(out.dtype)
        atol = tol.atol if atol is None else atol
        rtol = tol.rtol if rtol is None else rtol
        reason = reason or tol.reason
    elif reason is None:
        raise TypeError("check(): a tolerance other than the default needs reason='why it is this size'")

    shape = tuple(out.shape)
    out64 = out.detach().to("cpu", torch.float64)
    ref64 = ref.detach().to("cpu", torch.float64)
    problems = []

    canaries = _canaries(out)
    if canaries is not None:
        clobbered = ~torch.isnan(canaries.detach().cpu())
        if bool(clobbered.any()):
            problems.append(
                f"The kernel wrote {int(clobbered.sum())} element(s) past the end of {name} (up to "
                f"{int(torch.nonzero(clobbered)[-1]) + 1} elements beyond it). Hint: mask the stores, "
                f"tl.store(ptr + offsets, value, mask=offsets < n), so the last block stops at the end."
            )

    unwritten = torch.isnan(out64) & ~torch.isnan(ref64)
    if bool(unwritten.any()):
        problems.append(
            f"{name} has elements that were never written (still NaN): {_where(unwritten, shape)}.\n"
            f"Hint: {_hint_unwritten(unwritten, shape)}"
        )
    else:
        close = torch.isclose(out64, ref64, rtol=rtol, atol=atol, equal_nan=True)
        bad = ~close
        if bool(bad.any()):
            hint = _suspect(out64, suspects, rtol, atol) or _hint_wrong(out64, ref64, bad, shape, out.dtype)
            diff = (out64 - ref64).abs().masked_fill(~bad, 0)
            worst = int(torch.argmax(diff.reshape(-1)))
            wi = _index(worst, shape)
            problems.append(
                f"{name} differs from the reference: {_where(bad, shape)}.\n"
                f"Worst at index {wi}: got {out64.reshape(-1)[worst].item():.6g}, expected "
                f"{ref64.reshape(-1)[worst].item():.6g} (tolerance atol={atol:g}, rtol={rtol:g}: {reason}).\n"
                f"Hint: {hint}"
            )
    if problems:
        raise AssertionError("\n".join(problems))
    if not quiet:
        print(
            f"✓ {name} matches the reference: shape {shape}, {dtype_name(out.dtype)}, "
            f"atol={atol:g}, rtol={rtol:g} ({reason})."
        )


def refuses(calls: dict, *, errors=(ValueError, TypeError), quiet: bool = False) -> None:
    """Each of ``calls`` (``{"what is wrong": lambda: launcher(bad input)}``) must raise one of ``errors``.

    Prints what each refusal said (a learner reads whether the message helps); raises AssertionError naming every
    bad input that was accepted, or that failed with another kind of error (a crash inside Triton is no refusal).
    """
    __tracebackhide__ = True
    if not calls:
        raise ValueError("refuses() needs at least one call to try")
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
        raise AssertionError("bad inputs that were not refused:\n- " + "\n- ".join(problems))


# -- launcher input validation ----------------------------------------------------------------------------------


def require(t, name: str, *, dtype=None, ndim: int | None = None, shape=None, contiguous: bool = True) -> None:
    """Raises a ValueError/TypeError that says how to fix a launcher input; does nothing when it is fine.

    ``dtype`` is one dtype or a tuple of accepted dtypes; ``shape`` may hold None for "any size".
    """
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}.")
    from .mode import current

    want = current().device
    if t.device.type != want:
        fix = f"{name}.cuda()" if want == "cuda" else f"{name}.cpu()"
        raise ValueError(
            f"{name} is on {t.device.type}, but the kernels run on {want}: move it with {fix} "
            f"(or create it with device='{want}')."
        )
    if t.dtype == torch.bfloat16 and current().interpret:
        raise TypeError(
            f"{name} is bfloat16, which Triton's interpreter does not support (its results would be silently "
            f"wrong): use {name}.half() or {name}.float() on the CPU; bfloat16 works on a GPU."
        )
    if dtype is not None:
        ok = dtype if isinstance(dtype, tuple) else (dtype,)
        if t.dtype not in ok:
            names = " or ".join(dtype_name(d) for d in ok)
            raise TypeError(
                f"{name} has dtype {dtype_name(t.dtype)}, but this kernel takes {names}: "
                f"convert it with {name}.to(torch.{dtype_name(ok[0])})."
            )
    if ndim is not None and t.dim() != ndim:
        raise ValueError(f"{name} must have {ndim} dimension(s) but has shape {tuple(t.shape)}.")
    if shape is not None:
        if len(shape) != t.dim() or any(s is not None and s != ts for s, ts in zip(shape, t.shape)):
            want_s = "(" + ", ".join("*" if s is None else str(s) for s in shape) + ")"
            raise ValueError(f"{name} has shape {tuple(t.shape)} but must be {want_s}.")
    if contiguous and not t.is_contiguous():
        raise ValueError(
            f"{name} is a non-contiguous view (shape {tuple(t.shape)}, strides {t.stride()}): call "
            f"{name}.contiguous() first."
        )


def require_same_shape(a, b, names=("x", "y")) -> None:
    """Raises ValueError when two inputs that must match element for element do not."""
    if tuple(a.shape) != tuple(b.shape):
        raise ValueError(
            f"{names[0]} has shape {tuple(a.shape)} but {names[1]} has shape {tuple(b.shape)}; "
            f"they must match (this kernel does not broadcast)."
        )


def _span(t: torch.Tensor) -> tuple[int, int]:
    """The byte range [start, end) of memory that ``t`` can touch."""
    if t.numel() == 0:
        return t.data_ptr(), t.data_ptr()
    last = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()) if stride > 0)
    return t.data_ptr(), t.data_ptr() + (last + 1) * t.element_size()


def overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    """True when the memory ``a`` may touch overlaps the memory ``b`` may touch (aliasing views included)."""
    if a.device != b.device or a.numel() == 0 or b.numel() == 0:
        return False
    (a0, a1), (b0, b1) = _span(a), _span(b)
    return a0 < b1 and b0 < a1


def require_out(out, *, shape, dtype, device, inputs: dict | None = None, name: str = "out") -> torch.Tensor:
    """The output a launcher writes into: ``out`` after checking it, or a new tensor when ``out`` is None.

    A given ``out`` must be a contiguous torch.Tensor of exactly ``shape``, ``dtype`` and ``device`` that shares no
    memory with any of ``inputs`` (``{"x": x, ...}``): a kernel that reads an input while it writes over it returns
    a wrong result without a word, and one that writes into a smaller buffer corrupts whatever lies after it.
    """
    shape = tuple(int(s) for s in shape)
    device = torch.device(device)
    if out is None:
        return torch.empty(shape, dtype=dtype, device=device)
    if not isinstance(out, torch.Tensor):
        raise TypeError(
            f"{name} must be a torch.Tensor (or None to allocate one), got {type(out).__name__}: pass "
            f"torch.empty({shape}, dtype=torch.{dtype_name(dtype)}, device='{device.type}')."
        )
    if out.device.type != device.type:
        raise ValueError(f"{name} is on {out.device.type}, but the inputs are on {device.type}: allocate it there.")
    if out.dtype != dtype:
        raise TypeError(
            f"{name} has dtype {dtype_name(out.dtype)}, but this launcher writes {dtype_name(dtype)}: allocate "
            f"it with dtype=torch.{dtype_name(dtype)}."
        )
    if tuple(out.shape) != shape:
        raise ValueError(f"{name} has shape {tuple(out.shape)}, but the result has shape {shape}.")
    if not out.is_contiguous():
        raise ValueError(
            f"{name} is a non-contiguous view (strides {out.stride()}): the kernel writes a contiguous block, so "
            f"pass a contiguous tensor (torch.empty_like(...)) and copy from it afterwards."
        )
    for what, t in (inputs or {}).items():
        if isinstance(t, torch.Tensor) and overlaps(out, t):
            raise ValueError(
                f"{name} shares memory with the input {what}: the kernel would overwrite {what} while still "
                f"reading it. Pass a separate output (or out=None)."
            )
    return out


def require_power_of_two(value, name: str) -> None:
    """Block sizes: a positive power of two (tl.arange needs one), given as a Python int."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0 or value & (value - 1):
        raise ValueError(
            f"{name} must be a positive power of two (tl.arange needs one), got {value!r}: try "
            f"triton.next_power_of_2(...)."
        )


def require_number(value, name: str, *, positive: bool = False) -> float:
    """A finite Python or NumPy real number (``eps``, ``alpha``): returned as a float."""
    import numbers

    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__} {value!r}.")
    value = float(value)
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"{name} must be finite, got {value}.")
    if positive and value <= 0:
        raise ValueError(f"{name} must be positive, got {value}.")
    return value


#: the number of elements a kernel with 32-bit offsets can address
INT32_LIMIT = 2**31


def require_int32_offsets(t: torch.Tensor, name: str) -> None:
    """For kernels that compute 32-bit offsets: refuse a tensor whose last element lies at 2**31 or beyond."""
    if t.numel() and _span(t)[1] - t.data_ptr() > INT32_LIMIT * t.element_size():
        raise ValueError(
            f"{name} spans {(_span(t)[1] - t.data_ptr()) // t.element_size()} elements, but this kernel computes "
            f"32-bit offsets, which reach fewer than 2**31: split {name} into parts, or use int64 offsets "
            f"(offsets.to(tl.int64)) in the kernel."
        )
