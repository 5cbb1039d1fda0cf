"""Would a check tell its suspects apart on a GPU? Its GPU cases, in bfloat16, worked out on this CPU.

A check runs small cases in fp32 here and larger ones in bf16 on a GPU, and a mistake it names here may pass there:
bf16's tolerance (rtol 1.6e-2) can hold a suspect that fp32's cannot (session 39: lesson 07's weight applied before
normalising moved the output 0.5 % with a weight of 1 +- 0.1). This runs a check with ``Env.pick`` answering with
the GPU's cases, every ``utils.check`` call replaced by a spy that never raises (so the check goes through all its
cases, whatever ``fn`` returned), and, for each suspect the check lists, asks whether it rounded to bf16 is farther
from the reference than bf16's tolerance (or the check's own, if larger) in at least one case. A suspect told apart
in no case is a mistake that check would let pass on a GPU: it is printed, and the exit status is 1.

    python -m utils.gpu_cases lessons.l07_llm_layer "check_rmsnorm(out_of, quiet=True)" --seeds 4

The expression is evaluated in the lesson module's namespace, after ``--setup`` (statements, same namespace) if
given; ``out_of`` is a stand-in for the learner's launcher that returns the ``out=`` tensors it was given (NaN),
enough for checks whose launchers take ``out``. Suspects are grouped by their hint with its numbers left out (a
hint that names a case's length is the same mistake in every case). Each seed is a fresh draw of every input; a
suspect is reported with the seeds where no case told it apart. Kernels are not run (fn is the stand-in), so GPU
cases that would take the interpreter minutes cost only the references' and suspects' torch work.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time

_BEFORE: set[str] | None = None  # the lessons imported before the first call patched Env.pick


def _key(hint: str) -> str:
    return re.sub(r"\d+", "#", hint)


def out_of(*args, **kwargs):
    """A stand-in for a launcher: the out= tensors it was given, as they are (one, or a tuple in the order given)."""
    import torch

    outs = [v for k, v in kwargs.items() if "out" in k and isinstance(v, torch.Tensor)]
    if not outs:
        raise TypeError("out_of stands in for launchers that take their outputs as out=...: this call passed none")
    return outs[0] if len(outs) == 1 else tuple(outs)


def untold(module: str, expression: str, seeds: int = 2, setup: str = "") -> tuple[dict[str, list[int]], int]:
    """({hint (numbers as #): the seeds where no case told it apart in bf16}, how many hints the check listed), for
    expression run in module with the GPU's cases (see the module's docstring). The first call patches utils for
    good, and a lesson picks some of its cases when it is imported: module must not have been imported before that
    first call (a fresh process)."""
    os.environ.setdefault("TRITON_INTERPRET", "1")
    import importlib

    import torch

    import utils
    import utils.checking as checking
    import utils.mode as mode

    global _BEFORE
    if _BEFORE is None:  # the first call: what was imported before the patch picked its cases as the CPU's
        _BEFORE = {name for name in sys.modules if name.startswith("lessons.")}
        mode.Env.pick = lambda self, cpu, gpu: gpu
    if module in _BEFORE:
        raise RuntimeError(f"{module} was imported before untold patched utils: run untold in a fresh process")
    floor = checking.default_tolerance(torch.bfloat16)
    seen, told = set(), set()

    def spy(out, ref, *args, suspects=None, atol=None, rtol=None, **kwargs):
        try:
            ref = checking._as64(ref)
        except (TypeError, ValueError, RuntimeError):
            return  # not a tensor of numbers (a tuple of tokens, say): nothing to round
        exact = atol == 0 and rtol == 0  # integers, or sums exact by construction: bf16 would not change them
        atol, rtol = (0.0, 0.0) if exact else (max(atol or 0, floor.atol), max(rtol or 0, floor.rtol))
        for hint, wrong in (suspects() if callable(suspects) else suspects or {}).items():
            # a Scaled suspect's scale only helps name it; whether the mistake fails is check's out-against-ref test
            wrong = checking._as64(wrong.ref if isinstance(wrong, checking.Scaled) else wrong)
            if wrong.shape != ref.shape:
                continue  # a suspect of another shape always fails the comparison: told apart
            if not exact:
                wrong = wrong.to(torch.bfloat16).double()  # the kernel's output rounding on a GPU
            seen.add(_key(hint))
            if not torch.allclose(wrong, ref, rtol=rtol, atol=atol, equal_nan=True):  # as utils.check compares
                told.add(_key(hint))

    checking.check = utils.check = spy
    namespace = vars(importlib.import_module(module))
    namespace["out_of"] = out_of
    if setup:
        exec(setup, namespace)  # noqa: S102  (a command line's own statements, as python -c runs them)
    result: dict[str, list[int]] = {}
    listed = set()
    for seed in range(seeds):
        seen.clear()
        told.clear()
        torch.manual_seed(seed)
        eval(expression, namespace)  # noqa: S307
        for hint in sorted(seen - told):
            result.setdefault(hint, []).append(seed)
        listed |= seen
    return result, len(listed)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("module", help="the lesson module, e.g. lessons.l07_llm_layer")
    parser.add_argument("expression", help='the check to run, e.g. "check_rmsnorm(out_of, quiet=True)"')
    parser.add_argument("--seeds", type=int, default=2, help="draws of every input (default 2)")
    parser.add_argument("--setup", default="", help="statements run in the module's namespace first")
    args = parser.parse_args(argv)
    start = time.time()
    result, listed = untold(args.module, args.expression, args.seeds, args.setup)
    for hint, seeds in result.items():
        print(f"told apart in no GPU case at seeds {seeds}: {hint}")
    print(f"{args.expression}: {len(result)} of {listed} suspects told apart in no GPU case, {args.seeds} seeds, "
          f"{time.time() - start:.1f} s")  # fmt: skip
    return 1 if result else 0


if __name__ == "__main__":
    sys.exit(main())
