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
