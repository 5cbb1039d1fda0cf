"""utils.launch: a launch prepared once and repeated without Triton's per-call work. It must launch what Triton's
own launch would, decline tensors the kernel was not compiled for (another dtype, another 16-byte alignment), keep
no tensor alive, and find an autotuner's pick under the autotuner's own key. Under the interpreter there is nothing
compiled to prepare."""

import gc
import weakref

import pytest
import torch
import triton
import triton.language as tl

from utils import launch, setup

ENV = setup(quiet=True)


@triton.jit
def _scale(x_ptr, out_ptr, n, factor, BLOCK_SIZE: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * factor, mask=offs < n)


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, factor, BLOCK_SIZE: tl.constexpr):
    _scale(x_ptr, out_ptr, n, factor, BLOCK_SIZE)


@triton.autotune(configs=[triton.Config({"BLOCK_SIZE": 64}), triton.Config({"BLOCK_SIZE": 128})], key=["n"])
@triton.jit
def scale_tuned_kernel(x_ptr, out_ptr, n, factor, BLOCK_SIZE: tl.constexpr):
    _scale(x_ptr, out_ptr, n, factor, BLOCK_SIZE)


def _grid(n):
    return lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)


def test_autotune_key_is_the_key_the_autotuner_files_its_pick_under(monkeypatch):
    kernel = scale_tuned_kernel
    monkeypatch.setattr(kernel, "cache", {})
    monkeypatch.setattr(kernel, "_bench", lambda *args, config, **meta: [float(config.kwargs["BLOCK_SIZE"])] * 3)
    n = 300
    x = torch.randn(n, device=ENV.device)
    out = torch.empty_like(x)
    assert launch.prepare(kernel, _grid(n), x, out, n, 2.0) is None, "no Prepared before the autotuner has picked"
    kernel[_grid(n)](x, out, n, 2.0)
    assert list(kernel.cache) == [launch.autotune_key(kernel, (x, out, n, 2.0), {})]
    prepared = launch.prepare(kernel, _grid(n), x, out, n, 2.0)
    if ENV.interpret:
        assert prepared is None, "under the interpreter nothing is compiled: no Prepared"
        return
    assert prepared.grid == (triton.cdiv(n, 64), 1, 1), "the grid of the autotuner's pick (64, timed fastest)"
    y, out2 = torch.randn(n, device=ENV.device), torch.full((n,), float("nan"), device=ENV.device)
    assert prepared(y, out2)
    assert torch.equal(out2, y * 2.0)


@pytest.mark.skipif(ENV.interpret, reason="under the interpreter nothing is compiled to prepare")
def test_a_prepared_launch_runs_the_kernel_and_declines_what_it_was_not_compiled_for():
    n, BLOCK_SIZE = 1000, 256
    x = torch.randn(n, device=ENV.device)
    out = torch.empty_like(x)
    prepared = launch.prepare(scale_kernel, (triton.cdiv(n, BLOCK_SIZE),), x, out, n, 3.0, BLOCK_SIZE=BLOCK_SIZE)
    seen = weakref.ref(x)
    del x, out
    gc.collect()
    assert seen() is None, "a Prepared must keep no tensor of the call it was made from"
    y = torch.randn(n, device=ENV.device)
    got = torch.full((n,), float("nan"), device=ENV.device)
    assert prepared(y, got) is True
    assert torch.equal(got, y * 3.0), "a prepared launch must compute what the kernel computes"
    untouched = torch.full((n,), float("nan"), device=ENV.device)
    off = torch.randn(n + 1, device=ENV.device)[1:]  # 4 bytes past a 16-byte boundary
    assert prepared(off, untouched) is False, "compiled for 16-byte-aligned pointers: an unaligned one is declined"
    assert prepared(y.double(), untouched) is False, "another dtype is another kernel: declined"
    assert untouched.isnan().all(), "a declined launch must launch nothing"
    with pytest.raises(TypeError, match="2 tensors"):
        prepared(y)


def test_a_signature_describes_tensors_without_their_address():
    make = lambda n, offset=0: torch.zeros(n + offset, device=ENV.device)[offset:]  # noqa: E731
    x, y = make(64), make(64)
    assert launch.signature(x, 3, "gelu") == launch.signature(y, 3, "gelu"), "same kind, other address: one key"
    for what, other in {
        "4 bytes off a 16-byte boundary": make(64, offset=1),
        "another length": make(65),
        "another dtype": make(64).double(),
        "another stride": make(128)[::2],
    }.items():
        assert launch.signature(other, 3, "gelu") != launch.signature(x, 3, "gelu"), f"{what}: another key"
    assert launch.signature(x, 3, "silu") != launch.signature(x, 3, "gelu"), "every other argument is part of it"
    assert launch.signature(x, ["gelu"]) is None, "an unhashable argument: no key (the launcher's full path runs)"
    # (session 37) a tensor autograd would record takes the full path, whose utils.require refuses it: a launch
    # prepared under torch.no_grad() must not run it on a later call's fast path
    w = make(64).requires_grad_()
    with torch.no_grad():
        quiet = launch.signature(w, 3, "gelu")
    assert quiet == launch.signature(x, 3, "gelu"), "not recording: the same key as a tensor without grad"
    assert launch.signature(w, 3, "gelu") != quiet, "recording: another key"
    assert launch.signature(x._neg_view(), 3, "gelu") != launch.signature(x, 3, "gelu"), "a negated view: another key"


def test_a_table_keeps_what_was_prepared_and_starts_again_when_full():
    table = launch.Table(limit=2)
    table.keep(("a",), lambda: None)
    assert len(table) == 0, "nothing prepared (the interpreter, an autotuner yet to pick): nothing kept"
    table.keep(None, lambda: "never called")
    assert len(table) == 0 and table.get(None) is None, "a call without a signature is never kept nor found"
    for key in ("a", "b"):
        table.keep((key,), lambda k=key: f"launch {k}")
    assert table.get(("a",)) == "launch a" and len(table) == 2
    table.keep(("c",), lambda: "launch c")
    assert len(table) == 1 and table.get(("a",)) is None and table.get(("c",)) == "launch c", "full: it starts again"


@triton.jit
def copy_kernel(desc, out_ptr, BLOCK: tl.constexpr):
    tl.store(out_ptr + tl.arange(0, BLOCK), desc.load([0]))


@triton.autotune(
    configs=[triton.Config({"BLOCK": b}, pre_hook=launch.block_shapes(desc=("BLOCK",))) for b in (32, 64)], key=["n"]
)
@triton.jit
def copy_blocks_kernel(desc, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, desc.load([tl.program_id(0) * BLOCK]), mask=offs < n)


def test_block_shapes_gives_each_descriptor_the_block_of_the_configuration():
    from triton.tools.tensor_descriptor import TensorDescriptor

    x = torch.zeros(64)
    nargs = {"desc": TensorDescriptor.from_tensor(x, [1]), "out_ptr": x, "BLOCK": 32}
    launch.block_shapes(desc=("BLOCK",), out_ptr=("BLOCK",))(nargs)
    assert nargs["desc"].block_shape == [32], "a descriptor gets its configuration's block shape"
    assert nargs["out_ptr"] is x, "an argument that is not a descriptor is left alone"


@pytest.mark.skipif(not ENV.supports_tma, reason="a host-built tensor descriptor needs a GPU with TMA")
def test_a_prepared_launch_builds_each_descriptor_around_the_tensor_it_is_given(monkeypatch):
    from triton.tools.tensor_descriptor import TensorDescriptor

    n = 256
    kernel = copy_blocks_kernel
    monkeypatch.setattr(kernel, "cache", {})
    monkeypatch.setattr(kernel, "_bench", lambda *args, config, **meta: [float(config.kwargs["BLOCK"])] * 3)
    x = torch.randn(n, device=ENV.device)
    out = torch.full_like(x, float("nan"))
    grid = lambda meta: (triton.cdiv(n, meta["BLOCK"]),)  # noqa: E731
    kernel[grid](TensorDescriptor.from_tensor(x, [1]), out, n)  # the pre_hook sets the block: 32, timed fastest
    assert torch.equal(out, x)
    prepared = launch.prepare(kernel, grid, TensorDescriptor.from_tensor(x, [1]), out, n)
    seen = weakref.ref(x)
    del x, out
    gc.collect()
    assert seen() is None, "a Prepared must keep no tensor, not even one inside a descriptor"
    assert prepared.grid == (n // 32, 1, 1)
    y, got = torch.randn(n, device=ENV.device), torch.full((n,), float("nan"), device=ENV.device)
    assert prepared(y, got) is True
    assert torch.equal(got, y), "the descriptor must be the new tensor's: a kept address would copy the first x"
    untouched = torch.full((2 * n,), float("nan"), device=ENV.device)
    assert prepared(torch.randn(2 * n, device=ENV.device), untouched[:n]) is False, "another shape: declined"
    assert prepared(y.half(), untouched[:n]) is False, "another dtype: declined"
    assert untouched.isnan().all(), "a declined launch must launch nothing"


def test_prepare_declines_an_autotuner_whose_pre_hook_does_more_than_set_block_shapes(monkeypatch):
    kernel = scale_hooked_kernel
    monkeypatch.setattr(kernel, "cache", {})
    n = 64
    x = torch.randn(n, device=ENV.device)
    out = torch.empty_like(x)
    kernel[_grid(n)](x, out, n, 2.0)
    assert launch.prepare(kernel, _grid(n), x, out, n, 2.0) is None, (
        "a pre_hook may write an output at every launch: only Triton's own launch may run it"
    )


@triton.autotune(configs=[triton.Config({"BLOCK_SIZE": 64}, pre_hook=lambda nargs: nargs["out_ptr"].zero_())],
                 key=["n"])  # fmt: skip
@triton.jit
def scale_hooked_kernel(x_ptr, out_ptr, n, factor, BLOCK_SIZE: tl.constexpr):
    _scale(x_ptr, out_ptr, n, factor, BLOCK_SIZE)


def test_a_signature_tells_a_value_from_an_equal_value_of_another_type():
    """16.0 == 16 and True == 1 in Python, but a launcher's checks may refuse the float or the bool: a call with
    one must not find the launch prepared for the other."""
    assert launch.signature(16.0) != launch.signature(16) and launch.signature(True) != launch.signature(1)


def test_same_kind_is_a_copy_at_another_address_with_the_same_signature():
    buffer = torch.randn(6, 10, device=ENV.device)
    view = buffer[:, 4:8]  # a view 16 bytes in: strides of the buffer, not of a (6, 4) tensor
    copy = launch.same_kind(view)
    assert torch.equal(copy, view) and copy.data_ptr() != view.data_ptr()
    assert launch.signature(copy) == launch.signature(view), "a view's layout, on a 16-byte boundary as the view"


FORWARD_ONLY = ("softmax", "matmul", "attention", "rmsnorm", "rope", "swiglu", "cumsum")


def _forward_only_calls() -> dict:
    """Launcher's name: (the input that requires grad, a call of it with that input, its value) for forward-only
    launchers of lessons 04-07 and 10, each with a prepared fast path on a GPU."""
    from lessons import l04_fused_softmax as L04
    from lessons import l05_matmul as L05
    from lessons import l06_flash_attention as L06
    from lessons import l07_llm_layer as L07
    from lessons import l10_sort_scan_data as L10

    d = ENV.device
    x, w = torch.randn(5, 48, device=d), torch.ones(48, device=d)
    q = torch.randn(1, 2, 24, 16, device=d)
    cos, sin = L07.rope_tables(6, 8, device=d)
    k = torch.randn(1, 6, 1, 8, device=d)
    return {
        "softmax": ("x", lambda t: L04.softmax(t), x),
        "matmul": ("b", lambda t: L05.matmul(x, t), torch.randn(48, 16, device=d)),
        "attention": ("k", lambda t: L06.attention(q, t, q.clone()), q.clone()),
        "rmsnorm": ("weight", lambda t: L07.rmsnorm(x, t), w),
        "rope": ("q", lambda t: L07.rope(t, k, cos, sin)[0], torch.randn(1, 6, 2, 8, device=d)),
        "swiglu": ("gate_up", lambda t: L07.swiglu(t), x),
        "cumsum": ("x", lambda t: L10.cumsum(t), x[0].clone()),
    }


@pytest.mark.parametrize("name", FORWARD_ONLY)
def test_a_forward_only_launcher_refuses_an_input_autograd_records_even_after_a_prepared_call(name):
    """(session 37) A launcher without a backward pass returns an output with no graph: an input that requires grad
    would get no gradient through it (in a graph with another path, a gradient short by this one, without a word).
    Refused by name while autograd records, also on the call after one made under torch.no_grad(), whose launch a
    GPU keeps prepared for the same tensors (the fast path skips the checks); under no_grad it runs and is right."""
    calls = _forward_only_calls()
    assert set(calls) == set(FORWARD_ONLY), "every call is a parameter of this test"
    arg, call, value = calls[name]
    t = value.clone().requires_grad_()
    with torch.no_grad():
        quiet = call(t)
        again = call(t)  # a GPU's second call takes the prepared launch
    torch.testing.assert_close(again, quiet, msg=f"{name}: the prepared call differs from the first")
    assert not quiet.requires_grad
    with pytest.raises(ValueError, match=rf"^{arg} requires grad, but this launcher has no backward pass"):
        call(t)
    torch.testing.assert_close(call(t.detach()), quiet, msg=f"{name}: a detached input gives another result")
