"""The course's interpreter refuses what a GPU's compiler refuses, in the compiler's words.

Triton's interpreter runs a kernel as Python, and so runs some kernels the compiler refuses, or runs them with another
meaning: a learner's kernel passed every check on a laptop and failed on a GPU. ``install()`` (called by
``utils.setup()`` when it turns the interpreter on) changes the interpreter where it differs:

- an ``if`` or ``while`` on a block of many lanes: the compiler's error (the interpreter took any block for True);
  ``x[0]``, ``max(x)`` and ``x_ptr[offsets]``: the compiler's words, not "'int' object is not iterable";
- ``and``, ``or`` and ``not`` on blocks: lane by lane, as compiled (they took a whole block's truth: ``(offs < n)
  and (offs >= 2)`` kept the second condition alone);
- a loop that changes the type of a variable live before it (``acc = 0.0``, then ``acc += x``, a block), and a
  ``range()`` bound that is a float: the compiler's errors;
- ``break``, ``continue``, a global that is not a constexpr, a list comprehension and a list's ``.append`` (or
  ``extend``, ``insert``, ``pop``), at a kernel's first launch or call: the compiler's errors, with the kernel's line;
- a name first assigned inside a loop, used after it: the compiler's NameError where it is used;
- an ``if`` decided at run time (``if tl.load(flag_ptr) > 0:``, ``if pid == 0:``, ``if n > 0:`` for an int argument
  n): a name first assigned in one of its branches and used after it, the compiler's NameError where it is used; a
  branch that changes the type of a variable live before it (``acc = 0``, then ``acc = x.to(tl.float32)``), the
  compiler's error at the ``if`` (only the branch that ran is checked). Which ``if`` is decided at run time is read
  from its condition's value at run time, as the compiler reads it: a tensor is, a Python value is not (a constexpr,
  ``BLOCK > 16``, ``x.dtype == tl.float16``: decided when the kernel compiles). The interpreter makes tensors of the
  values the compiler does (``flag = BLOCK > 16`` holds one both ways, since an assignment makes a tensor of a
  constexpr: compiled, ``if flag:`` is decided at run time; ``flag: tl.constexpr = BLOCK > 16`` is not), but for
  arguments: compiled, a kernel's int argument equal to 1 is a constexpr (Triton specializes it), and a helper's int
  argument may be a constexpr its caller computed. A condition that reads such an argument is left alone, so that
  no kernel the compiler takes is refused;
- ``tl.dot`` on tiles under NVIDIA's smallest step (K >= 16, 32 for 8-bit inputs): the compiler's message;
- a kernel called like a function, without a grid: the compiler's error (the interpreter swapped triton.language for
  good, and failed on whatever came first); a launched kernel that returns a value: the compiler's failure (the
  interpreter dropped the value).

Each change reaches into the interpreter's internals (its AST rewrite, the tensor methods it patches at each launch,
its builder); a Triton without one of them keeps its own behaviour there. Triton's own Python, which tests its
tensors as objects, is left as it is. ``tests/test_interpreter.py`` and ``tests/test_crashes.py`` hold the behaviour;
``utils.crashes`` explains each error to the learner.
"""

from __future__ import annotations

import ast
import inspect
import os
import sys
import textwrap
import types

__all__ = ["install"]


def install() -> None:
    """Makes Triton's interpreter as strict as the compiler (see the module's docstring). Safe to call again."""
    try:
        from triton.runtime import interpreter
    except ImportError:
        return
    if getattr(interpreter, "_hard_way_parity", False) or not hasattr(interpreter, "tl"):
        return
    interpreter._hard_way_parity = True
    _calls_inside_launches(interpreter)
    _blocks(interpreter)
    _rewrites(interpreter)
    _branches(interpreter)
    _first_call(interpreter)
    _dot_sizes(interpreter)


def _call(name: str, *args, keywords=()) -> ast.Call:
    """The AST of ``name(*args)``: a function the rewritten kernels find among the interpreter's globals."""
    return ast.Call(func=ast.Name(id=name, ctx=ast.Load()), args=list(args), keywords=list(keywords))


def _calls_inside_launches(interpreter) -> None:
    """A @triton.jit function called like a Python function, outside any launch: the compiler's error at once.
    Triton's interpreter ran it as a helper's call: it swapped triton.language for its interpreted functions for good
    (a helper's call inside a launch leaves the launch to put them back) and then failed on whatever came first.
    Also counts the helper calls under way (``interpreter._hard_way_helpers[0]``; 0 in a launched kernel's body)."""
    executor, cls = getattr(interpreter, "GridExecutor", None), getattr(interpreter, "InterpretedFunction", None)
    if executor is None or cls is None:
        return
    launch, call = executor.__call__, cls.__call__
    depth, helpers = [0], [0]

    def launched(self, *args, **kwargs):
        depth[0] += 1
        try:
            return launch(self, *args, **kwargs)
        finally:
            depth[0] -= 1

    def called(self, *args, **kwargs):
        if not depth[0]:
            raise RuntimeError("Cannot call @triton.jit'd outside of the scope of a kernel")
        helpers[0] += 1
        try:
            return call(self, *args, **kwargs)
        finally:
            helpers[0] -= 1

    executor.__call__, cls.__call__ = launched, called
    interpreter._hard_way_helpers = helpers


def _blocks(interpreter) -> None:
    """A block's truth, its indexing by position and its iteration, as the compiler takes them."""
    original = getattr(interpreter, "_patch_lang_tensor", None)
    if original is None:
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

    def not_iterable(self):
        raise TypeError(
            "'tensor' object is not iterable: Python's max(), min(), sum(), list() or a for loop over a block (the "
            "compiler refuses them too)"
        )

    def patch_lang_tensor(tensor, scope):  # the interpreter patches tl.tensor at each launch: after it, these
        original(tensor, scope)
        getitem = tensor.__getitem__  # the interpreter's: a Python int index fails in it on "not iterable"

        def by_position(self, slices, *args, **kwargs):
            if isinstance(slices, int):  # the compiler sees constexpr(0), and refuses it by name
                slices = interpreter.tl.constexpr(slices)
            if isinstance(slices, tensor):  # x_ptr[offsets]: the interpreter iterated the block of offsets
                raise ValueError(f"unsupported tensor index: a block of {slices.type} used as an index")
            return getitem(self, slices, *args, **kwargs)

        scope.set_attr(tensor, "__bool__", truth)
        scope.set_attr(tensor, "__getitem__", by_position)
        scope.set_attr(tensor, "__iter__", not_iterable)

    interpreter._patch_lang_tensor = patch_lang_tensor


def _rewrites(interpreter) -> None:
    """``and``, ``or``, ``not`` lane by lane, and loops that keep their variables' types and take integer bounds,
    through the interpreter's rewrite of each kernel's source (its ASTTransformer)."""
    transformer = getattr(interpreter, "ASTTransformer", None)
    assign = getattr(transformer, "visit_Assign", None)
    if assign is None:
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

    def carried(before, scope):
        for name, value in before.items():
            now = scope.get(name)
            if isinstance(value, block) and isinstance(now, block) and now.type != value.type:
                raise AssertionError(
                    f"Loop-carried variable {name} has initial type {value.type} but is re-assigned to {now.type} in "
                    f"loop! Please make sure that the type stays consistent."
                )

    def bounds(loop, *args, **kwargs):  # range's or tl.range's bounds, as the compiler takes them: integers only
        dtypes = [a.dtype if isinstance(a, block) else interpreter.tl.float32 if isinstance(a, float) else None
                  for a in args]  # fmt: skip
        if any(d is not None and not d.is_int() for d in dtypes):
            lb, ub, step = (dtypes + [None, None])[:3] if len(args) > 1 else (None, dtypes[0], None)
            shown = ", ".join(str(d or interpreter.tl.int32) for d in (lb, ub, step))
            raise TypeError(f"For loop bounds and step must all be ints, are ({shown})")
        return loop(*args, **kwargs)

    def visit_BoolOp(self, node):
        self.generic_visit(node)
        no_args = ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[])
        thunks = ast.List(elts=[ast.Lambda(args=no_args, body=value) for value in node.values], ctx=ast.Load())
        return ast.copy_location(_call("_hard_way_bool_op", ast.Constant(isinstance(node.op, ast.And)), thunks), node)

    def visit_UnaryOp(self, node):
        self.generic_visit(node)
        return ast.copy_location(_call("_hard_way_not", node.operand), node) if isinstance(node.op, ast.Not) else node

    def visit_Assign(self, node):  # Triton's wraps the value without visiting it: visited first here
        node.value = self.visit(node.value)
        if getattr(node.value, "func", None) is None or getattr(node.value.func, "id", None) != "_hard_way_gone":
            node.value = ast.copy_location(_call("_hard_way_use", node.value), node.value)
        return assign(self, node)

    count = [0]

    def visit_loop(self, node):
        self.generic_visit(node)
        targets = set()
        if isinstance(node, ast.For):
            func = getattr(node.iter, "func", None)
            if (getattr(func, "attr", None) or getattr(func, "id", None)) != "range":
                return node  # tl.static_range, a tuple: unrolled when compiled, each pass typed on its own
            node.iter = ast.copy_location(
                _call("_hard_way_bounds", func, *node.iter.args, keywords=node.iter.keywords), node.iter
            )
            targets = {n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)}
        stored = _stored(node.body)
        if not stored - targets:
            return node
        count[0] += 1
        keep = f"_hard_way_live_{count[0]}"  # what is defined before the loop: types checked after every pass
        names = ast.Tuple(elts=[ast.Constant(n) for n in sorted(stored - targets)], ctx=ast.Load())
        snapshot = ast.Assign(targets=[ast.Name(id=keep, ctx=ast.Store())],
                              value=_call("_hard_way_live", names, _call("locals")))  # fmt: skip
        node.body.append(ast.Expr(_call("_hard_way_carried", ast.Name(id=keep, ctx=ast.Load()), _call("locals"))))
        # compiled, the loop's body is a region of its own: a name first assigned in it does not exist after the loop
        # (its counter does: Triton 3.6 and 3.7.1 compile a use of it); here it becomes a stand-in that fails where it
        # is used, as the compiler does
        gone = [  # if "name" not in keep: name = _hard_way_gone("name")
            ast.If(
                test=ast.Compare(ast.Constant(n), [ast.NotIn()], [ast.Name(id=keep, ctx=ast.Load())]),
                body=[ast.Assign([ast.Name(id=n, ctx=ast.Store())], _call("_hard_way_gone", ast.Constant(n)))],
                orelse=[],
            )
            for n in sorted(stored - targets)
        ]
        return (
            [ast.copy_location(snapshot, node)]
            + [node]
            + [ast.fix_missing_locations(ast.copy_location(s, node)) for s in gone]
        )

    def use(value):  # compiled, `a = b` reads b: a name gone after its loop fails there, not where a is used
        if isinstance(value, _Gone):
            value._fail()
        return value

    # the interpreter puts its own globals in each kernel's: the rewritten kernels find these there
    interpreter._hard_way_gone, interpreter._hard_way_use = _Gone, use
    interpreter._hard_way_bool_op, interpreter._hard_way_not = bool_op, not_
    interpreter._hard_way_live, interpreter._hard_way_carried, interpreter._hard_way_bounds = _defined, carried, bounds
    transformer.visit_BoolOp, transformer.visit_UnaryOp, transformer.visit_Assign = (
        visit_BoolOp,
        visit_UnaryOp,
        visit_Assign,
    )
    transformer.visit_For = transformer.visit_While = visit_loop


def _branches(interpreter) -> None:
    """An ``if`` decided at run time as compiled: a name first assigned in one of its branches is gone after it, and a
    branch keeps the types of the variables live before it. Through the interpreter's rewrite of each kernel's source:
    the condition is evaluated once, before the ``if``, by a call that also notes what is live, and checked after."""
    transformer = getattr(interpreter, "ASTTransformer", None)
    helpers = getattr(interpreter, "_hard_way_helpers", None)  # helper calls under way (_calls_inside_launches)
    if transformer is None or helpers is None or not hasattr(interpreter, "_hard_way_gone"):
        return
    block, tuples = interpreter.tl.core.tensor, (tuple, getattr(interpreter.tl.core, "tuple", tuple))

    def maybe_constexpr(value):
        """Whether an argument the interpreter holds as a tensor may be a constexpr compiled: a launched kernel's int
        equal to 1 (Triton specializes it), any int a helper receives (its caller may have computed a constexpr)."""
        if isinstance(value, tuples):
            return any(maybe_constexpr(v) for v in value)
        if not isinstance(value, block) or value.type.is_block() or not value.dtype.is_int():
            return False  # a pointer, a block, a float: a tensor compiled too; a Python value: a constexpr both ways
        return helpers[0] > 0 or value.handle.data.reshape(-1)[0] == 1

    def opened(test, arguments, names, scope):
        # compiled, only a tensor condition makes a run-time if: a Python value picks its branch before the kernel runs
        dynamic = isinstance(test, block) and not any(maybe_constexpr(a) for a in arguments)
        before = _defined(names, scope) if dynamic else {}
        return _Branch(test, dynamic, before)

    def closed(branch, scope):
        if not branch.dynamic:
            return
        for name, value in branch.before.items():
            now = scope.get(name)
            if isinstance(value, block) and isinstance(now, block) and now.type != value.type:
                taken = "then" if branch.test else "else"
                raise AssertionError(
                    f"initial value for `{name}` is of type {_type_text(value)}, but the {taken} block redefines it as "
                    f"{_type_text(now)}"
                )

    arguments = []  # the parameters of the functions being rewritten, innermost last

    def visit_FunctionDef(self, node):
        spec = node.args
        names = [a.arg for a in (*spec.posonlyargs, *spec.args, *spec.kwonlyargs, spec.vararg, spec.kwarg) if a]
        arguments.append(set(names))
        try:
            self.generic_visit(node)
        finally:
            arguments.pop()
        return node

    count = [0]

    def visit_If(self, node):
        self.generic_visit(node)
        then, orelse = _stored(node.body), _stored(node.orelse)
        if not then | orelse:
            return node  # nothing assigned in it: nothing to check
        count[0] += 1
        keep = f"_hard_way_if_{count[0]}"
        read = sorted({n.id for n in ast.walk(node.test) if isinstance(n, ast.Name)} & (arguments or [set()])[-1])
        opening = ast.Assign(
            targets=[ast.Name(id=keep, ctx=ast.Store())],
            value=_call(
                "_hard_way_if_opened",
                node.test,
                ast.Tuple(elts=[ast.Name(id=n, ctx=ast.Load()) for n in read], ctx=ast.Load()),
                ast.Tuple(elts=[ast.Constant(n) for n in sorted(then | orelse)], ctx=ast.Load()),
                _call("locals"),
            ),
        )
        node.test = ast.Attribute(value=ast.Name(id=keep, ctx=ast.Load()), attr="test", ctx=ast.Load())
        closing = ast.Expr(_call("_hard_way_if_closed", ast.Name(id=keep, ctx=ast.Load()), _call("locals")))
        gone = [  # if _hard_way_if_N.gone("name"): name = _hard_way_gone("name", "if")
            ast.If(
                test=ast.Call(
                    func=ast.Attribute(value=ast.Name(id=keep, ctx=ast.Load()), attr="gone", ctx=ast.Load()),
                    args=[ast.Constant(n)],
                    keywords=[],
                ),
                body=[
                    ast.Assign(
                        [ast.Name(id=n, ctx=ast.Store())], _call("_hard_way_gone", *map(ast.Constant, (n, "if")))
                    )
                ],
                orelse=[],
            )
            for n in sorted(then ^ orelse)
        ]
        return [ast.fix_missing_locations(ast.copy_location(s, node)) for s in (opening, node, closing, *gone)]

    interpreter._hard_way_if_opened, interpreter._hard_way_if_closed = opened, closed
    transformer.visit_If, transformer.visit_FunctionDef = visit_If, visit_FunctionDef


class _Branch:
    """What a rewritten ``if`` knows of itself: its condition's value, whether compiled it is decided at run time, and
    the values of the names its branches assign that were live before it."""

    def __init__(self, test, dynamic, before):
        self.test, self.dynamic, self.before = test, dynamic, before

    def gone(self, name):
        """Whether ``name``, assigned in one branch only, is undefined after the ``if`` when compiled."""
        return self.dynamic and name not in self.before


def _defined(names, scope) -> dict:
    """Those of ``names`` defined in ``scope`` (a loop's or an if's, before it), with their values; a name gone after
    an inner loop or if is not defined."""
    return {name: scope[name] for name in names if name in scope and not isinstance(scope[name], _Gone)}


def _stored(statements) -> set[str]:
    """The names ``statements`` assign (not those of a comprehension or lambda: Python scopes them apart)."""
    found, todo = set(), list(statements)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.Lambda, ast.FunctionDef)):
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and not node.id.startswith("_hard_way_"):
            found.add(node.id)
        todo.extend(ast.iter_child_nodes(node))
    return found


def _type_text(value) -> str:
    """A tensor's type as the compiler's messages print it: ``int32[]``, ``fp32[constexpr[16]]``."""
    shape = ", ".join(f"constexpr[{getattr(s, 'value', s)}]" for s in value.shape)
    return f"{value.dtype}[{shape}]"


class _Gone:
    """What a name first assigned inside a loop (or in one branch of an ``if`` decided at run time) is after it:
    compiled, it is not defined there, and any use of it fails with the compiler's NameError (a stand-in, since Python
    cannot undefine a local at run time)."""

    _WHY = {
        "loop": "it is first assigned inside a loop, and compiled, a name assigned only in a loop's body does not "
        "exist after the loop (assign it before the loop to carry it out)",
        "if": "it is first assigned in one branch of an if on a run-time value, and compiled, such a name does not "
        "exist after the if (assign it before the if, or in both branches with one type)",
    }

    def __init__(self, name, where="loop"):
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_where", where)

    def _fail(self, *args, **kwargs):
        name, where = object.__getattribute__(self, "_name"), object.__getattribute__(self, "_where")
        raise NameError(f"{name} is not defined: {_Gone._WHY[where]}")

    def __repr__(self):  # for debuggers and tracebacks that show locals
        name, where = object.__getattribute__(self, "_name"), object.__getattribute__(self, "_where")
        return f"<{name}: not defined after its {where}, compiled>"

    # __str__ and __format__ too: Triton's "cannot convert {x} to tensor" formats it, where a store takes it
    __str__ = __format__ = __getattr__ = __setattr__ = __getitem__ = __setitem__ = __call__ = __iter__ = __len__ = _fail
    __bool__ = __index__ = __int__ = __float__ = __neg__ = __pos__ = __invert__ = __abs__ = _fail
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __rtruediv__ = _fail
    __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = __pow__ = __rpow__ = __matmul__ = __rmatmul__ = _fail
    __and__ = __rand__ = __or__ = __ror__ = __xor__ = __rxor__ = __lshift__ = __rlshift__ = _fail
    __rshift__ = __rrshift__ = __lt__ = __le__ = __gt__ = __ge__ = _fail


def _refused_global(fn, tree):
    """The first name ``fn``'s body reads from its module that the compiler refuses (a plain number, list or
    function: only constexprs, modules, @triton.jit functions, Triton's own objects and dtypes are allowed), or None.
    The compiler's rule (code_generator's global_lookup)."""
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


def _first_call(interpreter) -> None:
    """``break``, ``continue``, a global that is not a constexpr, a list comprehension and a list's methods, refused at
    a kernel's or helper's first launch or call with the compiler's error, its line shown (and at every launch until
    they are gone); a ``return`` of a value, at a launch (a helper called from a kernel may return one)."""
    from triton.compiler.errors import CompilationError, UnsupportedLanguageConstruct

    cls = getattr(interpreter, "InterpretedFunction", None)
    original, run = getattr(cls, "rewrite", None), getattr(cls, "run", None)
    if original is None or run is None:
        return
    launch_refusals = {}  # fn -> the error a launch of it gets (a helper may do it): `return <value>`, or None

    def refusal(fn):
        try:
            source = textwrap.dedent(inspect.getsource(fn))
            tree = ast.parse(source)
        except (OSError, TypeError, SyntaxError):  # no source to read: Triton's own handling decides
            return None
        returned = next((n for n in ast.walk(tree) if isinstance(n, ast.Return) and _a_value(n.value)), None)
        launch_refusals[fn] = returned and CompilationError(
            source,
            returned,
            f"'tt.return' op has 1 operands, but enclosing function ({fn.__name__}) returns 0: a kernel launched "
            f"with a grid returns no value (compiled: PassManager::run failed)",
        )
        for node in ast.walk(tree):
            if isinstance(node, (ast.Break, ast.Continue)):
                return UnsupportedLanguageConstruct(source, node, f"unsupported AST node type: {type(node).__name__}")
            if isinstance(node, ast.ListComp):  # compiled, [...] is a tuple of fixed length
                return UnsupportedLanguageConstruct(source, node, "only tuple comprehensions are supported")
            method = getattr(node, "func", None) if isinstance(node, ast.Call) else None
            if isinstance(method, ast.Attribute) and method.attr in ("append", "extend", "insert", "pop"):
                return CompilationError(
                    source, node, f"AttributeError(\"'tuple' object has no attribute '{method.attr}'\")"
                )
        node = _refused_global(fn, tree)
        if node is not None:
            return CompilationError(
                source,
                node,
                f"NameError('Cannot access global variable {node.id} from within @jit'ed function. Triton kernels "
                f"can only access global variables that are instantiated as constexpr (`x = "
                f"triton.language.constexpr(42)`).')",
            )
        return None

    def rewrite(self):
        if self.fn not in launch_refusals:
            error = refusal(self.fn)
            if error is not None:
                launch_refusals.pop(self.fn, None)  # checked again at the next call, until it is gone
                raise error
            launch_refusals.setdefault(self.fn, None)
        return original(self)

    def launched(self, *args, grid, warmup, **kwargs):
        self.rewrite()
        if not warmup and launch_refusals.get(self.fn) is not None:
            raise launch_refusals[self.fn]
        return run(self, *args, grid=grid, warmup=warmup, **kwargs)

    cls.rewrite, cls.run = rewrite, launched


def _a_value(node) -> bool:
    """Whether a ``return``'s expression gives a value (not a bare ``return``, nor ``return None``)."""
    return node is not None and not (isinstance(node, ast.Constant) and node.value is None)


def _dot_sizes(interpreter) -> None:
    """``tl.dot``'s smallest tiles as NVIDIA's backend asks for them (the interpreter's smallest is 1 x 1 x 1)."""
    fns = getattr(getattr(interpreter, "interpreter_builder", None), "codegen_fns", None)
    if not isinstance(fns, dict) or "min_dot_size" not in fns:
        return

    def min_dot_size(lhs_type, rhs_type):
        return (1, 1, 32) if lhs_type.scalar.primitive_bitwidth == 8 else (1, 1, 16)

    fns["min_dot_size"] = min_dot_size
