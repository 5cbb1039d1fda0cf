"""What every ``bench/lessonNN.py`` uses: one row type and one way to time a kernel against its baseline.

    from bench.common import Row, paired

    rows = paired({"triton": lambda: add(x, y)}, ("torch.add", lambda: torch.add(x, y)),
                  lesson="03", op="vector add", shape="2^26", dtype="fp32", bytes=add_bytes(x), flops=x.numel())

``paired`` calls every function once first (compiling and autotuning are not timed), then times the baseline, every
implementation, and the baseline again, and credits each implementation with the mean of the two baseline timings:
a GPU that warms up or clocks down during a run would otherwise flatter whatever is timed after the baseline.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable


@dataclass(frozen=True)
class Row:
    """One comparison, both sides timed in the same run. ``bytes``/``flops``: the op's own counts (its minimum
    traffic and arithmetic), credited to both sides, from which the report derives GB/s, TFLOP/s and roof %."""

    lesson: str
    op: str
    shape: str
    dtype: str
    impl: str
    ms: float
    baseline: str
    baseline_ms: float
    bytes: float | None = None
    flops: float | None = None

    def as_dict(self) -> dict:
        return asdict(self)


def paired(
    impls: dict[str, Callable[[], object]],
    baseline: tuple[str, Callable[[], object]],
    *,
    lesson: str,
    op: str,
    shape: str,
    dtype: str,
    bytes: float | None = None,
    flops: float | None = None,
) -> list[Row]:
    """Times each of ``impls`` against ``baseline`` (``(name, fn)``) in this run: one :class:`Row` per impl.

    The baseline is timed first and again after each impl, and each impl is compared with the mean of the two
    baseline timings around it: under sustained tensor-core load an H100's clocks fall over seconds (at 8192^3 cuBLAS
    took 1458 to 1660 us in one sweep: results/h100-2026-11-27-s8/sweeps/l05c.txt), so one baseline taken before a
    list of impls would favour the baseline over the impls timed last."""
    from utils import timing

    if not impls:
        raise ValueError("paired() needs at least one implementation to time")
    base_name, base_fn = baseline
    for fn in (*impls.values(), base_fn):
        fn()  # compile, autotune, allocate workspaces: none of it is timed
    bases = [timing.bench(base_fn, bytes=bytes, flops=flops, label=base_name)]
    if bases[0] is None:
        raise RuntimeError("make bench needs a GPU: utils.timing declined to time under the interpreter")
    timed = {}
    for name, fn in impls.items():
        timed[name] = timing.bench(fn, bytes=bytes, flops=flops, label=name)
        bases.append(timing.bench(base_fn, bytes=bytes, flops=flops, label=base_name))
    return [
        Row(lesson, op, shape, dtype, name, t.ms, base_name, (before.ms + after.ms) / 2, bytes=bytes, flops=flops)
        for (name, t), before, after in zip(timed.items(), bases, bases[1:])
    ]


def graphed(fn: Callable[[], object]) -> Callable[[], object]:
    """``fn`` captured once in a CUDA graph (after warm-up on a side stream, as torch.cuda.graph asks); returns the
    graph's replay. Timing a replay measures the GPU's work without the host's: what a launch costs in Python
    (argument checks, Triton's dispatch) is gone, on both sides of a comparison."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()

    def replay(fn=fn):  # fn stays alive with the replay: the graph reads and writes the memory fn closes over
        graph.replay()

    return replay


def copy_of(nbytes: int) -> Callable[[], object]:
    """A torch copy whose read + write together are ``nbytes`` (half read, half written): the practical ceiling for
    a kernel that moves that many bytes in one launch, timed beside it ("copy of the same bytes" rows)."""
    import torch

    src = torch.empty(nbytes // 4, dtype=torch.int16, device="cuda")
    dst = torch.empty_like(src)
    return lambda: dst.copy_(src)


def plain_copy_gbs(nbytes: int = 1 << 30, copies: int = 50) -> float:
    """Copy bandwidth without the harness (CUDA events around back-to-back 1 GiB copies, best of three): a
    cross-check of the ceiling that ``utils.roofline`` measures with ``utils.timing``."""
    import torch

    src = torch.empty(nbytes // 4, dtype=torch.float32, device="cuda").normal_()
    dst = torch.empty_like(src)
    dst.copy_(src)
    best = float("inf")
    for _ in range(3):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(copies):
            dst.copy_(src)
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) / copies)
    return 2 * nbytes / best / 1e6


def liger(module: str, name: str):
    """Liger-Kernel's ``liger_kernel.ops.<module>.<name>`` (an autograd Function), or None when liger_kernel is not
    installed or has no such op (a baseline, optional: its rows are then left out)."""
    import importlib

    try:
        return getattr(importlib.import_module(f"liger_kernel.ops.{module}"), name, None)
    except Exception:  # noqa: BLE001 - not installed, or an incompatible version: skip quietly
        return None


def with_liger(lesson: str, module: str, name: str, rows_fn: Callable[[object], list[Row]]) -> list[Row]:
    """rows_fn(the Liger op)'s rows, or none when Liger-Kernel is missing or its API differs from the one used."""
    op = liger(module, name)
    if op is None:
        return []
    try:
        return rows_fn(op)
    except Exception as e:  # noqa: BLE001 - a baseline we could not run is left out, with a note, not a crash
        print(f"lesson {lesson}: Liger-Kernel's {name} skipped ({type(e).__name__}: {e})")
        return []


def random_llama(shape, dtype=None, device="cuda"):
    """A Llama model with random weights (lesson 08's flat Model), built without transformers: for timings, where
    the values do not matter. shape: one of LLAMA_SHAPES's names, or lesson 08's ModelArgs (a sweep's tiny model
    under the interpreter, on the CPU). Projections are N(0, 1 / K)."""
    import math

    import torch

    from lessons import l07_llm_layer as L7
    from lessons import l08_llama_model as L8

    dtype = dtype or torch.bfloat16
    args = L8.ModelArgs(**LLAMA_SHAPES[shape]) if isinstance(shape, str) else shape
    layers = [L7.random_weights(args.layer, dtype, device) for _ in range(args.n_layers)]
    embed = (0.1 * torch.randn(args.vocab_size, args.dim, device=device)).to(dtype)
    norm = torch.ones(args.dim, device=device, dtype=dtype)
    head = (
        embed
        if args.tie_embeddings
        else (torch.randn(args.vocab_size, args.dim, device=device) / math.sqrt(args.dim)).to(dtype)
    )
    return L8.Model(args, embed, layers, norm, head)


#: the 1B-class shapes issue 11 names (lesson 08's ModelArgs): TinyLlama-1.1B (22 layers, MLP 5632, 4 KV heads,
#: vocabulary 32000, untied head) and Llama-3.2-1B (16 layers, MLP 8192, 8 KV heads, vocabulary 128256, the head
#: tied to the embeddings; its RoPE scaling changes no timing)
LLAMA_SHAPES = {
    "TinyLlama-1.1B": dict(vocab_size=32000, n_layers=22, dim=2048, n_heads=32, n_kv_heads=4, ffn_dim=5632,
                           tie_embeddings=False),
    "Llama-3.2-1B": dict(vocab_size=128256, n_layers=16, dim=2048, n_heads=32, n_kv_heads=8, ffn_dim=8192,
                         rope_theta=500000.0, tie_embeddings=True),
}  # fmt: skip
