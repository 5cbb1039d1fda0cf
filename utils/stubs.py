"""Exercises a learner has not written yet, named when a cell that uses them fails.

A participant notebook starts with every exercise a skeleton: ``# YOUR CODE HERE`` and ``pass`` (inside a
``@triton.jit`` function) or ``raise NotImplementedError``. A check run on a kernel whose helper is still a skeleton
fails, rightly, but its hint is about what the skeleton's output looks like (NaN rows, say) and may blame a mistake
the learner never made. So, in a notebook, :func:`watch_cells` (called by ``utils.setup()``) adds a note under any
error: the skeletons that the failing cell reaches, through the functions, kernels and classes it names and those
they use in turn.

A function is a skeleton when its source is, line for line, one the course generated (``utils.notebooks``
strips the solutions of ``solutions/`` into those): a learner who kept the ``# YOUR CODE HERE`` line and wrote
below it has a function of their own.
"""

from __future__ import annotations

import ast
import functools
import inspect
import textwrap
import types

MARKER = "# YOUR CODE HERE"


def normal(source: str) -> str:
    """Source compared line by line: dedented, no decorators, no blank lines, no trailing spaces."""
    lines = [line.rstrip() for line in textwrap.dedent(source).splitlines()]
    while lines and lines[0].lstrip().startswith("@"):
        lines.pop(0)
    return "\n".join(line for line in lines if line)


@functools.lru_cache(maxsize=1)
def skeletons() -> frozenset:
    """The normalised source of every function (and method) that some exercise of the course leaves as a skeleton."""
    import json  # not nbformat: its import (jsonschema's format checkers) takes a second, at a learner's first error

    from .notebooks import ROOT, strip_solutions

    found = set()
    for path in sorted((ROOT / "solutions").glob("*.ipynb")):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            text = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
            if cell["cell_type"] != "code" or "BEGIN SOLUTION" not in text:
                continue
            source = strip_solutions(text, where=path.name)
            try:
                tree = ast.parse(source)
            except SyntaxError:  # a cell with IPython magics: its functions are not exercises
                continue
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    segment = ast.get_source_segment(source, node, padded=True)
                    if segment and MARKER in segment:
                        found.add(normal(segment))
    return frozenset(found)


def _python_function(obj):
    """The Python function behind obj (a function, a method, a Triton kernel), or None."""
    if isinstance(obj, (types.FunctionType, types.MethodType)):
        return getattr(obj, "__func__", obj)
    fn = getattr(obj, "fn", None)  # triton.jit's JITFunction, or the interpreter's InterpretedFunction
    if type(obj).__module__.startswith("triton") and isinstance(fn, types.FunctionType):
        return fn
    return None


def _names(code: types.CodeType):
    """The global names a function's code (nested functions and comprehensions included) refers to."""
    yield from code.co_names
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _names(const)


def unfinished(names, namespace: dict, module: str = "__main__", limit: int = 500) -> list[str]:
    """The skeletons reachable from ``names`` in ``namespace``: following the global names each function, kernel or
    class (defined in ``module``, the notebook) uses, in the order first met."""
    if not skeletons():
        return []
    found, seen = [], set()
    todo = [(n, namespace[n]) for n in names if n in namespace]
    while todo and len(seen) < limit:
        name, obj = todo.pop(0)
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if inspect.isclass(obj):
            if obj.__module__ == module:
                todo += [(f"{obj.__name__}.{n}", v) for n, v in vars(obj).items() if _python_function(v) or
                         isinstance(v, (staticmethod, classmethod))]  # fmt: skip
            continue
        if isinstance(obj, (staticmethod, classmethod)):
            obj = obj.__func__
        fn = _python_function(obj)
        if fn is None or fn.__module__ != module:
            continue
        try:
            source = inspect.getsource(fn)
        except (OSError, TypeError):
            continue
        if MARKER in source and normal(source) in skeletons():
            found.append(name)
        todo += [(n, fn.__globals__[n]) for n in dict.fromkeys(_names(fn.__code__)) if n in fn.__globals__]
    return found


def note(cell_source: str, namespace: dict) -> str:
    """What to print under an error of the cell ``cell_source``: the skeletons it reaches, or '' when none."""
    try:
        tree = ast.parse(cell_source)
    except SyntaxError:
        return ""
    names = dict.fromkeys(node.id for node in ast.walk(tree) if isinstance(node, ast.Name))
    found = unfinished(names, namespace)
    if not found:
        return ""
    listed = ", ".join(f"`{n}`" for n in found)
    return (
        f"Not written yet: {listed} {'is' if len(found) == 1 else 'are'} still the skeleton (# YOUR CODE HERE). This "
        f"cell ran {'it' if len(found) == 1 else 'them'} as the skeleton left {'it' if len(found) == 1 else 'them'}, "
        f"so the error above may blame a mistake you have not made: write "
        f"{'it' if len(found) == 1 else 'them'} first (utils.hints shows a nudge)."
    )


def watch_cells(ipython) -> None:
    """In an IPython kernel: after every error, the note above (when a skeleton is involved). Registered once."""
    if getattr(ipython, "_hard_way_stubs", False):
        return
    ipython._hard_way_stubs = True
    last = {"cell": ""}

    def remember(info):
        last["cell"] = getattr(info, "raw_cell", "") or ""

    def after(result):
        if result.error_in_exec is None and result.error_before_exec is None:
            return
        try:
            text = note(last["cell"], ipython.user_ns)
        except Exception:  # a note must never hide the error itself
            text = ""
        if text:
            print(f"\n⚠ {text}")

    ipython.events.register("pre_run_cell", remember)
    ipython.events.register("post_run_cell", after)
