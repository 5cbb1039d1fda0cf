"""Lesson 06's solution (flash attention in five steps): each step's kernel at awkward shapes through the lesson's
own check functions, planted mistakes that each check must name, and the launchers' refusals and empty inputs.

On the CPU (interpreter) everything is fp32 and tiny, head dims 16 and 32; on a GPU the dtype is bf16 and fp16, with
head dims 64 and 128, and a few tests exercise what only a GPU can hold (more than 2**31 elements, 65 536 heads).
"""

import math
import re

import pytest
import torch
import triton
import triton.language as tl

import utils
from lessons import l06_flash_attention as L
from utils import launch
from utils.mode import current

ENV = current()
DTYPES = ENV.pick(cpu=[torch.float32], gpu=[torch.bfloat16, torch.float16])  # the interpreter has no bfloat16
gpu_only = pytest.mark.skipif(not ENV.is_gpu, reason="needs a GPU (sizes far beyond what the interpreter runs)")

# (T, D) for one head
HEAD = ENV.pick(cpu=[(1, 16), (16, 16), (37, 16), (50, 32)], gpu=[(1, 64), (333, 128), (1000, 64), (2048, 128)])
# (B, T, H, KV, D): T = 1, T below one block, T not a multiple of BLOCK_M or BLOCK_N, exact multiples, KV = 1
ATTENTION = ENV.pick(
    cpu=[(1, 1, 2, 1, 16), (2, 37, 4, 2, 16), (1, 64, 4, 4, 32), (1, 48, 2, 1, 32), (3, 33, 6, 3, 16)],
    gpu=[
        (1, 1, 8, 2, 128),
        (2, 333, 8, 2, 128),
        (2, 300, 8, 2, 128),
        (1, 1024, 32, 4, 128),
        (1, 1000, 4, 4, 64),
        (1, 77, 4, 1, 64),
        (2, 256, 8, 8, 64),
        (1, 130, 4, 2, 128),
    ],
)
ONE_HEAD = ENV.pick(cpu=(37, 16), gpu=(333, 128))
GQA = ENV.pick(cpu=(2, 20, 4, 2, 16), gpu=(2, 200, 8, 2, 128))  # B = 2: a batch stride taken for another shows


# -- each step passes its own check ------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("T, D", HEAD)
@pytest.mark.parametrize("fn", [L.attention_head, L.attention_head_exp2], ids=["step1-exp", "step2-exp2"])
def test_one_head_steps(fn, T, D, dtype):
    L.check_attention_head(fn, shapes=[(T, D)], dtype=dtype, quiet=True)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("T, D", HEAD)
def test_step3_causal_ranges(T, D, dtype):
    L.check_attention_head(L.attention_head_causal, causal=(True, False), shapes=[(T, D)], dtype=dtype, quiet=True)


# step 4, step 5, and attention() (the same as one of them: step 5 with TMA, step 4 elsewhere) on a GPU
STEPS_4_5 = [L.attention_pointers, L.attention_tma, *([L.attention] if ENV.is_gpu else [])]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("B, T, H, KV, D", ATTENTION)
@pytest.mark.parametrize("fn", STEPS_4_5, ids=lambda f: f.__name__)
def test_attention_steps_4_and_5(fn, B, T, H, KV, D, dtype):
    L.check_attention(fn, shapes=[(B, T, H, KV, D)], dtype=dtype, quiet=True)


def test_attention_on_contiguous_inputs():
    """Separate contiguous q, k, v (the layout SDPA users have), not views into one buffer."""
    B, T, H, KV, D = ENV.pick(cpu=(2, 19, 4, 2, 16), gpu=(2, 301, 8, 2, 128))
    dtype = L.lesson_dtype()
    q = torch.randn(B, T, H, D, device=ENV.device, dtype=dtype)
    k, v = (torch.randn(B, T, KV, D, device=ENV.device, dtype=dtype) for _ in range(2))
    out = L.attention(q, k, v, causal=True, out=utils.nan_empty((B, T, H, D), dtype))
    utils.check(out, L.attention_ref(q.double(), k.double(), v.double()), quiet=True)


def test_attention_on_head_major_views():
    """(B, H, T, D) tensors passed as .transpose(1, 2), the layout of SDPA and Triton's tutorial test: a token's heads
    are T D apart. The pointer kernel (and attention(), which falls back to it) takes any head stride; the descriptor
    kernel, which reads a token's heads as one row, refuses them before any launch."""
    B, T, H, KV, D = ENV.pick(cpu=(2, 19, 4, 2, 16), gpu=(2, 301, 32, 8, 128))
    dtype = L.lesson_dtype()
    q = torch.randn(B, H, T, D, device=ENV.device, dtype=dtype).transpose(1, 2)  # (B, T, H, D), heads T D apart
    k, v = (torch.randn(B, KV, T, D, device=ENV.device, dtype=dtype).transpose(1, 2) for _ in range(2))
    for causal in (True, False):
        ref = L.attention_ref(q.double(), k.double(), v.double(), causal)
        for fn in (L.attention_pointers, L.attention):
            utils.check(fn(q, k, v, causal, out=utils.nan_empty((B, T, H, D), dtype)), ref, quiet=True)
    with pytest.raises(ValueError, match=r"(?s)k: tensor descriptors.*side by side.*k\.contiguous\(\)"):
        L.attention_tma(q.contiguous(), k, v.contiguous())


@pytest.mark.parametrize("D", [8, 24, 80, 96, 2])
def test_a_head_width_the_kernels_do_not_take_runs_padded(D):
    """Peers' head widths (Phi-2's 80, 96, a test config's 8 or 24): attention() copies q, k and v into heads of the
    next width the kernels take and leaves the padding's output columns out; grouped heads, q a head-major view, out
    pre-filled with NaN and written in place, causal and not."""
    B, T, H, KV = ENV.pick(cpu=(2, 37, 4, 2), gpu=(2, 333, 8, 2))
    dtype = L.lesson_dtype()
    q = torch.randn(B, H, T, D, device=ENV.device, dtype=dtype).transpose(1, 2)
    k, v = (torch.randn(B, T, KV, D, device=ENV.device, dtype=dtype) for _ in range(2))
    for causal in (True, False):
        out = utils.nan_empty((B, T, H, D), dtype)
        assert L.attention(q, k, v, causal, out=out) is out
        utils.check(out, L.attention_ref(q.double(), k.double(), v.double(), causal), quiet=True)


def test_scale_sets_the_scores_factor_and_keys_the_prepared_launch():
    """scale= as torch's SDPA: softmax(scale q k^T) v. A launch prepared with one scale is not replayed for another
    (the scale is part of the call's signature; the interpreter prepares no launch, so that part holds on a GPU): the
    default after a scaled call is 1/sqrt(D) again."""
    B, T, H, KV, D = ENV.pick(cpu=(1, 19, 2, 1, 16), gpu=(2, 301, 8, 2, 128))
    dtype = L.lesson_dtype()
    q = torch.randn(B, T, H, D, device=ENV.device, dtype=dtype)
    k, v = (torch.randn(B, T, KV, D, device=ENV.device, dtype=dtype) for _ in range(2))
    q64, k64, v64 = q.double(), k.double(), v.double()
    for fn in (L.attention_pointers, L.attention):
        for _ in range(2):  # the second call of each takes the prepared launch
            utils.check(fn(q, k, v, scale=0.05), L.attention_ref(q64 * 0.05 * math.sqrt(D), k64, v64), quiet=True)
            utils.check(fn(q, k, v), L.attention_ref(q64, k64, v64), quiet=True)
    with pytest.raises(ValueError, match="scale must be finite, got nan"):
        L.attention(q, k, v, scale=float("nan"))


def test_a_scale_not_above_0_is_refused_by_the_descriptor_kernel_and_right_elsewhere():
    """The descriptor kernel takes a row's max of q k^T before scaling it (one multiply-add a score), the max of the
    scaled scores only for a scale > 0: at 0 or below it gave NaN in every row (-inf times 0 or less where the mask
    is), so attention_tma refuses it and attention() takes the pointer kernel, right at any finite scale."""
    B, T, H, KV, D = ENV.pick(cpu=(1, 19, 2, 1, 16), gpu=(2, 301, 8, 2, 128))
    dtype = L.lesson_dtype()
    q = torch.randn(B, T, H, D, device=ENV.device, dtype=dtype)
    k, v = (torch.randn(B, T, KV, D, device=ENV.device, dtype=dtype) for _ in range(2))
    q64, k64, v64 = q.double(), k.double(), v.double()
    for scale in (0.0, -0.25):
        for causal in (True, False):
            with pytest.raises(ValueError, match=rf"scale={scale}: .* use attention_pointers"):
                L.attention_tma(q, k, v, causal, scale=scale)
            want = L.attention_ref(q64 * scale * math.sqrt(D), k64, v64, causal)
            utils.check(L.attention(q, k, v, causal, scale=scale), want, quiet=True)


def test_heads_wider_than_the_kernels_take_are_refused():
    dtype = L.lesson_dtype()
    q = torch.randn(1, 3, 2, 160, device=ENV.device, dtype=dtype)
    with pytest.raises(ValueError, match=r"head_dim D=160: these kernels take heads of 1 to 128"):
        L.attention(q, q, q)
    with pytest.raises(ValueError, match=r"q, k and v must share one head_dim; got 24, 24, 16"):
        L.attention(q[..., :24], q[..., :24], q[..., :16])
    with pytest.raises(
        ValueError, match=r"k and v must both be \(B, T, KV, D\) = \(1, 3, KV, 24\); got \(1, 2, 2, 24\)"
    ):
        L.attention(q[..., :24], q[:, :2, :, :24], q[:, :2, :, :24])  # in the caller's D, not the padded one
    with pytest.raises(ValueError, match=r"q has head_dim D=24: these kernels take D in .* \(attention\(\) pads"):
        L.attention_pointers(q[..., :24], q[..., :24], q[..., :24])


@pytest.mark.parametrize("BLOCK_M, BLOCK_N", [(16, 16), (32, 16), (64, 32)])
def test_pointer_kernel_with_other_tiles(BLOCK_M, BLOCK_N):
    fn = lambda q, k, v, causal, out: L.attention_pointers(q, k, v, causal, out=out, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N)  # noqa: E731
    L.check_attention(fn, shapes=[ENV.pick(cpu=(1, 45, 4, 2, 16), gpu=(2, 333, 8, 2, 64))], quiet=True)


def test_attention_ref_matches_torch_sdpa():
    B, T, H, KV, D = 2, 19, 4, 2, 16
    q = torch.randn(B, T, H, D, dtype=torch.float64)
    k, v = torch.randn(B, T, KV, D, dtype=torch.float64), torch.randn(B, T, KV, D, dtype=torch.float64)
    for causal in (True, False):
        want = torch.nn.functional.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal, enable_gqa=True
        )
        torch.testing.assert_close(L.attention_ref(q, k, v, causal), want.transpose(1, 2), rtol=1e-12, atol=1e-12)


def test_costs():
    assert L.attention_flops(1, 32, 2048, 128, causal=False) == 4 * 32 * 2048**2 * 128
    assert L.attention_flops(1, 32, 2048, 128) == 2 * 32 * 2048**2 * 128
    assert L.attention_bytes(1, 32, 2048, 128, KV=4) == 2 * 2048 * 128 * (2 * 32 + 2 * 4)
    assert L.attention_bytes(2, 8, 10, 16) == L.attention_bytes(2, 8, 10, 16, KV=8)


def test_config_fits_the_shared_memory_of_older_gpus(monkeypatch):
    """attention_config shrinks stages, then tiles, to the per-program shared memory of the GPU it runs on."""
    for smem, cap in ((64 * 1024, (7, 5)), (163 * 1024, (8, 0)), (227 * 1024, (9, 0))):
        env = utils.Env(device="cuda", interpret=False, capability=cap, shared_memory_bytes=smem)
        monkeypatch.setattr(utils.mode, "current", lambda env=env: env)
        for D in (64, 128):
            for causal in (True, False):
                BM, BN, warps, stages = L.attention_config(D, causal, itemsize=2)
                assert (BM * D + stages * 2 * BN * D) * 2 <= smem, (smem, D, causal)
                assert BM >= BN >= 16 and stages >= 1 and warps >= 4


def test_attention_takes_the_descriptor_kernel_only_where_it_can_and_should(monkeypatch):
    """attention() uses the descriptor kernel where the GPU has TMA, the problem has TMA_MIN_FLOPS and descriptors
    can describe q, k and v (16-byte aligned starts and row strides), the pointer kernel everywhere else: a view off
    its 16-byte boundary, or a scale <= 0, must not reach attention_tma, which refuses it."""
    called = []
    monkeypatch.setattr(L, "attention_pointers", lambda *a, **k: called.append("pointers"))
    monkeypatch.setattr(L, "attention_tma", lambda *a, **k: called.append("tma"))
    monkeypatch.setattr(L, "TMA_MIN_FLOPS", 5e10)
    buffer = torch.empty(1 * 4096 * 32 * 64 + 1)
    off = buffer[1:].view(1, 4096, 32, 64)  # 4 bytes past a 16-byte boundary
    cases = [((9, 0), 4096, "tma"), ((9, 0), 333, "pointers"), ((8, 0), 4096, "pointers"), ((7, 5), 4096, "pointers"),
             ((9, 0), "off", "pointers"), ((9, 0), 4096, "tma", 0.5), ((9, 0), 4096, "pointers", 0.0),
             ((9, 0), 4096, "pointers", -0.125)]  # fmt: skip
    for capability, T, want, *scale in cases:
        env = utils.Env(device="cuda", interpret=False, capability=capability, shared_memory_bytes=227 * 1024)
        monkeypatch.setattr(utils.mode, "current", lambda env=env: env)
        q = off if T == "off" else torch.empty(1, T, 32, 64)  # only shapes and addresses are read here
        called.clear()
        L.attention(q, q, q, scale=scale[0] if scale else None)
        assert called == [want], f"sm_{capability[0]}{capability[1]}, T={T}, {scale=}: expected the {want} kernel"


# -- planted mistakes: each check must fail, with the specific hint ------------------------------------------


def _one_head_launch(kernel, scale, **constexprs):
    """A wrong launcher: the lesson's kernel launched with the given scale (the mistake is in the scale)."""

    def launch(q, k, v, causal=None, out=None):
        T, D = q.shape
        kernel[(triton.cdiv(T, 16),)](
            q, k, v, out, T, q.stride(0), k.stride(0), v.stride(0), out.stride(0), scale(D),
            HEAD_DIM=D, BLOCK_M=16, BLOCK_N=16, **constexprs,
        )  # fmt: skip
        return out

    return launch


@pytest.mark.parametrize(
    "wrong, hint",
    [
        (_one_head_launch(L.attention_head_kernel, lambda D: 1.0), "are not scaled"),
        (_one_head_launch(L.attention_head_exp2_kernel, lambda D: 1 / math.sqrt(D)), "scale of 1/sqrt(D) alone"),
        (_one_head_launch(L.attention_head_kernel, lambda D: L.LOG2E / math.sqrt(D)), "tl.exp with LOG2E"),
    ],
    ids=["no-scale", "exp2-without-log2e", "exp-with-log2e"],
)
def test_one_head_check_names_the_scale_mistakes(wrong, hint):
    with pytest.raises(AssertionError, match=hint.replace("(", r"\(").replace(")", r"\)")):
        L.check_attention_head(wrong, shapes=[ONE_HEAD], quiet=True)


@triton.jit
def _causal_shifted_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr, T, stride_qt, stride_kt, stride_vt, stride_ot, qk_scale,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SHIFT: tl.constexpr,
):  # fmt: skip
    """A learner's causal kernel that masks every block, with the mask off by SHIFT (-1: `<`, 1: `<= i + 1`)."""
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + offs_m[:, None] * stride_qt + offs_d[None, :], mask=offs_m[:, None] < T, other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    for n in range(0, T, BLOCK_N):
        offs_n = n + tl.arange(0, BLOCK_N)
        k = tl.load(k_ptr + offs_n[:, None] * stride_kt + offs_d[None, :], mask=offs_n[:, None] < T, other=0.0)
        v = tl.load(v_ptr + offs_n[:, None] * stride_vt + offs_d[None, :], mask=offs_n[:, None] < T, other=0.0)
        s = tl.dot(q, tl.trans(k)) * qk_scale
        keep = (offs_n[None, :] < T) & (offs_n[None, :] <= offs_m[:, None] + SHIFT)
        s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        m_i = m_new
    o_ptrs = o_ptr + offs_m[:, None] * stride_ot + offs_d[None, :]
    tl.store(o_ptrs, (acc / l_i[:, None]).to(o_ptr.dtype.element_ty), mask=offs_m[:, None] < T)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the interpreter's -inf - -inf in the row that sees nothing
@pytest.mark.parametrize("shift, hint", [(-1, "not < i"), (1, "sees key i \\+ 1")], ids=["strict", "one-ahead"])
def test_causal_check_names_a_mask_off_by_one(shift, hint):
    wrong = _one_head_launch(_causal_shifted_kernel, lambda D: L.LOG2E / math.sqrt(D), SHIFT=shift)

    def launch(q, k, v, causal=True, out=None):
        return wrong(q, k, v, out=out) if causal else L.attention_head_causal(q, k, v, False, out=out)

    with pytest.raises(AssertionError, match=f"off by one.*{hint}"):
        L.check_attention_head(launch, causal=(True,), shapes=[ONE_HEAD], quiet=True)


@triton.jit
def _one_head_mistake_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr, T, stride_qt, stride_kt, stride_vt, stride_ot, sm_scale,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, IS_CAUSAL: tl.constexpr,
    MISTAKE: tl.constexpr,
):  # fmt: skip
    """A learner's one-head kernel (every key block visited, masked when IS_CAUSAL) with one MISTAKE: "no key mask"
    (keys past T, loaded as zeros, are scored) or "acc not rescaled" (acc = tl.dot(p, v, acc))."""
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + offs_m[:, None] * stride_qt + offs_d[None, :], mask=offs_m[:, None] < T, other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    for n in range(0, T, BLOCK_N):
        offs_n = n + tl.arange(0, BLOCK_N)
        k = tl.load(k_ptr + offs_n[:, None] * stride_kt + offs_d[None, :], mask=offs_n[:, None] < T, other=0.0)
        v = tl.load(v_ptr + offs_n[:, None] * stride_vt + offs_d[None, :], mask=offs_n[:, None] < T, other=0.0)
        s = tl.dot(q, tl.trans(k)) * sm_scale
        if MISTAKE != "no key mask":
            s = tl.where(offs_n[None, :] < T, s, float("-inf"))
        if IS_CAUSAL:
            s = tl.where(offs_n[None, :] <= offs_m[:, None], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        if MISTAKE == "acc not rescaled":
            acc = tl.dot(p.to(v.dtype), v, acc)
        else:
            acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        m_i = m_new
    o_ptrs = o_ptr + offs_m[:, None] * stride_ot + offs_d[None, :]
    tl.store(o_ptrs, (acc / l_i[:, None]).to(o_ptr.dtype.element_ty), mask=offs_m[:, None] < T)


def _one_head_mistake(mistake):
    """A one-head launcher (q, k, v, causal=False, out) whose kernel makes `mistake`."""

    def launch(q, k, v, causal=False, out=None):
        scale = lambda D: 1 / math.sqrt(D)  # noqa: E731
        return _one_head_launch(_one_head_mistake_kernel, scale, IS_CAUSAL=causal, MISTAKE=mistake)(q, k, v, out=out)

    return launch


def _per_head(one_head):
    """An attention launcher (B, T, H, D) that runs a one-head launcher on every (sequence, head)."""

    def launch(q, k, v, causal=True, out=None):
        group = q.shape[2] // k.shape[2]
        for b in range(q.shape[0]):
            for h in range(q.shape[2]):
                one_head(q[b, :, h], k[b, :, h // group], v[b, :, h // group], causal, out=out[b, :, h])
        return out

    return launch


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the interpreter's exp(-inf - -inf) before the first key
@pytest.mark.parametrize(
    "mistake, hint",
    [
        ("no key mask", r"keys past T are not masked"),
        ("acc not rescaled", r"accumulator is not rescaled.*acc \* alpha"),
    ],
)
def test_checks_name_the_online_softmax_mistakes(mistake, hint):
    """check_attention_head at T = 1 (the mask mistake once looked like a missing scale) and T over several key
    blocks, and check_attention (which shares attention_suspects) causal and not. Both start at T = 1: at the GPU's
    T = 200, the 8 zero keys of the last 16-key block move the output by less than bf16's tolerance (session 26's
    H100 run); the default shapes of check_attention begin at T = 1 for the same reason."""
    launch = _one_head_mistake(mistake)
    with pytest.raises(AssertionError, match=hint):
        L.check_attention_head(launch, shapes=[(1, ONE_HEAD[1]), ONE_HEAD], quiet=True)
    with pytest.raises(AssertionError, match=hint):
        L.check_attention(_per_head(launch), causal=(False,), shapes=[(1, 1, *GQA[2:]), GQA], quiet=True)
    if mistake == "acc not rescaled":
        with pytest.raises(AssertionError, match=hint):
            L.check_attention(_per_head(launch), causal=(True,), shapes=[GQA], quiet=True)


def _stride_mixed_up(tensor, other):
    """A one-head launcher that passes `other`'s row stride where `tensor`'s belongs."""

    def launch(q, k, v, out=None):
        strides = {"q": q.stride(0), "k": k.stride(0), "v": v.stride(0)}
        strides[tensor] = strides[other]  # the mistake
        T, D = q.shape
        L.attention_head_kernel[(triton.cdiv(T, 16),)](
            q, k, v, out, T, strides["q"], strides["k"], strides["v"], out.stride(0), 1 / math.sqrt(D),
            HEAD_DIM=D, BLOCK_M=16, BLOCK_N=16,
        )  # fmt: skip
        return out

    return launch


@pytest.mark.parametrize("tensor, other", [("v", "k"), ("q", "k"), ("q", "v")])
def test_one_head_check_names_a_stride_read_for_another_tensor(tensor, other):
    """q, k and v lie their own distances apart in the check (random numbers between rows): a load that takes
    another's stride and stays inside its tensor's storage is named."""
    hint = f"{tensor} is read with {other}'s row stride \\(stride_{other}t where stride_{tensor}t belongs\\)"
    with pytest.raises(AssertionError, match=hint):
        L.check_attention_head(_stride_mixed_up(tensor, other), shapes=[ONE_HEAD], quiet=True)


@pytest.mark.skipif(not ENV.interpret, reason="reads past k's storage: only safe where the interpreter watches them")
def test_one_head_check_names_no_stride_for_a_read_past_the_storage():
    """k read with v's (larger) stride runs past k's storage: no suspect can say what it reads, and none is claimed;
    the memory watch tells where it strayed."""
    with pytest.raises(AssertionError, match=r"reads .* past the end of `k_ptr`") as failure:
        L.check_attention_head(_stride_mixed_up("k", "v"), shapes=[ONE_HEAD], quiet=True)
    assert "row stride (stride_" not in str(failure.value)


def test_attention_check_names_a_missing_mask():
    def not_causal(q, k, v, causal=True, out=None):
        return L.attention(q, k, v, False, out=out)

    with pytest.raises(AssertionError, match="not causal"):
        L.check_attention(not_causal, causal=(True,), shapes=[GQA], quiet=True)


def test_attention_check_names_the_wrong_gqa_mapping_and_the_heads():
    def head_modulo(q, k, v, causal=True, out=None):  # query head h reads kv head h % KV instead of h // GROUP
        H, KV = q.shape[2], k.shape[2]
        idx = torch.arange(H, device=q.device) % KV
        return L.attention(q, k[:, :, idx], v[:, :, idx], causal, out=out)

    with pytest.raises(AssertionError, match=r"(?s)wrong at heads 1, 2 \(2 of 4\).*h // GROUP.*not h % KV"):
        L.check_attention(head_modulo, shapes=[(GQA[0], GQA[1], 4, 2, GQA[4])], quiet=True)


def test_a_stub_kernel_fails_the_check():
    """What a participant's untouched skeleton gives: nothing written."""

    def stub(q, k, v, causal=True, out=None):
        return out

    with pytest.raises(AssertionError, match="never written"):
        L.check_attention(stub, shapes=[GQA], quiet=True)


# -- launchers refuse bad inputs before any launch, and take empty ones ------------------------------------------


def test_launchers_refuse_bad_inputs():
    dtype = L.lesson_dtype()
    q, k, v = L.random_qkv(1, 8, 4, 2, 16, dtype)
    q1, k1, v1 = (t[0, :, 0] for t in (q, k, v))
    other = torch.float16 if dtype == torch.float32 else torch.float32
    utils.refuses(
        {
            "4 heads over 3": lambda: L.attention(*L.random_qkv(1, 8, 4, 3, 16, dtype)),
            "head dim 24, pointer kernel": lambda: L.attention_pointers(*L.random_qkv(1, 8, 4, 2, 24, dtype)),
            "head dim 160": lambda: L.attention(*L.random_qkv(1, 8, 4, 2, 160, dtype)),
            "transposed q": lambda: L.attention(q.transpose(1, 3), k, v),
            "expanded batch": lambda: L.attention(q.expand(2, 8, 4, 16), k.expand(2, 8, 2, 16), v.expand(2, 8, 2, 16)),
            "mixed dtypes": lambda: L.attention(q, k.to(other), v),
            "k of another length": lambda: L.attention(q, k[:, :5], v[:, :5]),
            "3-D q": lambda: L.attention(q[0], k, v),
            "causal as a string": lambda: L.attention(q, k, v, "yes"),
            "out too small": lambda: L.attention(q, k, v, out=torch.empty(1, 7, 4, 16, device=ENV.device, dtype=dtype)),
            "out of the wrong dtype": lambda: L.attention(
                q, k, v, out=torch.empty(1, 8, 4, 16, device=ENV.device, dtype=other)
            ),
            "out aliasing q": lambda: L.attention(q, k, v, out=q),
            "numpy out": lambda: L.attention(q, k, v, out=q.detach().cpu().numpy()),
            "BLOCK_M not a power of two": lambda: L.attention_pointers(q, k, v, BLOCK_M=48),
            "BLOCK_N below 16": lambda: L.attention_pointers(q, k, v, BLOCK_N=8),
            "causal BLOCK_M < BLOCK_N": lambda: L.attention_pointers(q, k, v, True, BLOCK_M=16, BLOCK_N=32),
            "BLOCK_M x HEAD_DIM past a block": lambda: L.attention_pointers(q, k, v, BLOCK_M=2**17),  # Triton's error
            "one head, BLOCK_N x HEAD_DIM past a block": lambda: L.attention_head(q1, k1, v1, BLOCK_N=2**17),
            "one head, 3-D": lambda: L.attention_head(q, k, v),
            "one head, out too small": lambda: L.attention_head(
                q1, k1, v1, out=torch.empty(3, 16, device=ENV.device, dtype=dtype)
            ),
            "one head, BLOCK_M = 12": lambda: L.attention_head_exp2(q1, k1, v1, BLOCK_M=12),
            "one head, causal=1": lambda: L.attention_head_causal(q1, k1, v1, 1),
        },
        quiet=True,
    )
    if ENV.interpret:
        with pytest.raises(TypeError, match="bfloat16"):
            L.attention(*L.random_qkv(1, 8, 4, 2, 16, torch.bfloat16))
    if ENV.is_gpu:
        with pytest.raises(ValueError, match="cpu"):
            L.attention(q.cpu(), k.cpu(), v.cpu())
    flat = torch.randn(1 + 8 * 4 * 16, device=ENV.device, dtype=dtype)
    with pytest.raises(ValueError, match="16-byte"):  # a view starting one element into a buffer
        L.attention_tma(flat[1:].view(1, 8, 4, 16), k, v)


def test_empty_inputs_give_empty_results():
    dtype = L.lesson_dtype()
    for B, T in ((1, 0), (0, 5)):
        q, k, v = L.random_qkv(B, T, 4, 2, 16, dtype)
        for fn in (L.attention, L.attention_pointers, L.attention_tma):
            assert fn(q, k, v).shape == (B, T, 4, 16)
    q1 = torch.empty(0, 16, device=ENV.device, dtype=dtype)
    for fn in (L.attention_head, L.attention_head_exp2, L.attention_head_causal):
        assert fn(q1, q1, q1).shape == (0, 16)


@gpu_only
def test_more_than_65535_heads_fold_into_grid_axis_0():
    B, T, H, KV, D = 2048, 16, 32, 32, 64  # B H = 65 536 (sequence, head) pairs
    L.check_attention(L.attention, causal=(True,), shapes=[(B, T, H, KV, D)], quiet=True)


@gpu_only
def test_offsets_past_2_31_elements():
    """A qkv buffer of more than 2**31 elements: the last sequences are right (int64 offsets)."""
    B, T, H, KV, D = 16_400, 32, 32, 4, 128  # 2.7e9 elements
    q, k, v = L.random_qkv(B, T, H, KV, D, torch.bfloat16)
    out = L.attention(q, k, v)
    tail = slice(B - 2, B)
    ref = L.attention_ref(q[tail].double(), k[tail].double(), v[tail].double())
    utils.check(out[tail], ref.to(torch.float32), quiet=True)


def test_causal_tiles_follow_the_kernels_ranges():
    """The picture's tiles are the kernels' ranges: full blocks before the query block, masked ones on the diagonal."""
    from utils.pictures.attention import FULL, MASKED, SKIPPED, causal_blocks_picture, causal_tiles

    tiles = causal_tiles(600, 128, 64)
    assert tiles.shape == (5, 10)
    for i in range(5):
        assert (tiles[i, : 2 * i] == FULL).all() and (tiles[i, 2 * i + 2 :] == SKIPPED).all()
        assert (tiles[i, 2 * i : 2 * i + 2] == MASKED).sum() == 2  # the last: 600 - 512 = 88 keys, 2 blocks
    not_causal = causal_tiles(600, 128, 64, causal=False)
    assert (not_causal[:, :9] == FULL).all() and (not_causal[:, 9] == MASKED).all()
    assert causal_blocks_picture(100, 32, 16) is not None
    with pytest.raises(ValueError, match="BLOCK_M"):
        causal_tiles(100, 0, 16)


def test_profiler_kinds():
    from utils.profiling import kernel_kind

    assert kernel_kind("attention_kernel_0d1d2d") == "attention"
    assert kernel_kind("cudnn_generated_fort_native_sdpa_sm90") == "attention"
    assert kernel_kind("nvjet_tst_128x256_64x4_2x1_v_bz_TNT") == "matmuls (cuBLAS)"
    assert kernel_kind("rmsnorm_kernel") == "everything else"


@pytest.mark.skipif(not ENV.supports_tma, reason="the descriptor kernel's prepared launch: a GPU with TMA")
def test_a_repeated_attention_tma_call_builds_its_descriptors_around_the_new_tensors(monkeypatch):
    """attention_tma keeps each signature's launch (TMA_PREPARED); the second call with one signature and other
    values must skip the checks and attend over the new q, k, v (a descriptor kept from the first call would read
    the first ones), still refuse an out that overlaps an input, and take views of one qkv buffer as the layer
    makes them."""
    monkeypatch.setattr(L, "TMA_PREPARED", launch.Table())
    B, T, H, KV, D = 2, 333, 8, 2, 64
    q, k, v = L.random_qkv(B, T, H, KV, D, torch.bfloat16)
    L.attention_tma(q, k, v)
    assert len(L.TMA_PREPARED) == 1
    q2, k2, v2 = (launch.same_kind(t).copy_(torch.randn(t.shape)) for t in (q, k, v))  # q's strides, new values

    def checked_again(*args, **kwargs):
        raise AssertionError("a repeated call went through _attention_inputs: the prepared launch was not used")

    with monkeypatch.context() as m:
        m.setattr(L, "_attention_inputs", checked_again)
        again = L.attention_tma(q2, k2, v2)
    ref = L.attention_ref(q2.float(), k2.float(), v2.float())
    torch.testing.assert_close(again.float(), ref, atol=2e-2, rtol=2e-2)
    qc, kc, vc = (t.contiguous() for t in (q, k, v))  # an out must be contiguous: q too, to share its signature
    L.attention_tma(qc, kc, vc, out=torch.empty_like(qc))  # prepared with an out of qc's signature
    with pytest.raises(ValueError, match="overlap|share"):
        L.attention_tma(qc, kc, vc, out=qc)  # a would-be hit of that launch


def test_a_repeated_attention_pointers_call_launches_the_prepared_kernel(monkeypatch):
    """attention_pointers keeps each call signature's launch (utils.launch): on a GPU the second call with one
    signature skips the checks, gives bit for bit the first call's result, and still refuses an out that
    overlaps an input; under the interpreter nothing is prepared."""
    monkeypatch.setattr(L, "PREPARED", launch.Table())
    B, T, H, KV, D = ENV.pick(cpu=(1, 19, 4, 2, 16), gpu=(2, 333, 8, 2, 64))
    q, k, v = L.random_qkv(B, T, H, KV, D, L.lesson_dtype())
    first = L.attention_pointers(q, k, v)
    with pytest.raises(ValueError):
        L.attention_pointers(q, k, v, out=q)
    if ENV.interpret:
        assert len(L.PREPARED) == 0, "under the interpreter there is no compiled kernel to prepare"
        return
    assert len(L.PREPARED) == 1

    def checked_again(*args, **kwargs):
        raise AssertionError("a repeated call went through _attention_inputs: the prepared launch was not used")

    with monkeypatch.context() as m:
        m.setattr(L, "_attention_inputs", checked_again)
        again = L.attention_pointers(*(launch.same_kind(t) for t in (q, k, v)))
    assert torch.equal(first, again), "the prepared launch must run the very kernel the first call ran"
    ref = L.attention_ref(q.float(), k.float(), v.float())
    torch.testing.assert_close(again.float(), ref, atol=2e-2, rtol=2e-2)
    qc, kc, vc = (t.contiguous() for t in (q, k, v))  # an out must be contiguous: q too, to share its signature
    out = torch.empty_like(qc)
    L.attention_pointers(qc, kc, vc, out=out)
    assert len(L.PREPARED) == 2 and torch.equal(out, first)
    with pytest.raises(ValueError, match="overlap|share"):
        L.attention_pointers(qc, kc, vc, out=qc)  # out=qc has the signature just prepared: a would-be hit
    monkeypatch.setattr(L, "attention_pointers_kernel", triton.jit(L.attention_pointers_kernel.fn))  # cell run again
    L.attention_pointers(q, k, v)
    assert len(L.PREPARED) == 3, "a kernel defined again must get its own launch, not the old kernel's"


# -- a second battery of learner mistakes (session 27c), planted with utils.mutants.plant ---------------------------

SECOND_BATTERY = {
    # mistake: (kernel, (old, new), which check, words of the hint it must get)
    "l_i not rescaled": ("attention_head_kernel", ("l_i = l_i * alpha + tl.sum(p, 1)", "l_i = l_i + tl.sum(p, 1)"),
                         "head", "running sum l_i is not rescaled"),
    "acc not divided by l_i": ("attention_head_kernel", ("o = acc / l_i[:, None]", "o = acc"), "head",
                               "not divided by the softmax's sum"),
    "scale applied twice": ("attention_head_kernel", ("* sm_scale", "* sm_scale * sm_scale"), "head",
                            "scale is applied twice (tl.exp)"),
    "scale applied twice, exp2": ("attention_head_exp2_kernel", ("* qk_scale", "* qk_scale * qk_scale"), "exp2",
                                  "scale is applied twice (tl.exp2)"),
    "v read with k's batch and head strides": (
        "attention_pointers_kernel",
        ("v_ptr += b * stride_vb + kv_h * stride_vh", "v_ptr += b * stride_kb + kv_h * stride_kh"),
        "gqa", "Only dim 0 index 1",
    ),
    "q read with k's batch and head strides": (  # session 29: "the tail block is not masked" before
        "attention_pointers_kernel",
        ("q_ptr += b * stride_qb + h * stride_qh", "q_ptr += b * stride_kb + h * stride_kh"),
        "gqa", "a stride of another tensor",
    ),
    "k read with q's batch and head strides": (
        "attention_pointers_kernel",
        ("k_ptr += b * stride_kb + kv_h * stride_kh", "k_ptr += b * stride_qb + kv_h * stride_qh"),
        "gqa", "",  # interp.: a read past k's storage; compiled: wrong values (before: the check passed it)
    ),
}  # fmt: skip
SECOND_CHECKS = {
    "head": lambda: L.check_attention_head(L.attention_head, quiet=True),
    "exp2": lambda: L.check_attention_head(L.attention_head_exp2, quiet=True),
    "gqa": lambda: L.check_attention(L.attention_pointers, shapes=[GQA], quiet=True),
}


@pytest.mark.parametrize("mistake", list(SECOND_BATTERY))
def test_second_battery_of_mistakes_gets_named(mistake, monkeypatch, tmp_path):
    """Each fails its check with the hint that names it (before these suspects, the first four got "Wrong values in
    many places" or a hint about row offsets; the last two passed: check_attention gave q, k and v one buffer's
    strides, so a load through another tensor's strides read the right numbers)."""
    from utils.mutants import plant

    name, edit, check, words = SECOND_BATTERY[mistake]
    plant(monkeypatch, tmp_path, L, name, edit)
    with pytest.raises(AssertionError, match=re.escape(words) if words else None):
        SECOND_CHECKS[check]()


@pytest.mark.skipif(ENV.is_gpu, reason="on a GPU the battery above runs in bf16 at this shape itself")
@pytest.mark.parametrize(
    "mistake", ["v read with k's batch and head strides", "q read with k's batch and head strides"]
)
def test_stride_mistakes_are_named_with_bf16_outputs_at_the_gpus_shape(mistake, monkeypatch, tmp_path):
    """On an H100 (bf16, B=2, T=200, H=8, KV=2, D=128) 3.9 % of batch 1 (v) and 5.4 % from position 1 on (q) lay
    within bf16's tolerance by chance, and both got "Wrong values in many places". The interpreter has no bf16: the
    kernel runs in fp32 on fp32 copies of the bf16 buffers (every stride kept), and its output, rounded to bf16, is
    what the check sees, as it saw it there."""
    from utils.mutants import plant

    name, edit, _, words = SECOND_BATTERY[mistake]
    plant(monkeypatch, tmp_path, L, name, edit)

    def in_fp32(t):
        base = t if t._base is None else t._base
        return base.float().as_strided(t.size(), t.stride(), t.storage_offset())

    def rounded_to_bf16(q, k, v, causal, out):
        return out.copy_(L.attention_pointers(in_fp32(q), in_fp32(k), in_fp32(v), causal=causal))

    with pytest.raises(AssertionError, match=re.escape(words)):
        L.check_attention(rounded_to_bf16, shapes=[(2, 200, 8, 2, 128)], dtype=torch.bfloat16, causal=(True,),
                          quiet=True)  # fmt: skip


# -- the running max started at 0 (session 28b): wrong only in rows whose every score is far below 0 ----------------

_M_I = 'm_i = tl.full([BLOCK_M], float("-inf"), tl.float32)'
M_I_AT_0 = {  # kernel: its check (the default inputs: they include two query rows of scores below -104)
    "attention_head_kernel": lambda: L.check_attention_head(L.attention_head, quiet=True),
    "attention_head_exp2_kernel": lambda: L.check_attention_head(L.attention_head_exp2, quiet=True),
    "attention_causal_kernel": lambda: L.check_attention_head(L.attention_head_causal, causal=(True, False),
                                                              quiet=True),
    "attention_pointers_kernel": lambda: L.check_attention(L.attention_pointers, quiet=True),
}  # fmt: skip


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the interpreter's 0 / 0 in those rows
@pytest.mark.parametrize("kernel", list(M_I_AT_0))
def test_a_running_max_started_at_0_gets_named(kernel, monkeypatch, tmp_path):
    """m_i = 0 for -inf is right wherever a row's max score is above about -87; the checks' default inputs have two
    query rows opposite a direction that every key shares (_far_below), where exp(s - 0) underflows for every key,
    l_i stays 0 and the output is NaN (before, every check passed this kernel)."""
    from utils.mutants import plant

    plant(monkeypatch, tmp_path, L, kernel, (_M_I, "m_i = tl.zeros([BLOCK_M], tl.float32)"))
    with pytest.raises(AssertionError, match=re.escape("the running max m_i starts at 0, not -inf")):
        M_I_AT_0[kernel]()


# -- every output NaN (session 28h1): at T = 1 the strict causal mask's suspect is NaN everywhere too ---------------

ALL_NAN = {  # a mistake in _attention_range that makes every output NaN: no suspect may claim it
    "alpha = exp2(m_new - m_i)": ("alpha = tl.exp2(m_i - m_new)", "alpha = tl.exp2(m_new - m_i)"),
    "p with the old max": ("p = tl.exp2(s - m_new[:, None])", "p = tl.exp2(s - m_i[:, None])"),
}


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("mistake", list(ALL_NAN))
def test_an_all_nan_output_is_not_blamed_on_the_causal_mask(mistake, monkeypatch, tmp_path):
    """Both mistakes make every output NaN; at the check's T = 1 the strict causal mask (query 0 sees no key) is
    NaN everywhere as well, and was named (before: "the causal mask is off by one ... not < i")."""
    from utils.mutants import plant

    plant(monkeypatch, tmp_path, L, "_attention_range", ALL_NAN[mistake])
    with pytest.raises(AssertionError, match="NaN") as failure:
        L.check_attention_head(L.attention_head_causal, causal=(True, False), quiet=True)
    assert "off by one" not in str(failure.value)
    # (session 37) NaN in every case: the hint names the exponentials that meet +inf (before: "guard such rows")
    assert "and so has every other case of the check" in str(failure.value)
    assert "Most likely alpha = tl.exp(m_new - m_i)" in str(failure.value)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_a_strict_causal_mask_is_named_though_the_first_case_is_all_nan(monkeypatch, tmp_path):
    """With the checks' own cases, the first at T = 1: there `<` for `<=` makes every output NaN (query 0 sees no
    key), as many mistakes do, so the check goes on to a case that tells which and names the mask (before: the
    generic hint to guard rows whose every score is masked, which would not fix it)."""
    from utils.mutants import plant

    plant(monkeypatch, tmp_path, L, "_attention_range", ("<= offs_m[:, None])", "< offs_m[:, None])"))
    for check, fn in ((L.check_attention_head, L.attention_head_causal), (L.check_attention, L.attention_pointers)):
        with pytest.raises(AssertionError, match=r"(?s)T=1.*every output NaN.*off by one.*not < i"):
            check(fn, causal=(True,), quiet=True)


def test_k_and_v_swapped_are_named():
    """A kernel that loads the keys from v_ptr and the values from k_ptr (got the generic 'wrong values' hint)."""
    swapped = lambda q, k, v, causal, out: L.attention_pointers(q, v, k, causal, out=out)  # noqa: E731
    with pytest.raises(AssertionError, match="k and v are swapped"):
        L.check_attention(swapped, shapes=[GQA], quiet=True)
    with pytest.raises(AssertionError, match="k and v are swapped"):
        L.check_attention_head(lambda q, k, v, out: L.attention_head(q, v, k, out=out), shapes=[ONE_HEAD], quiet=True)


# -- the key blocks' bookkeeping (session 35): each got a hint about row offsets or "Wrong values in many places" ---

BLOCK_BATTERY = {
    # mistake: (kernel, (old, new), which check, words of the hint it must get)
    "alpha with tl.exp in base 2": ("_attention_range", ("alpha = tl.exp2(", "alpha = tl.exp("), "pointers",
                                    "alpha is computed with tl.exp, p with tl.exp2"),
    "p with tl.exp in base 2": ("attention_head_exp2_kernel", ("p = tl.exp2(", "p = tl.exp("), "exp2",
                                "p is computed with tl.exp, alpha with tl.exp2"),
    "the diagonal's keys stop at start_m + BLOCK_N": (
        "attention_causal_kernel",
        ("masked_end = tl.minimum(start_m + BLOCK_M, T)", "masked_end = tl.minimum(start_m + BLOCK_N, T)"),
        "causal", "the diagonal's key blocks stop at start_m + BLOCK_N",
    ),
    # session 35: "Wrong values in many places" before (acc divided in the loop, and not after it)
    "acc divided by l_i inside the loop": (
        "attention_head_kernel",
        ("acc * alpha[:, None])\n        m_i = m_new\n    # -- normalise and write back the rows that exist\n"
         "    o = acc / l_i[:, None]",
         "acc * alpha[:, None])\n        acc = acc / l_i[:, None]\n        m_i = m_new\n    o = acc"),
        "head", "acc is divided by l_i inside the key loop",
    ),
    # session 36: "Wrong values in many places" before (divided in the loop, and after it as well)
    "acc divided by l_i inside the loop and after it": (
        "attention_head_kernel",
        ("acc * alpha[:, None])\n        m_i = m_new\n", "acc * alpha[:, None])\n        acc = acc / l_i[:, None]\n"
         "        m_i = m_new\n"),
        "head", "acc is divided by l_i inside the key loop as well as after it",
    ),
    "the partial key block skipped": ("attention_pointers_kernel", ("        masked_end = T\n",
                                      "        masked_end = full_end\n"), "pointers", "last, partial key block"),
}  # fmt: skip
BLOCK_CHECKS = {
    "head": lambda: L.check_attention_head(L.attention_head, quiet=True),
    "exp2": lambda: L.check_attention_head(L.attention_head_exp2, quiet=True),
    "causal": lambda: L.check_attention_head(L.attention_head_causal, causal=(True, False), quiet=True),
    "pointers": lambda: L.check_attention(L.attention_pointers, shapes=[GQA], quiet=True),
    # GQA's T = 20 is one query block: there a causal mask left out is "not causal", rightly
    "causal pointers": lambda: L.check_attention(L.attention_pointers, causal=(True,), quiet=True),
}


# -- the running max not carried, the diagonal not masked causally (probe06): "Wrong values in many places", or NaN
# rows with "guard such rows", or "Only rows … are wrong: the offset or index along the rows" -----------------------

_CAUSAL_KEEP = "            if IS_CAUSAL:\n                keep = keep & (offs_n[None, :] <= offs_m[:, None])\n"
PROBE06_BATTERY = {
    # mistake: (kernel, (old, new), which check, words of the hint it must get)
    "m_i = m_new left out": ("attention_head_kernel", ("        m_i = m_new\n", ""), "head",
                             "the running max is not carried from one key block to the next (BLOCK_N = 16)"),
    "m_i = m_new left out, causal": ("_attention_range", ("        m_i = m_new\n", ""), "causal",
                                     "the running max is not carried from one key block to the next (BLOCK_M = 32"),
    "m_i = m_new left out, GQA": ("_attention_range", ("        m_i = m_new\n", ""), "pointers",
                                  "the running max is not carried"),
    "the causal mask left out of the masked range": ("_attention_range", (_CAUSAL_KEEP, ""), "causal",
                                                     "the diagonal's key blocks are not masked causally"),
    "the causal mask left out, GQA": ("_attention_range", (_CAUSAL_KEEP, ""), "causal pointers",
                                      "the diagonal's key blocks are not masked causally"),
}  # fmt: skip
KEY_BLOCK_BATTERIES = BLOCK_BATTERY | PROBE06_BATTERY


# T = 1 with the tail skipped: 0 / 0; the interpreter's -inf - -inf in a block all masked
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("mistake", list(KEY_BLOCK_BATTERIES))
def test_the_key_blocks_mistakes_get_named(mistake, monkeypatch, tmp_path):
    """One exponential of a base-2 kernel left as tl.exp; the causal kernel's masked range ending BLOCK_N after the
    query block's start (short of its last query, when BLOCK_M > BLOCK_N); the non-causal tail block never visited.
    Before their suspects: "Only rows … are wrong: the offset or index along the rows", or "Wrong values in many
    places". probe06's: m_i = m_new left out (only the last key block a program visits counts), and the causal test
    left out of the masked range (a query sees every key up to its query block's end)."""
    from utils.mutants import plant

    name, edit, check, words = KEY_BLOCK_BATTERIES[mistake]
    plant(monkeypatch, tmp_path, L, name, edit)
    with pytest.raises(AssertionError, match=re.escape(words)):
        BLOCK_CHECKS[check]()


# -- a sign turned round in the online softmax (session 37): every output NaN ("guard such rows"), or "Only rows …
# are wrong: the offset or index along the rows" ---------------------------------------------------------------

SIGN_BATTERY = {
    # mistake: (kernel, (old, new), which check, words of the hint it must get)
    "alpha = exp(m_new - m_i)": ("attention_head_kernel", ("tl.exp(m_i - m_new)", "tl.exp(m_new - m_i)"), "head",
                                 "Most likely alpha = tl.exp(m_new - m_i)"),
    "p = exp(m_new - s)": ("attention_head_kernel", ("tl.exp(s - m_new[:, None])", "tl.exp(m_new[:, None] - s)"),
                           "head", "p = tl.exp(m_new[:, None] - s) for p = tl.exp(s - m_new"),
    "p = exp2(m_new - s), causal": ("_attention_range", ("tl.exp2(s - m_new[:, None])",
                                    "tl.exp2(m_new[:, None] - s)"), "causal", "p subtracts the wrong way round"),
    "p = exp(s + m_new)": ("attention_head_kernel", ("tl.exp(s - m_new[:, None])", "tl.exp(s + m_new[:, None])"),
                           "head", "p adds the running max where it subtracts it"),
    "p = exp2(s + m_new)": ("_attention_range", ("tl.exp2(s - m_new[:, None])", "tl.exp2(s + m_new[:, None])"),
                            "pointers", "p adds the running max where it subtracts it"),
}  # fmt: skip


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the interpreter's inf - inf and 0 * inf
@pytest.mark.parametrize("mistake", list(SIGN_BATTERY))
def test_a_sign_turned_round_in_the_online_softmax_is_named(mistake, monkeypatch, tmp_path):
    """alpha or p subtracting the wrong way round meets exp(+inf) (m_i = -inf on the first block, masked scores
    -inf): every output NaN in every case, or, causal, NaN but in the last row of a query block; p adding the max
    weighs each key block by exp(2 m_new), right within one block."""
    from utils.mutants import plant

    name, edit, check, words = SIGN_BATTERY[mistake]
    plant(monkeypatch, tmp_path, L, name, edit)
    with pytest.raises(AssertionError, match=re.escape(words)):
        BLOCK_CHECKS[check]()


# -- the scale argument ignored (session 35): check_attention passed only the default scale, so a kernel that
# computes 1/sqrt(D) itself passed, and scale= then did nothing --------------------------------------------------

_IGNORED = "the scale argument is ignored"


def test_a_kernel_that_computes_its_own_scale_is_named(monkeypatch, tmp_path):
    """_attention_range multiplying the scores by LOG2E/sqrt(HEAD_DIM), not the qk_scale it is given: right at the
    default scale, which is all check_attention passed before session 35."""
    from utils.mutants import plant

    own = "s = tl.dot(q, tl.trans(k)) * (1.4426950408889634 / HEAD_DIM**0.5)"
    plant(monkeypatch, tmp_path, L, "_attention_range", ("s = tl.dot(q, tl.trans(k)) * qk_scale", own))
    with pytest.raises(AssertionError, match=re.escape(_IGNORED)):
        L.check_attention(L.attention_pointers, shapes=[GQA], quiet=True)


def test_a_launcher_that_ignores_scale_is_named():
    """A launcher that takes scale= and drops it; one without scale= (a one-head step, a test's wrapper) is not
    asked for another scale."""

    def dropped(q, k, v, causal=True, *, out=None, scale=None):
        return L.attention_pointers(q, k, v, causal, out=out)

    with pytest.raises(AssertionError, match=re.escape(_IGNORED)):
        L.check_attention(dropped, shapes=[GQA], quiet=True)
    L.check_attention(lambda q, k, v, causal, out: L.attention_pointers(q, k, v, causal, out=out), shapes=[GQA],
                      quiet=True)  # fmt: skip


def test_the_checks_take_causal_as_one_bool():
    """check_attention_head(fn, causal=True) as a learner writes it (probe06: "'bool' object is not iterable")."""
    L.check_attention_head(L.attention_head_causal, causal=True, shapes=[ONE_HEAD], quiet=True)
    L.check_attention(L.attention_pointers, causal=False, shapes=[GQA], quiet=True)
    with pytest.raises(AssertionError, match="not causal"):  # the one value asked for is the one checked
        L.check_attention(lambda q, k, v, causal, out: L.attention_pointers(q, k, v, False, out=out), causal=True,
                          shapes=[GQA], quiet=True)  # fmt: skip


KV_HEAD_PAST_KV = {  # a kv head index that reaches past KV - 1 at the checks' first case (H = 2, KV = 1)
    "kv_h = h": ("kv_h = h // GROUP", "kv_h = h"),
    "kv_h = h % GROUP": ("kv_h = h // GROUP", "kv_h = h % GROUP"),
    "kv_h = h // KV": ("kv_h = h // GROUP", "kv_h = h // (H // GROUP)"),
}


@pytest.mark.skipif(not ENV.interpret, reason="reads past k and v: only safe where the interpreter watches them")
@pytest.mark.parametrize("mistake", list(KV_HEAD_PAST_KV))
def test_a_kv_head_index_past_kv_is_named_before_the_mask_hint(mistake, monkeypatch, tmp_path):
    """The reads past k and v that such an index makes got only the memory watch's "mask every tl.load" (probe06)."""
    from utils.mutants import plant

    plant(monkeypatch, tmp_path, L, "attention_pointers_kernel", KV_HEAD_PAST_KV[mistake])
    with pytest.raises(AssertionError, match=r"(?s)^Query heads 1 .*key/value head index.*h // GROUP"):
        L.check_attention(L.attention_pointers, causal=(True,), quiet=True)


# -- session 53's held-out battery: each got a hint of another mistake (named after the hint it got) or "Wrong values
# in many places" -----------------------------------------------------------------------------------------------

_MAX_OF = "m_new = tl.maximum(m_i, tl.max(s, 1))"
SESSION53_BATTERY = {  # mistake: (kernel, [(old, new), ...], which check, words of the hint it must get)
    # "The whole result is off by one constant factor: a scale is missing" (at T = 1)
    "the key mask keeps key T": ("attention_head_kernel", [("offs_n[None, :] < T, s,", "offs_n[None, :] <= T, s,")],
                                 "head", "the key mask keeps key T"),
    # "the running max m_i starts at 0, not -inf" (the max of unscaled scores, p of scaled ones)
    "the max of unscaled scores": (
        "attention_head_kernel", [("s = tl.dot(q, tl.trans(k)) * sm_scale", "s = tl.dot(q, tl.trans(k))"),
                                  ("p = tl.exp(s - m_new[:, None])", "p = tl.exp(s * sm_scale - m_new[:, None])")],
        "head", "of the scores as they enter the exponent, scaled",
    ),
    # "Whole rows are NaN ... guard such rows", at q x 60 only
    "the max of unscaled scores, descriptor kernel": (
        "_attention_range_tma", [("tl.max(s, 1) * qk_scale)", "tl.max(s, 1))")], "tma",
        "of the scores as they enter the exponent, scaled",
    ),
    "m_new without m_i": ("attention_head_kernel", [(_MAX_OF, "m_new = tl.max(s, 1)")], "head",
                          "with m_i (it never decreases"),
    "the max along axis 0": ("attention_head_kernel", [(_MAX_OF, "m_new = tl.maximum(m_i, tl.max(s, 0))")], "head",
                             "along axis 1 (the keys of the row)"),
    "the key loop to T - 1": ("attention_head_kernel", [("range(0, T, BLOCK_N)", "range(0, T - 1, BLOCK_N)")], "head",
                              "the key loop takes no step at T = 1"),
    # "Only rows ≥ 1 are wrong ... a causal mask's offset", or "Only rows ≥ 32 ..."
    "p of unscaled scores, descriptor kernel": (
        "_attention_range_tma", [("tl.exp2(s * qk_scale - m_new", "tl.exp2(s - m_new")], "tma",
        "tl.exp2 takes the unscaled scores",
    ),
    "the masked range starting at 0": ("attention_causal_kernel", [("        full_end,\n        masked_end,",
                                                                   "        0,\n        masked_end,")], "causal",
                                       "the masked range starts at 0, not at full_end (BLOCK_M = 32)"),
    # "Wrong values in many places"
    "k loaded from q_ptr": ("attention_head_kernel", [("k = tl.load(k_ptr + offs_n[:, None] * stride_kt",
                                                       "k = tl.load(q_ptr + offs_n[:, None] * stride_qt")], "head",
                            "k is loaded from q_ptr"),
    "v loaded from k_ptr": ("attention_head_kernel", [("v = tl.load(v_ptr + offs_n[:, None] * stride_vt",
                                                       "v = tl.load(k_ptr + offs_n[:, None] * stride_kt")], "head",
                            "v is loaded from k_ptr"),  # (at T = 1 "k and v are swapped" too, named after it)
    "the scores divided by the scale": ("attention_head_kernel", [("* sm_scale  #", "/ sm_scale  #")], "head",
                                        "the scores are divided by the scale"),
    "alpha computed after m_i = m_new": (
        "attention_head_kernel",
        [("        alpha = tl.exp(m_i - m_new)  # rescales what was summed so far (0 on the first block)\n", ""),
         ("        m_i = m_new\n", "        m_i = m_new\n        alpha = tl.exp(m_i - m_new)\n"),
         ("l_i = l_i * alpha", "l_i = l_i"), ("acc * alpha[:, None]", "acc")],
        "head", "neither acc nor l_i is rescaled",
    ),
    "q read at the kv head": ("attention_pointers_kernel", [("q_ptr += b * stride_qb + h * stride_qh",
                                                             "q_ptr += b * stride_qb + kv_h * stride_qh")],
                              "pointers", "q is read at the key/value head"),
}  # fmt: skip
SESSION53_CHECKS = BLOCK_CHECKS | {"tma": lambda: L.check_attention(L.attention_tma, quiet=True)}


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # overflows in exp, 0 / 0
@pytest.mark.parametrize("mistake", list(SESSION53_BATTERY))
def test_session_53_battery_of_mistakes_gets_named(mistake, monkeypatch, tmp_path):
    """New suspects (a zero key past T, the scores divided by the scale or unscaled in tl.exp2, k from q_ptr, alpha
    of 1, q at its kv head, the masked range from 0); a case of large scores (q x 60) where the kernel computes NaN,
    every case before it right, names the running max's mistakes (LARGE_SCORES_NAN); a one-token case alone NaN
    names a key loop that takes no step there."""
    from utils.mutants import plant

    name, edits, check, words = SESSION53_BATTERY[mistake]
    plant(monkeypatch, tmp_path, L, name, *edits)
    # one draw: the axis-0 max is told by name where its first wrong case is one of far or large scores (NaN); on
    # some draws a large-scores row comes out finite and wrong first, told only "subtract each row's max" (CI, twice)
    torch.manual_seed(0)
    with pytest.raises(AssertionError, match=re.escape(words)):
        SESSION53_CHECKS[check]()


@pytest.mark.skipif(not ENV.interpret, reason="reads past k and v: only safe where the interpreter watches them")
def test_heads_never_written_are_not_blamed_on_the_kv_head_index(monkeypatch, tmp_path):
    """pid_m and bh swapped: at T = 1 program 1 takes query block 1 of head 0, reads keys past T (unmasked, before
    the diagonal) and writes nothing, so head 1 is never written; _kv_heads_past_the_end said "the likely cause is
    the key/value head index" (session 53). It speaks only where the wrong heads were written."""
    from utils.mutants import plant

    plant(monkeypatch, tmp_path, L, "attention_pointers_kernel",
          ("pid_m = pid % n_m\n    bh = pid // n_m", "pid_m = pid // n_m\n    bh = pid % n_m"))  # fmt: skip
    with pytest.raises(AssertionError, match="never written") as failure:
        L.check_attention(L.attention_pointers, causal=(True,), quiet=True)
    assert "key/value head index" not in str(failure.value)


@pytest.mark.skipif(not ENV.interpret, reason="the interpreter's own check; a GPU's TMA fails otherwise")
def test_a_descriptor_tile_at_the_head_number_is_explained(monkeypatch, tmp_path):
    """q loaded at [b, start_m, h] for [b, start_m, h * HEAD_DIM]: the interpreter's AssertionError "block offset
    start must be 16-byte aligned" had no explanation in utils.crashes (session 53); it names the coordinate."""
    from utils import crashes
    from utils.mutants import plant

    plant(monkeypatch, tmp_path, L, "attention_kernel", ("[b, start_m, h * HEAD_DIM]", "[b, start_m, h]"))
    with pytest.raises(Exception) as caught:
        L.check_attention(L.attention_tma, quiet=True)
    hint = crashes.explain(caught.value)
    assert hint is not None and "h * HEAD_DIM" in hint, f"{caught.value!r} -> {hint}"
