"""utils.crashes: each mistake it explains, made in a real kernel or launch (tests/crash_kernels.py), gets its hint
from the exception Triton raises, where the tests run (the interpreter, or compiled on a GPU) and compiled for an
H100 through utils.offline (the compiler's messages differ from the interpreter's, and some mistakes fail only
there)."""

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import triton

from tests import crash_kernels as K
from utils import crashes, offline
from utils.mode import current

ENV = current()
N = 100

# kernel, constexprs (None: BLOCK_SIZE is an ordinary argument of 32), words its hint must hold, where it fails:
# "both" under the interpreter and compiled, "compiled" only compiled (the interpreter runs it as Python)
BODY = {
    "block not a power of two": ("copy_kernel", dict(BLOCK_SIZE=30), "next_power_of_2", "both"),
    "block size an ordinary argument": ("block_not_constexpr_kernel", None, "BLOCK_SIZE: tl.constexpr", "both"),
    "tl.zeros of an ordinary argument": ("zeros_not_constexpr_kernel", None, "BLOCK_SIZE: tl.constexpr", "both"),
    "offsets loaded without the pointer": ("offsets_without_pointer_kernel", {}, "tl.load(x_ptr + offsets", "both"),
    "values loaded as pointers": ("values_for_pointers_kernel", {}, "given values, not pointers", "both"),
    "two block sizes added": ("two_block_sizes_kernel", {}, "32 and 16 elements along dimension 0", "both"),
    "a 2-D block through 1-D pointers": ("store_rank_kernel", {}, "with the shape of the values", "both"),
    "a mask with one pointer": ("mask_one_pointer_kernel", {}, "add the offsets to the pointer", "both"),
    "a block stored through one pointer": ("store_one_pointer_kernel", {}, "tl.store(out_ptr + offsets", "both"),
    "torch inside the kernel": ("torch_inside_kernel", {}, "`torch`, which does not exist inside", "both"),
    "a block too large": ("copy_kernel", dict(BLOCK_SIZE=2**21), "A block of 2097152 elements", "both"),
    "tl.dot of fp32 and fp16": ("dot_of_two_dtypes_kernel", dict(BLOCK_SIZE=16), "one is fp32, the other fp16", "both"),
    "tl.dot of tiles that do not fit": ("dot_of_misfit_tiles_kernel", dict(BLOCK_SIZE=16), "a's columns", "both"),
    "tl.max(x, dim=1)": ("reduction_with_dim_kernel", dict(BLOCK_SIZE=16), "not PyTorch's `dim=`", "both"),
    "x.float()": ("torch_method_kernel", {}, "has no `.float()`", "both"),
    "tl.sum over axis 2 of a tile": ("reduction_axis_kernel", dict(BLOCK_SIZE=16), "A reduction over axis 2", "both"),
    "x[0]": ("indexed_block_kernel", {}, "cannot be indexed by position", "both"),
    "Python's max of a block": ("python_max_kernel", {}, "`tl.max(x,", "both"),
    "tl.dot on 8 x 8 tiles": ("small_dot_kernel", dict(BLOCK_SIZE=8), "BLOCK_K >= 16", "both"),
    "a Python if on a block": ("if_on_block_kernel", {}, "tl.where(cond, a, b)", "both"),
    "break in a loop": ("break_kernel", {}, "Triton kernels have no `break`", "both"),
    "a loop variable made fp16": ("loop_type_kernel", {}, "`acc` starts as", "both"),
    "an accumulator started as 0.0": ("accumulator_from_a_number_kernel", {}, "`acc` starts as fp32", "both"),
    # a tl function's missing argument (not the launch's, though it fails inside one)
    "tl.where(cond, x)": ("where_two_args_kernel", {}, "given no 'y'", "both"),
    "tl.argmax without its axis": ("argmax_no_axis_kernel", {}, "given no 'axis'", "both"),
    "a mask of numbers": ("int_mask_kernel", {}, "a block of True/False", "both"),
    "tl.exp of fp16": ("exp_of_fp16_kernel", {}, "were given fp16: cast first", "both"),
    "tl.store(..., other=0.0)": ("store_other_kernel", {}, "passes `other=`", "both"),
    "tl.dot of 1-D blocks": ("dot_1d_kernel", dict(BLOCK_SIZE=16), "multiplies 2-D tiles", "both"),
    "tl.dot into a 1-D accumulator": ("dot_acc_shape_kernel", dict(BLOCK_SIZE=16), "the product's shape", "both"),
    "tl.dot into an fp16 accumulator": ("dot_acc_fp16_kernel", dict(BLOCK_SIZE=16), "out_dtype", "both"),
    "tl.zeros(BLOCK_SIZE)": ("zeros_int_shape_kernel", {}, "`tl.zeros((BLOCK_SIZE,)", "both"),
    "a list appended to": ("list_append_kernel", {}, "A kernel has no Python lists", "both"),
    "a kernel that returns a value": (
        "return_value_kernel",
        {},
        "A kernel launched with a grid returns nothing",
        "both",
    ),
    "a list comprehension": ("list_comprehension_kernel", {}, "A kernel has no Python lists", "both"),
    "a name used after the loop that assigned it": ("loop_local_after_kernel", {}, "assign it before the loop", "both"),
    "a name used after the if that assigned it": ("if_local_after_kernel", {}, "one branch of an `if`", "both"),
    "a branch changes a variable's type": ("branch_type_kernel", {}, "`acc` is int32[] before an `if`", "both"),
    "two branches give a name two types": ("branches_two_types_kernel", {}, "keeps one type", "compiled"),
    "a global float": ("global_not_constexpr_kernel", {}, "`SCALE = tl.constexpr(...)`", "both"),
    "tl.atomic_add at offsets": ("atomic_add_values_kernel", {}, "`tl.atomic_add(out_ptr + offsets", "both"),
    "desc.load(offsets)": ("tensor_desc_load_block_kernel", {}, "not a block of offsets", "both"),
    "tl.load(desc + offsets)": ("tensor_desc_tl_load_kernel", {}, "A tensor descriptor is not a pointer", "both"),
    "a descriptor with strides [1, n]": ("tensor_desc_strides_kernel", dict(BLOCK_SIZE=16), "the 1 last", "both"),
    "len() of a block": ("len_of_block_kernel", {}, "A block has no `len()`", "both"),
    "x_ptr[offsets]": ("pointer_indexed_kernel", {}, "write `x_ptr + offsets`", "both"),
    "x ** 2": ("pow_block_kernel", {}, "Triton blocks have no `**`", "both"),
    "tl.float32(x)": ("dtype_called_kernel", {}, "cast with `x.to(tl.float32)`", "both"),
    "tl.program_id(3)": ("pid_axis_3_kernel", {}, "three axes at most", "both"),
    "x >> 4 of floats": ("shift_float_kernel", {}, "bit operations", "both"),
    "range(0, n / BLOCK_SIZE)": ("float_range_kernel", {}, "A `range()` bound is a float", "both"),
    "a tl.static_assert refused": ("static_assert_fails_kernel", {}, "own `tl.static_assert`", "both"),
}


def _launch(name, constexprs):
    x = torch.randn(64 * 64, device=ENV.device)
    out = torch.empty_like(x)
    kernel = getattr(K, name)
    if constexprs is None:
        kernel[(1,)](x, out, N, 32)
    else:
        kernel[(1,)](x, out, N, **{"BLOCK_SIZE": 32, **constexprs})


@pytest.mark.parametrize("mistake", BODY)
def test_a_mistake_in_a_kernel_is_explained_where_it_runs(mistake):
    name, constexprs, words, where = BODY[mistake]
    if where == "compiled" and ENV.interpret:
        pytest.skip("the interpreter runs it as Python: test_a_mistake_compiled_for_an_h100_is_explained")
    with pytest.raises(Exception) as caught:
        _launch(name, constexprs)
    hint = crashes.explain(caught.value)
    assert hint is not None and words in hint, f"{type(caught.value).__name__}: {caught.value}\n-> {hint}"


@pytest.mark.slow
@pytest.mark.skipif(not offline.available(), reason="needs Triton's NVIDIA backend and its ptxas")
def test_a_mistake_compiled_for_an_h100_is_explained():
    """The compiler's messages (a CompilationError that shows the kernel's line), each explained; the mistakes the
    interpreter lets through are refused here, as they will be on a learner's GPU."""
    jobs = []
    for name, constexprs, _, _ in BODY.values():
        ints = dict(n=N) if constexprs is not None else dict(n=N, BLOCK_SIZE=32)
        jobs.append(
            offline.job(
                name,
                pointers=dict(x_ptr="fp32", out_ptr="fp32"),
                ints=ints,
                constexprs={} if constexprs is None else {"BLOCK_SIZE": 32, **constexprs},
            )
        )
    results = offline.compile_kernels(Path(K.__file__), jobs, raise_errors=False)
    wrong = []
    for (mistake, (_, _, words, _)), result in zip(BODY.items(), results):
        hint = crashes.explain(result.error) if result.error else None
        if hint is None or words not in hint:
            wrong.append(f"{mistake}: {result.error!r}\n-> {hint}")
    assert not wrong, "\n\n".join(wrong)


def _plain_function(x_ptr, out_ptr, n, BLOCK_SIZE):
    """A kernel without @triton.jit."""


def _launches():
    x = torch.randn(N, device=ENV.device)
    out = torch.empty_like(x)
    launches = {
        "grid without its comma": (
            lambda: K.copy_kernel[(triton.cdiv(N, 32))](x, out, N, BLOCK_SIZE=32),
            "The comma makes the tuple",
        ),
        "a grid function returning a number": (
            lambda: K.copy_kernel[lambda meta: triton.cdiv(N, meta["BLOCK_SIZE"])](x, out, N, BLOCK_SIZE=32),
            "The comma makes the tuple",
        ),
        "a grid of n / BLOCK_SIZE": (
            lambda: K.copy_kernel[(N / 32,)](x, out, N, BLOCK_SIZE=32),
            "triton.cdiv(n, BLOCK_SIZE)",
        ),
        "a kernel without @triton.jit": (lambda: _plain_function[(1,)](x, out, N, 32), "needs `@triton.jit`"),
        "a kernel called without a grid": (lambda: K.copy_kernel(x, out, N, BLOCK_SIZE=32), "Launch it with a grid"),
        "a launch without BLOCK_SIZE": (lambda: K.copy_kernel[(4,)](x, out, N), "'BLOCK_SIZE'"),
        "BLOCK_SIZE given twice": (
            lambda: K.copy_kernel[(4,)](x, out, N, 32, BLOCK_SIZE=32),
            "more values than the kernel has parameters",
        ),
        "one argument too many": (
            lambda: K.copy_kernel[(4,)](x, out, N, 32, 4),
            "more values than the kernel has parameters",
        ),
    }
    if ENV.interpret:  # compiled, the launch's own handling of a torch dtype is to be seen on a GPU
        launches["a torch dtype for a tl one"] = (
            lambda: K.dtype_constexpr_kernel[(1,)](x, out, N, BLOCK_SIZE=32, DTYPE=torch.float16),
            "Pass the Triton dtype",
        )
    if ENV.interpret:  # compiled, a list may be taken as a tuple argument (Triton takes tuples)
        launches["a list for a tensor"] = (
            lambda: K.copy_kernel[(4,)]([1.0] * N, out, N, BLOCK_SIZE=32),
            "is a Python list",
        )
    if not ENV.interpret:  # under the interpreter every tensor is the CPU's
        launches["a CPU tensor"] = (
            lambda: K.copy_kernel[(4,)](x.cpu(), out, N, BLOCK_SIZE=32),
            "argument 0 (counting from 0) is a tensor in the CPU's memory",
        )
    return launches


@pytest.mark.parametrize("mistake", list(_launches()))
def test_a_mistake_in_a_launch_is_explained(mistake):
    launch, words = _launches()[mistake]
    with pytest.raises(Exception) as caught:
        launch()
    hint = crashes.explain(caught.value)
    assert hint is not None and words in hint, f"{type(caught.value).__name__}: {caught.value}\n-> {hint}"


@pytest.mark.skipif(not ENV.interpret, reason="compiled, a float argument is a scalar of the kernel, with .to()")
def test_a_method_of_a_float_argument_under_the_interpreter_is_explained():
    """(session 52) Interpreted, a float argument arrives as a Python float: scale.to(tl.float32) fails with
    "'float' object has no attribute 'to'" (no explanation before), where the GPU runs it."""
    x = torch.randn(32, device=ENV.device)
    with pytest.raises(Exception) as caught:
        K.number_method_kernel[(1,)](x, torch.empty_like(x), 2.5, BLOCK_SIZE=32)
    hint = crashes.explain(caught.value)
    assert hint is not None and "a plain Python float" in hint and "tl.cast(" in hint, f"{caught.value!r} -> {hint}"
    assert crashes.explain(AttributeError("'float' object has no attribute 'to'")) is None  # outside a kernel: no


def test_tiles_too_large_for_shared_memory_are_explained():
    """Triton's own exception, as its autotuner and launch raise it (made here: a CPU cannot run out)."""
    from triton.runtime.errors import OutOfResources

    hint = crashes.explain(OutOfResources(262144, 232448, "shared memory"))
    assert hint is not None and "262144 bytes of shared memory" in hint and "num_stages" in hint


def test_an_illegal_memory_access_is_explained():
    """PyTorch's report of the CUDA error a kernel that strays causes (its next CUDA call raises it; made here)."""
    error = RuntimeError(
        "CUDA error: an illegal memory access was encountered\nCUDA kernel errors might be asynchronously reported at "
        "some other API call, so the stacktrace below might be incorrect."
    )
    hint = crashes.explain(error)
    assert hint is not None and "restart the notebook's kernel" in hint and "utils.watch_memory" in hint


def test_a_launcher_called_with_an_argument_it_lacks_is_not_told_about_kernels():
    """A learner's launcher without the check's out= raises Python's own TypeError: no rule about a call inside a
    kernel may claim it."""

    def add(x, y):
        return x + y

    for call in (lambda: add(1, 2, out=3), lambda: add(1)):
        with pytest.raises(TypeError) as caught:
            call()
        assert crashes.explain(caught.value) is None, crashes.explain(caught.value)


def test_the_same_words_outside_a_launch_are_not_explained():
    """A launch's rules need Triton's runtime in the traceback: len() of a number elsewhere is another mistake."""
    with pytest.raises(TypeError) as caught:
        len(3)
    assert "has no len()" in str(caught.value) and crashes.explain(caught.value) is None
    assert crashes.explain(ValueError("something else entirely")) is None
    assert crashes.explain(None) is None


def test_the_hint_is_printed_under_a_failing_cell(capsys):
    """watch_cells registers on IPython's post_run_cell: under an error a rule knows, the hint; else nothing."""
    handlers = {}
    ipython = SimpleNamespace(events=SimpleNamespace(register=lambda event, fn: handlers.setdefault(event, fn)))
    crashes.watch_cells(ipython)
    crashes.watch_cells(ipython)  # registered once
    with pytest.raises(Exception) as caught:
        _launch("offsets_without_pointer_kernel", {})
    for error, printed in ((None, False), (ValueError("wrong"), False), (caught.value, True)):
        handlers["post_run_cell"](SimpleNamespace(error_in_exec=error, error_before_exec=None))
        out = capsys.readouterr().out
        assert ("Probably: `tl.load` was given a block of integers" in out) == printed, out


def test_a_real_ipython_shell_prints_the_hint():
    """In an IPython shell (a fresh process: a shell changes the interpreter's hooks for good), utils.setup()
    registers the hint; a cell whose launch has no comma in its grid prints it under the traceback."""
    from utils.debugging import run_python

    status, output = run_python(
        """
        from IPython.core.interactiveshell import InteractiveShell

        shell = InteractiveShell.instance()
        shell.run_cell("import utils; env = utils.setup(quiet=True)")
        result = shell.run_cell(
            "import torch, triton\\n"
            "from tests import crash_kernels as K\\n"
            "x = torch.randn(100, device=env.device)\\n"
            "K.copy_kernel[(triton.cdiv(100, 32))](x, x, 100, BLOCK_SIZE=32)\\n"
        )
        print("raised", type(result.error_in_exec).__name__)
        """
    )
    assert status == 0, output
    assert "raised TypeError" in output and "Probably: The grid is a single number, not a tuple" in output, output
