"""Kernels for the notebook tests (nbval and nbclient under pytest-xdist) talk over Unix sockets, not TCP ports, and
nbval starts a kernel again when one dies while starting.

jupyter_client picks a kernel's five ports by binding to port 0 and releasing the socket; the kernel binds them a
moment later. Two workers starting kernels at the same instant can be handed the same free port, and the kernel
that loses exits before it answers `kernel_info` ("Kernel died before replying to kernel_info"), failing every cell
of its notebook though nothing in the notebook is wrong. It happened once in CI. So every kernel here gets its own
socket files (transport "ipc", named after the process and the kernel manager) and no port is chosen at all; the
restart stays for any other start-up failure. (A different, rarer hang, nbclient waiting on an idle kernel after
lesson 02's widget cells, is handled where nbclient runs: tests/test_participants.py.)

A pytest-xdist worker takes its share of the cores for torch's (OpenMP's) threads, and so do the notebook kernels and
mutant servers it starts: by default each process starts a thread a core, so n workers start n threads a core, and
OpenMP's threads wait for each other by spinning. On the project's 2-core CI machine, lessons 06 and 11's tests took
45-50 s on two workers that way and 21-26 s with a thread each, and make test's unit tests 353-393 s against 301 s
(session 39). An OMP_NUM_THREADS given is kept.
"""

import os
import sys
import tempfile
import warnings


def _share_the_cores():
    """OMP_NUM_THREADS (and MKL's) for this xdist worker and the processes it starts: the cores over the workers."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 0)  # set in a worker before its conftests load
    if workers < 2 or "OMP_NUM_THREADS" in os.environ:
        return
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    threads = max(1, cores // workers)
    os.environ["OMP_NUM_THREADS"] = str(threads)
    os.environ.setdefault("MKL_NUM_THREADS", str(threads))
    if "torch" in sys.modules:  # imported already (by a plugin), so it read the environment before this
        sys.modules["torch"].set_num_threads(threads)


_share_the_cores()

try:
    import nbval.kernel
except ImportError:  # the unit tests run without nbval too
    nbval = None

ATTEMPTS = 3

try:
    from jupyter_client.connect import ConnectionFileMixin
    from jupyter_client.manager import AsyncKernelManager, KernelManager
except ImportError:  # the unit tests run without Jupyter too
    ConnectionFileMixin = None

if ConnectionFileMixin is not None:
    ConnectionFileMixin.class_traits()["transport"].default_value = "ipc"

    def _socket_prefix(self):
        """Where an ipc kernel's sockets go: a path of its own (the default, "kernel-ipc" in the working directory,
        is shared by every kernel started there)."""
        if self.transport != "ipc":
            return "127.0.0.1"
        return os.path.join(tempfile.gettempdir(), f"kernel-{os.getpid()}-{id(self):x}-ipc")

    for _manager in (KernelManager, AsyncKernelManager):  # traitlets looks a default up on the instance's own class
        _manager._ip_default = _socket_prefix

if nbval is not None:
    _start_new_kernel = nbval.kernel.start_new_kernel

    def _start_new_kernel_again_if_it_dies(*args, **kwargs):
        for attempt in range(1, ATTEMPTS + 1):
            try:
                return _start_new_kernel(*args, **kwargs)
            except RuntimeError as error:  # "Kernel died before replying to kernel_info", or a start timeout
                if attempt == ATTEMPTS:
                    raise
                warnings.warn(f"kernel start {attempt} of {ATTEMPTS} failed ({error}); starting it again", stacklevel=2)

    nbval.kernel.start_new_kernel = _start_new_kernel_again_if_it_dies


def pytest_collection_modifyitems(items):
    """Solution notebooks under nbval (`--dist loadfile`: a notebook a worker) start with the last lesson: the later
    lessons run longest (whole models), and one drawn last would keep a worker busy after the other has finished.
    The cells of a notebook keep their order (a stable sort by notebook)."""
    notebooks = sorted({item.path.name for item in items if item.path.suffix == ".ipynb"}, reverse=True)
    if notebooks:
        rank = {name: k for k, name in enumerate(notebooks)}
        items.sort(key=lambda item: rank.get(item.path.name, -1))
