"""Device and mode: compiled Triton on an NVIDIA GPU, or Triton's interpreter on the CPU.

Triton reads ``TRITON_INTERPRET`` when a ``@triton.jit`` function is *defined*, so :func:`setup` must run before
any kernel is written. It is the first call of every lesson notebook.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Any

#: the oldest compute capability Triton compiles for in this course (T4 is 7.5)
MIN_CAPABILITY = (7, 5)


@dataclass(frozen=True)
class Env:
    """What :func:`setup` found. ``device`` is where tensors go; ``dtype`` is the low-precision type to teach with."""

    device: str
    interpret: bool
    gpu_name: str | None = None
    capability: tuple[int, int] | None = None
    sm_count: int | None = None
    memory_gb: float | None = None
    dtype: Any = None
    versions: dict = field(default_factory=dict)
    reason: str = ""

    @property
    def is_gpu(self) -> bool:
        return self.device == "cuda"

    def pick(self, cpu, gpu):
        """``cpu`` under the interpreter (tiny: it is 10^3-10^5x slower), ``gpu`` when kernels are compiled."""
        return gpu if self.is_gpu else cpu

    def describe(self) -> str:
        v = ", ".join(f"{k} {val}" for k, val in self.versions.items())
        if self.is_gpu:
            cc = ".".join(map(str, self.capability))
            return (f"GPU: {self.gpu_name} (compute capability {cc}, {self.sm_count} SMs, {self.memory_gb:.0f} GB)"
                    f" — kernels are compiled; teaching dtype {_dtype_name(self.dtype)}; {v}")
        return (f"No usable NVIDIA GPU ({self.reason}) — Triton's interpreter runs kernels on the CPU: "
                f"small sizes, fp32/fp16 only (it has no bfloat16), no timings; {v}")


def _dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")


def _probe_gpu():
    """Returns (usable, reason, torch.cuda properties or None)."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        return False, "TRITON_INTERPRET=1 was set", None
    import torch

    if not torch.cuda.is_available():
        return False, "torch sees no CUDA device", None
    if torch.version.hip is not None:
        return False, "this course targets NVIDIA GPUs; ROCm was found", None
    props = torch.cuda.get_device_properties(0)
    if (props.major, props.minor) < MIN_CAPABILITY:
        return False, f"{props.name} has compute capability {props.major}.{props.minor} < 7.5", None
    return True, "", props


_ENV: Env | None = None


def setup(quiet: bool = False, seed: int | None = 0) -> Env:
    """Detects the GPU, turns on the interpreter when there is none, prints one line saying which, returns an Env.

    Safe to call more than once: the first call decides and later calls return the same answer.
    """
    global _ENV
    if _ENV is None:
        _ENV = _detect()
        _enable_colab_widgets()
    if seed is not None:
        import torch

        torch.manual_seed(seed)
    if not quiet:
        print(_ENV.describe())
    return _ENV


def _enable_colab_widgets() -> None:
    """Colab shows ipywidgets 8 only through its custom widget manager."""
    if "google.colab" in sys.modules:
        try:
            from google.colab import output

            output.enable_custom_widget_manager()
        except Exception:  # an older Colab: widgets may not render, everything else works
            pass


def _detect() -> Env:
    usable, reason, props = _probe_gpu()
    if not usable:
        if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1":
            print("note: triton was imported before utils.setup(); kernels defined before this call are not "
                  "interpreted. Restart the kernel and run the setup cell first.")
        os.environ["TRITON_INTERPRET"] = "1"
    import torch
    import triton

    versions = {"torch": torch.__version__, "triton": triton.__version__,
                "python": ".".join(map(str, sys.version_info[:3]))}
    if not usable:
        return Env(device="cpu", interpret=True, dtype=torch.float16, versions=versions, reason=reason)
    cc = (props.major, props.minor)
    # Triton's tl.dot takes bf16 from Ampere (8.0) on; T4 (7.5) teaches with fp16 instead.
    dtype = torch.bfloat16 if cc >= (8, 0) else torch.float16
    return Env(device="cuda", interpret=False, gpu_name=props.name, capability=cc,
               sm_count=props.multi_processor_count, memory_gb=props.total_memory / 1e9, dtype=dtype,
               versions=versions)


def current() -> Env:
    """The Env of this process, running :func:`setup` quietly if nobody has yet."""
    return _ENV if _ENV is not None else setup(quiet=True, seed=None)
