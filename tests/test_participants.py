"""Every participant notebook runs top to bottom on the CPU with errors only where the learner has work to do:

- a cell tagged ``check`` must fail, with AssertionError or NotImplementedError (a stub can never pass a check);
- a cell tagged ``exercise`` may raise NotImplementedError (its stub), nothing else;
- every other cell must run cleanly, so a learner who skips an exercise can still read and run the rest.
"""

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_participant_notebook_fails_only_in_checks(path):
    nb = nbformat.read(path, as_version=4)
    NotebookClient(
        nb, timeout=600, allow_errors=True, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    ).execute()
    problems, checks = [], 0
    for k, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        tags = cell.metadata.get("tags", [])
        errors = [o for o in cell.outputs if o.output_type == "error"]
        first_line = cell.source.splitlines()[0] if cell.source else ""
        if "check" in tags:
            checks += 1
            if not errors:
                problems.append(f"cell {k} ({first_line!r}) is a check but passed with the skeleton's stubs")
            elif errors[0].ename not in ("AssertionError", "NotImplementedError"):
                problems.append(f"check cell {k} raised {errors[0].ename}: {errors[0].evalue}")
        elif errors:
            allowed = ("NotImplementedError",) if "exercise" in tags else ()
            if errors[0].ename not in allowed:
                problems.append(f"cell {k} ({first_line!r}) raised {errors[0].ename}: {errors[0].evalue}")
    assert checks > 0, f"{path.name} has no cell tagged 'check'"
    assert not problems, "\n".join(problems)
