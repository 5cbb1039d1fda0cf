"""The roofline model: how fast an op *can* run, from two numbers of the GPU and two counts of the op.

A GPU has a memory roof (bytes per second from HBM) and a compute roof (FLOPs per second, one per precision).
An op that does ``flops`` while moving ``bytes`` has *arithmetic intensity* ``I = flops / bytes`` (FLOP/byte), and
can at best reach::

    attainable TFLOP/s = min(peak TFLOP/s, I * bandwidth GB/s / 1000)

The two roofs meet at the *ridge point* ``I* = peak FLOP/s / bandwidth bytes/s``: below it an op is memory-bound
(faster memory traffic is the only way up), above it compute-bound.

* :data:`GPUS` / :func:`lookup` — datasheet peaks of common GPUs, each with its source;
* :func:`measure_ceilings` / :func:`ceilings` — the roofs of *this* GPU, measured (a big copy; big matmuls), or
  from the table when there is no GPU;
* :func:`reading` — the one place that decides which roof binds an op and the best time it allows;
* :func:`point`, :func:`attainable`, :func:`ridge`, :func:`summary`, :func:`plot` — placing ops under the roofs.

Counts are checked: a NaN, infinite, zero or negative number of FLOPs or bytes is refused with a ValueError
(an op with no FLOPs, such as a copy, has no place on a roofline's log axis: time it in GB/s instead).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

#: precisions with a compute roof, in the order they are drawn
PRECISIONS = ("fp32", "tf32", "fp16", "bf16")


@dataclass(frozen=True)
class GPUSpec:
    """Datasheet peaks of one GPU. TFLOP/s are *dense* (no 2:4 sparsity); tensor-core rates with FP32 accumulate."""

    name: str
    patterns: tuple[str, ...]  # matched as whole words, case-insensitively, against torch's device name
    bandwidth_gbs: float
    fp32: float  # non-tensor FP32
    tf32: float
    fp16: float
    bf16: float
    sms: int
    l2_mb: float
    source: str

    @property
    def tflops(self) -> dict[str, float]:
        return {p: getattr(self, p) for p in PRECISIONS}


_A100 = "NVIDIA A100 Tensor Core GPU datasheet (sparsity figures halved)"
_H100 = "NVIDIA H100 Tensor Core GPU datasheet (sparsity figures halved)"

#: Datasheet figures. Vendors print tensor-core peaks "with sparsity" (2x); these are the dense halves.
GPUS: tuple[GPUSpec, ...] = (
    GPUSpec(
        "T4",
        ("T4",),
        320,
        8.1,
        8.1,
        65,
        8.1,
        40,
        4,
        "NVIDIA T4 datasheet (Turing has no TF32 or BF16 tensor cores: both run at the FP32 rate)",
    ),
    GPUSpec("L4", ("L4",), 300, 30.3, 60, 121, 121, 58, 48, "NVIDIA L4 datasheet (sparsity figures halved)"),
    GPUSpec("A10", ("A10",), 600, 31.2, 62.5, 125, 125, 72, 6, "NVIDIA A10 datasheet (sparsity figures halved)"),
    GPUSpec(
        "A10G",
        ("A10G",),
        600,
        35,
        35,
        70,
        70,
        80,
        6,
        "no NVIDIA datasheet: AWS G5's A10G as published by AWS and in Baseten's 'A10 vs A10G' comparison "
        "(80 SMs at 1.71 GHz, half-rate tensor cores)",
    ),
    GPUSpec("A100 40GB", ("A100-SXM4-40GB", "A100-PCIE-40GB", "A100 40GB"), 1555, 19.5, 156, 312, 312, 108, 40, _A100),
    GPUSpec("A100 80GB SXM", ("A100-SXM4-80GB", "A100 SXM", "A100"), 2039, 19.5, 156, 312, 312, 108, 40, _A100),
    GPUSpec("A100 80GB PCIe", ("A100 80GB PCIe", "A100-PCIE-80GB"), 1935, 19.5, 156, 312, 312, 108, 40, _A100),
    GPUSpec("H100 SXM", ("H100 80GB HBM3", "H100 SXM", "H100"), 3350, 67, 494.7, 989.4, 989.4, 132, 50, _H100),
    GPUSpec("H100 PCIe", ("H100 PCIe",), 2000, 51, 378, 756, 756, 114, 50, _H100),
    GPUSpec("H100 NVL", ("H100 NVL",), 3900, 60, 417.5, 835.5, 835.5, 132, 50, _H100),
    GPUSpec(
        "H200",
        ("H200",),
        4800,
        67,
        494.7,
        989.4,
        989.4,
        132,
        50,
        "NVIDIA H200 Tensor Core GPU datasheet, SXM (sparsity figures halved)",
    ),
    GPUSpec(
        "RTX 3090",
        ("RTX 3090",),
        936,
        35.6,
        35.6,
        71,
        71,
        82,
        6,
        "NVIDIA Ampere GA102 GPU architecture whitepaper (GeForce: FP16/BF16 with FP32 accumulate)",
    ),
    GPUSpec(
        "RTX 4090",
        ("RTX 4090",),
        1008,
        82.6,
        82.6,
        165.2,
        165.2,
        128,
        72,
        "NVIDIA Ada Lovelace GPU architecture whitepaper (GeForce: FP16/BF16 with FP32 accumulate)",
    ),
)

#: what the roofline shows when there is no GPU to measure
ILLUSTRATION = "H100 SXM"


def lookup(name: str | None) -> GPUSpec | None:
    """The table's row for a device name such as torch's ``"NVIDIA H100 80GB HBM3"``; None when unknown.

    Patterns match whole words, case-insensitively, and the longest matching pattern wins, so ``"NVIDIA A10G"``
    is the A10G (not the A10) and ``"NVIDIA L40S"`` is not an L4.
    """
    if not name:
        return None
    best, best_len = None, 0
    for spec in GPUS:
        for pat in (spec.name,) + spec.patterns:
            if re.search(r"(?<![A-Za-z0-9])" + re.escape(pat) + r"(?![A-Za-z0-9])", name, re.IGNORECASE):
                if len(pat) > best_len:
                    best, best_len = spec, len(pat)
    return best


def spec_table():
    """The table as a DataFrame: bandwidth, dense TFLOP/s per precision, ridge points, and the source of each row."""
    import pandas as pd

    rows = []
    for s in GPUS:
        row = {"gpu": s.name, "GB/s": s.bandwidth_gbs}
        row.update({f"{p} TFLOP/s": getattr(s, p) for p in PRECISIONS})
        row["bf16 ridge FLOP/B"] = round(s.bf16 * 1e3 / s.bandwidth_gbs)
        row.update({"SMs": s.sms, "L2 MB": s.l2_mb, "source": s.source})
        rows.append(row)
    return pd.DataFrame(rows)


# -- the ceilings of this GPU -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ceilings:
    """The roofs: memory bandwidth (GB/s) and compute peaks (TFLOP/s per precision), and where they come from."""

    bandwidth_gbs: float
    tflops: dict
    gpu: str
    source: str
    measured: bool = False
    spec: GPUSpec | None = field(default=None, compare=False)

    def __post_init__(self):
        """Refuses roofs that are no roofs: a bandwidth or a peak that is zero, negative, NaN or infinite."""
        require_count(self.bandwidth_gbs, "bandwidth_gbs (the memory roof, GB/s)", self.gpu)
        for precision, peak in self.tflops.items():
            require_count(peak, f"the {precision} peak (TFLOP/s)", self.gpu)

    def ridge(self, precision: str = "bf16") -> float:
        """FLOP/byte where the memory roof meets the ``precision`` compute roof."""
        return ridge(self, precision)

    def __str__(self) -> str:
        peaks = ", ".join(f"{p} {t:,.0f}" for p, t in self.tflops.items())
        return f"{self.gpu} — memory {self.bandwidth_gbs:,.0f} GB/s; {peaks} TFLOP/s ({self.source})"


def from_spec(spec: GPUSpec, source: str | None = None) -> Ceilings:
    return Ceilings(
        bandwidth_gbs=spec.bandwidth_gbs,
        tflops=dict(spec.tflops),
        gpu=spec.name,
        source=source or f"datasheet: {spec.source}",
        measured=False,
        spec=spec,
    )


def measure_ceilings(matmul_n: int = 8192, copy_mib: int = 1024) -> Ceilings:
    """Measures this GPU's roofs with :mod:`utils.timing`: what a well-tuned library actually reaches.

    * memory: ``y.copy_(x)`` of ``copy_mib`` MiB (capped at 1/8 of the GPU's memory); bytes = read + write = 2x;
    * compute: ``torch.matmul`` of ``matmul_n``-square matrices; FLOPs = 2 n^3. fp32 runs with TF32 off, tf32 with
      it on (fp32 inputs, tensor cores rounding them to 10-bit mantissas); bf16 only where the GPU supports it.

    These are *ceilings*, not limits: what one copy and one cuBLAS matmul reached here. They sit below the
    datasheet peaks (the datasheet is a clock rate times unit counts), and another kernel, at another size or
    with another mix of reads and writes, can pass them; nothing passes the datasheet. Raises RuntimeError
    without a CUDA device.
    """
    import torch

    from . import timing

    if not torch.cuda.is_available():
        raise RuntimeError("measure_ceilings() needs a CUDA GPU; use ceilings() for the datasheet numbers")
    props = torch.cuda.get_device_properties(0)
    nbytes = min(copy_mib * 2**20, props.total_memory // 8)
    jobs = ["memory", "fp32", "tf32", "fp16"] + (["bf16"] if torch.cuda.is_bf16_supported() else [])
    bandwidth, peaks = None, {}
    old_tf32 = torch.backends.cuda.matmul.allow_tf32
    try:
        for job in timing.progress(jobs, "measuring this GPU's roofs"):
            if job == "memory":
                x = torch.empty(nbytes // 4, dtype=torch.float32, device="cuda").fill_(1.0)
                y = torch.empty_like(x)
                t = timing.bench(lambda: y.copy_(x), bytes=2 * x.nbytes, label="copy")
                bandwidth = t.gbps
                del x, y
                continue
            dtype = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[job]
            torch.backends.cuda.matmul.allow_tf32 = job == "tf32"
            a = torch.randn(matmul_n, matmul_n, device="cuda", dtype=dtype)
            b = torch.randn(matmul_n, matmul_n, device="cuda", dtype=dtype)
            t = timing.bench(lambda: torch.matmul(a, b), flops=2 * matmul_n**3, label=f"matmul {job}")
            peaks[job] = t.tflops
            a = b = None  # free the memory before the next dtype
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old_tf32
        torch.cuda.empty_cache()
    spec = lookup(props.name)
    return Ceilings(
        bandwidth_gbs=bandwidth,
        tflops=peaks,
        gpu=props.name,
        measured=True,
        spec=spec,
        source=f"measured here: copy of {nbytes / 2**20:,.0f} MiB, torch.matmul {matmul_n}^3",
    )


_MEASURED: Ceilings | None = None


def ceilings(measure: bool = True) -> Ceilings:
    """This GPU's roofs: measured once per process on a GPU (``measure=True``), else from the datasheet table.

    Without a GPU (or for a GPU not in the table) it shows an H100 SXM's datasheet numbers, labelled
    "for illustration", so the pictures still make sense.
    """
    global _MEASURED
    from .mode import current

    env = current()
    if not env.is_gpu:
        return from_spec(lookup(ILLUSTRATION), source=f"datasheet of an {ILLUSTRATION}, for illustration: no GPU here")
    if measure:
        if _MEASURED is None:
            _MEASURED = measure_ceilings()
        return _MEASURED
    spec = lookup(env.gpu_name)
    if spec is None:
        return from_spec(
            lookup(ILLUSTRATION),
            source=f"{env.gpu_name} is not in the table: datasheet of an {ILLUSTRATION}, for illustration",
        )
    return from_spec(spec)


def vs_datasheet(ceilings: Ceilings):
    """Measured roofs next to the datasheet's (when the GPU is in the table): roof, measured, datasheet, %."""
    import pandas as pd

    spec = ceilings.spec
    units = {"memory": "GB/s", **{p: "TFLOP/s" for p in PRECISIONS}}
    rows = []
    for roof, unit in units.items():
        have = ceilings.bandwidth_gbs if roof == "memory" else ceilings.tflops.get(roof)
        sheet = None if spec is None else (spec.bandwidth_gbs if roof == "memory" else getattr(spec, roof))
        measured = have if ceilings.measured else None
        rows.append(
            {
                "roof": roof,
                "unit": unit,
                "measured": measured,
                "datasheet": sheet,
                "% of datasheet": None if measured is None or not sheet else 100 * measured / sheet,
            }
        )
    return pd.DataFrame(rows)


# -- roofline arithmetic ----------------------------------------------------------------------------------------


def _peak(ceilings: Ceilings, precision: str) -> float:
    if precision not in ceilings.tflops:
        raise KeyError(f"no {precision} roof for {ceilings.gpu}; it has {', '.join(ceilings.tflops)}")
    return ceilings.tflops[precision]


def ridge(ceilings: Ceilings, precision: str = "bf16") -> float:
    """Arithmetic intensity (FLOP/byte) where the roofs meet: peak FLOP/s / bandwidth bytes/s."""
    return _peak(ceilings, precision) * 1e12 / (ceilings.bandwidth_gbs * 1e9)


def require_count(value, what: str, label: str = "") -> float:
    """A FLOP or byte count (or an intensity, a time): a finite positive number, else a ValueError saying so."""
    where = f"{label}: " if label else ""
    try:
        v = None if isinstance(value, (bool, str, bytes)) else float(value)
    except (TypeError, ValueError):
        v = None
    if v is None:
        raise ValueError(f"{where}{what} must be a positive number, got {value!r} ({type(value).__name__})")
    if not math.isfinite(v) or v <= 0:
        no_flops = v == 0 and what == "flops"
        extra = " (an op with no FLOPs, a copy, has no place on the roofline: report its GB/s)" if no_flops else ""
        raise ValueError(f"{where}{what} must be a finite positive number, got {value!r}{extra}")
    return v


def attainable(intensity: float, ceilings: Ceilings, precision: str = "bf16") -> float:
    """The roofline: the best TFLOP/s an op of this intensity can reach, min(peak, intensity x bandwidth)."""
    intensity = require_count(intensity, "the arithmetic intensity")
    return min(_peak(ceilings, precision), intensity * ceilings.bandwidth_gbs / 1e3)


def reading(flops: float, bytes: float, ceilings: Ceilings, precision: str = "bf16", label: str = "") -> dict:
    """What the roofline says about an op that does ``flops`` FLOPs while moving ``bytes`` bytes.

    Returns ``intensity`` (FLOP/byte), ``ridge``, ``bound`` ("memory" below the ridge, else "compute"), ``tflops``
    (the attainable rate), ``memory_ms`` (bytes / bandwidth), ``compute_ms`` (FLOPs / peak) and ``best_ms``, the
    larger of the two: no kernel can finish sooner. :func:`summary` and the explorers both use this one function.
    """
    flops, bytes = require_count(flops, "flops", label), require_count(bytes, "bytes", label)
    intensity = flops / bytes
    r = ridge(ceilings, precision)
    memory_ms = bytes / (ceilings.bandwidth_gbs * 1e9) * 1e3
    compute_ms = flops / (_peak(ceilings, precision) * 1e12) * 1e3
    return {
        "flops": flops,
        "bytes": bytes,
        "intensity": intensity,
        "ridge": r,
        "bound": "memory" if intensity < r else "compute",
        "tflops": attainable(intensity, ceilings, precision),
        "memory_ms": memory_ms,
        "compute_ms": compute_ms,
        "best_ms": max(memory_ms, compute_ms),
    }


def point(label: str, flops: float, bytes: float, ms: float | None = None) -> dict:
    """One op on the roofline: its intensity, and its achieved TFLOP/s when ``ms`` was measured (else None).

    A point with ``tflops=None`` is a prediction: :func:`plot` draws it as a dashed line at its intensity.
    Refuses NaN, infinite, zero or negative ``flops``, ``bytes`` and ``ms`` with a ValueError.
    """
    flops, bytes = require_count(flops, "flops", label), require_count(bytes, "bytes", label)
    if ms is not None:
        ms = require_count(ms, "ms (the measured time)", label)
    return {
        "label": label,
        "intensity": flops / bytes,
        "tflops": None if ms is None else flops / ms / 1e9,
        "flops": flops,
        "bytes": bytes,
        "ms": ms,
    }


def summary(points, ceilings: Ceilings, precision: str = "bf16"):
    """A table of the points: intensity, which roof limits them, the best time the roofline allows
    (:func:`reading`), and (when measured) the time taken and the fraction of that best time reached."""
    import pandas as pd

    rows = []
    for p in points:
        r = reading(p["flops"], p["bytes"], ceilings, precision, label=p["label"])
        rows.append(
            {
                "op": p["label"],
                "FLOP/B": r["intensity"],
                "bound": r["bound"],
                "roofline ms": r["best_ms"],
                "measured ms": p["ms"],
                "% of roof": None if p["ms"] is None else 100 * r["best_ms"] / p["ms"],
            }
        )
    return pd.DataFrame(rows)


# -- the picture ------------------------------------------------------------------------------------------------

_COLOURS = {"fp32": "#7f7f7f", "tf32": "#9467bd", "fp16": "#2ca02c", "bf16": "#d62728"}


def _label(ax, text, x, y, x_lo, x_hi):
    """A point's label below it, to the right (to the left near the right edge, so it stays in the axes)."""
    if not text:
        return
    right_side = math.log(x / x_lo) / math.log(x_hi / x_lo) > 0.7
    ax.annotate(
        text,
        (x, y),
        xytext=(-7 if right_side else 7, -8),
        textcoords="offset points",
        va="top",
        ha="right" if right_side else "left",
        fontsize=11,
        bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.8},
    )


def plot(points, ceilings: Ceilings, precision: str = "bf16", ax=None, title: str | None = None):
    """A log-log roofline: the memory roof, one compute roof per precision (``precision``'s drawn bold, with its
    ridge point marked), on a measured GPU in the table the datasheet's roofs as a thin dotted line (the measured
    roofs are ceilings a kernel can exceed, the datasheet's are limits), measured points at (intensity, TFLOP/s),
    predictions (``tflops`` None) as dashed vertical lines at their intensity with an open circle where the roof
    caps them.

    Returns the matplotlib Figure; end a notebook cell with it to show it.
    """
    import matplotlib.pyplot as plt

    if precision not in ceilings.tflops:  # e.g. bf16 on a T4: show the nearest roof there is, and say so
        fallback = "fp16" if "fp16" in ceilings.tflops else next(iter(ceilings.tflops))
        title = title or f"(no {precision} roof on this GPU: {fallback} shown)"
        precision = fallback
    points = [p for p in points if p["intensity"] > 0]  # an op with no FLOPs (a copy) has no place on a log axis
    own = ax is None
    if own:
        fig, ax = plt.subplots(figsize=(9, 5.5), layout="constrained")
    else:
        fig = ax.figure
    bw = ceilings.bandwidth_gbs
    ridges = {p: ridge(ceilings, p) for p in ceilings.tflops}
    xs = [p["intensity"] for p in points]
    x_lo = min([0.1] + [x / 3 for x in xs])
    x_hi = max([max(ridges.values()) * 10] + [x * 3 for x in xs])
    top = max(ceilings.tflops.values())

    # -- roofs
    x_mem = max(ridges.values())
    ax.plot(
        [x_lo, x_mem],
        [x_lo * bw / 1e3, x_mem * bw / 1e3],
        color="#1f77b4",
        lw=2.5,
        label=f"memory: {bw:,.0f} GB/s",
        gid="roof:memory",
    )
    for p, peak in ceilings.tflops.items():
        bold = p == precision
        ax.plot(
            [ridges[p], x_hi],
            [peak, peak],
            color=_COLOURS.get(p, "black"),
            lw=2.5 if bold else 1.2,
            alpha=1 if bold else 0.6,
            ls="-" if bold else "--",
            label=f"{p}: {peak:,.0f} TFLOP/s",
            gid=f"roof:{p}",
        )
    sheet = ceilings.spec if ceilings.measured else None
    if sheet is not None and precision in sheet.tflops:
        # measured roofs are ceilings (what a copy and cuBLAS reached), not limits: keep the datasheet's in view
        s_bw, s_peak = sheet.bandwidth_gbs, sheet.tflops[precision]
        s_ridge = s_peak * 1e3 / s_bw
        ax.plot(
            [x_lo, s_ridge, x_hi],
            [x_lo * s_bw / 1e3, s_peak, s_peak],
            color="#555555",
            lw=1,
            ls=":",
            label=f"datasheet: {s_bw:,.0f} GB/s, {precision} {s_peak:,.0f} TFLOP/s",
            gid="roof:datasheet",
        )
        top = max(top, s_peak)
    r = ridges[precision]
    ax.plot([r], [ceilings.tflops[precision]], "o", color=_COLOURS.get(precision, "black"), ms=9, zorder=5, gid="ridge")
    ax.axvline(r, color=_COLOURS.get(precision, "black"), ls=":", lw=1.5, gid="ridge-line")

    # -- ops
    measured = [p for p in points if p["tflops"] is not None]
    if measured:
        ax.scatter(
            [p["intensity"] for p in measured],
            [p["tflops"] for p in measured],
            s=60,
            color="black",
            zorder=6,
            label="measured",
            gid="measured",
        )
        for p in measured:
            _label(ax, p["label"], p["intensity"], p["tflops"], x_lo, x_hi)
    y_lo = min([x_lo * bw / 1e3 / 3] + [p["tflops"] / 3 for p in measured if p["tflops"] > 0])
    ax.text(
        r,
        y_lo * 1.3,
        f" ridge ({precision}): {r:,.0f} FLOP/B",
        rotation=90,
        va="bottom",
        ha="left",
        fontsize=10,
        color=_COLOURS.get(precision, "black"),
    )
    for p in points:
        if p["tflops"] is None:  # where it would sit: somewhere on this line, at best on the roof
            best = attainable(p["intensity"], ceilings, precision)
            ax.axvline(p["intensity"], color="black", ls="--", lw=1, alpha=0.6, gid="predicted")
            ax.plot([p["intensity"]], [best], "o", mfc="white", mec="black", ms=8, zorder=6, gid="at-best")
            _label(ax, p["label"], p["intensity"], best, x_lo, x_hi)

    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(x_lo, x_hi)
    ax.set_ylim(y_lo, top * 2.5)
    ax.set_xlabel("arithmetic intensity (FLOP / byte)", fontsize=12)
    ax.set_ylabel("TFLOP/s", fontsize=12)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(loc="upper left", fontsize=10)
    head = f"Roofline — {ceilings.gpu} ({'measured' if ceilings.measured else 'datasheet'})"
    ax.set_title(head + (f"\n{title}" if title else ""), fontsize=13)
    if own:
        plt.close(fig)  # shown once, as the cell's value, not a second time by the inline backend
    return fig
