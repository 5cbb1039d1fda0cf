"""Where an optimisation must not change the output, the course's kernels give the same bits (utils.bitwise).

Lesson 09 teaches the technique: on inputs built from small integers times powers of two every product and partial
sum is exact, so every correct kernel returns the exactly rounded result, whatever its tiles, program order or
number of programs. Here it is applied to the kernels of the other lessons wherever it holds: an elementwise add,
every matmul variant and configuration, RoPE in prefill and in decode (which must agree, or a token's key depends on
whether it was prefilled or decoded), the V rows a decode step copies into the cache, sorts, top-k and an
integer-valued scan. Kernels with exp, sqrt or division (softmax, RMSNorm, attention) round along the way, so
their tile sizes do change the last bits and they are checked with tolerances instead (tests/test_lesson04.py...).
"""

import pytest
import torch

from lessons import l03_vector_add as L03
from lessons import l05_matmul as L05
from lessons import l07_llm_layer as L07
from lessons import l08_llama_model as L08
from lessons import l10_sort_scan_data as L10
from utils import nan_empty
from utils.bitwise import assert_bitwise_equal, bitwise_equal, exact_matmul_inputs, exact_values
from utils.mode import current

env = current()
DEVICE = env.device
HALF = torch.float16  # the interpreter has no bfloat16; fp16 has the same exactness argument with more bits


def exact_ref(a, b, bias=None, dtype=None):
    """The product computed in fp64 (exact here) and rounded once, as every correct kernel must return it."""
    c = a.double() @ b.double()
    if bias is not None:
        c = c + bias.double()
    return c.to(dtype or a.dtype)


# -- lesson 03: the block size does not change an elementwise result ---------------------------------------------


@pytest.mark.parametrize("BLOCK_SIZE", [16, 128, 1024])
def test_add_gives_the_same_bits_as_torch_at_every_block_size(BLOCK_SIZE):
    n = 3000 + 7
    x, y = torch.randn(n, device=DEVICE), torch.randn(n, device=DEVICE)
    out = L03.add(x, y, out=nan_empty(n), BLOCK_SIZE=BLOCK_SIZE)
    assert_bitwise_equal(out, x + y, name=f"add, BLOCK_SIZE={BLOCK_SIZE}")


# -- lesson 05: every matmul, every configuration, the same bits ----------------------------------------------------

MNK = env.pick(cpu=(37, 45, 70), gpu=(333, 517, 1000))
TILES = env.pick(
    cpu=[dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16), dict(BLOCK_M=32, BLOCK_N=16, BLOCK_K=32)],
    gpu=[
        dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, num_warps=4, num_stages=3),
        dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=32, num_warps=4, num_stages=4),
        dict(BLOCK_M=128, BLOCK_N=64, BLOCK_K=128, num_warps=8, num_stages=2),
    ],
)
if env.is_gpu:  # a GPU with less shared memory (TRITON_HARD_WAY_AS=7.5 or 8.0): fewer stages, room for fp32
    TILES = [L05.shrink(tile, elem=4) for tile in TILES]


def matmul_variants():
    """Every way lesson 05 multiplies: (name, fn(a, b, out=...))."""
    variants = [("matmul_naive", lambda a, b, out: L05.matmul_naive(a, b, out=out))]
    for tile in TILES:
        tag = "x".join(str(tile[k]) for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K"))
        variants.append((f"matmul_tiled {tag}", lambda a, b, out, t=tile: L05.matmul_tiled(a, b, out=out, **t)))
        for group in (1, 2):  # 2 leaves a shorter last group at these sizes
            variants.append(
                (
                    f"matmul_grouped {tag} GROUP_M={group}",
                    lambda a, b, out, t=tile, g=group: L05.matmul_grouped(a, b, out=out, GROUP_M=g, **t),
                )
            )
    variants += [
        ("matmul_autotuned", lambda a, b, out: L05.matmul_autotuned(a, b, out=out)),
        ("matmul", lambda a, b, out: L05.matmul(a, b, out=out)),
        ("matmul_persistent", lambda a, b, out: L05.matmul_persistent(a, b, out=out)),
    ]
    return variants


@pytest.mark.parametrize("dtype", [HALF, torch.float32], ids=["fp16", "fp32"])
def test_every_matmul_variant_and_configuration_gives_the_same_bits(dtype):
    M, N, K = MNK
    a, b = exact_matmul_inputs(M, N, K, dtype, device=DEVICE)
    truth = exact_ref(a, b)
    for name, fn in matmul_variants():
        out = fn(a, b, out=nan_empty((M, N), dtype=dtype))
        assert_bitwise_equal(out, truth, name=f"{name}, {M}x{N}x{K} {dtype}")
    if L05.uses_tma():  # TMA needs rows on 16-byte boundaries: N and K rounded up to multiples of 8
        N8, K8 = -(-N // 8) * 8, -(-K // 8) * 8
        a, b = exact_matmul_inputs(M, N8, K8, dtype, device=DEVICE)
        out = L05.matmul_persistent_tma(a, b, out=nan_empty((M, N8), dtype=dtype))
        assert_bitwise_equal(out, exact_ref(a, b), name=f"matmul_persistent_tma, {M}x{N8}x{K8} {dtype}")


def test_matmul_with_bias_gives_the_same_bits_plain_and_persistent():
    M, N, K = MNK
    a, b = exact_matmul_inputs(M, N, K, HALF, device=DEVICE)
    bias = exact_values((N,), HALF, bits=4, exponents=1, device=DEVICE)
    truth = exact_ref(a, b, bias)
    for fn in (L05.matmul, L05.matmul_persistent):
        assert_bitwise_equal(fn(a, b, bias, out=nan_empty((M, N), dtype=HALF)), truth, name=f"{fn.__name__} + bias")


def test_the_matmul_bitwise_test_can_fail():
    """The same comparison, against a result one ulp away in a single element, fails; against random (inexact)
    inputs two configurations are not expected to agree bit for bit, and the exact inputs are what make them."""
    M, N, K = MNK
    a, b = exact_matmul_inputs(M, N, K, HALF, device=DEVICE)
    out = L05.matmul(a, b)
    nudged = out.clone()
    nudged.view(torch.int16)[M // 2, N // 3] += 1  # the next fp16 number
    with pytest.raises(AssertionError, match=r"1 of \d+ elements differ.*1 ulp"):
        assert_bitwise_equal(nudged, exact_ref(a, b))


# -- lessons 07 and 08: RoPE in prefill and in decode ---------------------------------------------------------------


def exact_rope_inputs(B, T, H, KV, D, max_len, seed=0):
    """q, k, v and cos/sin tables of small integers times powers of two: every x1*c - x2*s is exact in fp16."""
    g = torch.Generator().manual_seed(seed)
    kw = dict(bits=3, exponents=1, device=DEVICE, generator=g)
    q = exact_values((B, T, H, D), HALF, **kw)
    k = exact_values((B, T, KV, D), HALF, **kw)
    v = exact_values((B, T, KV, D), HALF, **kw)
    half = exact_values((max_len, D // 2), HALF, **kw)  # not a real cosine: the kernels do not care
    other = exact_values((max_len, D // 2), HALF, **kw)
    cos, sin = torch.cat([half, half], dim=-1), torch.cat([other, other], dim=-1)  # two equal halves, as in a table
    return q, k, v, cos, sin


def test_prefill_rope_and_decode_rope_write_the_same_bits():
    B, T, H, KV, D, max_len = 2, 5, 4, 2, 16, 8
    q, k, v, cos, sin = exact_rope_inputs(B, T, H, KV, D, max_len)
    q_ref, k_ref = L07.rope_ref(q.double(), k.double(), cos[None, :T].double(), sin[None, :T].double())
    q_pre, k_pre = L07.rope(q, k, cos[None, :T].contiguous(), sin[None, :T].contiguous())
    assert_bitwise_equal(q_pre, q_ref.to(HALF), name="prefill rope: q")
    assert_bitwise_equal(k_pre, k_ref.to(HALF), name="prefill rope: k")

    k_cache = nan_empty((B, max_len, KV, D), dtype=HALF)
    v_cache = nan_empty((B, max_len, KV, D), dtype=HALF)
    for t in range(T):  # the same tokens, one decode step at a time
        qkv = torch.cat([q[:, t], k[:, t], v[:, t]], dim=1).contiguous()  # (B, H + 2 KV, D)
        pos = torch.full((B,), t, dtype=torch.int32, device=DEVICE)
        q_dec = L08.rope_kv_write(qkv, cos, sin, pos, k_cache, v_cache)
        assert_bitwise_equal(q_dec, q_pre[:, t], name=f"decode rope at position {t}: q")
    assert_bitwise_equal(k_cache[:, :T], k_pre, name="the keys decode wrote into the cache")
    assert_bitwise_equal(v_cache[:, :T], v, name="the values decode copied into the cache")
    assert not bitwise_equal(k_cache[:, :T], k), "the keys were rotated: they must differ from the unrotated ones"


# -- lesson 10: sorting, top-k and an exact scan ---------------------------------------------------------------------


def test_sort_and_top_k_return_torch_s_values_bit_for_bit():
    M, N, k = 3, 300, 7
    x = torch.randn(M, N, device=DEVICE)
    x[:, ::5] = x[:, 1::5][:, : x[:, ::5].shape[1]]  # ties: equal values must still come back as the same bits
    values, _ = L10.sort_rows(x)
    assert_bitwise_equal(values, torch.sort(x, dim=-1).values, name="sort_rows values")
    top, _ = L10.top_k(x, k, BLOCK_SIZE=64)  # several blocks, then a merge
    assert_bitwise_equal(top, torch.topk(x, k, dim=-1).values, name="top_k values")


@pytest.mark.parametrize("BLOCK_SIZE", [16, 64, 256])
def test_an_integer_valued_scan_gives_the_same_bits_at_every_block_size(BLOCK_SIZE):
    n = 1000 + 3
    x = torch.randint(-50, 50, (n,), device=DEVICE).float()  # every partial sum is an integer below 2**24: exact
    assert_bitwise_equal(L10.cumsum(x, BLOCK_SIZE=BLOCK_SIZE), torch.cumsum(x, 0), name=f"cumsum, {BLOCK_SIZE}")


def test_every_group_by_plan_gives_the_same_bits_on_exact_values():
    """Atomics add in whatever order the programs reach them; on multiples of 1/4 every order gives one sum."""
    df = L10.random_table(2000, 13, seed=3)
    table = L10.table_from_pandas(df)
    results = {method: L10.query(table, 0.3, 13, method=method) for method in L10.GROUPBY_PLANS}
    assert set(results) >= {"atomic", "partials", "packed", "sorted"}
    for method, result in results.items():
        for column in ("key", "sum", "count"):
            assert_bitwise_equal(result[column], results["atomic"][column], name=f"{method} vs atomic: {column}")
    ref = L10.query_ref(df, 0.3)
    sums = torch.tensor(ref["sum"].to_numpy(), device=DEVICE).to(results["atomic"]["sum"].dtype)
    assert_bitwise_equal(results["atomic"]["sum"], sums, name="the sums against pandas")
