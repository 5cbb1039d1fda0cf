"""Compile a lesson's kernel for a GPU you do not have, and read what the compiler made of it.

Triton compiles ahead of time without a GPU: it only needs a target (``GPUTarget("cuda", 90, 32)`` for an H100)
and the ``ptxas`` it ships with. That is enough to answer questions about code generation on a laptop or in CI:
does this kernel use ``wgmma``, does it copy 16-byte vectors (``cp.async``) or single elements, how many registers
does it need, does it spill? It says nothing about speed.

A kernel's code depends on facts Triton takes from the arguments of a call ("specialisation"): an integer equal
to 1 becomes a constant, an integer or pointer that is a multiple of 16 is marked so. :func:`compile_kernels`
takes the values a real call would pass and derives the same facts.

The lessons' modules define their kernels under the interpreter on a machine without a GPU, and interpreted
functions cannot be compiled, so the compile runs in a fresh Python process, from the ``@triton.jit`` functions of
the module's source file (and its constants).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

_WORKER = r"""
import ast, json, os, re, subprocess, sys, tempfile, traceback
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

request = json.loads(sys.stdin.read(), object_hook=lambda d: tl.dtype(d["__tl_dtype__"]) if "__tl_dtype__" in d else d)
folder = tempfile.mkdtemp()
sys.path.insert(0, folder)
written = {}


def chain(e):
    # the error and those it came from: a CompilationError from inside a tl function (tl.zeros of a shape that is
    # not constexpr) shows only the line; the message is its cause's, and the last line printed is the innermost
    seen = []
    while e is not None and e not in seen:
        seen.append(e)
        e = e.__cause__ or e.__context__
    return seen


def segments(source):
    # ast.get_source_segment(source, node) for many nodes of one source: it splits the whole source into lines at
    # every call (about 2 s for a 3,000-line lesson's decorators and functions); here the lines are split once, as it
    # splits them (at \r\n, \r and \n only), and a node's columns are UTF-8 byte offsets, as it reads them
    lines, start = [], 0
    for m in re.finditer(r"\r\n|\r|\n", source):
        lines.append(source[start : m.end()].encode())
        start = m.end()
    lines.append(source[start:].encode())

    def segment(node):
        first, last = node.lineno - 1, node.end_lineno - 1
        if first == last:
            return lines[first][node.col_offset : node.end_col_offset].decode()
        middle = [line.decode() for line in lines[first + 1 : last]]
        return "".join([lines[first][node.col_offset :].decode(), *middle, lines[last][: node.end_col_offset].decode()])

    return segment


def module_for(path):
    # a copy of the module at `path` holding only its @triton.jit functions and constants, and the jit functions
    # it imports from other modules of its package (each in its own copy), so that names resolve as they do there
    path = os.path.abspath(path)
    if path in written:
        return written[path]
    name = "offline_" + re.sub(r"\W", "_", os.path.splitext(os.path.basename(path))[0])
    written[path] = name
    source = open(path).read()
    tree = ast.parse(source)
    segment = segments(source)
    keep = ["import math", "import triton", "import triton.language as tl", ""]
    known = {"math", "triton", "tl"}
    for node in tree.body:
        decorators = [segment(d) for d in getattr(node, "decorator_list", [])]
        jit = [d for d in decorators if re.fullmatch(r"(triton\.)?jit(\(.*\))?", d, flags=re.S)]
        if isinstance(node, ast.FunctionDef) and jit:  # @triton.jit, or @triton.jit(do_not_specialize=[...])
            decorator = "@triton." + jit[0].removeprefix("triton.")
            keep.append(decorator + "\n" + segment(node) + "\n")
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            # constants the kernels may read: LOG2E = 1.44..., EMPTY = tl.constexpr(-(2**63)), X: tl.constexpr = 4,
            # made only of literals, math, triton and constants kept before
            names = {n.id for n in ast.walk(node.value) if isinstance(n, ast.Name)}
            if isinstance(node, ast.AnnAssign):  # its annotation runs at import too: `_ENV: Env | None = None`
                names |= {n.id for n in ast.walk(node.annotation) if isinstance(n, ast.Name)}
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if names <= known and all(isinstance(t, ast.Name) for t in targets):
                keep.append(segment(node))
                known.update(t.id for t in targets)
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "triton":
            keep.insert(3, segment(node))  # from triton.language.extra.cuda import gdc_wait
            known.update(a.asname or a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            parts = node.module.split(".")
            # the module's file under the nearest folder above this one that holds it: lessons.l05_matmul from
            # lessons/ or bench/sweeps/ (the repo's root), bench.sweeps.l08g from bench/sweeps/
            folders = [os.path.dirname(path)]
            while os.path.dirname(folders[-1]) != folders[-1]:
                folders.append(os.path.dirname(folders[-1]))
            found = [f for f in (os.path.join(d, *parts) + ".py" for d in folders) if os.path.exists(f)]
            if len(parts) > 1 and found:  # from lessons.l05_matmul import tile_dot
                other_name = module_for(found[0])
                for a in node.names:  # one at a time: the copy holds only jit functions and constants
                    alias = f" as {a.asname}" if a.asname else ""
                    keep.insert(3, f"try:\n    from {other_name} import {a.name}{alias}\nexcept ImportError:\n    pass")
    with open(os.path.join(folder, name + ".py"), "w") as f:
        f.write("\n".join(keep))
    return name


ptxas = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
results = []
for job in request["jobs"]:
    try:
        module = __import__(module_for(job.get("path") or request["path"]))
        fn = getattr(module, job["kernel"])
        for param in fn.params:  # a constexpr with a default the job does not set (PDL: tl.constexpr = False)
            if param.is_constexpr and param.has_default and param.name not in job["constexprs"]:
                job["constexprs"][param.name] = param.default
        given = set(job["constexprs"]) | set(job["pointers"]) | set(job["ints"])
        missing, unknown = [n for n in fn.arg_names if n not in given], sorted(given - set(fn.arg_names))
        if missing or unknown:
            signature_text = f"{job['kernel']}({', '.join(fn.arg_names)})"
            raise ValueError(f"{signature_text}: no value for {missing}, unknown names {unknown}")
        signature, constexprs, attrs = {}, {}, {}
        for i, name in enumerate(fn.arg_names):
            if name in job["constexprs"]:
                signature[name] = "constexpr"
                constexprs[(i,)] = job["constexprs"][name]
            elif name in job["pointers"]:
                signature[name] = "*" + job["pointers"][name]
                if name not in job.get("unaligned", ()):  # allocations start on 16-byte (on a GPU, 256-byte) boundaries
                    attrs[(i,)] = [["tt.divisibility", 16]]
            else:
                value = job["ints"][name]
                if isinstance(value, bool):
                    signature[name] = "u1"
                elif isinstance(value, float):
                    signature[name] = "fp32"
                elif value == 1:
                    signature[name] = "constexpr"
                    constexprs[(i,)] = 1
                else:
                    signature[name] = "i32" if -(2**31) <= value < 2**31 else "i64"
                    if value % 16 == 0:
                        attrs[(i,)] = [["tt.divisibility", 16]]
        target = GPUTarget("cuda", job["capability"], 32)
        options = {"num_warps": job["num_warps"], "num_stages": job["num_stages"]}
        if job.get("maxnreg"):
            options["maxnreg"] = job["maxnreg"]
        compiled = triton.compile(ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs),
                                  target=target, options=options)
        ptx = compiled.asm["ptx"]
        arch = f"sm_{job['capability']}" + ("a" if job["capability"] == 90 else "")
        with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
            f.write(ptx)
        cubin = f.name[:-4] + ".cubin"
        command = [ptxas, f"-arch={arch}", "-v", f.name, "-o", cubin]
        report = subprocess.run(command, capture_output=True, text=True)
        sass = ""
        if job.get("sass") and report.returncode == 0:  # the machine code, as cuobjdump (shipped beside ptxas) reads it
            dump = subprocess.run([os.path.join(os.path.dirname(ptxas), "cuobjdump"), "-sass", cubin],
                                  capture_output=True, text=True)  # fmt: skip
            sass = dump.stdout
        for path in (f.name, cubin):  # a process per call, but a machine's temporary folder for many calls
            if os.path.exists(path):
                os.remove(path)
        regs = re.search(r"Used (\d+) registers", report.stderr)
        spills = re.search(r"(\d+) bytes spill stores", report.stderr)
        results.append({
            "ptx": ptx,
            "ttgir": compiled.asm.get("ttgir", ""),
            "sass": sass,
            "shared": int(compiled.metadata.shared),
            "registers": int(regs.group(1)) if regs else None,
            "spill_bytes": int(spills.group(1)) if spills else 0,
            "ptxas": report.stderr[-2000:],
            "error": None if report.returncode == 0 else "ptxas: " + report.stderr[-2000:],
        })
    except Exception as e:  # one kernel's failure is reported with its job, the others still compile
        lines = [line for x in chain(e) for line in traceback.format_exception_only(type(x), x)]
        results.append({"ptx": "", "shared": None, "registers": None, "spill_bytes": 0, "ptxas": "",
                        "error": "".join(lines)[-3000:]})
print(json.dumps(results))
"""


@dataclass
class Compiled:
    """What one offline compile produced: the PTX and what ptxas said about it."""

    ptx: str
    shared: int | None  # bytes of shared memory one program asks for (what a launch checks against the GPU's)
    registers: int | None
    spill_bytes: int
    ptxas: str
    error: str | None = None  # why this one did not compile (the others in the same call still did)
    sass: str = ""  # the machine code (cuobjdump -sass), for a job made with sass=True
    ttgir: str = ""  # Triton's GPU dialect: each tensor's layout (which thread holds which element)

    def sass_loops(self) -> list[tuple[int, int]]:
        """The SASS loops (a backward branch and its target), in order: (instructions in the loop, instructions
        one iteration issues when every forward branch inside it is taken, e.g. past a flush done every few
        steps). Needs a job made with ``sass=True``. What a loop issues a step is what bounds a kernel that runs
        out of instructions before it runs out of bytes."""
        found = [(int(a, 16), text) for a, text in re.findall(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);", self.sass)]
        where = {address: i for i, (address, _) in enumerate(found)}
        loops = []
        for i, (address, text) in enumerate(found):
            target = re.search(r"\bBRA\b.*?0x([0-9a-f]+)", text)
            if not target or int(target.group(1), 16) >= address or int(target.group(1), 16) not in where:
                continue
            body = range(where[int(target.group(1), 16)], i + 1)
            skipped = set()
            for j in body:  # a forward branch within the loop: the instructions it jumps over
                ahead = re.search(r"\bBRA\b.*?0x([0-9a-f]+)", found[j][1])
                if ahead and found[j][0] < int(ahead.group(1), 16) <= address:
                    skipped.update(range(j + 1, where.get(int(ahead.group(1), 16), j + 1)))
            loops.append((len(body), len(body) - len(skipped)))
        return loops

    @property
    def cp_async_bytes(self) -> set[int]:
        """Widths (bytes) of the asynchronous global-to-shared copies: 16 is the fast path, 4 or 2 a narrow one."""
        return {
            int(w, 0)
            for w in re.findall(r"cp\.async\.c[ag]\.shared\.global[^;]*?,\s*(0x[0-9a-f]+|\d+)\s*[,;]", self.ptx)
        }

    @property
    def uses_wgmma(self) -> bool:
        return "wgmma" in self.ptx

    @property
    def scalar_global_loads(self) -> int:
        """How many one-element global loads (``ld.global`` of 16 or 32 bits, no vector) the PTX has."""
        return len(re.findall(r"ld\.global(?:\.[a-z0-9:]+)*\.b(?:16|32) ", self.ptx))

    @property
    def global_load_bytes(self) -> set[int]:
        """Widths (bytes) of the loads from global memory into registers: ``ld.global.v4.b32`` 16, ``.b16`` 2."""
        found = re.findall(r"ld\.global(?:\.(?!v\d)[A-Za-z0-9:_]+)*(?:\.v(\d))?\.[bfsu](\d+) ", self.ptx)
        return {int(vec or 1) * int(bits) // 8 for vec, bits in found}

    @property
    def loop_instructions(self) -> int:
        """PTX instructions in the innermost loops (a matmul's K loop): what every step issues."""
        count, inside = 0, False
        for line in self.ptx.splitlines():
            text = line.strip()
            if re.match(r"\$L__BB\d+_\d+:", text):
                inside = "Inner Loop Header" in text
            elif inside and text and not text.startswith(("//", ".", "{", "}", "$")):
                count += 1
        return count


def table(compiled: dict[str, Compiled]) -> None:
    """Prints one line per compiled kernel ({name: Compiled}): how it moves data from global memory (16-byte
    ``cp.async`` copies into shared memory, or loads into registers, by width), the instructions of its innermost
    loop, registers and spilled bytes."""
    width = max(map(len, compiled), default=0)

    def widths(values):
        return ", ".join(f"{v} B" for v in sorted(values)) or "none"

    print(f"{'':{width}}  cp.async   ld.global  K-loop instructions  registers  spilled")
    for name, c in compiled.items():
        if c.error:
            print(f"{name:{width}}  did not compile: {c.error.strip().splitlines()[-1]}")
            continue
        print(
            f"{name:{width}}  {widths(c.cp_async_bytes):9s}  {widths(c.global_load_bytes):9s}  "
            f"{c.loop_instructions:19d}  {c.registers or 0:9d}  {c.spill_bytes:5d} B"
        )


def ptxas_path() -> Path:
    import triton

    return Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"


def available() -> bool:
    """Offline compiles need Triton's NVIDIA backend and its bundled ptxas (every Linux x86-64 wheel has both)."""
    return ptxas_path().exists()


def pinned_triton() -> str | None:
    """The Triton version the course pins (requirements.txt's ``triton==``), or None where that file is not found."""
    path = Path(__file__).resolve().parent.parent / "requirements.txt"
    if not path.exists():
        return None
    pin = re.search(r"^triton==(\S+)", path.read_text(), re.M)
    return pin.group(1) if pin else None


def compiles_as_pinned() -> bool:
    """True when the Triton installed here is the pinned one. Register allocation changes between versions: a tile
    chosen to fit the registers under the pinned Triton can spill under another (triton 3.6 spills 184 bytes in
    lesson 12's 1B gate/up stream row, where 3.7.1 spills none), so checks of a kernel at the edge of its
    registers hold for the pinned version only."""
    import triton

    return triton.__version__ == pinned_triton()


def job(
    kernel: str,
    *,
    pointers: dict,
    ints: dict,
    constexprs: dict,
    num_warps=4,
    num_stages=3,
    capability=90,
    unaligned=(),
    sass=False,
    maxnreg=None,
):
    """One kernel to compile: ``pointers`` {name: "fp16" | "bf16" | "fp32" | ...}, ``ints`` {name: the value a real
    call passes; a float is an fp32 scalar}, ``constexprs`` {name: value}; ``capability`` 90 for an H100/H200, 80
    for an A100; ``unaligned``: names of pointers that do not start on a 16-byte boundary (a view into a tensor);
    ``sass``: also return the machine code (Compiled.sass, sass_loops); ``maxnreg``: a cap on the registers a thread
    (Triton's launch option of that name; ptxas spills past it)."""
    return dict(
        sass=sass,
        maxnreg=maxnreg,
        kernel=kernel,
        pointers=pointers,
        ints=ints,
        constexprs=constexprs,
        num_warps=num_warps,
        num_stages=num_stages,
        capability=capability,
        unaligned=list(unaligned),
    )


def _encode(value):
    """JSON for a constexpr that is a Triton dtype (tl.float32 ...); the worker turns it back into one."""
    import triton.language as tl

    if isinstance(value, tl.dtype):
        return {"__tl_dtype__": value.name}
    raise TypeError(f"a constexpr of type {type(value).__name__} cannot be sent to the compiler process: {value!r}")


def compile_kernels(
    module_path, jobs: list[dict], timeout: float = 600, *, raise_errors: bool = True
) -> list[Compiled]:
    """Compiles each of ``jobs`` (see :func:`job`) from the ``@triton.jit`` functions in ``module_path`` (a job may
    name another module in its ``path``). A kernel that does not compile raises RuntimeError naming it, or, with
    ``raise_errors=False``, comes back with its ``error`` set."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    request = json.dumps({"path": str(module_path), "jobs": jobs}, default=_encode)
    run = subprocess.run(
        [sys.executable, "-c", _WORKER], input=request, capture_output=True, text=True, timeout=timeout, env=env
    )
    if run.returncode != 0:
        raise RuntimeError(f"offline compile failed:\n{run.stderr[-3000:]}")
    results = [Compiled(**r) for r in json.loads(run.stdout)]
    failed = [f"{j['kernel']}: {r.error}" for j, r in zip(jobs, results) if r.error]
    if failed and raise_errors:
        raise RuntimeError("offline compile failed for:\n" + "\n".join(failed))
    return results


def griddepcontrol_order(ptx: str) -> dict:
    """Where a kernel launched early (programmatic dependent launch) lets the next kernel launch and where it waits,
    against its memory accesses: the offsets in ``ptx`` of the first ``ld.global``, the first and the last
    ``ld.global`` and ``st.global``, ``griddepcontrol.launch_dependents`` and ``griddepcontrol.wait`` (-1: absent)."""
    loads = [m.start() for m in re.finditer(r"\bld\.global", ptx)]
    stores = [m.start() for m in re.finditer(r"\bst\.global", ptx)]
    return {
        "first_load": loads[0] if loads else -1,
        "last_load": loads[-1] if loads else -1,
        "first_store": stores[0] if stores else -1,
        "trigger": ptx.find("griddepcontrol.launch_dependents"),
        "wait": ptx.find("griddepcontrol.wait"),
    }


def check_pdl_order(ptx: str, trigger: str | None, where: str = "the kernel") -> None:
    """AssertionError unless the PTX of a GEMV launched early (programmatic dependent launch) keeps the rules of
    lesson 08: its first loads (the constant weights) before the wait, the wait before every store, and the next
    kernel let launch where ``trigger`` says ("start": before any load, "after wait", "after loop": past the loop's
    loads, before the stores). ``trigger`` None: launched in order, no griddepcontrol at all."""
    at = griddepcontrol_order(ptx)
    if trigger is None:
        assert at["wait"] < 0 and at["trigger"] < 0, f"{where}: launched in order, yet griddepcontrol in the PTX"
        return
    assert at["first_load"] < at["wait"] < at["first_store"], f"{where}: no wait between the first loads and stores"
    if trigger == "start":
        assert 0 <= at["trigger"] < at["first_load"], f"{where}: the next kernel not let launch before any load"
    elif trigger == "after wait":
        assert at["wait"] < at["trigger"] < at["last_load"], f"{where}: the next kernel not let launch after the wait"
    elif trigger == "after loop":
        assert at["wait"] < at["trigger"] < at["first_store"], f"{where}: the next kernel not let launch after the loop"
    else:
        raise ValueError(f"trigger must be None, 'start', 'after wait' or 'after loop', got {trigger!r}")


# -- every launch a piece of code makes, compiled ----------------------------------------------------------------

_POINTER_TYPES = {
    "float16": "fp16",
    "bfloat16": "bf16",
    "float32": "fp32",
    "float64": "fp64",
    "int8": "i8",
    "int16": "i16",
    "int32": "i32",
    "int64": "i64",
    "uint8": "u8",
    "bool": "i1",
}


@contextlib.contextmanager
def record_launches():
    """Under the interpreter: yields a list that receives one :func:`job` per kernel launched inside the block, with
    what the launch passed (its module file as ``path``, pointer dtypes, integers, constexprs, num_warps and
    num_stages), ready for :func:`compile_kernels`. Launches that pass tensor descriptors (TMA) are skipped: their
    compile needs the descriptor's layout, which only a GPU launch builds."""
    from .memcheck import intercept_launches
    from .mode import current

    jobs: list[dict] = []
    if not current().interpret:
        yield jobs
        return

    def record(executor, args, kwargs):
        try:
            jobs.append(_job_from_launch(executor, args, kwargs))
        except _Skip:
            pass

    with intercept_launches(record):
        yield jobs


class _Skip(Exception):
    pass


def _job_from_launch(executor, args, kwargs) -> dict:
    import torch

    from .memcheck import launch_arguments

    fn = executor.fn
    pointers, ints, constexprs, unaligned = {}, {}, {}, []
    for name, value in launch_arguments(executor, args, kwargs).items():
        if name in executor.constexprs or value is None or isinstance(value, str):
            constexprs[name] = value
        elif isinstance(value, torch.Tensor) or hasattr(value, "dtype") and hasattr(value, "data_ptr"):
            dtype = str(value.dtype).removeprefix("torch.")
            if dtype not in _POINTER_TYPES:
                raise _Skip
            pointers[name] = _POINTER_TYPES[dtype]
            if value.data_ptr() % 16:
                unaligned.append(name)
        elif isinstance(value, (bool, int, float)):
            ints[name] = value
        else:  # a tensor descriptor, a tuple of tensors, ...
            raise _Skip
    return dict(
        job(
            fn.__name__,
            pointers=pointers,
            ints=ints,
            constexprs=constexprs,
            num_warps=kwargs.get("num_warps", 4),
            num_stages=kwargs.get("num_stages", 3),
            unaligned=unaligned,
        ),
        path=fn.__code__.co_filename,
    )


def unique(jobs: list[dict], by: str = "signature") -> list[dict]:
    """The distinct jobs: by "signature", one per kernel, argument types, specialisations and constants (what makes
    a separate compile on a GPU); by "kernel", the first launch of each kernel only (cheaper, and enough to catch
    what does not compile at all)."""

    def key(j):
        if by == "kernel":
            return json.dumps([j["path"], j["kernel"]])
        ints = {
            k: (type(v).__name__, v == 1, v % 16 == 0 if isinstance(v, int) else None) for k, v in j["ints"].items()
        }
        return json.dumps([j["path"], j["kernel"], j["pointers"], ints, j["constexprs"], j["num_warps"],
                           j["num_stages"], j.get("unaligned", [])], sort_keys=True, default=str)  # fmt: skip

    if by not in ("signature", "kernel"):
        raise ValueError(f'by must be "signature" or "kernel", got {by!r}')
    seen = {}
    for j in jobs:
        seen.setdefault(key(j), j)
    return list(seen.values())


def record_lesson_checks(stems=None):
    """Runs the check cells of the solution notebooks (all, or those whose name starts with one of ``stems``, e.g.
    "05") under the interpreter in their lesson module's namespace, recording every launch. Returns (jobs, skipped):
    skipped lists the cells that could not run outside their notebook (they use a name only the notebook defines)."""
    import functools
    import importlib
    import math
    import random

    from .mode import current

    env = current()  # GPU or interpreter, decided before triton is first imported (as every notebook's setup cell)

    import torch
    import triton

    root = Path(__file__).resolve().parents[1]
    jobs, skipped = [], []
    for path in sorted((root / "solutions").glob("[0-9][0-9]_*.ipynb")):
        if stems and not any(path.stem.startswith(s) for s in stems):
            continue
        module = importlib.import_module(f"lessons.l{path.stem}")
        namespace = dict(vars(module), functools=functools, math=math, random=random, torch=torch, triton=triton)
        namespace.setdefault("env", env)
        for cell in json.loads(path.read_text())["cells"]:
            if "check" not in cell["metadata"].get("tags", []):
                continue
            source = "".join(cell["source"])
            with record_launches() as launched, contextlib.redirect_stdout(None):
                try:
                    exec(compile(source, f"{path.name} check cell", "exec"), namespace)
                except NameError as e:  # a name the notebook builds in a cell that is not exported (a model, ...)
                    skipped.append(f"{path.stem}: {source.splitlines()[0]} ({e})")
            jobs += launched
    return jobs, skipped


def _main(argv=None):
    import argparse

    parser = argparse.ArgumentParser(description="Compile every kernel the lessons' checks launch, for a GPU that is "
                                     "not there, and print registers, spills and errors.")  # fmt: skip
    parser.add_argument("lessons", nargs="*", help="lesson numbers (default: all), e.g. 05 12")
    parser.add_argument("--capability", type=int, default=90, help="90: H100/H200 (default), 80: A100, 75: T4")
    parser.add_argument(
        "--every-config", action="store_true", help="one compile per distinct signature, not per kernel"
    )
    args = parser.parse_args(argv)
    jobs, skipped = record_lesson_checks(args.lessons)
    todo = unique(jobs, by="signature" if args.every_config else "kernel")
    for j in todo:
        j["capability"] = args.capability
    results = compile_kernels(Path(__file__), todo, raise_errors=False)
    for j, r in zip(todo, results):
        where = f"{Path(j['path']).stem}.{j['kernel']}"
        report = f"{r.registers} registers, {r.spill_bytes} bytes spilled, {r.shared} B shared memory"
        print(f"{where:60s} " + (f"ERROR {r.error.strip().splitlines()[-1]}" if r.error else report))
    for s in skipped:
        print("not run outside its notebook:", s)
    failed = sum(1 for r in results if r.error)
    print(f"{len(todo)} compiles for sm_{args.capability} from {len(jobs)} launches: {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(_main())
