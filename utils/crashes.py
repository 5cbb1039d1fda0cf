"""What a crash in a learner's kernel or launch probably means, in the course's words.

Triton's errors say what failed and where, in the compiler's terms: ``Unsupported ptr type <['32'], int32> in
`tl.load```, ``arange's arguments must be of type tl.constexpr``, ``object of type 'int' has no len()``. A learner
meeting one for the first time needs the mistake behind it: offsets passed without their pointer, a block size
that is not a ``tl.constexpr``, a grid written ``(triton.cdiv(n, BLOCK_SIZE))`` without its comma.

:func:`explain` takes the exception (the whole chain: the interpreter wraps the error it met in an
``InterpreterError``, the compiler in a ``CompilationError`` that shows the kernel's line) and returns that
mistake and its fix, or None for an error it does not know. In a notebook, ``utils.setup()`` registers
:func:`watch_cells`, which prints it under the cell's traceback. The same mistakes give different messages
under the interpreter and compiled for a GPU; each rule matches both, and ``tests/test_crashes.py`` makes each
mistake in a real kernel, both ways, so that a Triton that rewords a message fails a test rather than a learner.

Some mistakes fail only compiled (``break`` in a loop, ``tl.dot`` on tiles under 16, ``if`` on a block: the
interpreter runs them as Python): their hints say so, since a learner on a laptop will first meet them on a GPU.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable

__all__ = ["RULES", "explain", "watch_cells"]

_PYTHON_LIBRARY = os.path.dirname(os.__file__)  # Python's own modules (inspect binds a launch's arguments)


def _frames(error: BaseException) -> list[tuple[str, str]]:
    """(file name, qualified name) of every frame of the error's traceback, outermost first."""
    frames, tb = [], error.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        frames.append((code.co_filename, getattr(code, "co_qualname", code.co_name)))
        tb = tb.tb_next
    return frames


def _in_launch(errors: list[BaseException]) -> bool:
    """True when a traceback of the chain passes through Triton's runtime (a launch, the interpreter, an autotuner)."""
    return any(re.search(r"[\\/]triton[\\/]runtime[\\/]", file) for e in errors for file, _ in _frames(e))


def _in_a_kernel(errors: list[BaseException], text: str) -> bool:
    """True when the error came from a kernel's body: compiled, a CompilationError (its name is in the text, as in
    utils.offline's errors); interpreted, a traceback that goes from the interpreter's launch (or call) into code of
    the learner's. A launch's rules need its absence: ``tl.where(x > 0, x)`` misses an argument too, inside a
    launch, and the launch is not its mistake."""
    if re.search(r"\b(?:CompilationError|UnsupportedLanguageConstruct)\b", text):
        return True
    calls = {"GridExecutor.__call__", "InterpretedFunction.__call__"}
    for error in errors:
        frames = _frames(error)
        for (_, name), (file, after) in zip(frames, frames[1:]):
            ours = not re.search(r"[\\/]triton[\\/]", file) and not file.startswith(_PYTHON_LIBRARY)
            if name in calls and after not in calls and ours:  # not Triton's, nor inspect's (a launch's arguments)
                return True
    return False


def _launched(errors: list[BaseException], text: str) -> bool:
    """A launch's own mistake: Triton's runtime in the traceback, and not an error of the kernel's body."""
    return _in_launch(errors) and not _in_a_kernel(errors, text)


@dataclasses.dataclass(frozen=True)
class Rule:
    """``pattern`` searched in the chain's messages; ``hint`` formatted with its groups; ``needs``: a test of the
    chain's tracebacks too (``_launched``: a grid's ``len()`` is a launch's, any other ``len()`` is not); ``inside``:
    where a message as common as Python's ``'int' object is not iterable`` must come from, searched in the names of
    Triton's frames (the interpreter's ``zeros``) and in the text (the compiler shows the line: ``tl.zeros(...)``)."""

    name: str
    pattern: str
    hint: str
    needs: Callable[[list[BaseException], str], bool] | None = None
    inside: str | None = None


RULES = [
    Rule(
        "grid not a tuple",
        r"object of type '(?:int|float)' has no len\(\)",
        "The grid is a single number, not a tuple: `(triton.cdiv(n, BLOCK_SIZE))` is only a number in brackets. "
        "The comma makes the tuple: `grid = (triton.cdiv(n, BLOCK_SIZE),)` (a grid function returns a tuple too).",
        needs=_launched,
    ),
    Rule(
        "float grid",
        r"'(?:numpy\.)?float(?:16|32|64)?' object cannot be interpreted as an integer",  # np.ceil gives a float64
        "The grid holds a float: `n / BLOCK_SIZE` divides exactly (and `np.ceil` returns a float). Count programs in "
        "whole numbers, rounding up: "
        "`triton.cdiv(n, BLOCK_SIZE)`.",
        needs=_launched,
    ),
    Rule(
        "no @triton.jit",
        r"'function' object is not subscriptable",
        "`kernel[grid](...)` on a plain Python function: the kernel's `def` needs `@triton.jit` on the line above.",
    ),
    Rule(
        "kernel called without a grid",
        r"Cannot call @triton\.jit'd outside of the scope of a kernel",  # compiled, and under utils.parity
        "A kernel was called like a Python function. Launch it with a grid: `kernel[grid](x, out, n, "
        "BLOCK_SIZE=1024)`. (Inside a kernel, a call to another @triton.jit function is fine.)",
    ),
    Rule(
        "block not a power of two",
        r"arange's range must be a power of 2",
        "`tl.arange(0, N)` takes only a power of two N (16, 32, 64, ...). Round the block size up on the host, "
        "`BLOCK_SIZE = triton.next_power_of_2(n)`, and mask the lanes past the end: `mask = offsets < n`.",
    ),
    Rule(
        "block size not a constexpr",
        r"arange's arguments must be of type tl\.constexpr|Shape element \d+ must have type `constexpr",
        "A block size reached the kernel as an ordinary argument, but a block's shape must be known when the kernel "
        "compiles. Declare it a compile-time constant in the kernel's signature, `BLOCK_SIZE: tl.constexpr`, and "
        "pass it at the launch (`BLOCK_SIZE=1024`); each new value compiles a kernel of its own.",
    ),
    Rule(
        "offsets without their pointer",
        r"Unsupported ptr type <?(?:\[[^\]]*\], )?u?int\d+>? in `tl\.(load|store)`",
        "`tl.{0}` was given a block of integers, not of pointers: offsets alone are not addresses. Add them to the "
        "tensor's pointer: `tl.{0}(x_ptr + offsets, ...)`.",
    ),
    Rule(
        "values for pointers",
        r"Unsupported ptr type .*? in `tl\.(load|store)`",
        "`tl.{0}` was given values, not pointers (a block that a load returned, or a number). Its first argument "
        "is the tensor's pointer plus the offsets: `tl.{0}(x_ptr + offsets, ...)`.",
    ),
    Rule(
        "blocks of different shapes",
        r"Cannot make_shape_compatible: incompatible dimensions at index (\d+): (\d+) and (\d+)",
        "Two blocks of different shapes meet in one operation: {1} and {2} elements along dimension {0}. Check each "
        "`tl.arange`'s length (the blocks of one tile come from the same BLOCK size) and that a 2-D tile's rows "
        "come from `offs_m[:, None]` and its columns from `offs_n[None, :]`.",
    ),
    Rule(
        "values and pointers of different shapes",
        r"Expected pointer argument to have shape|Cannot broadcast, rank mismatch|Cannot broadcast, the expanded",
        "The values and the pointers of a load or store have different shapes (or a different number of "
        "dimensions). Build the pointers with the shape of the values: `ptr + rows[:, None] * stride + cols[None, "
        ":]` for a 2-D tile; a 1-D block stores through 1-D offsets.",
    ),
    Rule(
        "mask with one pointer",
        r"Mask argument cannot be block type if pointer argument is not a block",
        "The load's pointer is one address but its mask is a block: add the offsets to the pointer, `tl.load(x_ptr "
        "+ offsets, mask=offsets < n)`.",
    ),
    Rule(
        "block stored through one pointer",
        r"Value argument cannot be block type if pointer argument is not a block",
        "A block of values is stored through one address: add the offsets, `tl.store(out_ptr + offsets, values, "
        "mask=mask)`. (A single result, such as `tl.sum(x)`'s, is what one pointer stores.)",
    ),
    Rule(
        "tl.dot on small tiles",
        r"Input shapes should have M >= (\d+), N >= (\d+) and K >= (\d+)",
        "`tl.dot`'s tiles are too small for the tensor cores: at least {0} x {2} by {2} x {1} (BLOCK_M >= {0}, "
        "BLOCK_N >= {1}, BLOCK_K >= {2}): an NVIDIA GPU's smallest step, which the course's interpreter asks for too.",
    ),
    Rule(
        "tl.dot of two dtypes",
        r"Both operands must be same dtype\. Got (\w+) and (\w+)",
        "`tl.dot` multiplies two tiles of one dtype, and here one is {0}, the other {1}. Load both in the inputs' "
        "dtype (or cast one, `b.to(a.dtype)`); only the accumulator is fp32: `acc += tl.dot(a, b)`.",
    ),
    Rule(
        "tl.dot of tiles that do not fit",
        r"input and other must have equal reduction dimensions|are not compatible for matmul",
        "`tl.dot(a, b)` needs a's columns to match b's rows: a BLOCK_M x BLOCK_K tile by a BLOCK_K x BLOCK_N one. "
        "Check the two loads' offsets: offs_k along a's columns (`[None, :]`) and along b's rows (`[:, None]`), "
        "both from the same BLOCK_K.",
    ),
    Rule(
        "PyTorch's dim= in a reduction",
        r"unexpected keyword argument '(dim|keepdim)'",
        "Triton's reductions take `axis=` and `keep_dims=`, not PyTorch's `dim=` and `keepdim=`: "
        "`tl.max(x, axis=1)`, `tl.sum(x, axis=0, keep_dims=True)`.",
    ),
    Rule(
        "a method of a number argument, interpreted",
        r"'(int|float|bool)' object has no attribute '(to|cast|dtype)'",
        "Under Triton's interpreter a number passed to the kernel arrives as a plain Python {0}, which has no "
        "`.{1}`: compiled, the same argument is a scalar of the kernel and has it, so the kernel would run on a GPU "
        "and fails only here. Write what works both ways: `tl.cast(alpha, tl.float32)` for `alpha.to(tl.float32)`, or "
        "arithmetic that converts by itself (`alpha * x` with x a float block).",
        needs=_in_a_kernel,
    ),
    Rule(
        "a PyTorch method on a block",
        r"'tensor' object has no attribute '(?!__)(\w+)'",
        "A Triton block has no `.{0}()`: PyTorch's tensor methods do not exist inside a kernel. Use Triton's: "
        "`x.to(tl.float32)` for `.float()`, `tl.exp(x)`, `tl.sum(x, axis=0)`, `tl.max(x, axis=0)`, `tl.where(...)`.",
    ),
    Rule(
        "a reduction over an axis the block lacks",
        r"invalid axis (-?\d+)|axis (-?\d+) out of bounds",
        "A reduction over axis {0}{1}, which the block does not have: a 2-D tile has axes 0 (down its rows) and 1 "
        "(along each row), a 1-D block only axis 0.",
    ),
    Rule(
        "a pointer indexed like an array",
        r"unsupported tensor index: a block of",
        "A pointer is not indexed like an array: for `x_ptr[offsets]` write `x_ptr + offsets`, the addresses of the "
        "block's elements, as in `tl.load(x_ptr + offsets, mask=mask)`.",
    ),
    Rule(
        "a block indexed by position",
        r"unsupported tensor index",
        "A block cannot be indexed by position (`x[0]`): its lanes are not addressable one by one inside a kernel. "
        "Reduce it (`tl.sum`, `tl.max`), pick with `tl.sum(tl.where(offsets == 0, x, 0), axis=0)`, or load that "
        "element alone (`tl.load(x_ptr)`). Indexing with `[:, None]` and `[None, :]` (new axes) is fine.",
    ),
    Rule(
        "Python's max of a block",
        r"(?:min|max) requires at least 2 values|'tensor' object is not iterable",
        "Python's `max()`, `min()`, `sum()` or a `for` loop over one block: a kernel reduces with `tl.max(x, "
        "axis=0)`, `tl.min`, `tl.sum` (over a block's lanes at once), and loops over `range(...)` only. Of two blocks, "
        "`tl.maximum(a, b)` takes the larger lane by lane.",
    ),
    Rule(
        "Python if on a block",
        r"Boolean value of Tensor with more than one value is ambiguous|truth value of an array with more than one",
        "A Python `if` (or `while`, `and`, `or`, `not`) tests a whole block, and each lane needs its own answer. "
        "Choose lane by lane with `tl.where(cond, a, b)` or leave lanes out with a mask; combine conditions with `&` "
        "and `|`. (The interpreter may run such an `if` without complaint; compiled, it fails.)",
    ),
    Rule(
        "break or continue",
        r"unsupported AST node type: (?:Break|Continue)",
        "Triton kernels have no `break` or `continue`. Loop over a fixed range and mask the steps that would be "
        "skipped, or use a `while` whose condition ends the loop. (The interpreter runs them as Python does; "
        "compiled, they fail.)",
    ),
    Rule(
        "torch inside a kernel",
        r"\b(torch|np|numpy)'? is not defined",
        "The kernel calls `{0}`, which does not exist inside @triton.jit: a kernel computes with `tl` (tl.exp, "
        "tl.sum, tl.maximum, tl.where, ...) and other @triton.jit functions. PyTorch belongs in the launcher.",
    ),
    Rule(
        "a name used after the loop that assigned it",
        r"\b(\w+)'? is not defined",
        "`{0}` does not exist where the kernel uses it. Once compiled, a name first assigned inside a loop does not "
        "exist after the loop (the loop's body is a scope of its own), nor one first assigned in one branch of an "
        "`if` decided at run time (`if pid == 0:`, `if tl.load(flag_ptr) > 0:`): assign it before the loop or the "
        "`if` (`{0} = tl.zeros(...)` or its first value), and it is carried out (or, for an `if`, in both branches "
        "with one type). Otherwise the name is misspelt, or belongs to another function: a kernel sees its "
        "arguments, its own names, and globals that are constexprs.",
        needs=_in_a_kernel,  # a launcher's misspelt name is Python's own plain error
    ),
    Rule(
        "block too large",
        r"numel \((\d+)\) exceeds triton maximum tensor numel \((\d+)\)",
        "A block of {0} elements: a block holds at most {1}. A block size computed from the input grows with it: "
        "keep BLOCK_SIZE fixed (1024, say) and launch `triton.cdiv(n, BLOCK_SIZE)` programs, or loop over a long "
        "row block by block.",
    ),
    Rule(
        "an argument that is not a tensor",
        r"'(list|tuple|numpy\.ndarray|ndarray)' object has no attribute '(type|data_ptr|dtype)'",
        "A kernel argument that should be a tensor is a Python {0}: pass torch tensors (`torch.tensor(...)`, on the "
        "device the kernel runs on).",
    ),
    Rule(
        "a CPU tensor on the GPU",
        r"Pointer argument \(at (\d+)\) cannot be accessed from Triton \(cpu tensor\?\)",
        "The kernel's argument {0} (counting from 0) is a tensor in the CPU's memory, and the kernel runs on the "
        "GPU: create every tensor on the GPU (`torch.empty(..., device=env.device)`) or move it there with "
        "`.to(env.device)`. (The interpreter runs on the CPU, so this shows only on a GPU.)",
    ),
    Rule(
        "memory outside the tensors (GPU)",
        r"illegal memory access was encountered|misaligned address|unspecified launch failure",
        "The GPU stopped a kernel that read or wrote memory outside its tensors: an offset past a tensor's end (a "
        "mask left out, a grid too large) or a stride mistake. The process's CUDA context is lost with it: restart "
        "the notebook's kernel before anything else. To find the access, run the check under the interpreter "
        "(TRITON_INTERPRET=1), where utils.watch_memory names the tensor and the bytes, or under compute-sanitizer "
        "(lesson 09).",
    ),
    Rule(
        "a kernel that returns a value",
        r"'tt\.return' op has \d+ operands?, but enclosing function|PassManager::run failed",
        "The compiler failed on the kernel (under a GPU's traceback, the lines printed just above it say where). A "
        "common cause: the kernel returns a value (`return out`, `return x * 2`). A kernel launched with a grid "
        "returns nothing: store its result through a pointer, `tl.store(out_ptr + offsets, result, mask=mask)`, and "
        "end it with a bare `return` or none. (A @triton.jit helper called from a kernel may return values.)",
    ),
    Rule(
        "tiles too large for shared memory",
        r"out of resource: shared memory, Required: (\d+), Hardware limit: (\d+)",
        "The tiles need {0} bytes of shared memory and the GPU has {1}: each pipeline stage keeps an A tile and a B "
        "tile. Use fewer stages (`num_stages`) or smaller BLOCK_M, BLOCK_N or BLOCK_K.",
    ),
    Rule(
        "a loop variable changes type",
        r"Loop-carried variable (\w+) has initial type (<[^>]*>|\S+) but is re-assigned to (<[^>]*>|\S+) in loop",
        "`{0}` starts as {1} and the loop makes it {2}: a loop's variables keep one type. Give it its final type "
        "before the loop (`tl.zeros(..., dtype=tl.float32)`) and cast what the loop adds (`.to(tl.float32)`).",
    ),
    Rule(
        "a branch changes a variable's type",
        r"initial value for `(\w+)` is of type (\S+), but the (?:then|else) block redefines it as (\S+)",
        "`{0}` is {1} before an `if` decided at run time, and a branch makes it {2}: compiled, a variable keeps one "
        "type through such an `if`. Give it its final type before the `if` (`{0} = tl.zeros(..., dtype=tl.float32)`) "
        "or cast what the branch assigns (`.to(...)`). An `if` on a constexpr (`if HAS_BIAS:`) is decided before the "
        "kernel runs, and may change it.",
    ),
    Rule(
        "two branches give a name two types",
        r"Mismatched type for (\w+) between then block \((.*?)\) and else block \((.*?)\)",
        "The `if` branch makes `{0}` {1} and the `else` branch {2}: compiled, a name an `if` decided at run time "
        "defines in both branches keeps one type. Make both branches give it the same dtype and shape "
        "(`tl.zeros((BLOCK_SIZE,), dtype=...)` rather than a number, or a `.to(...)`). (The interpreter runs one "
        "branch and cannot compare them; compiled, it fails.)",
    ),
    Rule(
        "a launch without every argument",
        r"missing (?:\d+ )?required (?:positional |keyword-only )?arguments?: ('[^']*'(?:,? (?:and )?'[^']*')*)",
        "The launch gives no value for {0}: every parameter of the kernel needs one, its constexprs too (by keyword: "
        "`BLOCK_SIZE=1024`).",
        needs=_launched,
    ),
    Rule(
        "a launch with too many arguments",
        r"got multiple values for argument '\w+'|takes \d+ positional arguments? but \d+ (?:were|was) given",
        "The launch passes more values than the kernel has parameters, or one twice (in its place and again by "
        "keyword): give each parameter of the kernel's signature one value, in its order, the constexprs by keyword "
        "(`BLOCK_SIZE=1024`).",
        needs=_launched,
    ),
    Rule(
        "a call in a kernel without every argument",
        r"missing (?:\d+ |a )?required (?:positional |keyword-only )?arguments?: ('[^']*'(?:,? (?:and )?'[^']*')*)",
        "A function called inside the kernel is given no {0}: Triton's functions have fewer defaults than "
        "PyTorch's. Check the call on the line shown: `tl.program_id(axis=0)`, `tl.arange(0, BLOCK_SIZE)` (a start "
        "and an end), `tl.where(cond, a, b)`, `tl.maximum(a, b)`, `tl.argmax(x, axis=0)`.",
        needs=_in_a_kernel,  # a launcher called without an argument is Python's own plain error
    ),
    Rule(
        "a mask of numbers",
        r"Mask must have boolean scalar type",
        "A mask must be a block of True/False, such as `offsets < n`; this one holds numbers (a count, or the values: "
        "`tl.store(ptr, mask, x)` puts them in the mask's place). Pass it by keyword: `tl.store(out_ptr + offsets, "
        "x, mask=offsets < n)`.",
    ),
    Rule(
        "math on fp16 or integers",
        r"Expected dtype \[([^\]]*)\] but got (\w+)",
        "Triton's math functions (`tl.exp`, `tl.log`, `tl.sqrt`, `tl.rsqrt`, `tl.sigmoid`, ...) take only {0}, and "
        "were given {1}: cast first, `tl.exp(x.to(tl.float32))`, and compute in fp32 (`tl.store` casts back to the "
        "output's dtype).",
    ),
    Rule(
        "an argument a Triton function does not have",
        r"got an unexpected keyword argument '(\w+)'",
        "A call inside the kernel passes `{0}=`, which the function does not take. Check the name against its "
        "signature (`help(tl.load)`): `tl.load` takes `mask=` and `other=`, `tl.store` only `mask=`; reductions "
        "take `axis=`, `tl.sort` and `tl.flip` take `dim=`.",
        needs=_in_a_kernel,  # a launcher without the check's out= is not a kernel's call
    ),
    Rule(
        "tl.dot of blocks that are not tiles",
        r"input and other must have equal ranks >= 2|Both inputs must be either 2D or 3D",
        "`tl.dot` multiplies 2-D tiles (BLOCK_M x BLOCK_K by BLOCK_K x BLOCK_N; 3-D for a batch of them), and a "
        "block here has another rank. A dot product of two vectors is `tl.sum(a * b, axis=0)`; a matrix by a vector, "
        "`tl.sum(w * x[None, :], axis=1)`.",
    ),
    Rule(
        "tl.dot into an accumulator of another shape",
        r"accumulator shape is incompatible",
        "The accumulator passed to `tl.dot(a, b, acc)` must have the product's shape, BLOCK_M x BLOCK_N: `acc = "
        "tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)` before the K loop.",
    ),
    Rule(
        "tl.dot into an accumulator of another dtype",  # Triton asserts it with no message: AssertionError()
        r"(?m)AssertionError\(\)|^AssertionError:?\s*$",
        "The accumulator passed to `tl.dot(a, b, acc)` must have the product's dtype, fp32 unless `out_dtype` says "
        "otherwise: `acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)` before the K loop, converted to the "
        "output's dtype once, at the store. (`out_dtype=tl.float16` accepts an fp16 accumulator, and loses the "
        "precision an fp32 sum keeps.)",
        inside=r"tl\.dot\([^\n]*\n *\^|^(?:\w+\.)?dot$",  # compiled: the caret under it; interpreted: its frame
    ),
    Rule(
        "a shape that is not a tuple",
        r"'int' object is not iterable",
        "A block's shape is a tuple, even for one dimension: `tl.zeros((BLOCK_SIZE,), dtype=tl.float32)` (the comma "
        "makes the tuple), `tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)`; the dtype goes by keyword.",
        inside=r"^(?:zeros|full)$|\btl\.(?:zeros|full)\(",
    ),
    Rule(
        "a Python list in a kernel",
        r"only tuple comprehensions are supported|'tuple' object has no attribute '?(?:append|extend|insert|pop)"
        r"|'(?:append|extend|insert|pop)' is not in list",
        "A kernel has no Python lists: compiled, `[...]` is a tuple of fixed length, with no `.append` and no list "
        "comprehension. Keep a fixed number of blocks in names of their own, or make them one larger block (a tile "
        "with one more dimension). (The interpreter runs lists as Python; compiled, they fail.)",
    ),
    Rule(
        "a global that is not a constexpr",
        r"Cannot access global variable (\w+) from within @jit'ed",
        "The kernel reads `{0}`, a global the compiler refuses: a number must be a compile-time constant, `{0} = "
        "tl.constexpr(...)` (not an annotation), or an argument of the kernel; a function the kernel calls needs "
        "`@triton.jit`. (The interpreter reads any global; compiled, this fails.)",
    ),
    Rule(
        "a torch dtype in a kernel",
        r"'torch\.dtype' object has no attribute",
        "A torch dtype (`torch.float16`) reached the kernel where a Triton one belongs: inside a kernel the dtypes "
        "are `tl.float16`, `tl.float32`, ... Pass the Triton dtype as the constexpr, or use the pointer's own: "
        "`x_ptr.dtype.element_ty`.",
    ),
    Rule(
        "an atomic without its pointer",
        r"Pointer argument of store instruction is",
        "An atomic (`tl.atomic_add`, `tl.atomic_max`, `tl.atomic_cas`, ...) was given values or offsets where its "
        "first argument is the pointers: `tl.atomic_add(out_ptr + offsets, values, mask=mask)`.",
    ),
    Rule(
        "a tensor descriptor over a column-major tensor",
        r"Tensor descriptor last dim must be 1|`_semantic` argument must be provided",
        "A tensor descriptor's last dimension must be contiguous: `strides=[stride_m, 1]`, the 1 last (the tensor "
        "row-major, `.contiguous()`). For a transposed operand, describe the tensor as it is stored and `tl.trans` "
        "the tile.",
        inside=r"make_tensor_descriptor",
    ),
    Rule(
        "a tensor descriptor for a pointer",
        r"'tensor_descriptor(?:_type)?' object has no attribute",
        "A tensor descriptor is not a pointer: `tl.load` and pointer arithmetic do not take it. Load its tiles with "
        "`desc.load([pid_m * BLOCK_M, k])` and store with `desc.store([m, n], tile)`.",
    ),
    Rule(
        "a tensor descriptor loaded at a block of offsets",
        r"expected \d+ offsets, but got \d+|object of type 'tensor' has no len\(\)",
        "`desc.load(...)` takes the tile's first coordinates, one number per dimension of the descriptor, in a list: "
        "`desc.load([pid_m * BLOCK_M, k])`, not a block of offsets (the descriptor makes the tile's addresses).",
        inside=r"descriptor_(?:load|store)|(?<!tl)\.(?:load|store)\(",
    ),
    Rule(
        "a tensor descriptor's tile off its 16-byte boundary",
        r"block offset start must be 16-byte aligned",
        "A tensor descriptor's tile starts on a 16-byte boundary along its last dimension (TMA's rule; the "
        "interpreter checks it): the last coordinate of `desc.load([...])` counts elements, so a head's or a "
        "column block's start is `h * HEAD_DIM` or `pid_n * BLOCK_N`, not `h` or `pid_n`.",
    ),
    Rule(
        "len() of a block",
        r"object of type 'tensor' has no len\(\)",
        "A block has no `len()`: its length is a constexpr of the kernel (BLOCK_SIZE) or `x.shape[0]`; the count of "
        "lanes a mask keeps is `tl.sum(mask.to(tl.int32), axis=0)`.",
    ),
    Rule(
        "an operation outside @triton.jit",
        r"`_semantic` argument must be provided outside of JIT functions|'int' object is not iterable",
        "A Triton operation ran outside the compiler: a function the kernel calls lacks `@triton.jit` (each helper "
        "needs it), or a pointer is indexed like an array, `x_ptr[offsets]` (write `x_ptr + offsets`).",
        inside=r"_semantic|__getitem__",  # the interpreter's message for x_ptr[offsets] comes from tensor.__getitem__
    ),
    Rule(
        "** on a block",
        r"for \*\* or pow\(\): 'tensor'|has no attribute '__pow__'",
        "Triton blocks have no `**`: square with `x * x`; another power of a positive x is `tl.exp2(p * tl.log2(x))`.",
    ),
    Rule(
        "a dtype called like a function",
        r"'dtype' object is not callable",
        "A dtype is not a function: cast with `x.to(tl.float32)`, not `tl.float32(x)`.",
    ),
    Rule(
        "a fourth grid axis",
        r"program_id axis must be 0, 1, or 2 but got (-?\d+)",
        "`tl.program_id({0})`: a grid has three axes at most, 0, 1 and 2 (`grid = (a, b, c)`). Index more with one "
        "axis and divide: `pid // num_pid_n`, `pid % num_pid_n`.",
    ),
    Rule(
        "bits of a float",
        r"invalid operands of type (?:triton\.language\.)?([\w<>]+) and (?:triton\.language\.)?([\w<>]+)",
        "An operator got operands it cannot combine, {0} and {1}: bit operations (`>>`, `<<`, `&`, `|`, `^`) take "
        "integers (`x.to(tl.int32)`, or `x.to(tl.int32, bitcast=True)` for a float's bits), and a pointer takes "
        "only integer offsets.",
    ),
    Rule(
        "a float loop bound",
        r"For loop bounds and step must all be ints",
        "A `range()` bound is a float: `n / BLOCK_SIZE` divides exactly. Count blocks with `tl.cdiv(n, BLOCK_SIZE)` "
        "or step through the offsets, `range(0, n, BLOCK_SIZE)`. (The interpreter runs it; compiled, it fails.)",
    ),
    Rule(
        "tl.static_assert",
        r"CompileTimeAssertionFailure|AssertionError",
        "The kernel's own `tl.static_assert` refused this launch's constexprs (its message is above): launch with "
        "values that meet it, and refuse the others in the launcher, before the launch, with a message naming the "
        "argument.",
        inside=r"static_assert",
    ),
]


def _chain(error: BaseException) -> list[BaseException]:
    """The error and those it was raised from or during, once each."""
    seen = []
    while error is not None and error not in seen:
        seen.append(error)
        error = error.__cause__ or error.__context__
    return seen


def explain(error: BaseException | str | None) -> str | None:
    """The learner's probable mistake behind ``error``, and its fix; None when no rule knows the error. ``error``
    may be the text Triton printed (``utils.offline``'s errors, with no traceback: a launch's rules never apply)."""
    if error is None:
        return None
    errors = [] if isinstance(error, str) else _chain(error)
    text = error if isinstance(error, str) else "\n".join(f"{type(e).__name__}: {e}" for e in errors)
    for rule in RULES:
        found = re.search(rule.pattern, text)
        if not found:
            continue
        if rule.needs is not None and not rule.needs(errors, text):
            continue
        if rule.inside is not None and not _inside(rule.inside, text, errors):
            continue
        return rule.hint.format(*(group or "" for group in found.groups()))
    return None


def _inside(where: str, text: str, errors: list[BaseException]) -> bool:
    """True when ``where`` is in the text or names a frame of Triton's own in the chain's tracebacks."""
    if re.search(where, text, flags=re.M):
        return True
    return any(
        re.search(where, name) for e in errors for file, name in _frames(e) if re.search(r"[\\/]triton[\\/]", file)
    )


def watch_cells(ipython) -> None:
    """In an IPython kernel: under a cell's error that a rule knows, its hint. Registered once."""
    if getattr(ipython, "_hard_way_crashes", False):
        return
    ipython._hard_way_crashes = True

    def after(result):
        try:
            hint = explain(result.error_in_exec)
        except Exception:  # a hint must never hide the error itself
            hint = None
        if hint:
            print(f"\nProbably: {hint}")

    ipython.events.register("post_run_cell", after)
