"""Launching a compiled kernel again without Triton's per-call work on the host.

``kernel[grid](*args)`` does this at every call, before the GPU hears of it: bind the arguments to the kernel's
parameters; work out how each one specialises the kernel (every tensor's dtype and whether it starts on a 16-byte
boundary, every integer's being 1 or a multiple of 16); look the compiled kernel up under that key (an autotuner
first looks up its pick the same way); evaluate the grid; and only then launch. On a fast CPU that is ten or twenty
microseconds. On the H100 machine's host it was 30-45 us, more than a 1024^3 matmul takes on the GPU
(results/h100-2026-11-27-s8/sweeps/l05h.txt).

A launcher that calls one kernel at the same sizes again and again can do that work once. ``prepare`` returns a
``Prepared``: the compiled kernel, its grid and every argument but the tensors. Calling it launches with new tensors
through the same last call Triton makes (``CompiledKernel.run``). torch.compile's generated code launches the Triton
kernels it writes this way too.

What a Prepared must never get wrong is the specialisation. A kernel compiled for 16-byte-aligned pointers may use
vector loads that an unaligned pointer breaks. So it keeps each tensor's dtype and alignment from the call it was
prepared for and declines (returns False) a tensor that differs. Integers are not arguments of a Prepared at all: a
launcher keys its Prepareds by the sizes and strides they were made for. Nor does a Prepared look again at the
module globals its kernel read when it was compiled (Triton's launch refuses a kernel whose globals changed since):
a launcher whose kernels read a global that can change puts it in its signature.

A launcher keeps its Prepareds in a ``Table`` under each call's ``signature``: every tensor's shape, strides, dtype,
device and alignment, and every other argument and setting that decides what the launcher checks and launches. A
call whose signature is in the table passed the launcher's checks once already, as every such call would: it may
skip them (all but those that depend on the addresses, such as an out overlapping an input) and launch directly.

A kernel may take host-built TMA descriptors (``triton.tools.tensor_descriptor.TensorDescriptor``). A descriptor
holds its tensor's address, so a Prepared keeps only what describes it (dtype, shape, strides, block shape) and
builds a new one around the tensor each call passes in its place. An autotuner chooses the block shapes with its
configurations: ``block_shapes`` makes the pre_hook that sets them, the one pre_hook ``prepare`` accepts.

Under the interpreter nothing is compiled: ``prepare`` returns None and the launcher keeps Triton's launch.
"""

import dataclasses
import inspect

import torch
import triton
from triton import knobs
from triton.runtime.autotuner import Autotuner
from triton.runtime.driver import driver
from triton.runtime.jit import JITFunction
from triton.tools.tensor_descriptor import TensorDescriptor

from .checking import overlaps

__all__ = ["Prepared", "Table", "autotune_key", "block_shapes", "disjoint", "prepare", "same_kind", "signature"]


#: what a Prepared may keep as it was at prepare time: numbers, flags, names, dtypes (and a constexpr's value)
FIXED = (int, float, bool, str, type(None), torch.dtype, triton.language.dtype, triton.language.constexpr)


def _is_tensor(value) -> bool:
    return hasattr(value, "data_ptr")  # Triton's own test for a pointer argument


def block_shapes(**shapes):
    """An autotune pre_hook that gives each host-built descriptor argument its block shape from the configuration
    being run: block_shapes(a_desc=("BLOCK_M", "BLOCK_K"), ...) sets a_desc.block_shape = [BLOCK_M, BLOCK_K]
    (arguments that are not descriptors are left alone). It sets nothing else, so prepare accepts it."""

    def hook(nargs):
        for name, dims in shapes.items():
            if isinstance(nargs[name], TensorDescriptor):
                nargs[name].block_shape = [nargs[d] for d in dims]

    hook.block_shapes = shapes
    return hook


def _descriptor_fields(desc) -> dict:
    """A host-built descriptor without its tensor: every field but base (shape, strides, block shape, padding...)."""
    return {f.name: getattr(desc, f.name) for f in dataclasses.fields(desc) if f.name != "base"}


def autotune_key(autotuner: Autotuner, args, kwargs) -> tuple:
    """The key under which `autotuner` files its pick for a call with these arguments: the values of its `key`
    arguments, then the dtype of every tensor argument, in order (Autotuner.run's rule)."""
    named = {**dict(zip(autotuner.arg_names, args)), **kwargs}
    named = {k: v for k, v in named.items() if k in autotuner.arg_names}
    return (
        *(named[k] for k in autotuner.keys if k in named),
        *(str(v.dtype) for v in named.values() if hasattr(v, "dtype")),
    )


class Prepared:
    """One kernel launch, ready to repeat with new tensors (see prepare). p(*tensors) launches with the tensors in
    the order the kernel takes them (a tensor for each host-built descriptor too: p builds the descriptor, as the
    prepared call's, around it) and returns True, or launches nothing and returns False when a tensor's dtype or
    16-byte alignment differs from the prepared call's (for a descriptor's tensor, its shape or strides too), or
    the current GPU is another (the caller then launches the usual way)."""

    def __init__(self, compiled, grid, args, device):
        self.compiled, self.grid, self.device = compiled, grid, device
        self.slots = [i for i, v in enumerate(args) if _is_tensor(v) or isinstance(v, TensorDescriptor)]
        self.spec = []
        for i in self.slots:
            desc = _descriptor_fields(args[i]) if isinstance(args[i], TensorDescriptor) else None
            t = args[i].base if desc is not None else args[i]
            self.spec.append((t.dtype, t.data_ptr() % 16 == 0, desc))
        self.args = [None if i in self.slots else v for i, v in enumerate(args)]  # no tensor kept alive

    def __call__(self, *tensors) -> bool:
        if len(tensors) != len(self.slots):
            raise TypeError(f"this launch takes {len(self.slots)} tensors, got {len(tensors)}")
        args = self.args.copy()
        for i, t, (dtype, aligned, desc) in zip(self.slots, tensors, self.spec):
            if t.dtype != dtype or (t.data_ptr() % 16 == 0) != aligned:
                return False  # compiled for another specialisation
            if desc is not None:
                if list(t.shape) != list(desc["shape"]) or list(t.stride()) != list(desc["strides"]):
                    return False  # a descriptor of another tensor's layout: the kernel's sizes would not match
                t = TensorDescriptor(t, **desc)
            args[i] = t
        device = driver.active.get_current_device()
        if device != self.device:
            return False
        stream = driver.active.get_current_stream(device)
        k = self.compiled
        enter, leave = knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook
        metadata = None if enter is None else k.launch_metadata(self.grid, stream, *args)  # a profiler is listening
        k.run(*self.grid, stream, k.function, k.packed_metadata, metadata, enter, leave, *args)
        return True

    def __repr__(self):
        return f"Prepared({self.compiled.name}, grid={self.grid}, {len(self.slots)} tensors)"


def prepare(kernel, grid, *args, **kwargs) -> Prepared | None:
    """The launch kernel[grid](*args, **kwargs), made ready to repeat with other tensors of the same dtypes and
    alignment (every other argument as given here). Nothing is launched. kernel: a @triton.jit function with
    every constexpr given, or an autotuner that has already picked for these arguments. Returns None where no
    Prepared can stand in for Triton's launch: under the interpreter; an autotuner that has not picked yet, or
    whose pick runs a pre_hook other than block_shapes'; a kernel wrapped otherwise (heuristics); an argument a
    Prepared cannot keep as it is (anything but a tensor, a host-built TensorDescriptor or a value of FIXED's
    types). A descriptor given here gets the pick's block shape (its block_shapes hook runs on the arguments).
    A kernel that builds descriptors on the GPU needs triton.set_allocator's memory: the caller sets it."""
    config, hook = {}, None
    if isinstance(kernel, Autotuner):
        picked = kernel.configs[0] if len(kernel.configs) == 1 else kernel.cache.get(autotune_key(kernel, args, kwargs))
        if picked is None or (picked.pre_hook is not None and not hasattr(picked.pre_hook, "block_shapes")):
            return None  # a pre_hook may do anything at every launch (zero an output...): only Triton's launch runs it
        config, kernel, hook = picked.all_kwargs(), kernel.fn, picked.pre_hook
    if not isinstance(kernel, JITFunction):  # the interpreter's InterpretedFunction among others
        return None
    named = {**dict(zip(kernel.arg_names, args)), **kwargs, **config}
    full = []
    for p in kernel.params:
        if p.name in named:
            full.append(named[p.name])
        elif p.default is not inspect.Parameter.empty:
            full.append(p.default)
        else:
            raise TypeError(f"prepare: {kernel.fn.__name__} is missing its argument {p.name!r}")
    if not all(_is_tensor(v) or isinstance(v, (TensorDescriptor, *FIXED)) for v in full):
        return None
    if hook is not None:
        hook(named)  # the descriptors' block shapes for this pick: part of the compiled kernel's signature
    compiled = kernel.warmup(*args, grid=grid, **kwargs, **config)  # the cached kernel, compiled if need be
    grid = grid(named) if callable(grid) else grid
    grid = (*grid, *(1,) * (3 - len(grid)))
    return Prepared(compiled, grid, full, driver.active.get_current_device())


def signature(*args):
    """A call's arguments as a hashable key for a Table: each tensor as (shape, strides, dtype, device, address
    modulo 16, whether autograd would record it and whether it is a negated view: utils.require refuses those),
    anything else as (its type, itself): 16.0 and True are not 16 and 1, which a launcher's checks may refuse where
    they accept the others. None when an argument cannot be described (unhashable, a tensor without strides): the
    launcher then takes its full path, whose checks refuse what they must."""
    recording = torch.is_grad_enabled()
    try:
        key = tuple(
            (a.shape, a.stride(), a.dtype, a.device, a.data_ptr() % 16, recording and a.requires_grad, a.is_neg())
            if isinstance(a, torch.Tensor)
            else (type(a), a)
            for a in args
        )
        hash(key)
        return key
    except (RuntimeError, TypeError):  # a sparse tensor's strides, an unhashable list...
        return None


class Table:
    """A launcher's prepared launches (a Prepared, or whatever the launcher prepares) by call signature, at most
    `limit` of them: past that it starts again. Holds no tensor (a Prepared keeps none)."""

    def __init__(self, limit=1024):
        self.limit, self.launches = limit, {}

    def get(self, key):
        return None if key is None else self.launches.get(key)

    def keep(self, key, prepare, *args, **kwargs):
        """Keeps prepare(*args, **kwargs) under key, unless key or prepare is None or it returns None (under the
        interpreter, an autotuner that has not picked...)."""
        if key is None or prepare is None:
            return
        prepared = prepare(*args, **kwargs)
        if prepared is not None:
            if len(self.launches) >= self.limit:
                self.launches.clear()
            self.launches[key] = prepared

    def __len__(self):
        return len(self.launches)

    def __contains__(self, key):
        return key in self.launches

    def values(self):
        return self.launches.values()

    def __repr__(self):
        return f"Table({len(self)} prepared launches)"


def disjoint(outs, inputs) -> bool:
    """Whether no given out (None: the launcher allocates a new one) shares memory with an input or another out:
    the one check a repeated call cannot skip, since it is about addresses, which a signature leaves out."""
    outs = [o for o in outs if o is not None]
    inputs = [t for t in inputs if t is not None]
    return not any(overlaps(o, t) for i, o in enumerate(outs) for t in (*inputs, *outs[i + 1 :]))


def same_kind(t: torch.Tensor) -> torch.Tensor:
    """A copy of t at another address with t's signature, for t starting on a 16-byte boundary (a fresh allocation
    does): what shows a repeated call taking its prepared launch. A view keeps a view's strides."""
    return torch.empty_strided(t.shape, t.stride(), device=t.device, dtype=t.dtype).copy_(t)
