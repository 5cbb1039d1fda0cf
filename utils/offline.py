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

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

_WORKER = r"""
import ast, json, os, re, subprocess, sys, tempfile
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

request = json.loads(sys.stdin.read())
source = open(request["path"]).read()
tree = ast.parse(source)
keep = ["import math", "import triton", "import triton.language as tl", ""]
for node in tree.body:
    decorators = [ast.get_source_segment(source, d) for d in getattr(node, "decorator_list", [])]
    if isinstance(node, ast.FunctionDef) and any(d.endswith("jit") for d in decorators):
        text = ast.get_source_segment(source, node)
        keep.append("@triton.jit\n" + text + "\n")
    elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):  # e.g. LOG2E = 1.44...
        keep.append(ast.get_source_segment(source, node))
folder = tempfile.mkdtemp()
with open(os.path.join(folder, "offline_kernels.py"), "w") as f:
    f.write("\n".join(keep))
sys.path.insert(0, folder)
import offline_kernels

ptxas = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
results = []
for job in request["jobs"]:
    fn = getattr(offline_kernels, job["kernel"])
    given = set(job["constexprs"]) | set(job["pointers"]) | set(job["ints"])
    missing, unknown = [n for n in fn.arg_names if n not in given], sorted(given - set(fn.arg_names))
    if missing or unknown:
        sys.exit(f"{job['kernel']}({', '.join(fn.arg_names)}): no value for {missing}, unknown names {unknown}")
    signature, constexprs, attrs = {}, {}, {}
    for i, name in enumerate(fn.arg_names):
        if name in job["constexprs"]:
            signature[name] = "constexpr"
            constexprs[(i,)] = job["constexprs"][name]
        elif name in job["pointers"]:
            signature[name] = "*" + job["pointers"][name]
            attrs[(i,)] = [["tt.divisibility", 16]]  # allocations start on 16-byte (on a GPU, 256-byte) boundaries
        else:
            value = job["ints"][name]
            if isinstance(value, float):
                signature[name] = "fp32"
            elif value == 1:
                signature[name] = "constexpr"
                constexprs[(i,)] = 1
            else:
                signature[name] = "i32" if abs(value) < 2**31 else "i64"
                if value % 16 == 0:
                    attrs[(i,)] = [["tt.divisibility", 16]]
    target = GPUTarget("cuda", job["capability"], 32)
    options = {"num_warps": job["num_warps"], "num_stages": job["num_stages"]}
    compiled = triton.compile(ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs),
                              target=target, options=options)
    ptx = compiled.asm["ptx"]
    arch = f"sm_{job['capability']}" + ("a" if job["capability"] == 90 else "")
    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
        f.write(ptx)
    report = subprocess.run([ptxas, f"-arch={arch}", "-v", f.name, "-o", os.devnull], capture_output=True, text=True)
    regs = re.search(r"Used (\d+) registers", report.stderr)
    spills = re.search(r"(\d+) bytes spill stores", report.stderr)
    results.append({
        "ptx": ptx,
        "registers": int(regs.group(1)) if regs else None,
        "spill_bytes": int(spills.group(1)) if spills else 0,
        "ptxas": report.stderr[-2000:],
    })
print(json.dumps(results))
"""


@dataclass
class Compiled:
    """What one offline compile produced: the PTX and what ptxas said about it."""

    ptx: str
    registers: int | None
    spill_bytes: int
    ptxas: str

    @property
    def cp_async_bytes(self) -> set[int]:
        """Widths (bytes) of the asynchronous global-to-shared copies: 16 is the fast path, 4 or 2 a narrow one."""
        import re

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
        import re

        return len(re.findall(r"ld\.global(?:\.[a-z0-9:]+)*\.b(?:16|32) ", self.ptx))


def ptxas_path() -> Path:
    import triton

    return Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"


def available() -> bool:
    """Offline compiles need Triton's NVIDIA backend and its bundled ptxas (every Linux x86-64 wheel has both)."""
    return ptxas_path().exists()


def job(kernel: str, *, pointers: dict, ints: dict, constexprs: dict, num_warps=4, num_stages=3, capability=90):
    """One kernel to compile: ``pointers`` {name: "fp16" | "bf16" | "fp32" | ...}, ``ints`` {name: the value a real
    call passes; a float is an fp32 scalar}, ``constexprs`` {name: value}; ``capability`` 90 for an H100/H200, 80
    for an A100."""
    return dict(
        kernel=kernel,
        pointers=pointers,
        ints=ints,
        constexprs=constexprs,
        num_warps=num_warps,
        num_stages=num_stages,
        capability=capability,
    )


def compile_kernels(module_path, jobs: list[dict], timeout: float = 600) -> list[Compiled]:
    """Compiles each of ``jobs`` (see :func:`job`) from the ``@triton.jit`` functions in ``module_path``."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    request = json.dumps({"path": str(module_path), "jobs": jobs})
    run = subprocess.run(
        [sys.executable, "-c", _WORKER], input=request, capture_output=True, text=True, timeout=timeout, env=env
    )
    if run.returncode != 0:
        raise RuntimeError(f"offline compile failed:\n{run.stderr[-3000:]}")
    return [Compiled(**r) for r in json.loads(run.stdout)]
