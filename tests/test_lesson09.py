"""Lesson 09's solutions (split-K, the bitwise test, the row-scale fix, config pruning, flushed fp16 accumulation), each
check against planted mistakes (it must fail, with the specific hint), the launchers' refusals and empty inputs, and
the debugging tools (memory check under the interpreter, device asserts, subprocess runner, Inductor's log filter).
"""

import re

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

import utils
from lessons import l09_test_debug_tune as L
from utils.mode import current
from utils.mutants import plant

ENV = current()
DEVICE = ENV.device
interpreter_only = pytest.mark.skipif(not ENV.interpret, reason="watches Triton's interpreter")


# -- exercise 1: split-K -----------------------------------------------------------------------------------------


def test_splitk_solution_passes_its_check():
    L.check_matmul_splitk(L.matmul_splitk, quiet=True)


@triton.jit
def _splitk_every_slice_from_zero(
    a_ptr, b_ptr, part_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_ps, stride_pm, stride_pn,
    K_PER_SPLIT, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, OVERLAP: tl.constexpr,
):  # fmt: skip
    """The classic mistakes: every slice starts at 0 (OVERLAP False), or every slice runs on to K (OVERLAP True)."""
    pid = tl.program_id(0)
    pid_m = pid // tl.cdiv(N, BLOCK_N)
    pid_n = pid % tl.cdiv(N, BLOCK_N)
    s = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    if OVERLAP:
        k_start = s * K_PER_SPLIT
        k_end = K
    else:
        k_start = 0
        k_end = tl.minimum(K, K_PER_SPLIT)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(k_start, k_end, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        a = tl.load(
            a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak,
            mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_end),
            other=0.0,
        )
        b = tl.load(
            b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn,
            mask=(offs_k[:, None] < k_end) & (offs_n[None, :] < N),
            other=0.0,
        )
        acc = tl.dot(a, b, acc)
    p_ptrs = part_ptr + s * stride_ps + offs_m[:, None] * stride_pm + offs_n[None, :] * stride_pn
    tl.store(p_ptrs, acc, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


@pytest.mark.parametrize(
    "overlap, hint", [(False, "every slice summed the first K_PER_SPLIT terms"), (True, "the slices overlap")]
)
def test_splitk_check_names_the_classic_mistakes(monkeypatch, overlap, hint):
    class Planted:  # the launcher calls matmul_splitk_kernel[grid](...): give it the planted kernel
        def __getitem__(self, grid):
            return lambda *args, **kw: _splitk_every_slice_from_zero[grid](*args, **kw, OVERLAP=overlap)

    monkeypatch.setattr(L, "matmul_splitk_kernel", Planted())
    with pytest.raises(AssertionError, match=hint):
        L.check_matmul_splitk(L.matmul_splitk, quiet=True)


def test_splitk_check_demands_bits_on_exact_inputs():
    """A kernel close enough for a tolerance but one ulp off on exact inputs must fail the check."""

    def one_ulp_off(a, b, *, out=None, SPLIT_K=2):
        c = L.matmul_splitk(a, b, out=out, SPLIT_K=SPLIT_K)
        if c.dtype == torch.float16:
            c[0, 0] = torch.nextafter(c[0, 0], torch.tensor(float("inf"), device=c.device, dtype=torch.float16))
        return c

    with pytest.raises(AssertionError, match=r"not bit-identical: 1 of .*largest distance 1 ulp"):
        L.check_matmul_splitk(one_ulp_off, quiet=True)


def test_splitk_check_compares_with_the_exact_product_not_a_half_precision_matmul(monkeypatch):
    """The checks compare with the fp64 product: on a GPU, `a @ b` of fp16 tensors is cuBLAS's fp16 matmul, which
    may add partial sums in fp16, so it is no exact reference for a bitwise test."""
    calls = []

    def recording_ref(a, b, *rest):
        calls.append(a.dtype)
        return a @ b

    monkeypatch.setattr(L, "matmul_ref", recording_ref)
    L.check_matmul_splitk(L.matmul_splitk, quiet=True)
    L.check_matmul_flushed(L.matmul_flushed, quiet=True)
    assert calls and set(calls) == {torch.float64}, calls


def test_splitk_equals_one_slice_bit_for_bit_on_exact_inputs_only():
    a, b = L.exact_matmul_inputs(20, 17, 100, torch.float16, device=DEVICE)
    one, four = L.matmul_splitk(a, b, SPLIT_K=1), L.matmul_splitk(a, b, SPLIT_K=4)
    L.assert_bitwise_equal(one, four, name="SPLIT_K 1 vs 4, exact inputs")
    x, y = torch.randn(20, 300, device=DEVICE), torch.randn(300, 17, device=DEVICE)
    assert not L.bitwise_equal(L.matmul_splitk(x, y, SPLIT_K=1), L.matmul_splitk(x, y, SPLIT_K=4))


# -- exercise 2: the bitwise test --------------------------------------------------------------------------------


def test_bitwise_config_test_solution_passes_its_check():
    L.check_bitwise_config_test(L.bitwise_config_test, quiet=True)


def test_a_test_on_random_inputs_rejects_correct_reorderings():
    def compares_random_results(launcher, configs, M=37, N=45, K=70):
        a = torch.randn(M, K, device=DEVICE)  # fp32 results: another order of additions shows in their last bits
        b = torch.randn(K, N, device=DEVICE)
        results = [launcher(a, b, **config) for config in configs]
        for r in results[1:]:
            L.assert_bitwise_equal(r, results[0])

    with pytest.raises(AssertionError, match="(?s)which is correct.*exact_matmul_inputs"):
        L.check_bitwise_config_test(compares_random_results, quiet=True)


def test_split_k_reorders_the_additions_on_random_inputs():
    """The reordering the check above relies on: split-K's configurations differ in bits on random fp32 inputs."""
    a, b = torch.randn(37, 70, device=DEVICE), torch.randn(70, 45, device=DEVICE)
    results = [L.matmul_splitk(a, b, **config) for config in L.CHECK_SPLITS]
    assert not all(L.bitwise_equal(r, results[0]) for r in results[1:])


def test_the_bitwise_check_needs_a_working_split_k(monkeypatch):
    monkeypatch.setattr(L, "matmul_splitk", lambda a, b, *, out=None, SPLIT_K=2, **kw: L.matmul_tiled(a, b))
    L.check_bitwise_config_test(L.bitwise_config_test, quiet=True)  # a correct stand-in passes
    monkeypatch.setattr(L, "matmul_splitk", lambda a, b, *, out=None, SPLIT_K=2, **kw: utils.nan_empty((37, 45)))
    with pytest.raises(AssertionError, match="finish exercise 1 first"):
        L.check_bitwise_config_test(L.bitwise_config_test, quiet=True)


def test_a_tolerance_lets_fp16_accumulation_through():
    def uses_allclose(launcher, configs, M=37, N=45, K=70):
        a = (torch.randn(M, K, device=DEVICE) * K**-0.25).half()
        b = (torch.randn(K, N, device=DEVICE) * K**-0.25).half()
        for config in configs:
            assert torch.allclose(
                launcher(a, b, **config).double(), L.matmul_ref(a.double(), b.double()), rtol=1e-2, atol=1e-2
            )

    with pytest.raises(AssertionError, match="(?s)passed matmul_fp16acc.*not with a tolerance"):
        L.check_bitwise_config_test(uses_allclose, quiet=True)


def test_a_test_that_returns_false_is_told_to_raise():
    def returns_a_bool(launcher, configs, M=37, N=45, K=70, dtype=torch.float16):
        a, b = L.exact_matmul_inputs(M, N, K, dtype, device=DEVICE)
        want = L.matmul_ref(a.double(), b.double()).to(dtype)
        return all(L.bitwise_equal(launcher(a, b, **config), want) for config in configs)

    with pytest.raises(AssertionError, match="your test returned False: a test fails by raising"):
        L.check_bitwise_config_test(returns_a_bool, quiet=True)


def test_a_test_that_compares_configurations_only_with_each_other_is_caught():
    def self_consistent(launcher, configs, M=37, N=45, K=70, dtype=torch.float16):
        a, b = L.exact_matmul_inputs(M, N, K, dtype, device=DEVICE)
        want = launcher(a, b, **configs[0])
        for config in configs:
            L.assert_bitwise_equal(launcher(a, b, **config), want)

    with pytest.raises(AssertionError, match="not only the configurations with each other"):
        L.check_bitwise_config_test(self_consistent, quiet=True)


def test_a_test_of_the_first_configuration_only_is_caught():
    def first_config_only(launcher, configs, M=37, N=45, K=70, dtype=torch.float16):
        a, b = L.exact_matmul_inputs(M, N, K, dtype, device=DEVICE)
        want = L.matmul_ref(a.double(), b.double()).to(dtype)
        L.assert_bitwise_equal(launcher(a, b, **configs[0]), want)

    with pytest.raises(AssertionError, match="(?s)accumulates in fp16 with.*SPLIT_K.: 3.*every configuration"):
        L.check_bitwise_config_test(first_config_only, quiet=True)


def _bitwise_test_with(edit):
    """The solution's bitwise_config_test with one learner's mistake: (the solution's text, the mistake's)."""
    source = """
def planted(launcher, configs, M=37, N=45, K=70, dtype=torch.float16):
    a, b = L.exact_matmul_inputs(M, N, K, dtype, device=DEVICE)
    want = L.matmul_ref(a.double(), b.double()).to(dtype)
    for config in configs:
        L.assert_bitwise_equal(launcher(a, b, **config), want)
"""
    assert edit[0] in source
    scope = dict(L=L, torch=torch, DEVICE=DEVICE)
    exec(source.replace(*edit), scope)
    return scope["planted"]


@pytest.mark.parametrize(
    "edit, hint",
    [
        (
            ("        L.assert_bitwise_equal(launcher(a, b, **config), want)",
             "        got = launcher(a, b, **config)\n    L.assert_bitwise_equal(got, want)"),
            r"(?s)fp16 with \{'SPLIT_K': 2\}.*never compared that result.*an assert after the loop",
        ),
        (("launcher(a, b, **config)", "launcher(a, b)"), r"never passed a configuration.*launcher\(a, b, \*\*config\)"),
        (("for config in configs:", "for config in configs[1:]:"), r"never ran the launcher.*the first one too"),
    ],
    ids=["assert after the loop", "configuration not passed", "first configuration skipped"],
)  # fmt: skip
def test_a_test_that_checks_some_configurations_only_is_named(edit, hint):
    """Probe09: a test whose assert sat after its loop (only the last result compared) passed the check, since the
    one launcher it planted was wrong only in the last configuration; one that never passed the configuration, or
    skipped the first, was told to use exact inputs or not to compare only configurations with each other."""
    with pytest.raises(AssertionError, match=hint):
        L.check_bitwise_config_test(_bitwise_test_with(edit), quiet=True)


@pytest.mark.parametrize(
    "edit, hint",
    [
        (("launcher(a, b, **config), want)", "launcher(a, b, **config)[:16, :16], want[:16, :16])"), "last"),
        (("launcher(a, b, **config), want)", "launcher(a, b, **config)[:, 0], want[:, 0])"), "last"),
        (("launcher(a, b, **config), want)", "launcher(a, b, **config)[-1], want[-1])"), "first"),
    ],
    ids=["a corner tile", "the first column", "the last row"],
)  # fmt: skip
def test_a_test_that_compares_part_of_the_result_is_named(edit, hint):
    """Session 53: a test comparing a slice of the result (a tile, a column, a row) passed: every launcher the
    check planted was wrong nearly everywhere. Now launchers one ulp off in one corner element each, the first and
    the last."""
    with pytest.raises(AssertionError, match=rf"(?s)right but for its {hint} element.*compare the whole result"):
        L.check_bitwise_config_test(_bitwise_test_with(edit), quiet=True)


@pytest.mark.parametrize(
    "edit",
    [
        ("want = L.matmul_ref(a.double(), b.double()).to(dtype)", "want = L.matmul_ref(a.double(), b.double())"),
        ("L.exact_matmul_inputs(M, N, K, dtype,", "L.exact_matmul_inputs(M, N, K, torch.float32,"),
    ],
    ids=["the exact product not rounded", "fp32 inputs"],
)
def test_a_test_that_compares_two_dtypes_is_named(edit):
    """Session 53: told "on random inputs each order of additions rounds differently", a wrong lead: the inputs were
    exact, and assert_bitwise_equal refused two dtypes."""
    hint = r"(?s)which is correct.*dtypes differ.*Hint: your test compares two dtypes"
    with pytest.raises(AssertionError, match=hint):
        L.check_bitwise_config_test(_bitwise_test_with(edit), quiet=True)


@pytest.mark.parametrize(
    "edit",
    [
        ("L.exact_matmul_inputs(M, N, K, dtype,", "L.exact_matmul_inputs(16, 16, 16, dtype,"),
        ("L.exact_matmul_inputs(M, N, K, dtype,", "L.exact_matmul_inputs(M, N, 16, dtype,"),
    ],
    ids=["16 x 16 x 16", "K = 16"],
)
def test_a_test_on_inputs_too_small_for_fp16_to_lose_bits_is_named(edit):
    """Session 53: told "not with a tolerance ... not only the configurations with each other", a wrong lead: the
    test compared bits with the exact product, on inputs whose sums (one K step) fp16 holds exactly."""
    with pytest.raises(AssertionError, match=r"(?s)passed matmul_fp16acc.*happened to lose no bit.*K = 16"):
        L.check_bitwise_config_test(_bitwise_test_with(edit), quiet=True)


# -- exercise 3: spot the bug ------------------------------------------------------------------------------------


SPLITK_PLANTED = {  # mistake: (the kernel's text, the mistake's, words of the hint)
    "slices start at s * BLOCK_K": ("k_start = s * K_PER_SPLIT", "k_start = s * BLOCK_K", "starts at s * BLOCK_K"),
    "k_end one short": (
        "k_end = tl.minimum(K, k_start + K_PER_SPLIT)",
        "k_end = tl.minimum(K, k_start + K_PER_SPLIT - 1)",
        "leaves out its last term",
    ),  # fmt: skip
    "whole steps only": (
        "for k0 in range(k_start, k_end, BLOCK_K):",
        "for k0 in range(k_start, k_end - BLOCK_K + 1, BLOCK_K):",
        "misses its last, partial step",
    ),  # fmt: skip
    "every slice stores to slice 0": (
        "p_ptrs = part_ptr + s * stride_ps +",
        "p_ptrs = part_ptr +",
        "a slice of the partials was never written",
    ),  # fmt: skip
    # session 28's battery: mistakes that got only "wrong values in many places", or a hint about exp
    "the sum restarted at every step": (
        "acc = tl.dot(a, b, acc)",
        "acc = tl.dot(a, b)",
        "each slice kept only its last BLOCK_K step",
    ),  # fmt: skip
    "K_PER_SPLIT taken as a number of steps": (
        "k_start = s * K_PER_SPLIT",
        "k_start = s * K_PER_SPLIT * BLOCK_K",
        "only slice 0's terms reached the result",
    ),  # fmt: skip
    "every slice ends at K_PER_SPLIT": (
        "k_end = tl.minimum(K, k_start + K_PER_SPLIT)",
        "k_end = tl.minimum(K, K_PER_SPLIT)",
        "only slice 0's terms reached the result",
    ),  # fmt: skip
    "offs_k without k0": (
        "offs_k = k0 + tl.arange(0, BLOCK_K)",
        "offs_k = tl.arange(0, BLOCK_K)",
        "every K step read the first BLOCK_K terms",
    ),  # fmt: skip
    # session 53: "a precision problem. Accumulate in fp32 ... and cast to float16 once, when storing" (it was cast)
    "the partials rounded to fp16": (
        "tl.store(p_ptrs, acc,",
        "tl.store(p_ptrs, acc.to(tl.float16),",
        "each slice's partial product was rounded to float16 before the slices were added",
    ),  # fmt: skip
    # session 29's battery: "wrong values in many places" before
    "every slice starts one slice late": (
        "k_start = s * K_PER_SPLIT",
        "k_start = (s + 1) * K_PER_SPLIT",
        "slice 0's terms are missing",
    ),  # fmt: skip
}


@pytest.mark.parametrize("mistake", list(SPLITK_PLANTED))
def test_splitk_check_names_a_planted_mistake(mistake, monkeypatch, tmp_path):
    old, new, words = SPLITK_PLANTED[mistake]
    plant(monkeypatch, tmp_path, L, "matmul_splitk_kernel", (old, new))
    with pytest.raises(AssertionError, match=re.escape(words)):
        L.check_matmul_splitk(L.matmul_splitk, quiet=True)


@interpreter_only  # the read past B is seen by the interpreter's memory watch; on a GPU it reads garbage
@pytest.mark.parametrize(
    "old, new",
    [
        ("k_end = tl.minimum(K, k_start + K_PER_SPLIT)", "k_end = k_start + K_PER_SPLIT"),
        ("mask=(offs_k[:, None] < k_end) & (offs_n[None, :] < N)", "mask=offs_n[None, :] < N"),
    ],
    ids=["k_end past K", "b's K mask dropped"],
)
def test_splitk_check_names_a_read_past_b(old, new, monkeypatch, tmp_path):
    """Before, the exact-input case ran without the memory watch: NaN read past B, and a hint about exp."""
    plant(monkeypatch, tmp_path, L, "matmul_splitk_kernel", (old, new))
    with pytest.raises(AssertionError, match=r"reads \d+ lane\(s\) past the end of `b_ptr`"):
        L.check_matmul_splitk(L.matmul_splitk, quiet=True)


@pytest.mark.parametrize(
    "edit, words",
    [
        (("partials.sum(dim=0)", "partials[0]"), "only slice 0's terms reached the result"),
        (("out.copy_(partials.sum(dim=0))", "out = partials.sum(dim=0).to(a.dtype)"), "must write into the out"),
        (('splitk_slice(K, SPLIT_K, config["BLOCK_K"])', "K // SPLIT_K"), "K_PER_SPLIT = K // SPLIT_K rounds down"),
    ],
    ids=["first partial only", "a new tensor returned", "slices of K // SPLIT_K"],
)
def test_splitk_check_names_a_planted_launcher_mistake(edit, words, monkeypatch, tmp_path):
    plant(monkeypatch, tmp_path, L, "matmul_splitk", edit)
    with pytest.raises(AssertionError, match=re.escape(words)):
        L.check_matmul_splitk(L.matmul_splitk, quiet=True)


@interpreter_only
def test_row_scale_check_tells_a_read_outside_w_with_the_wrong_values(monkeypatch, tmp_path):
    """w read at x's row offsets: wrong values and reads past w. The check says both, not only "wrong values"."""
    plant(monkeypatch, tmp_path, L, "row_scale_kernel", ("w_ptr + cols", "w_ptr + row * stride_xm + cols"))
    with pytest.raises(AssertionError, match=r"(?s)also touches memory outside x, w and out.*w at cols"):
        L.check_row_scale(L.row_scale, quiet=True)


def test_row_scale_solution_passes_its_check():
    L.check_row_scale(L.row_scale, quiet=True)


@interpreter_only
def test_the_buggy_kernel_passes_output_checks_but_not_the_memory_check():
    def buggy(x, w, out=None):
        return L.row_scale(x, w, out=out, kernel=L.row_scale_buggy_kernel)

    x, w = torch.randn(3, 100, device=DEVICE), torch.randn(100, device=DEVICE)
    utils.check(buggy(x, w, out=utils.nan_empty((3, 100))), x.double() * w.double(), quiet=True)  # looks right
    with pytest.raises(AssertionError, match=r"(?s)touches memory outside.*invalid read.*0 bytes past the end of `w`"):
        L.check_row_scale(buggy, quiet=True)


@triton.jit
def _row_scale_unmasked_store(x_ptr, w_ptr, out_ptr, N, stride_xm, stride_om, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    x = tl.load(x_ptr + row * stride_xm + cols, mask=cols < N, other=0.0)
    w = tl.load(w_ptr + cols, mask=cols < N, other=0.0)
    tl.store(out_ptr + row * stride_om + cols, x * w)  # no mask: the last row writes past the end of out


def test_row_scale_check_catches_an_unmasked_store():
    with pytest.raises(AssertionError, match="past the end"):
        L.check_row_scale(lambda x, w, out: L.row_scale(x, w, out=out, kernel=_row_scale_unmasked_store), quiet=True)


@pytest.mark.parametrize(
    "old, new, named",
    [
        ("x_ptr + row * stride_xm", "x_ptr + row * stride_om", "x is read with out's row stride"),
        ("out_ptr + row * stride_om", "out_ptr + row * stride_xm", "out is written with x's row stride"),
    ],
)
def test_row_scale_check_names_a_swap_of_the_row_strides(monkeypatch, tmp_path, old, new, named):
    """Session 35: the check's x and out were both contiguous (M, N), so stride_xm == stride_om and a kernel that
    used one for the other passed. row_scale now takes x with rows apart, and the check runs x as a row slice of a
    wider matrix (rows N + 3 apart), naming each swap."""
    plant(monkeypatch, tmp_path, L, "row_scale_kernel", (old, new))
    with pytest.raises(AssertionError, match=named):
        L.check_row_scale(L.row_scale, quiet=True)


def test_row_scale_takes_rows_apart_but_not_a_column_stride():
    """Session 35: rows apart (a row slice of a wider matrix) are taken; a column stride is still refused."""
    wide = torch.randn(3, 12, device=DEVICE)
    x, w = wide[:, :7], torch.randn(7, device=DEVICE)
    utils.check(L.row_scale(x, w), x.double() * w.double(), quiet=True)
    with pytest.raises(ValueError, match=r"non-contiguous view.*call x\.contiguous\(\) first"):
        L.row_scale(wide[:, ::2], torch.randn(6, device=DEVICE))
    one_column = wide[:, 3:4]  # (3, 1), rows 12 apart: its column stride is never used
    utils.check(L.row_scale(one_column, w[:1]), one_column.double() * w[:1].double(), quiet=True)


@interpreter_only
def test_interpreter_memcheck_reports_writes_and_leaves_the_interpreter_as_it_was():
    from triton.runtime import interpreter

    x, w = torch.randn(2, 5, device=DEVICE), torch.randn(5, device=DEVICE)
    out = utils.nan_empty((2, 5))
    with L.interpreter_memcheck(x=x, w=w, out=out) as findings:
        L.row_scale(x, w, out=out, kernel=_row_scale_unmasked_store)
    assert any("invalid write" in f and "`out`" in f for f in findings), findings
    assert "create_masked_load" not in vars(interpreter.interpreter_builder)  # the wrappers are gone
    with L.interpreter_memcheck(x=x, w=w, out=out) as clean:
        L.row_scale(x, w, out=out)
    assert clean == []


@interpreter_only
def test_interpreter_memcheck_does_not_make_a_write_outside_every_tensors_memory():
    """A stray write inside a tensor's storage (past a view of a larger buffer) is reported and made; one outside
    every storage is reported and not made: that memory is Python's own (a mutant writing before out crashed the
    process). The store underneath is replaced by one that only counts its lanes, so that no test writes there."""
    from triton.runtime import interpreter

    builder, lanes = interpreter.interpreter_builder, []
    x, w = torch.randn(2, 5, device=DEVICE), torch.randn(5, device=DEVICE)
    alone = torch.empty(2, 5, device=DEVICE)  # a storage of its own: BLOCK_SIZE 8 takes row 1 to elements 10-12
    view = torch.empty(2 * 5 + 8, device=DEVICE)[:10].view(2, 5)  # the same lanes land in the buffer's memory
    try:
        for out, made in ((alone, [8, 5]), (view, [8, 8])):
            lanes.clear()
            builder.create_masked_store = lambda ptrs, value, mask, *rest: lanes.append(int(np.sum(mask.data)))
            with L.interpreter_memcheck(x=x, w=w, out=out) as findings:
                L.row_scale(x, w, out=out, kernel=_row_scale_unmasked_store)
            assert any("invalid write" in f for f in findings) and sorted(lanes) == sorted(made), (findings, lanes)
    finally:
        vars(builder).pop("create_masked_store", None)  # the class's own store again


@interpreter_only
def test_interpreter_memcheck_refuses_to_watch_no_tensors():
    """Probe09: with no tensors named, the first access failed inside the interpreter (min() of an empty sequence)."""
    with pytest.raises(TypeError, match=r"needs, by name, every tensor.*got nothing"):
        with L.interpreter_memcheck():
            pass
    with pytest.raises(TypeError, match=r"got x=Tensor, out=list"):
        with L.interpreter_memcheck(x=torch.ones(2), out=[0.0, 0.0]):
            pass


@pytest.mark.skipif(ENV.interpret, reason="on a GPU the interpreter's memory check is refused")
def test_interpreter_memcheck_refuses_to_run_on_a_gpu():
    with pytest.raises(RuntimeError, match="compute-sanitizer"):
        with L.interpreter_memcheck():
            pass


# -- exercise 4: pruning ------------------------------------------------------------------------------------------


def test_prune_configs_solution_passes_its_check():
    L.check_prune_for_shape(L.prune_for_shape, quiet=True)


def _forgets_num_stages(configs, named_args, **kwargs):
    size = named_args["a_ptr"].element_size()
    kept = [
        c
        for c in configs
        if (c.kwargs["BLOCK_M"] + c.kwargs["BLOCK_N"]) * c.kwargs["BLOCK_K"] * size <= L.smem_budget()
        and c.kwargs["BLOCK_M"] <= max(16, triton.next_power_of_2(named_args["M"]))
        and c.kwargs["BLOCK_N"] <= max(16, triton.next_power_of_2(named_args["N"]))
    ]
    return kept or configs[-1:]


def _no_tile_rule(configs, named_args, **kwargs):
    size = named_args["a_ptr"].element_size()
    return [c for c in configs if L.config_smem_bytes(c, size) <= L.smem_budget()]


def _may_return_nothing(configs, named_args, **kwargs):
    """The rules without the fallback."""
    size = named_args["a_ptr"].element_size()
    return [
        c
        for c in configs
        if L.config_smem_bytes(c, size) <= L.smem_budget()
        and c.kwargs["BLOCK_M"] <= max(16, triton.next_power_of_2(named_args["M"]))
        and c.kwargs["BLOCK_N"] <= max(16, triton.next_power_of_2(named_args["N"]))
    ]


def _pruner(itemsize=None, budget=None, tile=lambda n: max(16, triton.next_power_of_2(n))):
    """prune_for_shape with one rule swapped for a learner's version of it (the argument given)."""

    def prune(configs, named_args, **kwargs):
        size = itemsize or named_args["a_ptr"].element_size()
        kept = [
            c
            for c in configs
            if L.config_smem_bytes(c, size) <= (budget or L.smem_budget())
            and c.kwargs["BLOCK_M"] <= tile(named_args["M"])
            and c.kwargs["BLOCK_N"] <= tile(named_args["N"])
        ]
        return kept or [min(configs, key=lambda c: L.config_smem_bytes(c, size))]

    return prune


@pytest.mark.parametrize(
    "planted, hint",
    [
        (_forgets_num_stages, "count num_stages copies"),
        (_no_tile_rule, "was kept: check the tile rule"),
        (_may_return_nothing, "return a non-empty list"),
        (_pruner(itemsize=2), r"float32.*itemsize of named_args\['a_ptr'\] \(4 here\)"),
        (_pruner(budget=227 * 1024), r"101376 B.*smem_budget\(\) \(this GPU's, not a number of your own\)"),
        (_pruner(tile=lambda n: max(16, n)), r"M=100, N=200.*was dropped.*next_power_of_2\(M\)\) = 128"),
        (_pruner(tile=triton.next_power_of_2), r"M=8, N=40.*was dropped.*max\(16, next_power_of_2"),
    ],
    ids=["stages", "tile rule", "empty", "itemsize 2", "fixed budget", "no power of two", "no floor of 16"],
)
def test_prune_check_names_the_classic_mistakes(planted, hint):
    with pytest.raises(AssertionError, match=hint):
        L.check_prune_for_shape(planted, quiet=True)


_FALLBACK = "[min(configs, key=lambda c: config_smem_bytes(c, itemsize))]"
PRUNE_PLANTED = {  # session 29's battery: (the solution's text, the mistake's, words of the hint)
    "a config exactly at the budget dropped": (
        "<= smem_budget()",
        "< smem_budget()",
        "147456 B: kept 8 configs, expected 10. Hint: BLOCK_M: 128, BLOCK_N: 256",
    ),  # fmt: skip
    "the last config as the fallback": (_FALLBACK, "configs[-1:]", "the answer is the fallback"),
    # probe09: told "over the budget: count num_stages copies" before
    "every config as the fallback": (_FALLBACK, "configs", "the answer is the fallback"),
    "the largest config as the fallback": (
        _FALLBACK,
        "[max(configs, key=lambda c: config_smem_bytes(c, itemsize))]",
        "the answer is the fallback",
    ),  # fmt: skip
}


def test_prune_check_gives_every_argument_by_name_as_the_autotuner_does(monkeypatch, tmp_path):
    """Session 53: the check's named_args held a_ptr, M, N and K only, and a pruner that took the itemsize from b_ptr
    (the same dtype, and in the autotuner's named_args) failed with KeyError: 'b_ptr'."""
    plant(monkeypatch, tmp_path, L, "prune_for_shape", ('named_args["a_ptr"]', 'named_args["b_ptr"]'))
    L.check_prune_for_shape(L.prune_for_shape, quiet=True)


def test_prune_check_names_a_pruner_that_changes_the_list_it_is_given(monkeypatch, tmp_path):
    """Session 53: each call got a copy of the configs, so a pruner that removed the configs it refuses from the
    list passed where one config survived, and failed elsewhere with "min() arg is an empty sequence"; the autotuner
    passes its own list, whose removed configs would be gone for every later shape."""
    removes = (
        "for c in list(configs):\n        if c.kwargs['BLOCK_M'] > tall:\n            configs.remove(c)\n    kept = ["
    )
    plant(monkeypatch, tmp_path, L, "prune_for_shape", ("kept = [", removes))
    with pytest.raises(AssertionError, match="changed the list of configs it was given"):
        L.check_prune_for_shape(L.prune_for_shape, quiet=True)


@pytest.mark.parametrize("mistake", list(PRUNE_PLANTED))
def test_prune_check_names_a_planted_mistake(mistake, monkeypatch, tmp_path):
    """Before, a config needing exactly the budget could be dropped unseen (no case had one), and a wrong fallback
    was told "was kept: check the tile rule" or "over the budget", when no config passes the rules at all."""
    old, new, words = PRUNE_PLANTED[mistake]
    plant(monkeypatch, tmp_path, L, "prune_for_shape", (old, new))
    with pytest.raises(AssertionError, match=re.escape(words)):
        L.check_prune_for_shape(L.prune_for_shape, quiet=True)


def test_tuned_matmul_runs_with_pruning():
    a = torch.randn(20, 33, device=DEVICE, dtype=torch.float16)
    b = torch.randn(33, 17, device=DEVICE, dtype=torch.float16)
    utils.check(
        L.matmul_tuned(a, b, out=utils.nan_empty((20, 17), torch.float16)),
        L.matmul_ref(a.double(), b.double()),
        **L.matmul_tolerance(torch.float16, 33, 33**0.5),
        quiet=True,
    )


# -- exercise 5: flushed fp16 accumulation ------------------------------------------------------------------------


def test_flushed_solution_passes_its_check():
    L.check_matmul_flushed(L.matmul_flushed, quiet=True)


def test_never_flushing_fails_on_exact_inputs():
    def never(a, b, *, out=None, FLUSH_EVERY=1):
        return L.matmul_fp16acc(a, b, out=out)

    with pytest.raises(AssertionError, match="add it to acc32 and reset it to zero"):
        L.check_matmul_flushed(never, quiet=True)


@pytest.mark.parametrize(
    "flush, hint",
    [
        ("if True:", "as if FLUSH_EVERY were 1"),
        ("if k % FLUSH_EVERY == 0:", "flushed after steps 0, 4, 8, ...: an off-by-one"),
        ("if (k + 1) % (2 * FLUSH_EVERY) == 0:", r"flush after steps FLUSH_EVERY - 1, 2 \* FLUSH_EVERY - 1"),
    ],
    ids=["every step", "off by one", "every 2 periods"],
)
def test_flush_check_tests_a_period_above_one(monkeypatch, tmp_path, flush, hint):
    """Each planted kernel is exact with FLUSH_EVERY=1; only FLUSH_EVERY=4 shows where it flushes."""
    plant(monkeypatch, tmp_path, L, "matmul_flushed_kernel", ("if (k + 1) % FLUSH_EVERY == 0:", flush))
    with pytest.raises(AssertionError, match=f"(?s)FLUSH_EVERY=4.*Hint: .*{hint}"):
        L.check_matmul_flushed(L.matmul_flushed, quiet=True)


def test_the_flush_model_follows_the_kernel_for_any_period():
    """Bit for bit, rounding to nearest (the interpreter) or toward zero (some tensor cores); FLUSH_EVERY=4 is the
    period whose result the rounding cannot change."""
    a, b = L.flush_period_inputs(5, 7, 200, 16)
    for period in (1, 2, 3, 4, 5):
        got = L.matmul_flushed(a, b, FLUSH_EVERY=period, BLOCK_K=16)
        models = [L.flushed_model(a, b, lambda k: (k + 1) % period == 0, 16, toward_zero) for toward_zero in (0, 1)]
        assert any(L.bitwise_equal(got, model) for model in models), f"FLUSH_EVERY={period}"
    assert L.bitwise_equal(
        *[L.flushed_model(a, b, lambda k: (k + 1) % 4 == 0, 16, toward_zero) for toward_zero in (0, 1)]
    )


def test_flushing_without_reset_counts_twice():
    def no_reset(a, b, *, out=None, FLUSH_EVERY=1):  # what forgetting `acc16 = 0` amounts to, step by step
        steps = torch.stack(
            [L.matmul_ref(a[:, k : k + 16].double(), b[k : k + 16].double()) for k in range(0, a.shape[1], 16)]
        )
        running = steps.cumsum(0)  # acc16 after each step, never emptied
        out.copy_(running.sum(0).to(out.dtype))
        return out

    with pytest.raises(AssertionError):
        L.check_matmul_flushed(no_reset, quiet=True)


def test_flushing_helps_when_sums_grow():
    K = ENV.pick(cpu=1024, gpu=16384)
    a = torch.rand(16, K, device=DEVICE).half()
    b = torch.rand(K, 16, device=DEVICE).half()
    ref = L.matmul_ref(a.double(), b.double())
    never = (L.matmul_fp16acc(a, b).double() - ref).abs().max()
    every = (L.matmul_flushed(a, b, FLUSH_EVERY=1).double() - ref).abs().max()
    assert every < never / 2, (every, never)


# -- refusals and empty inputs ------------------------------------------------------------------------------------


def test_bad_inputs_are_refused_before_any_launch():
    a = torch.randn(8, 32, device=DEVICE, dtype=torch.float16)
    b = torch.randn(32, 16, device=DEVICE, dtype=torch.float16)
    utils.refuses(
        {
            "inner dimensions that differ": lambda: L.matmul_splitk(a, b[:5]),
            "SPLIT_K = 0": lambda: L.matmul_splitk(a, b, SPLIT_K=0),
            "SPLIT_K = True": lambda: L.matmul_splitk(a, b, SPLIT_K=True),
            "SPLIT_K over grid axis 1's limit": lambda: L.matmul_splitk(a, b, SPLIT_K=65536),
            "BLOCK_K = 24": lambda: L.matmul_splitk(a, b, BLOCK_K=24),
            "BLOCK_M = 8": lambda: L.matmul_fp16acc(a, b, BLOCK_M=8),
            "fp32 into fp16 accumulation": lambda: L.matmul_flushed(a.float(), b.float()),
            "FLUSH_EVERY = -1": lambda: L.matmul_flushed(a, b, FLUSH_EVERY=-1),
            "FLUSH_EVERY = 1.5": lambda: L.matmul_flushed(a, b, FLUSH_EVERY=1.5),
            "out of the wrong shape": lambda: L.matmul_splitk(a, b, out=torch.empty_like(a)),
            "out that is an input": lambda: L.matmul_fp16acc(a[:, :8], a[:8, :8].contiguous(), out=a[:, :8]),
            "a weight of the wrong length": lambda: L.row_scale(a, a[0, :5]),
            "a weight of another dtype": lambda: L.row_scale(a, a[0].float()),
            "rows too long for one block": lambda: L.row_scale(
                torch.zeros(1, 40000, device=DEVICE), torch.zeros(40000, device=DEVICE)
            ),
            "a 1-D x": lambda: L.row_scale(a[0], a[0]),
        },
        quiet=True,
    )
    with pytest.raises(ValueError, match="a.shape\\[1\\] == b.shape\\[0\\]"):
        L.matmul_fp16acc(a, b[:5])


class _Exploding:
    """A kernel that fails if launched: a refusal must come before any launch."""

    def __getitem__(self, grid):
        raise RuntimeError("launched")


def test_tiles_larger_than_a_block_are_refused_before_any_launch(monkeypatch):
    """Probe09: BLOCK_M = 2**20 passed launch_config; under the interpreter the accumulator alone took gigabytes
    (on a GPU the compiler refuses the tile)."""
    for kernel in ("matmul_splitk_kernel", "matmul_fp16acc_kernel", "matmul_flushed_kernel"):
        monkeypatch.setattr(L, kernel, _Exploding())
    a = torch.randn(8, 32, device=DEVICE, dtype=torch.float16)
    b = torch.randn(32, 16, device=DEVICE, dtype=torch.float16)
    for launcher in (L.matmul_splitk, L.matmul_fp16acc, L.matmul_flushed):
        with pytest.raises(ValueError, match=r"the accumulator \(BLOCK_M x BLOCK_N\).*more than one block takes"):
            launcher(a, b, BLOCK_M=2**20)
        with pytest.raises(ValueError, match=r"B's block \(BLOCK_K x BLOCK_N\)"):
            launcher(a, b, BLOCK_K=2**12, BLOCK_N=2**10)


def test_splitk_refuses_partials_past_32_bit_offsets(monkeypatch):
    """Probe09: the kernel stores slice s at s * stride_ps, a 32-bit product; SPLIT_K * M * N over 2**31 wrapped
    it (on a GPU: a store before the partials, or an illegal address). Refused before the partials are made."""

    def no_partials(*args, **kwargs):
        raise RuntimeError("allocated")

    monkeypatch.setattr(L, "matmul_splitk_kernel", _Exploding())
    monkeypatch.setattr(L.utils, "nan_empty", no_partials)
    a = torch.randn(256, 1, device=DEVICE, dtype=torch.float16)
    b = torch.randn(1, 256, device=DEVICE, dtype=torch.float16)
    with pytest.raises(ValueError, match=r"SPLIT_K=32769 .*32-bit offsets.*SPLIT_K <= 32768"):
        L.matmul_splitk(a, b, SPLIT_K=32769)


def test_debug_demo_refuses_a_print_flag_that_is_not_a_bool(monkeypatch):
    """Probe09: PRINT="no" printed (a constexpr is taken for its truth)."""
    monkeypatch.setattr(L, "debug_demo_kernel", _Exploding())
    with pytest.raises(TypeError, match="PRINT must be True or False, got 'no'"):
        L.debug_demo(torch.ones(20, device=DEVICE), PRINT="no")


@pytest.mark.skipif(DEVICE != "cpu", reason="a file mapped into CPU memory")
def test_debug_demo_refuses_x_past_32_bit_offsets(monkeypatch, tmp_path):
    """Probe09: x of 2**31 + 1 elements went to a kernel whose offsets are 32-bit (on a GPU: reads and writes before
    x and out). x is a sparse file mapped into memory: no memory or disk taken."""
    monkeypatch.setattr(L, "debug_demo_kernel", _Exploding())
    path = tmp_path / "x.bin"
    with open(path, "wb") as f:
        f.truncate((2**31 + 1) * 2)
    x = torch.from_file(str(path), shared=True, size=2**31 + 1, dtype=torch.float16)  # one past the last offset
    with pytest.raises(ValueError, match="x spans 2147483649 elements.*32-bit offsets"):
        L.debug_demo(x)


def test_empty_inputs_return_empty_results():
    e = torch.empty(0, 32, device=DEVICE, dtype=torch.float16)
    b = torch.randn(32, 16, device=DEVICE, dtype=torch.float16)
    assert L.matmul_splitk(e, b).shape == (0, 16)
    assert L.matmul_fp16acc(e, b).shape == (0, 16)
    assert L.matmul_flushed(e, b).shape == (0, 16)
    assert L.matmul_tuned(e, b).shape == (0, 16)
    assert L.row_scale(torch.empty(0, 5, device=DEVICE), torch.ones(5, device=DEVICE)).shape == (0, 5)
    no_k = L.matmul_splitk(torch.empty(4, 0, device=DEVICE), torch.empty(0, 3, device=DEVICE))
    assert torch.equal(no_k, torch.zeros(4, 3, device=DEVICE))


# -- the debugging and profiling helpers --------------------------------------------------------------------------


@interpreter_only
def test_device_asserts_are_checked_only_inside_the_context():
    nan_input = torch.tensor([1.0, float("nan")] * 10, device=DEVICE)
    L.debug_demo(nan_input)  # compiled to nothing: no error
    with pytest.raises(Exception, match="x holds a NaN"):
        with L.device_asserts():
            L.debug_demo(nan_input)
    L.debug_demo(nan_input)  # and off again afterwards


def test_static_assert_refuses_a_small_block():
    with pytest.raises(Exception, match="BLOCK_SIZE must be at least 16"):
        L.debug_demo(torch.arange(20.0, device=DEVICE), BLOCK_SIZE=8)


@pytest.mark.parametrize("BLOCK_SIZE", [0, 24, 2**21, 16.0])
def test_debug_demo_refuses_a_block_size_before_launching(BLOCK_SIZE, monkeypatch):
    monkeypatch.setattr(L, "debug_demo_kernel", _Exploding())
    with pytest.raises(ValueError, match="BLOCK_SIZE"):
        L.debug_demo(torch.arange(20.0, device=DEVICE), BLOCK_SIZE=BLOCK_SIZE)


def test_run_python_runs_code_with_the_course_on_its_path():
    status, output = L.run_python("import utils.bitwise\nprint('found', utils.bitwise.__name__)")
    assert status == 0 and "found utils.bitwise" in output
    status, output = L.run_python("raise SystemExit(3)")
    assert status == 3


def test_inductor_kernels_keeps_names_kinds_and_blocks():
    log = """
@triton_heuristics.persistent_reduction(
    size_hints={'x': 4096, 'r0_': 4096},
)
@triton.jit
def triton_per_fused__softmax_0(in_ptr0, out_ptr2, xnumel, r0_numel, XBLOCK : tl.constexpr):
    xnumel = 4096
    R0_BLOCK: tl.constexpr = 4096
    tmp0 = tl.load(in_ptr0 + (r0_1 + 4096*x0), None)
        triton_per_fused__softmax_0.run(arg0_1, buf2, 4096, 4096, stream=stream0)
"""
    kept = L.inductor_kernels(log)
    assert kept[0] == "@triton_heuristics.persistent_reduction("
    assert any(line.startswith("def triton_per_fused__softmax_0") for line in kept)
    assert "R0_BLOCK: tl.constexpr = 4096" in kept and not any("tl.load" in line for line in kept)


def test_pipeline_costs_count_the_matmul_once():
    costs = L.pipeline_costs(M=8, C=16, V=32, itemsize=2)
    assert costs["matmul"] == (2 * 8 * 16 * 32, (8 * 16 + 16 * 32 + 8 * 32) * 2)
    assert costs["softmax"][1] == 2 * 8 * 32 * 2 and costs["rmsnorm"][1] == (2 * 8 * 16 + 16) * 2
