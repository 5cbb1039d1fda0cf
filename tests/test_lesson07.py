"""Lesson 07's solution (a Llama decoder layer): RMSNorm, RoPE and SwiGLU at awkward shapes through the lesson's
own checks, the assembled layer against transformers' LlamaDecoderLayer, planted mistakes that each check must
name, and the launchers' refusals and empty inputs.

On the CPU (interpreter) everything is fp32 and tiny (the TINY layer, head dim 16); on a GPU the dtype is bf16 and
fp16 with the TinyLlama-1.1B layer shape (hidden 2048, 32 heads, 4 KV heads, FFN 5632).
"""

import re

import pytest
import torch
import triton
import triton.language as tl

import utils
from lessons import l07_llm_layer as L
from utils import launch
from utils.hf import hf_rope_tables
from utils.mode import current

ENV = current()
DTYPES = ENV.pick(cpu=[torch.float32], gpu=[torch.bfloat16, torch.float16])  # the interpreter has no bfloat16
gpu_only = pytest.mark.skipif(not ENV.is_gpu, reason="needs a GPU (sizes far beyond what the interpreter runs)")

RMSNORM = ENV.pick(
    cpu=[(1, 1), (1, 7), (9, 64), (3, 129)], gpu=[(1, 1), (1, 7), (333, 2048), (4099, 2048), (97, 5000), (2, 8192)]
)
# (B, T, H, KV, D)
ROPE = ENV.pick(
    cpu=[(1, 1, 1, 1, 16), (2, 13, 4, 2, 16), (3, 9, 3, 1, 32), (1, 40, 8, 8, 16)],
    gpu=[(1, 1, 32, 4, 128), (2, 333, 32, 4, 128), (3, 77, 12, 4, 64), (1, 2048, 32, 32, 128)],
)
SWIGLU = ENV.pick(cpu=[(1, 1), (5, 70), (3, 1500)], gpu=[(1, 1), (333, 5632), (7, 3000), (8192, 5632)])


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("M, N", RMSNORM)
def test_rmsnorm(M, N, dtype):
    L.check_rmsnorm(L.rmsnorm, shapes=[(M, N)], dtype=dtype, quiet=True)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("B, T, H, KV, D", ROPE)
def test_rope(B, T, H, KV, D, dtype):
    L.check_rope(L.rope, shapes=[(B, T, H, KV, D)], dtype=dtype, quiet=True)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("M, N", SWIGLU)
def test_swiglu(M, N, dtype):
    L.check_swiglu(L.swiglu, shapes=[(M, N)], dtype=dtype, quiet=True)


def test_rmsnorm_with_residual_returns_the_sum_exactly():
    """The stored sum is x + residual rounded once: bitwise what PyTorch's add gives (inputs exact in any dtype)."""
    dtype = L.lesson_dtype()
    x = torch.randint(-64, 64, (5, 300), device=ENV.device).to(dtype) / 4  # sums of these are exact
    r = torch.randint(-64, 64, (5, 300), device=ENV.device).to(dtype) / 4
    _, x_sum = L.rmsnorm(x, torch.ones(300, device=ENV.device, dtype=dtype), residual=r)
    assert torch.equal(x_sum, x + r)


def test_rope_tables_match_transformers():
    args, T = L.TINY, 50
    cos, sin = L.rope_tables(T, args.head_dim, args.rope_theta)
    hf_cos, hf_sin = hf_rope_tables(args, 1, T, torch.float32)
    why = "the same fp32 formula; sin/cos of angles up to 50 rad computed by possibly different library code"
    utils.check(cos, hf_cos, atol=1e-6, rtol=1e-6, reason=why, quiet=True)
    utils.check(sin, hf_sin, atol=1e-6, rtol=1e-6, reason=why, quiet=True)


def test_llama_1b_shape_and_eps():
    assert (L.LLAMA_1B.dim, L.LLAMA_1B.n_heads, L.LLAMA_1B.n_kv_heads, L.LLAMA_1B.ffn_dim) == (2048, 32, 4, 5632)
    assert L.LLAMA_1B.norm_eps == 1e-5  # TinyLlama-1.1B's rms_norm_eps


def test_layer_costs_add_up():
    costs = L.layer_costs(L.LLAMA_1B, 1, 2048)
    assert len(costs) == 9 and all(f > 0 and b > 0 for _, f, b in costs)
    matmul_flops = sum(f for step, f, _ in costs if "projection" in step)
    assert matmul_flops > 0.8 * sum(f for _, f, _ in costs)


# -- the assembled layer against Hugging Face --------------------------------------------------------------------


@pytest.mark.parametrize("attn_implementation", ["sdpa", "eager"])
@pytest.mark.parametrize("B, T", ENV.pick(cpu=[(2, 21), (1, 1), (1, 64)], gpu=[(2, 333), (1, 1), (1, 1024)]))
def test_layer_matches_transformers(B, T, attn_implementation):
    L.check_layer(L.TRITON_OPS, B=B, T=T, attn_implementation=attn_implementation, quiet=True)


def test_reference_layer_matches_transformers():
    L.check_layer(L.REF_OPS, quiet=True)


@pytest.mark.parametrize("ops", ["REF_OPS", "TRITON_OPS"])
def test_a_head_width_set_apart_from_dim_over_heads(ops):
    """Some configs set head_dim apart from dim / n_heads: the attention is then H D = 128 wide in a stream of
    C = 64 (q and o are not square). The layer must follow HF's, which reads config.head_dim."""
    args = L.LlamaArgs(dim=64, n_heads=4, n_kv_heads=2, ffn_dim=96, head_dim=32)
    assert args.head_dim == 32 and L.LlamaArgs(dim=64, n_heads=4).head_dim == 16
    L.check_layer(getattr(L, ops), args=args, B=2, T=ENV.pick(cpu=9, gpu=333), quiet=True)


@pytest.mark.parametrize("D", [6, 24, 80, 2])
def test_rope_of_heads_whose_width_is_not_a_power_of_two(D):
    """The kernel's tl.arange takes powers of two: rope() turns heads padded to the next one, each half followed by
    zeros (halves_apart), and cuts them back; q and k as views into one fused buffer, outputs pre-filled with NaN."""
    B, T, H, KV = 2, 7, 3, 1
    dtype = L.lesson_dtype()
    qkv = torch.randn(B, T, H + 2 * KV, D, device=ENV.device, dtype=dtype)
    q, k = qkv[:, :, :H], qkv[:, :, H : H + KV]
    cos, sin = L.rope_tables(T, D, dtype=dtype, device=ENV.device)  # (1, T, D)
    q_out, k_out = utils.nan_empty((B, T, H, D), dtype), utils.nan_empty((B, T, KV, D), dtype)
    got = L.rope(q, k, cos, sin, q_out=q_out, k_out=k_out)
    assert got[0] is q_out and got[1] is k_out
    want = L.rope_ref(q.double(), k.double(), cos.double(), sin.double())
    utils.check(q_out, want[0], quiet=True)
    utils.check(k_out, want[1], quiet=True)


@pytest.mark.parametrize("ops", ["REF_OPS", "TRITON_OPS"])
def test_a_layer_whose_heads_the_kernels_take_padded_matches_hf(ops):
    """Hidden 96 over 4 heads: D = 24, which neither RoPE's tl.arange nor lesson 06's tl.dot take as it is; both
    launchers pad it, and the layer matches transformers' LlamaDecoderLayer."""
    args = L.LlamaArgs(dim=96, n_heads=4, n_kv_heads=2, ffn_dim=64)
    L.check_layer(getattr(L, ops), args=args, B=2, T=ENV.pick(cpu=9, gpu=333), quiet=True)


@pytest.mark.parametrize(
    "fields, message",
    [
        (dict(dim=64, n_heads=4, n_kv_heads=3, ffn_dim=32), "n_heads=4 .* n_kv_heads=3"),  # KV does not divide H
        (dict(dim=64, n_heads=2, n_kv_heads=4, ffn_dim=32, head_dim=16), "n_heads=2 .* n_kv_heads=4"),  # KV > H
        (dict(dim=64, n_heads=4, n_kv_heads=0, ffn_dim=32), "n_kv_heads must be an int >= 1"),
        (dict(dim=100, n_heads=6, n_kv_heads=2, ffn_dim=32), "dim=100 does not split over n_heads=6"),  # 16.67
        (dict(dim=64, n_heads=4, n_kv_heads=2, ffn_dim=32, head_dim=15), "head_dim=15"),  # RoPE turns pairs
        (dict(dim=64.0, n_heads=4, n_kv_heads=2, ffn_dim=32), "dim must be an int"),
        (dict(dim=64, n_heads=4, n_kv_heads=2, ffn_dim=32, norm_eps=-1e-5), "norm_eps must be >= 0"),  # NaN rows
        (dict(dim=64, n_heads=4, n_kv_heads=2, ffn_dim=32, rope_theta=0.0), "rope_theta must be positive"),
    ],
    ids=["KV-not-dividing-H", "KV-above-H", "KV-0", "dim-not-over-heads", "odd-head-dim", "float-dim", "negative-eps",
         "theta-0"],
)  # fmt: skip
def test_llama_args_refuse_head_layouts_the_layer_cannot_run(fields, message):
    """Refused where the args are made, naming the fields: not a raw size mismatch (REF_OPS) or a Triton error
    (TRITON_OPS) inside the layer, nor a head width silently floored (HF's LlamaConfig refuses it too)."""
    with pytest.raises(ValueError, match=message):
        L.LlamaArgs(**fields)


def test_a_batch_of_one_is_named_plainly_in_the_table_error():
    dtype = L.lesson_dtype()
    x, w = torch.randn(1, 5, 64, device=ENV.device, dtype=dtype), L.random_weights(L.TINY, dtype)
    with pytest.raises(ValueError, match=r"must be \(1, 5, 16\)"):
        L.llama_layer(x, w, L.TINY, *L.rope_tables(4, 16, dtype=dtype))
    q, k, _ = L.random_qkv(1, 5, 4, 2, 16, dtype)
    with pytest.raises(ValueError, match=r"must be \(1, 5, 16\)"):
        L.rope(q, k, *L.rope_tables(4, 16, dtype=dtype))


def test_layer_writes_into_out():
    dtype = L.lesson_dtype()
    args = L.TINY
    w = L.random_weights(args, dtype)
    x = torch.randn(2, 9, args.dim, device=ENV.device, dtype=dtype)
    cos, sin = L.rope_tables(9, args.head_dim, dtype=dtype)
    out = utils.nan_empty((2, 9, args.dim), dtype)
    assert L.llama_layer(x, w, args, cos, sin, L.TRITON_OPS, out=out) is out
    utils.check(out, L.llama_layer(x, w, args, cos, sin, L.TRITON_OPS), quiet=True)


# -- planted mistakes: each check must fail, with the specific hint ------------------------------------------


@triton.jit
def _rmsnorm_wrong_kernel(x_ptr, w_ptr, out_ptr, N, eps, BLOCK_SIZE: tl.constexpr, MISTAKE: tl.constexpr):
    """A learner's RMSNorm with one classic mistake (1: eps outside the sqrt, 2: mean over BLOCK_SIZE, 3: no eps,
    4: multiplied by the sqrt)."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < N
    x = tl.load(x_ptr + row * N + cols, mask=mask, other=0.0).to(tl.float32)
    if MISTAKE == 1:
        rstd = 1 / (tl.sqrt(tl.sum(x * x, axis=0) / N) + eps)
    elif MISTAKE == 3:
        rstd = tl.rsqrt(tl.sum(x * x, axis=0) / N)
    elif MISTAKE == 4:
        rstd = tl.sqrt(tl.sum(x * x, axis=0) / N + eps)
    else:
        rstd = tl.rsqrt(tl.sum(x * x, axis=0) / BLOCK_SIZE + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * N + cols, (x * rstd * w).to(out_ptr.dtype.element_ty), mask=mask)


def _rmsnorm_with(mistake):
    def launch(x, weight, eps=1e-5, residual=None, *, out=None, sum_out=None):
        if residual is not None:
            return L.rmsnorm(x, weight, eps, residual, out=out, sum_out=sum_out)
        M, N = x.shape
        _rmsnorm_wrong_kernel[(M,)](x, weight, out, N, eps, BLOCK_SIZE=triton.next_power_of_2(N), MISTAKE=mistake)
        return out

    return launch


@pytest.mark.parametrize(
    "mistake, hint",
    [(1, "epsilon outside the square root"), (2, "over BLOCK_SIZE numbers"), (3, "eps is missing"), (4, "not divided")],
    ids=["eps", "block", "no_eps", "sqrt"],
)
def test_rmsnorm_check_names_the_mistake(mistake, hint):
    with pytest.raises(AssertionError, match=hint):
        L.check_rmsnorm(_rmsnorm_with(mistake), shapes=[ENV.pick(cpu=(5, 100), gpu=(97, 5000))], quiet=True)


def test_rmsnorm_check_names_a_residual_not_added():
    def no_residual(x, weight, eps=1e-5, residual=None, *, out=None, sum_out=None):
        if residual is None:
            return L.rmsnorm(x, weight, eps, out=out)
        sum_out.copy_(x + residual)
        return L.rmsnorm(x, weight, eps, out=out), sum_out  # normalises x, not x + residual

    with pytest.raises(AssertionError, match="residual is not added"):
        L.check_rmsnorm(no_residual, shapes=[(5, 64)], quiet=True)


def _rope_wrong_sign(q, k, cos, sin, *, q_out=None, k_out=None):
    return L.rope(q, k, cos, -sin, q_out=q_out, k_out=k_out)  # turns each pair by -angle


def _rope_adjacent_pairs(q, k, cos, sin, *, q_out=None, k_out=None):
    # Meta's adjacent pairs on a Hugging Face layout, computed in fp32 and rounded once, as a kernel would. Computed in
    # bf16/fp16 throughout, it missed the suspect's tolerance on an H100 (triton 3.7.1; TRITON_HARD_WAY_AS=7.5)
    f32 = [t.float() for t in (q, k, cos, sin)]
    q_out.copy_(L.rope_interleaved_ref(f32[0], f32[2], f32[3]))
    k_out.copy_(L.rope_interleaved_ref(f32[1], f32[2], f32[3]))
    return q_out, k_out


def _rope_halves(swap):
    def rotate(q, k, cos, sin, *, q_out=None, k_out=None):
        for x, out in ((q, q_out), (k, k_out)):  # in fp32, rounded once, as a kernel would
            y = L.rope_ref(x.float(), x.float(), cos.float(), sin.float())[0]
            first, second = y.chunk(2, dim=-1)
            out.copy_(torch.cat([second, first] if swap else [first, first], dim=-1))  # halves swapped or copy-pasted
        return q_out, k_out

    return rotate


def _rope_sin_from_cos(q, k, cos, sin, *, q_out=None, k_out=None):
    return L.rope(q, k, cos, cos, q_out=q_out, k_out=k_out)  # s loaded from cos_ptr


def _rope_first_sequence_angles(q, k, cos, sin, *, q_out=None, k_out=None):
    cos, sin = (t[:1].expand_as(t).contiguous() for t in (cos, sin))  # cos_ptr + t * stride_ct: stride_cb left out
    return L.rope(q, k, cos, sin, q_out=q_out, k_out=k_out)


@pytest.mark.parametrize(
    "wrong, hint",
    [(_rope_wrong_sign, "wrong way"), (_rope_adjacent_pairs, "the wrong pairs"), (_rope_halves(True), "stored swapped"),
     (_rope_halves(False), "first half's formula"), (_rope_sin_from_cos, "sin is loaded from the cos table")],
    ids=["sign", "pairs", "swapped", "copy", "sin"],
)  # fmt: skip
def test_rope_check_names_the_mistake(wrong, hint):
    with pytest.raises(AssertionError, match=f"(?s)wrong at heads .*{hint}"):
        L.check_rope(wrong, shapes=[ENV.pick(cpu=(2, 13, 4, 2, 16), gpu=(2, 333, 32, 4, 128))], quiet=True)


def test_rope_check_gives_each_sequence_its_own_angles():
    """With one table per sequence (B=3 in the check), a kernel that reads sequence 0's angles for every sequence
    is wrong: each sequence starts at another position."""
    with pytest.raises(AssertionError, match="without the sequence's offset"):
        L.check_rope(_rope_first_sequence_angles, quiet=True)


def test_swiglu_check_names_swapped_halves():
    def swapped(gate_up, *, out=None):
        up, gate = gate_up.chunk(2, dim=-1)
        return L.swiglu(torch.cat([gate, up], dim=-1), out=out)

    with pytest.raises(AssertionError, match="gate and up are swapped"):
        L.check_swiglu(swapped, shapes=[(5, 70)], quiet=True)


def _non_causal_attention(q, k, v, causal=True, out=None):
    return L.attention(q, k, v, False, out=out)


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


def _swapped_swiglu(gate_up, out=None):
    up, gate = gate_up.chunk(2, dim=-1)
    return L.swiglu_ref(torch.cat([gate, up], dim=-1))


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


# -- launchers refuse bad inputs before any launch, and take empty ones ------------------------------------------


def test_launchers_refuse_bad_inputs():
    dev, dtype = ENV.device, L.lesson_dtype()
    other = torch.float16 if dtype == torch.float32 else torch.float32
    x = torch.randn(4, 64, device=dev, dtype=dtype)
    ones = torch.ones(64, device=dev, dtype=dtype)
    q, k, _ = L.random_qkv(1, 8, 4, 2, 16, dtype)
    cos, sin = L.rope_tables(8, 16, dtype=dtype)
    q2, k2, _ = L.random_qkv(2, 8, 4, 2, 16, dtype)
    args = L.TINY
    w = L.random_weights(args, dtype)
    xl = torch.randn(1, 8, args.dim, device=dev, dtype=dtype)
    utils.refuses(
        {
            "rmsnorm: transposed x": lambda: L.rmsnorm(x.T, torch.ones(4, device=dev, dtype=dtype)),
            "rmsnorm: weight too short": lambda: L.rmsnorm(x, ones[:63]),
            "rmsnorm: eps as a string": lambda: L.rmsnorm(x, ones, "1e-5"),
            "rmsnorm: negative eps": lambda: L.rmsnorm(x, ones, -1.0),
            "rmsnorm: residual of another shape": lambda: L.rmsnorm(x, ones, residual=x[:2]),
            "rmsnorm: out too small": lambda: L.rmsnorm(x, ones, out=torch.empty(3, 64, device=dev, dtype=dtype)),
            "rmsnorm: out is x": lambda: L.rmsnorm(x, ones, out=x),
            "rmsnorm: numpy out": lambda: L.rmsnorm(x, ones, out=x.detach().cpu().numpy()),
            "rmsnorm: sum_out without residual": lambda: L.rmsnorm(x, ones, sum_out=torch.empty_like(x)),
            "rmsnorm: sum_out aliasing out": lambda: L.rmsnorm(
                x, ones, residual=x.clone(), out=(o := torch.empty_like(x)), sum_out=o
            ),
            "rmsnorm: a row of 2**20 + 1": lambda: L.rmsnorm(
                torch.empty(1, 2**20 + 1, device=dev, dtype=dtype), torch.empty(2**20 + 1, device=dev, dtype=dtype)
            ),
            "rmsnorm: expanded x (stride 0)": lambda: L.rmsnorm(ones[None].expand(4, 64), ones),
            "swiglu: odd columns": lambda: L.swiglu(x[:, :63].contiguous()),
            "swiglu: int32": lambda: L.swiglu(x.to(torch.int32)),
            "swiglu: BLOCK_SIZE 100": lambda: L.swiglu(x, BLOCK_SIZE=100),
            "swiglu: out of the wrong dtype": lambda: L.swiglu(x, out=torch.empty(4, 32, device=dev, dtype=other)),
            "rope: tables for another T": lambda: L.rope(q, k, *L.rope_tables(9, 16, dtype=dtype)),
            "rope: expanded q": lambda: L.rope(q[:, :, :1].expand(1, 8, 4, 16), k, cos, sin),
            "rope: q_out too small": lambda: L.rope(
                q, k, cos, sin, q_out=torch.empty(1, 8, 3, 16, device=dev, dtype=dtype)
            ),
            "rope: k_out is k": lambda: L.rope(q, k, cos, sin, k_out=k),
            # the kernel read sin with cos's batch stride, past its end
            "rope: cos per sequence, sin for the batch": lambda: L.rope(q2, k2, torch.cat([cos, cos]), sin),
            "rope: cos for the batch, sin per sequence": lambda: L.rope(q2, k2, cos, torch.cat([sin, sin])),
            "rope_tables: odd head dim": lambda: L.rope_tables(8, 15),
            "rope_tables: float T": lambda: L.rope_tables(8.0, 16),
            "rope_tables: theta as a string": lambda: L.rope_tables(8, 16, "1e4"),
            "layer: 2-D x": lambda: L.llama_layer(xl[0], w, args, cos, sin),
            "layer: x of another width": lambda: L.llama_layer(xl[..., :32], w, args, cos, sin),
            "layer: weights of another dtype": lambda: L.llama_layer(
                xl, L.Weights(*(t.to(other) for t in w)), args, cos, sin
            ),
            "layer: tables for another T": lambda: L.llama_layer(xl, w, args, *L.rope_tables(9, 16, dtype=dtype)),
            "layer: out too small": lambda: L.llama_layer(
                xl, w, args, cos, sin, out=torch.empty(1, 7, 64, device=dev, dtype=dtype)
            ),
            "layer: out is x": lambda: L.llama_layer(xl, w, args, cos, sin, out=xl),
        },
        quiet=True,
    )
    if ENV.interpret:
        with pytest.raises(TypeError, match="bfloat16"):
            L.rmsnorm(x.to(torch.bfloat16), ones.to(torch.bfloat16))
        with pytest.raises(TypeError, match="bfloat16"):
            L.swiglu(x.to(torch.bfloat16))
    if ENV.is_gpu:
        with pytest.raises(ValueError, match="cpu"):
            L.rmsnorm(x.cpu(), ones.cpu())


def test_empty_inputs_give_empty_results():
    dev, dtype = ENV.device, L.lesson_dtype()
    ones = torch.ones(64, device=dev, dtype=dtype)
    empty = torch.empty(0, 64, device=dev, dtype=dtype)
    assert L.rmsnorm(empty, ones).shape == (0, 64)
    normed, summed = L.rmsnorm(empty, ones, residual=empty)
    assert normed.shape == summed.shape == (0, 64)
    assert L.rmsnorm(torch.empty(3, 0, device=dev, dtype=dtype), ones[:0]).shape == (3, 0)
    assert L.swiglu(torch.empty(0, 10, device=dev, dtype=dtype)).shape == (0, 5)
    q, k, _ = L.random_qkv(2, 0, 4, 2, 16, dtype)
    cos, sin = L.rope_tables(0, 16, dtype=dtype)
    q_out, k_out = L.rope(q, k, cos, sin)
    assert q_out.shape == (2, 0, 4, 16) and k_out.shape == (2, 0, 2, 16)
    q, k, _ = L.random_qkv(2, 3, 4, 2, 16, dtype)
    cos, sin = L.rope_tables(3, 16, dtype=dtype)
    for q_heads, k_heads in ((q[:, :, :0], k), (q, k[:, :, :0])):  # no q heads, or no k heads: the other turns
        for got, want in zip(L.rope(q_heads, k_heads, cos, sin), L.rope_ref(q_heads, k_heads, cos, sin)):
            utils.check(got, want, quiet=True)
    args = L.TINY
    w = L.random_weights(args, dtype)
    for B, T in ((0, 5), (2, 0)):
        cos, sin = L.rope_tables(T, args.head_dim, dtype=dtype)
        x = torch.empty(B, T, args.dim, device=dev, dtype=dtype)
        assert L.llama_layer(x, w, args, cos, sin, L.TRITON_OPS).shape == (B, T, args.dim)


@gpu_only
def test_offsets_past_2_31_elements():
    """rmsnorm, swiglu and rope on tensors of more than 2**31 elements: the last rows are right (int64 offsets)."""
    dtype = torch.bfloat16
    x = torch.randn(2**20 + 4, 2048, device="cuda", dtype=dtype)  # 2**31 + 8192 elements
    w = torch.ones(2048, device="cuda", dtype=dtype)
    out = L.rmsnorm(x, w)
    utils.check(out[-3:], L.rmsnorm_ref(x[-3:].double(), w.double(), 1e-5), quiet=True)
    del out
    gu = x.view(-1, 4096)  # (2**19 + 2, 4096): gate and up of 2048 each
    out = L.swiglu(gu)
    utils.check(out[-3:], L.swiglu_ref(gu[-3:].double()), quiet=True)
    del out, x, gu
    q, k, _ = L.random_qkv(1, 2**24 + 5, 32, 4, 4, dtype)  # 40 heads of 4 a token: 2.7e9 elements
    cos, sin = L.rope_tables(2**24 + 5, 4, dtype=dtype)
    q_out, k_out = L.rope(q, k, cos, sin)
    q_ref, k_ref = L.rope_ref(q[:, -3:].double(), k[:, -3:].double(), cos[:, -3:].double(), sin[:, -3:].double())
    utils.check(q_out[:, -3:], q_ref, quiet=True)
    utils.check(k_out[:, -3:], k_ref, quiet=True)


# -- the host's share: each launcher repeats a call signature's launch prepared (utils.launch, lesson 05) ----------


def _layer_calls():
    """{name: (launcher call, its tensor inputs)} for the three launchers of this lesson, at a small shape."""
    dtype = L.lesson_dtype()
    M, N = ENV.pick(cpu=(5, 70), gpu=(333, 2048))
    x, r = (torch.randn(M, N, device=ENV.device, dtype=dtype) for _ in range(2))
    w = torch.randn(N, device=ENV.device, dtype=dtype)
    B, T, H, KV, D = ENV.pick(cpu=(1, 5, 4, 2, 16), gpu=(2, 333, 32, 4, 64))
    qkv = torch.randn(B, T, H + 2 * KV, D, device=ENV.device, dtype=dtype)
    q, k, _ = qkv.split([H, KV, KV], dim=2)  # views, as the layer passes them
    cos, sin = L.rope_tables(T, D, dtype=dtype, device=ENV.device)
    gu = torch.randn(M, 2 * N, device=ENV.device, dtype=dtype)
    return {
        "rmsnorm": (lambda x, w: L.rmsnorm(x, w, 1e-5), (x, w)),
        "rmsnorm with a residual": (lambda x, w, r: L.rmsnorm(x, w, 1e-5, residual=r), (x, w, r)),
        "rope": (lambda q, k, cos, sin: L.rope(q, k, cos, sin), (q, k, cos, sin)),
        "swiglu": (lambda gu: L.swiglu(gu), (gu,)),
    }


@pytest.mark.parametrize("name", ["rmsnorm", "rmsnorm with a residual", "rope", "swiglu"])  # _layer_calls' keys
def test_a_repeated_call_launches_the_prepared_kernel(monkeypatch, name):
    """On a GPU the second call of one signature must skip the checks (utils.require raises here) and give bit
    for bit the first call's result; a kernel defined again (a cell run again) must not reuse the old kernel's
    launch. Under the interpreter nothing is prepared."""
    monkeypatch.setattr(L, "PREPARED", launch.Table())
    call, inputs = _layer_calls()[name]
    first = call(*inputs)
    if ENV.interpret:
        assert len(L.PREPARED) == 0, "under the interpreter there is no compiled kernel to prepare"
        return
    assert len(L.PREPARED) == 1

    def checked_again(*args, **kwargs):
        raise AssertionError(f"a repeated {name} call went through its checks: the prepared launch was not used")

    with monkeypatch.context() as m:
        m.setattr(utils, "require", checked_again)
        again = call(*(launch.same_kind(t) for t in inputs))
    for a, b in zip(*(x if isinstance(x, tuple) else (x,) for x in (first, again))):
        assert torch.equal(a, b), "the prepared launch must run the very kernel the first call ran"
    kernel = {"rmsnorm": "rmsnorm_kernel", "rope": "rope_kernel", "swiglu": "swiglu_kernel"}[name.split()[0]]
    monkeypatch.setattr(L, kernel, triton.jit(getattr(L, kernel).fn))  # the kernel's cell run again
    call(*inputs)
    assert len(L.PREPARED) == 2, "a kernel defined again must get its own launch, not the old kernel's"


# -- a second battery of learner mistakes (session 27c), planted with utils.mutants.plant ---------------------------

SECOND_BATTERY = {
    # mistake: (function, (old, new), which check, words of the hint it must get)
    "norm weight applied twice": ("rmsnorm_kernel", ("(x * rstd * w)", "(x * rstd * w * w)"), "rmsnorm",
                                  "weight is applied twice"),
    "sum_out stored before the residual is added": (
        "rmsnorm_kernel",
        ("x += tl.load(res_ptr + offsets, mask=mask, other=0.0).to(tl.float32)\n"
         "        tl.store(sum_ptr + offsets, x.to(sum_ptr.dtype.element_ty), mask=mask)",
         "tl.store(sum_ptr + offsets, x.to(sum_ptr.dtype.element_ty), mask=mask)\n"
         "        x += tl.load(res_ptr + offsets, mask=mask, other=0.0).to(tl.float32)"),
        "rmsnorm", "sum_out holds x alone",
    ),
    "silu with sigmoid's sign flipped": (
        "swiglu_kernel", ("gate * tl.sigmoid(gate) * up", "gate / (1 + tl.exp(gate)) * up"), "swiglu",
        "sigmoid's sign is flipped",
    ),
    "k read with q's strides": ("rope_kernel", ("k_src = k_ptr + b * stride_kb + t * stride_kt",
                                                "k_src = k_ptr + b * stride_qb + t * stride_qt"), "rope", ""),
    "k's heads read with q's head stride": ("rope_kernel", ("KV, stride_kh, c, s", "KV, stride_qh, c, s"), "rope", ""),
}  # fmt: skip
SECOND_CHECKS = {
    "rmsnorm": lambda: L.check_rmsnorm(L.rmsnorm, quiet=True),
    "swiglu": lambda: L.check_swiglu(L.swiglu, quiet=True),
    "rope": lambda: L.check_rope(L.rope, quiet=True),
}


@pytest.mark.parametrize("mistake", list(SECOND_BATTERY))
def test_second_battery_of_mistakes_gets_named(mistake, monkeypatch, tmp_path):
    """Each fails its check, with the hint that names it where one is given (before, the first three got "Wrong
    values in many places"; the rope ones passed: check_rope gave q and k one buffer's strides)."""
    from utils.mutants import plant

    name, edit, check, words = SECOND_BATTERY[mistake]
    plant(monkeypatch, tmp_path, L, name, edit)
    with pytest.raises(AssertionError, match=re.escape(words) if words else None):
        SECOND_CHECKS[check]()


def test_rope_output_written_with_the_inputs_head_stride_fails(monkeypatch, tmp_path):
    """_rope_heads writing each head at stride_h (the input's head stride) instead of D apart in the contiguous
    output: right only when q's heads happen to be D apart; check_rope's head-major q shows it. rope_kernel is planted
    again (unchanged) so that it is compiled with the planted _rope_heads."""
    from utils.mutants import plant

    wrong = ("dst = out_ptr + heads * (2 * HALF)", "dst = out_ptr + heads * stride_h")
    plant(monkeypatch, tmp_path, L, "_rope_heads", wrong)
    plant(monkeypatch, tmp_path, L, "rope_kernel")
    with pytest.raises(AssertionError):
        L.check_rope(L.rope, quiet=True)


# -- a third battery of learner mistakes (session 28) --------------------------------------------------------------

_SUM_STORE = "        tl.store(sum_ptr + offsets, x.to(sum_ptr.dtype.element_ty), mask=mask)\n"
_OUT_STORE = "tl.store(out_ptr + offsets, (x * rstd * w).to(out_ptr.dtype.element_ty), mask=mask)"
_ADD_RESIDUAL = "        x += tl.load(res_ptr + offsets, mask=mask, other=0.0).to(tl.float32)\n"
THIRD_BATTERY = {  # mistake: (function, [(old, new), ...], which check, words of the hint it must get)
    "norm weight as 1 + w": ("rmsnorm_kernel", [("(x * rstd * w)", "(x * rstd * (1 + w))")], "rmsnorm", "1 + w"),
    "mean subtracted (LayerNorm)": (
        "rmsnorm_kernel",
        [("rstd = tl.rsqrt(", "x = tl.where(mask, x - tl.sum(x, axis=0) / N, 0.0)\n    rstd = tl.rsqrt(")],
        "rmsnorm", "as LayerNorm does",
    ),
    "sum_out holds the normalised output": (
        "rmsnorm_kernel",
        [(_SUM_STORE, ""),
         (_OUT_STORE, _OUT_STORE + "\n    if HAS_RESIDUAL:\n" + _SUM_STORE.replace("x.to", "(x * rstd * w).to"))],
        "rmsnorm", "sum_out holds the normalised output",
    ),
    "residual added after normalising": (
        "rmsnorm_kernel",
        [("    if HAS_RESIDUAL:\n" + _ADD_RESIDUAL + _SUM_STORE, ""),
         (_OUT_STORE, "y = x * rstd * w\n    if HAS_RESIDUAL:\n" + _ADD_RESIDUAL.replace("x +=", "r =")
          + _SUM_STORE.replace("x.to", "(x + r).to")
          + "        y += r\n    tl.store(out_ptr + offsets, y.to(out_ptr.dtype.element_ty), mask=mask)")],
        "rmsnorm", "the residual is added after normalising",
    ),
    "cos and sin swapped": (
        "rope_kernel", [("c = tl.load(cos_ptr", "c = tl.load(SIN"), ("s = tl.load(sin_ptr", "s = tl.load(cos_ptr"),
                        ("SIN", "sin_ptr")], "rope", "cos and sin are swapped",
    ),
    "second half turned the wrong way": (
        "_rope_heads", [("(x2 * c + x1 * s)", "(x2 * c - x1 * s)")], "rope", "the second half turns the wrong way",
    ),
    "k rotated with q's head count": (
        "rope_kernel", [("KV * HEAD_DIM, KV, stride_kh", "KV * HEAD_DIM, H, stride_kh")], "rope",
        "touches memory outside the tensors",
    ),
    "silu of gate * up": ("swiglu_kernel", [("gate * tl.sigmoid(gate) * up", "gate * up * tl.sigmoid(gate * up)")],
                          "swiglu", "silu is applied to gate * up"),
}  # fmt: skip
#: k heads past KV (KV = 3 in a block of 4) are written into the next token's k_out, and the last token's past it
INTERPRETER_ONLY = {"k rotated with q's head count"}


@pytest.mark.parametrize(
    "mistake",
    [
        pytest.param(m, marks=pytest.mark.skipif(m in INTERPRETER_ONLY and not ENV.interpret, reason="past k_out"))
        for m in THIRD_BATTERY
    ],
)
def test_third_battery_of_mistakes_gets_named(mistake, monkeypatch, tmp_path):
    """Each fails its check with the hint that names it. Before session 28 all got "Wrong values in many places"
    but the last rope one, which passed: every KV in check_rope was a power of two, so no k head was masked."""
    from utils.mutants import plant

    name, edits, check, words = THIRD_BATTERY[mistake]
    plant(monkeypatch, tmp_path, L, name, *edits)
    with pytest.raises(AssertionError, match=re.escape(words) if words else None):
        SECOND_CHECKS[check]()


# -- a fourth battery (session 29): each got a general hint before ("off by one constant factor", "Wrong values") --

FOURTH_BATTERY = {  # mistake: (function, [(old, new), ...], which check, words of the hint it must get)
    "the sum of squares, not their mean": (
        "rmsnorm_kernel", [("tl.sum(x * x, axis=0) / N + eps", "tl.sum(x * x, axis=0) + eps")], "rmsnorm",
        "the sum of squares stands where their mean belongs",
    ),
    "the RMS of x before the residual is added": (
        "rmsnorm_kernel",
        [("    if HAS_RESIDUAL:\n", "    ss = tl.sum(x * x, axis=0)\n    if HAS_RESIDUAL:\n"),
         ("tl.rsqrt(tl.sum(x * x, axis=0) / N + eps)", "tl.rsqrt(ss / N + eps)")],
        "rmsnorm", "the RMS is taken of x before the residual is added",
    ),
    "up missing": ("swiglu_kernel", [("gate * tl.sigmoid(gate) * up", "gate * tl.sigmoid(gate)")], "swiglu",
                   "up is missing"),
    # (session 35) a NaN hint about softmax's -inf rows, "off by one constant factor", "Wrong values in many
    # places" or a precision hint before
    "the mean of x, not of its squares": (
        "rmsnorm_kernel", [("tl.sum(x * x, axis=0) / N + eps", "tl.sum(x, axis=0) / N + eps")], "rmsnorm",
        "the mean is taken of x, not of its squares",
    ),
    "the square root missing": (
        "rmsnorm_kernel", [("tl.rsqrt(tl.sum(x * x, axis=0) / N + eps)", "1.0 / (tl.sum(x * x, axis=0) / N + eps)")],
        "rmsnorm", "the square root is missing",
    ),
    "the weight applied before normalising": (
        "rmsnorm_kernel",
        [("    rstd = ", "    x = x * tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)\n    rstd = "),
         ("(x * rstd * w)", "(x * rstd)")],
        "rmsnorm", "the weight is applied before normalising",
    ),
    "mean over N - 1": ("rmsnorm_kernel", [("/ N + eps", "/ (N - 1) + eps")], "rmsnorm", "divided by N - 1"),
    # (session 36) "Wrong values in many places" before: the tail's squares added to the sum of squares
    "the tail of x loaded as 1.0": (
        "rmsnorm_kernel", [("x = tl.load(x_ptr + offsets, mask=mask, other=0.0)",
                            "x = tl.load(x_ptr + offsets, mask=mask, other=1.0)")],
        "rmsnorm", "the masked lanes past N were loaded as 1.0",
    ),
    "the tail of the residual loaded as 1.0": (
        "rmsnorm_kernel", [("x += tl.load(res_ptr + offsets, mask=mask, other=0.0)",
                            "x += tl.load(res_ptr + offsets, mask=mask, other=1.0)")],
        "rmsnorm", "the masked lanes past N were loaded as 1.0",
    ),
    "silu(gate) + up": ("swiglu_kernel", [("gate * tl.sigmoid(gate) * up", "gate * tl.sigmoid(gate) + up")],
                        "swiglu", "silu(gate) and up are added"),
    "gate and up interleaved": (
        "swiglu_kernel",
        [("gu_ptr + row * stride_gm + cols,", "gu_ptr + row * stride_gm + 2 * cols,"),
         ("gu_ptr + row * stride_gm + N + cols,", "gu_ptr + row * stride_gm + 2 * cols + 1,")],
        "swiglu", "gate and up are read interleaved",
    ),
    "RoPE's first half turned the wrong way": (
        "_rope_heads", [("(x1 * c - x2 * s)", "(x1 * c + x2 * s)")], "rope", "the first half turns the wrong way",
    ),
    # (session 36) "Wrong values in many places" before: one half of gate_up read for both, the weight added
    "up read from the gate's columns": (
        "swiglu_kernel", [("gu_ptr + row * stride_gm + N + cols", "gu_ptr + row * stride_gm + cols")], "swiglu",
        "up is read from the gate's columns",
    ),
    "the gate read from up's columns": (
        "swiglu_kernel", [("gate = tl.load(gu_ptr + row * stride_gm + cols",
                           "gate = tl.load(gu_ptr + row * stride_gm + N + cols")],
        "swiglu", "the gate is read from up's columns",
    ),
    "the weight added": (
        "rmsnorm_kernel", [("(x * rstd * w)", "(x * rstd + w)")], "rmsnorm", "the weight is added, as a bias would be",
    ),
    # (session 37) "Only the last ... elements are wrong ... from index (0, 1, 0, 0) on" before: the position taken
    # as token // T, so each token of sequence b is read and turned as position b (q, k and the tables alike)
    "RoPE's position as token // T": (
        "rope_kernel", [("t = token % T", "t = token // T")], "rope", "the position is taken as t = token // T",
    ),
}  # fmt: skip


# -- a fifth battery (session 30): the RoPE tables read at the wrong rows got a general hint before ----------------

_COS = "c = tl.load(cos_ptr + b * stride_cb + t * stride_ct + half)"
_SIN = "s = tl.load(sin_ptr + b * stride_cb + t * stride_ct + half)"


def _table_rows(offset, tables=(_COS, _SIN)):
    """rope_kernel's table loads with the row offset b * stride_cb + t * stride_ct replaced by offset."""
    return [(load, load.replace("b * stride_cb + t * stride_ct", offset)) for load in tables]


FIFTH_BATTERY = {  # mistake: (function, [(old, new), ...], which check, words of the hint it must get)
    # rows D/2 apart: the table taken for (T, D/2), one angle a pair, as Meta's freqs_cis is
    "table rows D/2 apart": ("rope_kernel", _table_rows("b * stride_cb + t * (HEAD_DIM // 2)"), "rope",
                             "the cos and sin tables are read at rows D/2 apart"),
    "cos rows D/2 apart": ("rope_kernel", _table_rows("b * stride_cb + t * (HEAD_DIM // 2)", [_COS]), "rope",
                           "the cos table is read at rows D/2 apart"),
    "sin rows D/2 apart": ("rope_kernel", _table_rows("b * stride_cb + t * (HEAD_DIM // 2)", [_SIN]), "rope",
                           "the sin table is read at rows D/2 apart"),
    "table rows D/2 apart, the batch's too": ("rope_kernel", _table_rows("(b * T + t) * (HEAD_DIM // 2)"), "rope",
                                              "the cos and sin tables are read at rows D/2 apart"),
    "table rows without t * stride_ct": ("rope_kernel", _table_rows("b * stride_cb"), "rope",
                                         "every position read row 0: the tables' row offset t * stride_ct"),
    "table strides swapped": ("rope_kernel", _table_rows("b * stride_ct + t * stride_cb"), "rope",
                              "the cos and sin tables are read at the wrong rows: position 1 read position 0's"),
}  # fmt: skip


# -- session 31: the tables read at the wrong columns of the right row got "Wrong values in many places" -----------


def _table_columns(column, tables=(_COS, _SIN)):
    """rope_kernel's table loads with the column offset half (the pair's index i) replaced by column."""
    return [(load, load.replace("+ half)", f"+ {column})")) for load in tables]


COLUMN_BATTERY = {  # mistake: (function, [(old, new), ...], which check, words of the hint it must get)
    # 2i: the element's index in Meta's interleaved layout where the pair's belongs
    "table columns 2i": ("rope_kernel", _table_columns("2 * half"), "rope",
                         "the cos and sin tables are read at column 2i for pair i"),
    "cos columns 2i": ("rope_kernel", _table_columns("2 * half", [_COS]), "rope",
                       "the cos table is read at column 2i for pair i"),
    "sin columns 2i": ("rope_kernel", _table_columns("2 * half", [_SIN]), "rope",
                       "the sin table is read at column 2i for pair i"),
    "table columns reversed": ("rope_kernel", _table_columns("HEAD_DIM // 2 - 1 - half"), "rope",
                               "the cos and sin tables are read at the wrong columns of each position's row"),
}  # fmt: skip


# -- probe07: mistakes that got a general or misleading hint ("Wrong values in many places", "off by one constant
# factor: a scale is missing", "the programs do not reach the end of the array") ----------------------------------

_ADD_RESIDUAL_LINE = "x += tl.load(res_ptr + offsets, mask=mask, other=0.0).to(tl.float32)"
PROBE07_BATTERY = {  # mistake: (function, [(old, new), ...], which check, words of the hint it must get)
    # `=` for `+=`: sum_out holds the residual, and x is lost
    "the residual replaces x": ("rmsnorm_kernel", [("x += tl.load(res_ptr", "x = tl.load(res_ptr")], "rmsnorm",
                                "sum_out holds the residual alone"),
    # the sum kept in a variable of its own, its RMS taken, but x itself multiplied by rstd
    "x alone normalised by the RMS of x + residual": (
        "rmsnorm_kernel",
        [(_ADD_RESIDUAL_LINE, "h = x + tl.load(res_ptr + offsets, mask=mask, other=0.0).to(tl.float32)"),
         ("x.to(sum_ptr.dtype.element_ty)", "h.to(sum_ptr.dtype.element_ty)"),
         ("    rstd = tl.rsqrt(tl.sum(x * x", "    else:\n        h = x\n    rstd = tl.rsqrt(tl.sum(h * h")],
        "rmsnorm", "x alone (before the residual is added) is multiplied by rstd",
    ),
    "eps divided by N": ("rmsnorm_kernel", [("tl.sum(x * x, axis=0) / N + eps", "(tl.sum(x * x, axis=0) + eps) / N")],
                         "rmsnorm", "eps is divided by N"),
    # _rope_heads knows HALF, not the head's width: the output's heads overlap, the last ones never written
    "RoPE's output heads HALF apart": ("_rope_heads", [("dst = out_ptr + heads * (2 * HALF)",
                                                        "dst = out_ptr + heads * HALF")], "rope",
                                       "the heads are stored HALF apart"),
    # a copied line with one pointer left: in check_rope's first case q and k are views of one qkv buffer
    "k read from q's pointer": ("rope_kernel", [("k_src = k_ptr +", "k_src = q_ptr +")], "rope",
                                "k is read from q's pointer"),
    # the q line copied for k with its output pointer left: k's rows land at the start of q_out (it got the GQA hint)
    "k written into q_out": ("rope_kernel", [("_rope_heads(k_src, k_out_ptr", "_rope_heads(k_src, q_out_ptr")], "rope",
                             "k is written into q_out"),
}  # fmt: skip


LATER_BATTERIES = FOURTH_BATTERY | FIFTH_BATTERY | COLUMN_BATTERY | PROBE07_BATTERY


@pytest.mark.parametrize("mistake", list(LATER_BATTERIES))
def test_fourth_fifth_and_column_batteries_of_mistakes_get_named(mistake, monkeypatch, tmp_path):
    """The column battery: rope_columns_read, the angles each pair was turned by, matched with the columns of its
    position's row."""
    from utils.mutants import plant

    name, edits, check, words = LATER_BATTERIES[mistake]
    plant(monkeypatch, tmp_path, L, name, *edits)
    with pytest.raises(AssertionError, match=re.escape(words)):
        SECOND_CHECKS[check]()


# -- session 38: a program's sequence and position taken from its token index another way got the memory watch's
# "mask every tl.load" (its reads past q and the tables), or "Only the last ... elements are wrong" ---------------

_B_T = ("b = token // T\n    t = token % T\n",)
TOKEN_BATTERY = {  # mistake: ([(old, new), ...], words of the hint it must get, reads past q: interpreter only)
    "t = token": ([("t = token % T", "t = token")], "sequence 0 is right and every row of every later sequence "
                  "wrong", True),
    "b and t swapped": ([(_B_T[0], "b = token % T\n    t = token // T\n")], "b and t swapped", True),
    "b = token": ([("b = token // T", "b = token")], "b = token, with t = token % T", True),
    "divided by the batch size": ([(_B_T[0], "B = tl.num_programs(0) // T\n    b = token % B\n    t = token // B\n")],
                                  "t = token // B, b = token % B", False),
    "q without its batch offset": ([("q_ptr + b * stride_qb + t * stride_qt", "q_ptr + t * stride_qt")],
                                   "sequence 0 is right and every row of every later sequence wrong", False),
}  # fmt: skip


@pytest.mark.parametrize(
    "mistake",
    [
        pytest.param(m, marks=pytest.mark.skipif(TOKEN_BATTERY[m][2] and not ENV.interpret, reason="reads past q"))
        for m in TOKEN_BATTERY
    ],
)
def test_a_token_index_split_the_wrong_way_is_named(mistake, monkeypatch, tmp_path):
    """rope_tokens_read compares each wrong split of token into (b, t) where it reads inside q and the tables (what
    it reads past them is garbage); a kernel right for sequence 0 alone gets the rows to look at."""
    from utils.mutants import plant

    edits, words, _ = TOKEN_BATTERY[mistake]
    plant(monkeypatch, tmp_path, L, "rope_kernel", *edits)
    with pytest.raises(AssertionError, match=re.escape(words)):
        SECOND_CHECKS["rope"]()


# -- session 53: "Wrong values in many places", "The last 8 columns are wrong in every row: the column tail is not
# masked", "Whole columns were never written ... Use triton.cdiv(N, BLOCK_N) column blocks" (a grid the launcher
# has), or a hint of another mistake at the one-column case, which came first ("up ... lacks the + N") ------------

SESSION53_BATTERY = {  # mistake: (function, [(old, new), ...], which check, words of the hint it must get)
    "the residual loaded from x's pointer": (
        "rmsnorm_kernel", [("x += tl.load(res_ptr", "x += tl.load(x_ptr")], "rmsnorm", "sum_out holds x + x",
    ),
    "RoPE's second half with c for s (a typo)": (
        "_rope_heads", [("(x2 * c + x1 * s)", "(x2 * c + x1 * c)")], "rope",
        "only the second half of each head is wrong",
    ),
    "RoPE's first half with x1 for x2 (a typo)": (
        "_rope_heads", [("(x1 * c - x2 * s)", "(x1 * c - x1 * s)")], "rope",
        "only the first half of each head is wrong",
    ),
    "RoPE's second half loaded from the first": (
        "_rope_heads", [("x2 = tl.load(src + HALF,", "x2 = tl.load(src,")], "rope",
        "Hint: x2 is loaded from the first half",  # named first: at position 0 alone it is "the first half's formula"
    ),
    "SwiGLU's columns without their block's start": (
        "swiglu_kernel", [("cols = tl.program_id(1) * BLOCK_SIZE + tl.arange", "cols = tl.arange")], "swiglu",
        "every column block wrote block 0",
    ),
}  # fmt: skip


@pytest.mark.parametrize("mistake", list(SESSION53_BATTERY))
def test_session_53_battery_of_mistakes_gets_named(mistake, monkeypatch, tmp_path):
    """rope_half_wrong names the half of each head that is wrong where the other is right everywhere; check_rope's
    one-token case (position 0: cos 1, sin 0, where several mistakes give one output) comes last."""
    from utils.mutants import plant

    name, edits, check, words = SESSION53_BATTERY[mistake]
    plant(monkeypatch, tmp_path, L, name, *edits)
    with pytest.raises(AssertionError, match=re.escape(words)):
        SECOND_CHECKS[check]()


def test_swiglu_up_read_one_column_early_is_not_told_a_missing_n(monkeypatch, tmp_path):
    """(session 53) up at + N - 1: at N = 1, the check's first case then, that is up read from the gate's column, and
    the hint said the load "lacks the + N", which it has; the one-column case comes last now."""
    from utils.mutants import plant

    plant(monkeypatch, tmp_path, L, "swiglu_kernel", ("row * stride_gm + N + cols", "row * stride_gm + N - 1 + cols"))
    with pytest.raises(AssertionError) as failure:
        L.check_swiglu(L.swiglu, quiet=True)
    assert "lacks the + N" not in str(failure.value)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_a_nan_row_of_another_mistake_is_not_blamed_on_the_mean_of_x(monkeypatch, tmp_path):
    """rsqrt(mean(x^2) - eps) is NaN in a row of tiny RMS, the only row at M = 1; where that row's mean is negative,
    "the mean of x" is NaN there too, and (session 35) named this mistake in 6 of 12 seeds: check_rmsnorm now drops
    a suspect that is NaN wherever the reference has a number (nan_wherever_ref_is_not), and lets a case whose every
    output is NaN wait for a later one (later_case_tells), where the mean of x itself is still named."""
    from utils.mutants import plant

    plant(
        monkeypatch,
        tmp_path,
        L,
        "rmsnorm_kernel",
        ("tl.sum(x * x, axis=0) / N + eps", "tl.sum(x * x, axis=0) / N - eps"),
    )
    for seed in range(6):
        torch.manual_seed(seed)
        with pytest.raises(AssertionError) as failure:
            L.check_rmsnorm(L.rmsnorm, quiet=True)
        assert "the mean is taken of x" not in str(failure.value), f"seed {seed}"


def test_checks_name_a_launcher_that_returns_one_result_of_two():
    """(session 36) rmsnorm with a residual returns (out, sum_out), rope (q_out, k_out): a launcher that returned its
    first result alone raised Python's own unpacking error from inside the check (utils.returned)."""

    def rmsnorm_out_only(x, w, eps, residual=None, *, out=None, sum_out=None):
        got = L.rmsnorm(x, w, eps, residual=residual, out=out, sum_out=sum_out)
        return got[0] if residual is not None else got

    def rope_q_only(q, k, cos, sin, *, q_out=None, k_out=None):
        return L.rope(q, k, cos, sin, q_out=q_out, k_out=k_out)[0]

    with pytest.raises(AssertionError, match=re.escape("(..., residual=) should return 2 results, (out, sum_out)")):
        L.check_rmsnorm(rmsnorm_out_only, quiet=True)
    with pytest.raises(AssertionError, match=re.escape("rope_q_only should return 2 results, (q_out, k_out)")):
        L.check_rope(rope_q_only, quiet=True)


# -- session 39: the weight applied before normalising passed check_rmsnorm compiled: with w = 1 +- 0.1 it changes a
# row's RMS by about 0.5 %, under bf16's tolerance -------------------------------------------------------------------


def test_every_rmsnorm_suspect_differs_from_the_reference_past_bf16s_tolerance_in_some_gpu_case():
    """A mistake check_rmsnorm names must fail the check where a GPU runs it in bf16: each suspect, built from
    rmsnorm_inputs at the GPU's shapes and rounded to bf16 as a kernel's output is, is farther from the reference
    than bf16's tolerance in at least one case, for each of ten draws of the inputs (with w = 1 +- 0.1, the weight
    applied before normalising was told apart in about six draws of ten). Session 40's H200 failed at seed 9 (its
    draws are CUDA's, and the message did not name the suspect): the weakest suspect here, the sum of squares
    divided by N - 1, came within 1.22 times the tolerance over 100 draws on this CPU, in a single row of 7 of RMS
    ~ sqrt(eps). The GPU's short rows are 3 now, the first of normal RMS: 3.22 times at worst."""
    tol = utils.checking.default_tolerance(torch.bfloat16)
    for seed in range(10):
        torch.manual_seed(seed)
        seen, told = set(), set()
        for M, N in L.RMSNORM_CASES["gpu"]:
            x, r, w = (t.double() for t in L.rmsnorm_inputs(M, N, torch.bfloat16))
            for residual in (None, r):
                ref = L.rmsnorm_ref(x, w, 1e-5, **({} if residual is None else {"residual": residual}))
                ref = ref if residual is None else ref[0]
                for hint, wrong in L.rmsnorm_suspects(x, w, 1e-5, residual).items():
                    seen.add(hint)
                    wrong = wrong.to(torch.bfloat16).double()
                    if not torch.allclose(wrong, ref, rtol=tol.rtol, atol=tol.atol, equal_nan=True):
                        told.add(hint)
        assert seen - told == set(), f"seed {seed}: not told apart: {sorted(seen - told)}"


def test_layer_refuses_args_that_are_not_a_llama_args():
    """(probe07) transformers' LlamaConfig (or None) for args raised Python's AttributeError ("'LlamaConfig' object has
    no attribute 'n_heads'") from inside the layer: now a TypeError naming args and the LlamaArgs to build."""
    from utils.hf import hf_config

    dtype = L.lesson_dtype()
    args = L.TINY
    w = L.random_weights(args, dtype)
    x = torch.randn(1, 5, args.dim, device=ENV.device, dtype=dtype)
    cos, sin = L.rope_tables(5, args.head_dim, dtype=dtype)
    for bad in (hf_config(args), None):
        with pytest.raises(TypeError, match=r"args must be a LlamaArgs.*hidden_size"):
            L.llama_layer(x, w, bad, cos, sin, L.TRITON_OPS)
