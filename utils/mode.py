"""Device and mode: compiled Triton on an NVIDIA GPU, or Triton's interpreter on the CPU.

Triton reads ``TRITON_INTERPRET`` when a ``@triton.jit`` function is *defined*, so :func:`setup` must run before
any kernel is written. It is the first call of every lesson notebook.

``TRITON_HARD_WAY_AS=7.5`` (or ``8.0``, ``8.9``, …) makes the course behave on a newer GPU as it does on an older
one: the teaching dtype, whether TMA descriptors are used, and the shared memory budget that configs are sized for
all follow that compute capability. It is how the pre-Hopper paths are tested on an H100/H200; kernels still
compile for the real GPU.
"""

from __future__ import annotations

import inspect
import os
import sys
from dataclasses import dataclass, field
from typing import Any

#: the oldest compute capability Triton compiles for in this course (T4 is 7.5)
MIN_CAPABILITY = (7, 5)

#: environment variable: behave as a GPU of this compute capability (e.g. "7.5" for a T4, "8.0" for an A100)
AS_VAR = "TRITON_HARD_WAY_AS"

#: the most shared memory one program may use (opt-in), by compute capability, from NVIDIA's CUDA C++ guide
SHARED_MEMORY_BYTES = {
    (7, 5): 64 * 1024,
    (8, 0): 163 * 1024,
    (8, 6): 99 * 1024,
    (8, 7): 163 * 1024,
    (8, 9): 99 * 1024,
    (9, 0): 227 * 1024,
    (10, 0): 227 * 1024,
    (12, 0): 99 * 1024,
}


@dataclass(frozen=True)
class Env:
    """What :func:`setup` found. ``device`` is where tensors go; ``dtype`` is the low-precision type to teach with."""

    device: str
    interpret: bool
    gpu_name: str | None = None
    capability: tuple[int, int] | None = None
    sm_count: int | None = None
    memory_gb: float | None = None
    dtype: Any = None
    versions: dict = field(default_factory=dict)
    reason: str = ""
    #: the capability of the GPU really present when TRITON_HARD_WAY_AS makes ``capability`` an older one
    real_capability: tuple[int, int] | None = None
    #: shared memory one program may use, in bytes (the course sizes its tiles for this)
    shared_memory_bytes: int | None = None

    @property
    def is_gpu(self) -> bool:
        return self.device == "cuda"

    @property
    def emulated(self) -> bool:
        """True when TRITON_HARD_WAY_AS made the course behave as an older GPU than the one present."""
        return self.real_capability is not None and self.real_capability != self.capability

    @property
    def supports_tma(self) -> bool:
        """Hopper's tensor memory accelerator (TMA descriptors): compute capability 9.0 or newer, compiled."""
        return self.is_gpu and self.capability >= (9, 0)

    @property
    def supports_pdl(self) -> bool:
        """Programmatic dependent launch (a kernel launched while the one before it finishes; griddepcontrol in
        PTX): compute capability 9.0 or newer, compiled."""
        return self.is_gpu and self.capability >= (9, 0)

    def pick(self, cpu, gpu):
        """``cpu`` under the interpreter (tiny: it is 10^3-10^5x slower), ``gpu`` when kernels are compiled."""
        return gpu if self.is_gpu else cpu

    def describe(self) -> str:
        v = ", ".join(f"{k} {val}" for k, val in self.versions.items())
        if self.is_gpu:
            cc = ".".join(map(str, self.capability))
            if self.emulated:
                real = ".".join(map(str, self.real_capability))
                cc = f"{real}, behaving as {cc} because {AS_VAR} is set"
            return (
                f"GPU: {self.gpu_name} (compute capability {cc}, {self.sm_count} SMs, {self.memory_gb:.0f} GB)"
                f" — kernels are compiled; teaching dtype {dtype_name(self.dtype)}; {v}"
            )
        return (
            f"No usable NVIDIA GPU ({self.reason}) — Triton's interpreter runs kernels on the CPU: "
            f"small sizes, fp32/fp16 only (it has no bfloat16), no timings; {v}"
        )


def dtype_name(dtype) -> str:
    """``torch.bfloat16`` -> ``"bfloat16"``: the name a learner types after ``torch.``."""
    return str(dtype).replace("torch.", "")


def _capability_override(real: tuple[int, int]) -> tuple[int, int]:
    """The capability to behave as: TRITON_HARD_WAY_AS if set (never newer than the real GPU), else the real one."""
    value = os.environ.get(AS_VAR, "").strip()
    if not value:
        return real
    try:
        major, minor = (int(part) for part in value.split("."))
    except ValueError:
        raise ValueError(f"{AS_VAR}={value!r}: give a compute capability such as 7.5 or 8.0") from None
    if (major, minor) > real or (major, minor) < MIN_CAPABILITY:
        raise ValueError(
            f"{AS_VAR}={value}: the GPU here has compute capability {real[0]}.{real[1]}; the course "
            f"can behave as an older one, down to {MIN_CAPABILITY[0]}.{MIN_CAPABILITY[1]}"
        )
    return major, minor


def _probe_gpu():
    """Returns (usable, reason, torch.cuda properties or None)."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        return False, "TRITON_INTERPRET=1 was set", None
    import torch

    if not torch.cuda.is_available():
        return False, "torch sees no CUDA device", None
    if torch.version.hip is not None:
        return False, "this course targets NVIDIA GPUs; ROCm was found", None
    props = torch.cuda.get_device_properties(0)
    if (props.major, props.minor) < MIN_CAPABILITY:
        return False, f"{props.name} has compute capability {props.major}.{props.minor} < 7.5", None
    return True, "", props


_ENV: Env | None = None


def setup(quiet: bool = False, seed: int | None = 0) -> Env:
    """Detects the GPU, turns on the interpreter when there is none, prints one line saying which, returns an Env.

    Safe to call more than once: the first call decides and later calls return the same answer.
    """
    global _ENV
    if _ENV is None:
        _ENV = _detect()
        _enable_colab_widgets()
        _name_skeletons_under_errors()
    if seed is not None:
        import torch

        torch.manual_seed(seed)
    if not quiet:
        print(_ENV.describe())
    return _ENV


def _name_skeletons_under_errors() -> None:
    """In a notebook: under a cell's error, the exercises it reached that are still skeletons (utils.stubs), and
    the mistake that probably caused an error of Triton's (utils.crashes)."""
    shell = sys.modules.get("IPython")  # never imported here: a plain script or a lesson module must not load it
    ipython = shell.get_ipython() if shell is not None and hasattr(shell, "get_ipython") else None
    if ipython is not None and hasattr(ipython, "events"):
        from . import crashes, stubs

        stubs.watch_cells(ipython)
        crashes.watch_cells(ipython)  # and what a crash of Triton's probably means (utils.crashes)


def _enable_colab_widgets() -> None:
    """Colab shows ipywidgets 8 only through its custom widget manager."""
    if "google.colab" in sys.modules:
        try:
            from google.colab import output

            output.enable_custom_widget_manager()
        except Exception:  # an older Colab: widgets may not render, everything else works
            pass


def _quiet_interpreter_nan_warnings() -> None:
    """NumPy warns "invalid value encountered" when the interpreter meets the NaN that utils.nan_empty fills
    outputs with; utils.check reports NaN itself, so those warnings are noise above the learner's message."""
    import warnings

    warnings.filterwarnings(
        "ignore", message="invalid value encountered", category=RuntimeWarning, module=r"triton\.runtime\.interpreter"
    )


def _patch_triton_language_once_per_launch() -> None:
    """Triton's interpreter swaps triton.language's functions for interpreted ones at each launch, and puts them back
    after it. It does the same swap again at every call of one @triton.jit function from another, inside the
    launch, where the launch's swap is already in place: a scan of the language's modules (inspect.getmembers)
    each time, and about a quarter of the interpreter's time in kernels that call small helpers in their loops (lesson
    12's int4 GEMV: five helper calls a step). Here a helper's call skips the swap when the launch in progress has
    already swapped every language module the helper sees; anything else goes through Triton's own code. A Triton
    without these internals is left as it is (the interpreter is only slower)."""
    try:
        from triton.runtime import interpreter
    except ImportError:
        return
    original = getattr(interpreter, "_patch_lang", None)
    scope_class = getattr(interpreter, "_LangPatchScope", None)
    if original is None or scope_class is None or getattr(original, "once_per_launch", False):
        return
    languages = (interpreter.tl, interpreter.tl.core)
    launches = []  # the language modules each launch in progress has swapped

    seen = {}  # function -> the language modules among its globals (a function's imports do not change)

    def seen_by(fn) -> frozenset[int]:
        if fn not in seen:
            seen[fn] = frozenset(id(v) for v in fn.__globals__.values() if any(v is lang for lang in languages))
        return seen[fn]

    def patch_lang(fn):
        modules = seen_by(fn)
        if launches and modules and modules <= launches[-1]:
            return scope_class()  # a helper called inside the launch: already swapped, nothing to put back
        scope = original(fn)
        if launches:  # a helper that sees another module (triton.language.core, for tl.sum): Triton swaps it and
            launches[-1] |= modules  # never puts it back, so it stays swapped for the rest of the launch
            return scope
        launches.append(set(modules))  # a launch: its scope is put back when the launch ends
        restore = scope.restore

        def restore_and_end():
            try:
                restore()
            finally:
                launches.pop()

        scope.restore = restore_and_end
        return scope

    patch_lang.once_per_launch = True
    interpreter._patch_lang = patch_lang
    _read_the_language_once(interpreter)


def _refuse_the_truth_of_a_block() -> None:
    """Compiled, a Python ``if`` or ``while`` on a block of many lanes is an error; Triton's interpreter takes any
    such block for True, so the kernel ran one branch for every lane and the learner met the error only on a GPU.
    A block indexed by position (``x[0]``) or iterated (``max(x)``) gets the compiler's words too, not the
    interpreter's "'int' object is not iterable".
    Here a kernel's own code gets the compiler's error under the interpreter too (utils.crashes explains it);
    Triton's own Python, which tests its tensors as objects, still gets True. (``and``, ``or`` and ``not`` on
    blocks work lane by lane, compiled and here: _logical_operators_lane_by_lane.)"""
    try:
        from triton.runtime import interpreter
    except ImportError:
        return
    original = getattr(interpreter, "_patch_lang_tensor", None)
    if original is None or getattr(original, "strict_truth", False):
        return
    triton_dir = os.path.dirname(os.path.dirname(interpreter.__file__))

    def truth(self):
        data = self.handle.data
        if data.size == 1:
            return bool(data)
        if sys._getframe(1).f_code.co_filename.startswith(triton_dir):
            return True  # Triton's own code: an object's truth, as in the compiler's Python
        raise ValueError(
            f"Boolean value of Tensor with more than one value is ambiguous: a Python if or while on a block of "
            f"{data.size} lanes (the compiler refuses it; the interpreter used to take it for True)"
        )

    def patch_lang_tensor(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__bool__", truth)
        getitem = tensor.__getitem__  # the interpreter's: a Python int index fails in it on "not iterable"

        def by_position(self, slices, *args, **kwargs):
            if isinstance(slices, int):  # the compiler sees constexpr(0), and refuses it by name
                slices = interpreter.tl.constexpr(slices)
            if isinstance(slices, tensor):  # x_ptr[offsets]: the interpreter iterated the block of offsets
                raise ValueError(f"unsupported tensor index: a block of {slices.type} used as an index")
            return getitem(self, slices, *args, **kwargs)

        scope.set_attr(tensor, "__getitem__", by_position)
        scope.set_attr(tensor, "__iter__", not_iterable)

    def not_iterable(self):
        raise TypeError(
            "'tensor' object is not iterable: Python's max(), min(), sum(), list() or a for loop over a block (the "
            "compiler refuses them too)"
        )

    patch_lang_tensor.strict_truth = True
    interpreter._patch_lang_tensor = patch_lang_tensor


def _logical_operators_lane_by_lane() -> None:
    """Compiled, ``a and b``, ``a or b`` and ``not a`` on blocks work lane by lane (logical_and, logical_or and
    __not__; the first two deprecated in favour of ``&`` and ``|``); the interpreter ran them as Python does, on a
    whole block's truth, which it took for True: ``mask = (offs < n) and (offs >= 2)`` kept the second condition
    alone, ``not mask`` was False. Here the interpreter's rewrite of each kernel turns them into the compiler's
    operations; constants short-circuit, as compiled (and as Python)."""
    try:
        import ast

        from triton.runtime import interpreter
    except ImportError:
        return
    transformer = getattr(interpreter, "ASTTransformer", None)
    if transformer is None or getattr(transformer, "lane_by_lane", False) or not hasattr(interpreter, "tl"):
        return
    block = interpreter.tl.core.tensor

    def bool_op(is_and, thunks):
        blocks, value = [], None
        for thunk in thunks:  # in order, each evaluated only if the ones before did not decide
            value = thunk()
            if isinstance(value, block):
                blocks.append(value)
            elif bool(value) is not is_and:  # a false constant ends an `and`, a true one an `or`
                return value
        if not blocks:
            return value
        result = blocks[-1]
        for lhs in reversed(blocks[:-1]):  # a op (b op c), as the compiler folds them
            result = lhs.logical_and(result) if is_and else lhs.logical_or(result)
        return result

    def not_(value):
        return value.__not__() if isinstance(value, block) else not value

    no_args = dict(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[])

    def visit_BoolOp(self, node):
        self.generic_visit(node)
        thunks = [ast.Lambda(args=ast.arguments(**no_args), body=value) for value in node.values]
        call = ast.Call(
            func=ast.Name(id="_hard_way_bool_op", ctx=ast.Load()),
            args=[ast.Constant(isinstance(node.op, ast.And)), ast.List(elts=thunks, ctx=ast.Load())],
            keywords=[],
        )
        return ast.copy_location(call, node)

    def visit_UnaryOp(self, node):
        self.generic_visit(node)
        if not isinstance(node.op, ast.Not):
            return node
        call = ast.Call(func=ast.Name(id="_hard_way_not", ctx=ast.Load()), args=[node.operand], keywords=[])
        return ast.copy_location(call, node)

    assign = transformer.visit_Assign  # Triton's wraps the value without visiting it: visited first here

    def visit_Assign(self, node):
        node.value = self.visit(node.value)
        return assign(self, node)

    interpreter._hard_way_bool_op, interpreter._hard_way_not = bool_op, not_  # the interpreter's globals are put in
    transformer.visit_BoolOp, transformer.visit_UnaryOp = visit_BoolOp, visit_UnaryOp  # each kernel's
    transformer.visit_Assign = visit_Assign
    transformer.lane_by_lane = True


def _refused_global(fn, tree):
    """The first name ``fn``'s body reads from its module that the compiler refuses (a plain number, list or
    function: only constexprs, modules, @triton.jit functions, Triton's own objects and dtypes are allowed), or None.
    The compiler's rule (code_generator's global_lookup), read at the first launch."""
    import ast
    import types

    import triton.language as tl
    from triton import knobs
    from triton.runtime.jit import JITCallable, KernelInterface

    if getattr(knobs.compilation, "allow_non_constexpr_globals", False):
        return None
    definition = next((n for n in tree.body if isinstance(n, ast.FunctionDef)), None)
    if definition is None:
        return None
    arguments = definition.args
    local = {a.arg for a in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs)}
    local |= {a.arg for a in (arguments.vararg, arguments.kwarg) if a is not None}
    body = [node for statement in definition.body for node in ast.walk(statement)]
    local |= {n.id for n in body if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
    for node in body:
        if not isinstance(node, ast.Name) or not isinstance(node.ctx, ast.Load) or node.id in local:
            continue
        if node.id not in fn.__globals__:
            continue  # a builtin (range, min) or nothing: Python's own error
        value = fn.__globals__[node.id]
        module = getattr(value, "__module__", "") or ""
        allowed = (
            isinstance(value, (types.ModuleType, JITCallable, KernelInterface, tl.constexpr, tl.dtype))
            or getattr(value, "__triton_builtin__", False)
            or getattr(value, "__triton_aggregate__", False)
            or module.startswith(("triton.language", "triton.experimental.gluon.language"))
            or (isinstance(value, type) and issubclass(value, tuple) and hasattr(value, "_fields"))
        )
        if not allowed:
            return node
    return None


def _loop_carried_types_kept() -> None:
    """Compiled, a variable that a loop reassigns keeps the type it had before the loop (dtype and shape): `acc =
    0.0` and then `acc += x` with x a block of 128 fails, "Loop-carried variable acc has initial type fp32 but is
    re-assigned to <['128'], fp32> in loop!". The interpreter ran such loops as Python does, so a learner's
    accumulator started as a number passed on a laptop and failed on a GPU. Here each range() or tl.range() loop and
    each while loop of a kernel checks, at the end of every pass, the types of the variables it assigns that were
    live before it, with the compiler's message (tl.static_range loops are unrolled, compiled: not checked); and a
    range's bounds must be integers, as compiled (`range(0, n / BLOCK)` ran, truncated, under the interpreter)."""
    try:
        import ast

        from triton.runtime import interpreter
    except ImportError:
        return
    transformer = getattr(interpreter, "ASTTransformer", None)
    if transformer is None or getattr(transformer, "carried_types", False) or not hasattr(interpreter, "tl"):
        return
    block = interpreter.tl.core.tensor

    def live(names, scope):
        return {name: scope[name] for name in names if isinstance(scope.get(name), block)}

    def carried(before, scope):
        for name, value in before.items():
            now = scope.get(name)
            if isinstance(now, block) and now.type != value.type:
                raise AssertionError(
                    f"Loop-carried variable {name} has initial type {value.type} but is re-assigned to {now.type} in "
                    f"loop! Please make sure that the type stays consistent."
                )

    def unrolled(node) -> bool:
        call = node.iter if isinstance(node, ast.For) else None
        name = getattr(getattr(call, "func", None), "attr", None) or getattr(getattr(call, "func", None), "id", None)
        return isinstance(node, ast.For) and name not in ("range",)  # static_range, a tuple: unrolled when compiled

    def bounds(loop, *args, **kwargs):  # range's or tl.range's bounds, as the compiler takes them: integers only
        dtypes = [a.dtype if isinstance(a, block) else interpreter.tl.float32 if isinstance(a, float) else None
                  for a in args]  # fmt: skip
        if any(d is not None and not d.is_int() for d in dtypes):
            lb, ub, step = (dtypes + [None, None])[:3] if len(args) > 1 else (None, dtypes[0], None)
            shown = ", ".join(str(d or interpreter.tl.int32) for d in (lb, ub, step))
            raise TypeError(f"For loop bounds and step must all be ints, are ({shown})")
        return loop(*args, **kwargs)

    count = [0]

    def visit_loop(self, node):
        self.generic_visit(node)
        if unrolled(node):
            return node
        if isinstance(node, ast.For):  # range(a, b, c) -> _hard_way_bounds(range, a, b, c)
            node.iter = ast.copy_location(
                ast.Call(
                    func=ast.Name(id="_hard_way_bounds", ctx=ast.Load()),
                    args=[node.iter.func, *node.iter.args],
                    keywords=node.iter.keywords,
                ),
                node.iter,
            )
        targets = (
            {n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)} if isinstance(node, ast.For) else set()
        )
        stored = sorted(
            {n.id for s in node.body for n in ast.walk(s) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
            - targets
        )
        if not stored:
            return node
        count[0] += 1
        keep = f"_hard_way_live_{count[0]}"
        names = ast.Tuple(elts=[ast.Constant(n) for n in stored], ctx=ast.Load())
        scope = ast.Call(func=ast.Name(id="locals", ctx=ast.Load()), args=[], keywords=[])
        snapshot = ast.Assign(
            targets=[ast.Name(id=keep, ctx=ast.Store())],
            value=ast.Call(func=ast.Name(id="_hard_way_live", ctx=ast.Load()), args=[names, scope], keywords=[]),
        )
        check = ast.Expr(
            ast.Call(
                func=ast.Name(id="_hard_way_carried", ctx=ast.Load()),
                args=[ast.Name(id=keep, ctx=ast.Load()), scope],
                keywords=[],
            )
        )
        node.body.append(check)
        return [ast.copy_location(snapshot, node), node]

    interpreter._hard_way_live, interpreter._hard_way_carried = live, carried  # put in each kernel's globals
    interpreter._hard_way_bounds = bounds
    transformer.visit_For = transformer.visit_While = visit_loop
    transformer.carried_types = True


def _refuse_break_and_continue() -> None:
    """Compiled, ``break`` and ``continue`` in a @triton.jit function are errors (UnsupportedLanguageConstruct), and
    so is reading a global that is not a constexpr (``SCALE = 0.5`` at the top of the notebook); the interpreter runs
    them as Python does, so a learner's kernel worked on a laptop and failed on a GPU. Here a kernel or helper that
    does either is refused with the compiler's own error at its first launch or call."""
    try:
        import ast
        import textwrap

        from triton.compiler.errors import CompilationError, UnsupportedLanguageConstruct
        from triton.runtime import interpreter
    except ImportError:
        return
    cls = getattr(interpreter, "InterpretedFunction", None)
    original = getattr(cls, "rewrite", None)
    if original is None or getattr(original, "no_break", False):
        return
    checked = set()

    def rewrite(self):
        if self.fn not in checked:
            try:
                source = textwrap.dedent(inspect.getsource(self.fn))
                tree = ast.parse(source)
            except (OSError, TypeError, SyntaxError):  # no source to read: Triton's own handling decides
                source, tree = None, None
            checked.add(self.fn)
            for node in ast.walk(tree) if tree is not None else ():
                if isinstance(node, (ast.Break, ast.Continue)):
                    checked.discard(self.fn)  # refused at every launch, not only the first
                    raise UnsupportedLanguageConstruct(
                        source, node, f"unsupported AST node type: {type(node).__name__}"
                    )
            node = _refused_global(self.fn, tree) if tree is not None else None
            if node is not None:
                checked.discard(self.fn)
                raise CompilationError(
                    source,
                    node,
                    f"NameError('Cannot access global variable {node.id} from within @jit'ed function. "
                    f"Triton kernels can only access global variables that are instantiated as constexpr (`x = "
                    f"triton.language.constexpr(42)`).')",
                )
        return original(self)

    rewrite.no_break = True
    cls.rewrite = rewrite


def _refuse_small_dots() -> None:
    """Compiled for an NVIDIA GPU, ``tl.dot`` needs K >= 16 (32 for 8-bit inputs): the tensor cores' smallest step.
    The interpreter multiplies any tile (its smallest is 1 x 1 x 1), so a learner's BLOCK_K = 8 passed every check on
    a laptop and failed to compile on a GPU. Here the interpreter asks what NVIDIA's backend asks, with its message."""
    try:
        from triton.runtime import interpreter
    except ImportError:
        return
    builder = getattr(interpreter, "interpreter_builder", None)
    fns = getattr(builder, "codegen_fns", None)
    if not isinstance(fns, dict) or "min_dot_size" not in fns:
        return

    def min_dot_size(lhs_type, rhs_type):
        return (1, 1, 32) if lhs_type.scalar.primitive_bitwidth == 8 else (1, 1, 16)

    fns["min_dot_size"] = min_dot_size


def _read_the_language_once(interpreter) -> None:
    """The swap at each launch lists every member of triton.language, triton.language.core, tl.tensor, tl.math and
    the tensor descriptor class (inspect.getmembers: dir(), a getattr and a sort each, seven lists a launch) to find
    its builtins, which never change: here they are listed once, and each launch swaps the builtins among them as
    Triton's own code does. A member already swapped (Triton leaves some of triton.language.core swapped after a
    helper's call) is known by the builtin it wraps, so the list is the same whenever it is read."""
    patch_builtin, patch_attr = getattr(interpreter, "_patch_builtin", None), getattr(interpreter, "_patch_attr", None)
    if patch_builtin is None or patch_attr is None:
        return
    tl = interpreter.tl
    is_builtin = tl.core.is_builtin

    def builtins_of(package) -> list[str]:
        names = []
        for name, member in inspect.getmembers(package):
            wrapped = (getattr(member, "__kwdefaults__", None) or {}).get("member")  # a swapped member's builtin
            if is_builtin(member) or is_builtin(wrapped):
                names.append(name)
        return names

    packages = (tl, tl.tensor, tl.math, tl.core, getattr(tl.core, "tensor_descriptor_base", None))
    known = {id(package): builtins_of(package) for package in packages if package is not None}

    def patch_builtin_listed(package, builder, scope):
        names = known.get(id(package))
        if names is None:
            return patch_builtin(package, builder, scope)
        for name in names:
            member = getattr(package, name, None)
            if is_builtin(member):
                patch_attr(package, name, member, builder, scope)

    patch_builtin_listed.triton_own = patch_builtin
    interpreter._patch_builtin = patch_builtin_listed


def _detect() -> Env:
    usable, reason, props = _probe_gpu()
    if not usable:
        if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1":
            print(
                "note: triton was imported before utils.setup(); kernels defined before this call are not "
                "interpreted. Restart the kernel and run the setup cell first."
            )
        os.environ["TRITON_INTERPRET"] = "1"
        _quiet_interpreter_nan_warnings()
        _patch_triton_language_once_per_launch()
        _logical_operators_lane_by_lane()
        _loop_carried_types_kept()
        _refuse_the_truth_of_a_block()
        _refuse_break_and_continue()
        _refuse_small_dots()
    import torch
    import triton

    versions = {
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": ".".join(map(str, sys.version_info[:3])),
    }
    if not usable:
        return Env(device="cpu", interpret=True, dtype=torch.float16, versions=versions, reason=reason)
    real = (props.major, props.minor)
    cc = _capability_override(real)
    # Triton's tl.dot takes bf16 from Ampere (8.0) on; T4 (7.5) teaches with fp16 instead.
    dtype = torch.bfloat16 if cc >= (8, 0) else torch.float16
    smem = getattr(props, "shared_memory_per_block_optin", None) or SHARED_MEMORY_BYTES.get(real, 48 * 1024)
    if cc != real:
        smem = min(smem, SHARED_MEMORY_BYTES.get(cc, 48 * 1024))
    return Env(
        device="cuda",
        interpret=False,
        gpu_name=props.name,
        capability=cc,
        sm_count=props.multi_processor_count,
        memory_gb=props.total_memory / 1e9,
        dtype=dtype,
        versions=versions,
        real_capability=real,
        shared_memory_bytes=smem,
    )


def current() -> Env:
    """The Env of this process, running :func:`setup` quietly if nobody has yet."""
    return _ENV if _ENV is not None else setup(quiet=True, seed=None)
