"""Lesson 12 for `make bench`: int8 and int4 weight-only matmuls (W8A16, W4A16) and a quantized model's decode.

Every row is timed against cuBLAS's bf16 `x @ w.T` (or the bf16 model) at the same shape, in the same run:

- GEMV at decode's shapes, M = 1 and 16 rows, int4 (groups of 128) and int8, at a 1B-class pair of projections
  (2048 -> 8192 and 8192 -> 2048, TinyLlama's MLP rounded) and an 8B-class pair (4096 -> 14336 and 14336 -> 4096,
  Llama-3-8B's MLP). bytes = the format's own minimum traffic (`w4a16_bytes`: packed codes + scales + zero points
  + activations + output; `w8a16_bytes`: codes + scales + activations + output), so the report's roof % is the
  share of the HBM roofline counting packed bytes, and the ratio at M = 16 is the speed-up over bf16 cuBLAS. int4
  runs `w4a16_fast` (at these shapes the kernels and schedules FAST_SCHEDULES names: the pipelined stream GEMV
  kernel at M = 1; at M = 16 the "mma" kernel, thin tensor-core tiles with the floats built by inline PTX, at
  three shapes (bench/sweeps/l12zb.py), the swapped tile kernel at the 1B down projection), and as
  reference rows `w4a16_magic` (the earlier tl.dot kernel with floats built from bits)
  and the lesson's exercise kernel `w4a16` (plain int -> float conversions); int8 runs `w8a16_fast` (its GEMV
  kernel at M = 1, lesson's tile kernel at M = 16) and, as a reference row, `w8a16`. Each fast launcher is timed
  twice: called from Python (the host's launch included, 50-80 us on the H100 box, longer than these kernels) and
  replayed from a CUDA graph against cuBLAS replayed the same way ("(CUDA graph)" rows: the GPU's time alone,
  L2 flushed before every replay); at M = 1 a torch copy of the same bytes (half read, half written), replayed the
  same way, shows what one launch moving that many bytes reaches (its roof % is the ceiling the GEMV's is held to);
- prefill, M = 2048, at the 8B-class up projection (compute-bound: flops = 2 M N K): the fast launchers (their tile
  kernels: one group a step, the scale in the tile, one chained dot; from PREFILL_DEQUANT_M rows, where it is set,
  the dequantized path), the dequantized path itself (W dequantized a chunk of rows at a time, each chunk handed to
  cuBLAS: schedule "dequant") and, as a reference row, the lesson's `w8a16`;
- end to end: decode tokens/s at batch 1 with bf16 (lesson 08's model and its fused batch-1 step), int8 and int4
  weights (every projection and the LM head quantized; lesson 08's generate runs lesson 12's fused batch-1 step,
  quantized_decode_step, for a quantize_model model, with RoPE and the cache write in its qkv GEMV as
  QUANTIZED_ROPE_IN_QKV says), on TinyLlama-1.1B's shape with random weights (22 layers,
  hidden 2048, 32 query heads sharing 4, MLP 5632, vocabulary 32000) and on Llama-3.2-1B's (16 layers, 32 query heads
  sharing 8, MLP 8192, vocabulary 128256, head tied to the embeddings: bench.common.LLAMA_SHAPES; the decode kernels'
  tables were tuned at TinyLlama's shapes) and, on a GPU with at least 48 GiB, Llama-3-8B's (LLAMA3_8B: 32 layers,
  hidden 4096, MLP 14336, 8 KV heads, vocabulary 128256, head untied), a 512-token prompt and 256 new tokens, each
  decode step replayed from lesson 08's CUDA graph: ms per token = (generate 256 - generate 1) / 255, bytes = the
  weights as stored + the KV cache at the mean context;
- torchao's int4 weight-only linear (`Int4WeightOnlyConfig(group_size=128)`) as a peer, only where torchao is
  installed (`importlib.util.find_spec("torchao")`; otherwise its rows are skipped and the run says so): a GEMV row
  at each shape, and end to end, the same model with every projection and the LM head as torchao's int4 linear
  (tinygemm, as gpt-fast runs it) inside lesson 08's own decode step (its unfused path, the one any weight that is
  not a plain tensor takes: the norms, RoPE, attention and argmax are lesson 08's kernels), graphed the same way.
"""

import importlib.util
import math

import torch

from bench.common import Row, copy_of, graphed, paired, random_llama
from lessons import l08_llama_model as L8
from lessons import l12_quantization as L

DTYPE = torch.bfloat16
GROUP = 128
PROJECTIONS = {"1B": ((2048, 8192), (8192, 2048)), "8B": ((4096, 14336), (14336, 4096))}  # (K in, N out)
PROMPT, NEW = 512, 256
CONTEXT = PROMPT + NEW // 2  # the mean context of the decode steps


def _weight(N, K):
    return torch.randn(N, K, device="cuda", dtype=DTYPE) / math.sqrt(K)


def gemv() -> list[Row]:
    rows = []
    for size, pairs in PROJECTIONS.items():
        for K, N in pairs:
            w = _weight(N, K)
            w8, w4 = L.quantize_int8_ref(w), L.quantize_int4_ref(w, GROUP)
            for M in (1, 16):
                x = torch.randn(M, K, device="cuda", dtype=DTYPE)
                baseline = ("cuBLAS bf16 x @ w.T", lambda x=x, w=w: x @ w.T)
                shape = f"{size} {K}->{N} M={M}"
                int4 = {
                    f"triton int4 g{GROUP}": lambda x=x: L.w4a16_fast(x, w4),
                    f"triton int4 g{GROUP} (magic-number tl.dot kernel)": lambda x=x: L.w4a16_magic(x, w4),
                    f"triton int4 g{GROUP} (lesson's exercise kernel)": lambda x=x: L.w4a16(x, w4),
                }
                int8 = {
                    "triton int8": lambda x=x: L.w8a16_fast(x, w8),
                    "triton int8 (lesson's tile kernel)": lambda x=x: L.w8a16(x, w8),
                }
                graph_base = ("cuBLAS bf16 x @ w.T, CUDA graph", graphed(lambda x=x, w=w: x @ w.T))
                for op, impls, graph_impl, nbytes in (
                    ("W4A16 GEMV", int4, (f"triton int4 g{GROUP} (CUDA graph)", lambda x=x: L.w4a16_fast(x, w4)),
                     L.w4a16_bytes(M, N, K, GROUP)),
                    ("W8A16 GEMV", int8, ("triton int8 (CUDA graph)", lambda x=x: L.w8a16_fast(x, w8)),
                     L.w8a16_bytes(M, N, K)),
                ):  # fmt: skip
                    rows += paired(impls, baseline, lesson="12", op=op, shape=shape, dtype="bf16", bytes=nbytes,
                                   flops=L.wxa16_flops(M, N, K))  # fmt: skip
                    # the same kernel replayed from a CUDA graph, against cuBLAS replayed the same way: the GPU's
                    # time without the host's launch (L2 still flushed before every replay)
                    name, fn = graph_impl
                    graphs = {name: graphed(fn)}
                    if M == 1:  # what a launch moving this many bytes reaches: a copy, read + write = the GEMV's bytes
                        graphs["copy of the same bytes (CUDA graph)"] = graphed(copy_of(nbytes))
                    rows += paired(graphs, graph_base, lesson="12", op=op, shape=shape, dtype="bf16", bytes=nbytes,
                                   flops=L.wxa16_flops(M, N, K))  # fmt: skip
                rows += torchao_peer(w, x, shape, baseline, graph_base)
    return rows


_TORCHAO_SAID = []


def torchao_peer(w, x, shape, baseline, graph_base) -> list[Row]:
    """torchao's int4 weight-only linear on the same weight, where torchao is installed (a peer, not ours): its
    tinygemm packing (PyTorch's own _weight_int4pack_mm, as gpt-fast uses), or its default where the version has no
    packing argument; called from Python and replayed from a CUDA graph, as our rows are."""
    lin = torchao_int4_linear(w)
    if lin is None:
        return []
    fn = lambda: lin(x)  # noqa: E731
    M, K = x.shape
    costs = dict(lesson="12", op="W4A16 GEMV", shape=shape, dtype="bf16", bytes=L.w4a16_bytes(M, w.shape[0], K, GROUP),
                 flops=L.wxa16_flops(M, w.shape[0], K))  # fmt: skip
    return paired({f"torchao int4 g{GROUP}": fn}, baseline, **costs) + paired(
        {f"torchao int4 g{GROUP} (CUDA graph)": graphed(fn)}, graph_base, **costs
    )


def torchao_int4_linear(w):
    """torchao's int4 weight-only linear (groups of GROUP) holding a copy of the (N, K) weight w, or None (with the
    reason printed once) where torchao is missing or cannot quantize here."""
    if importlib.util.find_spec("torchao") is None:
        if not _TORCHAO_SAID:
            print("  torchao is not installed: its int4 weight-only peer rows are skipped")
            _TORCHAO_SAID.append(True)
        return None
    try:
        from torchao.quantization import Int4WeightOnlyConfig, quantize_

        lin = torch.nn.Linear(w.shape[1], w.shape[0], bias=False, device=w.device, dtype=w.dtype)
        with torch.no_grad():
            lin.weight.copy_(w)
        try:  # torchao >= 0.13: the default packing ("plain") wants kernels from another package
            config = Int4WeightOnlyConfig(group_size=GROUP, int4_packing_format="tile_packed_to_4d")
        except TypeError:
            config = Int4WeightOnlyConfig(group_size=GROUP)
        quantize_(lin, config)
        lin(torch.zeros(1, w.shape[1], device=w.device, dtype=w.dtype))
    except Exception as e:  # noqa: BLE001 - an API that moved, a missing backend: say so, keep our rows
        if not _TORCHAO_SAID:
            print(f"  torchao int4 weight-only failed ({type(e).__name__}: {e}): its peer rows are skipped")
            _TORCHAO_SAID.append(True)
        return None
    return lin


class PeerWeight:
    """A weight whose products run a peer's linear: lesson 08's model computes h @ w.T and x.addmm_(a, w.T), which
    PyTorch hands to PeerWeight.__torch_function__ (as lesson 12's Transposed does for its own weights)."""

    def __init__(self, linear):
        self.linear = linear

    T = property(lambda self: self)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if not kwargs and name in ("matmul", "__matmul__") and len(args) == 2 and isinstance(args[1], PeerWeight):
            return args[1].linear(args[0])
        if not kwargs and name == "addmm_" and len(args) == 3 and isinstance(args[2], PeerWeight):
            return args[0].add_(args[2].linear(args[1]))
        return NotImplemented


def peer_model(model, linear_of):
    """The model with every projection and the LM head replaced by linear_of(w), a callable x -> x @ w.T (a
    peer's quantized linear), or None where linear_of returns None for the LM head, the first it is asked for
    (torchao_int4_linear: torchao is missing or cannot quantize here). Lesson 08's steps see weights that are not
    plain tensors and take their unfused path."""
    head = linear_of(model.lm_head)
    if head is None:
        return None
    peer = lambda w: PeerWeight(linear_of(w))  # noqa: E731
    layers = [w._replace(wqkv=peer(w.wqkv), wo=peer(w.wo), w13=peer(w.w13), w2=peer(w.w2)) for w in model.layers]
    return L8.Model(model.args, model.embed, layers, model.norm, PeerWeight(head))


def prefill() -> list[Row]:
    K, N, M = 4096, 14336, 2048
    w = _weight(N, K)
    x = torch.randn(M, K, device="cuda", dtype=DTYPE)
    w8, w4 = L.quantize_int8_ref(w), L.quantize_int4_ref(w, GROUP)
    baseline = ("cuBLAS bf16 x @ w.T", lambda: x @ w.T)
    d4, d8 = L.dequant_schedule(4, GROUP), L.dequant_schedule(8)
    rows = []
    for op, impls, nbytes in (
        ("W4A16 prefill", {f"triton int4 g{GROUP}": lambda: L.w4a16_fast(x, w4),
                           f"triton int4 g{GROUP} (dequantized, then cuBLAS)":
                               lambda: L.w4a16_fast(x, w4, schedule=d4)},
         L.w4a16_bytes(M, N, K, GROUP)),
        ("W8A16 prefill", {"triton int8": lambda: L.w8a16_fast(x, w8),
                           "triton int8 (dequantized, then cuBLAS)": lambda: L.w8a16_fast(x, w8, schedule=d8),
                           "triton int8 (lesson's tile kernel)": lambda: L.w8a16(x, w8)}, L.w8a16_bytes(M, N, K)),
    ):  # fmt: skip
        rows += paired(impls, baseline, lesson="12", op=op, shape=f"8B {K}->{N} M={M}", dtype="bf16", bytes=nbytes,
                       flops=L.wxa16_flops(M, N, K))  # fmt: skip
    return rows


# Llama-3-8B's shape (32 layers, hidden 4096, 32 query heads sharing 8, MLP 14336, vocabulary 128256, head untied):
# where the weights (16 GB in bf16) are most of a decode step's time, not the launches of its kernels
LLAMA3_8B = L8.ModelArgs(vocab_size=128256, n_layers=32, dim=4096, n_heads=32, n_kv_heads=8, ffn_dim=14336,
                         rope_theta=500000.0, tie_embeddings=False)  # fmt: skip
BIG_MODEL_GIB = 48  # its bf16, int8 and int4 copies at once take 29 GB, and quantizing wants room


PEER_STEP = f"torchao int4 g{GROUP} (its linears in lesson 08's unfused step)"


def decode(name, args=None) -> list[Row]:
    """Time to first token, 256 tokens and the decode per token for the bf16, int8 and int4 models of one of
    LLAMA_SHAPES's shapes, or of ``args`` (random weights)."""
    model = random_llama(args or name, DTYPE)
    models = {"int8": L.quantize_model(model, 8), f"int4 g{GROUP}": L.quantize_model(model, 4, GROUP)}
    peer = peer_model(model, torchao_int4_linear)
    ids = torch.randint(0, model.args.vocab_size, (1, PROMPT), device="cuda")

    def gen(m, n):
        return lambda: L8.generate(m, ids, n, max_len=PROMPT + NEW)

    timed = {}
    for n, op in ((1, "time to first token"), (NEW, f"generate {NEW} tokens")):
        impls = {f"triton {q}": gen(m, n) for q, m in models.items()}
        if peer is not None:
            impls[PEER_STEP] = gen(peer, n)
        timed[n] = paired(impls, ("bf16 (lesson 08)", gen(model, n)), lesson="12", op=op,
                          shape=f"{name} B=1 prompt={PROMPT}", dtype="bf16")  # fmt: skip
    rows = timed[1] + timed[NEW]
    kv = L8.kv_cache_bytes(model.args, 1, CONTEXT)
    stored = [*models.items()] + ([(PEER_STEP, models[f"int4 g{GROUP}"])] if peer is not None else [])
    for first, whole, (q, m) in zip(timed[1], timed[NEW], stored):  # the peer's bytes: our int4 format's
        per_token = (whole.ms - first.ms) / (NEW - 1)
        base = (whole.baseline_ms - first.baseline_ms) / (NEW - 1)
        rows.append(Row("12", "decode per token", f"{name} B=1 context={CONTEXT}", "bf16", whole.impl,
                        per_token, whole.baseline, base, bytes=L.model_weight_bytes(m) + kv,
                        flops=L8.decode_flops(model.args, 1, CONTEXT)))  # fmt: skip
        print(f"  decode {name} {q}: {1e3 / per_token:,.0f} tokens/s, bf16 {1e3 / base:,.0f} ({base / per_token:.2f}x)")
    for m in (model, *models.values(), *([peer] if peer is not None else [])):
        m.decoders.clear()  # the CUDA graphs and caches of this shape, before the next
    del model, models, peer
    torch.cuda.empty_cache()
    return rows


def run() -> list[Row]:
    rows = gemv() + prefill() + decode("TinyLlama-1.1B") + decode("Llama-3.2-1B")
    gib = torch.cuda.get_device_properties(0).total_memory / 2**30
    if gib >= BIG_MODEL_GIB:
        rows += decode("Llama-3-8B", LLAMA3_8B)
    else:
        print(f"  decode Llama-3-8B: skipped, this GPU has {gib:.0f} GiB of memory (the rows need {BIG_MODEL_GIB})")
    return rows
