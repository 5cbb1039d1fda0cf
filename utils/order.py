"""Programs run in another order under Triton's interpreter: what a GPU may do, on the CPU.

The interpreter walks a launch's grid one program after another, x-major, always in the same order. A GPU runs them
in no set order, many at once. A kernel whose programs race (two store into one element) or whose check reads the
result of a race (the last program to store wins) can therefore pass, or be diagnosed, on the CPU in a way it is
not on a GPU: sessions 26 and 40 met three such checks there. ``programs_in(order)`` replays every launch in its
``with`` block in another order, so a test can hold a check's diagnosis to every order:

    with programs_in("reversed"):           # the last program first
        check_tile_order(planted, quiet=True)
    with programs_in("shuffled", seed=3):   # a permutation of the grid, the same for the same seed and grid

``pytest --program-order=reversed`` (or ``shuffled:SEED``, tests/conftest.py) runs a whole selection so, e.g. the
planted-mistake batteries: ``-k "planted or mistake or battery"``.

A kernel that waits for an earlier program by its program id waits for a program that has not run yet: lesson 10's
look-back with ``TICKET=False`` (a variant its tests measure; the lessons take their block from an atomic ticket, in
the order the programs start) spins until its bound gives up, minutes under the interpreter. It relies on the
interpreter's builder (``set_grid_dim``, ``set_grid_idx``), which ``GridExecutor.__call__`` calls before each
program; on a GPU, or where they are missing, it changes nothing and ``programs_in(...)`` yields False.
"""

from __future__ import annotations

import contextlib
import random

ORDERS = ("reversed", "shuffled")


def _grid_order(order: str, seed: int, nx: int, ny: int, nz: int) -> list[tuple[int, int, int]]:
    cells = [(x, y, z) for x in range(nx) for y in range(ny) for z in range(nz)]
    if order == "reversed":
        cells.reverse()
    else:  # a permutation of its own for each grid shape, the same at every launch of that shape
        random.Random(f"{seed}:{nx}x{ny}x{nz}").shuffle(cells)
    return cells


@contextlib.contextmanager
def programs_in(order: str, seed: int = 0):
    """Inside the block, every launch under the interpreter runs its programs in ``order``: "reversed" (the last
    program first) or "shuffled" (a permutation drawn from ``seed`` and the grid's shape). Yields whether it could
    (False on a GPU or where the interpreter has no builder to patch). Blocks nest: the innermost order holds."""
    if order not in ORDERS:
        raise ValueError(f"order={order!r}: give one of {ORDERS}")
    from .mode import current

    builder = None
    if current().interpret:
        try:
            from triton.runtime import interpreter

            builder = interpreter.interpreter_builder
            set_dim, set_idx = type(builder).set_grid_dim, type(builder).set_grid_idx
        except (ImportError, AttributeError):
            builder = None
    if builder is None:
        yield False
        return
    state = {"cells": [], "next": 0}

    def set_grid_dim(nx, ny, nz):
        set_dim(builder, nx, ny, nz)
        state["cells"], state["next"] = _grid_order(order, seed, nx, ny, nz), 0

    def set_grid_idx(x, y, z):  # the k-th program the interpreter asks for runs the k-th cell of the order
        k = state["next"]
        state["next"] = k + 1
        set_idx(builder, *state["cells"][k])

    saved = {name: builder.__dict__[name] for name in ("set_grid_dim", "set_grid_idx") if name in builder.__dict__}
    builder.set_grid_dim, builder.set_grid_idx = set_grid_dim, set_grid_idx
    try:
        yield True
    finally:
        for name in ("set_grid_dim", "set_grid_idx"):
            if name in saved:
                setattr(builder, name, saved[name])
            else:
                delattr(builder, name)


def parse(spec: str) -> tuple[str, int]:
    """ "reversed" -> ("reversed", 0); "shuffled:7" -> ("shuffled", 7): the form of pytest's --program-order."""
    order, _, seed = spec.partition(":")
    if order not in ORDERS or (seed and not seed.lstrip("-").isdigit()) or (order == "reversed" and seed):
        raise ValueError(f"program order {spec!r}: give reversed, or shuffled:SEED (an integer)")
    return order, int(seed or 0)


def programs_in_order(order: str | None, seed: int = 0):
    """programs_in(order, seed), or the interpreter's own order where order is None: for a test parametrized over
    orders (on a GPU each is the GPU's own)."""
    return contextlib.nullcontext(False) if order is None else programs_in(order, seed)
