"""Every test process decides GPU or interpreter before any kernel is defined."""

import contextlib
import os
import re
import sys

import matplotlib
import pytest

matplotlib.use("Agg")

import utils.mode  # noqa: E402
from utils import setup  # noqa: E402

ENV = setup(quiet=True)


def pytest_addoption(parser):
    parser.addoption(
        "--program-order",
        default=None,
        help="reversed, or shuffled:SEED: under the interpreter every launch runs its programs in that order, as a "
        "GPU may (utils.order), e.g. to hold the planted-mistake batteries' diagnoses to another order",
    )
    parser.addoption(
        "--draws",
        default=None,
        type=int,
        metavar="N",
        help="seed torch's and Python's generators afresh before each test, from N and the test's id: other random "
        "inputs than a plain run draws, to find checks that name a mistake in some draws only",
    )


@pytest.fixture(autouse=True)
def _draws(request):
    base = request.config.getoption("--draws")
    if base is not None:
        import random
        import zlib

        import torch

        seed = base * 1_000_003 + zlib.crc32(request.node.nodeid.encode())
        torch.manual_seed(seed)
        random.seed(seed)
    yield


def pytest_configure(config):
    spec = config.getoption("--program-order")
    if spec:
        from utils import order

        try:
            how, seed = order.parse(spec)
        except ValueError as e:
            raise pytest.UsageError(str(e)) from None
        stack = contextlib.ExitStack()
        if not stack.enter_context(order.programs_in(how, seed=seed)):
            raise pytest.UsageError("--program-order needs the interpreter (TRITON_INTERPRET=1): a GPU picks its own")
        config.add_cleanup(stack.close)


def _passed_in(paths: str) -> set[str]:
    """The tests that the -v logs at paths (separated by os.pathsep, or spaces) report PASSED, SKIPPED or XFAIL."""
    done = set()
    for path in paths.replace(os.pathsep, " ").split():
        if not os.path.isfile(path):
            raise pytest.UsageError(f"TEST_PASSED_IN names {path!r}, which is not a file (paths from the repo's root)")
        with open(path, encoding="utf-8") as log:
            for line in log:
                # pytest-xdist's "[gw0] [ 3%] PASSED tests/...", or one process's "tests/... PASSED [ 3%]"
                found = re.match(
                    r"(?:\[gw\d+\] \[ *\d+%\] )?(?:PASSED|SKIPPED|XFAIL) (tests/\S.*?) ?$", line
                ) or re.match(r"(tests/\S.*?) (?:PASSED|SKIPPED|XFAIL)\b", line)
                if found:
                    done.add(found.group(1))
    return done


def pytest_collection_modifyitems(config, items):
    """The tests marked slow (whole notebooks, the offline compiler) run first: with two workers, a minute-long test
    drawn last keeps one worker busy while the other has nothing left to do.

    TEST_SHARD=i/n in the environment keeps every n-th test from the i-th (1 <= i <= n), the rest deselected: a run
    too long for one call of the GPU machine's time limit, split over n calls (scripts/gpu-validate.sh). Each
    worker of pytest-xdist collects the same tests in the same order, so each picks the same shard.

    TEST_PASSED_IN=LOG[:LOG...] deselects the tests those -v logs (scripts/gpu-validate.sh's) report passed or
    skipped: the rest of a run that a call's limit cut off, where the tests it reached have not changed since."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # a stable sort: the rest keep their order
    done = _passed_in(os.environ.get("TEST_PASSED_IN", ""))
    if done:
        config.hook.pytest_deselected(items=[item for item in items if item.nodeid in done])
        items[:] = [item for item in items if item.nodeid not in done]
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
