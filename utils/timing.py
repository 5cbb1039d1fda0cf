"""Timing GPU work honestly: median of many repetitions, measured with CUDA events, L2 flushed between them.

Three calls, one job each:

* :func:`bench` times one callable and returns a :class:`Timing` (ms, spread, GB/s, TFLOP/s);
* :func:`compare` times several implementations of the same op and returns a table with a speed-up column;
* :func:`sweep` does :func:`compare` over a list of sizes, with a progress bar;

and :func:`peak_memory`, the GPU memory a call needs at its peak.

Under Triton's interpreter (no GPU) all three print one line saying why they decline and return ``None``: the
interpreter runs kernels as NumPy on the CPU, 10^3-10^5 times slower, so its numbers would mean nothing.

The units, from the bytes and FLOPs *you count* (the minimum the op must move or compute, not what a given
implementation happens to do)::

    GB/s    = bytes / (ms * 1e-3) / 1e9  = bytes / ms / 1e6
    TFLOP/s = flops / (ms * 1e-3) / 1e12 = flops / ms / 1e9

The pitfalls, and what is done about each:

* **Asynchronous launches.** A kernel launch returns to Python as soon as the work is queued; timing it with
  ``time.time()`` measures the queueing (a few µs), not the work. CUDA events are recorded *in the GPU's stream*,
  before and after the work, so their difference is GPU time; we synchronise once before reading them.
* **Warm-up and compilation.** The first call of a Triton kernel compiles it (hundreds of ms), an autotuned kernel
  tries every config, cuBLAS picks an algorithm, the allocator grows its pool, and clocks ramp up from idle. None
  of that is the steady state, so the callable runs for ``warmup_ms`` before anything is recorded.
* **Caches.** The H100's L2 holds 50 MB. Time the same small input twice and the second run reads it from L2, not
  from HBM, and looks faster than memory allows. Before every repetition a 256 MB buffer is overwritten, which
  evicts the inputs. The other remedy, for inputs you can afford to copy, is *rotating inputs*: cycle through
  enough copies that their total exceeds the L2.
* **Clocks and noise.** GPUs boost and throttle with temperature and power, and other processes share the device.
  We report the *median* of many repetitions (robust to a stray slow one) with the 20th and 80th percentiles
  (``ms_p20``/``ms_p80``) so you can see the spread. We do not lock clocks (that needs root); differences of a
  few per cent between runs are noise, not a speed-up.
* **Very short calls.** Python needs a few µs to launch a kernel. If the GPU is idle when the start event is
  queued, a short call is timed from that idle moment, launch included. The L2 flush before each repetition
  gives the GPU something to do while Python queues the event and the call behind it. Below about 10 µs the
  events themselves are still a noticeable share: time a larger problem, or read such numbers as "launch-bound".

The repetition loop is Triton's own ``triton.testing.do_bench`` (median and quantiles over CUDA events, L2 cleared
by zeroing a large buffer before each repetition), called by :func:`_measure`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .roofline import require_count

#: printed once per process when timing declines under the interpreter
DECLINE = (
    "timing skipped: kernels run in Triton's interpreter on the CPU; numbers would be meaningless "
    "(run on a GPU to time them)"
)
_declined = False


@dataclass(frozen=True)
class Timing:
    """One measurement: median milliseconds, the 20th-80th percentile spread, and the rates they imply."""

    label: str | None
    ms: float
    ms_p20: float
    ms_p80: float
    gbps: float | None = None
    tflops: float | None = None

    def __str__(self) -> str:
        parts = [f"{self.ms:.4g} ms (p20-p80 {self.ms_p20:.4g}-{self.ms_p80:.4g})"]
        if self.gbps is not None:
            parts.append(f"{self.gbps:,.0f} GB/s")
        if self.tflops is not None:
            parts.append(f"{self.tflops:,.3g} TFLOP/s")
        return (f"{self.label}: " if self.label else "") + ", ".join(parts)


def gbps(nbytes: float, ms: float) -> float:
    """Bandwidth in GB/s (10^9 bytes per second) of moving ``nbytes`` in ``ms`` milliseconds (both positive)."""
    return require_count(nbytes, "nbytes") / require_count(ms, "ms") / 1e6


def tflops(flops: float, ms: float) -> float:
    """Throughput in TFLOP/s (10^12 per second) of ``flops`` floating-point operations in ``ms`` milliseconds (both
    positive)."""
    return require_count(flops, "flops") / require_count(ms, "ms") / 1e9


# -- when not to time -------------------------------------------------------------------------------------------


def _decline_reason() -> str | None:
    """Why timing would be meaningless here, or None when there is a GPU to time on."""
    from .mode import current

    if current().interpret:
        return DECLINE
    import torch

    if not torch.cuda.is_available():
        return "timing skipped: no CUDA device; GPU timings need an NVIDIA GPU"
    return None


def _declines() -> bool:
    """True (after printing the reason once per process) when timing is meaningless here."""
    global _declined
    reason = _decline_reason()
    if reason is None:
        return False
    if not _declined:
        print(reason)
        _declined = True
    return True


# -- the repetition loop ----------------------------------------------------------------------------------------


def _measure(fn: Callable[[], object], warmup_ms: float, rep_ms: float) -> tuple[float, float, float]:
    """(median, 20th percentile, 80th percentile) of the GPU time of ``fn()`` in ms, by Triton's do_bench.

    Whatever ``fn`` raises (a TypeError from a wrong call included) reaches the caller unchanged.
    """
    from triton.testing import do_bench

    med, p20, p80 = do_bench(fn, warmup=warmup_ms, rep=rep_ms, quantiles=[0.5, 0.2, 0.8])
    return float(med), float(p20), float(p80)


# -- the three calls --------------------------------------------------------------------------------------------


def bench(
    fn: Callable[[], object],
    *,
    bytes: float | None = None,
    flops: float | None = None,
    label: str | None = None,
    warmup_ms: float = 25,
    rep_ms: float = 100,
) -> Timing | None:
    """Times ``fn()`` on the GPU; returns a :class:`Timing`, or None (with a one-line reason) under the interpreter.

    ``bytes``/``flops``: what the op must move and compute, counted by you; they give ``gbps`` and ``tflops``
    (``bytes / ms / 1e6`` GB/s, ``flops / ms / 1e9`` TFLOP/s). ``fn`` takes no arguments: wrap a call in a lambda,
    ``bench(lambda: add(x, y), bytes=3 * x.nbytes)``. See the module docstring for what is measured and why.
    Refuses counts that are not positive numbers before timing anything.
    """
    _require_counts(bytes, flops, label)
    if _declines():
        return None
    ms, p20, p80 = _measure(fn, warmup_ms, rep_ms)
    return Timing(
        label=label,
        ms=ms,
        ms_p20=p20,
        ms_p80=p80,
        gbps=None if bytes is None else gbps(bytes, ms),
        tflops=None if flops is None else tflops(flops, ms),
    )


def _require_counts(nbytes, flops, label=None) -> None:
    """``bytes`` and ``flops`` as given to bench/compare: each None or a finite positive number (ValueError)."""
    for value, what in ((nbytes, "bytes"), (flops, "flops")):
        if value is not None:
            require_count(value, what, label or "")


COLUMNS = ["impl", "ms", "GB/s", "TFLOP/s", "speedup"]


def _table(timings: dict, baseline: str | None):
    import pandas as pd

    names = list(timings)
    if baseline is None:
        baseline = names[0]
    if baseline not in timings:
        raise KeyError(f"baseline {baseline!r} is not one of the implementations: {', '.join(names)}")
    base = timings[baseline].ms
    rows = [
        {"impl": name, "ms": t.ms, "GB/s": t.gbps, "TFLOP/s": t.tflops, "speedup": base / t.ms}
        for name, t in timings.items()
    ]
    df = pd.DataFrame(rows, columns=COLUMNS)
    df.attrs["baseline"] = baseline
    return df


def compare(
    impls: dict[str, Callable[[], object]],
    *,
    bytes: float | None = None,
    flops: float | None = None,
    baseline: str | None = None,
    label: str | None = None,
):
    """Times each implementation of one op; a DataFrame with columns impl, ms, GB/s, TFLOP/s, speedup.

    ``speedup`` is ``baseline's ms / this ms`` (above 1: faster than the baseline); ``baseline`` defaults to the
    first implementation. The same ``bytes``/``flops`` apply to every implementation: they are the op's, not a
    given kernel's, so GB/s compares like with like. Returns None (with a one-line reason) under the interpreter.
    """
    if not impls:
        raise ValueError("compare() needs at least one implementation: {'name': lambda: ...}")
    _require_counts(bytes, flops, label)
    if _declines():
        return None
    timings = {
        name: bench(fn, bytes=bytes, flops=flops, label=name)
        for name, fn in progress(list(impls.items()), label or "timing")
    }
    df = _table(timings, baseline)
    if label:
        df.attrs["label"] = label
    return df


def progress(items, desc: str):
    """``items`` with a progress bar (tqdm: text in a terminal, a widget in a notebook) for anything slow."""
    try:
        from tqdm.auto import tqdm
    except ImportError:  # tqdm is a dependency of the course; without it there is just no bar
        return items
    return tqdm(items, desc=desc, leave=False)


def sweep(
    make_impls: Callable[[object], dict],
    sizes,
    *,
    bytes_fn: Callable | None = None,
    flops_fn: Callable | None = None,
    baseline: str | None = None,
):
    """:func:`compare` at every size: a long DataFrame with columns size, impl, ms, GB/s, TFLOP/s, speedup.

    ``make_impls(size)`` allocates the inputs for one size and returns ``{name: callable}``; ``bytes_fn(size)`` and
    ``flops_fn(size)`` count what the op moves and computes at that size. Inputs are made one size at a time, so
    the largest size alone must fit in memory. Returns None (with a one-line reason) under the interpreter, without
    calling ``make_impls``.
    """
    import pandas as pd

    sizes = list(sizes)
    if not sizes:
        raise ValueError("sweep() needs at least one size, got none: pass sizes=[2**20, 2**22, ...].")
    if _declines():
        return None
    frames = []
    for size in progress(sizes, "sizes"):
        impls = make_impls(size)
        df = compare(
            impls,
            bytes=None if bytes_fn is None else bytes_fn(size),
            flops=None if flops_fn is None else flops_fn(size),
            baseline=baseline,
        )
        df.insert(0, "size", [size] * len(df))
        frames.append(df)
        del impls
    out = pd.concat(frames, ignore_index=True)
    out.attrs["baseline"] = frames[0].attrs["baseline"]
    return out


# -- memory -----------------------------------------------------------------------------------------------------


def peak_memory(fn: Callable[[], object]) -> int | None:
    """Bytes of GPU memory allocated at the peak while ``fn()`` runs, above what was allocated before it (what the
    call itself needs: activations, logits, workspaces). ``None`` where there is no GPU to measure on."""
    if _decline_reason() is not None:
        return None
    import torch

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - before
