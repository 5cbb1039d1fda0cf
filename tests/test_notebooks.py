"""utils.notebooks: participant copies are generated faithfully, and a learner's edits are never lost silently."""

import functools
import importlib.util
import json
import os
import re
import subprocess

import nbformat
import pytest
import torch

from utils import notebooks as gen
from utils.mode import current

KERNEL_CELL = """@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK_SIZE: tl.constexpr):
    ### BEGIN SOLUTION
    offsets = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask), mask=mask)
    ### END SOLUTION"""

LAUNCHER_CELL = """def add(x, y):
    ### BEGIN SOLUTION
    return x + y
    ### END SOLUTION"""


def solution_nb(extra_cells=()):
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("# 99 — Test lesson\nPredict: ### BEGIN SOLUTION\n"),
        nbformat.v4.new_code_cell(KERNEL_CELL, metadata={"tags": ["export", "exercise"]}),
        nbformat.v4.new_code_cell(LAUNCHER_CELL, metadata={"tags": ["export", "exercise"]}),
        nbformat.v4.new_markdown_cell("Your prediction:\n### BEGIN SOLUTION\nmemory-bound\n### END SOLUTION"),
        nbformat.v4.new_code_cell("print('instructor only')", metadata={"tags": ["solution-only"]}),
        *extra_cells,
    ]
    nb.cells[1].outputs = [nbformat.v4.new_output("stream", text="something")]
    nb.cells[1].execution_count = 7
    return nb


def test_strip_inside_jit_uses_pass_elsewhere_raise():
    kernel = gen.strip_solutions(KERNEL_CELL)
    assert "    # YOUR CODE HERE\n    pass" in kernel and "tl.store" not in kernel
    launcher = gen.strip_solutions(LAUNCHER_CELL)
    assert "    # YOUR CODE HERE\n    raise NotImplementedError" in launcher and "x + y" not in launcher
    top = gen.strip_solutions("a = 1\n### BEGIN SOLUTION\nb = a * 2\n### END SOLUTION\nprint(b)")
    assert top == "a = 1\n# YOUR CODE HERE\nraise NotImplementedError\nprint(b)"
    folded = gen.strip_solutions("x\n### BEGIN SOLUTION\nthe worked answer\n### END SOLUTION\ny", "markdown")
    # a prediction's worked answer stays, folded, to open after writing one's own and measuring
    assert folded.startswith("x\n*Your answer here.*\n\n<details><summary>Worked answer")
    assert folded.endswith("the worked answer\n\n</details>\ny") and "BEGIN" not in folded


def test_presenter_copy_shows_no_markers(tmp_path):
    src = tmp_path / "solutions"
    write_solution(src, solution_nb())
    written = gen.write_presenter_copies(tmp_path / "present", src, log=lambda *_: None)
    assert [p.name for p in written] == ["99_test.ipynb"]
    nb = nbformat.read(written[0], as_version=4)
    text = "\n".join(cell.source for cell in nb.cells)
    assert not [line for line in text.splitlines() if gen.BEGIN.match(line) or gen.END.match(line)]
    assert "tl.store" in text and "memory-bound" in text  # the answers are all there
    assert "**Worked answer.**" in nb.cells[3].source
    assert all(c.outputs == [] for c in nb.cells if c.cell_type == "code")
    nb.cells[0].source += "\nthe instructor's own note"
    nbformat.write(nb, written[0])
    said = []
    assert gen.write_presenter_copies(tmp_path / "present", src, log=said.append) == []
    assert "the instructor's own note" in written[0].read_text() and "kept" in said[0]


def test_every_setup_cell_is_the_one_made_from_pyproject():
    url, tag = gen.course_address()
    assert url.startswith("https://github.com/") and tag.startswith("v")
    cell = gen.setup_cell_source()
    assert url in cell and tag in cell and "env = setup()" in cell
    for path in sorted((gen.ROOT / "solutions").glob("*.ipynb")):
        first = next(c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code")
        assert first.source == cell, f"{path.name}: run `make notebooks` to rewrite its setup cell"


def test_pass_stub_is_not_fooled_by_a_jit_function_above():
    src = "@triton.jit\ndef k(x):\n    pass\n\ndef f():\n    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION"
    assert "raise NotImplementedError" in gen.strip_solutions(src)


def test_stubbed_kernel_compiles_and_writes_nothing(tmp_path):
    # Triton compiles from the source file, so the stubbed cell goes into a real module
    module_file = tmp_path / "stubbed_lesson.py"
    module_file.write_text("import triton\nimport triton.language as tl\n\n" + gen.strip_solutions(KERNEL_CELL) + "\n")
    spec = importlib.util.spec_from_file_location("stubbed_lesson", module_file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = torch.full((10,), float("nan"), device=current().device)
    x = torch.ones(10, device=current().device)
    module.add_kernel[(1,)](x, x, out, 10, BLOCK_SIZE=16)
    assert bool(torch.isnan(out).all())


@pytest.mark.parametrize(
    "bad, message",
    [
        ("### BEGIN SOLUTION\nx = 1", "never closed"),
        ("x = 1\n### END SOLUTION", "without a BEGIN"),
        ("### BEGIN SOLUTION\n### BEGIN SOLUTION\n### END SOLUTION\n### END SOLUTION", "inside another region"),
    ],
)
def test_unbalanced_markers_fail_loudly(bad, message):
    with pytest.raises(gen.MarkerError, match=message):
        gen.strip_solutions(bad, where="lesson, cell 3")


@pytest.mark.parametrize(
    "line",
    ["## BEGIN SOLUTION", "#### BEGIN SOLUTION", "###BEGIN SOLUTION", "### begin solution", "# END SOLUTION",
     "### BEGIN SOLUTION (the hard part)", "### BEGIN SOLUTIONS", "BEGIN SOLUTION"],
)  # fmt: skip
@pytest.mark.parametrize("cell_type", ["code", "markdown"])
def test_a_marker_misspelt_is_refused_not_left_in(line, cell_type):
    """A marker the generator does not read as one (a hash too few, lower case, a word after it) left the solution
    below it in the participant copy, word for word, without a word (session 52)."""
    source = f"def f():\n    {line}\n    return 42\n    ### END SOLUTION" if cell_type == "code" else f"x\n{line}\n42"
    with pytest.raises(gen.MarkerError, match=r"cell 3: line 2 .*not a solution marker.*alone on its line"):
        gen.strip_solutions(source, cell_type, where="lesson, cell 3")


def test_a_marker_error_stops_make_notebooks_before_it_writes_anything(monkeypatch, capsys):
    """(session 52) main() rewrote lessons/, the README's tables and the setup cells, then met the marker error while
    rendering the notebooks: a half-written course. The markers are now checked first."""

    def refuse(src_dir):
        raise gen.MarkerError("solutions/99_x.ipynb, cell 1: line 1 ('## BEGIN SOLUTION') is not a solution marker")

    wrote = []
    monkeypatch.setattr(gen, "render", refuse)
    for step in ("sync_setup_cells", "write_lesson_tables", "write_modules", "generate"):
        monkeypatch.setattr(gen, step, lambda *a, step=step, **k: wrote.append(step) or [])
    assert gen.main([]) == 2
    assert wrote == [], f"written before the markers were checked: {wrote}"
    assert "not a solution marker" in capsys.readouterr().err


def test_a_marker_in_a_code_comment_is_refused_but_prose_may_name_one():
    with pytest.raises(gen.MarkerError, match="line 2"):
        gen.strip_solutions("def f():\n    x = 1  ### BEGIN SOLUTION\n    return x\n    ### END SOLUTION")
    prose = "Solutions sit between `### BEGIN SOLUTION` and `### END SOLUTION` lines.\nPredict: ### BEGIN SOLUTION"
    assert gen.strip_solutions(prose, "markdown") == prose


def test_participant_copy_clears_outputs_and_drops_solution_only_cells():
    solution = solution_nb()
    copy = gen.participant_copy(solution, "99_test.ipynb")
    assert len(copy.cells) == len(solution.cells) - 1
    assert all(
        c.get("outputs", []) == [] and c.get("execution_count") is None for c in copy.cells if c.cell_type == "code"
    )
    assert "instructor only" not in json.dumps(copy)
    answer = copy.cells[3].source  # the markdown prediction: its worked answer only inside a folded <details>
    assert "memory-bound" not in answer.split("<details>")[0] and "memory-bound" in answer.split("<details>")[1]
    assert solution.cells[1].execution_count == 7  # the solution itself is untouched
    assert copy.cells[1].metadata["tags"] == ["export", "exercise"]


def write_solution(folder, nb, name="99_test.ipynb"):
    folder.mkdir(exist_ok=True)
    nbformat.write(nb, folder / name)


def test_regeneration_is_reproducible_and_refuses_to_destroy_edits(tmp_path):
    src, dst = tmp_path / "solutions", tmp_path / "notebooks"
    write_solution(src, solution_nb())
    assert [p.name for p in gen.generate(src, dst, log=lambda *_: None)] == ["99_test.ipynb"]
    first = (dst / "99_test.ipynb").read_text()
    assert gen.generate(src, dst, log=lambda *_: None) == []  # nothing changed, nothing written
    assert gen.differences(src, dst) == ["lessons/l99_test.py"]  # not written yet
    gen.write_modules(src, tmp_path / "lessons", log=lambda *_: None)
    assert gen.differences(src, dst) == []

    # the learner works in the notebook, then the course is updated
    nb = nbformat.read(dst / "99_test.ipynb", as_version=4)
    nb.cells[2].source = "def add(x, y):\n    return x.add(y)  # my answer"
    nbformat.write(nb, dst / "99_test.ipynb")
    write_solution(src, solution_nb([nbformat.v4.new_markdown_cell("A new takeaway.")]))
    assert gen.is_edited(dst / "99_test.ipynb")
    said = []
    assert gen.generate(src, dst, log=said.append) == []  # the learner's work is kept, and that is no error
    assert "my answer" in (dst / "99_test.ipynb").read_text()
    assert any("99_test.ipynb" in line and "FORCE=1" in line for line in said), said

    gen.generate(src, dst, force=True, log=said.append)
    backups = list(dst.glob("99_test.backup-*.ipynb"))
    assert len(backups) == 1 and "my answer" in backups[0].read_text()
    nbformat.read(backups[0], as_version=4)  # still a notebook JupyterLab opens
    assert any(backups[0].name in line and "rename" in line for line in said), said
    assert gen.differences(src, dst) == []  # a backup is no stale notebook (the exports did not change)
    assert "A new takeaway." in (dst / "99_test.ipynb").read_text() and first != (dst / "99_test.ipynb").read_text()


def test_two_backups_in_the_same_second_keep_both_edits(tmp_path, monkeypatch):
    """A backup's name is its second: a learner who forced twice within one second (two course updates, an edit
    between) lost the first edit, overwritten by the second backup."""
    src, dst = tmp_path / "solutions", tmp_path / "notebooks"
    write_solution(src, solution_nb())
    gen.generate(src, dst, log=lambda *_: None)
    monkeypatch.setattr(gen.time, "strftime", lambda *_: "20261208-101010")
    for answer, update in (("first answer", "One takeaway."), ("second answer", "Another takeaway.")):
        nb = nbformat.read(dst / "99_test.ipynb", as_version=4)
        nb.cells[2].source = f"def add(x, y):\n    return x.add(y)  # {answer}"
        nbformat.write(nb, dst / "99_test.ipynb")
        write_solution(src, solution_nb([nbformat.v4.new_markdown_cell(update)]))
        gen.generate(src, dst, force=True, log=lambda *_: None)
    assert len(list(dst.glob("99_test.backup-*.ipynb"))) == 2
    assert "first answer" in (dst / "99_test.backup-20261208-101010.ipynb").read_text()
    assert "second answer" in (dst / "99_test.backup-20261208-101010-2.ipynb").read_text()
    assert gen.participant_notebooks(dst) == [dst / "99_test.ipynb"]


def test_a_kept_notebook_is_called_behind_only_when_the_course_changed_it(tmp_path, monkeypatch, capsys):
    """`make notebooks` says "the course has a newer version" of an edited notebook only when it has one, and says
    "already up to date" only when no edited notebook is behind the course."""
    src, dst = tmp_path / "solutions", tmp_path / "notebooks"
    write_solution(src, solution_nb())
    for step in ("sync_setup_cells", "write_lesson_tables", "write_modules"):  # the course's own files: not here
        monkeypatch.setattr(gen, step, lambda: [])
    monkeypatch.setattr(gen, "generate", functools.partial(gen.generate, src, dst))
    monkeypatch.setattr(gen, "behind", functools.partial(gen.behind, src, dst))
    assert gen.main([]) == 0 and "wrote notebooks/99_test.ipynb" in capsys.readouterr().out

    nb = nbformat.read(dst / "99_test.ipynb", as_version=4)
    nb.cells[2].source = "def add(x, y):\n    return x.add(y)  # my answer"
    nbformat.write(nb, dst / "99_test.ipynb")
    for argv in ([], ["--force"]):  # the course did not change: nothing to take, so nothing is overwritten either
        assert gen.main(argv) == 0
        said = capsys.readouterr().out
        assert "newer version" not in said and "already up to date" in said, said
        assert gen.behind() == [] and "my answer" in (dst / "99_test.ipynb").read_text()
    assert gen.participant_notebooks(dst) == [dst / "99_test.ipynb"]  # and no backup was saved

    write_solution(src, solution_nb([nbformat.v4.new_markdown_cell("A new takeaway.")]))
    assert gen.main([]) == 0
    said = capsys.readouterr().out
    assert "99_test.ipynb" in said and "newer version" in said and "FORCE=1" in said, said
    assert "already up to date" not in said, said
    assert gen.behind() == ["99_test.ipynb"] and "my answer" in (dst / "99_test.ipynb").read_text()
    assert gen.main(["--force"]) == 0
    assert "A new takeaway." in (dst / "99_test.ipynb").read_text() and gen.behind() == []
    assert "my answer" in next(dst.glob("99_test.backup-*.ipynb")).read_text()


def test_a_broken_notebook_is_kept_and_the_others_are_still_made(tmp_path):
    """A participant notebook that is no readable notebook (cut short by a crash, JSON edited by hand) is the learner's
    work like any edited one: kept, named, backed up under FORCE=1; and the other notebooks are still regenerated."""
    src, dst = tmp_path / "solutions", tmp_path / "notebooks"
    write_solution(src, solution_nb())
    write_solution(src, solution_nb(), name="98_other.ipynb")
    gen.generate(src, dst, log=lambda *_: None)
    broken = (dst / "98_other.ipynb").read_text()[:-200] + "my answer"
    (dst / "98_other.ipynb").write_text(broken)
    for name in ("98_other.ipynb", "99_test.ipynb"):
        write_solution(src, solution_nb([nbformat.v4.new_markdown_cell("A new takeaway.")]), name=name)
    said = []
    assert gen.generate(src, dst, log=said.append) == [dst / "99_test.ipynb"]
    assert (dst / "98_other.ipynb").read_text() == broken
    assert any("98_other.ipynb" in line and "readable" in line and "FORCE=1" in line for line in said), said
    assert gen.behind(src, dst) == ["98_other.ipynb"]
    gen.generate(src, dst, force=True, log=said.append)
    assert next(dst.glob("98_other.backup-*.ipynb")).read_text() == broken
    assert "A new takeaway." in (dst / "98_other.ipynb").read_text()


def test_a_notebook_whose_json_is_no_notebook_is_kept_like_a_broken_one(tmp_path):
    """Valid JSON that is no notebook (a cell without its source, say, after a hand edit) stopped `make notebooks`
    with an AttributeError from the hash of its cells; now it is kept and named like one whose JSON is broken
    (session 52)."""
    src, dst = tmp_path / "solutions", tmp_path / "notebooks"
    write_solution(src, solution_nb())
    gen.generate(src, dst, log=lambda *_: None)
    nb = json.loads((dst / "99_test.ipynb").read_text())
    del nb["cells"][2]["source"]
    mine = json.dumps(nb, indent=1) + "\n"
    (dst / "99_test.ipynb").write_text(mine)
    assert gen.is_edited(dst / "99_test.ipynb")
    write_solution(src, solution_nb([nbformat.v4.new_markdown_cell("A new takeaway.")]))
    said = []
    assert gen.generate(src, dst, log=said.append) == []
    assert (dst / "99_test.ipynb").read_text() == mine
    assert any("99_test.ipynb" in line and "readable" in line and "FORCE=1" in line for line in said), said


def test_backups_are_no_participant_notebooks(tmp_path):
    """A backup `make notebooks FORCE=1` saved is the learner's work: neither a stale notebook for --check nor a
    lesson for tests/test_participants.py: both list the notebooks with participant_notebooks."""
    src, dst = tmp_path / "solutions", tmp_path / "notebooks"
    write_solution(src, solution_nb())
    gen.generate(src, dst, log=lambda *_: None)
    gen.write_modules(src, tmp_path / "lessons", log=lambda *_: None)
    backup = gen.backup_name(dst / "99_test.ipynb")
    backup.write_bytes((dst / "99_test.ipynb").read_bytes())
    assert gen.participant_notebooks(dst) == [dst / "99_test.ipynb"]
    assert gen.differences(src, dst) == []
    (dst / "42_gone.ipynb").write_bytes(backup.read_bytes())  # a notebook whose solution is gone is still reported
    assert gen.participant_notebooks(dst) == [dst / "42_gone.ipynb", dst / "99_test.ipynb"]
    assert gen.differences(src, dst) == ["notebooks/42_gone.ipynb"]
    ignored = subprocess.run(["git", "check-ignore", "-q", f"notebooks/{backup.name}"], cwd=gen.ROOT, check=False)
    assert ignored.returncode == 0, f".gitignore does not ignore backups such as notebooks/{backup.name}"


def test_running_a_notebook_is_not_editing_it(tmp_path):
    src, dst = tmp_path / "solutions", tmp_path / "notebooks"
    write_solution(src, solution_nb())
    gen.generate(src, dst, log=lambda *_: None)
    nb = nbformat.read(dst / "99_test.ipynb", as_version=4)
    nb.cells[1].outputs = [nbformat.v4.new_output("stream", text="ran it")]
    nb.cells[1].execution_count = 3
    nbformat.write(nb, dst / "99_test.ipynb")
    assert not gen.is_edited(dst / "99_test.ipynb")


def _run(path, text="ran it"):
    nb = nbformat.read(path, as_version=4)
    nb.cells[1].outputs = [nbformat.v4.new_output("stream", text=text)]
    nb.cells[1].execution_count = 3
    nb.metadata["language_info"] = {"name": "python", "version": "3.12.0"}  # what Jupyter adds on a run
    nbformat.write(nb, path)


def test_a_run_notebook_keeps_its_outputs_until_the_course_changes_then_they_are_saved(tmp_path):
    """The outputs of a notebook the learner ran (not edited) were cleared by every `make notebooks`, the course
    changed or not; now they stay while the course has nothing new, and are saved in a backup first when it has
    (session 52)."""
    src, dst = tmp_path / "solutions", tmp_path / "notebooks"
    write_solution(src, solution_nb())
    gen.generate(src, dst, log=lambda *_: None)
    _run(dst / "99_test.ipynb", "my timings")
    ran = (dst / "99_test.ipynb").read_text()
    for force in (False, True):  # nothing to take from the course: nothing is written, nothing backed up
        assert gen.generate(src, dst, force=force, log=lambda *_: None) == []
        assert (dst / "99_test.ipynb").read_text() == ran and gen.participant_notebooks(dst) == [dst / "99_test.ipynb"]
    write_solution(src, solution_nb([nbformat.v4.new_markdown_cell("A new takeaway.")]))
    said = []
    assert gen.generate(src, dst, log=said.append) == [dst / "99_test.ipynb"]  # no edits of theirs: taken
    assert "A new takeaway." in (dst / "99_test.ipynb").read_text()
    backup = next(dst.glob("99_test.backup-*.ipynb"))
    assert backup.read_text() == ran
    assert any(backup.name in line and "outputs" in line for line in said), said


def test_check_names_the_learners_own_notebooks_as_theirs(tmp_path, monkeypatch, capsys):
    """`--check` listed an edited notebook, a run one and a renamed copy as "not what `make notebooks` generates",
    which `make notebooks` would not change: now each is said to be the learner's, and what to do (session 52)."""
    src, dst = tmp_path / "solutions", tmp_path / "notebooks"
    write_solution(src, solution_nb())
    write_solution(src, solution_nb(), name="98_other.ipynb")
    gen.generate(src, dst, log=lambda *_: None)
    gen.write_modules(src, tmp_path / "lessons", log=lambda *_: None)
    monkeypatch.setattr(gen, "described_differences", functools.partial(gen.described_differences, src, dst))
    nb = nbformat.read(dst / "99_test.ipynb", as_version=4)
    nb.cells[2].source = "def add(x, y):\n    return x.add(y)  # my answer"
    nbformat.write(nb, dst / "99_test.ipynb")
    _run(dst / "98_other.ipynb")
    (dst / "mine.ipynb").write_bytes((dst / "99_test.ipynb").read_bytes())
    assert gen.main(["--check"]) == 1
    said = capsys.readouterr().out
    assert re.search(r"notebooks/99_test.ipynb \(your edits", said), said
    assert re.search(r"notebooks/98_other.ipynb \(your outputs", said), said
    assert re.search(r"notebooks/mine.ipynb \(no solution", said), said


def test_committed_notebooks_are_what_the_generator_makes():
    assert gen.ROOT.joinpath("solutions").is_dir()
    assert list(gen.ROOT.joinpath("solutions").glob("*.ipynb")), "no solution notebooks found"
    assert gen.differences() == [], "run `make notebooks` and commit notebooks/ and lessons/"


def test_lesson_modules_are_the_export_cells(tmp_path):
    src = tmp_path / "solutions"
    write_solution(src, solution_nb())
    text = gen.module_source(src / "99_test.ipynb")
    assert text.splitlines()[0].startswith("# Generated by `make notebooks` from ") and "99_test.ipynb" in text
    assert "BEGIN SOLUTION" not in text and "END SOLUTION" not in text
    nb = nbformat.read(src / "99_test.ipynb", as_version=4)
    exported = [c.source for c in nb.cells if "export" in c.metadata.get("tags", [])]
    assert exported, "the test notebook must have export cells"
    for cell in exported:  # every exported line is there, in order; nothing from other cells
        for line in cell.splitlines():
            if "SOLUTION" not in line:
                assert line in text
    compile(text, "l99_test.py", "exec")
    written = gen.write_modules(src, tmp_path / "lessons", log=lambda *_: None)
    assert [p.name for p in written] == ["l99_test.py"]
    (tmp_path / "lessons" / "l42_gone.py").write_text("# its notebook was deleted\n")
    gen.write_modules(src, tmp_path / "lessons", log=lambda *_: None)
    assert sorted(p.name for p in (tmp_path / "lessons").iterdir()) == ["l99_test.py"]


def test_lessons_import_as_plain_modules_without_jupyter():
    import subprocess
    import sys

    code = (
        "import sys; from lessons.l05_matmul import matmul; from utils.lessons import load; "
        "assert load('05').matmul is matmul; assert 'nbformat' not in sys.modules and 'IPython' not in sys.modules; "
        "import utils.lessons, inspect; assert 'tempfile' not in inspect.getsource(utils.lessons)"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=gen.ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr


def test_no_two_lessons_define_the_same_public_name():
    """One name per meaning across the course: a later lesson imports an earlier lesson's definition, or names its
    own differently (docs/authoring.md). Private helpers (a leading underscore) may repeat."""
    import ast

    owner: dict[str, str] = {}
    clashes = []
    for path in sorted((gen.ROOT / "lessons").glob("l[0-9]*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
                if node.name in owner:
                    clashes.append(f"{node.name} in {owner[node.name]} and {path.name}")
                owner.setdefault(node.name, path.name)
    assert owner, "no lesson modules found"
    assert clashes == [], "defined in two lessons: " + "; ".join(clashes)


MODULES = sorted((gen.ROOT / "lessons").glob("l[0-9]*.py"))
HIDE_PENDING: set = set()  # lessons whose check functions do not hide their frames yet


@pytest.mark.parametrize(
    "path",
    [
        pytest.param(p, marks=pytest.mark.xfail(reason="check_* without __tracebackhide__ yet"))
        if p.stem[:3] in HIDE_PENDING
        else p
        for p in MODULES
    ],
    ids=[p.stem for p in MODULES],
)
def test_every_check_hides_its_own_frame(path):
    """A failed check shows the learner its message, not the checker's source: every check_<op> a lesson exports sets
    __tracebackhide__ (IPython and pytest leave such frames out of the traceback), as utils.checking does."""
    import ast

    missing = [
        node.name
        for node in ast.parse(path.read_text()).body
        if isinstance(node, ast.FunctionDef)
        and node.name.startswith("check_")
        and not any(
            isinstance(s, ast.Assign) and any(getattr(t, "id", None) == "__tracebackhide__" for t in s.targets)
            for s in node.body
        )
    ]
    assert missing == [], f"{path.name}: set `__tracebackhide__ = True` first thing in {', '.join(missing)}"


def test_prose_has_no_accidental_bold():
    """`2**26` written bare in markdown renders as bold between two such numbers: powers go in code spans."""
    found = []
    for path in sorted((gen.ROOT / "solutions").glob("*.ipynb")):
        for k, cell in enumerate(nbformat.read(path, as_version=4).cells):
            if cell.cell_type != "markdown":
                continue
            text = re.sub(r"```.*?```|`[^`]*`|<!--.*?-->", "", cell.source, flags=re.S)
            found += [f"{path.name}, cell {k}: {m.group(0)!r}" for m in re.finditer(r"\w\*\*\w", text)]
    assert not found, "write these in code spans:\n" + "\n".join(found)


def _root_conftest():
    spec = importlib.util.spec_from_file_location("root_conftest", gen.ROOT / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_kernel_that_dies_while_starting_is_started_again(monkeypatch):
    """The notebook runs' guard against two workers' kernels racing for one port (see conftest.py)."""
    conftest = _root_conftest()
    calls = []

    def dies_twice(*args, **kwargs):
        calls.append(kwargs)
        if len(calls) < conftest.ATTEMPTS:
            raise RuntimeError("Kernel died before replying to kernel_info")
        return "manager", "client"

    monkeypatch.setattr(conftest, "_start_new_kernel", dies_twice)
    with pytest.warns(UserWarning, match="starting it again"):
        assert conftest._start_new_kernel_again_if_it_dies(kernel_name="python3") == ("manager", "client")
    assert len(calls) == conftest.ATTEMPTS and calls[-1] == {"kernel_name": "python3"}

    def always_dies(*args, **kwargs):
        raise RuntimeError("Kernel died before replying to kernel_info")

    monkeypatch.setattr(conftest, "_start_new_kernel", always_dies)
    with pytest.warns(UserWarning), pytest.raises(RuntimeError, match="Kernel died"):
        conftest._start_new_kernel_again_if_it_dies()


def test_test_kernels_use_sockets_of_their_own():
    """conftest.py: kernels started by the tests talk over Unix sockets named after their manager (no TCP port to race
    for), and a kernel started that way runs code."""
    from jupyter_client.manager import AsyncKernelManager, KernelManager

    _root_conftest()
    a, b, c = KernelManager(kernel_name="python3"), KernelManager(kernel_name="python3"), AsyncKernelManager()
    assert {a.transport, b.transport, c.transport} == {"ipc"}
    assert len({a.ip, b.ip, c.ip}) == 3 and all(os.path.isabs(m.ip) for m in (a, b, c))
    a.start_kernel()
    try:
        client = a.client()
        client.start_channels()
        client.wait_for_ready(timeout=60)
        assert client.execute_interactive("6 * 7", timeout=60)["content"]["status"] == "ok"
        client.stop_channels()
    finally:
        a.shutdown_kernel(now=True)
