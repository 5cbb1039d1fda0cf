"""Running course code in a fresh Python process, for the tools that need one (lesson 09): a sanitizer or profiler
wrapped around it, a device assert that kills its CUDA context, or ``TORCH_LOGS`` read from Inductor's output."""

from __future__ import annotations

import inspect
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import textwrap

ROOT = pathlib.Path(__file__).resolve().parents[1]


def run_python(code, *, prefix=(), extra_env=None, timeout=600):
    """Runs `code` in a fresh Python process (after `prefix`, e.g. a profiler or sanitizer command) from the course's
    root; returns (exit status, stdout and stderr together)."""
    with tempfile.TemporaryDirectory() as folder:
        script = pathlib.Path(folder) / "script.py"
        script.write_text(textwrap.dedent(code))
        run_env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        run_env.update(extra_env or {})
        done = subprocess.run(
            [*prefix, sys.executable, str(script)],
            cwd=ROOT,
            env=run_env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    return done.returncode, done.stdout + done.stderr


def inductor_output_code(functions, call, timeout=600):
    """The code Inductor generates for `call` (source run after the source of each of `functions`), read from
    TORCH_LOGS=output_code in a fresh process."""
    source = "import torch\n\n" + "\n\n".join(inspect.getsource(f) for f in functions) + "\n" + textwrap.dedent(call)
    status, output = run_python(source, extra_env={"TORCH_LOGS": "output_code"}, timeout=timeout)
    if status:
        raise RuntimeError(f"the script failed with exit status {status}:\n{output[-2000:]}")
    return output


def inductor_kernels(code):
    """The lines of Inductor's output that say what it generated: kernel names, kinds and block sizes."""
    keep = re.compile(
        r"@triton_heuristics\.\w+|def triton_\w+|size_hints|[XYR]0?_?BLOCK\s*:\s*tl\.constexpr\s*=|\.run\("
    )
    return [line.strip() for line in code.splitlines() if keep.search(line)]
