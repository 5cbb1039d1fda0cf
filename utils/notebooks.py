"""Participant notebooks, generated from the solution notebooks.

Each ``### BEGIN SOLUTION`` / ``### END SOLUTION`` region becomes ``# YOUR CODE HERE`` and a stub that keeps the
cell valid Python: ``pass`` inside a ``@triton.jit`` function (the GPU compiler rejects ``raise``),
``raise NotImplementedError`` elsewhere, and *Your answer here* in markdown. Cells tagged ``solution-only`` are
dropped; outputs and execution counts are cleared.

The same step writes each solution's cells tagged ``export`` to a committed module ``lessons/lNN_name.py``: the
lesson's kernels, references, launchers and checks as plain Python, for tests, benchmarks, later lessons, IDEs
and linters (:func:`module_source`).

A learner's edits are never lost silently: every generated notebook records a hash of its cells, and a notebook
whose cells no longer match that hash is left alone. The same hash says whether the course changed since: an edited
notebook that is behind the course is named, and ``force=True`` regenerates it after saving a backup beside it. A
notebook the learner only ran keeps its outputs until the course changes it; then they are saved in a backup first.

    python -m utils.notebooks            # regenerate notebooks/ and lessons/ from solutions/
    python -m utils.notebooks --check    # exit 1 if notebooks/ or lessons/ is not what the generator makes
    python -m utils.notebooks --force    # also regenerate edited notebooks the course changed (backup saved first)
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # for the annotations: each function imports nbformat itself, whose import (jsonschema's format
    import nbformat  # checkers) takes a second that utils.stubs, at a learner's first error, need not wait for


ROOT = Path(__file__).resolve().parents[1]
LESSONS = ROOT / "lessons"
WORKED_ANSWER = "Worked answer (open it once you have written yours and measured)"
BEGIN = re.compile(r"^(\s*)### BEGIN SOLUTION\s*$")
END = re.compile(r"^\s*### END SOLUTION\s*$")
#: a line meant as a marker but not one (a hash too many or too few, lower case, a word after it): the generator
#: would leave the solution below it in the participant copy, so it is refused; in code, a comment naming a marker too
NEAR_MARKER = re.compile(r"^\s*#*\s*(BEGIN|END)\s*SOLUTION", re.IGNORECASE)
NEAR_MARKER_IN_CODE = re.compile(r"#.*\b(BEGIN|END)\s*SOLUTION", re.IGNORECASE)
META_KEY = "triton_hard_way"


class MarkerError(ValueError):
    """Unbalanced or nested solution markers."""


def _inside_jit(lines: list[str], begin: int, indent: str) -> bool:
    """Whether line ``begin`` sits in the body of a function decorated with something ending in ``jit``."""
    for i in range(begin - 1, -1, -1):
        line = lines[i]
        stripped = line.lstrip()
        if not stripped or stripped.startswith("#"):
            continue
        own = len(line) - len(stripped)
        if own < len(indent) and stripped.startswith(("def ", "async def ")):
            j = i - 1
            while j >= 0 and lines[j].lstrip().startswith("@"):
                if re.search(r"\bjit\b", lines[j]):
                    return True
                j -= 1
            return False
    return False


def strip_solutions(source: str, cell_type: str = "code", where: str = "") -> str:
    """Replaces every solution region of one cell's source by a stub."""
    lines = source.split("\n")
    for k, line in enumerate(lines):
        near = NEAR_MARKER.match(line) or (cell_type == "code" and NEAR_MARKER_IN_CODE.search(line))
        if near and not (BEGIN.match(line) or END.match(line)):
            raise MarkerError(
                f"{where}: line {k + 1} ({line.strip()!r}) is not a solution marker, and what follows it would show "
                f"in the participant notebook: write `### {near.group(1).upper()} SOLUTION` alone on its line"
            )
    out: list[str] = []
    i = 0
    while i < len(lines):
        m = BEGIN.match(lines[i])
        if END.match(lines[i]):
            raise MarkerError(f"{where}: '### END SOLUTION' at line {i + 1} without a BEGIN before it")
        if not m:
            out.append(lines[i])
            i += 1
            continue
        indent = m.group(1)
        j = i + 1
        while j < len(lines) and not END.match(lines[j]):
            if BEGIN.match(lines[j]):
                raise MarkerError(
                    f"{where}: '### BEGIN SOLUTION' at line {j + 1} inside another region (opened at line {i + 1})"
                )
            j += 1
        if j == len(lines):
            raise MarkerError(f"{where}: '### BEGIN SOLUTION' at line {i + 1} is never closed by '### END SOLUTION'")
        if cell_type == "markdown":
            # a worked answer (a prediction's, most often): folded, to open after writing one's own and measuring
            out += ["*Your answer here.*", "", f"<details><summary>{WORKED_ANSWER}</summary>", ""]
            out += lines[i + 1 : j] + ["", "</details>"]
        else:
            stub = "pass" if _inside_jit(lines, i, indent) else "raise NotImplementedError"
            out += [f"{indent}# YOUR CODE HERE", f"{indent}{stub}"]
        i = j + 1
    return "\n".join(out)


def unmark(source: str, cell_type: str = "code") -> str:
    """The solution as an instructor projects it: marker lines dropped; a markdown answer under a bold label."""
    if cell_type != "markdown":
        return "\n".join(line for line in source.split("\n") if not (BEGIN.match(line) or END.match(line)))
    out = []
    for line in source.split("\n"):
        if BEGIN.match(line):
            out += [f"**{WORKED_ANSWER.split(' (')[0]}.**", ""]
        elif not END.match(line):
            out.append(line)
    return "\n".join(out)


def presenter_copy(solution: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The solution notebook for projecting (``make present``): no solution markers, outputs cleared."""
    nb = copy.deepcopy(solution)
    for cell in nb.cells:
        if cell.cell_type in ("code", "markdown"):
            cell.source = unmark(cell.source, cell.cell_type)
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    return nb


def write_presenter_copies(dst_dir: Path, src_dir: Path = ROOT / "solutions", log=print) -> list[Path]:
    """Presenter copies of every solution in ``dst_dir``; a copy the instructor has changed is kept."""
    import nbformat

    dst_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for path in sorted(src_dir.glob("*.ipynb")):
        nb = presenter_copy(nbformat.read(path, as_version=4))
        nb.metadata[META_KEY] = {"presenter_copy_of": f"solutions/{path.name}"}
        nb.metadata[META_KEY]["cells_sha256"] = _cells_hash(nb)
        target = dst_dir / path.name
        if target.exists() and is_edited(target):
            log(f"kept {target.name}: you changed it since it was copied (delete it to get a fresh copy)")
            continue
        text = _dumps(nb)
        if not target.exists() or target.read_text() != text:
            target.write_text(text)
            written.append(target)
    return written


def _cells_hash(nb) -> str:
    h = hashlib.sha256()
    for cell in nb.cells:
        h.update(cell.cell_type.encode() + b"\0" + cell.source.encode() + b"\1")
    return h.hexdigest()


def participant_copy(solution: nbformat.NotebookNode, name: str) -> nbformat.NotebookNode:
    """The participant version of one solution notebook (a new object; the solution is not changed)."""
    nb = copy.deepcopy(solution)
    cells = []
    for k, cell in enumerate(nb.cells):
        tags = cell.get("metadata", {}).get("tags", [])
        if "solution-only" in tags:
            continue
        where = f"{name}, cell {k}"
        if cell.cell_type in ("code", "markdown"):
            new = strip_solutions(cell.source, cell.cell_type, where)
            if cell.cell_type == "code" and new != cell.source and "%" not in new and "!" not in new:
                try:
                    compile(new, where, "exec")
                except SyntaxError as e:
                    raise MarkerError(f"{where}: the stubbed cell is not valid Python ({e})") from e
            cell.source = new
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
        cell.pop("id", None)
        cells.append(cell)
    nb.cells = cells
    nb.metadata.pop("widgets", None)
    nb.metadata[META_KEY] = {
        "generated_from": f"solutions/{name}",
        "note": "generated by `make notebooks`: edit the solution, not this file",
    }
    nb.metadata[META_KEY]["cells_sha256"] = _cells_hash(nb)
    return nb


def _dumps(nb) -> str:
    import nbformat

    nb.nbformat, nb.nbformat_minor = 4, 5
    for k, cell in enumerate(nb.cells):  # stable ids keep regeneration byte-for-byte reproducible
        cell["id"] = f"cell-{k:03d}"
    return nbformat.writes(nb) + "\n"


def _recorded_hash(nb) -> str | None:
    """The hash of the cells the generator wrote into this notebook (None: the generator did not write it)."""
    ours = nb.metadata.get(META_KEY, {})
    return ours.get("cells_sha256") if isinstance(ours, dict) else None


def _read(path: Path):
    """The notebook at ``path``, or None when it is no readable notebook (cut short by a crash, JSON edited by hand):
    still the learner's, to keep like any edited notebook, not a reason to stop regenerating the others."""
    import nbformat

    try:
        nb = nbformat.read(path, as_version=4)
        _cells_hash(nb)  # a cell without its type or source (valid JSON, no notebook) fails here, not in the caller
        return nb
    except Exception:  # noqa: BLE001 - nbformat raises a different error for each way a file can be broken
        return None


def has_outputs(path: Path) -> bool:
    """Whether the notebook at ``path`` was run: a code cell holds outputs or an execution count."""
    nb = _read(path)
    return nb is not None and any(
        cell.get("outputs") or cell.get("execution_count") is not None for cell in nb.cells if cell.cell_type == "code"
    )


def is_edited(path: Path) -> bool:
    """True when the notebook at ``path`` differs from what the generator wrote there (or it wrote nothing, or it
    is no readable notebook)."""
    nb = _read(path)
    if nb is None:
        return True
    recorded = _recorded_hash(nb)
    return recorded is None or recorded != _cells_hash(nb)


def is_behind(path: Path, text: str) -> bool:
    """True when the participant notebook ``text`` the course makes now has other cells than the notebook at ``path``
    was generated with (or that notebook records none, or is no readable notebook), whatever the learner has done to
    it since."""
    import nbformat

    nb = _read(path)
    return nb is None or _recorded_hash(nb) != _recorded_hash(nbformat.reads(text, as_version=4))


def render(src_dir: Path) -> dict[str, str]:
    """File name -> participant notebook text, for every notebook in ``src_dir``."""
    import nbformat

    out = {}
    for path in sorted(src_dir.glob("*.ipynb")):
        solution = nbformat.read(path, as_version=4)
        out[path.name] = _dumps(participant_copy(solution, path.name))
    return out


def course_address() -> tuple[str, str]:
    """(repository URL, release tag) from pyproject.toml: the one place the course's public address is written."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return project["urls"]["Repository"], f"v{project['version']}"


def setup_cell_source() -> str:
    """Every lesson's first code cell: on Colab, fetch the course at this release; then decide GPU or interpreter."""
    url, tag = course_address()
    return f"""import sys

if "google.colab" in sys.modules:  # Colab: fetch the course once, at the release these notebooks belong to
    COURSE, RELEASE = "{url}", "{tag}"
    !test -d /content/course || git clone -q --depth 1 --branch {{RELEASE}} {{COURSE}} /content/course
    sys.path.insert(0, "/content/course")
from utils import setup

env = setup()  # GPU -> compiled Triton; no GPU -> Triton's interpreter on the CPU. Prints what it found."""


def sync_setup_cells(src_dir: Path = ROOT / "solutions", log=print) -> list[Path]:
    """Rewrites the setup cell (the first code cell, the one that calls ``setup()``) of every solution notebook
    from :func:`setup_cell_source`; returns the notebooks changed."""
    import nbformat

    changed = []
    want = setup_cell_source()
    for path in sorted(src_dir.glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        first = next((c for c in nb.cells if c.cell_type == "code"), None)
        if first is None or "setup(" not in first.source:
            raise MarkerError(f"{path.name}: the first code cell must be the setup cell (it calls utils.setup())")
        if first.source != want:
            first.source = want
            path.write_text(nbformat.writes(nb) + "\n")
            changed.append(path)
            log(f"wrote the setup cell of {path.relative_to(ROOT) if ROOT in path.parents else path}")
    return changed


@dataclass(frozen=True)
class Lesson:
    """What a lesson says of itself in its first cell: ``# NN — Title`` and ``Time: about N minutes``."""

    number: str
    stem: str
    title: str
    minutes: int


def lesson_index(src_dir: Path = ROOT / "solutions") -> list[Lesson]:
    """Every lesson's number, file stem, title and stated time, read from the solution notebooks."""
    import nbformat

    lessons = []
    for path in sorted(src_dir.glob("*.ipynb")):
        first = nbformat.read(path, as_version=4).cells[0].source
        title = re.match(r"#\s+(\d\d)\s+—\s+(.+)", first.splitlines()[0] if first else "")
        time_ = re.search(r"Time: about (\d+) minutes", first)
        if not (title and time_):
            raise MarkerError(
                f"{path.name}: the first cell must start with '# NN — Title' and say 'Time: about N minutes'"
            )
        lessons.append(Lesson(title.group(1), path.stem, title.group(2).strip(), int(time_.group(1))))
    return lessons


def colab_link(stem: str) -> str:
    """The Colab address of a participant notebook, at the release the setup cells clone."""
    url, tag = course_address()
    return f"https://colab.research.google.com/github/{url.removeprefix('https://github.com/')}/blob/{tag}/notebooks/{stem}.ipynb"


TABLE_BEGIN = "<!-- lessons: generated by `make notebooks` from the notebooks' titles and times -->"
TABLE_END = "<!-- lessons: end -->"
#: documents whose lesson table is generated, and how: README's links the solutions, the Colab page's opens Colab
TABLE_DOCS = {"README.md": "readme", "docs/colab.md": "colab"}


def lesson_table(style: str, src_dir: Path = ROOT / "solutions") -> str:
    """The lesson table of README (``style="readme"``) or docs/colab.md (``"colab"``), from :func:`lesson_index`."""
    badge = "![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)"
    if style == "readme":
        rows = ["| | lesson | time | Colab |", "|---|---|---|---|"]
        for x in lesson_index(src_dir):
            link = f"[{x.title}](solutions/{x.stem}.ipynb)"
            rows.append(f"| {x.number} | {link} | {x.minutes} min | [open]({colab_link(x.stem)}) |")
    else:
        rows = ["| lesson | time | open |", "|---|---|---|"]
        rows += [f"| {x.number} — {x.title} | {x.minutes} min | [{badge}]({colab_link(x.stem)}) |"
                 for x in lesson_index(src_dir)]  # fmt: skip
    return "\n".join(rows)


def _with_table(text: str, table: str, where: str) -> str:
    if TABLE_BEGIN not in text or TABLE_END not in text:
        raise MarkerError(f"{where}: no `{TABLE_BEGIN}` … `{TABLE_END}` block for the lesson table")
    head, rest = text.split(TABLE_BEGIN, 1)
    return head + TABLE_BEGIN + "\n" + table + "\n" + TABLE_END + rest.split(TABLE_END, 1)[1]


def write_lesson_tables(root: Path = ROOT, log=print) -> list[Path]:
    """Rewrites the generated lesson tables in README and docs/colab.md; returns the files changed."""
    changed = []
    for name, style in TABLE_DOCS.items():
        path = root / name
        text = path.read_text()
        new = _with_table(text, lesson_table(style, root / "solutions"), name)
        if new != text:
            path.write_text(new)
            changed.append(path)
            log(f"wrote the lesson table of {name}")
    return changed


def module_name(notebook: Path) -> str:
    """``solutions/05_matmul.ipynb`` -> ``l05_matmul`` (a module name may not start with a digit)."""
    return f"l{notebook.stem}"


def module_source(notebook: Path) -> str:
    """The lesson module made from one solution notebook: its ``export`` cells in order, solution markers dropped."""
    import nbformat

    parts = []
    for cell in nbformat.read(notebook, as_version=4).cells:
        if cell.cell_type == "code" and "export" in cell.get("metadata", {}).get("tags", []):
            lines = [line for line in cell.source.splitlines() if not (BEGIN.match(line) or END.match(line))]
            parts.append("\n".join(lines).strip("\n"))
    where = notebook.relative_to(ROOT).as_posix() if ROOT in notebook.parents else f"solutions/{notebook.name}"
    header = f"# Generated by `make notebooks` from {where}: edit the notebook, not this file.\n"
    return header + "\n\n\n".join(parts) + "\n"


def render_modules(src_dir: Path) -> dict[str, str]:
    """File name -> lesson module text, for every solution notebook in ``src_dir``."""
    return {f"{module_name(p)}.py": module_source(p) for p in sorted(src_dir.glob("*.ipynb"))}


def write_modules(src_dir: Path = ROOT / "solutions", dst_dir: Path = LESSONS, log=print) -> list[Path]:
    """Writes ``lessons/lNN_name.py`` for every solution notebook and removes modules whose notebook is gone.

    These files are generated, never edited, so they are simply overwritten."""
    dst_dir.mkdir(parents=True, exist_ok=True)
    rendered = render_modules(src_dir)
    written = []
    for name, text in rendered.items():
        path = dst_dir / name
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            written.append(path)
            log(f"wrote {dst_dir.name}/{name}")
    for path in sorted(dst_dir.glob("l[0-9]*.py")):
        if path.name not in rendered:
            path.unlink()
            log(f"removed {dst_dir.name}/{path.name} (its notebook is gone)")
    return written


BACKUP = ".backup-"  # in the name of every backup, and of no participant notebook (.gitignore ignores them)


def backup_name(path: Path) -> Path:
    """Where ``FORCE=1`` keeps a learner's edited notebook: beside it, still an ``.ipynb`` that JupyterLab opens. A
    name no file has yet: a second backup within the same second gets ``-2`` (it used to overwrite the first)."""
    stamp = f"{path.stem}{BACKUP}{time.strftime('%Y%m%d-%H%M%S')}"
    name, n = path.with_name(f"{stamp}.ipynb"), 1
    while name.exists():
        n += 1
        name = path.with_name(f"{stamp}-{n}.ipynb")
    return name


def participant_notebooks(folder: Path = ROOT / "notebooks") -> list[Path]:
    """The course's participant notebooks in ``folder``, in lesson order: its ``.ipynb`` files less the backups
    :func:`backup_name` saved there (a learner's own work, which the course's tests and checks leave alone)."""
    return sorted(p for p in folder.glob("*.ipynb") if BACKUP not in p.name)


def behind(src_dir: Path = ROOT / "solutions", dst_dir: Path = ROOT / "notebooks") -> list[str]:
    """Participant notebooks the learner edited that the course has changed since (:func:`is_behind`): those
    ``make notebooks`` keeps as they are and ``FORCE=1`` regenerates."""
    return [
        name
        for name, text in render(src_dir).items()
        if (dst_dir / name).exists() and is_edited(dst_dir / name) and is_behind(dst_dir / name, text)
    ]


def generate(
    src_dir: Path = ROOT / "solutions", dst_dir: Path = ROOT / "notebooks", force: bool = False, log=print
) -> list[Path]:
    """Writes participant notebooks and returns those written.

    A notebook the learner edited since it was generated is their work, not an error, and is left as it is. When
    the course has changed it since (:func:`is_behind`) it is named in the log; with ``force`` it is then copied to
    :func:`backup_name` first and regenerated."""
    rendered = render(src_dir)
    dst_dir.mkdir(parents=True, exist_ok=True)
    written, kept = [], []
    for name, text in rendered.items():
        path = dst_dir / name
        if path.exists() and path.read_text() == text:
            continue
        if path.exists() and not is_edited(path) and has_outputs(path):  # run, not edited: its outputs are theirs
            if not is_behind(path, text):  # the course's cells as they are now: nothing to take
                continue
            backup = backup_name(path)
            backup.write_bytes(path.read_bytes())
            log(f"saved your run of {name} (its outputs) as {backup.name} before writing the course's new version")
        elif path.exists() and is_edited(path):
            if not is_behind(path, text):  # the learner's edits of the course's current version: nothing to take
                continue
            if not force:
                if _read(path) is None:  # its recorded hash is unreadable too: whether the course changed is unknown
                    log(
                        f"kept {dst_dir.name}/{name} as it is: it is no readable notebook (its JSON is broken, or "
                        f"a cell lost its source). `make notebooks FORCE=1` saves it as NAME.backup-<time>.ipynb "
                        f"beside it and writes the course's version."
                    )
                else:
                    kept.append(name)
                continue
            backup = backup_name(path)
            backup.write_bytes(path.read_bytes())
            log(
                f"saved your edited {name} as {backup.name} (open it in JupyterLab; to restore it, rename it back "
                f"to {name})"
            )
        path.write_text(text)
        written.append(path)
        log(f"wrote {dst_dir.name}/{name}")
    if kept:
        log(
            f"kept {', '.join(kept)} as you edited {'it' if len(kept) == 1 else 'them'}: the course has a newer "
            f"version. To take it, run `make notebooks FORCE=1`, which first saves your copy as "
            f"NAME.backup-<time>.ipynb beside it."
        )
    return written


def differences(
    src_dir: Path = ROOT / "solutions", dst_dir: Path = ROOT / "notebooks", modules_dir: Path | None = None
) -> list[str]:
    """Generated files (participant notebooks, lesson modules) that are missing, stale, or left without a solution.

    ``modules_dir`` defaults to the ``lessons/`` folder beside ``dst_dir``."""
    import nbformat

    modules_dir = dst_dir.parent / "lessons" if modules_dir is None else modules_dir
    bad = []
    if src_dir == ROOT / "solutions":  # the course's own documents and setup cells
        for name, style in TABLE_DOCS.items():
            text = (ROOT / name).read_text()
            if _with_table(text, lesson_table(style), name) != text:
                bad.append(f"{name} (lesson table)")
        want = setup_cell_source()
        for path in sorted(src_dir.glob("*.ipynb")):
            first = next((c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"), None)
            if first is None or first.source != want:
                bad.append(f"solutions/{path.name} (setup cell)")
    for folder, rendered, present in (
        (dst_dir, render(src_dir), participant_notebooks(dst_dir)),
        (modules_dir, render_modules(src_dir), sorted(modules_dir.glob("l[0-9]*.py"))),
    ):
        bad += [
            f"{folder.name}/{n}"
            for n, text in rendered.items()
            if not (folder / n).exists() or (folder / n).read_text() != text
        ]
        bad += [f"{folder.name}/{p.name}" for p in present if p.name not in rendered]
    return sorted(bad)


def described_differences(src_dir: Path = ROOT / "solutions", dst_dir: Path = ROOT / "notebooks") -> list[str]:
    """:func:`differences`, each participant notebook that is the learner's own work said so (``make notebooks``
    leaves those alone, so "not what it generates" alone sent a learner to run it in vain)."""
    rendered = render(src_dir)
    out = []
    for item in differences(src_dir, dst_dir):
        folder, _, name = item.partition("/")
        path = dst_dir / name
        if folder != dst_dir.name or not path.exists():
            out.append(item)
        elif name not in rendered:
            out.append(f"{item} (no solution makes it: a copy or a renamed notebook of yours? `make notebooks` "
                       "leaves it alone)")  # fmt: skip
        elif is_edited(path):
            newer = "; the course has a newer version: `make notebooks FORCE=1` takes it after saving a backup"
            newer = newer if is_behind(path, rendered[name]) else ""
            out.append(f"{item} (your edits, kept by `make notebooks`{newer})")
        elif has_outputs(path):
            out.append(f"{item} (your outputs: `make notebooks` keeps them until the course changes the notebook)")
        else:
            out.append(item)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Generate participant notebooks from solutions.")
    parser.add_argument("--check", action="store_true", help="only report whether notebooks/ is up to date")
    parser.add_argument("--force", action="store_true", help="also regenerate edited notebooks the course changed")
    parser.add_argument("--present", metavar="DIR", help="only write presenter copies of the solutions into DIR")
    args = parser.parse_args(argv)
    if args.present:
        written = write_presenter_copies(Path(args.present))
        print(f"presenter copies in {args.present}: {len(written)} written")
        return 0
    if args.check:
        bad = described_differences()
        if bad:
            print("not what `make notebooks` generates from solutions/:\n" + "\n".join(f"  {item}" for item in bad))
            return 1
        print("notebooks/ and lessons/ are up to date with solutions/")
        return 0
    try:
        render(ROOT / "solutions")  # every solution's markers checked before anything is written (a MarkerError)
        written = sync_setup_cells()
        written += write_lesson_tables()
        written += write_modules()  # generated code, never edited by hand: always rewritten
        written += generate(force=args.force)
        kept = behind()  # generate named them, and said how to take the course's version
    except MarkerError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not written and not kept:
        print("notebooks/ and lessons/ already up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
