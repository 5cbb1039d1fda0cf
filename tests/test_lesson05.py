"""Lesson 05's solution kernels through the lesson's own checks; planted mistakes and the hint each must get; every
launcher's refusals, empty problems, the fallbacks for GPUs without TMA or with less shared memory; and the figures
the lesson quotes, against results/.

The checks are the lesson's (`check_matmul`, `check_outer_add`, `check_tile_order`): fresh random inputs at
awkward shapes, outputs pre-filled with NaN, the fp64 reference from the same low-precision inputs, the lesson's
tolerance. Shapes are tiny under the interpreter, which runs tl.dot slowly, and large and awkward on the GPU.
"""

import dataclasses
import math
import re
from pathlib import Path

import nbformat
import numpy as np
import pytest
import torch
import triton
import triton.language as tl

import utils
from utils import crashes, launch, offline, setup
from utils.lessons import load
from utils.mutants import plant
from utils.order import programs_in_order

ENV = setup(quiet=True)
L = load("05")
DEVICE = ENV.device
ROOT = Path(__file__).resolve().parents[1]

#: fp16 is the interpreter's low-precision type (it has no bf16); fp32 goes through TF32 on the GPU
DTYPES = ENV.pick(cpu=[torch.float16, torch.float32], gpu=[torch.float16, torch.bfloat16, torch.float32])
AWKWARD = ENV.pick(cpu=[(37, 45, 70)], gpu=[(1000, 1337, 999)])
# On the GPU every new shape, dtype or epilogue compiles each autotuning configuration: the cases are chosen so
# that each launcher meets every dtype and every degenerate shape, without compiling every combination.


# -- each rung of the ladder, through the lesson's checks -----------------------------------------------------------


def test_naive():
    L.check_matmul(L.matmul_naive, shapes=L.NAIVE_CHECK_SHAPES, quiet=True)


def test_outer_add():
    L.check_outer_add(L.outer_add, quiet=True)


@pytest.mark.parametrize("launcher", ["matmul_tiled", "matmul_grouped", "matmul_autotuned", "matmul"])
def test_tiled_kernels(launcher):
    L.check_matmul(getattr(L, launcher), quiet=True)


@pytest.mark.parametrize("launcher", ["matmul_tiled", "matmul"])
@pytest.mark.parametrize("dtype", DTYPES, ids=utils.dtype_name)
def test_every_dtype(launcher, dtype):
    L.check_matmul(getattr(L, launcher), shapes=AWKWARD, dtype=dtype, quiet=True)


@pytest.mark.parametrize("activation", [None, "silu", "gelu"])
def test_fused_epilogue(activation):
    L.check_matmul(L.matmul, shapes=AWKWARD, epilogue=True, activation=activation, quiet=True)


def test_persistent():
    L.check_matmul(L.matmul_persistent, epilogue=True, activation="silu", quiet=True)


@pytest.mark.parametrize("dtype", DTYPES[:2], ids=utils.dtype_name)
def test_persistent_tma(dtype):
    L.check_matmul(L.matmul_persistent_tma, shapes=L.TMA_SHAPES, dtype=dtype, epilogue=dtype != torch.float32)


def test_tma_launcher_falls_back_to_pointer_loads_without_tma(monkeypatch):
    """Before Hopper (or with TRITON_HARD_WAY_AS=8.0) the TMA step runs step 6's kernel, and is still right."""
    calls, real = [], L.matmul_persistent
    monkeypatch.setattr(L, "uses_tma", lambda: False)
    monkeypatch.setattr(L, "matmul_persistent", lambda *a, **k: calls.append(1) or real(*a, **k))
    L.check_matmul(L.matmul_persistent_tma, shapes=L.TMA_SHAPES[:1], epilogue=True, quiet=True)
    assert calls


@pytest.mark.skipif(ENV.interpret, reason="one configuration under the interpreter")
@pytest.mark.parametrize("index", range(len(L.MATMUL_CONFIGS)))
def test_every_autotune_config(index):
    """The autotuner may pick any configuration for some shape: each must be right, not just the fastest here."""
    config = L.MATMUL_CONFIGS[index]
    if not L.fits(config, ENV.dtype.itemsize):
        pytest.skip("does not fit this GPU's shared memory: the autotuner leaves it out")
    run = lambda a, b, *, out: L.matmul_grouped(
        a, b, out=out, **config.kwargs, num_warps=config.num_warps, num_stages=config.num_stages
    )
    L.check_matmul(run, shapes=AWKWARD, quiet=True)


@pytest.mark.skipif(ENV.interpret, reason="one configuration under the interpreter")
@pytest.mark.parametrize("kernel, configs, launcher", [
    ("matmul_persistent_kernel", "MATMUL_CONFIGS", "matmul_persistent"),
    ("matmul_tma_kernel", "TMA_CONFIGS", "matmul_persistent_tma"),
])  # fmt: skip
def test_every_persistent_config(kernel, configs, launcher, monkeypatch):
    """The same for the persistent kernels: with a single configuration the autotuner launches it without tuning."""
    for config in getattr(L, configs):
        monkeypatch.setattr(getattr(L, kernel), "configs", [config])
        L.check_matmul(getattr(L, launcher), shapes=L.TMA_SHAPES[1:2], epilogue=True, quiet=True)


# -- the program order of step 3 ------------------------------------------------------------------------------------


def test_tile_order_check():
    L.check_tile_order(L.tile_order, quiet=True)


@pytest.mark.parametrize("GROUP_M", [1, 2, 4, 8])
@pytest.mark.parametrize("M, N, BLOCK_M, BLOCK_N", [(700, 1000, 64, 128), (64, 64, 64, 64), (1000, 33, 16, 16)])
def test_tile_order(M, N, BLOCK_M, BLOCK_N, GROUP_M):
    """grouped_tile gives every tile to exactly one program, in the order of the loops in tile_order_ref."""
    got = L.tile_order(M, N, BLOCK_M, BLOCK_N, GROUP_M)
    want = L.tile_order_ref(M, N, BLOCK_M, BLOCK_N, GROUP_M)
    utils.check(got, want, atol=0, rtol=0, reason="program ids are whole numbers", quiet=True)
    # a third, independent statement of the order: the one utils.pictures draws
    from utils.pictures import grids

    drawn = torch.from_numpy(grids.tile_order(M, N, BLOCK_M, BLOCK_N, None if GROUP_M == 1 else GROUP_M))
    assert torch.equal(want, drawn.to(want.dtype))


def test_tile_order_ref_is_row_major_for_one_row_per_group():
    order = L.tile_order_ref(300, 500, 100, 100, 1)
    assert torch.equal(order, torch.arange(15, dtype=order.dtype).reshape(3, 5))


# -- planted mistakes: each must fail the check with its own hint ---------------------------------------------------


@triton.jit
def _planted_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    bias_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    GELU: tl.constexpr,
    MISTAKE: tl.constexpr,
):
    """matmul_kernel as a learner might write it, with the one mistake named by MISTAKE ("" for none; "swap_a" is
    planted in the launcher)."""
    pid = tl.program_id(0)
    num_pid_m, num_pid_n = tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N)
    first_m = pid // (GROUP_M * num_pid_n) * GROUP_M
    rows = tl.minimum(num_pid_m - first_m, GROUP_M)
    if MISTAKE == "short_group":
        rows = 0 * first_m + GROUP_M  # the last group taken as full
    pid_m = first_m + pid % (GROUP_M * num_pid_n) % rows
    pid_n = pid % (GROUP_M * num_pid_n) // rows
    if MISTAKE == "swap_pid":  # row-major (GROUP_M = 1) with % and // swapped
        pid_m, pid_n = pid % num_pid_n, pid // num_pid_n
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    if MISTAKE == "b_from_a":
        b_ptrs = a_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    steps = tl.cdiv(K, BLOCK_K)
    if MISTAKE == "tail":
        steps = K // BLOCK_K
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, steps):
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_left), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & (offs_n[None, :] < N), other=0.0)
        if MISTAKE == "overwrite":
            acc = tl.dot(a, b)
        else:
            acc = tl.dot(a, b, acc)
        if HAS_BIAS and MISTAKE == "bias_in_loop":
            acc += tl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)[None, :]
        if MISTAKE == "b_elements":
            a_ptrs += BLOCK_K * stride_ak
            b_ptrs += BLOCK_K
        elif MISTAKE != "advance":
            a_ptrs += BLOCK_K * stride_ak
            b_ptrs += BLOCK_K * stride_bk
    if HAS_BIAS and MISTAKE != "bias_in_loop":
        bias = tl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)
        if MISTAKE == "bias_twice":
            acc = acc + bias[None, :]
        if MISTAKE == "bias_rows":  # the row offsets where the column offsets belong (square tiles: it compiles)
            bias = tl.load(bias_ptr + offs_m, mask=offs_m < N, other=0.0).to(tl.float32)
        if MISTAKE == "bias_axis":
            acc = acc + bias[:, None]
        else:
            acc = acc + bias[None, :]
    if GELU:
        cube = acc * acc if MISTAKE == "gelu_square" else acc * acc * acc
        z = 0.7978845608028654 * (acc + 0.044715 * cube)
        acc = acc * tl.sigmoid(z if MISTAKE == "gelu_z" else 2.0 * z)
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def _planted(mistake, GROUP_M=8):
    """A launcher for _planted_kernel with 16 x 16 x 16 tiles (the mistakes need no more)."""

    def launcher(a, b, bias=None, activation=None, *, out):
        (M, K), N = a.shape, b.shape[1]
        grid = (triton.cdiv(M, 16) * triton.cdiv(N, 16),)
        a_strides = a.stride()[::-1] if mistake == "swap_a" else a.stride()  # A's strides passed in the wrong order
        _planted_kernel[grid](
            a, b, out, a if bias is None else bias, M, N, K, *a_strides, *b.stride(), *out.stride(),
            BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, GROUP_M=GROUP_M, HAS_BIAS=bias is not None,
            GELU=activation == "gelu", MISTAKE=mistake,
        )  # fmt: skip
        return out

    launcher.__name__ = f"planted_{mistake or 'nothing'}"
    return launcher


#: the first shape is square (where swapped strides and wrong pointers show), K is not a multiple of 16 or 32,
#: and M spans 3 tile rows (a last group shorter than GROUP_M = 8)
PLANT_SHAPES = ENV.pick(cpu=[(40, 40, 40), (37, 45, 70)], gpu=[(200, 200, 200), (1000, 1337, 999)])
MISTAKES = {
    "tail": "misses its last, partial step",
    "advance": "pointers are not moved along K",
    "swap_a": "A is read transposed",
    "b_from_a": "B is loaded from a_ptr",
    "short_group": "last group",
    "bias_axis": "bias is added along the wrong axis",
    "bias_rows": "bias is loaded at the row offsets",  # session 35: "Wrong values in many places" before
    "bias_twice": "bias is added 2 times: twice",  # session 36: the two "Wrong values in many places" before
    "bias_in_loop": "once a step of the K loop",
    "overwrite": "Only the last step of the K loop",
    "b_elements": "B's pointers move BLOCK_K = 16 elements",
    "gelu_z": r"sigmoid\(z\) where sigmoid\(2 z\)",
    "gelu_square": "GELU's cubic term",
}


def test_planted_kernel_without_a_mistake_passes():
    """The planted kernel is right when nothing is planted: each failure below is the mistake's, not the harness's."""
    for activation in (None, "gelu"):
        L.check_matmul(_planted(""), shapes=PLANT_SHAPES, epilogue=True, activation=activation, quiet=True)


@pytest.mark.parametrize("mistake", MISTAKES)
def test_planted_mistake_gets_its_hint(mistake):
    gelu = mistake.startswith("gelu")
    with pytest.raises(AssertionError, match=MISTAKES[mistake]) as failure:
        epilogue = dict(epilogue=mistake.startswith("bias") or gelu, activation="gelu" if gelu else None)
        L.check_matmul(_planted(mistake), shapes=PLANT_SHAPES, **epilogue)
    assert "precision problem" not in str(failure.value)


def test_swapped_program_ids_are_a_mapping_mistake_at_the_checks_own_shapes():
    """pid_m and pid_n swapped cover every tile when there are as many tile rows as columns: the check's shapes
    include one with more tile columns, and the hint names the mapping, not the grid."""
    with pytest.raises(AssertionError, match=r"(?s)pid_m and pid_n are swapped.*pid_m = pid // num_pid_n") as failure:
        L.check_matmul(_planted("swap_pid", GROUP_M=1), quiet=True)
    assert "C[1x29]" not in str(failure.value) and "cdiv(N, BLOCK_N) column blocks" not in str(failure.value)


def test_drop_last_k_and_fp16_accumulation_fail():
    """Two mistakes outside a kernel: the tolerance is tight enough to see them."""

    def drop_last_k(a, b, *, out):
        return L.matmul(a[:, :-1].contiguous(), b[:-1].contiguous(), out=out)

    def fp16_accumulator(a, b, *, out):
        acc = torch.zeros(a.shape[0], b.shape[1], dtype=a.dtype, device=a.device)
        for k in range(a.shape[1]):
            acc += a[:, k : k + 1] * b[k : k + 1, :]
        return out.copy_(acc)

    shapes = [ENV.pick(cpu=(40, 40, 300), gpu=(512, 512, 1000))]
    for bug in (drop_last_k, fp16_accumulator):
        with pytest.raises(AssertionError):
            L.check_matmul(bug, shapes=shapes, dtype=torch.float16, quiet=True)


@triton.jit
def _transposed_outer_add_kernel(x_ptr, y_ptr, out_ptr, M, N, stride_om, stride_on, BLOCK_M: tl.constexpr):
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    x = tl.load(x_ptr + offs_m, mask=offs_m < M, other=0.0)
    y = tl.load(y_ptr + offs_n, mask=offs_n < N, other=0.0)
    out_ptrs = out_ptr + offs_m[:, None] * stride_on + offs_n[None, :] * stride_om  # strides swapped
    tl.store(out_ptrs, x[:, None] + y[None, :], mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def test_planted_transposed_outer_add_gets_its_hint():
    def transposed(x, y, *, out):
        grid = (triton.cdiv(x.shape[0], 16), triton.cdiv(y.shape[0], 16))
        _transposed_outer_add_kernel[grid](x, y, out, x.shape[0], y.shape[0], *out.stride(), BLOCK_M=16)
        return out

    with pytest.raises(AssertionError, match="written transposed"):
        L.check_outer_add(transposed, quiet=True)


@pytest.mark.parametrize(
    "edit, words",
    [
        (("x[:, None] + y[None, :]", "x[None, :] + y[:, None]"), "Each 16 x 16 tile is transposed"),
        (("y_ptr + offs_n, mask=offs_n < N", "y_ptr + offs_m, mask=offs_m < N"), "y is loaded with the row offsets"),
    ],
    ids=["broadcast swapped", "y at the row offsets"],
)
def test_planted_outer_add_tile_mistake_gets_its_hint(edit, words, monkeypatch, tmp_path):
    plant(monkeypatch, tmp_path, L, "outer_add_kernel", edit)
    with pytest.raises(AssertionError, match=words):
        L.check_outer_add(L.outer_add, quiet=True)


_OUTER_STORE = "offs_m[:, None] * stride_om + offs_n[None, :] * stride_on"
_C_STORE = "offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn"
STORE_PLANTED = {  # mistake: (the kernel, its store's offsets as the mistake writes them, the check, words of the hint)
    "outer_add: stride_on for both axes": (
        "outer_add_kernel", _OUTER_STORE.replace("stride_om", "stride_on"), "outer_add",
        "both offsets are multiplied by the column stride stride_on",
    ),
    "outer_add: stride_om for both axes": (
        "outer_add_kernel", _OUTER_STORE.replace("stride_on", "stride_om"), "outer_add",
        "both offsets are multiplied by the row stride stride_om",
    ),
    "matmul_tiled: stride_cn for both axes": (
        "matmul_tiled_kernel", _C_STORE.replace("stride_cm", "stride_cn"), "matmul_tiled",
        "both offsets are multiplied by the column stride stride_cn",
    ),
    "matmul_tiled: stride_cm for both axes": (
        "matmul_tiled_kernel", _C_STORE.replace("stride_cn", "stride_cm"), "matmul_tiled",
        "both offsets are multiplied by the row stride stride_cm",
    ),
    "matmul_tiled: strides swapped, C not square": (
        "matmul_tiled_kernel", "offs_m[:, None] * stride_cn + offs_n[None, :] * stride_cm", "matmul_tiled C[37x70]",
        "the two strides are swapped (offs_m with stride_cn, offs_n with stride_cm)",
    ),
}  # fmt: skip


#: the row stride for both offsets writes up to (M + N) * N elements into out: past its end, which on a GPU lands in
#: other tensors' memory (or faults) before any check can speak; the interpreter's memory watch drops those stores
PAST_THE_END = {"outer_add: stride_om for both axes", "matmul_tiled: stride_cm for both axes"}


@pytest.mark.parametrize(
    "mistake",
    [
        pytest.param(m, marks=pytest.mark.skipif(m in PAST_THE_END and not ENV.interpret, reason="writes past out"))
        for m in STORE_PLANTED
    ],
)
def test_planted_store_stride_mix_up_gets_its_hint(mistake, monkeypatch, tmp_path):
    """The output's strides mixed up in the store: programs overwrite each other and the rest is never written (or
    written past the end). Before store_stride_hint the hints spoke of a grid that does not reach the end, or of
    column blocks that do not cover N; square outputs with the strides swapped are named by matmul_suspects."""
    kernel, wrong, check, words = STORE_PLANTED[mistake]
    plant(monkeypatch, tmp_path, L, kernel, (_OUTER_STORE if kernel == "outer_add_kernel" else _C_STORE, wrong))
    with pytest.raises(AssertionError, match=re.escape(words)):
        if check == "outer_add":
            L.check_outer_add(L.outer_add, quiet=True)
        elif check == "matmul_tiled":
            L.check_matmul(L.matmul_tiled, quiet=True)
        else:
            L.check_matmul(L.matmul_tiled, shapes=[(37, 70, 45)], quiet=True)


@pytest.mark.skipif(not ENV.interpret, reason="TILE is square on the GPU (128 x 128); the interpreter's is not")
@pytest.mark.parametrize(
    "edit",
    [
        ("offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)", "offs_m = pid_m * BLOCK_N + tl.arange(0, BLOCK_M)"),
        ("offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)", "offs_n = pid_n * BLOCK_M + tl.arange(0, BLOCK_N)"),
    ],
    ids=["rows offset with BLOCK_N", "columns offset with BLOCK_M"],
)
def test_tile_offsets_with_the_other_block_size_fail(edit, monkeypatch, tmp_path):
    """tile_dot's rows offset with BLOCK_N (or its columns with BLOCK_M): right with square tiles, which TILE was
    under the interpreter (16 x 16), so matmul_tiled's and matmul_grouped's checks passed it (probe05)."""
    plant(monkeypatch, tmp_path, L, "tile_dot", edit)
    assert L.TILE["BLOCK_M"] != L.TILE["BLOCK_N"]
    for launcher in (L.matmul_tiled, L.matmul_grouped):
        with pytest.raises(AssertionError, match="differs from the reference|never written"):
            L.check_matmul(launcher, quiet=True)


OTHER_SIZE = {  # mistake: (the kernel, its edit, the check, words of the hint)
    "outer_add: column mask with M": (
        "outer_add_kernel", ("(offs_n[None, :] < N)", "(offs_n[None, :] < M)"), "outer_add",
        "Columns from 37 on were never written, and the rest is right: the store's mask compares offs_n with M",
    ),
    "matmul_tiled: column mask with M": (
        "matmul_tiled_kernel", ("(offs_n[None, :] < N)", "(offs_n[None, :] < M)"), "matmul_tiled",
        "Columns from 37 on were never written, and the rest is right: the store's mask compares offs_n with M",
    ),
    "matmul_tiled: row mask with N": (
        "matmul_tiled_kernel", ("(offs_m[:, None] < M)", "(offs_m[:, None] < N)"), "matmul_tiled, M > N",
        "Rows from 20 on were never written, and the rest is right: the store's mask compares offs_m with N",
    ),
    "matmul_naive: m and n from each other's program id": (
        "matmul_naive_kernel",
        ("m = tl.program_id(0)\n    n = tl.program_id(1)", "m = tl.program_id(1)\n    n = tl.program_id(0)"),
        "matmul_naive", "m and n come from each other's program id: the grid is (M, N)",
    ),
}  # fmt: skip


@pytest.mark.parametrize("mistake", list(OTHER_SIZE))
def test_store_mask_with_the_other_size_is_not_called_a_stride_mix_up(mistake, monkeypatch, tmp_path):
    """A store mask compared with the other size (offs_n < M), or the naive kernel's program ids swapped, leaves
    unwritten the elements that swapped strides would: store_stride_hint called each "the two strides are swapped",
    though the strides were right and every value written was too (probe05)."""
    kernel, edit, check, words = OTHER_SIZE[mistake]
    plant(monkeypatch, tmp_path, L, kernel, edit)
    with pytest.raises(AssertionError, match=re.escape(words)) as caught:
        if check == "outer_add":
            L.check_outer_add(L.outer_add, quiet=True)
        elif check == "matmul_naive":
            L.check_matmul(L.matmul_naive, shapes=[(19, 13, 70)], quiet=True)
        else:
            L.check_matmul(L.matmul_tiled, shapes=[(270, 20, 17) if "M > N" in check else (37, 70, 45)], quiet=True)
    assert "strides are swapped" not in str(caught.value)


def test_the_notebook_checks_the_epilogue_without_a_bias():
    """The epilogue's check cells gave it a bias every time: one that loads the bias whatever HAS_BIAS says passed
    them all (probe05). A check cell runs matmul with no bias and no activation."""
    nb = nbformat.read(ROOT / "solutions" / "05_matmul.ipynb", as_version=4)
    checks = ["".join(c.source) for c in nb.cells if "check" in c.metadata.get("tags", [])]
    assert any(re.match(r"check_matmul\(matmul,(?![^\n]*epilogue=True)", c) for c in checks)


def test_an_fp16_accumulator_passed_to_tl_dot_is_explained(monkeypatch, tmp_path):
    """tl.dot(a, b, acc) with acc = tl.zeros(..., dtype=tl.float16): Triton asserts the accumulator's dtype without a
    message (a bare AssertionError, interpreted or compiled); utils.crashes now names the mistake (probe05)."""
    plant(monkeypatch, tmp_path, L, "tile_dot", ("dtype=tl.float32", "dtype=tl.float16"))
    with pytest.raises(Exception) as caught:
        L.check_matmul(L.matmul_tiled, shapes=[(37, 70, 45)], quiet=True)
    hint = crashes.explain(caught.value)
    assert hint is not None and "out_dtype" in hint, f"{caught.value!r} -> {hint}"


def test_a_k_mask_without_its_block_size_is_not_told_the_same_mask(monkeypatch, tmp_path):
    """k_left = K - k (k the step number, not k * BLOCK_K): the last step reads past K, and the hint for those reads
    said "in a K loop, offs_k < K - k", the mistake itself (probe05); it now writes the step's start in full."""
    plant(monkeypatch, tmp_path, L, "tile_dot", ("k_left = K - k * BLOCK_K", "k_left = K - k"))
    with pytest.raises(AssertionError, match="touches memory outside") as caught:
        L.check_matmul(L.matmul_tiled, shapes=[(40, 40, 40)], quiet=True)
    assert "offs_k < K - k * BLOCK_K" in str(caught.value) and "offs_k < K - k)" not in str(caught.value)


@triton.jit
def _planted_order_kernel(
    order_ptr, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr, MISTAKE: tl.constexpr
):
    pid = tl.program_id(0)
    num_pid_m, num_pid_n = tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N)
    if MISTAKE == "num_pid_m":
        num_pid_m = tl.cdiv(M, BLOCK_N)
    per_group = GROUP_M * num_pid_m if MISTAKE == "per_group" else GROUP_M * num_pid_n
    first_m = pid // per_group if MISTAKE == "first_m" else pid // per_group * GROUP_M
    rows = tl.minimum(num_pid_m - first_m, GROUP_M)
    if MISTAKE == "full":
        rows = 0 * first_m + GROUP_M  # the last group taken as full
    pid_m = first_m + pid % rows if MISTAKE == "wrap" else first_m + pid % per_group % rows
    pid_n = pid % per_group // GROUP_M if MISTAKE == "divisor" else pid % per_group // rows
    inside = (pid_m < num_pid_m) & (pid_n < num_pid_n)
    tl.store(order_ptr + pid_m * num_pid_n + pid_n, pid.to(tl.float32), mask=inside)


def _planted_order(mistake):
    def order_of(M, N, BLOCK_M, BLOCK_N, GROUP_M):
        order = utils.nan_empty((triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N)), torch.float32)
        _planted_order_kernel[(order.numel(),)](order, M, N, BLOCK_M, BLOCK_N, GROUP_M, MISTAKE=mistake)
        return order

    return order_of


ORDER_MISTAKES = {
    "": None,
    "first_m": "first_m is missing its \\* GROUP_M",
    "per_group": "tiles_per_group counts the row tiles",
    "divisor": "pid_n divides by GROUP_M",
    "wrap": "without pid % tiles_per_group",
    "num_pid_m": "program -> tile mapping is wrong",  # its tiles may divide by zero: the general hint
}


@pytest.mark.parametrize("order", [None, "reversed", "shuffled"])
@pytest.mark.parametrize("mistake", ORDER_MISTAKES)
def test_planted_tile_mappings_are_named_not_the_grid(mistake, order):
    """Each mistake is named whatever order the programs ran in. Session 26's H100 gave the general mapping hint:
    the check matched each mistake's tile ids as the interpreter leaves them, the last program to land on a tile
    keeping its id; a GPU keeps any of them. It tells the mistakes by the programs that land on each tile now,
    held here to the interpreter's order and two others (utils.order)."""
    with programs_in_order(order):
        if not mistake:
            return L.check_tile_order(_planted_order(""), quiet=True)
        with pytest.raises(AssertionError, match=ORDER_MISTAKES[mistake]) as failure:
            L.check_tile_order(_planted_order(mistake), quiet=True)
    assert "first_m = (pid // tiles_per_group) * GROUP_M" in str(failure.value)
    assert "Launch triton.cdiv" not in str(failure.value) and "grid has too few" not in str(failure.value)


def test_planted_orders_get_their_hints():
    full_last_group = _planted_order("full")

    def row_major(M, N, BLOCK_M, BLOCK_N, GROUP_M):
        return L.tile_order(M, N, BLOCK_M, BLOCK_N, 1)

    with pytest.raises(AssertionError, match="fewer than GROUP_M rows"):
        L.check_tile_order(full_last_group, quiet=True)
    with pytest.raises(AssertionError, match="still row-major"):
        L.check_tile_order(row_major, quiet=True)


def test_tolerance_grows_like_sqrt_k():
    small = L.matmul_tolerance(torch.float16, 100, 1.0)
    large = L.matmul_tolerance(torch.float16, 10_000, 1.0)
    assert large["atol"] == pytest.approx(10 * small["atol"])
    assert large["rtol"] == small["rtol"] == 2 * 2**-11
    assert L.matmul_tolerance(torch.bfloat16, 100, 1.0)["rtol"] == 2 * 2**-8


# -- launchers refuse bad inputs before any launch ------------------------------------------------------------------

MATMULS = ["matmul_naive", "matmul_tiled", "matmul_grouped", "matmul_autotuned", "matmul", "matmul_persistent",
           "matmul_persistent_tma", "matmul_peeled"]  # fmt: skip
EPILOGUES = ["matmul", "matmul_persistent", "matmul_persistent_tma", "matmul_peeled"]


def _t(*shape, dtype=None):
    return torch.randn(*shape, device=DEVICE, dtype=dtype or ENV.dtype)


@pytest.mark.parametrize("launcher", MATMULS)
def test_matmul_launchers_refuse_bad_inputs(launcher):
    f = getattr(L, launcher)
    a, b, square = _t(8, 16), _t(16, 24), _t(16, 16)
    shared = _t(24, 16)  # rows 0-15 are an input, rows 8-23 the output: they overlap
    other = torch.float32 if ENV.dtype != torch.float32 else torch.float16
    bad = {
        "inner dimensions that differ": lambda: f(a, b[:8]),
        "a vector for a": lambda: f(a[0], b),
        "a 3-D b": lambda: f(a, b[None]),
        "a NumPy array": lambda: f(a.float().cpu().numpy(), b),
        "None for b": lambda: f(a, None),
        "integers": lambda: f(a.int(), b.int()),
        "float64": lambda: f(a.double(), b.double()),
        "mixed dtypes": lambda: f(a, b.to(other)),
        "a non-contiguous view": lambda: f(a, b.T.contiguous().T),
        "out of the wrong shape": lambda: f(a, b, out=_t(8, 23)),
        "out of the wrong dtype": lambda: f(a, b, out=_t(8, 24, dtype=other)),
        "out as a NumPy array": lambda: f(a, b, out=np.empty((8, 24), dtype=np.float16)),
        "a non-contiguous out": lambda: f(a, b, out=_t(24, 8).T),
        "out that is a": lambda: f(a, square, out=a),
        "out overlapping a": lambda: f(shared[:16], square, out=shared[8:]),
    }
    if ENV.interpret:
        bad["bfloat16 under the interpreter"] = lambda: f(a.bfloat16(), b.bfloat16())
    if ENV.is_gpu:
        bad["tensors on the CPU"] = lambda: f(a.cpu(), b.cpu())
    if launcher in EPILOGUES:
        bad |= {
            "a bias of the wrong length": lambda: f(a, b, _t(23)),
            "a bias of the wrong dtype": lambda: f(a, b, _t(24, dtype=other)),
            "a 2-D bias": lambda: f(a, b, _t(1, 24)),
            "an unknown activation": lambda: f(a, b, activation="relu"),
            "an activation that is not a name": lambda: f(a, b, activation=1),
            "out overlapping the bias": lambda: f(
                a, b, shared.view(-1)[:24], out=shared.view(-1)[: 8 * 24].view(8, 24)
            ),
        }
    if launcher == "matmul_naive":
        bad["BLOCK_K not a power of two"] = lambda: f(a, b, BLOCK_K=48)
        bad["N past grid axis 1"] = lambda: f(a, torch.empty(16, 65536, device=DEVICE, dtype=ENV.dtype))
    if launcher in ("matmul_tiled", "matmul_grouped", "matmul_peeled"):
        bad["BLOCK_M not a power of two"] = lambda: f(a, b, BLOCK_M=48)
        bad["BLOCK_N below tl.dot's 16"] = lambda: f(a, b, BLOCK_N=8)
        bad["num_stages of 0"] = lambda: f(a, b, num_stages=0)
        bad["an unknown configuration"] = lambda: f(a, b, BLOCK_Q=16)
        bad["an accumulator past Triton's largest block"] = lambda: f(a, b, BLOCK_M=2048, BLOCK_N=1024, BLOCK_K=16)
    if launcher in ("matmul_grouped", "matmul_peeled"):
        bad["GROUP_M not a power of two"] = lambda: f(a, b, GROUP_M=3)
    if launcher == "matmul_persistent_tma":
        bad["rows TMA cannot read (K = 12)"] = lambda: f(_t(8, 12), _t(12, 24))
    before = shared.clone()
    utils.refuses(bad, quiet=True)
    assert torch.equal(shared, before), "a refused call wrote into its inputs: validate before launching"


def test_outer_add_and_tile_order_refuse_bad_inputs():
    x, y = _t(8, dtype=torch.float32), _t(12, dtype=torch.float32)
    buf = _t(8 * 12 + 8, dtype=torch.float32)
    utils.refuses(
        {
            "a 2-D y": lambda: L.outer_add(x, y[None]),
            "integers": lambda: L.outer_add(x.int(), y.int()),
            "mixed dtypes": lambda: L.outer_add(x, y.half()),
            "out of the wrong shape": lambda: L.outer_add(x, y, out=_t(12, 8, dtype=torch.float32)),
            "out overlapping x": lambda: L.outer_add(buf[:8], y, out=buf[4:100].view(8, 12)),
            "BLOCK_M not a power of two": lambda: L.outer_add(x, y, BLOCK_M=12),
            "a block past Triton's largest": lambda: L.outer_add(x, y, BLOCK_M=2048, BLOCK_N=1024),
            "None for x": lambda: L.outer_add(None, y),
            "BLOCK_N not a power of two": lambda: L.tile_order(100, 100, 16, 24, 2),
            "GROUP_M of 0": lambda: L.tile_order(100, 100, 16, 16, 0),
            "a negative M": lambda: L.tile_order(-1, 100, 16, 16, 2),
        },
        quiet=True,
    )


# -- empty problems: no kernel, the right result ----------------------------------------------------------------------


@pytest.mark.parametrize("launcher", MATMULS)
# session 35: the rows of (5, 0, 7), (0, 5, 7) and (3, 5, 0) are not on 16 bytes, and matmul_persistent_tma refused
# them by its TMA alignment check before it saw that there was nothing to compute
@pytest.mark.parametrize("M, N, K", [(0, 24, 16), (8, 0, 16), (8, 24, 0), (0, 0, 0), (5, 0, 7), (0, 5, 7), (3, 5, 0)])
def test_empty_problems(launcher, M, N, K):
    f = getattr(L, launcher)
    a, b, bias = _t(M, K), _t(K, N), _t(N)
    extra = (bias, "gelu") if launcher in EPILOGUES else ()
    c = f(a, b, *extra, out=utils.nan_empty((M, N), ENV.dtype))
    want = L.matmul_ref(a.double(), b.double(), *(t.double() if isinstance(t, torch.Tensor) else t for t in extra))
    utils.check(c, want, name=f"{launcher} of ({M}, {K}) by ({K}, {N})", quiet=True)


@pytest.mark.parametrize("M, N, K", [(8, 24, 0), (0, 24, 16), (8, 0, 16)])
def test_check_matmul_takes_empty_shapes(M, N, K):
    """(session 36) Peers' batteries hold empty problems: check_matmul drew a and b scaled by K**-0.25
    (ZeroDivisionError at K = 0) and took |C| from the mean of an empty operand (NaN: an atol utils.check refused)."""
    for epilogue in (False, True):
        L.check_matmul(L.matmul, shapes=[(M, N, K)], epilogue=epilogue, dtype=torch.float32, quiet=True)


def test_fp32_epilogue_at_k_0_is_rounded_once():
    """(session 36) At K = 0, C is activation(bias) alone and matmul_tolerance allows only the output's rounding
    (atol 0: there is no sum): the launchers computed it in fp32, whose GELU was off by a few units in the last place
    in about 1 element of 8, out of tolerance against the fp64 spec."""
    g = torch.Generator().manual_seed(36)
    bias = torch.randn(512, generator=g).to(DEVICE)
    a, b = torch.empty(3, 0, device=DEVICE), torch.empty(0, 512, device=DEVICE)
    for name in EPILOGUES:
        for activation in ("gelu", "silu"):
            want = L.matmul_ref(a.double(), b.double(), bias.double(), activation)
            got = getattr(L, name)(a, b, bias, activation)
            tolerance = L.matmul_tolerance(torch.float32, 0, 0.0)
            utils.check(got, want, name=f"{name} {activation} at K = 0", quiet=True, **tolerance)


def test_tma_refusal_names_the_misalignment_it_found():
    """(session 36) A view that starts 4 bytes into a buffer, its rows 32 elements apart, was refused with "its row
    length must be a multiple of 4 elements": true of it already, so the message pointed at the wrong fix."""
    off = torch.randn(1 + 32 * 32, device=DEVICE)[1:].view(32, 32)
    with pytest.raises(ValueError, match=r"a \(shape \(32, 32\)\).* starts 4 bytes past one .*\.clone\(\)"):
        L.matmul_persistent_tma(off, torch.randn(32, 16, device=DEVICE))
    with pytest.raises(ValueError, match=r"b \(shape \(32, 15\)\).* rows are 15 elements apart, not a multiple of 4"):
        L.matmul_persistent_tma(torch.randn(8, 32, device=DEVICE), torch.randn(32, 15, device=DEVICE))


def test_tile_order_takes_numpy_sizes():
    """NumPy ints for M and N (as a sweep over np.arange gives them) were refused as 'not a non-negative int'."""
    got = L.tile_order(np.int64(100), np.int32(200), 32, 64, 2)
    assert torch.equal(got.cpu(), L.tile_order_ref(100, 200, 32, 64, 2))


def test_empty_outer_add_and_tile_order():
    assert L.outer_add(_t(0, dtype=torch.float32), _t(5, dtype=torch.float32)).shape == (0, 5)
    assert L.tile_order(0, 100, 16, 16, 2).shape == (0, 7)


# -- GPUs with less shared memory ------------------------------------------------------------------------------------

H200_CONFIGS = [
    (128, 256, 64, 8, 4),
    (128, 256, 64, 8, 3),
    (128, 128, 64, 4, 4),
    (128, 128, 64, 4, 3),
    (64, 128, 64, 4, 4),
]
# SMALL_M_CONFIGS on a GPU
SMALL_M_GPU_CONFIGS = [(16, 64, 256, 4, 4), (32, 32, 256, 4, 4), (16, 32, 256, 2, 4), (16, 64, 128, 4, 4)]


@pytest.mark.parametrize("budget", [64 * 1024, 163 * 1024, 227 * 1024], ids=["T4", "A100", "H100"])
def test_only_configs_that_fit_are_tuned(budget, monkeypatch):
    monkeypatch.setattr(L, "env", dataclasses.replace(L.env, shared_memory_bytes=budget))
    configs = [L.make_config(*c) for c in H200_CONFIGS]
    for elem in (2, 4):
        for tma_store in (False, True):
            kept = L.fitting_configs(configs, elem, tma_store)
            assert kept, "the autotuner needs at least one configuration"
            assert all(L.smem_bytes(**L.blocks_of(c), elem=elem, tma_store=tma_store) <= budget for c in kept)
    a16 = torch.empty(1, 1, dtype=torch.float16)
    assert L.prune_configs(configs, {"a_ptr": a16, "M": 4096}) == L.fitting_configs(configs, 2)
    assert L.prune_tma_configs(configs, {"a_desc": _desc(a16)}) == L.fitting_configs(configs, 2, tma_store=True)
    tile = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=4, num_stages=3)
    for elem in (2, 4):
        assert L.fits(L.tile_config(tile, {}, elem), elem)  # the fixed tile of steps 2 and 3 shrinks to fit
    if budget == 64 * 1024:
        assert L.fitting_configs(configs, 2) != configs  # a T4 really loses the big ones
        with pytest.raises(ValueError, match="shared memory"):
            L.tile_config(tile, {"num_stages": 4}, 2)  # asked for explicitly: refused, not shrunk


# -- the figures the lesson quotes come from committed results ------------------------------------------------------


def test_quoted_figures_keep_their_markers():
    """The lesson's measured figures name their rows of results/ (tests/test_figures.py checks every marked figure
    against its row for the whole course)."""
    from utils import figures

    prose = "\n".join(c.source for c in nbformat.read(ROOT / "solutions" / "05_matmul.ipynb", 4).cells)
    assert len(figures.figures(prose, "05")) > 40, "the lesson's measured figures lost their markers"


def test_row_alignment_is_the_largest_power_of_two_dividing_every_size():
    assert L.row_alignment(4096, 4096, 4096) == 16
    assert L.row_alignment(1000, 5000, 1000, 5000, 5000) == 8
    assert L.row_alignment(1000, 5000, 1002) == 2
    assert L.row_alignment(999, 5000) == 1
    assert L.row_alignment(32, 64, 0) == 16  # an empty dimension does not limit it


def _matmul_job(config, dtype="fp16", capability=90, M=4096, N=4096, K=4096, ALIGN=16):
    """lesson 05's matmul_kernel as matmul() launches it, for utils.offline: config (BLOCK_M, BLOCK_N, BLOCK_K,
    num_warps, num_stages), A (M, K) and B (K, N) contiguous."""
    BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages = config
    return offline.job(
        "matmul_kernel",
        pointers=dict(a_ptr=dtype, b_ptr=dtype, c_ptr=dtype, bias_ptr=dtype),
        ints=dict(M=M, N=N, K=K, stride_am=K, stride_ak=1, stride_bk=N, stride_bn=1, stride_cm=N, stride_cn=1),
        constexprs=dict(
            BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=8, HAS_BIAS=False, ACTIVATION=None, ALIGN=ALIGN
        ),  # fmt: skip
        num_warps=num_warps,
        num_stages=num_stages,
        capability=capability,
    )


@pytest.mark.skipif(not offline.available(), reason="needs Triton's NVIDIA backend and its ptxas")
def test_odd_shapes_compile_to_the_fast_path_once_the_launcher_passes_align():
    """Compiled for an H100 (sm_90) without a GPU: at 3000 x 5000 x 1000 no size is a multiple of 16, and without the
    ALIGN hint the kernel loads one element at a time and spills; with the ALIGN the launcher passes (8) it copies
    16-byte vectors and spills nothing, like at 4096^3. This is the collapse the lesson's "Odd shapes" explains."""
    config = H200_CONFIGS[0]  # the first of MATMUL_CONFIGS on a GPU: 128 x 256 x 64, 8 warps, 4 stages
    assert L.row_alignment(1000, 5000, 1000, 5000, 5000) == 8  # what matmul() passes at this shape
    odd = dict(M=3000, N=5000, K=1000)
    round_, odd, odd_unhinted = offline.compile_kernels(
        L.__file__, [_matmul_job(config), _matmul_job(config, ALIGN=8, **odd), _matmul_job(config, ALIGN=1, **odd)]
    )
    for compiled in (round_, odd):
        assert compiled.uses_wgmma and compiled.cp_async_bytes == {16} and compiled.spill_bytes == 0
        assert compiled.scalar_global_loads == 0
    assert not odd_unhinted.cp_async_bytes and odd_unhinted.scalar_global_loads > 0  # the slow path, still there


def test_small_m_configs_are_tried_for_a_few_rows_only(monkeypatch):
    small = [L.make_config(16, 64, 128, num_warps=4, num_stages=4)]
    monkeypatch.setattr(L, "SMALL_M_CONFIGS", small)  # (empty under the interpreter, where nothing is tuned)
    # an H100's shared memory whatever runs the test: on a T4 (TRITON_HARD_WAY_AS=7.5) no config fits in 64 KB and
    # fitting_configs returns one config shrunk to fit, which is not what this test is about
    monkeypatch.setattr(L, "env", dataclasses.replace(L.env, shared_memory_bytes=227 * 1024))
    configs = [L.make_config(*c) for c in H200_CONFIGS]
    a16 = torch.empty(1, 1, dtype=torch.float16)
    few = L.prune_configs(configs, {"a_ptr": a16, "M": 16})
    many = L.prune_configs(configs, {"a_ptr": a16, "M": L.SMALL_M + 1})
    assert small[0] in few and small[0] not in many
    assert all(c in few for c in many)  # the usual ones stay candidates: the autotuner decides


@pytest.mark.skipif(not offline.available(), reason="needs Triton's NVIDIA backend and its ptxas")
def test_tensor_cores_from_an_a100_on_not_on_a_t4():
    """What the lesson says about Colab's T4: the pinned Triton compiles tl.dot for sm_75 to plain FMAs (no mma),
    for sm_80 to mma.sync. If a Triton release adds a Turing tensor-core path, this fails and the text must change."""
    t4, a100 = offline.compile_kernels(L.__file__, [_matmul_job((64, 128, 64, 4, 2), capability=c) for c in (75, 80)])
    assert "mma" not in t4.ptx and "fma.rn" in t4.ptx
    assert "mma.sync" in a100.ptx


@pytest.mark.skipif(not offline.available(), reason="needs Triton's NVIDIA backend and its ptxas")
@pytest.mark.parametrize("capability, budget", [(75, 64 * 1024), (80, 163 * 1024), (90, 227 * 1024)])
def test_the_configs_kept_for_a_gpu_fit_its_shared_memory_as_the_compiler_counts_it(capability, budget, monkeypatch):
    """fitting_configs decides from smem_bytes, an estimate; the compiler's own count for that GPU must not exceed
    the budget (a launch asking for more fails with 'out of resources')."""
    monkeypatch.setattr(L, "env", dataclasses.replace(L.env, shared_memory_bytes=budget))
    jobs, kept = [], []
    for elem, dtype in ((2, "fp16"), (4, "fp32")):
        for c in L.fitting_configs([L.make_config(*c) for c in H200_CONFIGS + SMALL_M_GPU_CONFIGS], elem):
            k = c.kwargs
            config = (k["BLOCK_M"], k["BLOCK_N"], k["BLOCK_K"], c.num_warps, c.num_stages)
            jobs.append(_matmul_job(config, dtype, capability))
            kept.append((dtype, config))
    for (dtype, config), compiled in zip(kept, offline.compile_kernels(L.__file__, jobs)):
        assert compiled.shared <= budget, f"{dtype} {config} on sm_{capability}: {compiled.shared} B > {budget} B"


# -- the K tail peeled off (matmul_peeled) and the wave-aware prune ---------------------------------------------------

#: K = 1 (no whole step), K below one block, K a whole number of blocks, a tail of one; one row; one column
PEELED_SHAPES = ENV.pick(
    cpu=[(37, 45, 70), (5, 3, 1), (20, 17, 9), (33, 40, 64), (1, 29, 33), (20, 1, 17)],
    gpu=[(1000, 1337, 999), (77, 300, 1), (300, 1, 1000)],  # few: each new shape compiles what the autotuner keeps
)


def test_peeled():
    L.check_matmul(L.matmul_peeled, shapes=PEELED_SHAPES, quiet=True)


@pytest.mark.parametrize("dtype", DTYPES, ids=utils.dtype_name)
def test_peeled_every_dtype_with_an_epilogue(dtype):
    L.check_matmul(L.matmul_peeled, shapes=AWKWARD, epilogue=True, activation="silu", dtype=dtype, quiet=True)


@pytest.mark.parametrize(
    "config",
    ENV.pick(
        cpu=[dict(BLOCK_K=32), dict(BLOCK_M=32, BLOCK_N=16, BLOCK_K=64), dict(BLOCK_K=16, GROUP_M=2)],
        gpu=[dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=3), dict(BLOCK_K=32, num_stages=5)],
    ),
    ids=str,
)
def test_peeled_fixed_configs(config):
    """A fixed configuration (what the sweep times): the tail is K % BLOCK_K for each BLOCK_K, 0 included."""
    run = lambda a, b, *, out: L.matmul_peeled(a, b, out=out, **config)
    L.check_matmul(run, shapes=ENV.pick(cpu=PEELED_SHAPES[:4], gpu=PEELED_SHAPES), quiet=True)


def test_peeled_is_deterministic():
    """No atomics and no split of K across programs: the same inputs give the same bits, run after run."""
    M, N, K = PEELED_SHAPES[0]
    a, b = _t(M, K), _t(K, N)
    first = L.matmul_peeled(a, b)
    assert torch.equal(first, L.matmul_peeled(a, b))


@triton.jit
def _peeled_planted_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK: tl.constexpr, MISTAKE: tl.constexpr):
    """tile_dot_peeled for contiguous A, B and C in BLOCK x BLOCK x BLOCK tiles, with one mistake planted."""
    offs_m = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    offs_n = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    offs_k = tl.arange(0, BLOCK)
    a_ptrs = a_ptr + offs_m[:, None] * K + offs_k[None, :]
    b_ptrs = b_ptr + offs_k[:, None] * N + offs_n[None, :]
    in_m, in_n = offs_m[:, None] < M, offs_n[None, :] < N
    acc = tl.zeros((BLOCK, BLOCK), dtype=tl.float32)
    for _ in range(0, K // BLOCK):
        acc = tl.dot(tl.load(a_ptrs, mask=in_m, other=0.0), tl.load(b_ptrs, mask=in_n, other=0.0), acc)
        a_ptrs += BLOCK
        b_ptrs += BLOCK * N
    k_left = K - K // BLOCK * BLOCK
    if MISTAKE == "unmasked_tail":
        k_left = BLOCK + 0 * k_left  # the tail read as a whole block: past K, into the next row of A
    if MISTAKE != "no_tail" and k_left > 0:
        a = tl.load(a_ptrs, mask=in_m & (offs_k[None, :] < k_left), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & in_n, other=0.0)
        acc = tl.dot(a, b, acc)
    tl.store(c_ptr + offs_m[:, None] * N + offs_n[None, :], acc.to(c_ptr.dtype.element_ty), mask=in_m & in_n)


def _peeled_planted(mistake):
    def launcher(a, b, *, out):
        (M, K), N = a.shape, b.shape[1]
        _peeled_planted_kernel[(triton.cdiv(M, 16), triton.cdiv(N, 16))](a, b, out, M, N, K, BLOCK=16, MISTAKE=mistake)
        return out

    launcher.__name__ = f"peeled_{mistake or 'nothing'}"
    return launcher


def test_peeled_planted_kernel_without_a_mistake_passes():
    L.check_matmul(_peeled_planted(""), shapes=PLANT_SHAPES, quiet=True)


def test_peeled_without_its_tail_gets_the_tail_hint():
    with pytest.raises(AssertionError, match="misses its last, partial step"):
        L.check_matmul(_peeled_planted("no_tail"), shapes=PLANT_SHAPES[1:], quiet=True)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the interpreter multiplies what it read past the ends
def test_peeled_with_an_unmasked_tail_fails():
    """The tail read as a whole block adds products past K (from A's next row, B's rows past K): caught."""
    with pytest.raises(AssertionError):
        L.check_matmul(_peeled_planted("unmasked_tail"), shapes=PLANT_SHAPES[1:], quiet=True)


def _h100(monkeypatch, budget=227 * 1024):
    monkeypatch.setattr(L, "env", dataclasses.replace(L.env, shared_memory_bytes=budget, sm_count=132))


def _tiles(configs):
    return [(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_stages) for c in configs]


def _desc(t):
    """A host-built TMA descriptor of t's dtype, as matmul_tma_kernel's prune hook gets it (16 x 16, on the CPU)."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    return TensorDescriptor.from_tensor(torch.empty(16, 16, dtype=t.dtype), [16, 16])


def test_wave_prune_keeps_the_tiles_that_fill_the_gpu(monkeypatch):
    """On 132 SMs: at 1024^3 only 64 x 128 tiles (128 programs; 128 x 256 would make 32); at the large and the awkward
    shapes the fast 128 x 256 tiles, both stage counts (the autotuner decides between them)."""
    _h100(monkeypatch)
    configs = [L.make_config(*c) for c in H200_CONFIGS]
    a16 = torch.empty(1, 1, dtype=torch.float16)
    assert _tiles(L.prune_configs(configs, {"a_ptr": a16, "M": 1024, "N": 1024})) == [(64, 128, 4)]
    for M, N in [(3000, 5000), (4096, 4096), (8192, 8192), (2048, 5632)]:
        kept = _tiles(L.prune_configs(configs, {"a_ptr": a16, "M": M, "N": N}))
        assert kept == [(128, 256, 4), (128, 256, 3)], (M, N, kept)
    assert L.wave_estimate(configs[0], 3000, 5000, 132) == 4 * 128 * 256  # 480 tiles: 4 rounds, the last partial
    # TMA: 64 x 128 is also the one kept at 1024^3, among the configs that fit with the C tile staged
    tma = [L.make_config(128, 256, 64, 8, 3), L.make_config(128, 128, 64, 4, 4), L.make_config(64, 128, 64, 4, 4)]
    assert _tiles(L.prune_tma_configs(tma, {"a_desc": _desc(a16), "M": 1024, "N": 1024})) == [(64, 128, 4)]
    # a few rows: the small-M configurations, no wave rule
    few = L.prune_configs(configs, {"a_ptr": a16, "M": 16, "N": 4096})
    assert len(few) == len(L.fitting_configs([*L.SMALL_M_CONFIGS, *configs], 2))


@pytest.mark.parametrize("budget", [64 * 1024, 163 * 1024], ids=["T4", "A100"])
def test_wave_prune_only_chooses_among_configs_that_fit(budget, monkeypatch):
    """With less shared memory (TRITON_HARD_WAY_AS=7.5 / 8.0) the shared-memory rule runs first: whatever the wave
    rule prefers, every configuration the autotuner gets fits, and there is at least one."""
    _h100(monkeypatch, budget)
    configs = [L.make_config(*c) for c in H200_CONFIGS]
    for elem, dtype in ((2, torch.float16), (4, torch.float32)):
        a = torch.empty(1, 1, dtype=dtype)
        for M, N in [(1024, 1024), (3000, 5000), (4096, 4096), (16, 4096)]:
            kept = L.prune_configs(configs, {"a_ptr": a, "M": M, "N": N})
            assert kept and all(L.fits(c, elem) for c in kept), (budget, elem, M, N)
            kept = L.prune_tma_configs(configs, {"a_desc": _desc(a), "M": M, "N": N})
            assert kept and all(L.fits(c, elem, tma_store=True) for c in kept), (budget, elem, M, N)


@pytest.mark.skipif(not offline.available(), reason="needs Triton's NVIDIA backend and its ptxas")
def test_peeled_kernel_compiles_to_the_fast_path_at_the_odd_shape():
    """Compiled for an H100 at 3000 x 5000 x 1000 (ALIGN = 8): the whole steps go through 16-byte cp.async and wgmma,
    nothing spills, and the tail step's loads are 16-byte vectors too (with `K % BLOCK_K` they were not)."""
    import re

    job = _matmul_job(H200_CONFIGS[0], ALIGN=8, M=3000, N=5000, K=1000)
    job["kernel"] = "matmul_peeled_kernel"
    (compiled,) = offline.compile_kernels(L.__file__, [job])
    assert compiled.uses_wgmma and compiled.cp_async_bytes == {16} and compiled.spill_bytes == 0
    loads = re.findall(r"\sld\.global[\w.]*", compiled.ptx)
    assert loads and all(".v4." in x for x in loads), sorted(set(loads))


@pytest.mark.skipif(not ENV.interpret, reason="on a GPU the compiler may order the two kernels' products differently")
def test_peeled_sums_in_the_same_order_as_tile_dot():
    """Peeling moves no product and changes no order: the same bits as the grouped kernel at the same configuration."""
    config = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, GROUP_M=2, num_warps=4, num_stages=1)
    for M, N, K in [(37, 45, 70), (20, 17, 9), (33, 40, 64)]:
        a, b = _t(M, K), _t(K, N)
        assert torch.equal(L.matmul_peeled(a, b, **config), L.matmul_grouped(a, b, **config)), (M, N, K)


# -- odd shapes: the operands copied into padded buffers (pad_operands, PAD_RULE) -------------------------------------

#: K and N odd (ALIGN = 1 without padding), K a whole number of vectors but N not, a single row
PADDED_SHAPES = ENV.pick(cpu=[(20, 33, 17), (16, 24, 40), (1, 29, 33)], gpu=[(1000, 1337, 999)])


@pytest.mark.parametrize("rule", L.PAD_RULES)
def test_matmul_at_odd_shapes_with_and_without_padding(rule):
    def matmul(a, b, bias=None, activation=None, *, out=None):
        return L.matmul(a, b, bias, activation, out=out, pad=rule)

    L.check_matmul(matmul, shapes=PADDED_SHAPES, epilogue=True, activation="silu", quiet=True)


def test_pad_operands_pads_what_is_misaligned_with_zeros_and_nothing_else():
    a, b, out = _t(20, 17), _t(17, 33), torch.empty(20, 33, device=DEVICE, dtype=torch.float16)
    pa, pb, pc, _ = L.pad_operands(a, b, out, None, "unaligned")  # fp16: 8 elements a 16-byte vector
    assert pa.shape == (20, 24) and pa.stride() == (24, 1) and pb.shape == (24, 40) and pc.shape == (20, 40)
    assert torch.equal(pa[:, :17], a) and torch.equal(pb[:17, :33], b)
    assert not pa[:, 17:].any() and not pb[17:].any() and not pb[:, 33:].any()  # zeros past K add nothing
    la, lb, _, _ = L.pad_operands(a, b, out, None, "lines")  # rows on 128-byte lines: 64 fp16 elements
    assert la.shape == (20, 24) and la.stride(0) == 64 and lb.stride(0) == 64 and torch.equal(la, pa)
    la, lb, _, _ = L.pad_operands(a, b, out, None, "lines_a")  # A's rows only
    assert la.stride(0) == 64 and lb.stride(0) == 40 and torch.equal(lb, pb)
    a, b, out = _t(16, 40), _t(40, 24), torch.empty(16, 24, device=DEVICE, dtype=torch.float16)
    same = L.pad_operands(a, b, out, None, "unaligned")  # every row already a whole number of 16-byte vectors
    assert same[0] is a and same[1] is b and same[2] is out
    assert L.pad_operands(a, b, out, None, "never")[:3] == (a, b, out)


def test_a_misaligned_view_stays_right_and_is_copied_when_padding():
    """A contiguous view that starts one element into its storage: its rows are not on 16-byte boundaries whatever
    the sizes. Unpadded, Triton sees the pointer is not a multiple of 16 and takes the element-wise path; padded, the
    launcher copies it first. Both must be right."""
    M, N, K = 16, 24, 40
    a = torch.randn(M * K + 1, device=DEVICE).half()[1:].view(M, K)
    b = _t(K, N, dtype=torch.float16)
    assert a.is_contiguous() and a.data_ptr() % 16
    ref = L.matmul_ref(a.double(), b.double())
    for rule in ("never", "unaligned"):
        utils.check(L.matmul(a, b, pad=rule), ref, atol=1e-2, rtol=1e-2, reason="fp16 output", quiet=True)
    pa, pb, _, _ = L.pad_operands(a, b, torch.empty(M, N, device=DEVICE, dtype=a.dtype), None, "unaligned")
    assert pa is not a and pa.data_ptr() % 16 == 0 and pb is b


def test_padding_applies_from_pad_min_flops_and_the_autotuner_keys_on_it(monkeypatch):
    a, b = _t(20, 17), _t(17, 33)
    strides = {}
    for min_flops in (L.matmul_flops(20, 33, 17) + 1, 0):
        monkeypatch.setattr(L, "PAD_MIN_FLOPS", min_flops)
        monkeypatch.setattr(L, "PAD_RULE", "unaligned")
        with offline.record_launches() as launched:
            L.matmul(a, b)
        strides[min_flops] = [(j["ints"]["stride_am"], j["constexprs"]["ALIGN"]) for j in launched]
    if ENV.interpret:  # (record_launches sees launches under the interpreter only)
        assert strides[L.matmul_flops(20, 33, 17) + 1] == [(17, 1)] and strides[0] == [(24, 8)]
    assert {"ALIGN", "stride_am", "stride_bk"} <= set(L.matmul_kernel.keys)  # padded inputs are tuned apart
    utils.refuses({"pad='yes'": lambda: L.matmul(a, b, pad="yes")})


@pytest.mark.skipif(not offline.available(), reason="needs Triton's NVIDIA backend and its ptxas")
def test_padding_at_an_odd_k_gives_the_kernel_16_byte_copies():
    """Compiled for an H100 (sm_90) at the GPU's first configuration, with what matmul() passes at 20 x 33 x 17 (as odd
    as 2999 x 3001 x 4093): unpadded, ALIGN = 1 and one element at a time; padded ("unaligned"), ALIGN = 8 and only
    16-byte cp.async copies, no scalar loads, no spills."""
    if not ENV.interpret:
        pytest.skip("record_launches sees launches under the interpreter only")
    a, b = _t(20, 17), _t(17, 33)
    jobs = []
    for rule in ("never", "unaligned"):
        with offline.record_launches() as launched:
            L.matmul(a, b, pad=rule)
        (job,) = launched
        BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages = H200_CONFIGS[0]
        job["constexprs"].update(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=8)
        jobs.append(dict(job, num_warps=num_warps, num_stages=num_stages))
    assert [j["constexprs"]["ALIGN"] for j in jobs] == [1, 8]
    never, padded = offline.compile_kernels(L.__file__, jobs)
    assert not never.cp_async_bytes and never.scalar_global_loads > 0
    assert padded.uses_wgmma and padded.cp_async_bytes == {16} and padded.scalar_global_loads == 0
    assert padded.spill_bytes == 0


@pytest.mark.skipif(not offline.available(), reason="needs Triton's NVIDIA backend and its ptxas")
def test_a_misaligned_view_is_loaded_narrowly_unless_padded():
    """ALIGN speaks of strides only; the base pointer is Triton's to check. Compiled for sm_90 with what matmul()
    passes for a view that starts one element in: ALIGN is 8, yet A comes in 2 bytes at a time (Triton saw the
    pointer was not a multiple of 16), so the hint cannot make a misaligned view unsafe. Padded, A is a fresh copy and
    every copy is 16 bytes."""
    if not ENV.interpret:
        pytest.skip("record_launches sees launches under the interpreter only")
    M, N, K = 16, 24, 40
    a = torch.randn(M * K + 1, device=DEVICE).half()[1:].view(M, K)
    b = _t(K, N, dtype=torch.float16)
    jobs = []
    for rule in ("never", "unaligned"):
        with offline.record_launches() as launched:
            L.matmul(a, b, pad=rule)
        (job,) = launched
        BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages = H200_CONFIGS[0]
        job["constexprs"].update(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=8)
        jobs.append(dict(job, num_warps=num_warps, num_stages=num_stages))
    assert "a_ptr" in jobs[0]["unaligned"] and not jobs[1]["unaligned"]
    assert jobs[0]["constexprs"]["ALIGN"] == jobs[1]["constexprs"]["ALIGN"] == 8
    never, padded = offline.compile_kernels(L.__file__, jobs)
    assert 2 in never.global_load_bytes  # A, one element at a time
    assert padded.cp_async_bytes == {16} and not padded.global_load_bytes and padded.spill_bytes == 0


def test_matmul_launch_reuses_the_autotuners_pick_without_the_autotuner(monkeypatch):
    """matmul_launch keeps no cache of its own: it looks the autotuner's pick up under the autotuner's own key
    (tuning_key) and, once one is filed, launches it directly. Two configurations make the autotuner key and file
    its pick (with one it does neither); its timing is replaced, so this runs under the interpreter too."""
    kernel = L.matmul_kernel
    config = kernel.configs[0]
    monkeypatch.setattr(kernel, "configs", [config, config])
    monkeypatch.setattr(kernel, "cache", {})
    monkeypatch.setattr(kernel, "prune_configs", lambda kwargs: [config])
    monkeypatch.setattr(kernel, "_bench", lambda *args, config, **meta: [1.0, 1.0, 1.0])
    M, N, K = ENV.pick(cpu=(37, 24, 40), gpu=(1000, 1337, 999))
    a = torch.randn(M, K, device=DEVICE, dtype=torch.float16)
    b = torch.randn(K, N, device=DEVICE, dtype=torch.float16)
    bias = torch.randn(N, device=DEVICE, dtype=torch.float16)
    ref = L.matmul_ref(a.double(), b.double(), bias.double(), "silu")
    first = L.matmul(a, b, bias, "silu", pad="never")
    assert len(kernel.cache) == 1, "the autotuner should have filed one pick"

    def through_the_autotuner(*args, **kwargs):
        raise AssertionError("matmul went through the autotuner although its pick was filed: tuning_key differs")

    monkeypatch.setattr(kernel, "run", through_the_autotuner)
    again = L.matmul(a, b, bias, "silu", out=utils.nan_empty((M, N), device=DEVICE, dtype=torch.float16), pad="never")
    for out in (first, again):
        utils.check(out, ref, dtype=torch.float16, quiet=True, name="matmul (bias, silu)", atol=1e-2, rtol=1e-2,
                    reason="fp16 inputs and output, fp32 sums over K = 40")  # fmt: skip
    assert torch.equal(first, again), "the direct launch must run the very configuration the autotuner picked"


def _operands(M, N, K, dtype=torch.float16, offset=0):
    """a (M, K) and b (K, N) filled with random values; offset > 0 starts a that many elements into its storage."""
    a = torch.randn(M * K + offset, device=DEVICE).to(dtype)[offset:].view(M, K)
    return a, torch.randn(K, N, device=DEVICE).to(dtype)


def test_call_signature_tells_apart_every_call_that_takes_another_path(monkeypatch):
    """matmul skips its checks for a call whose call_signature it has launched before: the signature must differ
    wherever the checks or the path could (shapes, strides, dtypes, alignment, bias, out, activation, pad, the
    settings), and be the same for fresh operands of the same kind."""
    sig = L.call_signature
    a, b = _operands(40, 24, 32)
    a2, b2 = _operands(40, 24, 32)
    base = sig(a, b)
    assert base is not None and sig(a2, b2) == base, "fresh operands of the same kind share a signature"
    bias = torch.zeros(24, device=DEVICE, dtype=torch.float16)
    out = torch.empty(40, 24, device=DEVICE, dtype=torch.float16)
    others = {
        "a starting 2 bytes off a 16-byte boundary": sig(_operands(40, 24, 32, offset=1)[0], b),
        "another K": sig(*_operands(40, 24, 48)),
        "another dtype": sig(*_operands(40, 24, 32, dtype=torch.float32)),
        "a transposed view": sig(a2.T.contiguous().T, b),
        "a bias": sig(a, b, bias),
        "an activation": sig(a, b, None, "gelu"),
        "an out": sig(a, b, out=out),
        "a pad rule": sig(a, b, pad="never"),
    }
    for what, other in others.items():
        assert other is not None and other != base, f"{what} must change the call's signature"
    monkeypatch.setattr(L, "PAD_RULE", "never")
    assert sig(a, b) != base, "a changed PAD_RULE must change the signature (matmul reads it at each call)"
    for args in [(a.cpu().numpy(), b), (a, b, None, ["gelu"])]:
        assert sig(*args) is None, "arguments a signature cannot describe get none (matmul checks them in full)"


@pytest.mark.parametrize("shape", ENV.pick(cpu=[(37, 45, 70)], gpu=[(999, 1336, 1000), (2048, 4096, 4096)]))
def test_a_repeated_matmul_launches_the_prepared_kernel(monkeypatch, shape):
    """The second call with one signature goes through PREPARED (utils.launch): on a GPU it must skip the checks,
    give bit for bit what the full path gave, still refuse an out that overlaps an operand, and keep apart an
    operand off its 16-byte boundary. 2048 x 4096 x 4096 takes the persistent TMA kernel on Hopper. Under the
    interpreter nothing is compiled, so nothing is prepared."""
    M, N, K = shape
    monkeypatch.setattr(L, "PREPARED", launch.Table())
    a, b = _operands(M, N, K)
    bias = torch.randn(N, device=DEVICE, dtype=torch.float16)
    ref = L.matmul_ref(a.double(), b.double(), bias.double(), "silu")
    n = ENV.pick(cpu=16, gpu=256)  # square: an out of a's own signature can be a itself
    a_sq, b_sq = _operands(n, n, n)
    L.matmul(a_sq, b_sq, out=torch.empty(n, n, device=DEVICE, dtype=torch.float16))  # prepared on a GPU
    with pytest.raises(ValueError, match="overlap|share"):
        L.matmul(a_sq, b_sq, out=a_sq)
    monkeypatch.setattr(L, "PREPARED", launch.Table())
    first = L.matmul(a, b, bias, "silu")
    if ENV.interpret:
        assert len(L.PREPARED) == 0, "under the interpreter there is no compiled kernel to prepare"
        return
    assert len(L.PREPARED) == 1, "the first call's launch should have been kept"
    expected = "matmul_tma_kernel" if L.takes_large_path(a, b, first, M, N, K) else "matmul_kernel"
    assert next(iter(L.PREPARED.values())).compiled.name == expected

    def checked_again(*args, **kwargs):
        raise AssertionError("a repeated call went through matmul_inputs: the prepared launch was not used")

    with monkeypatch.context() as m:
        m.setattr(L, "matmul_inputs", checked_again)
        again = L.matmul(a.clone(), b.clone(), bias.clone(), "silu")
    for got in (first, again):
        utils.check(got, ref, dtype=torch.float16, quiet=True, name="matmul (bias, silu)", atol=2e-2, rtol=1e-2,
                    reason="fp16 inputs and output, fp32 sums over K")  # fmt: skip
    assert torch.equal(first, again), "the prepared launch must run the very kernel the first call ran"
    out = utils.nan_empty((M, N), device=DEVICE, dtype=torch.float16)
    L.matmul(a, b, bias, "silu", out=out)  # signature with an out, prepared
    assert torch.equal(out, first)
    off, _ = _operands(M, N, K, offset=1)
    off.copy_(a)
    shifted = L.matmul(off, b, bias, "silu")
    utils.check(shifted, ref, dtype=torch.float16, quiet=True, name="matmul, a off its 16-byte boundary",
                atol=2e-2, rtol=1e-2, reason="fp16 inputs and output, fp32 sums over K")  # fmt: skip
    prepared = next(iter(L.PREPARED.values()))
    assert not prepared(off, b, torch.empty_like(first), bias), (
        "a Prepared must decline an operand it was not compiled for"
    )


@pytest.mark.skipif(not ENV.supports_tma, reason="the persistent TMA kernel's own launch runs on Hopper")
def test_a_repeated_tma_call_builds_its_descriptors_around_the_new_operands(monkeypatch):
    """matmul_persistent_tma keeps its launch (TMA_PREPARED) with the descriptors' block shapes; a second call with
    the same signature and other values must skip Triton's launch and compute the new product: a descriptor kept
    from the first call would read the first operands."""
    monkeypatch.setattr(L, "TMA_PREPARED", launch.Table())
    M, N, K = 1000, 1336, 1000
    a, b = _operands(M, N, K)
    L.matmul_persistent_tma(a, b)
    assert len(L.TMA_PREPARED) == 1, "the first call's launch should have been kept"
    a2, b2 = _operands(M, N, K)

    def launched_again(*args, **kwargs):
        raise AssertionError("a repeated call built its arguments again: the prepared launch was not used")

    monkeypatch.setattr(L, "tma_launch_args", launched_again)
    out = utils.nan_empty((M, N), device=DEVICE, dtype=torch.float16)
    L.matmul_persistent_tma(a2, b2, out=out)
    utils.check(out, L.matmul_ref(a2.double(), b2.double()), dtype=torch.float16, quiet=True,
                name="matmul_persistent_tma, prepared", atol=2e-2, rtol=1e-2,
                reason="fp16 inputs and output, fp32 sums over K")  # fmt: skip


class _EnvWithTma:
    """The environment as it is, but with TMA: the interpreter emulates the copy engine, so step 7 runs on the CPU."""

    supports_tma = True

    def __getattr__(self, name):
        return getattr(ENV, name)


def test_matmul_hands_large_problems_to_the_tma_kernel_where_told(monkeypatch):
    """TMA_MIN_FLOPS (None until a GPU has timed the switch): from that many FLOPs, on a GPU with TMA, matmul runs
    LARGE_MATMUL (extra step 7); below it, without TMA, at rows off 16-byte boundaries, or with a pad asked for, its
    own kernel. Either way the result is right."""
    assert L.LARGE_MATMUL is L.matmul_persistent_tma
    handed = []
    monkeypatch.setattr(
        L, "LARGE_MATMUL", lambda *a, **k: handed.append(a[0].shape) or L.matmul_persistent_tma(*a, **k)
    )
    # odd: rows off 16-byte boundaries, and more FLOPs than aligned (so that only its rows can keep it off the TMA path)
    aligned, odd = ENV.pick(cpu=((40, 48, 64), (40, 49, 70)), gpu=((1000, 1336, 1000), (1000, 1337, 1001)))
    flops = L.matmul_flops(*aligned)

    def run(shape, **kw):
        M, N, K = shape
        a = torch.randn(M, K, device=DEVICE, dtype=torch.float16)
        b = torch.randn(K, N, device=DEVICE, dtype=torch.float16)
        bias = torch.randn(N, device=DEVICE, dtype=torch.float16)
        out = L.matmul(a, b, bias, "gelu", out=utils.nan_empty((M, N), device=DEVICE, dtype=torch.float16), **kw)
        ref = L.matmul_ref(a.double(), b.double(), bias.double(), "gelu")
        utils.check(out, ref, dtype=torch.float16, quiet=True, name=f"matmul at {shape}",
                    atol=0.05, rtol=0.02, reason="fp16 in and out, fp32 sums over K <= 1000")  # fmt: skip

    monkeypatch.setattr(L, "TMA_MIN_FLOPS", flops)
    run(aligned)
    assert bool(handed) == ENV.supports_tma, "matmul hands over where the GPU has TMA, and only there"
    monkeypatch.setattr(L, "env", _EnvWithTma())
    handed.clear()
    run(aligned)
    assert handed == [aligned[:1] + aligned[2:]], "at TMA_MIN_FLOPS on a GPU with TMA, matmul hands over"
    for shape, kw, why in ((odd, {}, "rows off 16-byte boundaries"), (aligned, {"pad": "never"}, "a pad asked for")):
        handed.clear()
        run(shape, **kw)
        assert not handed, f"{why}: matmul must keep its own kernel"
    monkeypatch.setattr(L, "TMA_MIN_FLOPS", flops + 1)
    handed.clear()
    run(aligned)
    assert not handed, "below TMA_MIN_FLOPS matmul keeps its own kernel"


@pytest.mark.parametrize("name", ["matmul_naive", "matmul_grouped", "matmul", "matmul_persistent"])
@pytest.mark.parametrize("M, N, K", [(1, 1, 8193), (127, 17, 1), (1, 17, 8193), (33, 31, 65)])
def test_skinny_matmuls_at_peers_shapes(name, M, N, K):
    """PyTorch's / Triton tutorials' skinny shapes (M = 1, N = 1, K = 1, K = 8193) through every plain launcher,
    against fp64."""
    g = torch.Generator().manual_seed(5)
    a = torch.randn(M, K, generator=g).to(DEVICE)
    b = torch.randn(K, N, generator=g).to(DEVICE)
    ref = a.double() @ b.double()
    scale = math.sqrt(K)  # |C| of unit-variance operands
    utils.check(getattr(L, name)(a, b), ref, name=name, quiet=True, **L.matmul_tolerance(a.dtype, K, scale))


# -- a third battery of learner mistakes (session 28), planted with utils.mutants.plant -----------------------------


_TILE_LOOP = "tl.range(tl.program_id(0), num_tiles, NUM_SMS)"
_BIAS = (
    "        bias = tl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0)\n"
    "        acc = acc + bias[None, :].to(tl.float32)\n"
)
THIRD_BATTERY = {  # mistake: (function, (old, new) or a list of them, the check, words of the hint it must get)
    "K loop over range(0, K, BLOCK_K) with k_left = K - k * BLOCK_K": (
        "tile_dot", ("for k in range(0, tl.cdiv(K, BLOCK_K)):", "for k in range(0, K, BLOCK_K):"), "tiled",
        "Only the first BLOCK_K",
    ),
    "column mask compared with M": (
        "tile_dot", ("(offs_n[None, :] < N), other", "(offs_n[None, :] < M), other"), "tiled",
        "the column mask compares offs_n with M",
    ),
    "fp32 result rounded to fp16 before the store": (
        "matmul_tiled_kernel", ("acc.to(c_ptr.dtype.element_ty)", "acc.to(tl.float16)"), "tiled fp32",
        "converted to float16 before the store",
    ),
    "activation before the bias": (
        "epilogue",
        [("    if HAS_BIAS:\n" + _BIAS, ""), ("    return acc", "    if HAS_BIAS:\n" + _BIAS + "    return acc")],
        "gelu", "activation is applied before the bias",
    ),
    "GELU with erf": (
        "epilogue", ("acc = acc * tl.sigmoid(2.0 * z)", "acc = 0.5 * acc * (1 + tl.erf(acc * 0.7071067811865476))"),
        "gelu", "GELU is computed with erf",
    ),
    "SiLU as sigmoid": ("epilogue", ("acc = acc * tl.sigmoid(acc)", "acc = tl.sigmoid(acc)"), "silu", "not sigmoid"),
    "pid_n without % tiles_per_group": (
        "grouped_tile", ("pid_n = (pid % tiles_per_group) // rows", "pid_n = pid // rows"), "grouped",
        "program -> tile mapping is wrong",  # (it misses every group but the first: other mapping mistakes can too)
    ),
    "persistent loop starting at 0": (
        "matmul_persistent_kernel", (_TILE_LOOP, "tl.range(0, num_tiles, NUM_SMS)"), "persistent",
        "the persistent loop starts at 0",
    ),
    "persistent loop stopping one tile early": (
        "matmul_persistent_kernel", (_TILE_LOOP, _TILE_LOOP.replace("num_tiles", "num_tiles - 1")), "persistent",
        "stops one tile early",
    ),
    "persistent tile count rounded down": (
        "matmul_persistent_kernel",
        ("num_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)", "num_tiles = (M // BLOCK_M) * (N // BLOCK_N)"),
        "persistent", "the tile count rounds down",
    ),
    # (session 35) each got "Wrong values in many places" before
    "K mask one block short": (
        "tile_dot", ("k_left = K - k * BLOCK_K", "k_left = K - (k + 1) * BLOCK_K"), "tiled",
        "elements of K are missing",  # "The last BLOCK_K = 16 ...": the autotuned BLOCK_K (64 on the H200)
    ),
    "B's rows offset with A's stride": (
        "tile_dot", ("offs_k[:, None] * stride_bk", "offs_k[:, None] * stride_ak"), "tiled",
        "B's rows are offset with A's stride",
    ),
    "GELU without its x": ("epilogue", ("acc = acc * tl.sigmoid(2.0 * z)", "acc = tl.sigmoid(2.0 * z)"), "gelu",
                           "GELU is x * sigmoid(2 z), not sigmoid(2 z) alone"),
    "GELU without sqrt(2 / pi)": ("epilogue", ("z = 0.7978845608028654 * (", "z = ("), "gelu",
                                  "GELU's z lacks its factor sqrt(2 / pi)"),
    "GELU's 0.5 twice": (
        "epilogue", ("acc = acc * tl.sigmoid(2.0 * z)", "acc = 0.5 * acc * tl.sigmoid(2.0 * z)"), "gelu",
        "GELU's 0.5 is counted twice",
    ),
    "SiLU with sigmoid(-x)": ("epilogue", ("acc = acc * tl.sigmoid(acc)", "acc = acc * tl.sigmoid(-acc)"), "silu",
                              "SiLU's sigmoid has its sign flipped"),
    # probe05: the epilogue's branches (bias_ptr is A's pointer without a bias); "Wrong values in many places" before
    "the bias loaded without if HAS_BIAS": (
        "epilogue", ("    if HAS_BIAS:\n        bias = tl.load", "    if True:\n        bias = tl.load"), "no bias",
        "A bias is added though none was given",
    ),
    "the silu branch left out": (
        "epilogue", ('    elif ACTIVATION == "silu":\n        acc = acc * tl.sigmoid(acc)\n', ""), "silu",
        "The epilogue applies no activation where ACTIVATION is 'silu'",
    ),
}  # fmt: skip
THIRD_CHECKS = {
    "tiled": lambda: L.check_matmul(L.matmul_tiled, quiet=True),
    "tiled fp32": lambda: L.check_matmul(L.matmul_tiled, dtype=torch.float32, quiet=True),
    "gelu": lambda: L.check_matmul(L.matmul, shapes=AWKWARD, epilogue=True, activation="gelu", quiet=True),
    "silu": lambda: L.check_matmul(L.matmul, shapes=AWKWARD, epilogue=True, activation="silu", quiet=True),
    "no bias": lambda: L.check_matmul(L.matmul, shapes=AWKWARD, quiet=True),
    "grouped": lambda: L.check_matmul(L.matmul_grouped, quiet=True),
    "persistent": lambda: L.check_matmul(L.matmul_persistent, epilogue=True, activation="silu", quiet=True),
}
#: fp32 goes through TF32 on the GPU, whose tolerance holds a result rounded to fp16: that one is the interpreter's
INTERPRETER_ONLY = {"fp32 result rounded to fp16 before the store"}


@pytest.mark.parametrize(
    "mistake",
    [
        pytest.param(m, marks=pytest.mark.skipif(m in INTERPRETER_ONLY and not ENV.interpret, reason="TF32"))
        for m in THIRD_BATTERY
    ],
)
def test_third_battery_of_mistakes_gets_named(mistake, monkeypatch, tmp_path):
    """Each fails its check with the hint that names it. Before session 28 the first six got "Wrong values in many
    places", a tail-mask hint or a precision hint (erf), the persistent ones hints about scattered offsets or the
    grid, and pid_n without the wrap passed: no check shape had more than one group of GROUP_M rows of tiles."""
    name, edit, check, words = THIRD_BATTERY[mistake]
    plant(monkeypatch, tmp_path, L, name, *(edit if isinstance(edit, list) else [edit]))  # autotuned ones too
    with pytest.raises(AssertionError, match=re.escape(words)):
        THIRD_CHECKS[check]()


def test_persistent_hint_needs_some_tiles_computed():
    """A result never written at all is not told as a persistent loop's mistake (the whole-tile count of a problem
    smaller than one tile is 0)."""
    assert L.persistent_hint(torch.full((20, 20), float("nan"))) is None
    assert L.persistent_hint(torch.zeros(20, 20)) is None


@pytest.mark.parametrize("shape", [(100, 70, 16, 32, 4), (5, 5, 16, 16, 8), (300, 200, 32, 16, 3), (64, 64, 16, 16, 1)])
def test_persistent_hints_grouped_order_is_tile_order_ref(shape):
    """persistent_hint numbers the tiles itself (a check cell runs before tile_order_ref's cell: calling it there
    raised NameError in the participants' notebook); both must give the same order."""
    assert torch.equal(L._grouped_order(*shape), L.tile_order_ref(*shape))


def test_a_naive_kernel_that_overwrites_its_accumulator_is_named(monkeypatch, tmp_path):
    """(session 39) matmul_naive's K loop with acc = for acc +=: every K of the CPU's naive shapes fitted one step of
    its BLOCK_K = 128, so the check passed it; NAIVE_CHECK_SHAPES's K = 200 takes a whole step and a partial one."""
    from utils.mutants import plant

    plant(monkeypatch, tmp_path, L, "matmul_naive_kernel", ("acc += a.to(", "acc = a.to("))
    words = re.escape("Only the last step of the K loop is in the result (BLOCK_K = 128)")
    with pytest.raises(AssertionError, match=words + ".*" + re.escape("in the naive kernel, acc += a * b")):
        L.check_matmul(L.matmul_naive, shapes=L.NAIVE_CHECK_SHAPES, quiet=True)


def test_an_order_with_inf_or_fractions_fails_its_check_with_a_message():
    """fits_mapping reads each tile's id as a whole number: inf (int(inf) raises OverflowError) and 0.5 are told by
    the check's message, not by an error of its own."""

    def garbage(M, N, BLOCK_M, BLOCK_N, GROUP_M):
        order = L.tile_order_ref(M, N, BLOCK_M, BLOCK_N, GROUP_M).clone()
        order[0, 0], order[-1, -1] = float("inf"), 0.5
        return order

    with pytest.raises(AssertionError, match="tile order"):
        L.check_tile_order(garbage, quiet=True)


# -- session 53's held-out battery: each passed its check, or got a hint of another mistake (named after the hint it
# got): "a precision problem. Accumulate in fp32" (GELU's formula, fp16 products under an fp32 acc), "Use
# triton.cdiv(N, BLOCK_N) column blocks" (a grid the launcher has), "the column tail is not masked", "pid_n divides
# by GROUP_M" alone, or "Wrong values in many places" ---------------------------------------------------------------

_OUTER_OFFS_M = "offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)"
_OUTER_OFFS_N = "offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)"
SESSION53_BATTERY = {  # mistake: (function, [(old, new), ...], which check, words of the hint it must get)
    # passed: the check's tile was square (16 x 16), and the CPU's check shapes had no last group both short and
    # more than one tile wide, nor a K of 1
    "outer_add's columns offset with BLOCK_M": (
        "outer_add_kernel", [(_OUTER_OFFS_N, _OUTER_OFFS_N.replace("pid_n * BLOCK_N", "pid_n * BLOCK_M"))], "outer",
        "the column offsets step by BLOCK_M = 32, not BLOCK_N = 16",
    ),
    "outer_add's rows offset with BLOCK_N": (
        "outer_add_kernel", [(_OUTER_OFFS_M, _OUTER_OFFS_M.replace("pid_m * BLOCK_M", "pid_m * BLOCK_N"))], "outer",
        "the row offsets step by BLOCK_N = 32, not BLOCK_M = 16",
    ),
    "the last group's rows from num_pid_m alone": (
        "grouped_tile", [("tl.minimum(num_pid_m - first_m, GROUP_M)", "tl.minimum(num_pid_m, GROUP_M)")], "grouped",
        "as if it were full",
    ),
    "the naive K loop stopping at K - 1": (
        "matmul_naive_kernel", [("range(0, K, BLOCK_K)", "range(0, K - 1, BLOCK_K)")], "naive",
        "what K = 0 instead of 1 gives",
    ),
    # a hint of another mistake
    "outer_add's offsets from each other's program ids": (
        "outer_add_kernel", [(_OUTER_OFFS_M, _OUTER_OFFS_M.replace("pid_m", "pid_n", 1)),
                             (_OUTER_OFFS_N, _OUTER_OFFS_N.replace("pid_n", "pid_m", 1))], "outer",
        "the offsets take each other's program ids",
    ),
    "the naive kernel's products in 16 bits": (
        "matmul_naive_kernel", [("acc += a.to(tl.float32) * b.to(tl.float32)", "acc += a * b")], "naive",
        "Each product a * b is rounded to",  # float16 (the interpreter's dtype) or bfloat16
    ),
    "B's column mask compared with K": (
        "tile_dot", [("(offs_n[None, :] < N), other", "(offs_n[None, :] < K), other")], "tiled",
        "the column mask compares offs_n with K",
    ),
    "GELU's sqrt(2 / pi) on x alone": (
        "epilogue", [("0.7978845608028654 * (acc + 0.044715", "(0.7978845608028654 * acc + 0.044715")], "gelu",
        "GELU's factor sqrt(2 / pi) multiplies x alone",
    ),
    "GELU as x * sigmoid(1.702 x)": (
        "epilogue", [("acc = acc * tl.sigmoid(2.0 * z)", "acc = acc * tl.sigmoid(1.702 * acc)")], "gelu",
        "the sigmoid approximation",
    ),
    # "Wrong values in many places"
    "GELU without its 0.5": (
        "epilogue", [("acc = acc * tl.sigmoid(2.0 * z)", "acc = acc * (1.0 + (2.0 * tl.sigmoid(2.0 * z) - 1.0))")],
        "gelu", "GELU lacks its 0.5",
    ),
    "A's pointers not moved along K": (
        "tile_dot", [("        a_ptrs += BLOCK_K * stride_ak\n", "")], "tiled",
        "A's pointers stay on the first K block while B's move",
    ),
    "B's pointers not moved along K": (
        "tile_dot", [("        b_ptrs += BLOCK_K * stride_bk\n", "")], "tiled",
        "B's pointers stay on the first K block while A's move",
    ),
    "y loaded from x_ptr": (
        "outer_add_kernel", [("y = tl.load(y_ptr + offs_n", "y = tl.load(x_ptr + offs_n")], "outer",
        "y is loaded from x_ptr",
    ),
}  # fmt: skip
SESSION53_CHECKS = {
    "outer": lambda: L.check_outer_add(L.outer_add, quiet=True),
    "grouped": lambda: L.check_matmul(L.matmul_grouped, quiet=True),
    "naive": lambda: L.check_matmul(L.matmul_naive, shapes=L.NAIVE_CHECK_SHAPES, quiet=True),
    "tiled": lambda: L.check_matmul(L.matmul_tiled, quiet=True),
    "gelu": lambda: L.check_matmul(L.matmul, shapes=AWKWARD, epilogue=True, activation="gelu", quiet=True),
}


@pytest.mark.parametrize("mistake", list(SESSION53_BATTERY))
def test_session_53_battery_of_mistakes_gets_named(mistake, monkeypatch, tmp_path):
    """check_outer_add runs a launcher that takes BLOCK_M and BLOCK_N with tiles of 16 x 32 and 32 x 16 as well;
    CHECK_SHAPES's (270, 40, 17) has a last group of one tile row and two tile columns; NAIVE_CHECK_SHAPES ends with
    K = 1; matmul_suspects and two diagnoses name the others."""
    name, edits, check, words = SESSION53_BATTERY[mistake]
    plant(monkeypatch, tmp_path, L, name, *edits)
    with pytest.raises(AssertionError, match=re.escape(words)):
        SESSION53_CHECKS[check]()


def test_a_last_group_of_one_row_names_both_mappings_that_leave_its_tiles():
    """A last group of one tile row walked as if full, and pid_n divided by GROUP_M, leave the same tiles unwritten:
    mapping_hint named the first it tried (pid_n's) for the other (session 53); it names each that fits."""
    M, N, BM, BN, G = 270, 40, 16, 32, 8
    pid_m, pid_n = L.wrong_mappings(M, N, BM, BN, G)[next(h for h in L.wrong_mappings(M, N, BM, BN, G) if "full" in h)]
    out = torch.zeros(M, N)
    where = L.landings(M, N, BM, BN, pid_m, pid_n)
    for i in range(triton.cdiv(M, BM)):
        for j in range(triton.cdiv(N, BN)):
            if (i, j) not in where:
                out[i * BM : (i + 1) * BM, j * BN : (j + 1) * BN] = float("nan")
    hint = L.mapping_hint(out, BM, BN, G)
    assert "as if it were full" in hint and "pid_n divides by GROUP_M" in hint and hint.count(L.MAPPING) == 1
