"""Lesson 12's solution (quantized weights): the int4 packing, exact; the int8/int4 specs against a plain fp64
dequantization written here element by element; both kernels through the lesson's own checks (with forced split-K);
planted mistakes in a kernel written here, each of which the check must name; every refusal; empty inputs; and the
quantized tiny model of lesson 08 against its dequantized-weights reference.

On the CPU everything runs in Triton's interpreter (fp16 activations in the kernel checks, the fp32 tiny model);
on a GPU the same tests run compiled, in bf16.
"""

import dataclasses
import functools
import inspect
import json
import math
import re
import warnings
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl

import utils
import utils.checkpoints as ckpt
from lessons import l05_matmul as L5
from lessons import l07_llm_layer as L7
from lessons import l08_llama_model as L8
from lessons import l12_quantization as L
from utils.bitwise import assert_bitwise_equal
from utils.mode import current
from utils.mutants import plant

ENV = current()
DEV = ENV.device
ROOT = Path(__file__).resolve().parents[1]


def weight(N, K, seed=0, dtype=None):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(N, K, generator=g) / math.sqrt(max(K, 1))).to(DEV, dtype or ENV.dtype)


# -- packing --------------------------------------------------------------------------------------------------------


def test_pack_check_passes_on_the_solution():
    L.check_pack_int4(L.pack_int4, L.unpack_int4, quiet=True)


@pytest.mark.parametrize("N", [1, 7, 16])
def test_unpack_of_pack_is_exact_for_every_code_in_both_nibbles(N):
    codes = torch.arange(16, dtype=torch.uint8)
    q = torch.stack(torch.meshgrid(codes, codes, indexing="ij"), -1).reshape(1, -1).repeat(N, 1)  # (N, 512)
    q = q.roll(shifts=3, dims=1).to(DEV)  # every (lo, hi) pair, not aligned on anything
    packed = L.pack_int4(q)
    assert packed.shape == (N, 256) and packed.dtype == torch.uint8
    assert torch.equal(L.unpack_int4(packed), q)
    assert torch.equal(packed.long(), q[:, 0::2].long() + 16 * q[:, 1::2].long()), "k = 2j low, 2j + 1 high"


def test_planted_packing_mistakes_get_their_hints():
    swapped = lambda q: q[:, 1::2] | (q[:, 0::2] << 4)  # noqa: E731
    with pytest.raises(AssertionError, match="nibbles are swapped"):
        L.check_pack_int4(swapped, L.unpack_int4, quiet=True)
    halves = lambda p: torch.cat([p & 0xF, p >> 4], 1)  # noqa: E731
    with pytest.raises(AssertionError, match="interleave them"):
        L.check_pack_int4(L.pack_int4, halves, quiet=True)
    # (probe12) the low nibble not masked got the generic hint; a pack that returns int32 passed, and then
    # quantize_int4_ref refused its bytes with "use pack_int4"
    unmasked = lambda p: torch.stack([p, p >> 4], -1).reshape(p.shape[0], -1)  # noqa: E731
    with pytest.raises(AssertionError, match="the low nibble is not masked"):
        L.check_pack_int4(L.pack_int4, unmasked, quiet=True)
    wide = lambda q: q[:, 0::2].int() | (q[:, 1::2].int() << 4)  # noqa: E731
    with pytest.raises(AssertionError, match=r"returned int32 .* must return uint8 of shape \(1, 256\)"):
        L.check_pack_int4(wide, L.unpack_int4, quiet=True)
    rows = lambda q: q[0::2] | (q[1::2] << 4)  # noqa: E731  (pairs rows, not neighbours along K)
    with pytest.raises(AssertionError, match="neighbours along K"):
        L.check_pack_int4(rows, L.unpack_int4, quiet=True)


# -- the specs against a plain fp64 dequantization ------------------------------------------------------------------


def plain_int4(w: L.Int4Weight):
    """W[n, k] = (code - zero[n, g]) * scale[n, g], code from byte k // 2, element by element, in fp64."""
    N, K = w.shape
    packed, z, s = w.packed.cpu().tolist(), w.zero.cpu().tolist(), w.scale.double().cpu().tolist()
    out = torch.empty(N, K, dtype=torch.float64)
    for n in range(N):
        for k in range(K):
            byte = packed[n][k // 2]
            code = (byte >> 4) if k % 2 else (byte & 0xF)
            g = k // w.group_size
            out[n, k] = (code - z[n][g]) * s[n][g]
    return out


def test_a_numpy_group_size_is_taken_as_an_int():
    """(session 38) group_size as a NumPy integer was refused ("is not offered"): the same weight; a float still is."""
    import numpy as np

    w = weight(5, 150, seed=3)
    got, want = L.quantize_int4_ref(w, np.int64(64)), L.quantize_int4_ref(w, 64)
    assert got.group_size == 64 and isinstance(got.group_size, int)
    assert torch.equal(got.packed, want.packed) and torch.equal(got.scale, want.scale)
    with pytest.raises(ValueError, match="is not offered"):
        L.quantize_int4_ref(w, 64.0)


@pytest.mark.parametrize("group_size", L.GROUP_SIZES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_int4_spec_against_plain_dequantization(group_size, dtype):
    w = weight(5, 150, seed=group_size, dtype=dtype)
    qw = L.quantize_int4_ref(w, group_size)
    assert qw.groups == triton.cdiv(150, group_size) and qw.scale.dtype == L.scale_dtype(dtype)
    assert int(unpack_max(qw)) <= 15 and int(qw.zero.max()) <= 15
    deq = L.dequantize_int4_ref(qw, torch.float64).cpu()
    torch.testing.assert_close(deq, plain_int4(qw), rtol=0, atol=0)
    # round to nearest: every weight within half a step of its group's scale (plus the scale's own rounding)
    s = qw.scale.double().cpu().repeat_interleave(group_size, 1)[:, :150]
    assert bool(((deq - w.double().cpu()).abs() <= 0.5 * s * (1 + 1e-2) + 1e-7).all())


def unpack_max(qw):
    return L.unpack_int4(qw.packed).max()


def test_int4_pads_the_last_group_with_exact_zeros():
    qw = L.quantize_int4_ref(weight(3, 70), 64)  # 2 groups, the second holds 6 columns and 58 of padding
    codes = L.unpack_int4(qw.packed).view(3, 2, 64)
    assert torch.equal(codes[:, 1, 6:], qw.zero[:, 1:].expand(3, 58)), "padding codes equal the zero point"


def test_int8_spec_against_plain_dequantization():
    w = weight(6, 77, dtype=torch.float32)
    w[2] = 0  # an all-zero row: any scale, zero codes
    qw = L.quantize_int8_ref(w)
    q, s = qw.q.cpu(), qw.scale.double().cpu()
    plain = torch.tensor([[q[n, k].item() * s[n].item() for k in range(77)] for n in range(6)], dtype=torch.float64)
    torch.testing.assert_close(L.dequantize_int8_ref(qw, torch.float64).cpu(), plain, rtol=0, atol=0)
    assert int(q.abs().max()) <= 127 and int(q[2].abs().max()) == 0
    assert bool(((plain - w.double().cpu()).abs() <= 0.5 * s[:, None] + 1e-9).all())


def codes_with(w, group_size, steps=15, per_row=False, around_zero=True, zero_sign=1):
    """int4_codes_ref's arithmetic written again here, with a classic mistake: 16 steps, one range per row, a range
    not stretched to take in 0 (around_zero=False), the zero point subtracted from the codes (zero_sign=-1)."""
    N, K = w.shape
    G, groups = group_size, triton.cdiv(K, group_size)
    wf = torch.nn.functional.pad(w.float(), (0, groups * G - K)).view(N, groups, G)
    lo, hi = wf.amin(-1), wf.amax(-1)
    if around_zero:
        lo, hi = lo.clamp(max=0), hi.clamp(min=0)
    if per_row:
        lo, hi = lo.amin(-1, keepdim=True).expand(N, groups), hi.amax(-1, keepdim=True).expand(N, groups)
    scale = L.stored_scale(torch.where(hi > lo, (hi - lo) / steps, 1.0), steps, w.dtype)
    s = scale.float()
    zero = torch.round(-lo / s).clamp(0, 15)
    q = torch.round(wf / s[..., None] + zero_sign * zero[..., None]).clamp(0, 15).to(torch.uint8).view(N, -1)
    return q, scale, zero.to(torch.uint8)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_rows_of_tiny_weights_keep_a_scale_and_every_code_within_half_a_step(dtype):
    """fp16's max |w| / 127 of a row below about 4e-6 underflows to a scale of 0 (the row came back as zeros); below
    2**-14 fp16's scales are so coarse that rounding them down pushed the largest codes past 127 (clamped)."""
    g = torch.Generator().manual_seed(0)
    w = torch.randn(5, 64, generator=g)
    for row, size in enumerate((1e-6, 1e-5, 3e-4, 1e-3)):  # row 4 stays ~ N(0, 1)
        w[row] *= size
    w = w.to(dtype)
    w64 = w.double()
    q8 = L.quantize_int8_ref(w.to(DEV))
    s8 = q8.scale.double().cpu()
    deq8 = L.dequantize_int8_ref(q8, torch.float64).cpu()
    assert bool((s8 > 0).all()), f"a scale of 0: {s8.tolist()}"
    assert bool(((deq8 - w64).abs() <= 0.5 * s8[:, None] * (1 + 1e-3)).all()), "a code clamped at 127"
    for G in (32, 64):
        q4 = L.quantize_int4_ref(w.to(DEV), G)
        s4 = q4.scale.double().cpu().repeat_interleave(G, 1)[:, :64]
        deq4 = L.dequantize_int4_ref(q4, torch.float64).cpu()
        assert bool((q4.scale > 0).all()), f"group {G}: a scale of 0"
        assert bool(((deq4 - w64).abs() <= s4 * (1 + 1e-3)).all()), f"group {G}: a code clamped"  # zero rounds too
        for row in range(5):
            assert L.relative_error(deq4[row], w64[row]) < 0.2, f"group {G}, row {row}"
    for row in range(5):
        assert L.relative_error(deq8[row], w64[row]) < 0.02, f"int8, row {row}: {L.relative_error(deq8[row], w64[row])}"
    if dtype == torch.float16:  # the kernels read the same (subnormal) fp16 scales as the spec
        x = torch.randn(3, 64, generator=g).to(DEV, dtype)
        for fn, qw in ((L.w8a16, q8), (L.w4a16, L.quantize_int4_ref(w.to(DEV), 32))):
            ref = L.wxa16_ref(x.double(), qw)
            utils.check(fn(x, qw), ref, name=fn.__name__, quiet=True, **L.wxa16_tolerance(x, qw, dtype))


@pytest.mark.parametrize(
    "M, N, K, G",
    [(3, 0, 64, 32), (1, 17, 127, 32), (1, 17, 127, 128), (5, 33, 1009, 64), (2, 7, 200, 128), (1, 1, 8193, 32)],
)
def test_int4_round_trip_and_w4a16_at_peers_shapes(M, N, K, G):
    """gpt-fast / torchao's int4 shapes: K not a multiple of the group, N odd or 0, groups of 32 / 64 / 128;
    quantize, pack, unpack and dequantize round-trip, and w4a16 matches x @ dequant(w).T (N = 0: an empty (M, 0))."""
    g = torch.Generator().manual_seed(7)
    w = torch.randn(N, K, generator=g).to(DEV)
    qw = L.quantize_int4_ref(w, G)
    assert torch.equal(L.unpack_int4(qw.packed), L.int4_codes_ref(w, G)[0])
    assert L.dequantize_int4_ref(qw, torch.float64).shape == (N, K)
    assert L.unpack_int4(torch.zeros(0, 5, dtype=torch.uint8, device=DEV)).shape == (0, 10)
    x = torch.randn(M, K, generator=g).to(DEV)
    if N == 0:
        assert L.w4a16(x, qw).shape == (M, 0)
        return
    utils.check(L.w4a16(x, qw), L.wxa16_ref(x.double(), qw), name="w4a16", quiet=True,
                **L.wxa16_tolerance(x, qw, x.dtype))  # fmt: skip


def test_non_finite_weights_are_refused_where_they_are():
    for bad in (float("nan"), float("inf"), float("-inf")):
        w = weight(4, 64, dtype=torch.float32)
        w[2, 5] = bad
        for quantize in (L.quantize_int8_ref, lambda t: L.quantize_int4_ref(t, 32), lambda t: L.quantize(t, 4)):
            with pytest.raises(ValueError, match=r"w\[2, 5\] = (nan|inf|-inf): quantizing needs finite weights"):
                quantize(w)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_a_strided_weight_quantizes_as_its_contiguous_copy(dtype):
    """A weight stored transposed (lin.weight.T of a layer kept (K, N)) or sliced: the same codes and scales as its
    contiguous copy. The int8 codes once took the weight's strides, and the Int8Weight they made was refused."""
    w = weight(6, 100, dtype=dtype)
    views = {"transposed": w.T.contiguous().T, "sliced": torch.cat([w, w], 1)[:, :100]}
    for what, view in views.items():
        assert not view.is_contiguous(), what
        for quantize in (L.quantize_int8_ref, lambda t: L.quantize_int4_ref(t, 32)):
            got, want = quantize(view), quantize(w)
            for a, b in zip(L._weight_tensors(got).values(), L._weight_tensors(want).values()):
                assert a.is_contiguous() and torch.equal(a, b), what


def test_int4_codes_check_passes_and_planted_mistakes_get_their_hints():
    L.check_int4_codes(L.int4_codes_ref, quiet=True)
    L.check_int4_codes(codes_with, quiet=True)  # the copy above, without a mistake, passes too
    with pytest.raises(AssertionError, match="divides the range by 16"):
        L.check_int4_codes(lambda w, G: codes_with(w, G, steps=16), quiet=True)
    with pytest.raises(AssertionError, match="one scale for the whole row"):
        L.check_int4_codes(lambda w, G: codes_with(w, G, per_row=True), quiet=True)
    with pytest.raises(AssertionError, match="the zero point is subtracted from the codes"):
        L.check_int4_codes(lambda w, G: codes_with(w, G, zero_sign=-1), quiet=True)
    with pytest.raises(AssertionError, match="not stretched to take in 0"):
        L.check_int4_codes(lambda w, G: codes_with(w, G, around_zero=False), quiet=True)
    with pytest.raises(AssertionError, match="must return three tensors"):
        L.check_int4_codes(lambda w, G: L.quantize_int4_ref(w, G), quiet=True)
    with pytest.raises(AssertionError, match="codes and zero points are uint8"):
        L.check_int4_codes(lambda w, G: tuple(t.float() for t in codes_with(w, G)), quiet=True)


# -- the kernels ---------------------------------------------------------------------------------------------------


def test_w8a16_check():
    L.check_w8a16(L.w8a16, quiet=True)


def test_w4a16_check():
    L.check_w4a16(L.w4a16, quiet=True)


def test_w4a16_fast_check():
    L.check_w4a16(L.w4a16_fast, quiet=True)


@pytest.mark.parametrize("SPLIT_K", [2, 4])
def test_split_k(SPLIT_K):
    shapes = ENV.pick(cpu=((5, 47, 200), (1, 17, 300)), gpu=((5, 1001, 2000), (1, 333, 4100)))
    L.check_w4a16(L.w4a16, shapes=shapes, SPLIT_K=SPLIT_K, quiet=True)
    L.check_w4a16(L.w4a16_fast, shapes=shapes, SPLIT_K=SPLIT_K, quiet=True)
    L.check_w8a16(L.w8a16, shapes=shapes, SPLIT_K=SPLIT_K, quiet=True)


def test_other_tiles_and_fp32_activations():
    L.check_w4a16(L.w4a16, shapes=((20, 40, 100),), BLOCK_M=32, BLOCK_N=32, quiet=True)
    L.check_w8a16(L.w8a16, shapes=((20, 40, 100),), dtype=torch.float32, quiet=True)
    L.check_w4a16(L.w4a16, shapes=((3, 40, 100),), dtype=torch.float32, quiet=True)
    L.check_w4a16(L.w4a16_fast, shapes=((3, 40, 100),), dtype=torch.float32, quiet=True)


@pytest.mark.parametrize("launcher", ["w8a16", "w4a16", "w4a16_fast", "w8a16_fast"])
@pytest.mark.parametrize("SPLIT_K", [1, 2])
def test_residual_is_added_in_the_combine_and_may_be_the_output(launcher, SPLIT_K):
    fn = getattr(L, launcher)
    M, N, K = 5, 47, 200
    x = torch.randn(M, K, device=DEV, dtype=ENV.dtype)
    w = L.quantize_int8_ref(weight(N, K)) if launcher.startswith("w8a16") else L.quantize_int4_ref(weight(N, K), 64)
    r = torch.randn(M, N, device=DEV, dtype=ENV.dtype)
    ref = L.wxa16_ref(x.double(), w) + r.double()
    tol = L.wxa16_tolerance(x, w, ENV.dtype)
    out = fn(x, w, residual=r, out=utils.nan_empty((M, N), ENV.dtype), SPLIT_K=SPLIT_K)
    utils.check(out, ref, name=f"{launcher} + residual", quiet=True, **tol)
    r_before = r.clone()
    same = fn(x, w, out=r, residual=r, SPLIT_K=SPLIT_K)  # in place, as lesson 08's x.addmm_(a, w.T)
    assert same is r
    utils.check(r, L.wxa16_ref(x.double(), w) + r_before.double(), name="in place", quiet=True, **tol)
    with pytest.raises(ValueError, match="shares memory with the input residual"):
        fn(x, w, out=torch.as_strided(r, (M, N), (N, 1)), residual=r)  # another view of it: refused


def test_schedule_follows_m():
    decode = L.schedule(1, 14336, 4096, 128, sm_count=132, smem=227 * 1024)
    assert decode.BLOCK_M == 16 and decode.SPLIT_K >= 2, "decode: thin tiles, K split to fill the GPU"
    small_n = L.schedule(1, 2048, 8192, 128, sm_count=132, smem=227 * 1024)
    assert small_n.SPLIT_K > decode.SPLIT_K, "a narrower output needs more splits"
    for M, N, K in ((1, 14336, 4096), (16, 4096, 14336), (1, 2048, 8192), (16, 8192, 2048)):
        s = L.schedule(M, N, K, 128, sm_count=132, smem=227 * 1024)
        programs = triton.cdiv(N, s.BLOCK_N) * s.SPLIT_K
        assert 132 <= programs <= 4 * 132 and triton.cdiv(K, 128) >= 4 * s.SPLIT_K, (M, N, K, s)
    prefill = L.schedule(2048, 14336, 4096, 64, sm_count=132, smem=227 * 1024)
    assert prefill.SPLIT_K == 1 and prefill.BLOCK_M == 128 and prefill.BLOCK_N == 128
    int4 = L.schedule(2048, 14336, 4096, 128, sm_count=132, bits=4, smem=227 * 1024)
    assert int4.SPLIT_K == 1 and (int4.BLOCK_M, int4.BLOCK_N, int4.num_warps) == (64, 128, 8)


@pytest.mark.parametrize("smem", [64 * 1024, 163 * 1024, 227 * 1024])
@pytest.mark.parametrize("bits, BLOCK_K", [(4, 32), (4, 128), (8, 64), (8, 128)])
@pytest.mark.parametrize("M", [1, 16, 64, 2048])
def test_schedules_fit_the_shared_memory(smem, bits, BLOCK_K, M):
    s = L.schedule(M, 14336, 4096, BLOCK_K, sm_count=132, bits=bits, smem=smem)
    assert L.pipeline_bytes(s, 2, bits) <= smem and s.num_stages >= 2 and min(s.BLOCK_M, s.BLOCK_N) >= 16, s


# -- the fast path: the GEMV kernel (M <= GEMV_M), the int4 tile kernel, their schedules --------------------------


def _fs(kernel, BLOCK_M, BLOCK_N, BLOCK_K, SPLIT_K, num_warps=4, num_stages=1):
    return L.FastSchedule(kernel, BLOCK_M, BLOCK_N, BLOCK_K, SPLIT_K, num_warps, num_stages)


def _check_schedule(M, N, K, G, s, dtype, residual, what):
    """w4a16_fast at schedule s against the spec, every address watched; with a residual (added by the kernel
    itself when SPLIT_K is 1, by the combine otherwise) when asked."""
    x = torch.randn(M, K, device=DEV, dtype=dtype)
    w = L.quantize_int4_ref(weight(N, K, dtype=dtype), G)
    r = torch.randn(M, N, device=DEV, dtype=dtype) if residual else None
    with utils.watch_memory() as stray:  # under the interpreter: every address the kernels touch
        out = L.w4a16_fast(x, w, out=utils.nan_empty((M, N), dtype), residual=r, schedule=s)
    want = L.wxa16_ref(x.double(), w) + (0 if r is None else r.double())
    utils.check(out, want, name=f"{what} {s}" + (" + residual" if residual else ""), quiet=True, stray=stray,
                **L.wxa16_tolerance(x, w, dtype), suspects=L.w4a16_suspects(x, w) if r is None else None)  # fmt: skip


# (M, N, K, group, schedule): several groups a step with a partial last step (K = 300 is 9.4 groups of 32), a step
# wider than K, BLOCK_M above M, more splits than steps (empty splits write zeros), N odd and below BLOCK_N
GEMV_CASES = [
    (1, 33, 300, 32, _fs("gemv", 1, 16, 128, 1)),
    (2, 17, 300, 32, _fs("gemv", 2, 32, 64, 2)),
    (3, 9, 100, 64, _fs("gemv", 4, 16, 256, 1)),
    (4, 5, 200, 128, _fs("gemv", 4, 8, 128, 4)),
    (1, 3, 72, 32, _fs("gemv", 16, 16, 32, 8)),
    # the next step's words loaded while this step's are used (num_stages 2: PREFETCH), with splits and a partial step
    (2, 17, 300, 32, _fs("gemv", 2, 32, 64, 2, 4, 2)),
    (3, 9, 100, 64, _fs("gemv", 4, 16, 256, 1, 4, 2)),
    (5, 33, 1000, 128, _fs("gemv", 8, 16, 256, 4, 4, 2)),
    # the slab kernel: unmasked full steps and a masked last one (K = 300: 9 full steps of 32 and a partial group),
    # a step wider than K (only the masked loop runs), several rows of x, splits, no prefetch
    (1, 33, 300, 32, _fs("slab", 1, 16, 32, 1, 4, 2)),
    (1, 17, 1000, 64, _fs("slab", 1, 8, 128, 2, 2, 2)),
    (1, 9, 100, 128, _fs("slab", 1, 16, 256, 1, 4, 1)),
    (3, 9, 300, 32, _fs("slab", 4, 16, 64, 2, 4, 2)),
    (2, 5, 256, 64, _fs("slab", 2, 8, 128, 1, 4, 2)),
]


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
@pytest.mark.parametrize("M, N, K, G, s", GEMV_CASES)
def test_int4_gemv_schedules(dtype, M, N, K, G, s):
    _check_schedule(M, N, K, G, s, dtype, False, "int4 GEMV")


INT8_GEMV_CASES = [(1, 33, 300, _fs("gemv", 1, 16, 128, 1)), (3, 17, 100, _fs("gemv", 4, 8, 64, 4)),
                   (16, 9, 130, _fs("gemv", 16, 16, 32, 2))]  # fmt: skip


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
@pytest.mark.parametrize("M, N, K, s", INT8_GEMV_CASES)
def test_int8_gemv_schedules(dtype, M, N, K, s):
    x = torch.randn(M, K, device=DEV, dtype=dtype)
    w = L.quantize_int8_ref(weight(N, K, dtype=dtype))
    out = L.w8a16_fast(x, w, out=utils.nan_empty((M, N), dtype), schedule=s)
    utils.check(out, L.wxa16_ref(x.double(), w), name=f"int8 GEMV {s}", quiet=True, **L.wxa16_tolerance(x, w, dtype),
                suspects=L.w8a16_suspects(x, w))  # fmt: skip


# int8's tile (w8a16_tile_kernel): a prefill's rows past one tile and N odd, K not a multiple of the step, more
# splits than steps, fp32 x (exact products), each with the residual added in the epilogue or by the combine
INT8_TILE_CASES = [
    (40, 47, 200, _fs("tile", 32, 16, 64, 1, 4, 2), torch.float16),
    (20, 33, 300, _fs("tile", 16, 32, 32, 2, 4, 2), torch.float32),
    (5, 9, 100, _fs("tile", 16, 16, 32, 8, 4, 3), torch.float16),
    (17, 64, 128, _fs("tile", 16, 64, 128, 1, 8, 2), torch.float32),
]


@pytest.mark.parametrize("residual", [False, True], ids=["", "residual"])
@pytest.mark.parametrize("M, N, K, s, dtype", INT8_TILE_CASES)
def test_int8_tile_schedules(M, N, K, s, dtype, residual):
    x = torch.randn(M, K, device=DEV, dtype=dtype)
    w = L.quantize_int8_ref(weight(N, K, dtype=dtype))
    r = torch.randn(M, N, device=DEV, dtype=dtype) if residual else None
    with utils.watch_memory() as stray:  # under the interpreter: every address the kernels touch
        out = L.w8a16_fast(x, w, out=utils.nan_empty((M, N), dtype), residual=r, schedule=s)
    want = L.wxa16_ref(x.double(), w) + (0 if r is None else r.double())
    utils.check(out, want, name=f"int8 tile {s}" + (" + residual" if residual else ""), quiet=True, stray=stray,
                **L.wxa16_tolerance(x, w, dtype), suspects=L.w8a16_suspects(x, w) if r is None else None)  # fmt: skip


# prefill's dequantize-then-matmul path: int4 at every group size and int8, K not a multiple of the tile or the
# group, N cut into chunks of 16 rows (DEQUANT_CHUNK_BYTES made small) with a shorter last one, a residual apart or
# as the output itself (lesson 08's x.addmm_)
DEQUANT_CASES = [(4, 32, 37, 47, 300), (4, 64, 20, 33, 200), (4, 128, 9, 40, 130), (8, None, 37, 47, 300),
                 (8, None, 5, 16, 64)]  # fmt: skip


@pytest.mark.parametrize("residual", ["", "residual", "in place"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
@pytest.mark.parametrize("bits, G, M, N, K", DEQUANT_CASES)
def test_dequantized_prefill_matches_the_spec(monkeypatch, bits, G, M, N, K, dtype, residual):
    x = torch.randn(M, K, device=DEV, dtype=dtype)
    W = weight(N, K, dtype=dtype)
    w = L.quantize_int4_ref(W, G) if bits == 4 else L.quantize_int8_ref(W)
    monkeypatch.setattr(L, "DEQUANT_CHUNK_BYTES", 16 * K * x.element_size())  # chunks of 16 rows
    s = _fs("dequant", 16, 16, 2 * (G or 64), 1, 4, 1)
    L._require_fast_schedule(L.dequant_schedule(bits, G or 128), bits, M, G or 128)  # the launchers' own, valid
    fn = L.w4a16_fast if bits == 4 else L.w8a16_fast
    r = torch.randn(M, N, device=DEV, dtype=dtype) if residual else None
    want = L.wxa16_ref(x.double(), w) + (0 if r is None else r.double())
    out = r if residual == "in place" else utils.nan_empty((M, N), dtype)
    with utils.watch_memory() as stray:  # under the interpreter: every address the dequantizing kernel touches
        got = fn(x, w, out=out, residual=r, schedule=s)
    assert got is out
    suspects = (L.w4a16_suspects(x, w) if bits == 4 else L.w8a16_suspects(x, w)) if r is None else None
    utils.check(got, want, name=f"int{bits} dequant + matmul {residual}", quiet=True, stray=stray, suspects=suspects,
                **L.wxa16_tolerance(x, w, dtype))  # fmt: skip


def test_prefill_takes_the_dequantized_matmul_from_PREFILL_DEQUANT_M(monkeypatch):
    """From PREFILL_DEQUANT_M rows of x the fast launchers dequantize, below it they keep their tile kernels; None
    (or dequant=False) turns the path off, with no stale choice cached."""
    monkeypatch.setattr(L, "PREFILL_DEQUANT_M", 512)  # l12zo's, for the GPU's time (off in the lesson: session 50)
    M0 = L.PREFILL_DEQUANT_M
    for bits in (4, 8):
        at, below = (L.fast_schedule(bits, M, 14336, 4096, 128, 132, 227 * 1024) for M in (M0, M0 - 1))
        assert at.kernel == "dequant" and below.kernel != "dequant", (bits, at, below)
        assert at.BLOCK_K % 128 == 0 and triton.next_power_of_2(at.BLOCK_N) == at.BLOCK_N, at
        tile = L.fast_schedule(bits, 4096, 4096, 4096, 128, 132, 227 * 1024, dequant=False)
        assert tile.kernel == "tile", tile
        # below M0: where the tiles would leave most SMs idle (N = 2048: 16 programs a 128 rows), from DEQUANT_MIN_M
        small_n = [L.fast_schedule(bits, M, 2048, 2048, 128, 132, 227 * 1024).kernel
                   for M in (L.DEQUANT_MIN_M - 1, L.DEQUANT_MIN_M)]  # fmt: skip
        assert small_n[0] != "dequant" and small_n[1] == "dequant", (bits, small_n)
    monkeypatch.setattr(L, "PREFILL_DEQUANT_M", None)
    assert L.fast_schedule(4, 4096, 4096, 4096, 128, 132, 227 * 1024).kernel != "dequant"
    assert L.fast_schedule(4, 256, 2048, 2048, 128, 132, 227 * 1024).kernel != "dequant"


TILE_CASES = [(16, _fs("tile", 16, 32, 32, 2, 4, 2)), (20, _fs("tile", 16, 16, 32, 1, 4, 2)),
              (1, _fs("tile", 16, 16, 32, 4, 4, 2)), (5, _fs("tile_swap", 16, 32, 32, 2, 4, 2))]  # fmt: skip


@pytest.mark.parametrize("M, s", TILE_CASES)
def test_int4_tile_schedules(M, s):
    """M <= DECODE_M: the scale after each dot; more rows (prefill): the scale in the tile, one chained dot."""
    N, K = 33, 100
    x = torch.randn(M, K, device=DEV, dtype=ENV.dtype)
    w = L.quantize_int4_ref(weight(N, K), 32)
    out = L.w4a16_fast(x, w, out=utils.nan_empty((M, N), ENV.dtype), schedule=s)
    utils.check(out, L.wxa16_ref(x.double(), w), name=f"int4 tile {s}", quiet=True,
                **L.wxa16_tolerance(x, w, ENV.dtype))  # fmt: skip


# The stream GEMV (M = 1) and the scaled tile (M <= 16, several groups a step): every group size, N odd and below
# BLOCK_N, K not a multiple of the step (300 = 9.4 groups of 32; 700 = 5.5 groups of 128), a step wider than K, no
# prefetch, splits (the partial sums combined in a fixed order: more splits than steps leave slices of zeros)
F16, F32 = torch.float16, torch.float32
STREAM_CASES = [
    (33, 300, 32, _fs("stream", 1, 8, 128, 1, 2, 2), F16),
    (33, 300, 32, _fs("stream", 1, 8, 128, 1, 2, 2), F32),
    (17, 700, 128, _fs("stream", 1, 4, 256, 2, 4, 2), F16),
    (9, 100, 64, _fs("stream", 1, 16, 512, 1, 2, 1), F32),
    (5, 300, 64, _fs("stream", 1, 8, 64, 4, 1, 2), F16),
    (3, 72, 32, _fs("stream", 1, 8, 32, 8, 2, 2), F32),
    (21, 700, 64, _fs("stream", 1, 4, 128, 2, 2, 3), F16),  # x loaded a step ahead too
    # "pipe": the same kernel, its unmasked steps in a loop Triton pipelines, the step K cuts short after it
    (33, 300, 32, _fs("pipe", 1, 8, 128, 1, 2, 3), F16),
    (17, 700, 128, _fs("pipe", 1, 4, 256, 2, 4, 2), F32),
    (9, 100, 64, _fs("pipe", 1, 16, 512, 1, 2, 3), F16),  # a step wider than K: the masked loop only
    (1, 640, 64, _fs("pipe", 1, 4, 128, 1, 1, 4), F32),  # one row (every row of the tile reads it), K whole steps
    (21, 1000, 32, _fs("pipe", 1, 8, 64, 4, 2, 3), F16),  # splits of 8 and 7 steps, the last one cut short
]


@pytest.mark.parametrize("residual", [False, True], ids=["", "residual"])
@pytest.mark.parametrize("N, K, G, s, dtype", STREAM_CASES)
def test_int4_stream_schedules(N, K, G, s, dtype, residual):
    _check_schedule(1, N, K, G, s, dtype, residual, "int4 stream")


SCALED_CASES = [
    (16, 33, 300, 32, _fs("scaled_swap", 16, 16, 128, 1, 4, 2), F16),
    (16, 33, 300, 32, _fs("scaled_swap", 16, 16, 128, 1, 4, 2), F32),
    (5, 47, 700, 128, _fs("scaled_swap", 16, 32, 256, 2, 4, 2), F16),
    (3, 17, 200, 64, _fs("scaled", 16, 16, 128, 1, 4, 2), F32),
    (1, 9, 100, 32, _fs("scaled", 16, 16, 512, 4, 4, 2), F16),
    (20, 17, 300, 32, _fs("scaled_swap", 16, 16, 64, 8, 4, 2), F32),
]


@pytest.mark.parametrize("residual", [False, True], ids=["", "residual"])
@pytest.mark.parametrize("M, N, K, G, s, dtype", SCALED_CASES)
def test_int4_scaled_tile_schedules(M, N, K, G, s, dtype, residual):
    """(q - z) * s rounded once to x's dtype: the spec's dequantize, so the same tolerance as every other path."""
    _check_schedule(M, N, K, G, s, dtype, residual, "int4 scaled tile")


# "mma" (thin tensor-core tiles, W's even and odd columns as two dots, the floats by inline PTX on an sm_90 GPU):
# N odd and under a tile, K not a multiple of the group, x's rows over two tiles (20), more splits than groups
MMA_CASES = [
    (16, 33, 300, 32, _fs("mma", 16, 16, 32, 1, 1, 2), F16),
    (16, 33, 300, 32, _fs("mma", 16, 32, 32, 2, 2, 3), F32),
    (5, 47, 700, 128, _fs("mma", 16, 32, 128, 2, 2, 3), F16),
    (20, 17, 300, 64, _fs("mma", 16, 16, 64, 4, 1, 2), F32),
    (1, 9, 100, 32, _fs("mma", 16, 16, 32, 8, 2, 2), F16),
] + ([(16, 47, 700, 128, _fs("mma", 16, 32, 128, 2, 2, 3), torch.bfloat16)] if ENV.is_gpu else [])  # fmt: skip


@pytest.mark.parametrize("residual", [False, True], ids=["", "residual"])
@pytest.mark.parametrize("M, N, K, G, s, dtype", MMA_CASES)
def test_int4_mma_schedules(M, N, K, G, s, dtype, residual):
    """(q - z) exact in x's dtype, each group's sums scaled: the tolerance of every other path."""
    _check_schedule(M, N, K, G, s, dtype, residual, "int4 mma")


@pytest.mark.parametrize("s", [_fs("stream", 1, 8, 64, 4, 2, 2), _fs("scaled_swap", 16, 16, 64, 4, 4, 2),
                               _fs("mma", 16, 16, 32, 4, 1, 2)], ids=["stream", "scaled_swap", "mma"])  # fmt: skip
def test_split_k_combine_is_deterministic_and_adds_the_residual(s):
    """Split-K writes one fp32 slice a split and one kernel adds them in a fixed order: the same bits every run
    (no atomics), the residual added once, in place allowed."""
    M, N, K = 1 if s.kernel == "stream" else 3, 21, 300
    x = torch.randn(M, K, device=DEV, dtype=ENV.dtype)
    w = L.quantize_int4_ref(weight(N, K), 32)
    r = torch.randn(M, N, device=DEV, dtype=ENV.dtype)
    a = L.w4a16_fast(x, w, residual=r, schedule=s)
    assert torch.equal(a, L.w4a16_fast(x, w, residual=r, schedule=s))
    want = L.wxa16_ref(x.double(), w) + r.double()
    utils.check(a, want, name=f"{s.kernel} split {s.SPLIT_K} + residual", quiet=True,
                **L.wxa16_tolerance(x, w, ENV.dtype))  # fmt: skip
    assert L.w4a16_fast(x, w, out=r, residual=r, schedule=s) is r
    assert torch.equal(r, a)


@pytest.mark.skipif(not ENV.interpret, reason="the interpreter's own GEMV schedules")
def test_under_the_interpreter_a_gemv_takes_few_programs_but_two_where_n_has_room():
    """The interpreter runs programs one after another, each about as slow at any BLOCK_N: its GEMV schedules take
    up to 64 rows a program, but never one program where N has room for two (a second program, a tail)."""
    for bits, M, N, K in [(4, 2, 64, 64), (8, 2, 192, 64), (4, 1, 320, 64), (4, 3, 21, 200), (8, 1, 1000, 96)]:
        s = L.fast_schedule(bits, M, N, K, 32)
        assert s.kernel in L.GEMV_KERNELS, s
        programs = triton.cdiv(N, s.BLOCK_N)
        assert programs >= 2 and (programs <= 2 or s.BLOCK_N == 64), (bits, M, N, K, s)


@pytest.mark.parametrize("launcher", ["w4a16_fast", "w8a16_fast"])
@pytest.mark.parametrize("SPLIT_K", [1, 2])
def test_gemv_adds_the_residual_in_place(launcher, SPLIT_K):
    fn, M, N, K = getattr(L, launcher), 2, 21, 200
    x = torch.randn(M, K, device=DEV, dtype=ENV.dtype)
    w = L.quantize_int8_ref(weight(N, K)) if launcher == "w8a16_fast" else L.quantize_int4_ref(weight(N, K), 32)
    assert L.fast_schedule(4 if launcher == "w4a16_fast" else 8, M, N, K, 32).kernel in ("gemv", "slab")
    r = torch.randn(M, N, device=DEV, dtype=ENV.dtype)
    want = L.wxa16_ref(x.double(), w) + r.double()
    with utils.watch_memory() as stray:  # under the interpreter: the tail program's residual lanes past N too
        assert fn(x, w, out=r, residual=r, SPLIT_K=SPLIT_K) is r
    utils.check(r, want, name=f"{launcher} in place", quiet=True, stray=stray, **L.wxa16_tolerance(x, w, ENV.dtype))


def test_fast_path_planted_mistake_gets_its_hint():
    """The check names a mistake on the fast path too: the zero points lost on the way to the kernel."""

    def no_zero_point(x, w, *, out=None, **kwargs):
        return L.w4a16_fast(x, L.Int4Weight(w.packed, w.scale, torch.zeros_like(w.zero), w.K, w.group_size), out=out)

    with pytest.raises(AssertionError, match="zero point is not subtracted"):
        L.check_w4a16(no_zero_point, shapes=((1, 17, 100),), quiet=True)


def test_fast_schedules_at_the_h100_shapes(monkeypatch):
    """The heuristic alone (FAST_SCHEDULES emptied: its measured entries override it at these shapes)."""
    monkeypatch.setattr(L, "FAST_SCHEDULES", {})
    L.clear_schedule_cache()  # schedules are cached per shape: forget the table's
    try:
        _heuristic_schedules()
    finally:
        L.clear_schedule_cache()  # and forget the heuristic's, before the table comes back


def test_measured_fast_schedules_are_used_and_valid():
    for (bits, M, N, K), s in L.FAST_SCHEDULES.items():
        assert L.fast_schedule(bits, M, N, K, 128, sm_count=132, smem=227 * 1024) == s, (bits, M, N, K)


def _heuristic_schedules():
    for M, N, K in ((1, 8192, 2048), (1, 2048, 8192), (4, 14336, 4096), (1, 4096, 14336)):
        s = L.fast_schedule(4, M, N, K, 128, sm_count=132, smem=227 * 1024)
        programs = triton.cdiv(N, s.BLOCK_N) * s.SPLIT_K
        kernel = L.GEMV_KERNEL[4] if L.GEMV_KERNEL[4] not in ("stream", "pipe") or M == 1 else "gemv"  # M = 1 only
        assert s.kernel == kernel and s.BLOCK_M >= M and s.BLOCK_K % 128 == 0, s
        steps = triton.cdiv(K, s.BLOCK_K)
        assert 132 <= programs and (s.SPLIT_K == 1 or steps >= s.SPLIT_K * L.GEMV_MIN_STEPS // 2), (M, N, K, s)
    s = L.fast_schedule(4, 16, 4096, 14336, 128, sm_count=132, smem=227 * 1024)
    assert s.kernel == L.TILE_KERNEL and s.BLOCK_K % 128 == 0 and s.BLOCK_M == 16, s
    assert triton.cdiv(4096, s.BLOCK_N) * s.SPLIT_K >= 132, "a tall K is split until the programs fill the GPU"
    prefill = L.fast_schedule(4, 2048, 14336, 4096, 128, sm_count=132, smem=227 * 1024, dequant=False)
    assert (prefill.kernel, prefill.BLOCK_K, prefill.SPLIT_K) == ("tile", 128, 1) and prefill.BLOCK_M >= 64
    small = L.fast_schedule(4, 2048, 14336, 4096, 128, sm_count=40, smem=64 * 1024, dequant=False)  # a T4's smem
    assert L.pipeline_bytes(L.Schedule(*small[1:]), 2, 4) <= 64 * 1024, small


def test_int4_decode_rows_take_the_mma_kernel_at_the_sweeps_winners():
    """GEMV_M < M <= DECODE_M, int4: mma_schedule, which gives the sweep l12zc's H100 winner at M = 5, 8 and 16 for
    the 8B projections and the 1B down projection (results/h100-2026-12-05-s31/sweeps/l12zc.txt), and a schedule
    2.5 % at most behind at the 1B up projection. Where its stages do not fit (a T4's 64 KB can, a tiny budget
    cannot), the one-group tile; int8 keeps "tile"."""
    winners = {(14336, 4096): _fs("mma", 16, 32, 128, 2, 2, 3), (4096, 14336): _fs("mma", 16, 32, 128, 4, 2, 4),
               (2048, 8192): _fs("mma", 16, 32, 128, 4, 2, 4)}  # fmt: skip
    for M in (5, 8, 16):
        for (N, K), best in winners.items():
            assert L.fast_schedule(4, M, N, K, 128, sm_count=132, smem=227 * 1024) == best, (M, N, K)
        up = L.fast_schedule(4, M, 8192, 2048, 128, sm_count=132, smem=227 * 1024)
        assert up == _fs("mma", 16, 32, 128, 4, 2, 3), up
    assert L.fast_schedule(4, 5, 8192, 2048, 128, sm_count=40, smem=64 * 1024).kernel == "mma"
    s = L.fast_schedule(4, 5, 8192, 2048, 64, sm_count=40, smem=64 * 1024)
    assert s.BLOCK_K == 64 and s.SPLIT_K <= L.MMA_MAX_SPLIT
    assert L.fast_schedule(4, 5, 8192, 2048, 128, sm_count=132, smem=16 * 1024).kernel == "tile_swap"
    assert L.fast_schedule(8, 5, 8192, 2048, 128, sm_count=132, smem=227 * 1024).kernel == "tile"
    few = L.mma_schedule(64, 256, 128, 132)  # two groups: no split would keep two steps
    assert few.SPLIT_K == 1 and few.num_stages == 4
    assert L.mma_schedule(100_000, 4096, 128, 132).SPLIT_K == 1  # programs enough without a split


def test_fast_schedules_table_wins_over_the_heuristic(monkeypatch):
    mine = _fs("gemv", 1, 64, 512, 2, 8, 2)
    monkeypatch.setitem(L.FAST_SCHEDULES, (4, 1, 2048, 8192), mine)
    L.clear_schedule_cache()
    try:
        assert L.fast_schedule(4, 1, 2048, 8192, 128, sm_count=132, smem=227 * 1024) == mine
        tile = _fs("tile_swap", 16, 64, 128, 2, 4, 4)  # measured with groups of 128: not for groups of 64
        monkeypatch.setitem(L.FAST_SCHEDULES, (4, 16, 4096, 14336), tile)
        assert L.fast_schedule(4, 16, 4096, 14336, 128, sm_count=132, smem=227 * 1024) == tile
        assert L.fast_schedule(4, 16, 4096, 14336, 64, sm_count=132, smem=227 * 1024).BLOCK_K % 64 == 0
    finally:
        L.clear_schedule_cache()


def test_the_scaled_tile_only_where_its_shared_memory_fits(monkeypatch):
    """The table's scaled tiles were measured on an H100 (227 KB a program); a T4 has 64 KB: the heuristic's one-group
    tile there, for the table's shapes too. The interpreter (no shared memory to know) takes the scaled tile."""
    for shape in ((16, 4096, 14336), (16, 8192, 2048), (5, 1000, 3000)):
        h100 = L.fast_schedule(4, *shape, 128, sm_count=132, smem=227 * 1024)
        t4 = L.fast_schedule(4, *shape, 128, sm_count=40, smem=64 * 1024)
        assert (
            h100 == L.FAST_SCHEDULES.get((4, *shape), h100) and L.pipeline_bytes(L.Schedule(*t4[1:]), 2, 4) <= 64 * 1024
        )
        if h100.kernel.startswith("scaled"):
            assert t4.kernel == "tile_swap", (shape, h100, t4)
    monkeypatch.setattr(L, "TILE_KERNEL", "scaled_swap")
    L.clear_schedule_cache()
    try:
        assert L.fast_schedule(4, 5, 1000, 3000, 128, sm_count=132, smem=227 * 1024).kernel == "scaled_swap"
        assert L.fast_schedule(4, 5, 1000, 3000, 128, sm_count=40, smem=64 * 1024).kernel == "tile_swap"
        if ENV.interpret:
            assert L.fast_schedule(4, 5, 47, 200, 32).kernel == "scaled_swap"
    finally:
        L.clear_schedule_cache()


FAST_CALLS = ["int4 M=1", "int8 M=1", "int4 M=1, residual", "int4 M=5, split", "int4 M=5, split, residual",
              "int4 M=40, residual in place", "int8 M=5, split, residual", "int8 M=40, residual in place",
              "int4 M=40, dequant, residual in place", "int8 M=40, dequant, residual"]  # fmt: skip
DEQUANT_CHUNK = 4096  # DEQUANT_CHUNK_BYTES in the prepared-path tests: chunks of 32 rows, N = 47 in two


def _fast_calls():
    """The fast launchers' paths at awkward sizes, each call(*inputs) -> out (its inputs all tensors, for
    launch.same_kind): the M = 1 GEMV (int4 and int8), a few rows split along K (the combine's second launch), each
    with a residual too, and a prefill's tile with an in-place residual (out is the residual)."""
    dt = ENV.dtype
    g = 32 if ENV.interpret else 128
    K = 3 * g
    w4, w8 = L.quantize_int4_ref(weight(47, K), g), L.quantize_int8_ref(weight(47, K))
    x1, x5, x40 = (torch.randn(m, K, device=DEV, dtype=dt) for m in (1, 5, 40))
    res, res1, res5 = (torch.randn(m, 47, device=DEV, dtype=dt) for m in (40, 1, 5))
    return {
        "int4 M=1": (lambda x: L.w4a16_fast(x, w4), (x1,)),
        "int8 M=1": (lambda x: L.w8a16_fast(x, w8), (x1,)),
        "int4 M=1, residual": (lambda x, r: L.w4a16_fast(x, w4, residual=r), (x1, res1)),
        "int4 M=5, split": (lambda x: L.w4a16_fast(x, w4, SPLIT_K=2), (x5,)),
        "int4 M=5, split, residual": (lambda x, r: L.w4a16_fast(x, w4, residual=r, SPLIT_K=2), (x5, res5)),
        "int4 M=40, residual in place": (lambda x, r: L.w4a16_fast(x, w4, out=r, residual=r), (x40, res)),
        "int8 M=5, split, residual": (lambda x, r: L.w8a16_fast(x, w8, residual=r, SPLIT_K=2), (x5, res5)),
        "int8 M=40, residual in place": (lambda x, r: L.w8a16_fast(x, w8, out=r, residual=r), (x40, res)),
        "int4 M=40, dequant, residual in place": (
            lambda x, r: L.w4a16_fast(x, w4, out=r, residual=r, schedule=L.dequant_schedule(4, g)),
            (x40, res),
        ),
        "int8 M=40, dequant, residual": (
            lambda x, r: L.w8a16_fast(x, w8, residual=r, schedule=L.dequant_schedule(8)),
            (x40, res),
        ),
    }


@pytest.mark.parametrize("name", FAST_CALLS)
def test_a_repeated_fast_call_launches_the_prepared_kernels(monkeypatch, name):
    """On a GPU the second call of one signature must skip the checks and the schedule (_fast_prologue raises here)
    and give bit for bit the first call's result, split-K's combine and an in-place residual included; a kernel
    defined again (a cell run again) must not reuse the old kernel's
    launch. Under the interpreter nothing is prepared."""
    from utils import launch

    monkeypatch.setattr(L, "FAST_PREPARED", launch.Table())
    monkeypatch.setattr(L, "DEQUANT_CHUNK_BYTES", DEQUANT_CHUNK)
    call, inputs = _fast_calls()[name]
    fresh = [t.clone() for t in inputs]  # the in-place case writes its residual
    first = call(*inputs).clone()
    if ENV.interpret:
        assert len(L.FAST_PREPARED) == 0, "under the interpreter there is no compiled kernel to prepare"
        return
    assert len(L.FAST_PREPARED) == 1, "the first call's launches should have been kept"

    def checked_again(*args, **kwargs):
        raise AssertionError(f"a repeated {name} call went through its checks: the prepared launch was not used")

    with monkeypatch.context() as m:
        m.setattr(L, "_fast_prologue", checked_again)
        again = call(*(launch.same_kind(t) for t in fresh))
    assert torch.equal(first, again), "the prepared launches must run the very kernels the first call ran"
    monkeypatch.setattr(L, "split_k_combine_kernel", triton.jit(L.split_k_combine_kernel.fn))  # a cell run again
    call(*(t.clone() for t in fresh))
    assert len(L.FAST_PREPARED) == 2, "a kernel defined again must get its own launch, not the old kernel's"


class _InterpretedPrepared:
    """A stand-in for utils.launch.Prepared under the interpreter (which prepares nothing): keeps the launch's
    arguments but its tensors, and launches the interpreted kernel with the tensors a call passes in their place,
    so that the fast launchers' prepared path runs here, as it runs on a GPU."""

    def __init__(self, kernel, grid, args, kwargs):
        self.kernel, self.grid, self.kwargs = kernel, grid, kwargs
        self.slots = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
        self.args = [None if i in self.slots else a for i, a in enumerate(args)]
        self.name = kernel.fn.__name__
        self.calls = 0

    def __call__(self, *tensors):
        assert len(tensors) == len(self.slots), f"{self.name}: {len(tensors)} tensors for {len(self.slots)}"
        args = list(self.args)
        for i, t in zip(self.slots, tensors):
            args[i] = t
        self.kernel[self.grid](*args, **self.kwargs)
        self.calls += 1
        return True


@pytest.mark.parametrize("name", FAST_CALLS)
def test_the_prepared_fast_path_passes_each_launch_its_tensors(monkeypatch, name):
    """The fast launchers' prepared path, run under the interpreter with a stand-in for utils.launch.prepare: the
    second call of a signature launches through the kept launches only (_fast_prologue raises), each given the
    call's tensors in the kernel's order (x, the weight's parts, the residual or the partial sums, the output; the
    combine's partial sums, residual and out), and gives the full path's result bit for bit, on fresh tensors."""
    from utils import launch

    if not ENV.interpret:
        pytest.skip("the GPU prepares real launches: test_a_repeated_fast_call_launches_the_prepared_kernels")
    kept = []

    def prepare(kernel, grid, *args, **kwargs):
        kept.append(_InterpretedPrepared(kernel, grid, args, kwargs))
        return kept[-1]

    monkeypatch.setattr(L, "FAST_PREPARED", launch.Table())
    monkeypatch.setattr(L, "DEQUANT_CHUNK_BYTES", DEQUANT_CHUNK)
    monkeypatch.setattr(utils.launch, "prepare", prepare)
    call, inputs = _fast_calls()[name]
    fresh = [t.clone() for t in inputs]
    full = call(*inputs).clone()
    assert len(L.FAST_PREPARED) == 1 and kept, "the first call's launches should have been kept"
    with monkeypatch.context() as m:
        m.setattr(L, "_fast_prologue", lambda *a, **k: pytest.fail("the repeated call ran the checks"))
        again = call(*(launch.same_kind(t) for t in fresh))
    assert all(p.calls == 1 for p in kept), "each kept launch runs once for the repeated call"
    assert torch.equal(full, again), "the prepared path must give the full path's result"


def test_a_prepared_fast_call_still_refuses_an_out_that_overlaps_x(monkeypatch):
    """The address checks are the ones a repeated call cannot skip: a second call whose out lies inside its x, with
    the same signature as a first call whose did not (the same shapes, strides and alignment), must be refused as
    the first call's checks refuse it, not launched."""
    from utils import launch

    monkeypatch.setattr(L, "FAST_PREPARED", launch.Table())
    g = 32 if ENV.interpret else 128
    K = 3 * g
    w = L.quantize_int4_ref(weight(47, K), g)
    apart_x, apart_out = (torch.randn(1, K, device=DEV, dtype=ENV.dtype) for _ in range(2))
    L.w4a16_fast(apart_x, w, out=apart_out[:, :47])  # out: a (1, 47) view of rows K long, as below
    shared = torch.randn(1, K, device=DEV, dtype=ENV.dtype)
    with pytest.raises(ValueError, match="out"):
        L.w4a16_fast(shared, w, out=shared[:, :47])


def test_clear_schedule_cache_forgets_the_prepared_launches(monkeypatch):
    """Editing FAST_SCHEDULES and calling clear_schedule_cache() must reach the launches kept with the old choice."""
    from utils import launch

    table = launch.Table()
    table.launches["a signature"] = "a prepared launch"
    monkeypatch.setattr(L, "FAST_PREPARED", table)
    L.clear_schedule_cache()
    assert len(L.FAST_PREPARED) == 0, "clear_schedule_cache left the prepared launches of the old schedules"


def test_the_fast_signature_tells_apart_what_changes_the_launch(monkeypatch):
    """fast_signature: the same for a repeated call (new tensors of the same kind), different for another shape, an
    out given, a residual, a schedule asked for, INT4_DOTS and the dots' PTX; None where it cannot describe the call
    (INT4_DOTS as a dict by shape: the full path then runs every time)."""
    from utils import launch

    g = 32
    w = L.quantize_int4_ref(weight(40, 3 * g), g)
    x = torch.randn(1, 3 * g, device=DEV, dtype=ENV.dtype)
    out = torch.empty(1, 40, device=DEV, dtype=ENV.dtype)

    def sig(x=x, w=w, out=None, residual=None, schedule=None, overrides=None):
        return L.fast_signature(4, x, w, out, residual, schedule, overrides or {})

    base = sig()
    assert base is not None and base == sig(x=launch.same_kind(x)), "a repeated call must find its launch"
    others = {
        "x of two rows": sig(x=torch.randn(2, 3 * g, device=DEV, dtype=ENV.dtype)),
        "an out": sig(out=out),
        "a residual": sig(residual=out),
        "a schedule": sig(schedule=L.FastSchedule("pipe", 1, 8, 64, 1, 2, 3)),
        "an override": sig(overrides={"SPLIT_K": 2}),
        "another weight's shape": sig(w=L.quantize_int4_ref(weight(41, 3 * g), g)),
    }
    for what, other in others.items():
        assert other != base, f"{what} must not take the launch prepared without it"
    monkeypatch.setattr(L, "INT4_DOTS", "mma")
    mma = sig()
    assert mma != base, "INT4_DOTS changes the dots the stream kernels launch with"
    monkeypatch.setattr(L, "INT4_MMA_PTX", L.int4_mma_ptx(4, 2))
    assert sig() != mma, "INT4_MMA_PTX is the dots' code the stream kernels compile with"
    monkeypatch.setattr(L, "INT4_DOTS", {None: "pairs"})
    assert sig() is None, "a dict cannot key a table: no prepared launch, the full path"


def test_fast_launchers_refuse_bad_schedules():
    x = torch.randn(3, 100, device=DEV, dtype=ENV.dtype)
    q4, q8 = L.quantize_int4_ref(weight(6, 100), 32), L.quantize_int8_ref(weight(6, 100))
    cases = {
        "a step that is not whole groups": (lambda: L.w4a16_fast(x, q4, schedule=_fs("gemv", 4, 16, 48, 1)),
                                            "power of two|whole number of groups"),
        "a step of 3 groups": (lambda: L.w4a16_fast(x, q4, schedule=_fs("gemv", 4, 16, 96, 1)), "power of two"),
        "BLOCK_M below M": (lambda: L.w4a16_fast(x, q4, schedule=_fs("gemv", 2, 16, 64, 1)), "every row of x"),
        "a tile step that is not the group": (lambda: L.w4a16_fast(x, q4, schedule=_fs("tile", 16, 16, 64, 1)),
                                              "one group at a time"),
        "a tile of 8 rows": (lambda: L.w8a16_fast(x, q8, schedule=_fs("tile", 8, 16, 64, 1)), "at least 16"),
        "an unknown field": (lambda: L.w4a16_fast(x, q4, BLOCK_Q=2), "unknown schedule fields"),
        "an unknown kernel": (lambda: L.w4a16_fast(x, q4, kernel="fast"), "kernel one of .*'stream'"),
        "the int4 slab kernel for int8": (lambda: L.w8a16_fast(x, q8, kernel="slab"), "reads int4 codes"),
        "the int4 stream kernel for int8": (lambda: L.w8a16_fast(x[:1], q8, kernel="stream"), "reads int4 codes"),
        "the scaled tile for int8": (lambda: L.w8a16_fast(x, q8, schedule=_fs("scaled_swap", 16, 16, 128, 1)),
                                     "reads int4 codes"),
        "the stream kernel for 3 rows": (lambda: L.w4a16_fast(x, q4, schedule=_fs("stream", 4, 16, 64, 1)),
                                         "one row of x"),
        "a stream step that is not whole groups": (
            lambda: L.w4a16_fast(x[:1], q4, schedule=_fs("stream", 1, 16, 16, 1)), "whole number of groups"),
        "a scaled step that is not whole groups": (
            lambda: L.w4a16_fast(x, q4, schedule=_fs("scaled", 16, 16, 16, 1)), "whole number of groups"),
        "a scaled tile of 8 rows of W": (lambda: L.w4a16_fast(x, q4, schedule=_fs("scaled_swap", 16, 8, 64, 1)),
                                         "at least 16"),
        "a slab step that is not whole groups": (lambda: L.w4a16_fast(x, q4, schedule=_fs("slab", 4, 16, 16, 1)),
                                                 "whole number of groups"),
        "a dequant step that is not whole groups": (
            lambda: L.w4a16_fast(x, q4, schedule=_fs("dequant", 16, 16, 16, 1)), "whole number of groups"),
        "a dequant split along K": (lambda: L.w8a16_fast(x, q8, schedule=_fs("dequant", 16, 16, 64, 2)),
                                    "all of K to cuBLAS"),
        "SPLIT_K of 3": (lambda: L.w8a16_fast(x, q8, SPLIT_K=3), "power of two"),
        "SPLIT_K past grid axis 1": (lambda: L.w8a16_fast(x, q8, SPLIT_K=2**16), "at most 65535"),
        "a W tile past one block": (lambda: L.w4a16_fast(x[:1], q4, schedule=_fs("stream", 1, 2**20, 64, 1)),
                                    "more than one block takes"),
        "an Int8Weight to w4a16_fast": (lambda: L.w4a16_fast(x, q8), "must be an Int4Weight"),
        "x with the wrong K": (lambda: L.w8a16_fast(x[:, :64].contiguous(), q8), "K=100"),
    }  # fmt: skip
    for call, message in cases.values():
        with pytest.raises((ValueError, TypeError), match=message):
            call()


# -- planted mistakes: a W4A16 / W8A16 kernel written here, wrong in one way each --------------------------------------


@triton.jit
def planted_w4a16_kernel(
    x_ptr,
    packed_ptr,
    scale_ptr,
    zero_ptr,
    out_ptr,
    M,
    N,
    K,
    stride_xm,
    stride_pn,
    stride_sn,
    stride_om,
    stride_os,
    GROUP_SIZE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SPLIT_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    MISTAKE: tl.constexpr,
):
    pid_m, pid_n = L5.grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    groups = tl.cdiv(K, GROUP_SIZE)
    if MISTAKE == "drop last group":
        groups = K // GROUP_SIZE
    per_split = tl.cdiv(groups, SPLIT_K)
    first = tl.program_id(1) * per_split
    last = tl.minimum(first + per_split, groups)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_j = tl.arange(0, GROUP_SIZE // 2)
    mask_m, mask_n = offs_m < M, offs_n < N
    rows_n = offs_n.to(tl.int64)
    x_rows = x_ptr + offs_m.to(tl.int64)[:, None] * stride_xm
    p_rows = packed_ptr + rows_n[:, None] * stride_pn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for g in range(first, last):
        byte = tl.load(p_rows + g * (GROUP_SIZE // 2) + offs_j[None, :], mask=mask_n[:, None], other=0)
        gs = g
        if MISTAKE == "group 0":
            gs = 0
        scale = tl.load(scale_ptr + rows_n * stride_sn + gs, mask=mask_n, other=0.0).to(tl.float32)
        zero = tl.load(zero_ptr + rows_n * stride_sn + gs, mask=mask_n, other=0).to(tl.float32)
        k_even = g * GROUP_SIZE + 2 * offs_j
        mask_k = (k_even[None, :] < K) | (MISTAKE == "x unmasked along K")
        x_even = tl.load(x_rows + k_even[None, :], mask=mask_m[:, None] & mask_k, other=0.0)
        mask_k = (k_even[None, :] + 1 < K) | (MISTAKE == "x unmasked along K")
        x_odd = tl.load(x_rows + k_even[None, :] + 1, mask=mask_m[:, None] & mask_k, other=0.0)
        q_lo = byte & 0xF
        q_hi = byte >> 4
        if MISTAKE == "swapped":
            q_lo, q_hi = q_hi, q_lo
        if MISTAKE == "unmasked":
            q_lo = byte
        z = zero[:, None]
        if MISTAKE == "no zero":
            z = 0.0 * z
        if MISTAKE == "plus zero":
            z = -z
        lo = (q_lo.to(tl.float32) - z).to(x_even.dtype)
        hi = (q_hi.to(tl.float32) - z).to(x_even.dtype)
        if MISTAKE == "byte group":  # each byte's scale from (byte index) // GROUP_SIZE, dequantized in place
            gb = (g * (GROUP_SIZE // 2) + offs_j[None, :]) // GROUP_SIZE
            sb = tl.load(scale_ptr + rows_n[:, None] * stride_sn + gb, mask=mask_n[:, None], other=0.0).to(tl.float32)
            zb = tl.load(zero_ptr + rows_n[:, None] * stride_sn + gb, mask=mask_n[:, None], other=0).to(tl.float32)
            lo = ((q_lo.to(tl.float32) - zb) * sb).to(tl.float32)
            hi = ((q_hi.to(tl.float32) - zb) * sb).to(tl.float32)
            part = tl.dot(x_even.to(tl.float32), tl.trans(lo), input_precision="ieee")
            acc += tl.dot(x_odd.to(tl.float32), tl.trans(hi), part, input_precision="ieee")
        else:
            part = tl.dot(x_even, tl.trans(lo), input_precision=DOT_PRECISION)
            part = tl.dot(x_odd, tl.trans(hi), part, input_precision=DOT_PRECISION)
            if MISTAKE == "scale twice":
                part = part * scale[None, :]
            acc += part * scale[None, :]
    out = out_ptr + tl.program_id(1) * stride_os + offs_m.to(tl.int64)[:, None] * stride_om + offs_n[None, :]
    tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])


def planted_w4a16(mistake):
    def w4a16(x, w, *, out=None):
        M, (N, K) = x.shape[0], w.shape
        out = utils.require_out(out, shape=(M, N), dtype=x.dtype, device=x.device)
        sched = L.schedule(M, N, K, w.group_size)
        strides = (x.stride(0), w.packed.stride(0), w.scale.stride(0))
        return L.launch_wxa16(planted_w4a16_kernel, x, (w.packed, w.scale, w.zero), out, M, N, K, strides, sched,
                         GROUP_SIZE=w.group_size, MISTAKE=mistake)  # fmt: skip

    return w4a16


W4_MISTAKES = {
    "swapped": "nibbles are swapped",
    "no zero": "zero point is not subtracted",
    "plus zero": "zero point is added",
    "unmasked": "low nibble is not masked",
    "group 0": "group 0's scale",
    "byte group": "scale of the wrong group",
    "scale twice": "scale is applied twice",
    "drop last group": "misses the last, partial group",
}


def test_planted_w4a16_without_a_mistake_passes():
    L.check_w4a16(planted_w4a16("none"), quiet=True)


@pytest.mark.parametrize("mistake", list(W4_MISTAKES))
def test_planted_w4a16_mistake_gets_its_hint(mistake):
    with pytest.raises(AssertionError, match=W4_MISTAKES[mistake]):
        L.check_w4a16(planted_w4a16(mistake), quiet=True)


@pytest.mark.skipif(not ENV.interpret, reason="memory is watched under the interpreter only")
def test_planted_w4a16_reading_x_past_k_is_caught_by_the_memory_watch():
    # the padded last group's codes dequantize to 0, so the output is right (unless the bytes past x hold a NaN):
    # the addresses give it away either way ("touches", or "reads" where the garbage read in made the values wrong)
    with pytest.raises(AssertionError, match="memory outside the tensors it was given"):
        L.check_w4a16(planted_w4a16("x unmasked along K"), quiet=True)


@triton.jit
def planted_w8a16_kernel(
    x_ptr,
    q_ptr,
    scale_ptr,
    out_ptr,
    M,
    N,
    K,
    stride_xm,
    stride_qn,
    stride_om,
    stride_os,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    SPLIT_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    MISTAKE: tl.constexpr,
):
    pid_m, pid_n = L5.grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    steps = tl.cdiv(K, BLOCK_K)
    if MISTAKE == "drop last step":
        steps = K // BLOCK_K
    per_split = tl.cdiv(steps, SPLIT_K)
    first = tl.program_id(1) * per_split
    last = tl.minimum(first + per_split, steps)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    mask_m, mask_n = offs_m < M, offs_n < N
    x_rows = x_ptr + offs_m.to(tl.int64)[:, None] * stride_xm
    q_rows = q_ptr + offs_n.to(tl.int64)[:, None] * stride_qn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for step in range(first, last):
        k = step * BLOCK_K + offs_k
        x = tl.load(x_rows + k[None, :], mask=mask_m[:, None] & (k[None, :] < K), other=0.0)
        q = tl.load(q_rows + k[None, :], mask=mask_n[:, None] & (k[None, :] < K), other=0)
        if MISTAKE == "unsigned":
            q = q.to(tl.uint8).to(tl.int32)
        acc += tl.dot(x, tl.trans(q.to(x.dtype)), input_precision=DOT_PRECISION)
    if MISTAKE != "no scale":
        acc = acc * tl.load(scale_ptr + offs_n, mask=mask_n, other=0.0).to(tl.float32)[None, :]
    out = out_ptr + tl.program_id(1) * stride_os + offs_m.to(tl.int64)[:, None] * stride_om + offs_n[None, :]
    tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])


def planted_w8a16(mistake):
    def w8a16(x, w, *, out=None):
        M, (N, K) = x.shape[0], w.shape
        out = utils.require_out(out, shape=(M, N), dtype=x.dtype, device=x.device)
        BLOCK_K = 128 if M <= L.DECODE_M else 64
        sched = L.schedule(M, N, K, BLOCK_K)
        return L.launch_wxa16(planted_w8a16_kernel, x, (w.q, w.scale), out, M, N, K, (x.stride(0), w.q.stride(0)),
                         sched, BLOCK_K=BLOCK_K, MISTAKE=mistake)  # fmt: skip

    return w8a16


W8_MISTAKES = {
    "no scale": "scale is not applied",
    "unsigned": "read as unsigned bytes",
    "drop last step": "misses its last, partial step",
}


def test_planted_w8a16_without_a_mistake_passes():
    L.check_w8a16(planted_w8a16("none"), quiet=True)


@pytest.mark.parametrize("mistake", list(W8_MISTAKES))
def test_planted_w8a16_mistake_gets_its_hint(mistake):
    with pytest.raises(AssertionError, match=W8_MISTAKES[mistake]):
        L.check_w8a16(planted_w8a16(mistake), quiet=True)


# -- a learner's mistakes, planted in the solution's own source ------------------------------------------------------


def _check_pack():
    L.check_pack_int4(L.pack_int4, L.unpack_int4, quiet=True)


def _check_codes():
    L.check_int4_codes(L.int4_codes_ref, quiet=True)


def _check_w4a16():
    L.check_w4a16(L.w4a16, quiet=True)


def _check_w8a16():
    L.check_w8a16(L.w8a16, quiet=True)


_SWAP = (("scale_ptr + rows_n", "SWAP"), ("zero_ptr + rows_n", "scale_ptr + rows_n"), ("SWAP", "zero_ptr + rows_n"))
_XSWAP = (("tl.dot(x_even,", "SWAP"), ("tl.dot(x_odd,", "tl.dot(x_even,"), ("SWAP", "tl.dot(x_odd,"))
_AFTER = "    acc = acc * {}[None, :]\n    # -- write back"  # the scale applied once, after the K loop
PLANTED = {  # mistake: (function, its edits, the check, words of its hint)
    "pack shifts by 8": ("pack_int4", [("(q[:, 1::2] << 4)", "(q[:, 1::2] << 8)")], _check_pack, "high nibble is lost"),
    "unpack keeps the high nibble in place": (
        "unpack_int4",
        [("packed >> 4", "packed & 0xF0")],
        _check_pack,
        "16 times too large",
    ),  # fmt: skip
    "unpack shifts signed bytes": (
        "unpack_int4",
        [("packed >> 4", "(packed.view(torch.int8) >> 4).view(torch.uint8)")],
        _check_pack,
        "dragged the sign bit",
    ),  # fmt: skip
    "codes not clamped": (
        "int4_codes_ref",
        [("zero[..., None]).clamp(0, 15)", "zero[..., None])")],
        _check_codes,
        "returned code 16",
    ),  # fmt: skip
    "zero point rounded down": (
        "int4_codes_ref",
        [("torch.round(-lo / s)", "torch.floor(-lo / s)")],
        _check_codes,
        "zero point is rounded down",
    ),  # fmt: skip
    "zero point's sign": (
        "int4_codes_ref",
        [("torch.round(-lo / s)", "torch.round(lo / s)")],
        _check_codes,
        "the wrong sign",
    ),  # fmt: skip
    "zero point not added to the codes": (
        "int4_codes_ref",
        [("torch.round(wf / s[..., None] + zero[..., None])", "torch.round(wf / s[..., None])")],
        _check_codes,
        "the zero point is not added to the codes",
    ),  # fmt: skip
    "codes truncated": (
        "int4_codes_ref",
        [("torch.round(wf / s[..., None] + zero[..., None])", "(wf / s[..., None] + zero[..., None])")],
        _check_codes,
        "the codes are truncated, not rounded",
    ),  # fmt: skip
    "int4 codes from a symmetric range": (
        "int4_codes_ref",
        [
            ("lo = wf.amin(dim=-1).clamp(max=0)", "lo = -wf.abs().amax(dim=-1)"),
            ("hi = wf.amax(dim=-1).clamp(min=0)", "hi = wf.abs().amax(dim=-1)"),
        ],
        _check_codes,
        "the scale is symmetric, 2 max|w| / 15",
    ),  # fmt: skip
    "int4 codes from max |w| / 7": (
        "int4_codes_ref",
        [
            ("(hi - lo) / 15, 1.0), 15,", "torch.maximum(hi, -lo) / 7, 1.0), 7,"),
            ("zero = torch.round(-lo / s).clamp(0, 15)", "zero = torch.full_like(s, 8)"),
        ],
        _check_codes,
        "max|w| / 7 with the zero point fixed at 8",
    ),  # fmt: skip
    "pack shifts by 3": ("pack_int4", [("(q[:, 1::2] << 4)", "(q[:, 1::2] << 3)")], _check_pack, "shifted by 3, not 4"),
    "unpack shifts by 3": ("unpack_int4", [("packed >> 4", "packed >> 3")], _check_pack, "shifted down by 3, not 4"),
    "w4a16 high nibble shifted by 3": (
        "w4a16_kernel",
        [("(byte >> 4)", "((byte >> 3) & 0xF)")],
        _check_w4a16,
        "shifted down by 3, not 4 (the mask",
    ),  # fmt: skip
    "w4a16 zero point after the scale": (
        "w4a16_kernel",
        [
            ("(tl.float32) - zero[:, None])", "(tl.float32) * scale[:, None] - zero[:, None])"),
            ("acc += part * scale[None, :]", "acc += part"),
        ],
        _check_w4a16,
        "subtracted after the scale",
    ),  # fmt: skip
    "w4a16 scale and zero swapped": ("w4a16_kernel", _SWAP, _check_w4a16, "are swapped: the scale comes"),
    "w4a16 low nibble times x_odd": ("w4a16_kernel", _XSWAP, _check_w4a16, "or x_even and x_odd, in the two dots"),
    "w4a16 x_odd at the even columns": (
        "w4a16_kernel",
        [("x_rows + k_even[None, :] + 1,", "x_rows + k_even[None, :],")],
        _check_w4a16,
        "x at the even columns",
    ),  # fmt: skip
    "w4a16 both dots take x_odd": (
        "w4a16_kernel",
        [("tl.dot(x_even, tl.trans(lo)", "tl.dot(x_odd, tl.trans(lo)")],
        _check_w4a16,
        "x at the odd columns",
    ),  # fmt: skip
    "unpack masks the high nibble before shifting": (
        "unpack_int4",
        [("packed >> 4", "(packed & 0xF) >> 4")],
        _check_pack,
        "the high nibble comes back as 0",
    ),  # fmt: skip
    "w4a16 scale rows 1 apart": (
        "w4a16_kernel",
        [("scale_ptr + rows_n * stride_sn + g", "scale_ptr + rows_n + g")],
        _check_w4a16,
        "row n's scale was read at scale_ptr + n + g",
    ),  # fmt: skip
    "w4a16 zero point rows 1 apart": (
        "w4a16_kernel",
        [("zero_ptr + rows_n * stride_sn + g", "zero_ptr + rows_n + g")],
        _check_w4a16,
        "row n's zero point was read at zero_ptr + n + g",
    ),  # fmt: skip
    "w4a16 k_even without the 2": (
        "w4a16_kernel",
        [("k_even = g * GROUP_SIZE + 2 * offs_j", "k_even = g * GROUP_SIZE + offs_j")],
        _check_w4a16,
        "the factor 2 is missing",
    ),  # fmt: skip
    # (session 29) mistakes that got the generic hint
    "w4a16 scales read transposed": (
        "w4a16_kernel",
        [("scale_ptr + rows_n * stride_sn + g", "scale_ptr + g * stride_sn + rows_n")],
        _check_w4a16,
        "the scales were read transposed",
    ),  # fmt: skip
    "w4a16 scales and zero points read transposed": (
        "w4a16_kernel",
        [
            ("scale_ptr + rows_n * stride_sn + g", "scale_ptr + g * stride_sn + rows_n"),
            ("zero_ptr + rows_n * stride_sn + g", "zero_ptr + g * stride_sn + rows_n"),
        ],
        _check_w4a16,
        "the scales and zero points were read transposed",
    ),  # fmt: skip
    "w4a16 last group's scale applied after the loop": (
        "w4a16_kernel",
        [
            ("acc += part * scale[None, :]", "acc += part"),
            (
                "    for g in range(first, last):",
                "    scale = tl.zeros((BLOCK_N,), dtype=tl.float32)\n    for g in range(first, last):",
            ),
            ("    # -- write back", _AFTER.format("scale")),
        ],  # scale assigned before the loop: compiled, a name first assigned in it does not exist after it
        _check_w4a16,
        "after the K loop (the last group's)",
    ),  # fmt: skip
    "w4a16 group 0's scale applied after the loop": (
        "w4a16_kernel",
        [
            ("acc += part * scale[None, :]", "acc += part"),
            ("    # -- write back", _AFTER.format("tl.load(scale_ptr + rows_n * stride_sn, mask=mask_n, other=0.0)")),
        ],
        _check_w4a16,
        "after the K loop (group 0's)",
    ),  # fmt: skip
    "w4a16 zero point of group 0": (
        "w4a16_kernel",
        [("zero_ptr + rows_n * stride_sn + g", "zero_ptr + rows_n * stride_sn")],
        _check_w4a16,
        "every step used group 0's zero point",
    ),  # fmt: skip
    # (session 30) split-K schedules that share the K steps out wrongly: the generic hint before
    "w4a16 split s starts at group s": (
        "w4a16_kernel",
        [("first = tl.program_id(1) * per_split", "first = tl.program_id(1)")],
        _check_w4a16,
        "split s starts at group s (first = tl.program_id(1))",
    ),  # fmt: skip
    "w8a16 split s starts at step s": (
        "w8a16_kernel",
        [("first = tl.program_id(1) * per_split", "first = tl.program_id(1)")],
        _check_w8a16,
        "split s starts at step s (first = tl.program_id(1))",
    ),  # fmt: skip
    "w4a16 split s starts at group s * SPLIT_K": (
        "w4a16_kernel",
        [("first = tl.program_id(1) * per_split", "first = tl.program_id(1) * SPLIT_K")],
        _check_w4a16,
        "split s starts at group s * SPLIT_K",
    ),  # fmt: skip
    "w8a16 every split stops at per_split": (
        "w8a16_kernel",
        [("last = tl.minimum(first + per_split, steps)", "last = tl.minimum(per_split, steps)")],
        _check_w8a16,
        "every split stops at step per_split",
    ),  # fmt: skip
    # (probe12) mistakes that got the generic hint
    "zero point rounded up": (
        "int4_codes_ref",
        [("torch.round(-lo / s)", "torch.ceil(-lo / s)")],
        _check_codes,
        "zero point is rounded up",
    ),  # fmt: skip
    "w4a16 q - zero in uint8": (
        "w4a16_kernel",
        [
            ("mask=mask_n, other=0).to(tl.float32)", "mask=mask_n, other=0)"),
            ("((byte & 0xF).to(tl.float32) - zero[:, None])", "((byte & 0xF) - zero[:, None])"),
            ("((byte >> 4).to(tl.float32) - zero[:, None])", "((byte >> 4) - zero[:, None])"),
        ],
        _check_w4a16,
        "q - zero wrapped around below 0",
    ),  # fmt: skip
    "w4a16 high nibble not shifted down": (
        "w4a16_kernel",
        [("(byte >> 4)", "(byte & 0xF0)")],
        _check_w4a16,
        "the high nibble comes back 16 times too large",
    ),  # fmt: skip
    # (session 52) mistakes that got the generic hint, or the split-K one
    "int4 codes grouped every groups-th column": (
        "int4_codes_ref",
        [
            (".view(N, groups, G)  #", ".view(N, G, groups)  #"),
            ("lo = wf.amin(dim=-1)", "lo = wf.amin(dim=1)"),
            ("hi = wf.amax(dim=-1)", "hi = wf.amax(dim=1)"),
            ("torch.round(wf / s[..., None] + zero[..., None])", "torch.round(wf / s[:, None] + zero[:, None])"),
        ],
        _check_codes,
        "the groups are every groups-th column",
    ),  # fmt: skip
    "int4 codes grouped down the columns": (
        "int4_codes_ref",
        [(".view(N, groups, G)  #", ".T.reshape(N, groups, G)  #")],
        _check_codes,
        "the groups run down the columns, along N",
    ),  # fmt: skip
    "int4 codes with the scales transposed": (
        "int4_codes_ref",
        [
            (
                "F.pad(w.float(), (0, groups * G - K)).view(N, groups, G)",
                "F.pad(w.float().T, (0, 0, 0, groups * G - K)).view(groups, G, N).permute(2, 0, 1)",
            ),
            (
                "q.to(torch.uint8).view(N, groups * G), scale, zero.to(torch.uint8)",
                "q.to(torch.uint8).reshape(N, groups * G), scale.T, zero.to(torch.uint8).T",
            ),
        ],
        _check_codes,
        "the scales came back transposed, (groups, N) for (N, groups)",
    ),  # fmt: skip
    "int4 codes with one scale a group for every row": (
        "int4_codes_ref",
        [("wf.amin(dim=-1)", "wf.amin(dim=(0, 2))"), ("wf.amax(dim=-1)", "wf.amax(dim=(0, 2))")],
        _check_codes,
        "the scales came back one a group for all rows together",
    ),  # fmt: skip
    "int4 codes clamped to 0 .. 16": (
        "int4_codes_ref",
        [("zero[..., None]).clamp(0, 15)", "zero[..., None]).clamp(0, 16)")],
        _check_codes,
        "16 needs a fifth bit",
    ),  # fmt: skip
    "int4 codes clamped to 1 .. 15": (
        "int4_codes_ref",
        [("zero[..., None]).clamp(0, 15)", "zero[..., None]).clamp(1, 15)")],
        _check_codes,
        "the codes are clamped to 1 .. 15",
    ),  # fmt: skip
    "int4 codes clamped to 0 .. 14": (
        "int4_codes_ref",
        [("zero[..., None]).clamp(0, 15)", "zero[..., None]).clamp(0, 14)")],
        _check_codes,
        "the codes are clamped to 0 .. 14",
    ),  # fmt: skip
    "int4 codes clamped to -8 .. 7": (
        "int4_codes_ref",
        [("zero[..., None]).clamp(0, 15)", "zero[..., None]).clamp(-8, 7)")],
        _check_codes,
        "the codes are clamped to -8 .. 7, a signed int4's range",
    ),  # fmt: skip
    "int4 zero points clamped to 1 .. 15": (
        "int4_codes_ref",
        [("torch.round(-lo / s).clamp(0, 15)", "torch.round(-lo / s).clamp(1, 15)")],
        _check_codes,
        "the zero points are clamped to 1 .. 15",
    ),  # fmt: skip
    "int4 zero points clamped to 0 .. 14": (
        "int4_codes_ref",
        [("torch.round(-lo / s).clamp(0, 15)", "torch.round(-lo / s).clamp(0, 14)")],
        _check_codes,
        "the zero points are clamped to 0 .. 14",
    ),  # fmt: skip
    "int4 zero points clamped to -8 .. 7": (
        "int4_codes_ref",
        [("torch.round(-lo / s).clamp(0, 15)", "torch.round(-lo / s).clamp(-8, 7)")],
        _check_codes,
        "the zero points are clamped to -8 .. 7",
    ),  # fmt: skip
    "int4 codes from the scale before it is stored": (
        "int4_codes_ref",
        [("s = scale.float()", "s = torch.where(hi > lo, (hi - lo) / 15, 1.0)")],
        _check_codes,
        "taken from the scale before stored_scale rounded it",
    ),  # fmt: skip
    "int4 scale hi - lo / 15": (
        "int4_codes_ref",
        [("(hi - lo) / 15, 1.0)", "hi - lo / 15, 1.0)")],
        _check_codes,
        "the scale is hi - lo / 15, the division done first",
    ),  # fmt: skip
    "int4 scale (lo - hi) / 15": (
        "int4_codes_ref",
        [("(hi - lo) / 15, 1.0)", "(lo - hi) / 15, 1.0)")],
        _check_codes,
        "the scale is (min - max) / 15",
    ),  # fmt: skip
    "int4 range's low end not stretched to 0": (
        "int4_codes_ref",
        [("lo = wf.amin(dim=-1).clamp(max=0)", "lo = wf.amin(dim=-1)")],
        _check_codes,
        "the range's low end is the group's min",
    ),  # fmt: skip
    "int4 range's high end not stretched to 0": (
        "int4_codes_ref",
        [("hi = wf.amax(dim=-1).clamp(min=0)", "hi = wf.amax(dim=-1)")],
        _check_codes,
        "the range's high end is the group's max",
    ),  # fmt: skip
    "w4a16 scale of group g // 2": (
        "w4a16_kernel",
        [("scale_ptr + rows_n * stride_sn + g", "scale_ptr + rows_n * stride_sn + g // 2")],
        _check_w4a16,
        "step g read group g // 2's scale",
    ),  # fmt: skip
    "w4a16 zero point of group g // 2": (
        "w4a16_kernel",
        [("zero_ptr + rows_n * stride_sn + g", "zero_ptr + rows_n * stride_sn + g // 2")],
        _check_w4a16,
        "step g read group g // 2's zero point",
    ),  # fmt: skip
    "w4a16 scale and zero point of group g // 2": (
        "w4a16_kernel",
        [
            ("scale_ptr + rows_n * stride_sn + g", "scale_ptr + rows_n * stride_sn + g // 2"),
            ("zero_ptr + rows_n * stride_sn + g", "zero_ptr + rows_n * stride_sn + g // 2"),
        ],
        _check_w4a16,
        "step g took group g // 2's scale and zero point",
    ),  # fmt: skip
    "w4a16 groups counted from the packed bytes": (
        "w4a16_kernel",
        [("groups = tl.cdiv(K, GROUP_SIZE)", "groups = tl.cdiv(K // 2, GROUP_SIZE)")],
        _check_w4a16,
        "counted as tl.cdiv(K // 2, GROUP_SIZE): K // 2 is a row's packed bytes",
    ),  # fmt: skip
    "w4a16 groups counted from the packed bytes, rounded down": (
        "w4a16_kernel",
        [("groups = tl.cdiv(K, GROUP_SIZE)", "groups = K // 2 // GROUP_SIZE")],
        _check_w4a16,
        "counted as K // 2 // GROUP_SIZE",
    ),  # fmt: skip
    "w4a16 groups counted along N": (
        "w4a16_kernel",
        [("groups = tl.cdiv(K, GROUP_SIZE)", "groups = tl.cdiv(N, GROUP_SIZE)")],
        _check_w4a16,
        "counted as tl.cdiv(N, GROUP_SIZE)",
    ),  # fmt: skip
    "w4a16 every split stops at per_split": (  # the packed-bytes count can give the same sum: both are told
        "w4a16_kernel",
        [("last = tl.minimum(first + per_split, groups)", "last = tl.minimum(per_split, groups)")],
        _check_w4a16,
        "every split stops at group per_split",
    ),  # fmt: skip
    "w4a16 x from the group's byte offset": (
        "w4a16_kernel",
        [("k_even = g * GROUP_SIZE + 2 * offs_j", "k_even = g * (GROUP_SIZE // 2) + 2 * offs_j")],
        _check_w4a16,
        "g * (GROUP_SIZE // 2) is where its bytes start",
    ),  # fmt: skip
    "w4a16 zero point off the low nibbles only": (
        "w4a16_kernel",
        [("((byte >> 4).to(tl.float32) - zero[:, None])", "((byte >> 4).to(tl.float32))")],
        _check_w4a16,
        "subtracted from the low nibbles only",
    ),  # fmt: skip
    "w4a16 zero point off the high nibbles only": (
        "w4a16_kernel",
        [("((byte & 0xF).to(tl.float32) - zero[:, None])", "((byte & 0xF).to(tl.float32))")],
        _check_w4a16,
        "subtracted from the high nibbles only",
    ),  # fmt: skip
    # (session 53, held-out battery) each got the generic hint, or (pack >> 4) one about a shift by 8
    "pack shifts the high nibble the wrong way": (
        "pack_int4",
        [("(q[:, 1::2] << 4)", "(q[:, 1::2] >> 4)")],
        _check_pack,
        ">> 4 (the wrong way)",
    ),  # fmt: skip
    "unpack's high nibble as packed & 0xF0 >> 4": (
        "unpack_int4",
        [("packed >> 4  #", "packed & 0xF0 >> 4  #")],
        _check_pack,
        ">> binds tighter than &",
    ),  # fmt: skip
    "unpack's low nibble as packed - hi": (
        "unpack_int4",
        [("lo, hi = packed & 0xF, packed >> 4", "hi = packed >> 4\n    lo = packed - hi")],
        _check_pack,
        "the low nibble is packed - hi",
    ),  # fmt: skip
    "int4 scale from the max alone": (
        "int4_codes_ref",
        [("(hi - lo) / 15, 1.0)", "hi / 15, 1.0)")],
        _check_codes,
        "the scale is max / 15, from the group's max alone",
    ),  # fmt: skip
    "int4 scale max|w| / 15 with the group's zero point": (
        "int4_codes_ref",
        [("(hi - lo) / 15, 1.0)", "torch.maximum(hi, -lo) / 15, 1.0)")],
        _check_codes,
        "the scale is max|w| / 15, a symmetric scale with the asymmetric zero point",
    ),  # fmt: skip
    "int4 one range for the whole weight": (
        "int4_codes_ref",
        [("wf.amin(dim=-1)", "wf.amin().expand(N, groups)"), ("wf.amax(dim=-1)", "wf.amax().expand(N, groups)")],
        _check_codes,
        "one scale for the whole weight (per-tensor)",
    ),  # fmt: skip
    "int4 codes times the scale": (
        "int4_codes_ref",
        [("torch.round(wf / s[..., None] + zero[..., None])", "torch.round(wf * s[..., None] + zero[..., None])")],
        _check_codes,
        "the codes multiply by the scale",
    ),  # fmt: skip
    "int4 zero point not rounded": (
        "int4_codes_ref",
        [("zero = torch.round(-lo / s).clamp(0, 15)", "zero = (-lo / s).clamp(0, 15)")],
        _check_codes,
        "the zero point is not rounded",
    ),  # fmt: skip
    "int4 codes counted from the min": (
        "int4_codes_ref",
        [("torch.round(wf / s[..., None] + zero[..., None])", "torch.round((wf - lo[..., None]) / s[..., None])")],
        _check_codes,
        "the codes count steps from the group's min",
    ),  # fmt: skip
    "w4a16 high nibble shifted as int8": (
        "w4a16_kernel",
        [("(byte >> 4)", "(byte.to(tl.int8) >> 4)")],
        _check_w4a16,
        "high nibbles of 8 and more came out 16 too small",
    ),  # fmt: skip
    "w4a16 acc overwritten": (
        "w4a16_kernel",
        [("acc += part * scale[None, :]", "acc = part * scale[None, :]")],
        _check_w4a16,
        "acc = part * scale overwrote the sum",
    ),  # fmt: skip
    "unpack's low nibble shifted up": (
        "unpack_int4",
        [("packed & 0xF,", "packed << 4,")],
        _check_pack,
        "the low nibble comes back 16 times too large",
    ),  # fmt: skip
    "int4 rows padded in front": (
        "int4_codes_ref",
        [("(0, groups * G - K)", "(groups * G - K, 0)")],
        _check_codes,
        "the zeros were padded in front of the row",
    ),  # fmt: skip
    "int4 rows not padded": (  # crashed in PyTorch's view, whose words name no group
        "int4_codes_ref",
        [("F.pad(w.float(), (0, groups * G - K))", "w.float()")],
        _check_codes,
        "K = 100 is not a multiple of the group size 32: pad",
    ),  # fmt: skip
    "w4a16 scale on the low nibbles' dot only": (
        "w4a16_kernel",
        [
            (
                "part = tl.dot(x_even, tl.trans(lo), input_precision=DOT_PRECISION)",
                "part = tl.dot(x_even, tl.trans(lo), input_precision=DOT_PRECISION) * scale[None, :]",
            ),
            ("acc += part * scale[None, :]", "acc += part"),
        ],
        _check_w4a16,
        "the scale was applied to the low nibbles' dot only",
    ),  # fmt: skip
    "w4a16 zero point fixed at 8": (
        "w4a16_kernel",
        [("(tl.float32) - zero[:, None])", "(tl.float32) - 8)")],
        _check_w4a16,
        "the zero point is a fixed 8",
    ),  # fmt: skip
}
if ENV.dtype == torch.float16:  # (session 52F) stored_scale told 16 levels: the same codes but where fp16 rounds a
    # subnormal scale (below 2**-14) down far enough that 16 levels push it up a step and 15 do not
    PLANTED["stored_scale told 16 levels"] = (
        "int4_codes_ref",
        [("(hi - lo) / 15, 1.0), 15,", "(hi - lo) / 15, 1.0), 16,")],
        _check_codes,
        "stored_scale's levels",
    )  # fmt: skip
    PLANTED["zero points clamped to 0 .. 16"] = (  # (session 52F) a group from -31 steps of 2**-24 to 0: zero 15.5
        "int4_codes_ref",
        [("zero = torch.round(-lo / s).clamp(0, 15)", "zero = torch.round(-lo / s).clamp(0, 16)")],
        _check_codes,
        "returned zero point 16",
    )  # fmt: skip
    # (session 53) the codes rounded, then the zero point added: another code only at a half whose zero point is
    # odd, which the check's row of subnormal steps has in fp16 (-1.5 steps, zero point 15: 13, not 14)
    PLANTED["int4 codes rounded before the zero point is added"] = (
        "int4_codes_ref",
        [("torch.round(wf / s[..., None] + zero[..., None])", "(torch.round(wf / s[..., None]) + zero[..., None])")],
        _check_codes,
        "the codes were rounded before the zero point was added",
    )  # fmt: skip
if ENV.interpret:  # (session 52) the K loop run twice too long: its masked loads read past the codes, which the
    # memory watch tells; the hint said only "mask every tl.load", and they are masked: the count is the mistake
    PLANTED["w4a16 groups counted with GROUP_SIZE // 2"] = (
        "w4a16_kernel",
        [("groups = tl.cdiv(K, GROUP_SIZE)", "groups = tl.cdiv(K, GROUP_SIZE // 2)")],
        _check_w4a16,
        "the offsets or the loop's count are the likelier mistake",
    )  # fmt: skip


@pytest.mark.skipif(not ENV.interpret, reason="memory is watched under the interpreter only")
def test_a_split_that_runs_past_the_last_group_is_told(monkeypatch, tmp_path):
    """Without the tl.minimum a split whose share of the groups is cut short runs on past the last group: x is masked
    there (0), so the sum is right, but the codes come from past the weight's last row. The check's M = 1 shape
    splits K unevenly, so that the overrun happens."""
    overrun = ("last = tl.minimum(first + per_split, groups)", "last = first + per_split")
    plant(monkeypatch, tmp_path, L, "w4a16_kernel", overrun)
    with pytest.raises(AssertionError, match="past the end of `packed_ptr`"):
        _check_w4a16()


@pytest.mark.parametrize("mistake", list(PLANTED))
def test_planted_mistakes_get_their_hint(mistake, monkeypatch, tmp_path):
    name, edits, check, words = PLANTED[mistake]
    plant(monkeypatch, tmp_path, L, name, *edits)
    with pytest.raises(AssertionError, match=re.escape(words)):
        check()


# -- refusals and empty inputs --------------------------------------------------------------------------------------


def test_formats_and_specs_refuse_inconsistent_parts():
    w = weight(6, 100, dtype=torch.float32)
    q8, q4 = L.quantize_int8_ref(w), L.quantize_int4_ref(w, 32)
    u8 = lambda *s: torch.zeros(*s, dtype=torch.uint8, device=DEV)  # noqa: E731
    cases = {
        "group size 48": (lambda: L.quantize_int4_ref(w, 48), "group_size=48 is not offered"),
        "group size 48 in the bundle": (lambda: L.Int4Weight(q4.packed, q4.scale, q4.zero, 100, 48), "not offered"),
        "an int weight": (lambda: L.quantize_int8_ref(w.long()), "dtype int64"),
        "a 1-D weight": (lambda: L.quantize_int8_ref(w[0]), "2 dimension"),
        "codes past 15": (lambda: L.pack_int4(u8(2, 4) + 16), "int4 codes are 0 .. 15"),
        "an odd K to pack": (lambda: L.pack_int4(u8(2, 5)), "pad K to an even number"),
        "int8 codes to pack": (lambda: L.pack_int4(u8(2, 4).to(torch.int8)), "dtype int8"),
        "scales of another weight": (lambda: L.Int8Weight(q8.q, q8.scale[:-1]), r"Int8Weight.scale has shape"),
        "int scales": (lambda: L.Int8Weight(q8.q, q8.scale.int()), "scales are fp32, fp16 or bf16"),
        "int16 codes": (lambda: L.Int8Weight(q8.q.short(), q8.scale), "2-D int8 tensor"),
        "packed too short for K": (lambda: L.Int4Weight(q4.packed, q4.scale, q4.zero, 200, 32), "needs 7 x 32"),
        "scales per row for int4": (lambda: L.Int4Weight(q4.packed, q4.scale[:, 0], q4.zero, 100, 32), "scale has"),
        "float zero points": (lambda: L.Int4Weight(q4.packed, q4.scale, q4.zero.float(), 100, 32), "uint8 tensor"),
        "zero points of another shape": (lambda: L.Int4Weight(q4.packed, q4.scale, q4.zero[:1], 100, 32), "zero has"),
        "packed as int8": (lambda: L.Int4Weight(q4.packed.to(torch.int8), q4.scale, q4.zero, 100, 32), "uint8"),
        "K as a float": (lambda: L.Int4Weight(q4.packed, q4.scale, q4.zero, 100.0, 32), "non-negative int"),
        "3 bits": (lambda: L.quantize(w, 3), "bits=3"),
    }
    for what, (call, message) in cases.items():
        with pytest.raises((ValueError, TypeError), match=message):
            call()
        utils.refuses({what: call}, quiet=True)


def test_launchers_refuse_bad_inputs():
    w = weight(6, 100)
    q8, q4 = L.quantize_int8_ref(w), L.quantize_int4_ref(w, 32)
    x = torch.randn(3, 100, device=DEV, dtype=ENV.dtype)
    buf = torch.empty(q4.packed.numel() + 1, dtype=torch.uint8, device=DEV)  # codes one byte into a buffer
    misaligned = L.Int4Weight(buf[1:].view(q4.packed.shape).copy_(q4.packed), q4.scale, q4.zero, 100, 32)
    cases = {
        "x with the wrong K": (lambda: L.w4a16(x[:, :64].contiguous(), q4), "K=100"),
        # a slice of the wrong width was told only that it is a view; made contiguous, it then failed on its width
        "a view of the wrong K": (lambda: L.w4a16_fast(x[:, :64], q4), "64 features per row"),
        "a plain tensor as the weight": (lambda: L.w4a16(x, w), "must be an Int4Weight"),
        "an Int4Weight to w8a16": (lambda: L.w8a16(x, q4), "must be an Int8Weight"),
        "int activations": (lambda: L.w8a16(x.long(), q8), "dtype int64"),
        "a non-contiguous x": (lambda: L.w8a16(x.T.contiguous().T, q8), "non-contiguous"),
        "a 3-D x": (lambda: L.w4a16(x[None], q4), "2 dimension"),
        "out of the wrong shape": (lambda: L.w8a16(x, q8, out=torch.empty(3, 7, device=DEV, dtype=x.dtype)), "shape"),
        "out of the wrong dtype": (
            lambda: L.w4a16(x, q4, out=torch.empty(3, 6, device=DEV, dtype=torch.float64)),
            "dtype",
        ),  # fmt: skip
        "out aliasing x": (lambda: L.w8a16(x, q8, out=x[:, :6]), "non-contiguous|shares memory"),
        "BLOCK_N not a power of two": (lambda: L.w4a16(x, q4, BLOCK_N=48), "power of two"),
        "BLOCK_M below 16": (lambda: L.w8a16(x, q8, BLOCK_M=8), "at least 16"),
        "SPLIT_K of 3": (lambda: L.w8a16(x, q8, SPLIT_K=3), "power of two"),
        "SPLIT_K past grid axis 1": (lambda: L.w8a16(x, q8, SPLIT_K=2**16), "at most 65535"),
        "an accumulator past one block": (lambda: L.w8a16(x, q8, BLOCK_M=2**11, BLOCK_N=2**10), "BLOCK_M x BLOCK_N"),
        # session 29: an out on the weight's scales (or zero points) was written over while the kernel read them
        "out on w8's scales": (lambda: L.w8a16(x[:1], q8, out=q8.scale.view(1, 6)), "input w.scale"),
        "out on w8's scales (fast)": (lambda: L.w8a16_fast(x[:1], q8, out=q8.scale.view(1, 6)), "input w.scale"),
        "out on w4's zero points": (
            lambda: L.w4a16(x[:1], q4, out=q4.zero.view(-1).view(x.dtype)[:6].view(1, 6)),
            "shares memory with the input w.zero",
        ),  # fmt: skip
        "out on w4's scales (fused GEMV)": (
            lambda: L.w4a16_decode_gemv(x[:1], q4, out=q4.scale.view(-1)[:6].view(1, 6)),
            "shares memory with the input w.scale",
        ),  # fmt: skip
        "a float group size": (lambda: L.quantize_int4_ref(w, 32.0), "group_size=32.0"),
        "a misaligned packed (GEMV)": (lambda: L.w4a16_fast(x[:1], misaligned), "4-byte boundary"),
        "linear with w.T": (lambda: L.linear(x, q8.T), "pass the weight itself"),
        "a dtype by name": (lambda: L.dequantize(q4, "float16"), "must be a floating torch.dtype"),
    }
    for call, message in cases.values():
        with pytest.raises((ValueError, TypeError), match=message):
            call()


def test_linear_with_a_plain_weight_checks_as_the_kernels_do():
    """linear's cuBLAS path (a plain tensor weight): PyTorch alone would broadcast a residual of (N,), cast into an
    out of another dtype and broadcast into an out of another shape, all without a word."""
    w = weight(6, 100)
    x = torch.randn(3, 100, device=DEV, dtype=w.dtype)
    res = torch.randn(3, 6, device=DEV, dtype=w.dtype)
    cases = {
        "a residual of (N,)": (lambda: L.linear(x, w, residual=res[0]), "residual has shape"),
        "an out of another dtype": (
            lambda: L.linear(x, w, out=torch.empty(3, 6, device=DEV, dtype=torch.float64)),
            "out has dtype",
        ),  # fmt: skip
        "an out of another shape": (
            lambda: L.linear(x, w, out=torch.empty(2, 3, 6, device=DEV, dtype=w.dtype)),
            "out has shape",
        ),  # fmt: skip
        "a weight of another dtype": (lambda: L.linear(x, w.double()), "w has dtype"),
        "x with the wrong K": (lambda: L.linear(x[:, :64], w), "x must be"),
        "out over x": (lambda: L.linear(x[:, :6], w[:, :6].contiguous(), out=x[:, :6]), "non-contiguous|shares memory"),
    }
    for what, (call, message) in cases.items():
        with pytest.raises((ValueError, TypeError), match=message):
            call()
            pytest.fail(f"{what}: not refused")
    want = res.double() + x.double() @ w.double().T
    same = res.clone()
    assert L.linear(x, w, residual=same, out=same) is same  # in place, as the quantized paths allow
    utils.check(same, want, name="linear, a plain weight, residual in place", quiet=True)
    utils.check(L.linear(x, w), x.double() @ w.double().T, name="linear, a plain weight", quiet=True)
    # without out=, a plain weight's product keeps autograd (PyTorch's out= ops refuse inputs that require grad)
    xg = x.clone().requires_grad_()
    L.linear(xg, w, residual=res).sum().backward()
    utils.check(xg.grad, w.double().sum(0).expand(3, -1), name="linear's gradient for x", quiet=True)


@pytest.mark.parametrize("M", [1, 3])
def test_an_in_place_residual_that_is_x_is_refused(M):
    """(session 52) out may BE the residual, but then it was not checked against x and the weight: x += x @ w.T
    written as fn(x, w, out=x, residual=x) (a square weight, as wo's) ran the GEMV over an x it was overwriting,
    a silently wrong result in w4a16_fast, w8a16_fast and linear (a quantized weight or a plain one)."""
    K = 64
    w = weight(K, K)
    q8, q4 = L.quantize_int8_ref(w), L.quantize_int4_ref(w, 32)
    calls = {
        "w8a16": lambda x: L.w8a16(x, q8, out=x, residual=x),
        "w4a16": lambda x: L.w4a16(x, q4, out=x, residual=x),
        "w4a16_fast": lambda x: L.w4a16_fast(x, q4, out=x, residual=x),
        "w8a16_fast": lambda x: L.w8a16_fast(x, q8, out=x, residual=x),
        "linear, int8": lambda x: L.linear(x, q8, out=x, residual=x),
        "linear, a plain weight": lambda x: L.linear(x, w, out=x, residual=x),
    }
    for what, call in calls.items():
        x = torch.randn(M, K, device=DEV, dtype=w.dtype)
        with pytest.raises(ValueError, match="out shares memory with the input x"):
            call(x)
            pytest.fail(f"{what}: out=x, residual=x not refused")


def test_a_weight_that_requires_grad_quantizes_as_its_detached_copy():
    """(session 37) An nn.Linear's weight requires grad: quantizing it is what a learner does first. The quantizers
    take it (a quantized weight is a constant: rounding has no gradient) and give the bits of its detached copy,
    with scales that carry no graph for the kernels to refuse."""
    w = weight(6, 100)
    p = torch.nn.Parameter(w.clone())
    for quantize in (L.quantize_int8_ref, lambda t: L.quantize_int4_ref(t, 32)):
        got, want = quantize(p), quantize(w)
        for a, b in zip(dataclasses.astuple(got), dataclasses.astuple(want)):
            if isinstance(a, torch.Tensor):
                assert torch.equal(a, b) and not a.requires_grad
        x = torch.randn(3, 100, device=DEV, dtype=w.dtype)
        utils.check(L.linear(x, got), L.linear(x, want), quiet=True)


def test_scales_that_require_grad_are_refused_by_every_quantized_launcher():
    """(session 53) A quantized weight built around scales that require grad (an nn.Parameter's, as quantization-
    aware training makes them): w8a16 and w4a16 refused it, but w8a16_fast, w4a16_fast, linear and the fused decode
    GEMVs ran and returned a result with no graph, so the scales' gradient was silently never computed. All refuse it
    now while autograd records, by name; under torch.no_grad() they run."""
    w = weight(6, 64)
    q8, q4 = L.quantize_int8_ref(w), L.quantize_int4_ref(w, 32)
    q8g = L.Int8Weight(q8.q, q8.scale.clone().requires_grad_())
    q4g = L.Int4Weight(q4.packed, q4.scale.clone().requires_grad_(), q4.zero, q4.K, q4.group_size)
    x = torch.randn(3, 64, device=DEV, dtype=w.dtype)
    calls = {
        "w8a16": lambda: L.w8a16(x, q8g),
        "w4a16": lambda: L.w4a16(x, q4g),
        "w8a16_fast": lambda: L.w8a16_fast(x, q8g),
        "w4a16_fast": lambda: L.w4a16_fast(x, q4g),
        "linear, int8": lambda: L.linear(x, q8g),
        "linear, int4": lambda: L.linear(x, q4g),
        "w8a16_decode_gemv": lambda: L.w8a16_decode_gemv(x[:1], q8g),
        "w4a16_decode_gemv": lambda: L.w4a16_decode_gemv(x[:1], q4g),
    }
    for what, call in calls.items():
        with pytest.raises(ValueError, match=r"w\.scale requires grad.*torch\.no_grad\(\)"):
            call()
            pytest.fail(f"{what}: scales that require grad not refused")
        with torch.no_grad():
            call()


def test_dequantize_refuses_an_integer_dtype():
    """(session 53) dequantize(w, torch.int8) cast the scales to int8 (most to 0) and returned an all-but-zero weight
    without a word; torch.bool failed inside PyTorch's subtraction. A floating dtype is asked for by name."""
    q4 = L.quantize_int4_ref(weight(6, 64), 32)
    for dtype in (torch.int8, torch.int32, torch.bool):
        with pytest.raises(TypeError, match="dtype must be a floating torch.dtype"):
            L.dequantize(q4, dtype)
    assert L.dequantize(q4, torch.float64).dtype == torch.float64


def test_quantized_decode_step_checks_its_inputs_as_lesson_08s_step_does(tiny):
    """(session 53) quantized_decode_step's batch-1 path checked nothing of its own: a list token failed with "'list'
    object has no attribute 'shape'", a float one inside F.embedding, a tuple for the cache with "no attribute 'cos'",
    a list of positions at pos + 1. It checks them as lesson 08's decode_step does, before any launch."""
    model = L.quantize_model(tiny[0], 8)
    token, pos = torch.tensor([1], device=DEV), torch.tensor([3], dtype=torch.int32, device=DEV)
    cache = L8.new_cache(model, 1, 8)
    cases = {
        "a list token": (lambda: L.quantized_decode_step(model, [1], pos, cache), "token must be a torch.Tensor"),
        "a float token": (lambda: L.quantized_decode_step(model, token.float(), pos, cache), "token has dtype"),
        "int64 positions": (lambda: L.quantized_decode_step(model, token, pos.long(), cache), "pos has dtype int64"),
        "a list of positions": (lambda: L.quantized_decode_step(model, token, [3], cache), "pos must be a torch"),
        "a tuple for the cache": (lambda: L.quantized_decode_step(model, token, pos, tuple(cache)), "KVCache"),
    }
    for what, (call, message) in cases.items():
        with pytest.raises((ValueError, TypeError), match=message):
            call()
            pytest.fail(f"{what}: not refused")


@pytest.mark.parametrize("M, N, K", [(0, 6, 100), (3, 0, 100), (3, 6, 0), (0, 0, 0)])
def test_empty_inputs(M, N, K):
    w = weight(N, K)
    x = torch.randn(M, K, device=DEV, dtype=ENV.dtype)
    q8, q4 = L.quantize_int8_ref(w), L.quantize_int4_ref(w, 64)
    for fn, qw in ((L.w8a16, q8), (L.w4a16, q4), (L.w8a16_fast, q8), (L.w4a16_fast, q4)):
        y = fn(x, qw)
        assert y.shape == (M, N) and y.dtype == x.dtype
        assert bool((y == 0).all()), "an empty sum over K is 0"


# -- the quantized model -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    folder = ckpt.build_checkpoint(tmp_path_factory.mktemp("tiny"))
    return L8.load_model(folder, dtype=torch.float32), L8.load_tokenizer(folder)


#: (bits, group size, head) of the models solutions/12_*.ipynb checks itself: int8 (groups of 128) and int4 in
#: groups of 64, the LM head quantized too. Under the interpreter `make test` runs those checks there (nbval).
IN_THE_NOTEBOOK = {(8, 128, True), (4, 64, True)}


@pytest.mark.parametrize("bits, group_size, head", [(8, 128, True), (4, 64, True), (4, 32, False)])
def test_quantized_model_matches_its_dequantized_reference(tiny, bits, group_size, head):
    model = L.quantize_model(tiny[0], bits, group_size, head=head)
    kinds = {type(t).__name__ for w in model.layers for t in (w.wqkv, w.wo, w.w13, w.w2)}
    assert kinds == {"Int8Weight" if bits == 8 else "Int4Weight"}
    assert isinstance(model.lm_head, torch.Tensor) != head
    if ENV.interpret and (bits, group_size, head) in IN_THE_NOTEBOOK:
        pytest.skip("the solution notebook checks this same model under nbval (make test-notebooks)")
    L.check_quantized_model(model, quiet=True)


@pytest.mark.parametrize("bits", [8, 4])
def test_a_prefill_through_the_dequantized_path_matches_the_tiles(monkeypatch, tiny, bits):
    """Lesson 08's prefill of a quantized model with prefill's dequantized matmul on (PREFILL_DEQUANT_M at the
    first prefill size, so every projection takes it: the in-place residual of x.addmm_ included) gives the logits
    of the tile kernels' prefill, to fp32's rounding (on a GPU, TF32's in lesson 06's attention); its decode rows keep
    their kernels."""
    model = L.quantize_model(tiny[0], bits, 32)
    T = L.DECODE_M + 3
    ids = torch.randint(0, model.args.vocab_size, (1, T), device=DEV)
    calls = []
    real = L._dequantized_matmul
    monkeypatch.setattr(L, "_dequantized_matmul", lambda *a, **k: calls.append(a[0].shape[0]) or real(*a, **k))
    tiles = L8.prefill(model, ids, L8.new_cache(model, 1, T), all_logits=True)
    assert not calls, "PREFILL_DEQUANT_M None: no projection should take the dequantized path"
    monkeypatch.setattr(L, "PREFILL_DEQUANT_M", T)
    dequantized = L8.prefill(model, ids, L8.new_cache(model, 1, T), all_logits=True)
    assert calls and set(calls) == {T}, f"every projection at M = {T} should take the dequantized path: {calls}"
    why = "fp32 sums of the same products in another order (cuBLAS against tl.dot), through the layers"
    tol = 1e-4
    if ENV.is_gpu:  # session 50, an H100: 4e-3 apart at positions past the second, where attention mixes rows
        why += (", and lesson 06's attention multiplies fp32 in TF32 on a GPU (tl.dot's default): a last-bit "
                "difference in q or k can round an input the other way, 2^-11 of it")  # fmt: skip
        tol = 1e-2  # check_quantized_model's on a GPU, for the same reason
    utils.check(dequantized, tiles.double(), name=f"int{bits} prefill, dequantized", quiet=True, atol=tol, rtol=tol,
                reason=why)  # fmt: skip
    monkeypatch.setattr(L, "PREFILL_DEQUANT_M", 1)
    assert all(L.fast_schedule(b, M, 2048, 2048).kernel != "dequant" for b in (4, 8) for M in (1, L.DECODE_M))


@pytest.mark.parametrize("head_dim", [32, 24])
def test_a_model_whose_heads_are_wider_than_hidden_over_heads(tmp_path, head_dim):
    """head_dim set apart (32, where hidden 64 over 4 heads is 16; 24, which the loader pads to 32 with zero rows):
    the o projection's input is H D = 128 wide, not C; quantized int4 in groups of 32 it must still match its
    dequantized reference, step by step (a padded head's all-zero rows make all-zero groups)."""
    folder = ckpt.build_checkpoint(tmp_path, {"head_dim": head_dim})
    model = L.quantize_model(L8.load_model(folder, dtype=torch.float32), 4, 32, head=False)
    assert model.layers[0].wo.shape == (64, 128)
    L.check_quantized_model(model, quiet=True)


def test_int4_takes_an_odd_hidden_size(tmp_path):
    """hidden 63 (4 heads of head_dim 16): the input features of q/k/v, gate/up and the head are odd, as the down
    projection's already were with an odd intermediate size. The codes are padded to whole groups, so int4 takes any
    K; quantize_model refused it ('dim=63 is odd: int4 packing needs an even number of input features')."""
    shape = {"hidden_size": 63, "head_dim": 16, "intermediate_size": 75}
    model = L8.load_model(ckpt.build_checkpoint(tmp_path, shape), dtype=torch.float32)
    L.check_quantized_model(L.quantize_model(model, 4, 32), quiet=True)


def test_the_models_skipped_here_are_the_ones_the_notebook_checks():
    cells = [
        "".join(cell["source"])
        for cell in json.loads(next((ROOT / "solutions").glob("12_*.ipynb")).read_text())["cells"]
        if cell["cell_type"] == "code"
    ]
    code = "\n".join(cells)
    assert 'check_quantized_model(models["int8"])' in code and 'check_quantized_model(models[f"int4 g{G}"])' in code
    assert '"int8": quantize_model(model, 8)' in code and 'f"int4 g{G}": quantize_model(model, 4, G)' in code
    assert "G = 64" in code
    defaults = inspect.signature(L.quantize_model).parameters
    assert defaults["group_size"].default == 128 and defaults["head"].default is True


def test_quantized_model_reads_fewer_bytes_and_stays_close(tiny):
    model, tokenizer = tiny
    ids = torch.tensor(tokenizer.encode(L.utils.quantization.TEXT.read_text()).ids[:40], device=DEV)
    ppl = {bits: L.perplexity(L.quantize_model(model, bits, 64), ids, window=20) for bits in (16, 8, 4)}
    size = {bits: L.model_weight_bytes(L.quantize_model(model, bits, 64)) for bits in (16, 8, 4)}
    assert size[4] < size[8] < size[16]
    assert all(math.isfinite(p) and p > 1 for p in ppl.values())
    assert abs(math.log(ppl[8] / ppl[16])) < 0.05, ppl  # int8: ~1% error per weight moves the loss very little


def test_transposed_refuses_other_operations(tiny):
    qw = L.quantize_int8_ref(weight(6, 64))
    x = torch.randn(3, 64, device=DEV, dtype=ENV.dtype)
    with pytest.raises(TypeError):
        torch.add(x, qw.T)
    with pytest.raises(TypeError):
        qw.T @ x
    torch.testing.assert_close(x @ qw.T, L.w8a16(x, qw))
    y = torch.zeros(3, 6, device=DEV, dtype=x.dtype)
    torch.testing.assert_close(y.addmm_(x, qw.T), L.w8a16(x, qw))


# -- the fused batch-1 decode step -----------------------------------------------------------------------------------


def test_fused_decode_gemv_check():
    L.check_quantized_decode_gemv(L.quantized_decode_gemv, quiet=True)
    # GPU-like: several programs and two K steps (K = 200), with the next step's codes prefetched
    small = L8.GemvSchedule(BLOCK_N=8, BLOCK_K=128, num_warps=4, num_stages=2)
    L.check_quantized_decode_gemv(L.quantized_decode_gemv, quiet=True, schedule=small)


@pytest.mark.parametrize("bits, G, BLOCK_K", [(4, 32, 32), (4, 32, 64), (8, None, 32)])
@pytest.mark.parametrize("stages", [1, 2])
def test_fused_decode_gemv_many_steps(bits, G, BLOCK_K, stages):
    """Several K steps, the last one partial (K = 150), a tail of rows (N = 13), each epilogue, out fp32 too."""
    N, K = 13, 150
    W = weight(2 * N, K, seed=3, dtype=torch.float32)
    w = L.quantize_int4_ref(W, G) if bits == 4 else L.quantize_int8_ref(W)
    x, norm, res = (torch.randn(*shape, device=DEV) for shape in ((1, K), (K,), (1, N)))
    s = L8.GemvSchedule(BLOCK_N=4, BLOCK_K=BLOCK_K, num_warps=4, num_stages=stages)
    gate = L.quantize_int4_ref(W[:N].contiguous(), G) if bits == 4 else L.quantize_int8_ref(W[:N].contiguous())
    for kw, wt, out in (
        ({"norm": norm}, gate, utils.nan_empty((1, N), torch.float32)),
        ({"norm": norm, "swiglu": True}, w, None),
        ({"residual": res}, gate, res.clone()),
    ):
        want = L.quantized_decode_gemv_ref(x.double(), wt, eps=1e-5, **kw)
        if out is not None and "residual" in kw:
            kw = {"residual": out}
        got = L.quantized_decode_gemv(x, wt, eps=1e-5, out=out, schedule=s, **kw)
        utils.check(got, want, quiet=True, name=f"int{bits} {sorted(kw)}")


@pytest.mark.parametrize("N, K, BLOCK_K", [(13, 150, 32), (5, 64, 32), (3, 20, 32)])  # a short step; none; only it
def test_fused_int8_loops_give_the_same_bits(monkeypatch, N, K, BLOCK_K):
    """FUSED_INT8_LOOP: loading ahead by hand ("prefetch") or by the compiler ("pipe") changes when the codes arrive,
    not the sums: at one schedule, every epilogue and the qkv GEMV with RoPE give the same bits either way."""
    W = weight(2 * N, K, seed=5, dtype=torch.float32)
    w, gate = L.quantize_int8_ref(W), L.quantize_int8_ref(W[:N].contiguous())
    x, norm, res = (torch.randn(*shape, device=DEV) for shape in ((1, K), (K,), (1, N)))
    s = L8.GemvSchedule(BLOCK_N=4, BLOCK_K=BLOCK_K, num_warps=4, num_stages=3)
    calls, got = (({"norm": norm}, gate), ({"norm": norm, "swiglu": True}, w), ({"residual": res}, gate)), {}
    for loop in L8.DECODE_GEMV_LOOPS:
        monkeypatch.setattr(L, "FUSED_INT8_LOOP", loop)
        got[loop] = [L.quantized_decode_gemv(x, wt, schedule=s, **kw) for kw, wt in calls]
    for loop in L8.DECODE_GEMV_LOOPS[1:]:
        for a, b, name in zip(got[loop], got["prefetch"], ("norm", "swiglu", "residual")):
            assert_bitwise_equal(a, b, name=f"the int8 decode GEMV with {name}, N={N}, K={K}: {loop} against prefetch")
    x, W, cos, sin, pos, norm, (k0, v0) = _qkv_rope_case(2, 1, 16, K, 8, 3)
    w, out = L.quantize_int8_ref(W), {}
    for loop in L8.DECODE_GEMV_LOOPS:
        monkeypatch.setattr(L, "FUSED_INT8_LOOP", loop)
        k, v = k0.clone(), v0.clone()
        out[loop] = (L.quantized_decode_qkv_rope(x, w, cos, sin, pos, k, v, norm=norm, schedule=s), k, v)
    for loop in L8.DECODE_GEMV_LOOPS[1:]:
        for a, b, name in zip(out[loop], out["prefetch"], ("q", "the k cache", "the v cache")):
            assert_bitwise_equal(a, b, name=f"the int8 qkv GEMV with RoPE, {name}, K={K}: {loop} against prefetch")


def test_fused_int8_loop_by_shape(monkeypatch):
    """FUSED_INT8_LOOP as a dict: each (N, K) its own loop, None the rest; a loop that is none of lesson 08's is
    refused before any launch, naming the loops."""
    monkeypatch.setattr(L, "FUSED_INT8_LOOP", {None: "pipe", (5632, 2048): "prefetch"})
    assert L.fused_int8_loop(5632, 2048) == "prefetch" and L.fused_int8_loop(2048, 5632) == "pipe"
    monkeypatch.setattr(L, "FUSED_INT8_LOOP", "pipelined")
    w = L.quantize_int8_ref(weight(8, 32, seed=1, dtype=torch.float32))
    with pytest.raises(ValueError, match="loop must be one of"):
        L.quantized_decode_gemv(torch.randn(1, 32, device=DEV), w)


def _rows(w, rows):
    """The quantized weight with its rows (codes, scales, zero points) in the order ``rows``."""
    if isinstance(w, L.Int8Weight):
        return L.Int8Weight(w.q[rows].contiguous(), w.scale[rows].contiguous())
    return L.Int4Weight(w.packed[rows].contiguous(), w.scale[rows].contiguous(), w.zero[rows].contiguous(), w.K,
                        w.group_size)  # fmt: skip


def _halves_swapped(x, w, **kw):
    if kw.get("swiglu"):
        N = w.shape[0] // 2
        w = _rows(w, torch.cat([torch.arange(N, 2 * N), torch.arange(N)]))
    return L.quantized_decode_gemv(x, w, **kw)


def _up_with_gate_scales(x, w, **kw):
    if kw.get("swiglu"):
        N = w.shape[0] // 2
        rows = torch.cat([torch.arange(N), torch.arange(N)])  # gate scales (and zero points) on the up rows
        if isinstance(w, L.Int8Weight):
            w = L.Int8Weight(w.q, w.scale[rows].contiguous())
        else:
            w = L.Int4Weight(w.packed, w.scale[rows].contiguous(), w.zero[rows].contiguous(), w.K, w.group_size)
    return L.quantized_decode_gemv(x, w, **kw)


@pytest.mark.parametrize(
    "planted, hint",
    [
        (lambda x, w, **kw: L.quantized_decode_gemv(x, w, **{**kw, "norm": None}), "The norm was left out"),
        (_halves_swapped, "Gate and up swapped"),
        (_up_with_gate_scales, "The up rows used the gate rows' scales"),
        (lambda x, w, **kw: L.quantized_decode_gemv(x, w, **{**kw, "residual": None}), "The residual was not added"),
    ],
)
def test_fused_decode_gemv_check_names_the_mistake(planted, hint):
    with pytest.raises(AssertionError, match=hint):
        L.check_quantized_decode_gemv(planted, quiet=True)


def test_fused_decode_gemv_refusals_and_empty_inputs():
    w = weight(6, 100)
    q8, q4 = L.quantize_int8_ref(w), L.quantize_int4_ref(w, 64)
    x = torch.randn(1, 100, device=DEV, dtype=ENV.dtype)
    cases = {
        "two rows": (lambda: L.w8a16_decode_gemv(torch.randn(2, 100, device=DEV, dtype=x.dtype), q8), "takes one"),
        "a negative eps (session 29)": (
            lambda: L.w8a16_decode_gemv(x, q8, norm=torch.ones(100, device=DEV, dtype=x.dtype), eps=-1.0),
            "eps must be >= 0",
        ),  # fmt: skip
        "x of another K": (lambda: L.w4a16_decode_gemv(x[:, :64].contiguous(), q4), "K=100"),
        "a plain tensor to the int4 launcher": (lambda: L.w4a16_decode_gemv(x, w), "must be an Int4Weight"),
        "an Int4Weight to the int8 launcher": (lambda: L.w8a16_decode_gemv(x, q4), "must be an Int8Weight"),
        "odd rows for swiglu": (
            lambda: L.w8a16_decode_gemv(x, L.quantize_int8_ref(weight(5, 100)), swiglu=True),
            "even number",
        ),
        "swiglu as a string (session 53: 'no' was true)": (
            lambda: L.w4a16_decode_gemv(x, q4, swiglu="no"),
            "swiglu must be True or False, got 'no'",
        ),
        "a residual of another shape": (
            lambda: L.w4a16_decode_gemv(x, q4, residual=torch.zeros(1, 5, device=DEV, dtype=x.dtype)),
            "residual",
        ),
        "a norm of another length": (
            lambda: L.w8a16_decode_gemv(x, q8, norm=torch.ones(99, device=DEV, dtype=x.dtype)),
            "norm",
        ),
        "out of another dtype": (
            lambda: L.w8a16_decode_gemv(x, q8, out=torch.empty(1, 6, device=DEV, dtype=torch.float64)),
            "dtype",
        ),
        "eps not a number": (lambda: L.w8a16_decode_gemv(x, q8, eps="1e-5"), "eps"),
        "a BLOCK_N of 3": (lambda: L.w8a16_decode_gemv(x, q8, schedule=L8.GemvSchedule(3, 64, 4, 1)), "BLOCK_N"),
        "a W tile past one block": (
            lambda: L.w8a16_decode_gemv(x, q8, schedule=L8.GemvSchedule(2**20, 64, 4, 1)),
            "more than one block",
        ),  # fmt: skip
        "a step of half a group": (
            lambda: L.w4a16_decode_gemv(x, q4, schedule=L8.GemvSchedule(4, 32, 4, 1)),
            "whole number of groups",
        ),
        "lesson 12's FastSchedule": (
            lambda: L.w4a16_decode_gemv(x, q4, schedule=L.fast_schedule(4, 1, 6, 100, 64)),
            "GemvSchedule",
        ),
    }
    for _what, (call, message) in cases.items():
        with pytest.raises((ValueError, TypeError), match=message):
            call()
    for qw in (q8, q4):  # no rows: no launch; K = 0: an empty sum, plus the residual
        assert L.quantized_decode_gemv(x, _rows(qw, torch.arange(0))).shape == (1, 0)
    x0, w0 = torch.randn(1, 0, device=DEV, dtype=x.dtype), weight(6, 0)
    res = torch.randn(1, 6, device=DEV, dtype=x.dtype)
    for qw in (L.quantize_int8_ref(w0), L.quantize_int4_ref(w0, 32)):
        assert bool((L.quantized_decode_gemv(x0, qw) == 0).all())
        assert torch.equal(L.quantized_decode_gemv(x0, qw, residual=res), res)


@pytest.mark.parametrize("shift", [1, -1])
def test_fused_decode_gemv_refuses_an_out_that_overlaps_the_residual(shift):
    """out may BE the residual (in place: each element read, then written, by one program), never a shifted view
    of its memory: a neighbour's residual would be read after it was overwritten."""
    N, K = 40, 96
    w = weight(N, K)
    x = torch.randn(1, K, device=DEV, dtype=ENV.dtype)
    flat = torch.randn(N + 1, device=DEV, dtype=ENV.dtype)
    res, out = (flat[:N], flat[1:]) if shift == 1 else (flat[1:], flat[:N])
    s = L8.GemvSchedule(8, 32, 4, 1)
    for qw in (L.quantize_int8_ref(w), L.quantize_int4_ref(w, 32)):
        with pytest.raises(ValueError, match="shares memory with the input residual"):
            L.quantized_decode_gemv(x, qw, residual=res.view(1, N), out=out.view(1, N), schedule=s)
        same = res.clone().view(1, N)
        want = L.quantized_decode_gemv_ref(x.double(), qw, residual=same.double())
        assert L.quantized_decode_gemv(x, qw, residual=same, out=same, schedule=s) is same  # in place: still fine
        utils.check(same, want, name="in place", quiet=True)


def test_generate_takes_the_fused_step_and_the_switch_takes_it_back(tiny, monkeypatch):
    """check_quantized_model compares the fused step's logits and greedy tokens with the reference and the unfused
    step's; here: lesson 08's generate runs it for a quantized model, and USE_FUSED_DECODE = False does not."""
    model = L.quantize_model(tiny[0], 8)
    ids = torch.randint(0, model.args.vocab_size, (1, 5), device=DEV)
    # lesson 08's generate takes the fused step for a quantized model (its decoders are QuantizedDecoders) ...
    calls = []
    fused_gemv = L._fused_gemv
    monkeypatch.setattr(L, "_fused_gemv", lambda *args: calls.append(args[2]) or fused_gemv(*args))
    fused = L8.generate(model, ids, 3)
    assert calls and set(calls) == {8}, "the batch-1 steps did not run the int8 fused GEMV"
    assert {type(d) for d in model.decoders.values()} == {L.QuantizedDecoder}
    # ... and the switch brings the unfused step back, with the same greedy tokens (a new decode loop: on a GPU the
    # old one would replay the fused step from its CUDA graph)
    calls.clear()
    model.decoders.clear()
    monkeypatch.setattr(L, "USE_FUSED_DECODE", False)
    assert torch.equal(fused, L8.generate(model, ids, 3)) and not calls


def test_nan_logits_of_the_quantized_step_are_told_once_generate_ends(tiny, monkeypatch):
    """(session 52) Lesson 08's generate warns once its loop ends if a sequence's logits held a NaN (a flag the
    graphed step sets on the GPU); lesson 12's loop, which steps with quantized_decode_step, sets the same flag: one
    NaN logit at one fused step is told, and the same loop without it gives its tokens."""
    model = L.quantize_model(tiny[0], 4, group_size=32)
    ids = torch.randint(0, model.args.vocab_size, (1, 5), device=DEV)
    clean = L8.generate(model, ids, 4)
    real = L.quantized_decode_step

    def one_nan(model, tokens, pos, *args, **kwargs):
        logits = real(model, tokens, pos, *args, **kwargs)
        logits[:, 3] = torch.where(pos == 7, float("nan"), logits[:, 3])  # a torch.where: a CUDA graph carries it
        return logits

    monkeypatch.setattr(L, "quantized_decode_step", one_nan)
    model.decoders.clear()
    with pytest.warns(L8.NaNLogitsWarning, match=r"sequence\(s\) \[0\] held a NaN at some step"):
        L8.generate(model, ids, 4)
    monkeypatch.setattr(L, "quantized_decode_step", real)
    model.decoders.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error", L8.NaNLogitsWarning)
        assert torch.equal(L8.generate(model, ids, 4), clean)


# -- the quantized qkv GEMV with RoPE and the cache write in its epilogue (lesson 08's decode_qkv_rope) -------------


def test_quantized_qkv_rope_check():
    L.check_quantized_decode_qkv_rope(L.quantized_decode_qkv_rope, quiet=True)  # GPU-like schedules: below


def _qkv_rope_case(H, KV, D, C, max_len, p, seed=0):
    g = torch.Generator().manual_seed(seed)
    cos, sin = (t[0] for t in L7.rope_tables(max_len, D))  # (max_len, D): D = 8 too, which a model would pad
    x = torch.randn(1, C, generator=g).to(DEV)
    W = (torch.randn((H + 2 * KV) * D, C, generator=g) / math.sqrt(C)).to(DEV)
    norm = (1 + 0.1 * torch.randn(C, generator=g)).to(DEV)
    caches = [torch.randn(1, max_len, KV, D, generator=g).to(DEV) for _ in range(2)]
    return x, W, cos.to(DEV), sin.to(DEV), torch.tensor([p], dtype=torch.int32, device=DEV), norm, caches


@pytest.mark.parametrize(
    "fmt, H, KV, D, p, BLOCK_N, stages",  # int4 groups 32 and 128, int8; D 16, 32, 64; GQA 1 and 4; pos 0 and the
    [  # cache's last row; 2 to 16 pairs a program, several K steps (int4 g32, int8), with and without the prefetch
        ("g32", 4, 1, 16, 0, 4, 2),
        ("g128", 2, 2, 32, 7, 8, 1),
        ("int8", 4, 1, 64, 7, 32, 2),
        ("int8", 2, 2, 16, 0, 4, 1),
        ("g32", 4, 1, 64, 7, 32, 1),
        ("g128", 4, 1, 16, 7, 16, 2),
    ],
)
def test_quantized_qkv_rope_is_the_gemv_then_rope_kv_write_bit_for_bit(fmt, H, KV, D, p, BLOCK_N, stages):
    x, W, cos, sin, pos, norm, (k0, v0) = _qkv_rope_case(H, KV, D, 40, 8, p)
    w = {"g32": lambda: L.quantize_int4_ref(W, 32), "g128": lambda: L.quantize_int4_ref(W, 128),
         "int8": lambda: L.quantize_int8_ref(W)}[fmt]()  # fmt: skip
    s = L8.GemvSchedule(BLOCK_N=BLOCK_N, BLOCK_K=32 if fmt != "g128" else 128, num_warps=4, num_stages=stages)
    k1, v1, k2, v2 = k0.clone(), v0.clone(), k0.clone(), v0.clone()
    q1 = L.quantized_decode_qkv_rope(x, w, cos, sin, pos, k1, v1, norm=norm, schedule=s)
    qkv = L.quantized_decode_gemv(x, w, norm=norm, schedule=s).view(1, H + 2 * KV, D)  # the same sums
    q2 = L8.rope_kv_write(qkv, cos, sin, pos, k2, v2)
    if ENV.interpret:  # the same sums in the same order, then rope_kv_write_kernel's arithmetic
        assert torch.equal(q1, q2) and torch.equal(k1, k2) and torch.equal(v1, v2)
    else:
        for a, b in ((q1, q2), (k1, k2), (v1, v2)):
            utils.check(a, b, atol=1e-5, rtol=1e-5, quiet=True, reason="fp32 sums reduced in another order")
    untouched = torch.arange(8, device=DEV) != p
    assert torch.equal(k1[:, untouched], k0[:, untouched]) and torch.equal(v1[:, untouched], v0[:, untouched])


def _q_v_rotated(x, w, cos, sin, pos, k, v, **kw):
    q = L.quantized_decode_qkv_rope(x, w, cos, sin, pos, k, v, **kw)
    p = int(pos[0])
    v[0, p] = L8._rotated_like_k(v[0, p], cos[p], sin[p])
    return q


def _q_interleaved(x, w, cos, sin, pos, k, v, **kw):
    """A kernel that turns neighbouring rows (2i, 2i + 1): the right one on w's rows reordered, its outputs put back."""
    D = k.shape[-1]
    pi = torch.arange(D, device=DEV).view(D // 2, 2).T.reshape(-1)
    perm = (torch.arange(w.shape[0] // D, device=DEV)[:, None] * D + pi[None, :]).reshape(-1)
    p, unperm = int(pos[0]), torch.argsort(pi)
    q = L.quantized_decode_qkv_rope(x, _rows(w, perm), cos, sin, pos, k, v, **kw)
    k[0, p], v[0, p] = k[0, p][..., unperm].clone(), v[0, p][..., unperm].clone()
    return q[..., unperm].contiguous()


def _q_wrong_pos(x, w, cos, sin, pos, k, v, **kw):
    return L.quantized_decode_qkv_rope(x, w, cos, sin, (pos + 1) % k.shape[1], k, v, **kw)


@pytest.mark.parametrize(
    "planted, hint",
    [(_q_interleaved, "neighbouring outputs"), (_q_v_rotated, "v was rotated")],
)
def test_quantized_qkv_rope_check_names_the_mistake(planted, hint):
    with pytest.raises(AssertionError, match=hint):
        L.check_quantized_decode_qkv_rope(planted, quiet=True)


def test_quantized_qkv_rope_check_fails_at_the_wrong_position():
    with pytest.raises(AssertionError, match="quantized qkv \\+ RoPE, q, int4, group 32"):
        L.check_quantized_decode_qkv_rope(_q_wrong_pos, quiet=True)


def test_quantized_qkv_rope_refusals():
    x, W, cos, sin, pos, norm, (k, v) = _qkv_rope_case(4, 1, 16, 64, 8, 3)  # w: 96 x 64
    q4, q8 = L.quantize_int4_ref(W, 32), L.quantize_int8_ref(W)
    kv = torch.cat([k, v], 1)  # (1, 16, KV, D): two caches of 8 rows that overlap by 4 are views of it
    f = L.quantized_decode_qkv_rope
    cases = {
        "two rows of x": (lambda: f(x.repeat(2, 1), q4, cos, sin, pos, k, v), "B = 1"),
        "x of another K": (lambda: f(x[:, :32].contiguous(), q8, cos, sin, pos, k, v), "K=64"),
        "w not (H + 2 KV) D rows": (lambda: f(x, _rows(q4, torch.arange(88)), cos, sin, pos, k, v), "q, k and v"),
        "int64 pos": (lambda: f(x, q8, cos, sin, pos.long(), k, v), "pos"),
        "tables shorter than the cache": (lambda: f(x, q4, cos[:4], sin[:4], pos, k, v), "cos"),
        "a cache of two sequences": (
            lambda: f(x, q8, cos, sin, pos, k.repeat(2, 1, 1, 1), v.repeat(2, 1, 1, 1)),
            "k_cache",
        ),
        "a head size of 12": (
            lambda: f(
                x,
                _rows(q8, torch.arange(72)),
                cos[:, :12].contiguous(),
                sin[:, :12].contiguous(),
                pos,
                k[..., :12].contiguous(),
                v[..., :12].contiguous(),
            ),
            "power of two",
        ),  # fmt: skip
        "out over the k cache": (lambda: f(x, q4, cos, sin, pos, k, v, out=k.view(-1)[:64].view(1, 4, 16)), "out"),
        "a norm of another length": (lambda: f(x, q8, cos, sin, pos, k, v, norm=norm[:10]), "norm"),
        "a step of half a group": (
            lambda: f(x, q4, cos, sin, pos, k, v, schedule=L8.GemvSchedule(4, 16, 4, 1)),
            "whole number of groups",
        ),
        "a BLOCK_N of 6": (lambda: f(x, q8, cos, sin, pos, k, v, schedule=L8.GemvSchedule(6, 32, 4, 1)), "BLOCK_N"),
        "eps not a number": (lambda: f(x, q8, cos, sin, pos, k, v, eps=None), "eps"),
        "v_cache the k_cache": (lambda: f(x, q8, cos, sin, pos, k, k), "v_cache shares memory with k_cache"),
        "v_cache over half the k_cache": (lambda: f(x, q4, cos, sin, pos, kv[:, :8], kv[:, 4:12]), "shares memory"),
    }
    k0, v0 = k.clone(), v.clone()
    for what, (call, message) in cases.items():
        with pytest.raises((ValueError, TypeError), match=message):
            call()
            pytest.fail(f"{what}: not refused")
    assert torch.equal(k, k0) and torch.equal(v, v0), "a refused call wrote into the cache"


@pytest.mark.parametrize("p", [8, -1, 11])
def test_quantized_qkv_rope_writes_nothing_for_a_position_outside_the_cache(p):
    """pos lives on the GPU (no sync to refuse it): the kernel writes nothing outside the caches, nothing of that
    token into them, and q comes back NaN. The caches sit inside bigger buffers, whose neighbouring rows a write at
    row pos (past the end, or before the start) would reach."""
    x, W, cos, sin, _, norm, (k, v) = _qkv_rope_case(4, 1, 16, 40, 8, 0)
    pos = torch.tensor([p], dtype=torch.int32, device=DEV)
    for w in (L.quantize_int4_ref(W, 32), L.quantize_int8_ref(W)):
        big_k, big_v = torch.zeros(3, *k.shape[1:], device=DEV), torch.zeros(3, *v.shape[1:], device=DEV)
        big_k[1:2], big_v[1:2] = k, v
        k_cache, v_cache = big_k[1:2], big_v[1:2]
        with utils.watch_memory() as stray:
            q = L.quantized_decode_qkv_rope(x, w, cos, sin, pos, k_cache, v_cache, norm=norm,
                                            schedule=L8.GemvSchedule(8, 32, 4, 1))  # fmt: skip
        assert not stray.strays, f"pos={p}: {stray.strays}"
        for big, cache in ((big_k, k), (big_v, v)):
            assert not bool(big[0].any()) and not bool(big[2].any()), f"pos={p}: a write outside the cache"
            assert torch.equal(big[1:2], cache), f"pos={p}: a write into the cache"
        assert bool(q.isnan().all()), f"pos={p}: q must come back NaN, not a number turned by the wrong angles"


def test_quantized_step_with_and_without_rope_in_qkv(tiny, monkeypatch):
    """The whole fused step, several tokens, RoPE in the qkv GEMV or not: the same logits and caches, bit for bit
    under the interpreter (the same sums, then the same arithmetic), and the fusion does take one launch less."""
    for bits in (4, 8):
        model = L.quantize_model(tiny[0], bits, 32)
        tokens = torch.randint(0, model.args.vocab_size, (3,), device=DEV)
        runs = {}
        for fused in (True, False):
            monkeypatch.setattr(L, "QUANTIZED_ROPE_IN_QKV", fused)
            calls = []
            rope = L.QUANTIZED_DECODE.rope_kv_write
            ops = L.QUANTIZED_DECODE._replace(rope_kv_write=lambda *a, **kw: calls.append(1) or rope(*a, **kw))
            cache = L8.new_cache(model, 1, 8)
            logits = [L.quantized_decode_step(model, t.view(1), torch.tensor([i], dtype=torch.int32, device=DEV),
                                              cache, ops) for i, t in enumerate(tokens)]  # fmt: skip
            runs[fused] = (torch.stack(logits), cache.k.clone(), cache.v.clone(), len(calls))
        (a, ka, va, na), (b, kb, vb, nb) = runs[True], runs[False]
        assert na == 0 and nb == len(tokens) * model.args.n_layers, (na, nb)
        if ENV.interpret:
            assert torch.equal(a, b) and torch.equal(ka, kb) and torch.equal(va, vb)
        else:
            utils.check(a, b, atol=1e-3, rtol=1e-3, quiet=True, reason="fp32 sums reduced in another order")
        want = L8.forward_ref(L.dequantize_model(model, torch.float64), tokens.view(1, -1))[0]
        utils.check(a[:, 0], want, atol=1e-4, rtol=1e-4, quiet=True, reason="fp32 sums in another order, logits ~10")


# -- the int4 decode kernel with the stream GEMV's loop (FUSED_INT4_KERNEL = "stream") --------------------------------


@pytest.mark.parametrize("kernel", ["stream", "pipe"])
def test_fused_decode_checks_pass_with_the_stream_kernel(monkeypatch, kernel):
    monkeypatch.setattr(L, "FUSED_INT4_KERNEL", kernel)
    L.check_quantized_decode_gemv(L.quantized_decode_gemv, quiet=True)
    L.check_quantized_decode_qkv_rope(L.quantized_decode_qkv_rope, quiet=True)


@pytest.mark.parametrize(
    "G, N, K, BLOCK_N, BLOCK_K, stages",  # every group size; N odd and below or past BLOCK_N; K not a whole step,
    [  # a partial last group (K = 150 at groups of 64); one step or several, loaded ahead (2) and x too (3)
        (32, 13, 150, 4, 64, 1),
        (64, 13, 150, 8, 64, 2),
        (128, 5, 300, 4, 128, 3),
        (32, 3, 100, 4, 32, 3),
    ],
)
def test_fused_decode_stream_kernel_matches_the_groups_kernel(monkeypatch, G, N, K, BLOCK_N, BLOCK_K, stages):
    """Each epilogue (norm, norm + SwiGLU, residual in place, RoPE and the cache write), fp32 out too: the stream
    kernel against the groups kernel at the same schedule, and both against the fp64 reference."""
    W = weight(2 * N, K, seed=5, dtype=torch.float32)
    w, gate = L.quantize_int4_ref(W, G), L.quantize_int4_ref(W[:N].contiguous(), G)
    x, norm, res = (torch.randn(*shape, device=DEV) for shape in ((1, K), (K,), (1, N)))
    s = L8.GemvSchedule(BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, num_warps=4, num_stages=stages)
    tol = dict(atol=1e-5, rtol=1e-5, reason="the same fp32 products summed in another order (per word, then across)")
    for kw, wt, out_dtype in (
        ({"norm": norm}, gate, torch.float32),
        ({"norm": norm, "swiglu": True}, w, None),
        ({"residual": res}, gate, None),
    ):
        got = {}
        for kernel in L.FUSED_INT4_KERNELS:
            monkeypatch.setattr(L, "FUSED_INT4_KERNEL", kernel)
            call = dict(kw, residual=res.clone()) if "residual" in kw else kw
            out = call.get("residual", utils.nan_empty((1, N), out_dtype) if out_dtype else None)
            got[kernel] = L.quantized_decode_gemv(x, wt, eps=1e-5, out=out, schedule=s, **call)
        want = L.quantized_decode_gemv_ref(x.double(), wt, eps=1e-5, **kw)
        for kernel in ("stream", "pipe"):  # pipe: with num_stages >= 2, the loop Triton pipelines, then the tail
            name = f"{kernel} vs groups, {sorted(kw)}, G={G}, N={N}, K={K}, {s}"
            utils.check(got[kernel], got["groups"], name=name, quiet=True, **tol)
            utils.check(got[kernel], want, name=f"{kernel}, {sorted(kw)}", quiet=True)
    # RoPE and the cache write: the qkv rows in pairs, D/2 rows apart (H = 2 query heads, KV = 1, D = 2 BLOCK_N)
    H, KV, D = 2, 1, 2 * BLOCK_N
    x, W, cos, sin, pos, norm, (k0, v0) = _qkv_rope_case(H, KV, D, K, 8, 7, seed=G)
    w = L.quantize_int4_ref(W, G)
    runs = {}
    for kernel in L.FUSED_INT4_KERNELS:
        monkeypatch.setattr(L, "FUSED_INT4_KERNEL", kernel)
        k, v = k0.clone(), v0.clone()
        q = L.quantized_decode_qkv_rope(x, w, cos, sin, pos, k, v, norm=norm, schedule=s)
        runs[kernel] = (q, k, v)
    for kernel in ("stream", "pipe"):
        for part, a, b in zip("qkv", runs[kernel], runs["groups"]):
            utils.check(a, b, name=f"{kernel} vs groups, RoPE, {part}, G={G}", quiet=True, **tol)


def test_the_fused_step_with_the_stream_kernel(tiny, monkeypatch):
    """Three tokens of the int4 fused step (RoPE in the qkv GEMV) with either kernel: the same logits and caches up
    to the order of the sums, and the dequantized model's logits."""
    model = L.quantize_model(tiny[0], 4, 32)
    tokens = torch.randint(0, model.args.vocab_size, (3,), device=DEV)
    runs = {}
    for kernel in L.FUSED_INT4_KERNELS:
        monkeypatch.setattr(L, "FUSED_INT4_KERNEL", kernel)
        cache = L8.new_cache(model, 1, 8)
        logits = [L.quantized_decode_step(model, t.view(1), torch.tensor([i], dtype=torch.int32, device=DEV), cache)
                  for i, t in enumerate(tokens)]  # fmt: skip
        runs[kernel] = (torch.stack(logits), cache.k.clone(), cache.v.clone())
    tol = dict(atol=1e-4, rtol=1e-4, reason="fp32 sums in another order through every layer; logits ~10")
    want = L8.forward_ref(L.dequantize_model(model, torch.float64), tokens.view(1, -1))[0]
    for kernel in ("stream", "pipe"):
        for a, b in zip(runs[kernel], runs["groups"]):
            utils.check(a, b, name=f"{kernel} vs groups", quiet=True, **tol)
        utils.check(runs[kernel][0][:, 0], want, name=kernel, quiet=True, **tol)


def test_an_unknown_fused_int4_kernel_is_refused_before_a_launch(monkeypatch):
    x = torch.randn(1, 64, device=DEV, dtype=ENV.dtype)
    w = L.quantize_int4_ref(weight(6, 64), 32)
    monkeypatch.setattr(L, "FUSED_INT4_KERNEL", "streams")
    with pytest.raises(ValueError, match="FUSED_INT4_KERNEL must be one of"):
        L.w4a16_decode_gemv(x, w)
    monkeypatch.setattr(L, "FUSED_INT4_KERNEL", "stream")  # a schedule given: the kernel still named by the switch
    s = L8.GemvSchedule(BLOCK_N=4, BLOCK_K=32, num_warps=4, num_stages=2)
    utils.check(L.w4a16_decode_gemv(x, w, schedule=s), L.quantized_decode_gemv_ref(x.double(), w), quiet=True)


# -- compiled for an H100 without one: the schedules' tiles fit the registers -----------------------------------------


def _kernels_file(tmp_path):
    """Lesson 12's @triton.jit functions, lesson 05's grouped_tile and lesson 08's _rope_kv_epilogue (which they call)
    in one file, as
    utils.offline compiles kernels from a single module's source."""
    path = tmp_path / "l12_kernels.py"
    path.write_text(_kernels_source())
    return path


@functools.cache
def _kernels_source() -> str:
    """_kernels_file's text, built once a session: ast.get_source_segment splits the whole module at every call,
    and asked for each decorator of a 3,000-line module in nine tests it took about 50 s of the CPU's time."""
    import ast
    from pathlib import Path

    def is_jit(decorator):  # @triton.jit or @jit (not a call such as @triton.jit(...))
        return (isinstance(decorator, ast.Attribute) and decorator.attr == "jit") or (
            isinstance(decorator, ast.Name) and decorator.id == "jit"
        )

    parts = ["import triton", "import triton.language as tl",
             "from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait", ""]  # fmt: skip
    for module, keep in ((L5, {"grouped_tile"}), (L8, {"_rope_kv_epilogue"}), (L, None)):
        source = Path(module.__file__).read_text()
        lines = source.splitlines()
        for node in ast.parse(source).body:
            jit = isinstance(node, ast.FunctionDef) and any(map(is_jit, node.decorator_list))
            if jit and (keep is None or node.name in keep):  # its lines from def on (a top-level function)
                parts.append("@triton.jit\n" + "\n".join(lines[node.lineno - 1 : node.end_lineno]) + "\n")
    return "\n".join(parts)


def test_kernels_compile_for_sm90_without_spills_at_the_schedules(tmp_path):
    from utils import offline

    if not offline.available():
        pytest.skip("needs Triton's NVIDIA backend and its ptxas")
    jobs = []
    for M, N, K in ((1, 14336, 4096), (16, 4096, 14336), (2048, 14336, 4096)):
        for kernel, bits, extra in (
            ("w8a16_kernel", 8, {}),
            ("w4a16_kernel", 4, {}),
            ("w4a16_fast_kernel", 4, dict(MAGIC=0x4300, OFFSET=128.0, FOLD_ZERO=M <= L.DECODE_M)),
        ):
            BLOCK_K = 128 if bits == 4 or M <= L.DECODE_M else 64
            s = L.schedule(M, N, K, BLOCK_K, sm_count=132, bits=bits, smem=227 * 1024)
            out = "fp32" if s.SPLIT_K > 1 else "bf16"
            ints = dict(M=M, N=N, K=K, stride_xm=K, stride_om=N, stride_os=M * N if s.SPLIT_K > 1 else 0)
            meta = dict(BLOCK_M=s.BLOCK_M, BLOCK_N=s.BLOCK_N, SPLIT_K=s.SPLIT_K, GROUP_M=8, DOT_PRECISION="tf32")
            if bits == 8:
                pointers = dict(x_ptr="bf16", q_ptr="i8", scale_ptr="bf16", out_ptr=out)
                ints["stride_qn"], meta["BLOCK_K"] = K, BLOCK_K
            else:
                pointers = dict(x_ptr="bf16", packed_ptr="u8", scale_ptr="bf16", zero_ptr="u8", out_ptr=out)
                ints.update(stride_pn=K // 2, stride_sn=K // 128)
                meta.update(GROUP_SIZE=128, **extra)
            jobs.append(offline.job(kernel, pointers=pointers, ints=ints, constexprs=meta, num_warps=s.num_warps,
                                    num_stages=s.num_stages))  # fmt: skip
    for job, compiled in zip(jobs, offline.compile_kernels(_kernels_file(tmp_path), jobs)):
        where = f"{job['kernel']} at M={job['ints']['M']}"
        assert compiled.spill_bytes == 0, f"{where} spills {compiled.spill_bytes} bytes"
        assert 16 in compiled.cp_async_bytes, f"{where}: the weights are not copied in 16-byte vectors"


def test_fast_kernels_compile_for_sm90_without_spills_at_their_schedules(tmp_path, monkeypatch):
    """Each fast kernel at the schedule its launcher picks (prefill's tile kernel as it runs with the dequantizing
    path off, PREFILL_DEQUANT_M None) and the dequantizing kernel for both formats: no spills, 16-byte loads."""
    import re

    from utils import offline

    if not offline.available():
        pytest.skip("needs Triton's NVIDIA backend and its ptxas")
    monkeypatch.setattr(L, "PREFILL_DEQUANT_M", None)
    jobs = []
    for bits, M, N, K in ((4, 1, 8192, 2048), (4, 4, 2048, 8192), (4, 16, 4096, 14336), (4, 2048, 14336, 4096),
                          (8, 1, 14336, 4096), (4, 4, 8192, 2048), (4, 1, 2048, 2048), (4, 1, 4096, 14336),
                          (4, 16, 8192, 2048), (4, 5, 14336, 4096), (4, 8, 2048, 8192), (8, 16, 2048, 8192),
                          (8, 2048, 14336, 4096)):  # fmt: skip
        s = L.fast_schedule(bits, M, N, K, 128, sm_count=132, smem=227 * 1024)
        out = "fp32" if s.SPLIT_K > 1 else "bf16"
        ints = dict(M=M, N=N, K=K, stride_xm=K, stride_om=N, stride_os=M * N if s.SPLIT_K > 1 else 0)
        meta = dict(BLOCK_M=s.BLOCK_M, BLOCK_N=s.BLOCK_N, HAS_RESIDUAL=False)
        if s.kernel in L.GEMV_KERNELS:
            ints["SPLIT_K"] = s.SPLIT_K  # a runtime argument of the GEMV kernels
            meta.update(BLOCK_K=s.BLOCK_K, **L.gemv_prefetch(s.kernel, s.num_stages))  # as _fast_launch sets them
        elif s.kernel.startswith("scaled"):
            ints["SPLIT_K"] = s.SPLIT_K  # a runtime argument of the scaled tile too
            meta.update(BLOCK_K=s.BLOCK_K, GROUP_M=8, DOT_PRECISION="tf32", MAGIC=0x4300, OFFSET=128.0,
                        SWAP_AB=s.kernel == "scaled_swap")  # fmt: skip
        elif bits == 8:  # w8a16_tile_kernel: the lesson's tile, the residual in its epilogue
            meta.update(SPLIT_K=s.SPLIT_K, BLOCK_K=s.BLOCK_K, GROUP_M=8, DOT_PRECISION="tf32")
        elif s.kernel == "mma":  # as w4a16_fast launches it on an sm_90 GPU: the floats by inline PTX
            meta.update(SPLIT_K=s.SPLIT_K, DOT_PRECISION="tf32", OFFSET=128.0, PTX=L.PAIRS_PTX[torch.bfloat16],
                        PIPE=s.num_stages)  # fmt: skip
        else:
            meta.update(SPLIT_K=s.SPLIT_K, GROUP_M=8, DOT_PRECISION="tf32", MAGIC=0x4300, OFFSET=128.0,
                        SCALE_IN_TILE=M > L.DECODE_M, SWAP_AB=s.kernel == "tile_swap")  # fmt: skip
        if bits == 8:
            pointers = dict(x_ptr="bf16", q_ptr="i8", scale_ptr="bf16", res_ptr="bf16", out_ptr=out)
            ints["stride_qn"] = K
        else:
            codes = "i32" if s.kernel in L.GEMV_KERNELS else "u8"  # the GEMVs read the codes as 32-bit words
            pointers = dict(
                x_ptr="bf16", packed_ptr=codes, scale_ptr="bf16", zero_ptr="u8", res_ptr="bf16", out_ptr=out
            )
            ints.update(stride_pn=K // 8 if codes == "i32" else K // 2, stride_sn=K // 128)
            meta["GROUP_SIZE"] = 128
        if bits == 4 and s.kernel in L.GEMV_KERNELS:
            kernel = L.int4_gemv_kernel(s.kernel).fn.__name__  # the kernel w4a16_fast launches for this kind
        else:
            kernel = f"w{bits}a16_{s.kernel.removesuffix('_swap').replace('scaled', 'scaled_tile')}_kernel"
        stages = 1 if s.kernel in L.GEMV_KERNELS else s.num_stages  # as _fast_launch compiles them
        jobs.append(offline.job(kernel, pointers=pointers, ints=ints, constexprs=meta, num_warps=s.num_warps,
                                num_stages=stages))  # fmt: skip
    BLOCK_N, BLOCK_K, warps = L.DEQUANT_TILE
    for bits, q in ((4, "u8"), (8, "i8")):  # prefill's first half, as _dequantized_matmul launches it
        jobs.append(offline.job("dequantize_rows_kernel", pointers=dict(q_ptr=q, scale_ptr="bf16", zero_ptr="u8",
                                out_ptr="bf16"), ints=dict(first_row=0, rows=8192, K=4096, stride_qn=4096 * bits // 8,
                                stride_sn=32), constexprs=dict(BITS=bits, GROUP_SIZE=128, BLOCK_N=BLOCK_N,
                                BLOCK_K=BLOCK_K), num_warps=warps, num_stages=1))  # fmt: skip
    for job, compiled in zip(jobs, offline.compile_kernels(_kernels_file(tmp_path), jobs)):
        where = f"{job['kernel']} at M={job['ints'].get('M', 'any')}"
        assert compiled.spill_bytes == 0, f"{where} spills {compiled.spill_bytes} bytes"
        if job["kernel"] == "dequantize_rows_kernel":
            assert re.search(r"ld\.global(\.[a-z0-9:]+)*\.v4\.b32", compiled.ptx), f"{where}: no 16-byte code loads"
            assert re.search(r"st\.global(\.[a-z0-9:]+)*\.v4\.b32", compiled.ptx), f"{where}: no 16-byte stores"
        elif job["constexprs"].get("PIPE", 1) > 1:  # the full steps' words by cp.async, PIPE - 1 steps ahead
            assert 16 in compiled.cp_async_bytes, f"{where}: the pipelined loop's words are not copied by cp.async"
        elif job["kernel"].endswith(("gemv_kernel", "slab_kernel", "stream_kernel")):
            assert re.search(r"ld\.global(\.[a-z0-9:]+)*\.v4\.b32", compiled.ptx), f"{where}: no 16-byte weight loads"
        else:
            assert 16 in compiled.cp_async_bytes, f"{where}: the weights are not copied in 16-byte vectors"
        if job["constexprs"].get("SWAP_AB") and job["kernel"] == "w4a16_scaled_tile_kernel":
            assert compiled.uses_wgmma, f"{where}: W @ x.T with 64 rows of W should be a warp-group MMA"
        if job["kernel"] == "w4a16_mma_kernel":  # thin tiles: Ampere's synchronous MMA, W's floats from the PTX
            assert "mma.sync.aligned.m16n8k16" in compiled.ptx and not compiled.uses_wgmma, f"{where}: not mma.sync"
            assert "0x43004300" in compiled.ptx and "sub.rn.bf16x2" in compiled.ptx, f"{where}: no inline PTX floats"


def _fused_decode_jobs(offline, capability=90):
    """utils.offline jobs for the fused decode kernels as the step launches them at TinyLlama's shape (bf16; fp16
    for a T4, which has no bf16 arithmetic)."""
    act = "bf16" if capability >= 80 else "fp16"
    jobs = []
    # TinyLlama's qkv (norm in front), gate/up (norm and SwiGLU) and down (+ residual), each format's table row
    for N, K, flags in ((2560, 2048, (1, 0, 0)), (5632, 2048, (1, 1, 0)), (2048, 5632, (0, 0, 1))):
        NORM, SWIGLU, RESIDUAL = map(bool, flags)
        for bits in (4, 8):
            s = L.FUSED_GEMV_SCHEDULES.get((bits, N, K), L.FUSED_GEMV_SCHEDULES[(bits, None)])
            meta = dict(NORM=NORM, SWIGLU=SWIGLU, RESIDUAL=RESIDUAL, BLOCK_N=s.BLOCK_N, PREFETCH=s.num_stages >= 2)
            pointers = dict(x_ptr=act, scale_ptr=act, norm_ptr=act, res_ptr=act, out_ptr=act)
            if bits == 4:
                pointers.update(packed_ptr="i32", zero_ptr="u8")
                meta.update(GROUP_SIZE=128, BLOCK_K=max(s.BLOCK_K, 128))
                ints = dict(N=N, K=K, eps=1e-5, stride_pn=K // 8, stride_sn=K // 128)
            else:
                pointers["q_ptr"] = "i8"
                meta["BLOCK_K"] = s.BLOCK_K
                ints = dict(N=N, K=K, eps=1e-5, stride_qn=K)
            meta.update(cos_ptr=None, sin_ptr=None, pos_ptr=None, k_cache_ptr=None, v_cache_ptr=None, HEAD_DIM=2,
                        ROPE=False)  # fmt: skip
            ints.update(H=0, KV=0, stride_ct=0, max_len=0)
            jobs.append(offline.job(f"w{bits}a16_decode_kernel", pointers=pointers, ints=ints, constexprs=meta,
                                    num_warps=s.num_warps, num_stages=1, capability=capability))  # fmt: skip
            if N == 2560:  # the qkv GEMV with RoPE and the cache write (QUANTIZED_ROPE_IN_QKV): pairs of rows
                rope = dict(meta, BLOCK_N=max(1, s.BLOCK_N // 2), HEAD_DIM=64, ROPE=True, res_ptr=None)
                for name in ("cos_ptr", "sin_ptr", "pos_ptr", "k_cache_ptr", "v_cache_ptr"):
                    del rope[name]
                ptrs = {k: t for k, t in pointers.items() if k != "res_ptr"}
                ptrs.update(cos_ptr=act, sin_ptr=act, pos_ptr="i32", k_cache_ptr=act, v_cache_ptr=act)
                rope_ints = dict(ints, N=N // 2, H=32, KV=4, stride_ct=256, max_len=2048)
                jobs.append(offline.job(f"w{bits}a16_decode_kernel", pointers=ptrs, ints=rope_ints, constexprs=rope,
                                        num_warps=s.num_warps, num_stages=1, capability=capability))  # fmt: skip
    return jobs


def test_fused_decode_kernels_compile_for_sm90_without_spills_at_their_schedules(tmp_path):
    import re

    from utils import offline

    if not offline.available():
        pytest.skip("needs Triton's NVIDIA backend and its ptxas")
    plain = _fused_decode_jobs(offline)
    early = [dict(j, constexprs=dict(j["constexprs"], PDL=pdl)) for pdl in (1, 3) for j in plain]  # launched early
    jobs = plain + early
    for job, compiled in zip(jobs, offline.compile_kernels(_kernels_file(tmp_path), jobs)):
        pdl = job["constexprs"].get("PDL", 0)
        where = f"{job['kernel']} at N={job['ints']['N']}, K={job['ints']['K']}, PDL={pdl}"
        assert compiled.spill_bytes == 0, f"{where} spills {compiled.spill_bytes} bytes"
        assert re.search(r"ld\.global(\.[a-z0-9:]+)*\.v4\.b32", compiled.ptx), f"{where}: no 16-byte weight loads"
        offline.check_pdl_order(compiled.ptx, L8.PDL_TRIGGERS[pdl - 1] if pdl else None, where)


def _int8_decode_job(offline, N, K, s, NORM=False, SWIGLU=False, RESIDUAL=False, ROPE=False, PDL=0, **meta):
    """An utils.offline job for the int8 decode kernel as _fused_gemv / _fused_qkv_rope launch it with the "pipe"
    loop at schedule s (bf16; with ROPE, N counts pairs of rows: TinyLlama's 32 query heads, 4 kv heads, D = 64);
    ``meta``: more constexprs."""
    ptrs = dict(x_ptr="bf16", q_ptr="i8", scale_ptr="bf16", norm_ptr="bf16", res_ptr="bf16", out_ptr="bf16")
    ints = dict(N=N, K=K, eps=1e-5, stride_qn=K, H=0, KV=0, stride_ct=0, max_len=0)
    meta = dict(NORM=NORM, SWIGLU=SWIGLU, RESIDUAL=RESIDUAL, ROPE=ROPE, BLOCK_N=s.BLOCK_N, BLOCK_K=s.BLOCK_K, PDL=PDL,
                **L8.gemv_loads(s, "pipe"), **meta)  # fmt: skip
    if ROPE:
        del ptrs["res_ptr"]
        ptrs.update(cos_ptr="bf16", sin_ptr="bf16", pos_ptr="i32", k_cache_ptr="bf16", v_cache_ptr="bf16")
        meta.update(res_ptr=None, HEAD_DIM=64, BLOCK_N=max(1, s.BLOCK_N // 2))
        ints.update(N=N // 2, H=32, KV=4, stride_ct=256, max_len=2048)
    else:
        meta.update(cos_ptr=None, sin_ptr=None, pos_ptr=None, k_cache_ptr=None, v_cache_ptr=None, HEAD_DIM=2)
    return offline.job("w8a16_decode_kernel", pointers=ptrs, ints=ints, constexprs=meta, num_warps=s.num_warps,
                       num_stages=1)  # fmt: skip


def test_fused_int8_pipe_kernel_compiles_for_sm90_with_its_loop_pipelined(tmp_path):
    """FUSED_INT8_LOOP = "pipe" at FUSED_INT8_PIPE_SCHEDULES's rows, as TinyLlama's int8 step launches the kernel
    (QUANTIZED_PDL[8]): the codes of the steps K does not cut short copied by cp.async, no spills, the wait
    before every store and the next kernel let launch where the table says."""
    from utils import offline

    if not offline.available():
        pytest.skip("needs Triton's NVIDIA backend and its ptxas")
    trigger = L.QUANTIZED_PDL[8]
    jobs, names = [], []
    for label, N, K, flags in (("qkv + RoPE", 2560, 2048, dict(NORM=True, ROPE=True)),
                               ("wo", 2048, 2048, dict(RESIDUAL=True)),
                               ("gate/up", 5632, 2048, dict(NORM=True, SWIGLU=True)),
                               ("down", 2048, 5632, dict(RESIDUAL=True)),
                               ("head", 32000, 2048, dict(NORM=True))):  # fmt: skip
        s = L.FUSED_INT8_PIPE_SCHEDULES.get((N, K), L.FUSED_INT8_PIPE_SCHEDULES[None])
        jobs.append(_int8_decode_job(offline, N, K, s, PDL=1 + L8.PDL_TRIGGERS.index(trigger), **flags))
        names.append(label)
    for label, job, compiled in zip(names, jobs, offline.compile_kernels(_kernels_file(tmp_path), jobs)):
        where = f"the int8 decode kernel at {label}, PIPE={job['constexprs']['PIPE']}"
        assert job["constexprs"]["PIPE"] >= 2, f"{where}: num_stages is the pipeline's depth, 2 or more"
        assert compiled.spill_bytes == 0, f"{where} spills {compiled.spill_bytes} bytes"
        # 16-byte copies, or 8 where a step is narrower than 16 codes a thread (the qkv row: 2 pairs x 512 codes)
        assert max(compiled.cp_async_bytes, default=0) >= 8, f"{where}: the codes are not copied by cp.async"
        at = offline.griddepcontrol_order(compiled.ptx)
        assert 0 <= at["wait"] < at["first_store"], f"{where}: no wait before the stores"
        if trigger == "after loop":
            assert at["wait"] < at["trigger"] < at["first_store"], f"{where}: the next kernel let launch too early"


def _int4_decode_job(offline, kind, N, K, s, NORM=False, SWIGLU=False, RESIDUAL=False, ROPE=False, PDL=0,
                     capability=90, DOTS=""):  # fmt: skip
    """An utils.offline job for the int4 decode kernel of this kind (FUSED_INT4_KERNELS) as _fused_gemv /
    _fused_qkv_rope launch it (bf16, groups of 128; fp16 for a T4's capability 75, which has no bf16 arithmetic),
    the stream kernels with the dots DOTS ("": the fp32 dots; an MMA PTX, INT4_MMA_PTX or another, with MMA on);
    with ROPE, N counts pairs of rows (TinyLlama's 32 query heads, 4 kv heads, D = 64)."""
    act = "bf16" if capability >= 80 else "fp16"
    pointers = dict(x_ptr=act, packed_ptr="i32", scale_ptr=act, zero_ptr="u8", norm_ptr=act, res_ptr=act, out_ptr=act)
    ints = dict(N=N, K=K, eps=1e-5, stride_pn=K // 8, stride_sn=K // 128, H=0, KV=0, stride_ct=0, max_len=0)
    meta = dict(GROUP_SIZE=128, NORM=NORM, SWIGLU=SWIGLU, RESIDUAL=RESIDUAL, BLOCK_N=s.BLOCK_N, BLOCK_K=s.BLOCK_K,
                HEAD_DIM=2, ROPE=ROPE, PDL=PDL)  # fmt: skip
    kernel = L._int4_decode_kernel(s, meta, torch.empty(1, K), kind).fn.__name__  # its loads ahead, into meta
    if DOTS:
        meta["DOTS"], meta["MMA"] = DOTS, "mma.sync" in DOTS  # INT4_MMA_PTX, or int4_mma_ptx(words, chains)
    if ROPE:
        del pointers["res_ptr"]
        meta.update(res_ptr=None, HEAD_DIM=64, BLOCK_N=max(1, s.BLOCK_N // 2))
        pointers.update(cos_ptr=act, sin_ptr=act, pos_ptr="i32", k_cache_ptr=act, v_cache_ptr=act)
        ints.update(N=N // 2, H=32, KV=4, stride_ct=256, max_len=2048)
    else:
        meta.update(cos_ptr=None, sin_ptr=None, pos_ptr=None, k_cache_ptr=None, v_cache_ptr=None)
    return offline.job(kernel, pointers=pointers, ints=ints, constexprs=meta, num_warps=s.num_warps, num_stages=1,
                       capability=capability)  # fmt: skip


def test_fused_decode_pipe_kernel_compiles_for_sm90_with_its_loop_pipelined(tmp_path):
    """The "pipe" decode kernel at TinyLlama's five shapes with FUSED_PIPE_SCHEDULES's rows (the default row where a
    shape has none), as the int4 step launches it where FUSED_INT4_KERNEL says "pipe" (its wo and head take "stream"
    now; they stay here as checks of the default row): no spills,
    the words of the steps K does not cut short copied by 16-byte cp.async (Triton's pipeliner took them: a loop
    written tl.range(..., num_stages=...) pipelines loads that feed no tl.dot), the wait before every store and the
    next kernel let launch after the loop. Unlike the other two kernels it loads no weight before the wait: the
    pipeline's first loads are the compiler's, at the loop."""
    from utils import offline

    if not offline.available():
        pytest.skip("needs Triton's NVIDIA backend and its ptxas")
    pdl = 1 + L8.PDL_TRIGGERS.index(L.QUANTIZED_PDL[4])
    shapes = [("qkv + RoPE", 2560, 2048, dict(NORM=True, ROPE=True)), ("wo", 2048, 2048, dict(RESIDUAL=True)),
              ("gate/up", 5632, 2048, dict(NORM=True, SWIGLU=True)), ("down", 2048, 5632, dict(RESIDUAL=True)),
              ("head", 32000, 2048, dict(NORM=True))]  # fmt: skip
    jobs = []
    for _label, N, K, flags in shapes:
        s = L.FUSED_PIPE_SCHEDULES.get((N, K), L.FUSED_PIPE_SCHEDULES[None])
        assert s.num_stages >= 2, f"{s}: num_stages is the pipeline's depth, 2 or more"
        jobs.append(_int4_decode_job(offline, "pipe", N, K, s, PDL=pdl, **flags))
    for (label, *_), compiled in zip(shapes, offline.compile_kernels(_kernels_file(tmp_path), jobs)):
        where = f"the pipe decode kernel at {label}"
        assert compiled.spill_bytes == 0, f"{where} spills {compiled.spill_bytes} bytes"
        assert 16 in compiled.cp_async_bytes, f"{where}: the words are not copied by 16-byte cp.async"
        at = offline.griddepcontrol_order(compiled.ptx)
        assert 0 <= at["wait"] < at["first_store"], f"{where}: no wait before the stores"
        if L.QUANTIZED_PDL[4] == "after loop":
            assert at["wait"] < at["trigger"] < at["first_store"], f"{where}: the next kernel let launch too early"


def test_the_pipe_gemv_compiles_for_every_gpu_the_course_runs_on(tmp_path):
    """The fast path's "pipe" (w4a16_stream_kernel with PIPE) at PIPE_TILE: on an A100 and an H100 its words come by
    16-byte cp.async; a T4 (sm_75) has no cp.async, and the same loop compiles to plain loads. No spills on any."""
    from utils import offline

    if not offline.available():
        pytest.skip("needs Triton's NVIDIA backend and its ptxas")
    BLOCK_N, BLOCK_K, warps, stages = L.PIPE_TILE
    N, K = 14336, 4096
    jobs = [
        offline.job(L.int4_gemv_kernel("pipe").fn.__name__,
                    pointers=dict(x_ptr="fp16", packed_ptr="i32", scale_ptr="fp16", zero_ptr="u8", res_ptr="fp16",
                                  out_ptr="fp16"),
                    ints=dict(M=1, N=N, K=K, stride_xm=K, stride_pn=K // 8, stride_sn=K // 128, stride_om=N,
                              stride_os=0, SPLIT_K=2),
                    constexprs=dict(GROUP_SIZE=128, BLOCK_M=1, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, HAS_RESIDUAL=False,
                                    **L.gemv_prefetch("pipe", stages)),
                    num_warps=warps, num_stages=1, capability=capability)
        for capability in (75, 80, 90)
    ]  # fmt: skip
    for capability, compiled in zip((75, 80, 90), offline.compile_kernels(_kernels_file(tmp_path), jobs)):
        assert compiled.spill_bytes == 0, f"sm_{capability}: spills {compiled.spill_bytes} bytes"
        if capability >= 80:
            assert 16 in compiled.cp_async_bytes, f"sm_{capability}: the words are not copied by 16-byte cp.async"
        else:
            assert not compiled.cp_async_bytes, "sm_75 has no cp.async"
            assert 16 in compiled.global_load_bytes, "sm_75: the words are not loaded 16 bytes at a time"


def test_fused_decode_stream_kernel_compiles_for_sm90_with_fewer_instructions_a_code(tmp_path):
    """The stream decode kernel at its table's schedules, as TinyLlama's int4 step launches it (launched early,
    QUANTIZED_PDL): no spills, 16-byte word loads, the PDL order kept. And its point, fewer instructions in its K
    loop a code than the groups kernel at its own table's rows, at the tiles with the most rows a thread (FEWEST):
    the table's measured winners hold fewer rows (the H100 timed both alike: results/h100-2026-11-27-s8/sweeps/
    l12h.txt), and at 4 rows under triton 3.6 gate/up counted 6.2 against 6.7. Measured at FEWEST (triton 3.7,
    sm_90, PTX of the loop / codes a thread a step): qkv with RoPE 5.1 against 10.0, gate/up 5.1 against 6.7, down
    4.7 against 7.8 (in SASS: 4.8, 4.9, 4.4 against 10.4, 7.0, 8.2)."""
    from utils import offline

    if not offline.available():
        pytest.skip("needs Triton's NVIDIA backend and its ptxas")
    pdl = 1 + L8.PDL_TRIGGERS.index(L.QUANTIZED_PDL[4])
    fewest = {None: L.GemvSchedule(BLOCK_N=16, BLOCK_K=1024, num_warps=2, num_stages=2),
              (5632, 2048): L.GemvSchedule(BLOCK_N=8, BLOCK_K=1024, num_warps=2, num_stages=2)}  # fmt: skip
    # (label, N, K, epilogue): qkv with RoPE and without, wo and down (+ residual), gate/up (norm, SwiGLU), the head
    shapes = [("qkv + RoPE", 2560, 2048, dict(NORM=True, ROPE=True)), ("qkv", 2560, 2048, dict(NORM=True)),
              ("wo", 2048, 2048, dict(RESIDUAL=True)), ("gate/up", 5632, 2048, dict(NORM=True, SWIGLU=True)),
              ("down", 2048, 5632, dict(RESIDUAL=True)), ("head", 32000, 2048, dict(NORM=True))]  # fmt: skip
    jobs, names = [], []
    for label, N, K, flags in shapes:
        stream = L.FUSED_STREAM_SCHEDULES.get((N, K), L.FUSED_STREAM_SCHEDULES[None])
        jobs.append(_int4_decode_job(offline, "stream", N, K, stream, PDL=pdl, **flags))
        names.append((label, "stream"))
        if label in ("qkv", "gate/up", "down"):
            few = fewest.get((N, K), fewest[None])
            jobs.append(_int4_decode_job(offline, "stream", N, K, few, PDL=pdl, **flags))
            names.append((label, "stream, fewest"))
            groups = L.FUSED_GEMV_SCHEDULES.get((4, N, K), L.FUSED_GEMV_SCHEDULES[(4, None)])
            jobs.append(_int4_decode_job(offline, "groups", N, K, groups, PDL=pdl, **flags))
            names.append((label, "groups"))
    per_code = {}
    for (label, kernel), job, compiled in zip(names, jobs, offline.compile_kernels(_kernels_file(tmp_path), jobs)):
        c = job["constexprs"]
        where = f"{job['kernel']} at {label} ({kernel})"
        assert compiled.spill_bytes == 0, f"{where} spills {compiled.spill_bytes} bytes"
        assert re.search(r"ld\.global(\.[a-z0-9:]+)*\.v4\.b32", compiled.ptx), f"{where}: no 16-byte weight loads"
        offline.check_pdl_order(compiled.ptx, L.QUANTIZED_PDL[4], where)
        rows = c["BLOCK_N"] * (2 if c["SWIGLU"] or c["ROPE"] else 1)
        per_code[label, kernel] = compiled.loop_instructions / (rows * c["BLOCK_K"] / (32 * job["num_warps"]))
    for label in ("qkv", "gate/up", "down"):
        stream, groups = per_code[label, "stream, fewest"], per_code[label, "groups"]
        assert stream < 0.9 * groups, f"{label}: {stream:.2f} instructions a code in the stream kernel, {groups:.2f}"


def test_the_packed_bf16_dots_compile_for_sm90_with_fewer_instructions_a_code(tmp_path):
    """INT4_DOTS_PTX in the decode kernel as the int4 step launches it on an H100 (FUSED_INT4_KERNEL at its table's
    rows, bf16): no spills, the PTX's bf16x2 multiply-adds in the loop, and fewer loop instructions a code than the
    same kernel with the fp32 dots (sweep l12zd: 989 against 1,182 at the 8B gate/up's tile)."""
    from utils import offline

    if not offline.available():
        pytest.skip("needs Triton's NVIDIA backend and its ptxas")
    pdl = 1 + L8.PDL_TRIGGERS.index(L.QUANTIZED_PDL[4])
    shapes = [("gate/up", 5632, 2048, dict(NORM=True, SWIGLU=True)), ("down", 2048, 5632, dict(RESIDUAL=True)),
              ("8B gate/up", 14336, 4096, dict(NORM=True, SWIGLU=True))]  # fmt: skip
    jobs = []
    for _label, N, K, flags in shapes:
        kind = L.fused_int4_kernel(N, K)
        table = L.FUSED_PIPE_SCHEDULES if kind == "pipe" else L.FUSED_STREAM_SCHEDULES
        s = table.get((N, K), table[None])
        for dots in ("", L.INT4_DOTS_PTX):
            jobs.append(_int4_decode_job(offline, kind, N, K, s, PDL=pdl, DOTS=dots, **flags))
    compiled = offline.compile_kernels(_kernels_file(tmp_path), jobs)
    for i, (label, N, K, _flags) in enumerate(shapes):
        fp32, packed = compiled[2 * i], compiled[2 * i + 1]
        where = f"{L.fused_int4_kernel(N, K)} decode kernel at {label}"
        assert packed.spill_bytes == 0, f"{where}: the packed dots spill {packed.spill_bytes} bytes"
        assert "fma.rn.bf16x2" in packed.ptx and "fma.rn.bf16x2" not in fp32.ptx, f"{where}: DOTS did not switch"
        ratio = packed.loop_instructions / fp32.loop_instructions
        assert ratio < 0.9, f"{where}: {packed.loop_instructions} loop instructions against {fp32.loop_instructions}"


def test_the_packed_dots_are_taken_only_where_they_run():
    """int4_dots_ptx: the PTX only for bf16 x on a GPU of sm_90 or later; "" (the exact fp32 dots) under the
    interpreter, for fp16 and fp32 x, and with INT4_PACKED_DOTS off."""
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        assert L.int4_dots_ptx(torch.zeros(1, 8, dtype=dtype)) == "", f"{dtype} on the CPU took the PTX"
    assert L.INT4_DOTS_PTX.count("fma.rn.bf16x2") == 2 and L.INT4_DOTS_PTX.count("mul.rn.bf16x2") == 2


def test_the_checks_widen_their_tolerance_only_for_the_packed_dots(monkeypatch):
    """packed_dots_tolerance: {} (bf16's own) where the packed dots do not run (fp32 x, an int8 weight, this CPU);
    twice bf16's, with its reason, where they would (int4_dots_ptx returning the PTX), four times behind SwiGLU."""
    env = utils.mode.current()
    x = torch.zeros(1, 64, dtype=env.pick(cpu=torch.bfloat16, gpu=env.dtype), device=env.device)
    w4 = L.quantize_int4_ref(torch.randn(8, 64, device=env.device), 32)
    assert L.packed_dots_tolerance(x.float(), w4) == {}
    if not env.is_gpu:
        assert L.packed_dots_tolerance(x, w4) == {}
    monkeypatch.setattr(L, "int4_dots_ptx", lambda x: L.INT4_DOTS_PTX)
    bf16 = utils.checking.default_tolerance(torch.bfloat16)
    tol = L.packed_dots_tolerance(x.to(torch.bfloat16), w4)
    assert (tol["atol"], tol["rtol"]) == (2 * bf16.atol, 2 * bf16.rtol) and "packed bf16 dots" in tol["reason"]
    tol = L.packed_dots_tolerance(x.to(torch.bfloat16), w4, swiglu=True)
    assert (tol["atol"], tol["rtol"]) == (4 * bf16.atol, 4 * bf16.rtol) and "SwiGLU" in tol["reason"]
    assert L.packed_dots_tolerance(x, L.quantize_int8_ref(torch.randn(8, 64, device=env.device))) == {}


def _packed_dots_emulated(x, w):
    """INT4_DOTS_PTX's arithmetic in fp64 on the CPU, rounding where the PTX rounds: each word's codes q - z (exact),
    two chains of two bf16 products for each half of a pair (mul.rn, then fma.rn: one rounding each), the chains
    added in fp32, times the group's scale, the words' sums in fp64 (the kernel's fp32 sums round far less)."""

    def bf16(t):
        return t.to(torch.bfloat16).to(torch.float64)

    N, K = w.shape
    G = w.group_size
    codes = L.unpack_int4(w.packed).to(torch.float64)
    d = L._dequant_codes(codes, w.zero.to(torch.float64), torch.ones(w.scale.shape, dtype=torch.float64), K)  # q - z
    Kp = -(-K // 8) * 8
    D = torch.zeros(N, Kp, dtype=torch.float64)
    D[:, :K] = d
    D = D.view(N, -1, 8)
    scale = w.scale.to(torch.float64).repeat_interleave(G // 8, dim=1)[:, : D.shape[1]]
    out = torch.zeros(x.shape[0], N, dtype=torch.float64)
    for m in range(x.shape[0]):
        X = torch.zeros(Kp, dtype=torch.float64)
        X[:K] = x[m].to(torch.float64)
        X = X.view(-1, 8)
        word = torch.zeros(N, D.shape[1], dtype=torch.float64)
        for half in (0, 4):
            for start in (0, 2):
                a, b = half + start, half + start + 1
                chain = bf16(D[:, :, b] * X[:, b] + bf16(D[:, :, a] * X[:, a]))
                word = (word + chain).to(torch.float32).to(torch.float64)
        out[m] = (word * scale).sum(1)
    return out


@pytest.mark.parametrize("group", [32, 128])
def test_the_packed_dots_roundings_stay_within_the_checks_tolerance(group):
    """What INT4_DOTS_PTX costs in precision, emulated on the CPU (the interpreter runs no PTX): with the output
    rounded to bf16 it stays within wxa16_tolerance (check_w4a16's) at large and small x, and its error is not
    negligible either (above a fifth of the tolerance: the emulation rounds)."""
    if utils.mode.current().is_gpu:
        pytest.skip("an emulation on the CPU: on a GPU the checks run the PTX itself")
    torch.manual_seed(0)
    worst = 0.0
    for M, N, K, x_scale in ((1, 301, 4096, 1.0), (3, 77, 1000, 50.0), (1, 512, 14336, 1.0)):
        w = L.quantize_int4_ref(torch.randn(N, K) / K**0.5 * torch.rand(N, 1) * 10, group)
        x = (torch.randn(M, K) * x_scale).to(torch.bfloat16)
        ref = L.wxa16_ref(x.double(), w).double()
        got = _packed_dots_emulated(x, w).to(torch.bfloat16).double()
        tol = L.wxa16_tolerance(x, w, torch.bfloat16)
        worst = max(worst, float(((got - ref).abs() / (tol["atol"] + tol["rtol"] * ref.abs())).max()))
    assert 0.2 < worst < 1.0, f"the packed dots' worst error is {worst:.2f} of the check's tolerance"


def test_a_lost_zero_point_is_named_through_the_packed_dots_roundings():
    """check_w4a16's hint for the zero points lost on the way to the kernel, with the output the packed bf16 dots
    would give (emulated on the CPU: the interpreter runs no PTX): without a zero point the codes are 0-15, so the
    dots' rounding errors grow with them, and w4a16_suspects widens that suspect's tolerance as much (utils.Scaled).
    With the check's own tolerance, one draw in five missed the hint (session 48: once on an H100)."""
    if utils.mode.current().is_gpu:
        pytest.skip("an emulation on the CPU: on a GPU test_fast_path_planted_mistake_gets_its_hint runs the PTX")
    torch.manual_seed(0)
    for draw in range(40):
        x = torch.randn(1, 100).to(torch.bfloat16)
        w = L.quantize_int4_ref((torch.randn(17, 100) / 10).to(torch.bfloat16).float(), 128)
        lost = L.Int4Weight(w.packed, w.scale, torch.zeros_like(w.zero), w.K, w.group_size)
        got = _packed_dots_emulated(x, lost).to(torch.bfloat16)
        with pytest.raises(AssertionError, match="zero point is not subtracted"):
            utils.check(got, L.wxa16_ref(x.double(), w), **L.wxa16_tolerance(x, w, torch.bfloat16),
                        name=f"draw {draw}", quiet=True, suspects=L.w4a16_suspects(x, w))  # fmt: skip


def test_the_packed_dots_behind_swiglu_stay_within_four_times_bf16s_tolerance():
    """check_quantized_decode_gemv's gate/up case as the packed dots compute it, emulated on the CPU: rmsnorm(x) in
    fp32 rounded to bf16 (x's pairs), the dots' roundings, SwiGLU in fp32, the output in bf16. SwiGLU multiplies the
    gate's error by up, so the error passes twice bf16's tolerance (what packed_dots_tolerance allows the dots alone)
    but stays within the four times it allows behind SwiGLU; the exact fp32 dots stay far within bf16's own."""
    if utils.mode.current().is_gpu:
        pytest.skip("an emulation on the CPU: on a GPU the checks run the PTX itself")
    bf16 = utils.checking.default_tolerance(torch.bfloat16)
    N, K = 2501, 2100  # the check's shape on a GPU
    packed, exact = [], []
    for seed in range(3):  # six draws: 12 s would be the slowest lesson test on the CPU
        torch.manual_seed(seed)
        x = torch.randn(1, K).to(torch.bfloat16).double()
        W = (torch.randn(2 * N, K) / K**0.5).to(torch.bfloat16).float()
        norm = L.norm_weight(K, torch.float32, "cpu").to(torch.bfloat16).double()
        h = L.rmsnorm_ref(x, norm, 1e-5)  # fp64
        for group in (32, 128):
            w = L.quantize_int4_ref(W, group)
            gate_up_ref = h @ L.dequantize(w, torch.float64).T  # fp64: the exact dots
            ref = L.swiglu_ref(gate_up_ref)
            for worst, gate_up in ((packed, _packed_dots_emulated(h.to(torch.bfloat16), w)), (exact, gate_up_ref)):
                got = L.swiglu_ref(gate_up.float()).to(torch.bfloat16).double()
                worst.append(float(((got - ref).abs() / (bf16.atol + bf16.rtol * ref.abs())).max()))
    assert 2 < max(packed) < 4, f"the packed dots behind SwiGLU reach {max(packed):.2f} times bf16's tolerance"
    assert max(exact) < 0.5, f"the fp32 dots behind SwiGLU reach {max(exact):.2f} times bf16's tolerance"


@pytest.mark.parametrize("capability", [80, 75], ids=["A100", "T4"])
def test_the_stream_decode_kernel_compiles_for_an_a100_and_a_t4(tmp_path, capability):
    """FUSED_INT4_KERNEL = "stream" on the GPUs learners bring: its table's tiles with the most rows in a thread
    (gate/up, qkv with RoPE: two sets of rows) compile without spills (fp16 on a T4, which has no bf16)."""
    from utils import offline

    if not offline.available():
        pytest.skip("needs Triton's NVIDIA backend and its ptxas")
    jobs = []
    for N, K, flags in ((5632, 2048, dict(NORM=True, SWIGLU=True)), (2560, 2048, dict(NORM=True, ROPE=True))):
        s = L.FUSED_STREAM_SCHEDULES.get((N, K), L.FUSED_STREAM_SCHEDULES[None])
        jobs.append(_int4_decode_job(offline, "stream", N, K, s, capability=capability, **flags))
    for job, compiled in zip(jobs, offline.compile_kernels(_kernels_file(tmp_path), jobs)):
        where = f"{job['kernel']} at N={job['ints']['N']}, K={job['ints']['K']} for sm_{capability}"
        assert compiled.spill_bytes == 0, f"{where} spills {compiled.spill_bytes} bytes"


@pytest.mark.parametrize("capability", [80, 75], ids=["A100", "T4"])
def test_the_qkv_rope_decode_kernels_compile_for_an_a100_and_a_t4(tmp_path, capability):
    """The fused qkv GEMV with RoPE and the cache write (QUANTIZED_ROPE_IN_QKV), compiled without a GPU for the
    GPUs learners bring: no spills, 16-byte weight loads."""
    import re

    from utils import offline

    if not offline.available():
        pytest.skip("needs Triton's NVIDIA backend and its ptxas")
    jobs = [j for j in _fused_decode_jobs(offline, capability) if j["constexprs"]["ROPE"]]
    assert len(jobs) == 2, "one int4 and one int8 job expected"
    for job, compiled in zip(jobs, offline.compile_kernels(_kernels_file(tmp_path), jobs)):
        where = f"{job['kernel']} with RoPE for sm_{capability}"
        assert compiled.spill_bytes == 0, f"{where} spills {compiled.spill_bytes} bytes"
        assert re.search(r"ld\.global(\.[a-z0-9:]+)*\.v4\.b32", compiled.ptx), f"{where}: no 16-byte weight loads"


def test_the_int4_decode_kernel_is_chosen_by_shape(monkeypatch):
    """FUSED_INT4_KERNEL as a dict by (N, K): a shape's own kind, None's for every other shape, and the schedule
    from that kind's table; a bad kind in the dict is refused, naming the shape."""
    env = dataclasses.replace(utils.mode.current(), interpret=False)  # the tables, not the interpreter's tiles
    monkeypatch.setattr(utils.mode, "current", lambda: env)
    monkeypatch.setattr(L, "FUSED_INT4_KERNEL", {None: "pipe", (8192, 2048): "stream"})
    assert L.fused_int4_kernel(8192, 2048) == "stream" and L.fused_int4_kernel(14336, 4096) == "pipe"
    s = L.fused_gemv_schedule(4, 8192, 2048)
    assert s == L.FUSED_STREAM_SCHEDULES.get((8192, 2048), L.FUSED_STREAM_SCHEDULES[None])
    assert L.fused_gemv_schedule(4, 14336, 4096) == L.FUSED_PIPE_SCHEDULES.get((14336, 4096),
                                                                            L.FUSED_PIPE_SCHEDULES[None])  # fmt: skip
    monkeypatch.setattr(L, "FUSED_INT4_KERNEL", {None: "pipe", (8192, 2048): "streams"})
    with pytest.raises(ValueError, match=r"FUSED_INT4_KERNEL must be one of .* for \(8192, 2048\)"):
        L.fused_int4_kernel(8192, 2048)
    assert L.fused_int4_kernel(1, 1) == "pipe"


@pytest.mark.parametrize("capability", [90, 80, 75], ids=["H100", "A100", "T4"])
def test_the_1b_int4_rows_compile_without_spills(tmp_path, capability):
    """FUSED_INT4_KERNEL sends Llama-3.2-1B's five shapes and TinyLlama's LM head to the stream kernel or its
    pipelined form ("pipe"), each at its own row of that kernel's table (up to 32 rows a program): each compiles
    without spills as the step launches it, with the MMA dots on an H100 and an A100 (and the packed bf16 dots on an
    H100), the fp32 dots on a T4 (fp16 there)."""
    from utils import offline

    if not offline.available():
        pytest.skip("needs Triton's NVIDIA backend and its ptxas")
    _at_the_edge_of_the_registers(offline)
    shapes = [((8192, 2048), dict(NORM=True, SWIGLU=True)), ((2048, 8192), dict(RESIDUAL=True)),
              ((3072, 2048), dict(NORM=True, ROPE=True)), ((2048, 2048), dict(RESIDUAL=True)),
              ((128256, 2048), dict(NORM=True)), ((32000, 2048), dict(NORM=True))]  # fmt: skip
    tables = {"stream": L.FUSED_STREAM_SCHEDULES, "pipe": L.FUSED_PIPE_SCHEDULES}
    jobs = []
    for (N, K), flags in shapes:
        kind = L.fused_int4_kernel(N, K)
        assert kind in tables, f"({N}, {K}) takes the {kind!r} kernel, not the stream kernel or its pipelined form"
        assert (N, K) in tables[kind], f"({N}, {K}) takes {kind!r} without a row of its own in that kernel's table"
        # the dots int4_stream_dots takes there (bf16, groups of 128): the MMAs from sm_80 on, and on an H100 the
        # packed dots too (INT4_DOTS = "pairs"); a T4 the fp32 dots
        for dots in {90: (L.INT4_MMA_PTX, L.INT4_DOTS_PTX), 80: (L.INT4_MMA_PTX,), 75: ("",)}[capability]:
            jobs.append(_int4_decode_job(offline, kind, N, K, tables[kind][(N, K)], capability=capability,
                                         DOTS=dots, **flags))  # fmt: skip
    for job, compiled in zip(jobs, offline.compile_kernels(_kernels_file(tmp_path), jobs)):
        where = f"the decode kernel at ({job['ints']['N']}, {job['ints']['K']}), MMA {job['constexprs']['MMA']}"
        assert compiled.spill_bytes == 0, f"{where} spills {compiled.spill_bytes} bytes"


# -- the MMA dots (INT4_MMA_PTX): the decode kernel's int4 dots on the tensor cores ------------------------------------


def test_the_mma_dots_are_taken_where_they_apply(monkeypatch):
    """int4_stream_dots: the MMA dots for bf16 x on a GPU of sm_80 or later, at groups of a multiple of 128 codes,
    with two sets of rows (SwiGLU, RoPE, or a block of two rows or more); int4_dots_ptx's dots everywhere else and
    with INT4_DOTS = "pairs"; INT4_DOTS by the weight's shape; a bad INT4_DOTS is refused, naming it."""
    import types

    bf16 = types.SimpleNamespace(is_cuda=True, dtype=torch.bfloat16)  # x as the launcher sees it, without a GPU here
    fp16 = types.SimpleNamespace(is_cuda=True, dtype=torch.float16)
    monkeypatch.setattr(L, "INT4_DOTS", "mma")
    for capability, want in (((9, 0), True), ((8, 0), True), ((7, 5), False)):
        env = utils.mode.Env(device="cuda", interpret=False, capability=capability, dtype=torch.bfloat16)
        monkeypatch.setattr(utils.mode, "current", lambda env=env: env)
        dots, mma = L.int4_stream_dots(bf16, 128, 8, paired=False)
        assert mma == want and (dots == L.INT4_MMA_PTX) == want, capability
        if want:
            assert L.int4_stream_dots(bf16, 256, 1, paired=True) == (L.INT4_MMA_PTX, True)
            for x, G, rows, paired in ((fp16, 128, 8, True), (bf16, 64, 8, True), (bf16, 32, 8, False),
                                       (bf16, 128, 1, False)):  # fmt: skip
                got = L.int4_stream_dots(x, G, rows, paired)
                assert got == (L.int4_dots_ptx(x), False), (capability, x.dtype, G, rows, paired)
            monkeypatch.setattr(L, "INT4_DOTS", "pairs")
            assert L.int4_stream_dots(bf16, 128, 8, paired=True) == (L.int4_dots_ptx(bf16), False)
            monkeypatch.setattr(L, "INT4_DOTS", "tensor cores")
            with pytest.raises(ValueError, match="INT4_DOTS"):
                L.int4_stream_dots(bf16, 128, 8, paired=True)
            monkeypatch.setattr(L, "INT4_DOTS", "mma")
    # by shape: a dict's row for the weight's (N, K), None for every other shape; the decode kernel's launcher
    # passes its weight's shape down (gate/up's N is its gate rows, as FUSED_INT4_KERNEL's keys count them)
    env = utils.mode.Env(device="cuda", interpret=False, capability=(9, 0), dtype=torch.bfloat16)
    monkeypatch.setattr(utils.mode, "current", lambda: env)
    monkeypatch.setattr(L, "INT4_DOTS", {(8192, 2048): "mma", None: "pairs"})
    assert L.int4_dots_kind(8192, 2048) == "mma" and L.int4_dots_kind(2048, 8192) == "pairs"
    assert L.int4_stream_dots(bf16, 128, 8, paired=True, shape=(8192, 2048)) == (L.INT4_MMA_PTX, True)
    assert L.int4_stream_dots(bf16, 128, 8, paired=True, shape=(2048, 8192)) == (L.int4_dots_ptx(bf16), False)
    assert L.int4_stream_dots(bf16, 128, 8, paired=True) == (L.int4_dots_ptx(bf16), False), "no shape: None's row"
    for shape, want in (((8192, 2048), True), ((3072, 2048), False)):
        meta = dict(BLOCK_N=8, SWIGLU=True)
        L._int4_decode_kernel(L8.GemvSchedule(8, 1024, 2, 2), meta, bf16, "stream", shape=shape)
        assert meta["MMA"] == want, (shape, meta["MMA"])
    monkeypatch.setattr(L, "INT4_DOTS", {(8192, 2048): "wmma", None: "pairs"})
    with pytest.raises(ValueError, match=r"INT4_DOTS.*'wmma' for \(8192, 2048\)"):
        L.int4_stream_dots(bf16, 128, 8, paired=True, shape=(8192, 2048))
    monkeypatch.undo()
    monkeypatch.setattr(L, "INT4_DOTS", "mma")
    x = torch.zeros(1, 8, dtype=torch.bfloat16)
    assert L.int4_stream_dots(x, 128, 8, paired=True) == (L.int4_dots_ptx(x), False), "the CPU took the MMA dots"


def test_the_mma_ptx_pairs_each_word_with_its_x():
    """INT4_MMA_PTX read back: eight MMAs, the first from zero and each later one adding to the one before; word i
    of row a and row b lifted into A's four registers, LOP3'd at shifts 0 and 4 for the first MMA of the word and 8
    and 12 for the second, with x's pairs i (64-bit operands, pairs 0-1 then 2-3) as B."""
    import re

    ptx = L.INT4_MMA_PTX
    mmas = re.findall(r"mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.bf16\.bf16\.f32 \{d0, d1, d2, d3\}, "
                      r"\{a0, a1, a2, a3\}, \{b0, b1\}, \{([^}]*)\};", ptx)  # fmt: skip
    assert mmas == ["z, z, z, z"] + ["d0, d1, d2, d3"] * 7
    blocks = ptx.split("mma.sync")[:-1]
    for n, block in enumerate(blocks):
        i, second = divmod(n, 2)
        b = re.findall(r"mov\.b64 \{b0, b1\}, \$(\d+);", block)
        assert b[-1] == str(10 + 2 * i + second), f"MMA {n}: B from ${b[-1]}"
        lo, hi = (8, 12) if second else (0, 4)
        for reg, word, shift in (("a0", 2 + i, lo), ("a1", 6 + i, lo), ("a2", 2 + i, hi), ("a3", 6 + i, hi)):
            source = f"\\${word}" if shift == 0 else "t"
            assert re.search(rf"lop3\.b32 {reg}, {source}, 0x000F000F, 0x43004300, 0xEA;", block), (n, reg)
            if shift:
                assert re.search(rf"shr\.u32 t, \${word}, {shift};\nlop3\.b32 {reg}, t,", block), (n, reg, shift)
    assert "selp.f32 $0, d0, z, mine;" in ptx and "selp.f32 $1, d2, z, mine;" in ptx


def test_the_mma_ptx_in_chains_takes_turns_and_adds_them_up():
    """int4_mma_ptx(words, chains): MMA n adds to accumulator n % chains (each one's first MMA from zero), the same
    operands in the same order as one chain; the accumulators are added into d before the selection; a number of
    chains that does not divide the MMAs is refused, naming chains."""
    import re

    pattern = (r"mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.bf16\.bf16\.f32 \{(\w)0, \w1, \w2, \w3\}, "
               r"\{a0, a1, a2, a3\}, \{b0, b1\}, \{([^}]*)\};")  # fmt: skip
    one = L.int4_mma_ptx(4)
    for chains in (2, 4):
        ptx = L.int4_mma_ptx(4, chains)
        mmas = re.findall(pattern, ptx)
        assert [d for d, _ in mmas] == ["defg"[n % chains] for n in range(8)], chains
        assert [c for _, c in mmas] == ["z, z, z, z"] * chains + [f"{d}0, {d}1, {d}2, {d}3" for d, _ in mmas[chains:]]
        strip = lambda p: [line for line in p.splitlines() if "mma.sync" not in line and not line.startswith(".reg")]  # noqa: E731
        adds = [f"add.f32 d{j}, d{j}, {acc}{j};" for acc in "defg"[1:chains] for j in range(4)]
        body = strip(ptx)
        assert all(a in body for a in adds) and body.index(adds[-1]) < body.index("mov.u32 l, %laneid;"), chains
        assert [line for line in body if line not in adds] == strip(one), chains  # the operands as one chain's
    with pytest.raises(ValueError, match="chains"):
        L.int4_mma_ptx(4, 3)


def test_the_mma_ptx_in_two_and_four_chains_compiles_without_spills(tmp_path):
    """int4_mma_ptx(4, chains) in the stream decode kernel at Llama-3.2-1B's gate/up and head rows, for sm_90: the
    MMAs in the loop, no spills (offline, triton 3.7.1: 174 and 246 registers against one chain's 168)."""
    from utils import offline

    if not offline.available():
        pytest.skip("needs Triton's NVIDIA backend and its ptxas")
    _at_the_edge_of_the_registers(offline)
    jobs = []
    for N, K, flags in ((8192, 2048, dict(NORM=True, SWIGLU=True)), (128256, 2048, dict(NORM=True))):
        s = L.FUSED_STREAM_SCHEDULES[(N, K)]
        for chains in (2, 4):
            jobs.append(_int4_decode_job(offline, "stream", N, K, s, DOTS=L.int4_mma_ptx(4, chains), **flags))
    for job, c in zip(jobs, offline.compile_kernels(_kernels_file(tmp_path), jobs)):
        where = (
            f"({job['ints']['N']}, {job['ints']['K']}), {job['constexprs']['DOTS'].count('add.f32') // 4 + 1} chains"
        )
        assert "mma.sync.aligned.m16n8k16" in c.ptx and c.spill_bytes == 0, f"{where}: spills {c.spill_bytes} bytes"


def _mma_operand_layout(ttgir: str) -> dict:
    """The blocked layout of the first operand of the MMA dots' inline assembly in a kernel's TTGIR:
    {"sizePerThread": [...], "threadsPerWarp": [...], "order": [...]}."""
    import re

    line = next(line for line in ttgir.splitlines() if "elementwise_inline_asm" in line and "mma.sync" in line)
    name = re.search(r": tensor<[^,>]*, (#[A-Za-z0-9_]+)>", line.split("} ", 1)[1]).group(1)
    body = re.search(rf"^{re.escape(name)} = #ttg\.blocked<\{{(.*)\}}>", ttgir, re.M).group(1)
    return {key: [int(v) for v in re.search(rf"{key} = \[([^\]]*)\]", body).group(1).split(",")]
            for key in ("sizePerThread", "threadsPerWarp", "order")}  # fmt: skip


def _at_the_edge_of_the_registers(offline):
    """Skip a check of tiles chosen to just fit the registers where the installed Triton is not the pinned one: its
    register allocation differs (utils.offline.compiles_as_pinned); CI compiles with the pinned one."""
    import triton

    if not offline.compiles_as_pinned():
        pytest.skip(f"spills at these tiles are the pinned triton's ({offline.pinned_triton()}) to judge, "
                    f"not triton {triton.__version__}'s")  # fmt: skip


@pytest.mark.parametrize("capability", [90, 80], ids=["H100", "A100"])
def test_the_mma_dots_compile_with_fewer_instructions_and_four_threads_a_group(tmp_path, capability):
    """The stream decode kernel with the MMA dots at FUSED_STREAM_SCHEDULES's rows (Llama-3.2-1B's, the default's)
    and at Llama-3-8B's "pipe" rows, every epilogue: no spills, the MMAs in the loop, and what the PTX counts on,
    that the four threads of each group of lanes hold the same rows and words of one group of codes (the inline
    assembly's operands: lanes along the words first, four or more of them). On an H100, fewer loop instructions
    than the packed bf16 dots (offline, triton 3.7: 2.7-4.2 against 4.2-5.2 PTX instructions a code)."""
    from utils import offline

    if not offline.available():
        pytest.skip("needs Triton's NVIDIA backend and its ptxas")
    _at_the_edge_of_the_registers(offline)
    shapes = [("gate/up", 8192, 2048, dict(NORM=True, SWIGLU=True)), ("down", 2048, 8192, dict(RESIDUAL=True)),
              ("qkv + RoPE", 3072, 2048, dict(NORM=True, ROPE=True)), ("head", 128256, 2048, dict(NORM=True)),
              ("2560 x 2048 + residual", 2560, 2048, dict(RESIDUAL=True)),
              ("8B gate/up", 14336, 4096, dict(NORM=True, SWIGLU=True))]  # fmt: skip
    jobs, labels = [], []
    for label, N, K, flags in shapes:
        kind = L.fused_int4_kernel(N, K)
        table = L.FUSED_PIPE_SCHEDULES if kind == "pipe" else L.FUSED_STREAM_SCHEDULES
        s = table.get((N, K), table[None])
        for dots in (L.INT4_MMA_PTX, L.INT4_DOTS_PTX) if capability >= 90 else (L.INT4_MMA_PTX,):
            jobs.append(_int4_decode_job(offline, kind, N, K, s, capability=capability, DOTS=dots, **flags))
            labels.append((label, dots == L.INT4_MMA_PTX))
    compiled = offline.compile_kernels(_kernels_file(tmp_path), jobs)
    loops = {}
    for (label, mma), job, c in zip(labels, jobs, compiled):
        where = f"{job['kernel']} at {label} for sm_{capability}" + (", MMA" if mma else ", packed dots")
        assert c.spill_bytes == 0, f"{where} spills {c.spill_bytes} bytes"
        loops[label, mma] = c.loop_instructions
        if not mma:
            continue
        assert "mma.sync.aligned.m16n8k16" in c.ptx, f"{where}: no MMA"
        layout = _mma_operand_layout(c.ttgir)
        assert layout["order"][0] == 2, f"{where}: lanes run along {layout} first, not along the words"
        lanes = layout["threadsPerWarp"][2]
        assert lanes >= 4 and lanes & (lanes - 1) == 0, f"{where}: {lanes} lanes along the words, not 4 or more"
    if capability >= 90:
        for label, *_ in shapes:
            mma, packed = loops[label, True], loops[label, False]
            assert mma < 0.9 * packed, f"{label}: {mma} loop instructions with the MMA dots against {packed}"


def _behind_swiglu(dtype) -> dict:
    """Twice the dtype's tolerance, for an output behind SwiGLU made by dots that take x times the norm rounded to
    the dtype (the MMAs take bf16, as a bf16 model's linear takes its norm's output): SwiGLU multiplies the gate's
    error by up. Seen on an H100 (session 48): one output of 2501 at 1.12 times bf16's own tolerance."""
    t = utils.checking.default_tolerance(dtype)
    return dict(atol=2 * t.atol, rtol=2 * t.rtol, reason=f"{t.reason}; x times the norm rounded to {dtype} before "
                "the dots, its error multiplied by up behind SwiGLU: twice that")  # fmt: skip


@pytest.mark.skipif(not ENV.is_gpu, reason="the MMA dots are PTX: only a GPU runs them (the interpreter runs none)")
def test_the_mma_dots_match_the_reference_within_bf16s_own_tolerance(monkeypatch):
    """INT4_DOTS = "mma" on a GPU (bf16): the M = 1 GEMV (stream and pipe, split-K, N odd and under the block, K not
    a multiple of the group, a residual) and the fused decode kernel (norm, SwiGLU, a residual in place, RoPE with
    the cache write) against the fp64 spec within bf16's own tolerance, not the packed dots' widened one: the MMAs'
    products are exact and their sums fp32 (behind SwiGLU twice it: _behind_swiglu). Then the lesson's own checks,
    as a learner's GPU runs them."""
    if not (ENV.capability >= (8, 0) and ENV.dtype == torch.bfloat16):
        pytest.skip("the MMA dots take bf16 on sm_80 or later")
    monkeypatch.setattr(L, "INT4_DOTS", "mma")
    dt, G = torch.bfloat16, 128  # the MMAs take groups of a multiple of 128 codes: of GROUP_SIZES, 128
    gemvs = [(2501, 2100, _fs("stream", 1, 16, 1024, 1, 2, 2)), (37, 1000, _fs("pipe", 1, 8, 512, 2, 2, 3)),
             (5, 4096, _fs("pipe", 1, 16, 1024, 1, 4, 3)), (300, 640, _fs("stream", 1, 4, 256, 1, 1, 3))]  # fmt: skip
    for N, K, s in gemvs:
        assert L.int4_stream_dots(torch.zeros(1, K, dtype=dt, device=DEV), G, s.BLOCK_N, False)[1], "MMA not taken"
        x = torch.randn(1, K, device=DEV, dtype=dt)
        w = L.quantize_int4_ref(weight(N, K, dtype=torch.float32), G)
        r = torch.randn(1, N, device=DEV, dtype=dt)
        for res in (None, r):
            out = L.w4a16_fast(x, w, out=utils.nan_empty((1, N), dt), residual=res, schedule=s)
            want = L.wxa16_ref(x.double(), w) + (0 if res is None else res.double())
            utils.check(out, want, name=f"MMA dots, GEMV {N}x{K} G={G} {s}", quiet=True)
    for N, K, sched in ((2501, 2100, L8.GemvSchedule(8, 1024, 2, 2)), (13, 640, L8.GemvSchedule(16, 256, 2, 3))):
        W = weight(2 * N, K, seed=3, dtype=torch.float32)
        w, gate = L.quantize_int4_ref(W, G), L.quantize_int4_ref(W[:N].contiguous(), G)
        x, norm, res = (torch.randn(*shape, device=DEV, dtype=dt) for shape in ((1, K), (K,), (1, N)))
        for kind in ("stream", "pipe"):
            monkeypatch.setattr(L, "FUSED_INT4_KERNEL", kind)
            for kw, wt in (({"norm": norm}, gate), ({"norm": norm, "swiglu": True}, w), ({"residual": res}, gate)):
                call = dict(kw, residual=res.clone()) if "residual" in kw else kw
                got = L.quantized_decode_gemv(x, wt, eps=1e-5, out=call.get("residual"), schedule=sched, **call)
                kw64 = {k: v.double() if torch.is_tensor(v) else v for k, v in kw.items()}
                want = L.quantized_decode_gemv_ref(x.double(), wt, eps=1e-5, **kw64)
                utils.check(got, want, name=f"MMA dots, fused {kind} {sorted(kw)} {N}x{K} G={G} {sched}", quiet=True,
                            **(_behind_swiglu(dt) if "swiglu" in kw else {}))  # fmt: skip
            H, KV, D = 4, 1, 64  # RoPE: the qkv rows in pairs, the cache row written
            xq, Wq, cos, sin, pos, normq, (k0, v0) = _qkv_rope_case(H, KV, D, K, 8, 7, seed=G)
            wq = L.quantize_int4_ref(Wq, G)
            xq, normq, cos, sin, k, v = (t.to(dt) for t in (xq, normq, cos, sin, k0, v0))
            q = L.quantized_decode_qkv_rope(xq, wq, cos, sin, pos, k, v, norm=normq, schedule=sched)
            k_ref, v_ref = k0.to(dt).double(), v0.to(dt).double()
            W64 = L.dequantize(wq, torch.float64)
            q_ref = L8.decode_qkv_rope_ref(xq.double(), W64, cos.double(), sin.double(), pos, k_ref, v_ref,
                                           norm=normq.double(), eps=1e-5)  # fmt: skip
            utils.check(q, q_ref, name=f"MMA dots, RoPE q {kind} G={G}", quiet=True)
            utils.check(k, k_ref, name=f"MMA dots, RoPE k cache {kind} G={G}", quiet=True)
            utils.check(v, v_ref, name=f"MMA dots, RoPE v cache {kind} G={G}", quiet=True)
    L.check_quantized_decode_gemv(L.quantized_decode_gemv, quiet=True)
    L.check_quantized_decode_qkv_rope(L.quantized_decode_qkv_rope, quiet=True)
