"""The Makefile's pinned set (requirements.txt) and environment.yml install the same packages."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def pins(lines):
    out = {}
    for line in lines:
        line = line.split("#")[0].strip().lstrip("- ").strip()
        m = re.fullmatch(r"([A-Za-z0-9_.\-\[\]]+)==([^\s;]+)", line)
        if m:
            out[m.group(1).lower()] = m.group(2)
    return out


def test_environment_yml_pins_what_requirements_txt_pins():
    req = pins((ROOT / "requirements.txt").read_text().splitlines())
    text = (ROOT / "environment.yml").read_text()
    env = pins(text.split("- pip:", 1)[1].splitlines())
    assert req, "requirements.txt pins nothing"
    assert env == req
    assert re.search(r"^\s*-\s*python=3\.1[1-9]", text, re.M), "environment.yml must pin Python 3.11+"
    assert "-e ." in text, "environment.yml must install the utils package"
    assert "defaults" not in text and "anaconda" not in text, "only conda-forge: the defaults channel is deprecated"


def test_every_requirement_is_pinned_exactly():
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            assert "==" in line, f"unpinned requirement: {line}"


def test_makefile_installs_requirements_and_the_package():
    make = (ROOT / "Makefile").read_text()
    assert "-r requirements.txt" in make and "triton-the-hard-way.pth" in make  # utils and lessons importable
    for target in ("lab:", "test:", "bench:", "notebooks:", "present:"):
        assert re.search(rf"^{target}", make, re.M), target
    assert (ROOT / ".ci" / "run").read_text().strip().endswith("make test")


def test_test_passed_in_deselects_what_a_log_reports_passed(tmp_path, request):
    """TEST_PASSED_IN (tests/conftest.py): the rest of a GPU run cut off by a call's limit. A test the log reports
    PASSED, SKIPPED or XFAIL (pytest-xdist's -v lines, or one process's) is deselected; FAILED ones and those not
    reached run again, a name with spaces and brackets included."""
    passed_in = request.config.pluginmanager.get_plugin(str(ROOT / "tests" / "conftest.py"))._passed_in
    log = tmp_path / "tests.log"
    log.write_text(
        "[gw2] [  1%] PASSED tests/test_lesson11.py::test_planted[rmsnorm dw summed along the row] \n"
        "[gw0] [  3%] FAILED tests/test_lesson08.py::test_check_names_exp \n"
        "[gw1] [  4%] SKIPPED tests/test_lesson06.py::test_one[2-64] \n"
        "tests/test_lesson10.py::test_sort[17] XFAIL (a reason)                   [  5%]\n"
        "tests/test_lesson10.py::test_sort[18] PASSED                             [  6%]\n"
        "PASSED tests/test_lesson10.py::test_sort[19]\n"  # the short summary's -rA lines: a pass too
        "FAILED tests/test_lesson10.py::test_sort[20] - AssertionError: PASSED tests/x.py::y\n"
    )
    assert passed_in(f"{log}") == {
        "tests/test_lesson11.py::test_planted[rmsnorm dw summed along the row]",
        "tests/test_lesson06.py::test_one[2-64]",
        "tests/test_lesson10.py::test_sort[17]",
        "tests/test_lesson10.py::test_sort[18]",
        "tests/test_lesson10.py::test_sort[19]",
    }
    assert passed_in("") == set()
    with pytest.raises(pytest.UsageError, match="not a file"):
        passed_in(f"{log}:{tmp_path / 'missing.log'}")


def test_an_xdist_worker_shares_the_cores_among_the_workers():
    """The root conftest gives each of n xdist workers (and the kernels it starts) cores // n OpenMP threads, torch's
    included; an OMP_NUM_THREADS given is kept, and one process alone keeps torch's default."""
    import os
    import subprocess
    import sys

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    probe = "import os, conftest, torch; print(os.environ.get('OMP_NUM_THREADS'), torch.get_num_threads())"

    def threads(**env):
        given = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "PYTEST_XDIST_WORKER_COUNT")  # this test's own worker's
        clean = {k: v for k, v in os.environ.items() if k not in given}
        done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=clean | env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return done.stdout.split()

    share = str(max(1, cores // 2))
    assert threads(PYTEST_XDIST_WORKER_COUNT="2") == [share, share]
    assert threads(PYTEST_XDIST_WORKER_COUNT=str(4 * cores)) == ["1", "1"]
    assert threads(PYTEST_XDIST_WORKER_COUNT=str(4 * cores), OMP_NUM_THREADS=str(cores)) == [str(cores)] * 2
    assert threads() == ["None", str(cores)]


def test_offline_compiles_know_the_pinned_triton():
    """utils.offline.pinned_triton() is requirements.txt's triton pin; compiles_as_pinned says whether the installed
    Triton is it (spill checks at the edge of the registers hold for that one only)."""
    import triton

    from utils import offline

    pin = pins((ROOT / "requirements.txt").read_text().splitlines())["triton"]
    assert offline.pinned_triton() == pin
    assert offline.compiles_as_pinned() == (triton.__version__ == pin)
