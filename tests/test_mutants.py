"""utils.mutants: it must make one mutant per mutation site, each the module with only that change, and tell a
check that catches a mutant from one that lets it through."""

import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from utils import mutants

ROOT = Path(__file__).resolve().parents[1]

TOY = '''
def count_below(xs, limit, stride_a=1, stride_b=1):
    """How many of xs are below limit."""
    n = 0
    for x in xs:
        if x < limit:
            n += 1
    if n > 99:
        raise ValueError(f"{n} is too many: at most {99 + 0}")
    return n


def check_weak(fn):
    assert fn([1, 5], 3) == 1


def check_strong(fn):
    assert fn([1, 3, 5], 3) == 1, "a value equal to the limit is not below it"
    assert fn([], 3) == 0
'''


def test_one_mutant_per_site_and_nothing_else_changes():
    found = dict(mutants.mutants(TOY, "count_below"))
    assert set(found) == {
        "line 4: constant 0 -> 1",
        "line 4: constant 0 -> -1",
        "line 6: x < limit -> LtE",
        "line 7: constant 1 -> 2",
        "line 7: constant 1 -> 0",
        "line 8: n > 99 -> GtE",
    }, "the f-string's 99 + 0 is words, not code: no mutant; 99 is past the small constants mutated"
    for text in found.values():
        assert text.count("def check_strong") == 1 and text.endswith(TOY[TOY.index("\n\ndef check_weak") + 1 :])
    assert "if x <= limit:" in found["line 6: x < limit -> LtE"]


def test_a_method_keeps_its_class_indentation():
    source = "class Counter:\n    n = 0\n\n    def bump(self, by):\n        self.n += by + 1\n        return self.n\n"
    found = dict(mutants.mutants(source, "Counter.bump"))
    assert set(found) == {"line 5: by + 1 -> Sub", "line 5: constant 1 -> 2", "line 5: constant 1 -> 0"}
    for text in found.values():
        namespace = {}
        exec(compile(text, "mutant", "exec"), namespace)  # still a class with its method
        assert namespace["Counter"]().bump(2) in (1, 4, 2)  # by - 1, by + 2, by + 0: never the 3 of by + 1


def test_a_weak_check_lets_the_off_by_one_through_and_a_strong_one_does_not(tmp_path):
    module = tmp_path / "toy.py"
    module.write_text(TOY)
    outcomes = {}
    for check in ("check_weak(count_below)", "check_strong(count_below)"):
        out = tmp_path / f"{check[:11]}.json"
        run = subprocess.run(
            [sys.executable, "-m", "utils.mutants", str(module), "count_below", check, "--only", "line 6", "--json",
             str(out)],
            cwd=ROOT, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert run.returncode == 0, run.stderr[-2000:]
        (result,) = json.loads(out.read_text())
        outcomes[check[:11]] = result
    assert outcomes["check_weak("]["outcome"] == "survived"
    assert outcomes["check_stron"]["outcome"] == "killed"
    assert "equal to the limit" in outcomes["check_stron"]["why"]


def test_run_returns_the_outcomes_and_leaves_this_process_as_it_was(tmp_path, monkeypatch):
    """A notebook on a GPU calls run(): its own kernels must stay compiled, so the interpreter is switched on for
    the mutants' processes only."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    module = tmp_path / "toy.py"
    module.write_text(TOY)
    outcomes = mutants.run(module, "count_below", "check_strong(count_below)", only="constant 1", quiet=True)
    assert [(o["what"], o["outcome"]) for o in outcomes] == [
        ("line 7: constant 1 -> 2", "killed"),
        ("line 7: constant 1 -> 0", "killed"),
    ]
    assert "TRITON_INTERPRET" not in __import__("os").environ


def test_as_registers_each_mutant_under_the_module_name_the_tests_import(tmp_path):
    """--as / alias=: a check that imports the module by its own name (a test file does) gets the mutant."""
    module = tmp_path / "toy.py"
    module.write_text(TOY)
    same = "import toy_alias\nassert toy_alias is __import__('sys').modules[__name__]"
    (kept,) = mutants.run(module, "count_below", same, only="line 6", alias="toy_alias", quiet=True)
    assert kept["outcome"] == "survived", kept
    runs = same + "\nassert toy_alias.count_below([1, 3, 5], 3) == 1"
    (caught,) = mutants.run(module, "count_below", runs, only="line 6", alias="toy_alias", quiet=True)
    assert caught["outcome"] == "killed" and caught["why"].startswith("AssertionError"), caught


def test_a_planted_helper_takes_the_kernels_that_call_it_along(monkeypatch, tmp_path):
    """Compiled, bitonic_sort_kernel kept the binary built with the compare_exchange of its first launch: a planted
    compare_exchange alone was never run on a GPU (session 28's H100 run named another planted mistake's hint). The
    kernels that call it are planted again, fresh, with the planted helper in their globals; the others stay."""
    from lessons import l10_sort_scan_data as L

    kernel, helper, other = L.bitonic_sort_kernel, L.compare_exchange, L.cumsum_kernel
    with monkeypatch.context() as m:
        lanes = ("keep_min = ascending == (idx < partner)", "keep_min = ascending")
        mutants.plant(m, tmp_path, L, "compare_exchange", lanes)
        assert L.compare_exchange is not helper
        assert L.bitonic_sort_kernel is not kernel
        assert L.bitonic_sort_kernel.fn.__globals__["compare_exchange"] is L.compare_exchange
        assert L.cumsum_kernel is other  # calls no compare_exchange
        x = torch.tensor([[3.0, 1.0, 2.0, 0.0]], device=L.utils.mode.current().device)  # the GPU's, where there is one
        assert not torch.equal(L.bitonic_sort(x), x.sort().values)  # the planted mistake runs through the kernel
    assert (L.bitonic_sort_kernel, L.compare_exchange) == (kernel, helper)


def test_a_planted_helper_takes_its_autotuned_callers_along(monkeypatch, tmp_path):
    """Session 31's H100 run: three planted mistakes in lesson 05's epilogue passed their checks, since matmul's
    autotuned kernels, which call it, were not planted again (only a bare jit function was), and kept the binaries
    of their first launches. Each autotuned caller is planted again, decorators and all; the others stay."""
    from lessons import l05_matmul as L

    callers = {name: getattr(L, name) for name in ("matmul_kernel", "matmul_persistent_kernel")}
    other = L.matmul_tiled_kernel  # calls tile_dot, not epilogue
    assert "epilogue(" not in inspect.getsource(other.fn)
    with monkeypatch.context() as m:
        mutants.plant(m, tmp_path, L, "epilogue", ("acc = acc * tl.sigmoid(acc)", "acc = tl.sigmoid(acc)"))
        for name, kernel in callers.items():
            planted = getattr(L, name)
            assert type(planted) is type(kernel) and planted is not kernel, name  # an autotuner again
            assert planted.configs == kernel.configs, name
            assert planted.fn.fn.__globals__["epilogue"] is L.epilogue, name
        assert L.matmul_tiled_kernel is other
    assert all(getattr(L, name) is kernel for name, kernel in callers.items())


def test_a_kernel_under_autotune_is_planted_with_its_decorators(monkeypatch, tmp_path):
    """plant read a jit function's source through one .fn: an autotuned kernel's .fn is the jit function, whose own
    source it could not read (a helper of test_lesson05 had to plant it by hand)."""
    import inspect

    from lessons import l05_matmul as L

    kernel = L.matmul_persistent_kernel
    loop = "tl.range(tl.program_id(0), num_tiles, NUM_SMS)"
    mutants.plant(monkeypatch, tmp_path, L, "matmul_persistent_kernel", (loop, "tl.range(0, num_tiles, NUM_SMS)"))
    planted = L.matmul_persistent_kernel
    assert type(planted) is type(kernel) and planted is not kernel  # an autotuner again, with the configs
    assert planted.configs == kernel.configs
    assert "tl.range(0, num_tiles, NUM_SMS)" in inspect.getsource(planted.fn.fn)


CRASH_OR_HANG = """import os
if count_below([1, 3, 5], 3) == 2:
    os.abort()
while count_below([1], 3) == 0:
    pass
"""


@pytest.mark.parametrize("fork", [True, False], ids=["forked", "fresh"])
def test_a_mutant_that_crashes_or_hangs_is_told_and_the_next_still_runs(tmp_path, monkeypatch, fork):
    """Each mutant runs in a process of its own: forked from one that imported the course once (Linux), or a fresh
    one. A mutant that aborts is "crashed", one that hangs "timeout", and the mutants after them still get their
    outcomes from the same slot (jobs=1)."""
    if fork and not mutants.FORK:
        pytest.skip("this system does not fork: every mutant runs in a fresh process")
    monkeypatch.setattr(mutants, "FORK", fork)
    module = tmp_path / "toy.py"
    module.write_text(TOY)
    check = CRASH_OR_HANG + "check_strong(count_below)"
    # a fresh process takes over a second to start, more on a busy machine: there, one mutant that crashes only
    outcomes = mutants.run(module, "count_below", check, only="line " if fork else "constant 1 -> 2", jobs=1,
                           timeout=2 if fork else 60, quiet=True)  # fmt: skip
    want = {  # what count_below([1, 3, 5], 3) and count_below([1], 3) give: 2 aborts, 0 and 0 hangs
        "line 4: constant 0 -> 1": "crashed",  # 2
        "line 4: constant 0 -> -1": "timeout",  # 0 and 0
        "line 6: x < limit -> LtE": "crashed",  # 2
        "line 7: constant 1 -> 2": "crashed",  # 2
        "line 7: constant 1 -> 0": "timeout",  # 0 and 0
        "line 8: n > 99 -> GtE": "survived",  # 1 and 1: right, and check_strong passes
    }
    assert {o["what"]: o["outcome"] for o in outcomes} == {k: v for k, v in want.items() if fork or "1 -> 2" in k}
    assert all(o["why"].startswith("exit status -6") for o in outcomes if o["outcome"] == "crashed"), outcomes


@pytest.mark.parametrize("fork", [True, False], ids=["forked", "fresh"])
def test_where_the_system_forks_each_mutant_is_forked_from_one_prepared_process(tmp_path, monkeypatch, fork):
    """Forked, a mutant's parent is the slot's process (which imported torch and Triton once), not this one; its
    module's own state is fresh all the same: what one mutant's check changes, the next does not see."""
    if fork and not mutants.FORK:
        pytest.skip("this system does not fork")
    monkeypatch.setattr(mutants, "FORK", fork)
    module = tmp_path / "toy.py"
    module.write_text(TOY + "\nSEEN = []\n")
    check = "import os, sys\nSEEN.append(1)\nraise SystemExit(f'{os.getppid()} {len(SEEN)} {\"torch\" in sys.modules}')"
    only = "constant 1" if fork else "constant 1 -> 2"  # forked, two mutants from one process; fresh, one is enough
    outcomes = mutants.run(module, "count_below", check, only=only, jobs=1, quiet=True)
    whys = [o["why"].split(": ", 1)[1].split() for o in outcomes]
    assert len(whys) == (2 if fork else 1) and all(why[1:] == ["1", "True"] for why in whys), outcomes
    parents = {int(why[0]) for why in whys}
    if fork:
        assert len(parents) == 1 and os.getpid() not in parents, outcomes
    else:
        assert parents == {os.getpid()}, outcomes


def test_a_forked_mutant_runs_parallel_ops_after_its_parent_ran_some(tmp_path, monkeypatch):
    """A child forked after OpenMP started its threads hangs at its first parallel op (seen here with torch's
    matmul): the slot's process keeps to one thread, and each child gets its threads back. The slot is made to
    multiply first, as a lesson module that computed a table at import would."""
    if not mutants.FORK:
        pytest.skip("this system does not fork")
    busy = mutants._SERVER.replace('print("READY"', 'torch.randn(1000, 1000) @ torch.randn(1000, 1000)\nprint("READY"')
    monkeypatch.setattr(mutants, "_SERVER", busy)
    module = tmp_path / "toy.py"
    module.write_text(TOY)
    product = "float((torch.ones(800, 800) @ torch.ones(800, 800))[0, 0])"
    check = f"import torch\nraise SystemExit(f'{{torch.get_num_threads()}} {{{product}}}')"
    (outcome,) = mutants.run(module, "count_below", check, only="constant 1 -> 2", jobs=1, timeout=30, quiet=True)
    assert outcome["outcome"] == "killed", outcome  # a hang would be "timeout"
    assert outcome["why"] == f"SystemExit: {torch.get_num_threads()} 800.0", outcome


def test_a_slot_with_threads_of_its_own_does_not_fork(tmp_path, monkeypatch):
    """A fork copies only the forking thread: a lock another thread held stays held in the child forever. A slot
    whose imports started a thread says so and the mutants run in fresh processes (their parent is this one)."""
    if not mutants.FORK:
        pytest.skip("this system does not fork")
    threaded = "import threading\nthreading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
    monkeypatch.setattr(mutants, "_SERVER", mutants._SERVER.replace('print("READY"', threaded + 'print("READY"'))
    module = tmp_path / "toy.py"
    module.write_text(TOY)
    (outcome,) = mutants.run(module, "count_below", "raise SystemExit(__import__('os').getppid())",
                             only="constant 1 -> 2", jobs=1, quiet=True)  # fmt: skip
    assert outcome["why"] == f"SystemExit: {os.getpid()}", outcome
