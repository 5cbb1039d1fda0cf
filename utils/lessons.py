"""The solution notebooks as importable modules: the one source of every kernel, reference and launcher.

``load("05")`` runs the cells tagged ``export`` of ``solutions/05_*.ipynb`` as a module, so a later lesson, a
benchmark or a test uses exactly the code the lesson teaches. ``checkpoint`` hands a learner who fell behind the
reference answers; ``solution_source`` shows one of them.
"""
from __future__ import annotations

import ast
import hashlib
import importlib.util
import json
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "solutions"
MARKER = re.compile(r"^\s*### (BEGIN|END) SOLUTION\s*$")


def notebook_path(lesson: str, folder: Path = SOLUTIONS) -> Path:
    """``"05"`` or ``"05_matmul"`` -> the notebook's path."""
    hits = sorted(folder.glob(f"{lesson}*.ipynb"))
    if len(hits) != 1:
        have = ", ".join(p.stem for p in sorted(folder.glob("*.ipynb")))
        raise FileNotFoundError(f"no single lesson matches {lesson!r} in {folder} (lessons: {have})")
    return hits[0]


def _cells(path: Path):
    return json.loads(path.read_text())["cells"]


def _source(cell) -> str:
    src = cell["source"]
    return "".join(src) if isinstance(src, list) else src


def export_source(lesson: str) -> str:
    """The code of the lesson's ``export`` cells, markers dropped, joined in order."""
    parts = []
    for cell in _cells(notebook_path(lesson)):
        if cell["cell_type"] == "code" and "export" in cell.get("metadata", {}).get("tags", []):
            lines = [line for line in _source(cell).splitlines() if not MARKER.match(line)]
            parts.append("\n".join(lines))
    return "\n\n\n".join(parts) + "\n"


_LOADED: dict[str, object] = {}


def load(lesson: str):
    """Imports the lesson's exported definitions as a module (cached per process)."""
    from .mode import current

    current()  # the interpreter must be decided before any @triton.jit function is defined
    path = notebook_path(lesson)
    src = export_source(lesson)
    key = path.stem
    if key in _LOADED:
        return _LOADED[key]
    # Triton reads a kernel's source with inspect.getsource, so the module lives in a real file.
    digest = hashlib.sha1(src.encode()).hexdigest()[:12]
    folder = Path(tempfile.gettempdir()) / "triton-hard-way"
    folder.mkdir(exist_ok=True)
    file = folder / f"lesson_{key}_{digest}.py"
    if not file.exists():
        file.write_text(f"# generated from {path.relative_to(ROOT)}: edit the notebook, not this file\n" + src)
    name = f"lesson_{key}"
    spec = importlib.util.spec_from_file_location(name, file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    _LOADED[key] = module
    return module


def checkpoint(lesson: str, *names: str):
    """The reference answers ``names`` from a lesson, to carry on after an exercise you could not finish.

    ``add_kernel, add = checkpoint("03", "add_kernel", "add")``
    """
    module = load(lesson)
    missing = [n for n in names if not hasattr(module, n)]
    if missing:
        raise AttributeError(f"lesson {lesson} exports no {', '.join(missing)}")
    values = tuple(getattr(module, n) for n in names)
    return values[0] if len(values) == 1 else values


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
                return "\n".join(src.splitlines()[start - 1:node.end_lineno])
    raise KeyError(f"lesson {lesson}'s solution defines no {name!r} at the top level of a cell")
