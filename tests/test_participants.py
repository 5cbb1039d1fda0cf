"""Every participant notebook runs top to bottom on the CPU with errors only where the learner has work to do:

- a cell tagged ``check`` must fail, with AssertionError or NotImplementedError (a stub can never pass a check);
- a cell tagged ``exercise`` may raise NotImplementedError (its stub), nothing else;
- every other cell must run cleanly, so a learner who skips an exercise can still read and run the rest.
"""

import sys
import warnings
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellTimeoutError, DeadKernelError

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def run_notebook(path, attempts=2):
    """The notebook at ``path`` executed top to bottom, errors kept in the cells' outputs. A run whose client stops
    hearing from an idle kernel (seen now and then on lesson 02's widget cells: the kernel has finished, nbclient
    waits on) times out after CELL_TIMEOUT and runs once more from the start, with a warning; a second time fails."""
    for attempt in range(1, attempts + 1):
        nb = nbformat.read(path, as_version=4)
        try:
            NotebookClient(
                nb,
                timeout=CELL_TIMEOUT,
                allow_errors=True,
                kernel_name="python3",
                resources={"metadata": {"path": str(path.parent)}},
            ).execute()
            return nb
        except (CellTimeoutError, DeadKernelError) as error:
            if attempt == attempts:
                raise
            warnings.warn(f"{path.name}: {type(error).__name__} on run {attempt}; running it again", stacklevel=2)


CELL_TIMEOUT = 300  # seconds: the slowest participant cell takes well under a minute on a laptop's CPU


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_participant_notebook_fails_only_in_checks(path):
    nb = run_notebook(path)
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


def test_a_run_that_times_out_runs_once_more_then_fails(monkeypatch, tmp_path):
    """run_notebook's guard against a client that stops hearing from its kernel: one more run, then the error."""
    import nbclient.exceptions

    path = tmp_path / "n.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1")]), path)
    runs = []

    class Client:
        def __init__(self, nb, **kwargs):
            self.nb = nb

        def execute(self):
            runs.append(self.nb)
            if len(runs) < failures:
                raise nbclient.exceptions.CellTimeoutError("timed out waiting for the kernel")

    monkeypatch.setattr(sys.modules[__name__], "NotebookClient", Client)
    failures = 2
    with pytest.warns(UserWarning, match="running it again"):
        assert run_notebook(path) is runs[-1] and len(runs) == 2
    runs.clear()
    failures = 3
    with pytest.warns(UserWarning), pytest.raises(nbclient.exceptions.CellTimeoutError):
        run_notebook(path)
    assert len(runs) == 2
