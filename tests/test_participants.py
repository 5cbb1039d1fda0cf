"""Every participant notebook runs top to bottom on the CPU with errors only where the learner has work to do:

- a cell tagged ``check`` must fail, with AssertionError or NotImplementedError (a stub can never pass a check);
- a cell tagged ``exercise`` may raise NotImplementedError (its stub), nothing else;
- every other cell must run cleanly, so a learner who skips an exercise can still read and run the rest.
"""

import asyncio
import queue
import sys
import time
import warnings
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellTimeoutError, DeadKernelError

from utils.notebooks import BACKUP, backup_name, participant_notebooks

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = participant_notebooks(ROOT / "notebooks")  # the lessons, not a learner's backups (make notebooks FORCE=1)


POLL_SLICE = 1.0  # seconds: the longest a wait for the kernel's next message goes without looking at its socket again


def sliced(get_msg):
    """``channel.get_msg`` that waits in POLL_SLICE slices, each a fresh poll of the socket, until its timeout.

    Now and then (more often on a busy machine, as on lesson 02's widget cells) a wait for the kernel's reply never
    sees the reply arrive: the socket's poll misses the wake-up, and nbclient sits out the whole cell timeout before
    it gives up (jupyter/nbclient#312). A poll that starts after the message came sees it at once, so waiting in
    short slices turns that lost cell timeout into at most a slice."""

    async def get_msg_in_slices(timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = POLL_SLICE if deadline is None else min(POLL_SLICE, max(0.0, deadline - time.monotonic()))
            try:
                return await get_msg(timeout=left)
            except queue.Empty:
                if deadline is not None and time.monotonic() >= deadline:
                    raise

    return get_msg_in_slices


class SlicedNotebookClient(NotebookClient):
    """nbclient's NotebookClient whose waits on the kernel's shell and IOPub channels poll in slices (sliced)."""

    async def async_start_new_kernel_client(self):
        client = await super().async_start_new_kernel_client()
        for channel in (client.shell_channel, client.iopub_channel):
            channel.get_msg = sliced(channel.get_msg)
        return client


def run_notebook(path, attempts=2):
    """The notebook at ``path`` executed top to bottom, errors kept in the cells' outputs. A run whose client stops
    hearing from the kernel anyway times out after CELL_TIMEOUT and runs once more from the start, with a warning;
    a second time fails."""
    for attempt in range(1, attempts + 1):
        nb = nbformat.read(path, as_version=4)
        try:
            SlicedNotebookClient(
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


CELL_TIMEOUT = 120  # seconds: the slowest participant cell (lesson 12's) takes about 25 on this course's CPU machine


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


def test_a_learners_backup_is_not_run_as_a_lesson():
    """A backup `make notebooks FORCE=1` saved is the learner's work, not a lesson: it is not run, the lessons are."""
    assert NOTEBOOKS and not [p for p in NOTEBOOKS if BACKUP in p.name]
    assert BACKUP in backup_name(NOTEBOOKS[0]).name and NOTEBOOKS == participant_notebooks(ROOT / "notebooks")


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

    monkeypatch.setattr(sys.modules[__name__], "SlicedNotebookClient", Client)
    failures = 2
    with pytest.warns(UserWarning, match="running it again"):
        assert run_notebook(path) is runs[-1] and len(runs) == 2
    runs.clear()
    failures = 3
    with pytest.warns(UserWarning), pytest.raises(nbclient.exceptions.CellTimeoutError):
        run_notebook(path)
    assert len(runs) == 2


class MissesWakeUps:
    """A channel whose poll sees only the messages there when it starts: one that comes later is missed, and the
    poll sits out its whole timeout (the failure sliced works around)."""

    def __init__(self):
        self.waiting = []

    async def get_msg(self, timeout=None):
        if self.waiting:
            return self.waiting.pop(0)
        await asyncio.sleep(timeout)
        raise queue.Empty


def test_a_wait_in_slices_sees_a_message_its_first_poll_missed(monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "POLL_SLICE", 0.05)

    async def receive(channel, timeout, arrives_after=None):
        async def send():
            await asyncio.sleep(arrives_after)
            channel.waiting.append({"msg_type": "execute_reply"})

        sender = asyncio.create_task(send()) if arrives_after is not None else None
        start = time.monotonic()
        try:
            return await sliced(channel.get_msg)(timeout=timeout), time.monotonic() - start
        finally:
            if sender:
                await sender

    msg, took = asyncio.run(receive(MissesWakeUps(), timeout=5, arrives_after=0.1))
    assert msg == {"msg_type": "execute_reply"}
    assert took < 1, f"took {took:.2f} s: the first poll's missed message was not looked for again"
    start = time.monotonic()
    with pytest.raises(queue.Empty):  # nothing comes: the caller's timeout still holds, sliced or not
        asyncio.run(receive(MissesWakeUps(), timeout=0.3))
    assert 0.3 <= time.monotonic() - start < 1
