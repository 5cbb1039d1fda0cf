"""What the GPU really ran, from PyTorch's profiler: which attention backend SDPA picked, and where a function's
GPU time goes by kind of kernel (matmuls, attention, everything else). GPU only: under the interpreter there are
no GPU kernels to see, and each function here says so instead of timing the CPU.
"""

from __future__ import annotations

import warnings

import torch

#: (backend, a tag found in the names of its kernels), in the order they are tried
SDPA_BACKENDS = [
    ("cuDNN", "cudnn"),
    ("FlashAttention-2", "flash"),
    ("memory-efficient", "fmha"),
    ("memory-efficient", "efficient"),
]


def _require_gpu(what: str) -> None:
    if not torch.cuda.is_available():
        raise RuntimeError(f"{what} reads the profiler's GPU kernels: it needs a CUDA GPU")


def _kernels(fn, reps: int = 1):
    """The profiler's key averages of the CUDA activity of ``reps`` calls of ``fn`` (after one warm-up call)."""
    fn()
    torch.cuda.synchronize()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the profiler warns about its own internals
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(reps):
                fn()
            torch.cuda.synchronize()
    return prof.key_averages()


def sdpa_backend(fn) -> str:
    """Which kernel torch's scaled_dot_product_attention ran inside ``fn()``, from the profiler's kernel names."""
    _require_gpu("sdpa_backend")
    names = " ".join(e.key for e in _kernels(fn)).lower()
    for backend, tag in SDPA_BACKENDS:
        if tag in names:
            return backend
    return "math (unfused)"


def kernel_kind(name: str) -> str:
    """ "attention", "matmuls (cuBLAS)" or "everything else", from a GPU kernel's name."""
    name = name.lower()
    if any(tag in name for tag in ("attention", "flash", "fmha", "cudnn", "sdpa")):
        return "attention"
    if any(tag in name for tag in ("gemm", "nvjet", "cutlass", "xmma", "cublas", "matmul")):
        return "matmuls (cuBLAS)"
    return "everything else"


def time_by_kind(fn, reps: int = 10) -> dict[str, float]:
    """GPU milliseconds per call of ``fn``, summed per kind of kernel (:func:`kernel_kind`)."""
    _require_gpu("time_by_kind")
    totals: dict[str, float] = {}
    for e in _kernels(fn, reps):
        us = getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0)
        if us and e.device_type == torch.autograd.DeviceType.CUDA:
            kind = kernel_kind(e.key)
            totals[kind] = totals.get(kind, 0.0) + us / 1e3 / reps
    return totals
