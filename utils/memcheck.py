"""Bounds checking for kernels run by Triton's interpreter: the mistakes no output comparison can see.

A load that runs past the end of its tensor but whose values are never stored (a tail lane read without a mask,
then masked at the store) leaves the output right: on a GPU it reads whatever lies there, or faults when that
memory is not mapped, and only a sanitizer sees it. Under the interpreter every ``tl.load``, ``tl.store`` and
atomic goes through one Python object, so we can look at each lane's address. :func:`watch_memory` does, for
every kernel launched inside its ``with`` block: every lane that the access's mask lets through must fall inside
one of the tensors passed to *that launch*. The lessons' checks run the learner's launcher under it and report
what strays (see ``utils.check(..., stray=...)``); lesson 09 builds a smaller version by hand and shows the GPU's
tool, ``compute-sanitizer``. A stray write (or atomic) outside the allocations of the launch's tensors is
reported and not made: the interpreter's memory is Python's own, and a kernel that wrote far outside its tensors
would corrupt it and crash the process (in Jupyter, the notebook's kernel) before any check could speak. Stray
reads are made (they may be what the check explains).

It also keeps what each program stores where, and after each launch reports the elements that two programs wrote
with different values (:class:`Race`): the interpreter runs the programs one after another, so the last one wins
and the output can look right, where a GPU runs them at once and either may win. Atomics are left out (they are
meant for several programs), and so is a value written twice by one program, or the same value by two.

It relies on two internals of the pinned Triton's interpreter (``GridExecutor.__call__`` and the interpreter
builder's ``create_masked_load`` / ``create_masked_store`` / ``create_atomic_*``). Where they are missing (another
Triton version), or on a GPU, it watches nothing and says so once in ``Watch.note``.
"""

from __future__ import annotations

import contextlib
import inspect
from dataclasses import dataclass, field

import numpy as np
import torch

from .checking import _span as tensor_span  # the byte range [start, end) a tensor may touch
from .mode import current


@dataclass
class Stray:
    """Accesses of one kind by one kernel that fell outside every tensor of their launch."""

    kernel: str
    access: str  # "reads", "writes", "atomically updates"
    near: str  # the launch's argument whose tensor lies closest to the first stray address
    after: bool  # past the end of that tensor (True) or before its start
    size: int  # that tensor's span in bytes
    itemsize: int
    lanes: int = 0
    farthest: int = 0  # bytes between the tensor's edge and the farthest stray lane attributed to it

    def __str__(self) -> str:
        elements = self.size // self.itemsize
        reach = -(-self.farthest // self.itemsize)
        side = "past the end" if self.after else "before the start"
        return (
            f"`{self.kernel}` {self.access} {self.lanes} lane(s) {side} of `{self.near}` (a tensor of {elements} "
            f"element(s)), up to {reach} element(s) {'beyond its end' if self.after else 'before it'}"
        )


@dataclass
class Race:
    """Elements of one tensor that two programs of one launch wrote with different values. The interpreter runs the
    programs one after another, so the last one's value stays; a GPU runs them at once, and either may win."""

    kernel: str
    near: str  # the launch's argument whose tensor holds the elements
    itemsize: int
    elements: int = 0
    first: int = 0  # element index of the first such element in that tensor
    programs: tuple = ()  # two programs (pid along axes 0, 1, 2) that wrote it

    access = "overwrites"  # what utils.checking reads to tell it from a Stray

    def __str__(self) -> str:
        a, b = self.programs
        return (
            f"`{self.kernel}`: programs {a} and {b} both write element {self.first} of `{self.near}`, with different "
            f"values ({self.elements} element(s) of `{self.near}` are written so)"
        )


@dataclass
class Watch:
    """What :func:`watch_memory` yields: the stray accesses found (empty when all stayed inside), and whether
    anything was watched at all."""

    strays: list[Stray] = field(default_factory=list)
    races: list[Race] = field(default_factory=list)
    watched: bool = False
    launches: int = 0
    note: str = ""
    constexprs: list[dict] = field(default_factory=list)  # each launch's tl.constexpr arguments, by name
    grids: list[tuple] = field(default_factory=list)  # each launch's grid, (programs along axes 0, 1, 2)

    def launched_with(self, name: str) -> list:
        """The values the launches passed for the constexpr ``name`` (``BLOCK_SIZE``, say), launch by launch, where
        the kernel has one of that name: what a launcher chose, which its output may not show."""
        return [given[name] for given in self.constexprs if name in given]

    def __bool__(self) -> bool:
        return bool(self.strays or self.races)

    def __iter__(self):
        return iter([*self.strays, *self.races])

    def lines(self) -> list[str]:
        return [str(s) for s in self]


def _tensors(name, value):
    """(name, tensor) for every tensor an argument holds: a tensor, a tuple of them, a TMA descriptor's base."""
    if isinstance(value, torch.Tensor):
        yield name, value
    elif isinstance(value, (tuple, list)):
        for i, v in enumerate(value):
            yield from _tensors(f"{name}[{i}]", v)
    elif hasattr(value, "base") and isinstance(value.base, torch.Tensor):  # TensorDescriptor
        yield name, value.base
    elif hasattr(value, "data_ptr") and hasattr(value, "base"):  # triton's TensorWrapper (reinterpret)
        yield from _tensors(name, value.base)


def launch_arguments(executor, args, kwargs) -> dict:
    """A launch's arguments by parameter name, defaults filled in, as the interpreter's GridExecutor receives them
    (keywords that are launch options, num_warps and the like, left out); by position if they do not bind."""
    signature = inspect.signature(executor.fn)
    try:
        bound = signature.bind_partial(*args, **{k: v for k, v in kwargs.items() if k in signature.parameters})
    except TypeError:
        return {f"argument {i}": a for i, a in enumerate(args)}
    bound.apply_defaults()
    return dict(bound.arguments)


def _grid(grid, arguments) -> tuple | None:
    """A launch's grid as three whole numbers of programs (a grid of fewer axes padded with 1s; a callable grid asked
    with the launch's arguments, as the interpreter asks it); None where it is none such (the launch itself fails)."""
    try:
        grid = tuple(grid(arguments) if callable(grid) else grid)
        return tuple(int(g) for g in grid) + (1,) * (3 - len(grid))
    except Exception:  # the interpreter raises its own error for this launch, which the check reports
        return None


@contextlib.contextmanager
def intercept_launches(before, after=None):
    """Under the interpreter, for every kernel launched inside the block: ``before(executor, args, kwargs)`` just
    before it runs and ``after()`` once it has (errors included). Patches the interpreter's GridExecutor and puts it
    back on leaving; raises AttributeError/ImportError where this Triton's interpreter has no GridExecutor."""
    from triton.runtime import interpreter

    executor = interpreter.GridExecutor
    original = executor.__call__

    def call(self, *args, **kwargs):
        before(self, args, kwargs)
        try:
            return original(self, *args, **kwargs)
        finally:
            if after is not None:
                after()

    executor.__call__ = call
    try:
        yield
    finally:
        executor.__call__ = original


@contextlib.contextmanager
def watch_memory():
    """Watches every kernel launched inside the block (interpreter only); yields a :class:`Watch`."""
    watch = Watch()
    env = current()
    if not env.interpret:
        watch.note = "memory is watched under the interpreter only; on a GPU, run under compute-sanitizer"
        yield watch
        return
    try:
        import triton.language as tl
        from triton.runtime import interpreter

        builder = interpreter.interpreter_builder
        interpreter.GridExecutor  # noqa: B018 - intercept_launches needs it: fail here, with the note, if missing
        names = ("create_masked_load", "create_masked_store", "create_atomic_rmw", "create_atomic_cas")
        originals = {n: getattr(builder, n) for n in names}
    except (ImportError, AttributeError) as error:  # another Triton's interpreter: say so, do not fail the check
        watch.note = f"memory not watched: this Triton's interpreter differs ({error})"
        yield watch
        return

    launch = {}  # the launch being run: kernel name, [(arg name, lo, hi, itemsize)]
    found = {}  # (kernel, access, near, before/after) -> Stray

    def inside_lanes(ptrs):
        """For each lane of ptrs: does its address fall inside one of the launch's tensors?"""
        addresses = np.asarray(ptrs.data).astype(np.int64)
        inside = np.zeros(addresses.shape, dtype=bool)
        for _, lo, hi, _ in launch["spans"]:
            inside |= (addresses >= lo) & (addresses < hi)
        return inside

    def audit(access, ptrs, mask):
        """Records the lanes of an access that the mask lets through and that fall outside every tensor of the
        launch; returns the lanes inside (None when nothing is watched)."""
        if not launch:
            return None
        inside = inside_lanes(ptrs)
        addresses = np.asarray(ptrs.data).astype(np.int64)
        active = np.ones(addresses.shape, dtype=bool)
        if mask is not None:
            active = np.broadcast_to(np.asarray(mask.data, dtype=bool), addresses.shape)
        stray = addresses[active & ~inside].reshape(-1)
        if stray.size == 0:
            return inside
        first = int(stray[0])
        spans = launch["spans"] or [("(no tensor)", first, first + 1, 1)]
        near, lo, hi, itemsize = min(spans, key=lambda s: min(abs(first - s[1]), abs(first - (s[2] - 1))))
        after = first >= hi
        key = (launch["kernel"], access, near, after)
        if key not in found:
            found[key] = Stray(launch["kernel"], access, near, after, hi - lo, itemsize)
            watch.strays.append(found[key])
        found[key].lanes += int(stray.size)
        reach = int(stray.max()) - hi + 1 if after else lo - int(stray.min())
        found[key].farthest = max(found[key].farthest, reach)
        return inside

    def kept(mask, ptrs, inside):
        """The mask of an access without its lanes outside the memory of every tensor of the launch (its whole
        allocation: a store just past a view, into nan_empty's canaries say, is made, and check reports it): those
        are reported above and never made, so that a wrong kernel cannot overwrite Python's own memory, nor read an
        address that is no memory at all (either crashes the interpreter, and a notebook's kernel with it, before
        any check can speak); such a read gives the load's `other` (0 without one)."""
        if inside is None or bool(inside.all()):
            return mask
        addresses = np.asarray(ptrs.data).astype(np.int64)
        ours = np.zeros(addresses.shape, dtype=bool)
        for lo, hi in launch["storages"]:
            ours |= (addresses >= lo) & (addresses < hi)
        if bool(ours.all()):
            return mask
        lanes = np.broadcast_to(np.asarray(mask.data, dtype=bool), ours.shape) & ours
        return interpreter.TensorHandle(lanes, tl.int1)  # a bool mask (a descriptor load passes a NumPy dtype)

    def load(ptrs, mask, *rest, **kw):
        mask = kept(mask, ptrs, audit("reads", ptrs, mask))
        return originals["create_masked_load"](ptrs, mask, *rest, **kw)

    def record(ptrs, value, mask):
        """Keeps what this program wrote where (addresses, the values' bits) for races(), after the launch."""
        addresses = np.asarray(ptrs.data).astype(np.int64)
        values = np.ascontiguousarray(np.broadcast_to(np.asarray(value.data), addresses.shape))
        if mask is not None:
            keep = np.broadcast_to(np.asarray(mask.data, dtype=bool), addresses.shape)
            addresses, values = addresses[keep], values[keep]
        if addresses.size and values.itemsize in (1, 2, 4, 8):
            bits = values.reshape(-1).view(np.dtype(f"u{values.itemsize}")).astype(np.uint64)
            launch["writes"].append((addresses.reshape(-1), bits, builder.grid_idx))

    def store(ptrs, value, mask, *rest, **kw):
        mask = kept(mask, ptrs, audit("writes", ptrs, mask))
        if launch:
            record(ptrs, value, mask)
        return originals["create_masked_store"](ptrs, value, mask, *rest, **kw)

    def rmw(op, ptr, val, mask, *rest, **kw):
        mask = kept(mask, ptr, audit("atomically updates", ptr, mask))
        return originals["create_atomic_rmw"](op, ptr, val, mask, *rest, **kw)

    def cas(ptr, cmp, val, *rest, **kw):
        audit("atomically updates", ptr, None)
        return originals["create_atomic_cas"](ptr, cmp, val, *rest, **kw)

    def before(executor, args, kwargs):
        spans, storages = [], []
        arguments = launch_arguments(executor, args, kwargs)
        constexprs = getattr(executor, "constexprs", ())
        watch.constexprs.append({k: v for k, v in arguments.items() if k in constexprs})
        watch.grids.append(_grid(executor.grid, arguments))
        for name, value in arguments.items():
            for label, t in _tensors(name, value):
                if t.device.type == "cpu":
                    spans.append((label, *tensor_span(t), t.element_size()))
                    storage = t.untyped_storage()
                    storages.append((storage.data_ptr(), storage.data_ptr() + storage.nbytes()))
        launch.update(kernel=getattr(executor.fn, "__name__", "kernel"), spans=spans, storages=storages, writes=[])
        watch.launches += 1

    def races():
        """After a launch: elements that two of its programs stored different values into (atomics are meant for
        that, and are not counted; a program that writes an element twice is in order with itself)."""
        writes = launch.get("writes") or []
        if len({w[2] for w in writes}) > 1:
            grids = sorted({w[2] for w in writes})
            number = {g: i for i, g in enumerate(grids)}
            addresses = np.concatenate([w[0] for w in writes])
            bits = np.concatenate([w[1] for w in writes])
            program = np.concatenate([np.full(w[0].size, number[w[2]]) for w in writes])
            order = np.lexsort((np.arange(addresses.size), program, addresses))  # by address, program, then time
            addresses, bits, program = addresses[order], bits[order], program[order]
            last = np.ones(addresses.size, dtype=bool)  # each program's last write of an address is what it leaves
            last[:-1] = (addresses[1:] != addresses[:-1]) | (program[1:] != program[:-1])
            addresses, bits, program = addresses[last], bits[last], program[last]
            same = addresses[1:] == addresses[:-1]  # two programs' final values at one address...
            clash = same & (bits[1:] != bits[:-1])  # ...that differ
            at = np.flatnonzero(clash)
            for label, lo, hi, itemsize in launch["spans"]:  # one Race a tensor
                mine = at[(addresses[at] >= lo) & (addresses[at] < hi)]
                if mine.size:
                    first = int(addresses[mine[0]])
                    pair = (grids[int(program[mine[0]])], grids[int(program[mine[0] + 1])])
                    count = int(np.unique(addresses[mine]).size)
                    watch.races.append(Race(launch["kernel"], label, itemsize, count, (first - lo) // itemsize, pair))
        launch.clear()

    builder.create_masked_load, builder.create_masked_store = load, store
    builder.create_atomic_rmw, builder.create_atomic_cas = rmw, cas
    watch.watched = True
    try:
        with intercept_launches(before, after=races):
            yield watch
    finally:
        for n in names:  # back to the class's own methods (lesson 09's memcheck patches the same way)
            if n in vars(builder):
                delattr(builder, n)
            if getattr(builder, n) != originals[n]:
                setattr(builder, n, originals[n])
