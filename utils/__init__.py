"""Triton, the hard way: the course's harness. One module per job:

mode (GPU or interpreter), checking (feedback that teaches), timing, roofline, pictures, lessons (solutions as
modules), notebooks (participant copies), hints and explorers (widgets).
"""
from .checking import check, nan_empty, nan_like, require, require_same_shape
from .mode import Env, setup
from . import hints  # noqa: E402  (so `utils.hints.answer(...)` works after `import utils`)

__all__ = ["setup", "Env", "check", "nan_empty", "nan_like", "require", "require_same_shape"]
