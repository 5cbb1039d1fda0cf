"""Lesson 06's solution (an LLM block): each kernel at awkward shapes, the assembled layer against transformers'
LlamaDecoderLayer, planted bugs that the checks must catch, and the launchers' refusals.

The kernels are compared with the lesson's PyTorch references in fp64 (fresh random inputs, outputs pre-filled
with NaN) through the notebook's own check_* helpers, so the tests and the lesson check the same way. On the CPU
(interpreter) everything is fp32 and tiny, head dims 16 and 32; on a GPU the dtype is bf16 (and fp16) with head
dims 64 and 128 and the TinyLlama-1.1B layer shape (hidden 2048, 32 heads, 4 KV heads, FFN 5632).
"""

import pytest
import torch

import utils
from utils.lessons import load
from utils.mode import current

ENV = current()
L = load("06")

DTYPES = ENV.pick(cpu=[torch.float32], gpu=[torch.bfloat16, torch.float16])  # the interpreter has no bfloat16

RMSNORM = ENV.pick(
    cpu=[(1, 1), (1, 7), (9, 64), (3, 129)], gpu=[(1, 1), (1, 7), (333, 2048), (4099, 2048), (97, 5000), (2, 8192)]
)
# (B, T, H, KV, D)
ROPE = ENV.pick(
    cpu=[(1, 1, 1, 1, 16), (2, 13, 4, 2, 16), (3, 9, 3, 1, 32), (1, 40, 8, 8, 16)],
    gpu=[(1, 1, 32, 4, 128), (2, 333, 32, 4, 128), (3, 77, 12, 4, 64), (1, 2048, 32, 32, 128)],
)
# (B, T, H, KV, D, causal): T = 1, T below one block, T not a multiple of BLOCK_M or BLOCK_N, exact multiples
ATTENTION = ENV.pick(
    cpu=[
        (1, 1, 2, 1, 16, True),
        (1, 1, 2, 2, 16, False),
        (2, 37, 4, 2, 16, True),
        (2, 37, 4, 2, 16, False),
        (1, 64, 4, 4, 32, True),
        (1, 48, 2, 1, 32, False),
        (1, 16, 4, 1, 16, True),
        (3, 33, 6, 3, 16, True),
    ],
    gpu=[
        (1, 1, 8, 2, 128, True),
        (1, 1, 4, 4, 64, False),
        (2, 333, 8, 2, 128, True),
        (2, 300, 8, 2, 128, False),
        (1, 1024, 32, 4, 128, True),
        (1, 1000, 4, 4, 64, True),
        (1, 77, 4, 1, 64, False),
        (2, 256, 8, 8, 64, False),
        (1, 130, 4, 2, 128, True),
    ],
)
SWIGLU = ENV.pick(cpu=[(1, 1), (5, 70), (3, 1500)], gpu=[(1, 1), (333, 5632), (7, 3000), (8192, 5632)])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("M, N", RMSNORM)
def test_rmsnorm(M, N, dtype):
    L.check_rmsnorm(L.rmsnorm, shapes=[(M, N)], dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("B, T, H, KV, D", ROPE)
def test_rope(B, T, H, KV, D, dtype):
    L.check_rope(L.rope, shapes=[(B, T, H, KV, D)], dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("B, T, H, KV, D, causal", ATTENTION)
def test_attention(B, T, H, KV, D, causal, dtype):
    L.check_attention(L.attention, shapes=[(B, T, H, KV, D, causal)], dtype=dtype)


def test_rmsnorm_with_residual_returns_the_sum_exactly():
    """The stored sum is x + residual rounded once: bitwise what PyTorch's add gives (inputs exact in any dtype)."""
    dtype = L.lesson_dtype()
    x = torch.randint(-64, 64, (5, 300), device=ENV.device).to(dtype) / 4  # sums of these are exact
    r = torch.randint(-64, 64, (5, 300), device=ENV.device).to(dtype) / 4
    _, x_sum = L.rmsnorm(x, torch.ones(300, device=ENV.device, dtype=dtype), residual=r)
    assert torch.equal(x_sum, x + r)


def test_attention_on_contiguous_inputs():
    """Separate contiguous q, k, v (the layout SDPA users have), not views into one buffer."""
    B, T, H, KV, D = ENV.pick(cpu=(2, 19, 4, 2, 16), gpu=(2, 301, 8, 2, 128))
    dtype = L.lesson_dtype()
    q = torch.randn(B, T, H, D, device=ENV.device, dtype=dtype)
    k, v = (torch.randn(B, T, KV, D, device=ENV.device, dtype=dtype) for _ in range(2))
    out = L.attention(q, k, v, causal=True, out=utils.nan_empty((B, T, H, D), dtype))
    utils.check(out, L.attention_ref(q.double(), k.double(), v.double()), quiet=True)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("M, N", SWIGLU)
def test_swiglu(M, N, dtype):
    L.check_swiglu(L.swiglu, shapes=[(M, N)], dtype=dtype)


# -- the references themselves --------------------------------------------------------------------------------


def test_attention_ref_matches_torch_sdpa():
    B, T, H, KV, D = 2, 19, 4, 2, 16
    q = torch.randn(B, T, H, D, dtype=torch.float64)
    k, v = torch.randn(B, T, KV, D, dtype=torch.float64), torch.randn(B, T, KV, D, dtype=torch.float64)
    for causal in (True, False):
        want = torch.nn.functional.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal, enable_gqa=True
        )
        # attention_ref takes its softmax in fp32 (as the kernels do), so it agrees to fp32's precision, not fp64's
        torch.testing.assert_close(L.attention_ref(q, k, v, causal), want.transpose(1, 2), rtol=1e-5, atol=1e-6)


def test_rope_tables_match_transformers():
    args = L.TINY
    T = 50
    cos, sin = L.rope_tables(T, args.head_dim, args.rope_theta)
    hf_cos, hf_sin = L.hf_rope_tables(args, 1, T, torch.float32)
    utils.check(
        cos,
        hf_cos,
        atol=1e-6,
        rtol=1e-6,
        reason="the same fp32 formula; sin/cos of angles up to 50 rad computed by possibly different library code",
        quiet=True,
    )
    utils.check(sin, hf_sin, atol=1e-6, rtol=1e-6, reason="as for cos", quiet=True)


# -- the assembled layer against Hugging Face --------------------------------------------------------------------


@pytest.mark.parametrize("attn_implementation", ["sdpa", "eager"])
@pytest.mark.parametrize("B, T", ENV.pick(cpu=[(2, 21), (1, 1), (1, 64)], gpu=[(2, 333), (1, 1), (1, 1024)]))
def test_layer_matches_transformers(B, T, attn_implementation):
    L.check_layer(L.TRITON_OPS, B=B, T=T, attn_implementation=attn_implementation, quiet=True)


def test_reference_layer_matches_transformers():
    L.check_layer(L.REF_OPS, quiet=True)


# -- planted bugs: each check must be able to fail ---------------------------------------------------------------


def _swapped_swiglu(gate_up, out=None):
    up, gate = gate_up.chunk(2, dim=-1)  # gate and up the wrong way round
    return L.swiglu_ref(torch.cat([gate, up], dim=-1))


def _non_causal_attention(q, k, v, causal=True, out=None):
    return L.attention(q, k, v, causal=False, out=out)


def _rope_without_k(q, k, cos, sin, q_out=None, k_out=None):
    q_rot, _ = L.rope(q, k, cos, sin)
    return q_rot, k.contiguous()


def _rmsnorm_by_mean(x, weight, eps, residual=None, out=None, sum_out=None):
    x = x if residual is None else x + residual
    normed = weight * (x - x.mean(-1, keepdim=True)) / x.std(-1, keepdim=True)  # LayerNorm's centring
    return normed if residual is None else (normed, x)


def _rmsnorm_sum_not_returned(x, weight, eps, residual=None, out=None, sum_out=None):
    if residual is None:
        return L.rmsnorm(x, weight, eps)
    normed, _ = L.rmsnorm(x, weight, eps, residual=residual)
    return normed, residual  # the residual stream without the attention output added


@pytest.mark.parametrize(
    "bug",
    [
        {"swiglu": _swapped_swiglu},
        {"attention": _non_causal_attention},
        {"rope": _rope_without_k},
        {"rmsnorm": _rmsnorm_by_mean},
        {"rmsnorm": _rmsnorm_sum_not_returned},
    ],
    ids=["swapped-gate-up", "not-causal", "k-not-rotated", "layernorm", "residual-dropped"],
)
def test_layer_check_catches_planted_bugs(bug):
    with pytest.raises(AssertionError):
        L.check_layer(L.TRITON_OPS._replace(**bug), quiet=True)


def test_attention_check_catches_a_missing_mask():
    with pytest.raises(AssertionError):
        L.check_attention(
            _non_causal_attention, shapes=[ENV.pick(cpu=(1, 37, 2, 1, 16, True), gpu=(1, 333, 8, 2, 128, True))]
        )


def test_attention_check_catches_wrong_gqa_mapping():
    def head_modulo(q, k, v, causal=True, out=None):  # query head h reads kv head h % KV instead of h // group
        H, KV = q.shape[2], k.shape[2]
        idx = torch.arange(H, device=q.device) % KV
        return L.attention(q, k[:, :, idx], v[:, :, idx], causal=causal, out=out)

    with pytest.raises(AssertionError):
        L.check_attention(head_modulo, shapes=[ENV.pick(cpu=(1, 20, 4, 2, 16, True), gpu=(1, 200, 8, 2, 128, True))])


# -- launchers refuse bad inputs with a message ----------------------------------------------------------------


def test_launchers_refuse_bad_inputs():
    dev, dtype = ENV.device, L.lesson_dtype()
    x = torch.randn(4, 64, device=dev, dtype=dtype)
    with pytest.raises(ValueError, match="non-contiguous"):
        L.rmsnorm(x.T, torch.ones(4, device=dev, dtype=dtype))
    with pytest.raises(ValueError, match="shape"):
        L.rmsnorm(x, torch.ones(63, device=dev, dtype=dtype))
    with pytest.raises(TypeError, match="dtype"):
        L.swiglu(x.to(torch.int32))
    with pytest.raises(ValueError, match="even"):
        L.swiglu(x[:, :63].contiguous())
    q, k, v = L._qkv(1, 8, 4, 3, 16, dtype)
    with pytest.raises(ValueError, match="split evenly"):
        L.attention(q, k, v)
    q, k, v = L._qkv(1, 8, 4, 2, 16, dtype)
    with pytest.raises(ValueError, match="stride 1"):
        L.attention(q.transpose(1, 3), k, v)
    with pytest.raises(ValueError, match="head_dim"):
        L.attention(*L._qkv(1, 8, 4, 2, 24, dtype))
    flat = torch.randn(1 + 8 * 4 * 16, device=dev, dtype=dtype)
    with pytest.raises(ValueError, match="16-byte"):  # a view starting one element into a buffer
        L.attention(flat[1:].view(1, 8, 4, 16), k, v)
    with pytest.raises(ValueError, match="residual"):
        L.rmsnorm(x, torch.ones(64, device=dev, dtype=dtype), residual=x[:2])
    cos, sin = L.rope_tables(9, 16, dtype=dtype)
    with pytest.raises(ValueError, match="cos"):
        L.rope(q, k, cos, sin)
    if ENV.is_gpu:
        with pytest.raises(ValueError, match="cpu"):
            L.rmsnorm(x.cpu(), torch.ones(64, dtype=dtype))
