"""Mutation testing of a lesson's checks: does each check catch the small mistakes a learner makes?

Takes one function of a lesson module (an exercise: a kernel, a launcher), makes mutants of it, one small change
each (a comparison off by one, a constant off by one, + for -, // for %, a mask or a transpose dropped, one stride for
another, the other reduction axis), and runs the exercise's check on each, on this machine (the interpreter on a
CPU). A mutant the check passes "survives": either the change does not matter (an equivalent mutant: read it), or
the check has a hole a learner's mistake can pass through. "crashed" is a mutant that took the interpreter down
(a wild pointer) before the check could say anything.

    python -m utils.mutants lessons/l12_quantization.py w4a16_kernel "check_w4a16(w4a16, quiet=True)"
    python -m utils.mutants lessons/l10_sort_scan_data.py cumsum_kernel "check_cumsum(cumsum, quiet=True)" -j 2

The check is evaluated in the mutated module's namespace, so it calls the mutant through the module's own
launchers. Each mutant is a copy of the whole module with the one function rewritten (``ast.unparse``: comments
go, behaviour stays), imported under a name of its own.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import copy
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

FLIP_COMPARE = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
                ast.NotEq: ast.Eq}  # fmt: skip
FLIP_BINOP = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.LShift: ast.RShift, ast.RShift: ast.LShift, ast.Mult: ast.Add,
              ast.FloorDiv: ast.Mod, ast.Mod: ast.FloorDiv}  # fmt: skip


def _sites(fn: ast.FunctionDef):
    """Every mutation of fn's body, as (description, the node's index in a walk of the body, the change): the
    node found again by its index in a deep copy, so that each mutant starts from the unchanged function."""
    nodes = [n for stmt in fn.body for n in ast.walk(stmt)]
    in_messages = {id(n) for j in nodes if isinstance(j, ast.JoinedStr) for n in ast.walk(j)}  # f-strings: words only
    strides = sorted({a.arg for a in fn.args.args if a.arg.startswith("stride")})
    for i, node in enumerate(nodes):
        if id(node) in in_messages:
            continue
        where = f"line {getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in FLIP_COMPARE:
            new = FLIP_COMPARE[type(node.ops[0])]
            yield f"{where}: {ast.unparse(node)} -> {new.__name__}", i, ("compare", new)
        elif isinstance(node, ast.BinOp) and type(node.op) in FLIP_BINOP:
            new = FLIP_BINOP[type(node.op)]
            yield f"{where}: {ast.unparse(node)} -> {new.__name__}", i, ("binop", new)
        elif isinstance(node, ast.Constant) and type(node.value) is int and 0 <= node.value <= 64:
            for delta in (1, -1):
                yield f"{where}: constant {node.value} -> {node.value + delta}", i, ("const", delta)
        elif isinstance(node, ast.Call):
            name = ast.unparse(node.func)
            for k, kw in enumerate(node.keywords):
                if kw.arg == "mask":
                    yield f"{where}: {name}(...) without its mask", i, ("drop_kw", k)
                elif kw.arg == "other":  # (an axis=0 becomes 1 with the constants, below)
                    yield f"{where}: {name}(..., other={ast.unparse(kw.value)}) -> other=1", i, ("other", k)
            if name in ("tl.trans", "tl.sqrt", "tl.exp", "tl.abs") and len(node.args) == 1:
                yield f"{where}: {ast.unparse(node)} -> its argument", i, ("unwrap", None)
        elif isinstance(node, ast.Name) and node.id in strides and len(strides) > 1:
            other = strides[(strides.index(node.id) + 1) % len(strides)]
            yield f"{where}: {node.id} -> {other}", i, ("rename", other)


def _apply(fn: ast.FunctionDef, index: int, change) -> ast.FunctionDef:
    fn = copy.deepcopy(fn)
    node = [n for stmt in fn.body for n in ast.walk(stmt)][index]
    kind, arg = change
    if kind == "compare":
        node.ops = [arg()]
    elif kind == "binop":
        node.op = arg()
    elif kind == "const":
        node.value += arg
    elif kind == "drop_kw":  # the mask, and the `other` that only a mask allows
        node.keywords = [kw for k, kw in enumerate(node.keywords) if k != arg and kw.arg != "other"]
    elif kind == "other":
        node.keywords[arg].value = ast.Constant(1)
    elif kind == "unwrap":
        return _replace(fn, node, node.args[0])
    elif kind == "rename":
        node.id = arg
    return fn


def _replace(fn, old, new):
    class Swap(ast.NodeTransformer):
        def visit(self, node):
            return new if node is old else super().visit(node)

    return ast.fix_missing_locations(Swap().visit(fn))


def _find(tree: ast.Module, function: str) -> ast.FunctionDef:
    """The top-level function `function`, or the method `Class.method`."""
    scope, _, name = function.rpartition(".")
    body = tree.body
    if scope:
        cls = next((n for n in body if isinstance(n, ast.ClassDef) and n.name == scope), None)
        body = cls.body if cls is not None else []
    fn = next((n for n in body if isinstance(n, ast.FunctionDef) and n.name == name), None)
    if fn is None:
        raise SystemExit(f"no function {function!r} in the module (a top-level function, or Class.method)")
    return fn


def mutants(source: str, function: str):
    """(description, the module's source with `function` mutated) for every mutation site of `function` (a
    top-level function, or a method as ``Class.method``)."""
    fn = _find(ast.parse(source), function)
    lines = source.splitlines(keepends=True)
    start = min([d.lineno for d in fn.decorator_list] + [fn.lineno]) - 1
    decorators = "".join(lines[start : fn.lineno - 1])  # as written, above the function
    for what, index, change in _sites(fn):
        mutated = _apply(fn, index, change)
        mutated.decorator_list = []
        try:
            body = ast.unparse(mutated)
        except Exception:  # a mutation unparse cannot write: not a mutant
            continue
        body = textwrap.indent(body, " " * fn.col_offset)  # a method keeps its class's indentation
        yield what, "".join(lines[:start]) + decorators + body + "\n" + "".join(lines[fn.end_lineno :])


_WORKER = r"""
import importlib, importlib.util, json, sys
from utils import setup
setup(quiet=True)


def mutant_outcome(check, job):
    spec = importlib.util.spec_from_file_location(job["name"], job["path"])
    module = importlib.util.module_from_spec(spec)
    sys.modules[job["name"]] = module
    if job.get("alias"):  # the mutant also answers to the module's own name: what tests import gets it
        package, _, name = job["alias"].rpartition(".")
        sys.modules[job["alias"]] = module
        if package:
            setattr(importlib.import_module(package), name, module)
    try:
        spec.loader.exec_module(module)
        exec(check, vars(module))
        return {"outcome": "survived"}
    except BaseException as e:
        text = str(e).strip()
        return {"outcome": "killed", "why": f"{type(e).__name__}: {text.splitlines()[0] if text else ''}"[:300]}


if __name__ == "__main__":
    print("RESULT " + json.dumps(mutant_outcome(sys.argv[1], json.loads(sys.argv[2]))), flush=True)
"""

# Starting Python and importing torch and triton costs about 1.6 s a mutant, against a few hundredths for most
# checks. Where the system forks (Linux), one process a slot pays it once, with the lesson module's own imports,
# then forks a child a mutant: each child still starts from the same untouched state and may crash or hang alone.
_SERVER = (
    r"""
import os, torch
threads = torch.get_num_threads()
torch.set_num_threads(1)  # a fork after OpenMP started its threads hangs the child's first parallel op: none here
alone = len(os.listdir("/proc/self/task"))  # the threads torch starts at import (a fork has been safe with them)
"""
    + _WORKER.split('if __name__ == "__main__":')[0]
    + r"""
import os, signal, time

for name in json.loads(sys.argv[1]):  # what the lesson module imports, so that each child finds it imported
    try:
        importlib.import_module(name)
    except BaseException:
        pass  # the child meets the same error when its module imports it, and reports it there
print("READY", flush=True)
for line in sys.stdin:
    request = json.loads(line)
    result_path, log_path = request["job"]["path"] + ".json", request["job"]["path"] + ".log"
    if len(os.listdir("/proc/self/task")) > alone:  # an import started threads: a child could inherit a held lock
        print("UNSAFE", flush=True)
        break
    sys.stdout.flush(), sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: its output to a log, its outcome to a file, then out without the parent's atexit
        log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(log, 1), os.dup2(log, 2)
        torch.set_num_threads(threads)  # its own OpenMP threads, started afresh
        try:
            with open(result_path + ".tmp", "w") as f:
                json.dump(mutant_outcome(request["check"], request["job"]), f)
            os.rename(result_path + ".tmp", result_path)
        finally:
            sys.stdout.flush(), sys.stderr.flush()
            os._exit(0)
    deadline, status = time.monotonic() + request["timeout"], None
    while status is None:
        done, code = os.waitpid(pid, os.WNOHANG)
        if done:
            status = os.waitstatus_to_exitcode(code)
        elif time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL), os.waitpid(pid, 0)
            status = "timeout"
        else:
            time.sleep(0.005)
    if os.path.exists(result_path):
        with open(result_path) as f:
            result = json.load(f)
    elif status == "timeout":
        result = {"outcome": "timeout", "why": f"the check ran past {request['timeout']} s"}
    else:
        with open(log_path, errors="replace") as f:
            tail = f.read()[-200:].strip()
        result = {"outcome": "crashed", "why": f"exit status {status}: {tail}"}
    print("RESULT " + json.dumps(result), flush=True)
"""
)

_ENV = {"PYTHONPATH": str(ROOT), "TRITON_INTERPRET": "1"}  # the interpreter, GPU or not
FORK = hasattr(os, "fork") and sys.platform == "linux"  # macOS's system libraries are not safe to fork


def _result(lines) -> dict | None:
    """The outcome a worker printed on its RESULT line, None if it printed none."""
    for line in lines:
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    return None


def _run(check: str, job: dict, timeout: int) -> dict:
    """One mutant in a process of its own: a mutant may crash the interpreter (a wild pointer) or hang."""
    cmd = [sys.executable, "-c", _WORKER, check, json.dumps(job)]
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env={**os.environ, **_ENV}, capture_output=True, text=True,
                              timeout=timeout)  # fmt: skip
    except subprocess.TimeoutExpired:
        return {"outcome": "timeout", "why": f"the check ran past {timeout} s"}
    result = _result(proc.stdout.splitlines())
    return result or {"outcome": "crashed", "why": f"exit status {proc.returncode}: {proc.stderr.strip()[-200:]}"}


def _imports(source: str) -> list[str]:
    """The modules a module's top level imports (absolute imports only), in order."""
    names = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.append(node.module)
    return list(dict.fromkeys(names))


class _Forks:
    """A process that imports the course and the lesson's imports once, then forks a child for each mutant (see
    _SERVER). Where it cannot start, dies, or has more threads than torch starts (a fork copies one thread, and a
    lock another held stays held in the child), each mutant runs in a fresh process (_run) instead."""

    def __init__(self, preload: list[str], log: Path):
        self.proc, self.ready = None, False
        if not FORK:
            return
        self.stderr = open(log, "w")
        self.proc = subprocess.Popen([sys.executable, "-c", _SERVER, json.dumps(preload)], cwd=ROOT,
                                     env={**os.environ, **_ENV}, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.stderr, text=True, start_new_session=True)  # fmt: skip

    def _line(self) -> str:
        """The next line of the protocol (READY, RESULT ..., UNSAFE: it will not fork), past anything else an import
        printed; "" at the end."""
        for line in self.proc.stdout:
            if line.startswith(("READY", "RESULT ", "UNSAFE")):
                return line.rstrip("\n")
        return ""

    def run(self, check: str, job: dict, timeout: int) -> dict:
        if self.proc is not None and not self.ready:  # the slots start side by side: wait for this one here
            self.ready = self._line() == "READY"
            if not self.ready:
                self.close()
        if self.proc is not None:
            try:
                self.proc.stdin.write(json.dumps({"check": check, "job": job, "timeout": timeout}) + "\n")
                self.proc.stdin.flush()
                result = _result([self._line()])
            except OSError:  # BrokenPipeError among them: the process died
                result = None
            if result is not None:
                return result
            self.close()
        return _run(check, job, timeout)

    def close(self):
        """Ends the process and any child still running (one hung when the caller was interrupted): its group."""
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            self.stderr.close()
            self.proc = None


def run(
    module,
    function: str,
    check: str,
    *,
    jobs: int = 2,
    timeout: int = 300,
    only: str | None = None,
    quiet: bool = False,
    alias: str | None = None,
) -> list[dict]:
    """Makes the mutants of `function` in the lesson module at `module` (a path, from the course's root when
    relative), runs `check` on each and returns their outcomes: {"what", "outcome" (killed, survived, timeout,
    crashed), "why"}. Prints a mark per mutant as it finishes, then the ones that were not killed (unless quiet)."""
    from concurrent.futures import ThreadPoolExecutor

    path = Path(module) if Path(module).is_absolute() else ROOT / module
    found = [(what, text) for what, text in mutants(path.read_text(), function) if not only or only in what]
    say = (lambda *a, **k: None) if quiet else print
    say(f"{len(found)} mutants of {function}; check: {check}", flush=True)
    with tempfile.TemporaryDirectory(prefix="mutants-") as tmp:
        jobs_ = []
        for i, (_, text) in enumerate(found):
            mutant = Path(tmp) / f"{path.stem}_mutant{i}.py"
            mutant.write_text(text)
            jobs_.append({"name": f"{path.stem}_mutant{i}", "path": str(mutant), "alias": alias})
        slots = max(1, min(jobs, len(jobs_)))
        preload = [name for name in _imports(path.read_text()) if name != alias]
        free = queue.SimpleQueue()
        forks = [_Forks(preload, Path(tmp) / f"forks{i}.log") for i in range(slots)]
        for fork in forks:
            free.put(fork)

        def one(job):
            fork = free.get()
            try:
                r = fork.run(check, job, timeout)
            finally:
                free.put(fork)
            say({"killed": ".", "survived": "S", "timeout": "T", "crashed": "C"}[r["outcome"]], end="", flush=True)
            return r

        try:
            with ThreadPoolExecutor(slots) as pool:
                results = list(pool.map(one, jobs_))
        finally:
            for fork in forks:
                fork.close()
    say()
    outcomes = [{**r, "what": what} for r, (what, _) in zip(results, found)]
    for r in outcomes:
        if r["outcome"] != "killed":
            say(f"{r['outcome']:9s} {r['what']}")
    counts = {o: sum(r["outcome"] == o for r in outcomes) for o in ("killed", "survived", "timeout", "crashed")}
    say(", ".join(f"{n} {o}" for o, n in counts.items() if n))
    return outcomes


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("module", help="the lesson module, e.g. lessons/l12_quantization.py")
    parser.add_argument("function", help="the function to mutate (a kernel, a launcher, or Class.method)")
    parser.add_argument("check", help="code run in the mutated module, e.g. 'check_w4a16(w4a16, quiet=True)'")
    parser.add_argument("-j", "--jobs", type=int, default=2, help="mutants run at once")
    parser.add_argument("--timeout", type=int, default=300, help="seconds a check may take")
    parser.add_argument("--only", help="only the mutants whose description contains this text")
    parser.add_argument("--json", help="also write every outcome to this file")
    parser.add_argument(
        "--as",
        dest="alias",
        help="also register each mutant as this module (e.g. lessons.l12_quantization), so that a check running the "
        "tests, such as \"assert __import__('pytest').main(['-x', 'tests/test_lesson12.py']) == 0\", imports it",
    )
    args = parser.parse_args(argv)
    outcomes = run(args.module, args.function, args.check, jobs=args.jobs, timeout=args.timeout, only=args.only,
                   alias=args.alias)  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(outcomes, indent=1))


if __name__ == "__main__":
    main()


def plant(monkeypatch, folder, module, name: str, *edits) -> None:
    """For a test: swaps ``module.<name>`` (a function, a kernel, or a class's method as ``"Class.method"``) for a
    copy with one learner's mistake written in by hand, where :func:`mutants` makes them by rule: its source with
    each ``(old, new)`` of ``edits`` replaced in turn (every ``old`` must be there), compiled from a file of its own
    in ``folder`` (``triton.jit`` reads a kernel's source from its file) in the module's globals. ``monkeypatch``
    (pytest's) puts the original back after the test. A kernel under ``@triton.autotune`` is planted with its
    decorators; a planted ``@triton.jit`` helper takes its callers along (see :func:`_plant_callers`)."""
    import inspect

    owner, _, attr = name.rpartition(".")
    holder = getattr(module, owner) if owner else module
    fn = inner = getattr(holder, attr)
    while hasattr(inner, "fn"):  # a kernel under @triton.autotune or @triton.heuristics: its source, decorators and all
        inner = inner.fn
    source = textwrap.dedent(inspect.getsource(inner))
    for old, new in edits:
        if old not in source:
            raise AssertionError(f"{name}: {old!r} is not in its source")
        source = source.replace(old, new)
    path = Path(folder) / f"{attr}_planted.py"
    path.write_text(source)
    scope = dict(vars(module))
    exec(compile(source, str(path), "exec"), scope)
    monkeypatch.setattr(holder, attr, scope[attr])
    if not owner and _is_jit(fn):
        _plant_callers(monkeypatch, folder, module, attr)


def _is_jit(obj) -> bool:
    """A ``@triton.jit`` function, compiled or interpreted."""
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    return isinstance(obj, (JITFunction, InterpretedFunction))


def _plant_callers(monkeypatch, folder, module, callee: str) -> None:
    """Compiled, a kernel keeps the binary it built with the helpers it called then (Triton's cache knows a kernel by
    its arguments, not by its helpers' sources), so a planted helper would be seen only by a kernel never launched
    before in the process: each ``@triton.jit`` function of ``module`` that calls ``callee`` is planted again, a
    fresh copy with no edit that compiles with the planted helper (and its callers in turn), an autotuned one with
    its decorators (it would otherwise keep the binaries of its tuning, and a launcher's prepared launch of them:
    utils.launch.Table keys them by the kernel object). The interpreter reads the helpers at every launch: there it
    changes nothing."""
    import inspect
    import re

    calls = re.compile(rf"\b{re.escape(callee)}\s*\(")
    for name, value in list(vars(module).items()):
        inner = value
        while not _is_jit(inner) and hasattr(inner, "fn"):  # under @triton.autotune or @triton.heuristics
            inner = inner.fn
        own = _is_jit(inner) and inner.fn.__module__ == module.__name__  # not one imported from another lesson
        if name != callee and own and calls.search(inspect.getsource(inner.fn)):
            plant(monkeypatch, folder, module, name)
