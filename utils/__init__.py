"""Triton, the hard way: the course's harness. One module per job:

mode (GPU or interpreter), parity (the interpreter as strict as the compiler), checking (feedback that teaches),
crashes (what an error of Triton's probably means), gpu_cases (would a check's suspects fail on a GPU, in bf16),
memcheck (bounds checking under the interpreter), order (its programs in another order, as a GPU may run them),
offline (compiling for a GPU that is not there), launch (a kernel launch prepared once, repeated without
Triton's per-call work), timing, roofline, pictures, lessons (solutions as modules),
notebooks (participant copies), hints and explorers (widgets).
"""

from . import hints  # so that `utils.hints.answer(...)` works after `import utils`
from .checking import (
    MAX_BLOCK,
    MAX_GRID_YZ,
    Scaled,
    as_int,
    check,
    launched_into,
    nan_empty,
    nan_like,
    overlaps,
    refuses,
    require,
    require_bool,
    require_int,
    require_int32_offsets,
    require_launch_options,
    require_number,
    require_out,
    require_power_of_two,
    require_same_shape,
    require_tile,
    returned,
)
from .memcheck import watch_memory
from .mode import Env, dtype_name, setup

__all__ = [
    "hints",
    "offline",
    "setup",
    "Env",
    "dtype_name",
    "check",
    "launched_into",
    "returned",
    "Scaled",
    "nan_empty",
    "nan_like",
    "refuses",
    "overlaps",
    "require",
    "require_out",
    "require_same_shape",
    "require_tile",
    "MAX_GRID_YZ",
    "MAX_BLOCK",
    "require_power_of_two",
    "require_launch_options",
    "require_number",
    "require_bool",
    "as_int",
    "require_int",
    "require_int32_offsets",
    "watch_memory",
]


def __getattr__(name):
    """`utils.offline` on first use: imported lazily, so that `python -m utils.offline` runs it fresh."""
    if name == "offline":
        import importlib

        return importlib.import_module(".offline", __name__)
    raise AttributeError(f"module 'utils' has no attribute {name!r}")
