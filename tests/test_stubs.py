"""utils.stubs: under a notebook cell's error, the exercises it reached that are still the course's skeletons."""

import itertools
import json
import linecache
from pathlib import Path
from types import SimpleNamespace

import pytest

from utils import stubs

ROOT = Path(__file__).resolve().parent.parent
_cells = itertools.count()


def _skeleton_cell(notebook: str, name: str) -> str:
    """The participant notebook's code cell that defines `name` as a skeleton."""
    cells = json.loads((ROOT / "notebooks" / notebook).read_text())["cells"]
    for cell in cells:
        source = "".join(cell["source"])
        if cell["cell_type"] == "code" and f"def {name}(" in source and stubs.MARKER in source:
            return source
    raise LookupError(f"{notebook} has no skeleton of {name}")


def _run_cell(source: str, namespace: dict) -> None:
    """Runs source as a notebook cell: its own file name in linecache, as IPython gives one, so that
    inspect.getsource finds the functions it defines; module __main__."""
    filename = f"<cell-{next(_cells)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    exec(compile(source, filename, "exec"), namespace)


def _notebook_namespace():
    namespace = {"__name__": "__main__"}
    _run_cell("import triton\nimport triton.language as tl\nimport torch\n", namespace)
    return namespace


def test_a_kernel_left_as_the_skeleton_is_named_through_the_launcher_that_uses_it():
    ns = _notebook_namespace()
    _run_cell(_skeleton_cell("03_vector_add.ipynb", "add_kernel_fixed"), ns)
    _run_cell("def add_fixed(x, y):\n    return add_kernel_fixed[(1,)](x, y, x, 1, BLOCK_SIZE=16)\n", ns)
    text = stubs.note("check_add(add_fixed)", ns)
    assert "`add_kernel_fixed`" in text and "still the skeleton" in text, text


def test_a_written_exercise_is_not_named_even_with_the_marker_kept():
    """A learner who keeps the `# YOUR CODE HERE` line and writes below it has a function of their own."""
    ns = _notebook_namespace()
    cell = _skeleton_cell("03_vector_add.ipynb", "add_kernel_fixed")
    written = cell.replace("    pass", "    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)")
    assert written != cell
    _run_cell(written, ns)
    _run_cell("def add_fixed(x, y):\n    return add_kernel_fixed\n", ns)
    assert stubs.note("check_add(add_fixed)", ns) == ""


def test_methods_of_a_class_left_as_skeletons_are_named():
    ns = _notebook_namespace()
    _run_cell("from collections import deque\nfrom dataclasses import dataclass, field\n", ns)
    cell = _skeleton_cell("13_serving.ipynb", "allocate")
    _run_cell("Request = object\n" + cell, ns)
    text = stubs.note("check_block_pool(BlockPool)", ns)
    assert "`BlockPool.allocate`" in text, text


def test_a_cell_that_names_nothing_unfinished_gets_no_note():
    ns = _notebook_namespace()
    _run_cell("def helper():\n    return 1\n", ns)
    assert stubs.note("helper()", ns) == ""
    assert stubs.note("this is not python (", ns) == ""


def test_the_note_is_printed_under_a_failing_cell_only(capsys):
    """watch_cells registers on IPython's events: after a cell that raised, the note (when a skeleton is reached);
    after one that ran, nothing."""
    handlers = {}
    ipython = SimpleNamespace(user_ns=_notebook_namespace())
    ipython.events = SimpleNamespace(register=lambda event, fn: handlers.setdefault(event, fn))
    _run_cell(_skeleton_cell("03_vector_add.ipynb", "add_kernel_fixed"), ipython.user_ns)
    stubs.watch_cells(ipython)
    stubs.watch_cells(ipython)  # registered once
    cell = "add_kernel_fixed"
    for error, printed in ((None, False), (ValueError("wrong"), True)):
        handlers["pre_run_cell"](SimpleNamespace(raw_cell=cell))
        handlers["post_run_cell"](SimpleNamespace(error_in_exec=error, error_before_exec=None))
        out = capsys.readouterr().out
        assert ("`add_kernel_fixed` is still the skeleton" in out) == printed, out


@pytest.mark.parametrize("notebook", sorted(p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")))
def test_every_skeleton_of_the_participant_notebooks_is_known(notebook):
    """Each function a participant notebook leaves as `# YOUR CODE HERE` is one stubs.skeletons() knows, so that
    the note can name it (the notebooks are generated from solutions/ by the same strip_solutions)."""
    import ast

    for cell in json.loads((ROOT / "notebooks" / notebook).read_text())["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] != "code" or stubs.MARKER not in source:
            continue
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef):
                segment = ast.get_source_segment(source, node, padded=True)
                if stubs.MARKER in segment:
                    assert stubs.normal(segment) in stubs.skeletons(), f"{notebook}: {node.name}"
