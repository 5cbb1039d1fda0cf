"""Checks for exercises whose answer is a number or a yes/no (lesson 01's counts): fresh random cases, the first
case that is wrong, and a hint when the wrong answer is one of the classic ones.

A lesson defines, for each exercise, a ``case(rng)`` that draws one random case, calls the learner's function and
returns ``(call, got, want, hints)``: the call as text, what the learner's function returned, the right answer, and
``{classic wrong answer: hint}`` (or ``[(classic wrong answer, hint), ...]``, where two mistakes can give the same
number: each hint it matches is told). :func:`check_answers` runs it ``trials`` times.
"""

from __future__ import annotations

import math
import numbers
import random
import reprlib

import numpy as np


def is_number(x) -> bool:
    """Whether ``x`` is a real number (an int, a float, a numpy number); a bool or a string is not."""
    return isinstance(x, numbers.Real) and not isinstance(x, (bool, np.bool_))


def same(got, want, rtol: float = 1e-9) -> bool:
    """Whether two numbers agree to ``rtol`` (False when ``got`` is not a number at all: "12" is not 12, nor True 1)."""
    if not is_number(got):
        return False
    return math.isclose(float(got), float(want), rel_tol=rtol, abs_tol=0.0)


def require_function(fn, name: str) -> None:
    """Refuses, before any case, a ``check_<name>(fn)`` given something other than a function: most often what the
    function returned (``check_add_bytes(add_bytes(10, 4))``), which the check would call and crash on."""
    if not callable(fn):
        shown = f"a tensor of shape {tuple(fn.shape)}" if hasattr(fn, "shape") else f"{reprlib.repr(fn)}"
        raise TypeError(
            f"check_{name} takes the function {name} itself, but got {shown} ({type(fn).__name__}): write "
            f"check_{name}({name}), with no parentheses after {name} (the check calls it on cases of its own)."
        )


def rounding_hint(got, want) -> str | None:
    """A hint when ``got`` is ``want`` rounded (to a few decimals, or to a low-precision float), or None."""
    # every number of decimals that gives it: 55.2957 rounds to 55.3 at 1 decimal and at 2, 499.2098 to 499.21 at 2
    # and at 3, and which one was asked for cannot be told
    decimals = [k for k in range(4) if got == round(want, k) and got != want]
    if decimals:
        return (f"that is the answer rounded to {' or '.join(map(str, decimals))} decimals: return it unrounded (round "
                "only where you print it, with an f-string such as f'{x:.2f}').")  # fmt: skip
    if isinstance(got, np.floating) and np.finfo(got.dtype).eps > 1e-12:
        eps = float(np.finfo(got.dtype).eps)
        if math.isclose(float(got), float(want), rel_tol=4 * eps):
            digits = round(-math.log10(eps))
            return (f"that is a numpy {got.dtype} (about {digits} significant digits), the right answer rounded to "
                    "its precision: compute with Python numbers (float(x)), which keep about 16.")  # fmt: skip
    return None


def require_answer(call: str, got, kind: str = "a number (an int or a float)") -> None:
    """Refuses an answer that is no number at all (None: a forgotten return; a string, a list, a tensor, True),
    naming the call; ``kind`` says what it should return."""
    __tracebackhide__ = True
    if got is None:
        raise AssertionError(f"{call} returned None: did the function forget to `return` its answer?")
    if not is_number(got):
        raise AssertionError(
            f"{call} returned {got!r} ({type(got).__name__}); it should return {kind}"
            + (", not True or False." if isinstance(got, (bool, np.bool_)) else ".")
        )


def check_answers(name: str, case, *, trials: int = 20, quiet: bool = False, rng=None) -> None:
    """Runs ``case`` on ``trials`` fresh random cases; raises AssertionError naming the first wrong one (with the
    hint for it, when its answer is a classic mistake), or prints one line. Refuses ``trials`` < 1: a check that
    tried nothing must not report success."""
    __tracebackhide__ = True  # the learner sees the message, not this function
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise ValueError(f"trials must be a positive integer, got {trials!r}: a check on no cases proves nothing")
    rng = rng or random.Random()
    for _ in range(trials):
        call, got, want, hints = case(rng)
        if got is None or not isinstance(want, bool):
            require_answer(call, got)
        if isinstance(want, bool):
            if not isinstance(got, (bool, np.bool_)):
                raise AssertionError(
                    f"{call} returned {got!r} ({type(got).__name__}); it should return True or False (a comparison "
                    f"such as a < b gives one)."
                )
            ok = bool(got) == want
            hint = hints.get(bool(got)) if not ok else None
        else:
            ok = same(got, want)
            # every hint whose wrong answer it is: two mistakes can give the same number (six arrays of 2-byte
            # elements are three of 4 bytes), and the hints may then come as (wrong answer, hint) pairs, not a dict
            told = [] if ok else [h for wrong, h in (hints.items() if isinstance(hints, dict) else hints)
                                  if same(got, wrong)]  # fmt: skip
            hint = "\nOr: ".join(dict.fromkeys(told)) or None
            if not ok and hint is None and isinstance(want, float):
                hint = rounding_hint(got, want)
        if not ok:
            raise AssertionError(f"{call} returned {got!r}, expected {want!r}." + (f"\nHint: {hint}" if hint else ""))
    if not quiet:
        print(f"✓ {name} agrees with the reference on {trials} random cases.")
