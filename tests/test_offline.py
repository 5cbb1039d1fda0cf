"""utils.offline: kernels compiled for an H100 (sm_90) on a machine without a GPU, and what ptxas says of them."""

import pytest

import lessons.l04_fused_softmax as L04
from utils import offline

pytestmark = pytest.mark.skipif(not offline.available(), reason="needs Triton's NVIDIA backend and its ptxas")


def softmax_job(BLOCK_SIZE, **ints):
    return offline.job(
        "softmax_kernel",
        pointers=dict(x_ptr="fp16", out_ptr="fp16"),
        ints=dict(M=4096, N=BLOCK_SIZE, stride_xm=BLOCK_SIZE, stride_om=BLOCK_SIZE, **ints),
        constexprs=dict(BLOCK_SIZE=BLOCK_SIZE),
        num_warps=4,
    )


def test_registers_grow_with_the_block_until_they_spill():
    """Lesson 09's table: a one-block softmax row at 4 warps fits in registers at 1024, spills at 32768."""
    small, large = offline.compile_kernels(L04.__file__, [softmax_job(1024), softmax_job(32768)])
    assert small.spill_bytes == 0 and 0 < small.registers < large.registers
    assert large.spill_bytes > 0 and "ld.global" in small.ptx


def test_a_missing_or_unknown_argument_is_named():
    job = softmax_job(1024)
    del job["ints"]["stride_om"]
    job["ints"]["stride"] = 7
    with pytest.raises(RuntimeError, match=r"no value for \['stride_om'\], unknown names \['stride'\]"):
        offline.compile_kernels(L04.__file__, [job])
