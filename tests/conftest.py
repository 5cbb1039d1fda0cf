"""Every test process decides GPU or interpreter before any kernel is defined."""

import os
import sys

import matplotlib
import pytest

matplotlib.use("Agg")

import utils.mode  # noqa: E402
from utils import setup  # noqa: E402

ENV = setup(quiet=True)


def pytest_collection_modifyitems(config, items):
    """The tests marked slow (whole notebooks, the offline compiler) run first: with two workers, a minute-long test
    drawn last keeps one worker busy while the other has nothing left to do.

    TEST_SHARD=i/n in the environment keeps every n-th test from the i-th (1 <= i <= n), the rest deselected: a run
    too long for one call of the GPU machine's time limit, split over n calls (scripts/gpu-validate.sh). Each
    worker of pytest-xdist collects the same tests in the same order, so each picks the same shard."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # a stable sort: the rest keep their order
    spec = os.environ.get("TEST_SHARD")
    if not spec:
        return
    i, _, n = spec.partition("/")
    if not (i.isdigit() and n.isdigit() and 1 <= int(i) <= int(n)):
        raise pytest.UsageError(f"TEST_SHARD={spec!r}: give i/n with 1 <= i <= n, e.g. TEST_SHARD=1/2 then 2/2")
    first, step = int(i) - 1, int(n)
    config.hook.pytest_deselected(items=[item for k, item in enumerate(items) if k % step != first])
    items[:] = items[first::step]


@pytest.fixture(autouse=True)
def _a_broken_cuda_context_ends_its_process(request):
    """Session 32's H100 run: a planted stray read in lesson 06 broke its worker's CUDA context, and the 13 tests the
    worker ran after it failed on the same error. After each test the context is checked; a broken one ends the
    process, naming the test: under pytest-xdist the worker (xdist reports it crashed in that test and starts another
    for the tests left), alone the session."""
    yield
    error = utils.mode.broken_cuda_context()
    if error is None:
        return
    message = f"{request.node.nodeid} left this process's CUDA context broken ({error}): no later test could run in it"
    if os.environ.get("PYTEST_XDIST_WORKER"):
        sys.stderr.write(f"{message}; this worker ends, and pytest-xdist starts another\n")
        sys.stderr.flush()
        os._exit(70)
    pytest.exit(message, returncode=3)
