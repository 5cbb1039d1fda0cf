"""The lessons' code as modules: ``lessons/lNN_name.py``, generated from the ``export`` cells of each solution.

``load("05")`` imports ``lessons.l05_matmul``; ``checkpoint`` hands a learner who fell behind the reference
answers; ``solution_source`` shows one of them as the solution notebook has it now (for ``utils.hints.answer``).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "solutions"
LESSONS = ROOT / "lessons"
MARKER = re.compile(r"^\s*### (BEGIN|END) SOLUTION\s*$")


def notebook_path(lesson: str, folder: Path = SOLUTIONS) -> Path:
    """``"05"`` or ``"05_matmul"`` -> the notebook's path."""
    hits = sorted(folder.glob(f"{lesson}*.ipynb"))
    if len(hits) != 1:
        have = ", ".join(p.stem for p in sorted(folder.glob("*.ipynb")))
        raise FileNotFoundError(f"no single lesson matches {lesson!r} in {folder} (lessons: {have})")
    return hits[0]


def module_path(lesson: str, folder: Path = LESSONS) -> Path:
    """``"05"`` -> ``lessons/l05_matmul.py``."""
    hits = sorted(folder.glob(f"l{lesson}*.py"))
    if len(hits) != 1:
        have = ", ".join(p.stem for p in sorted(folder.glob("l[0-9]*.py")))
        raise FileNotFoundError(
            f"no single lesson module matches {lesson!r} in {folder} (modules: {have or 'none'}). The modules are "
            f"generated from solutions/ by `make notebooks`."
        )
    return hits[0]


def load(lesson: str):
    """The lesson's module (``lessons.lNN_name``), imported once per process like any other module."""
    path = module_path(lesson)
    if path.parent == LESSONS:
        return importlib.import_module(f"lessons.{path.stem}")
    # a lessons folder elsewhere (the tests' fake lessons): imported from its file under a private name
    name = f"_lessons_{path.parent.name}_{path.stem}"
    if name not in sys.modules:
        from .mode import current

        current()  # the interpreter must be decided before any @triton.jit function is defined
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def checkpoint(lesson: str, *names: str):
    """The reference versions of ``names`` from lesson ``lesson``, to carry on when you fell behind.

    Every later step of a lesson (and every later lesson) only needs the names it uses to exist. If your kernel
    does not pass its check yet and you would rather move on than fall further behind, take the reference one::

        add_kernel, add = utils.hints.checkpoint("02", "add_kernel", "add")   # several names -> a tuple
        softmax = utils.hints.checkpoint("04", "softmax")                      # one name -> that object

    and run the next cells as if you had written them. Come back to your own version later: your cell is still
    there, and re-running it puts your definition back.

    On a GPU, a kernel that has already run keeps the ``@triton.jit`` helpers it was compiled with. When you take
    a helper that your kernels have already called, take those kernels' launchers too, so nothing stale runs::

        tile_dot, matmul_tiled = utils.hints.checkpoint("05", "tile_dot", "matmul_tiled")

    Kernels defined further down compile on their first call and pick up the helper you took. Under the
    interpreter nothing is compiled, and this does not arise.

    Raises ``AttributeError`` for a name the lesson does not export (see its cells tagged ``export``).
    """
    module = load(lesson)
    missing = [n for n in names if not hasattr(module, n)]
    if missing:
        raise AttributeError(f"lesson {lesson} exports no {', '.join(missing)} (only cells tagged 'export' are)")
    values = tuple(getattr(module, n) for n in names)
    return values[0] if len(values) == 1 else values


def _cells(path: Path):
    return json.loads(path.read_text())["cells"]


def _source(cell) -> str:
    src = cell["source"]
    return "".join(src) if isinstance(src, list) else src


def solution_source(lesson: str, name: str) -> str:
    """The source of the top-level definition ``name`` (function, class or assignment) in the lesson's solution."""
    for cell in _cells(notebook_path(lesson)):
        if cell["cell_type"] != "code":
            continue
        src = "\n".join(line for line in _source(cell).splitlines() if not MARKER.match(line))
        try:
            tree = ast.parse(src)
        except SyntaxError:  # cells with IPython magics
            continue
        for node in tree.body:
            defined = []
            if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
                defined = [node.name]
            elif isinstance(node, ast.Assign):
                defined = [t.id for t in node.targets if isinstance(t, ast.Name)]
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                defined = [node.target.id]
            if name in defined:
                start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
                return "\n".join(src.splitlines()[start - 1 : node.end_lineno])
    raise KeyError(f"lesson {lesson}'s solution defines no {name!r} at the top level of a cell")
