"""Device and mode: compiled Triton on an NVIDIA GPU, or Triton's interpreter on the CPU.

Triton reads ``TRITON_INTERPRET`` when a ``@triton.jit`` function is *defined*, so :func:`setup` must run before
any kernel is written. It is the first call of every lesson notebook.

``TRITON_HARD_WAY_AS=7.5`` (or ``8.0``, ``8.9``, …) makes the course behave on a newer GPU as it does on an older
one: the teaching dtype, whether TMA descriptors are used, and the shared memory budget that configs are sized for
all follow that compute capability. It is how the pre-Hopper paths are tested on an H100/H200; kernels still
compile for the real GPU.
"""

from __future__ import annotations

import inspect
import os
import sys
from dataclasses import dataclass, field
from typing import Any

#: the oldest compute capability Triton compiles for in this course (T4 is 7.5)
MIN_CAPABILITY = (7, 5)

#: environment variable: behave as a GPU of this compute capability (e.g. "7.5" for a T4, "8.0" for an A100)
AS_VAR = "TRITON_HARD_WAY_AS"

#: the most shared memory one program may use (opt-in), by compute capability, from NVIDIA's CUDA C++ guide
SHARED_MEMORY_BYTES = {
    (7, 5): 64 * 1024,
    (8, 0): 163 * 1024,
    (8, 6): 99 * 1024,
    (8, 7): 163 * 1024,
    (8, 9): 99 * 1024,
    (9, 0): 227 * 1024,
    (10, 0): 227 * 1024,
    (12, 0): 99 * 1024,
}


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
    #: the capability of the GPU really present when TRITON_HARD_WAY_AS makes ``capability`` an older one
    real_capability: tuple[int, int] | None = None
    #: shared memory one program may use, in bytes (the course sizes its tiles for this)
    shared_memory_bytes: int | None = None

    @property
    def is_gpu(self) -> bool:
        return self.device == "cuda"

    @property
    def emulated(self) -> bool:
        """True when TRITON_HARD_WAY_AS made the course behave as an older GPU than the one present."""
        return self.real_capability is not None and self.real_capability != self.capability

    @property
    def supports_tma(self) -> bool:
        """Hopper's tensor memory accelerator (TMA descriptors): compute capability 9.0 or newer, compiled."""
        return self.is_gpu and self.capability >= (9, 0)

    @property
    def supports_pdl(self) -> bool:
        """Programmatic dependent launch (a kernel launched while the one before it finishes; griddepcontrol in
        PTX): compute capability 9.0 or newer, compiled."""
        return self.is_gpu and self.capability >= (9, 0)

    def pick(self, cpu, gpu):
        """``cpu`` under the interpreter (tiny: it is 10^3-10^5x slower), ``gpu`` when kernels are compiled."""
        return gpu if self.is_gpu else cpu

    def describe(self) -> str:
        v = ", ".join(f"{k} {val}" for k, val in self.versions.items())
        if self.is_gpu:
            cc = ".".join(map(str, self.capability))
            if self.emulated:
                real = ".".join(map(str, self.real_capability))
                cc = f"{real}, behaving as {cc} because {AS_VAR} is set"
            return (
                f"GPU: {self.gpu_name} (compute capability {cc}, {self.sm_count} SMs, {self.memory_gb:.0f} GB)"
                f" — kernels are compiled; teaching dtype {dtype_name(self.dtype)}; {v}"
            )
        return (
            f"No usable NVIDIA GPU ({self.reason}) — Triton's interpreter runs kernels on the CPU: "
            f"small sizes, fp32/fp16 only (it has no bfloat16), no timings; {v}"
        )


def dtype_name(dtype) -> str:
    """``torch.bfloat16`` -> ``"bfloat16"``: the name a learner types after ``torch.``."""
    return str(dtype).replace("torch.", "")


def _capability_override(real: tuple[int, int]) -> tuple[int, int]:
    """The capability to behave as: TRITON_HARD_WAY_AS if set (never newer than the real GPU), else the real one."""
    value = os.environ.get(AS_VAR, "").strip()
    if not value:
        return real
    try:
        major, minor = (int(part) for part in value.split("."))
    except ValueError:
        raise ValueError(f"{AS_VAR}={value!r}: give a compute capability such as 7.5 or 8.0") from None
    if (major, minor) > real or (major, minor) < MIN_CAPABILITY:
        raise ValueError(
            f"{AS_VAR}={value}: the GPU here has compute capability {real[0]}.{real[1]}; the course "
            f"can behave as an older one, down to {MIN_CAPABILITY[0]}.{MIN_CAPABILITY[1]}"
        )
    return major, minor


def _interpret_asked() -> bool:
    """Whether TRITON_INTERPRET turns Triton's interpreter on, read as Triton reads it: 1, true, yes, y or on, in any
    case (TRITON_INTERPRET=true on a GPU runs every kernel in the interpreter, which a check for "1" alone missed)."""
    return os.environ.get("TRITON_INTERPRET", "").lower() in ("1", "true", "yes", "y", "on")


def _probe_gpu():
    """Returns (usable, reason, torch.cuda properties or None)."""
    if _interpret_asked():
        return False, f"TRITON_INTERPRET={os.environ['TRITON_INTERPRET']} was set", None
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
        _name_skeletons_under_errors()
    if seed is not None:
        import torch

        torch.manual_seed(seed)
    if not quiet:
        print(_ENV.describe())
    return _ENV


def _name_skeletons_under_errors() -> None:
    """In a notebook: under a cell's error, the exercises it reached that are still skeletons (utils.stubs), and
    the mistake that probably caused an error of Triton's (utils.crashes)."""
    shell = sys.modules.get("IPython")  # never imported here: a plain script or a lesson module must not load it
    ipython = shell.get_ipython() if shell is not None and hasattr(shell, "get_ipython") else None
    if ipython is not None and hasattr(ipython, "events"):
        from . import crashes, stubs

        stubs.watch_cells(ipython)
        crashes.watch_cells(ipython)  # and what a crash of Triton's probably means (utils.crashes)


def _enable_colab_widgets() -> None:
    """Colab shows ipywidgets 8 only through its custom widget manager."""
    if "google.colab" in sys.modules:
        try:
            from google.colab import output

            output.enable_custom_widget_manager()
        except Exception:  # an older Colab: widgets may not render, everything else works
            pass


def _quiet_interpreter_nan_warnings() -> None:
    """NumPy warns "invalid value encountered" when the interpreter meets the NaN that utils.nan_empty fills
    outputs with; utils.check reports NaN itself, so those warnings are noise above the learner's message."""
    import warnings

    warnings.filterwarnings(
        "ignore", message="invalid value encountered", category=RuntimeWarning, module=r"triton\.runtime\.interpreter"
    )


def _patch_triton_language_once_per_launch() -> None:
    """Triton's interpreter swaps triton.language's functions for interpreted ones at each launch, and puts them back
    after it. It does the same swap again at every call of one @triton.jit function from another, inside the
    launch, where the launch's swap is already in place: a scan of the language's modules (inspect.getmembers)
    each time, and about a quarter of the interpreter's time in kernels that call small helpers in their loops (lesson
    12's int4 GEMV: five helper calls a step). Here a helper's call skips the swap when the launch in progress has
    already swapped every language module the helper sees; anything else goes through Triton's own code. A Triton
    without these internals is left as it is (the interpreter is only slower)."""
    try:
        from triton.runtime import interpreter
    except ImportError:
        return
    original = getattr(interpreter, "_patch_lang", None)
    scope_class = getattr(interpreter, "_LangPatchScope", None)
    if original is None or scope_class is None or getattr(original, "once_per_launch", False):
        return
    languages = (interpreter.tl, interpreter.tl.core)
    launches = []  # the language modules each launch in progress has swapped

    seen = {}  # function -> the language modules among its globals (a function's imports do not change)

    def seen_by(fn) -> frozenset[int]:
        if fn not in seen:
            seen[fn] = frozenset(id(v) for v in fn.__globals__.values() if any(v is lang for lang in languages))
        return seen[fn]

    def patch_lang(fn):
        modules = seen_by(fn)
        if launches and modules and modules <= launches[-1]:
            return scope_class()  # a helper called inside the launch: already swapped, nothing to put back
        scope = original(fn)
        if launches:  # a helper that sees another module (triton.language.core, for tl.sum): Triton swaps it and
            launches[-1] |= modules  # never puts it back, so it stays swapped for the rest of the launch
            return scope
        launches.append(set(modules))  # a launch: its scope is put back when the launch ends
        restore = scope.restore

        def restore_and_end():
            try:
                restore()
            finally:
                launches.pop()

        scope.restore = restore_and_end
        return scope

    patch_lang.once_per_launch = True
    interpreter._patch_lang = patch_lang
    _read_the_language_once(interpreter)
    _np_dtypes_once(interpreter)


def _np_dtypes_once(interpreter) -> None:
    """Every operation the interpreter runs asks _get_np_dtype for its operands' NumPy dtype, and each call builds
    Triton's table of 19 dtypes again (a hash of each): about 7 % of a kernel's time under the interpreter. Here each
    answer is kept, by the element dtype (the original answers a block of a dtype as that dtype); pointers, which
    do not hash, go to Triton's own function."""
    original = getattr(interpreter, "_get_np_dtype", None)
    if original is None or getattr(original, "kept", False):
        return
    block_type, pointer_type = interpreter.tl.block_type, interpreter.tl.pointer_type
    known = {}

    def get_np_dtype(tt_dtype):
        key = tt_dtype.element_ty if isinstance(tt_dtype, block_type) else tt_dtype
        if isinstance(key, pointer_type):
            return original(key)
        found = known.get(key)
        if found is None:
            found = known[key] = original(key)
        return found

    get_np_dtype.kept = original
    interpreter._get_np_dtype = get_np_dtype


def _read_the_language_once(interpreter) -> None:
    """The swap at each launch lists every member of triton.language, triton.language.core, tl.tensor, tl.math and
    the tensor descriptor class (inspect.getmembers: dir(), a getattr and a sort each, seven lists a launch) to find
    its builtins, which never change: here they are listed once, and each launch swaps the builtins among them as
    Triton's own code does. A member already swapped (Triton leaves some of triton.language.core swapped after a
    helper's call) is known by the builtin it wraps, so the list is the same whenever it is read."""
    patch_builtin, patch_attr = getattr(interpreter, "_patch_builtin", None), getattr(interpreter, "_patch_attr", None)
    if patch_builtin is None or patch_attr is None:
        return
    tl = interpreter.tl
    is_builtin = tl.core.is_builtin

    def builtins_of(package) -> list[str]:
        names = []
        for name, member in inspect.getmembers(package):
            wrapped = (getattr(member, "__kwdefaults__", None) or {}).get("member")  # a swapped member's builtin
            if is_builtin(member) or is_builtin(wrapped):
                names.append(name)
        return names

    packages = (tl, tl.tensor, tl.math, tl.core, getattr(tl.core, "tensor_descriptor_base", None))
    known = {id(package): builtins_of(package) for package in packages if package is not None}

    def patch_builtin_listed(package, builder, scope):
        names = known.get(id(package))
        if names is None:
            return patch_builtin(package, builder, scope)
        for name in names:
            member = getattr(package, name, None)
            if is_builtin(member):
                patch_attr(package, name, member, builder, scope)

    patch_builtin_listed.triton_own = patch_builtin
    interpreter._patch_builtin = patch_builtin_listed


def _detect() -> Env:
    usable, reason, props = _probe_gpu()
    if not usable:
        if "triton" in sys.modules and not _interpret_asked():
            print(
                "note: triton was imported before utils.setup(); kernels defined before this call are not "
                "interpreted. Restart the kernel and run the setup cell first."
            )
        os.environ["TRITON_INTERPRET"] = "1"
        _quiet_interpreter_nan_warnings()
        _patch_triton_language_once_per_launch()
        from . import parity

        parity.install()  # and refuses what a GPU's compiler refuses, in its words
    import torch
    import triton

    versions = {
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": ".".join(map(str, sys.version_info[:3])),
    }
    if not usable:
        return Env(device="cpu", interpret=True, dtype=torch.float16, versions=versions, reason=reason)
    real = (props.major, props.minor)
    cc = _capability_override(real)
    # Triton's tl.dot takes bf16 from Ampere (8.0) on; T4 (7.5) teaches with fp16 instead.
    dtype = torch.bfloat16 if cc >= (8, 0) else torch.float16
    smem = getattr(props, "shared_memory_per_block_optin", None) or SHARED_MEMORY_BYTES.get(real, 48 * 1024)
    if cc != real:
        smem = min(smem, SHARED_MEMORY_BYTES.get(cc, 48 * 1024))
    return Env(
        device="cuda",
        interpret=False,
        gpu_name=props.name,
        capability=cc,
        sm_count=props.multi_processor_count,
        memory_gb=props.total_memory / 1e9,
        dtype=dtype,
        versions=versions,
        real_capability=real,
        shared_memory_bytes=smem,
    )


def broken_cuda_context():
    """None while this process's CUDA context works (or it has none); else the error a sync raises. A kernel that
    reads or writes outside its buffers (a planted mistake, a learner's) may break the context for good: every later
    CUDA call of the process fails with the same error."""
    import torch

    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None
    try:
        torch.cuda.synchronize()
    except RuntimeError as error:  # torch.AcceleratorError is one: "an illegal memory access was encountered"
        return str(error).strip().splitlines()[0]
    return None


def current() -> Env:
    """The Env of this process, running :func:`setup` quietly if nobody has yet."""
    return _ENV if _ENV is not None else setup(quiet=True, seed=None)
