"""utils.hints: answers come from the solution notebooks as they are now, and fail clearly for unknown names."""

from __future__ import annotations

import ast
import re
import subprocess
import sys

import nbformat
import pytest

import utils.hints as hints
import utils.lessons as lessons
import utils.notebooks as notebooks

KERNEL = '''\
@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    """Multiplies by two. A docstring quoting a fence: ```"""
    ### BEGIN SOLUTION
    pid = tl.program_id(0)
    offs = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    tl.store(out_ptr + offs, 2 * tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)
    ### END SOLUTION'''

HELPER = """\
def double(values):
    ### BEGIN SOLUTION
    return [{factor} * v for v in values]
    ### END SOLUTION"""


def _write_lesson(folder, factor=2):
    """A tiny solution notebook ``99_fake.ipynb``: markdown, a cell with a shell escape, a kernel, an export cell."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("# 99 — Fake\n```python\ndef double(values): return None\n```"),
        nbformat.v4.new_code_cell("!echo a shell escape: not Python, skipped"),
        nbformat.v4.new_code_cell("import triton\nimport triton.language as tl\n\n\n" + KERNEL),
        nbformat.v4.new_code_cell(
            f"BLOCK_SIZE = 128\n\n\n{HELPER.format(factor=factor)}", metadata={"tags": ["export"]}
        ),
    ]
    nbformat.write(nb, folder / "99_fake.ipynb")


def _unmarked(src: str) -> str:
    return "\n".join(line for line in src.splitlines() if "### " not in line)


@pytest.fixture
def fake_solutions(tmp_path, monkeypatch):
    """utils.lessons pointed at a solutions folder in tmp_path holding lesson 99, and its generated module."""
    _write_lesson(tmp_path)
    modules = tmp_path / "lessons"
    notebooks.write_modules(tmp_path, modules, log=lambda *_: None)
    real_notebook_path, real_module_path = lessons.notebook_path, lessons.module_path
    monkeypatch.setattr(lessons, "SOLUTIONS", tmp_path)
    monkeypatch.setattr(lessons, "notebook_path", lambda lesson, folder=tmp_path: real_notebook_path(lesson, folder))
    monkeypatch.setattr(lessons, "module_path", lambda lesson, folder=modules: real_module_path(lesson, folder))
    monkeypatch.setattr(hints, "_in_ipython", lambda: False)
    yield tmp_path
    sys.modules.pop("_lessons_lessons_l99_fake", None)  # put there by lessons.load


def test_answer_prints_the_solution_source_without_markers(fake_solutions, capsys):
    hints.answer("99", "scale_kernel")
    out = capsys.readouterr().out
    assert _unmarked(KERNEL) in out  # decorator, signature, docstring and body, exactly
    assert "### BEGIN" not in out and "### END" not in out
    assert "double" not in out  # only the definition asked for


def test_answer_follows_the_solution_when_it_changes(fake_solutions, capsys):
    hints.answer("99", "double")
    assert "return [2 * v for v in values]" in capsys.readouterr().out
    _write_lesson(fake_solutions, factor=3)  # the author edits the solution: the hint must follow, not a copy
    hints.answer("99", "double")
    out = capsys.readouterr().out
    assert "return [3 * v for v in values]" in out and "2 * v" not in out


def test_answer_finds_assignments_and_skips_markdown(fake_solutions, capsys):
    hints.answer("99", "BLOCK_SIZE")
    assert capsys.readouterr().out.rstrip().endswith("BLOCK_SIZE = 128")
    hints.answer("99", "double")  # the markdown cell's `def double` must not be taken for the solution's
    assert "return None" not in capsys.readouterr().out


def test_answer_in_a_notebook_displays_highlighted_markdown(fake_solutions, monkeypatch):
    shown = []
    monkeypatch.setattr(hints, "_in_ipython", lambda: True)
    monkeypatch.setattr("IPython.display.display", lambda obj, raw=False: shown.append((obj, raw)))
    assert hints.answer("99", "scale_kernel") is None  # nothing returned: the cell does not echo it twice
    ((bundle, raw),) = shown
    assert raw and set(bundle) == {"text/markdown", "text/plain"}
    md = bundle["text/markdown"]
    fence = re.search(r"^(`{3,})python$", md, re.M).group(1)
    assert len(fence) > 3, "the docstring holds ``` so the fence must be longer"
    body = md.split(f"{fence}python\n", 1)[1].rsplit(f"\n{fence}", 1)[0]
    assert body == _unmarked(KERNEL)
    ast.parse(body)  # what the learner sees is valid Python


def test_unknown_name_fails_clearly(fake_solutions):
    with pytest.raises(KeyError, match=r"lesson 99.*'no_such_kernel'"):
        hints.answer("99", "no_such_kernel")


def test_unknown_lesson_fails_clearly(fake_solutions):
    with pytest.raises(FileNotFoundError, match=r"'42'.*99_fake"):
        hints.answer("42", "add_kernel")


def test_checkpoint_returns_the_reference_definitions(fake_solutions):
    double = hints.checkpoint("99", "double")
    assert double([1, 5]) == [2, 10]
    block, double_again = hints.checkpoint("99", "BLOCK_SIZE", "double")
    assert block == 128 and double_again is double
    with pytest.raises(AttributeError, match="no_such_name"):
        hints.checkpoint("99", "no_such_name")
    with pytest.raises(AttributeError, match="scale_kernel"):  # defined in a cell that is not tagged export
        hints.checkpoint("99", "scale_kernel")


# -- the real lessons: every hint a notebook offers must resolve ------------------------------------------------

CALL = re.compile(r"""\b(answer|checkpoint)\(\s*["'](\d\d)["']((?:\s*,\s*["']\w+["'])+)\s*\)""")


def _hint_calls():
    calls = set()
    for path in sorted(lessons.SOLUTIONS.glob("*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            for kind, lesson, names in CALL.findall(cell.source):
                for name in re.findall(r"\w+", names):
                    calls.add((path.stem, kind, lesson, name))
    return sorted(calls)


@pytest.mark.parametrize(
    "where, kind, lesson, name",
    _hint_calls()
    or [
        pytest.param(
            None,
            None,
            None,
            None,
            marks=pytest.mark.skip(reason="no solution notebook calls answer()/checkpoint() yet"),
        )
    ],
)
def test_every_hint_in_the_solutions_resolves(where, kind, lesson, name):
    source = lessons.solution_source(lesson, name)  # KeyError names the lesson and the missing definition
    assert name in source
    if kind == "checkpoint":
        exported = lessons.module_path(lesson).read_text()
        assert re.search(rf"^(def|class) {name}\b|^{name}\s*[:=]", exported, re.M), (
            f"{where} calls checkpoint({lesson!r}, {name!r}) but lesson {lesson} defines {name} in a cell not "
            f"tagged export, so checkpoint cannot return it"
        )


def test_lessons_that_point_at_utils_hints_can_reach_it():
    """A learner types `utils.hints.answer(...)` where the lesson says so: `utils.hints` must exist by then."""
    probe = "import utils; print(hasattr(utils, 'hints'))"
    exposed = (
        subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=lessons.ROOT
        ).stdout.strip()
        == "True"
    )
    unreachable = []
    for path in sorted(lessons.SOLUTIONS.glob("*.ipynb")):
        cells = nbformat.read(path, as_version=4).cells
        mentions = any("utils.hints." in cell.source for cell in cells)
        imports = any(
            re.search(r"^\s*(import utils\.hints|from utils import .*\bhints\b)", cell.source, re.M)
            for cell in cells
            if cell.cell_type == "code"
        )
        if mentions and not (exposed or imports):
            unreachable.append(path.stem)
    assert not unreachable, (
        f"{', '.join(unreachable)} tell the learner to call utils.hints.answer/checkpoint, but `import utils` does "
        f"not import utils.hints and no code cell of theirs does: add `from . import hints` to utils/__init__.py "
        f"(or `import utils.hints` to the lessons' import cell)"
    )
