"""Lesson 08 profile, issue 11: where the batch-1 decode step at Llama-3.2-1B's shape loses its last 30 % to a copy.

Run from the repo root: ``PYTHONPATH=$PWD python3 bench/sweeps/l08k.py`` on the GPU (< 90 s); ``--cpu`` runs a
tiny model's step under the interpreter (no profile: a smoke test of the script).

Not a sweep: it chooses nothing. make bench's step (bench/lesson08.py: ``dec.pos.fill_(640); dec.step()``, the
step's CUDA graph replayed, L2 cleared before each repetition) at Llama-3.2-1B's shape (random weights, bf16):
  - the step as make bench times it, against a copy of decode_bytes; the same with the fill captured in a graph of
    its own (what the bench's separate fill launch costs), and the step's graph alone repeated without the fill
    (a few steps, the cache never overflows);
  - one replay under torch.profiler (CUPTI sees each kernel inside the graph): every kernel of the step in order,
    its grid, its time, the gap from the end of the one before (negative: launched early, PDL), and for each GEMV
    the GB/s of its weight; then the sums by kind. The kernels that are not GEMVs, and the gaps, are what the
    step spends beyond its bytes.
"""

import json
import os
import sys
import tempfile
import time

T0 = time.time()
if "--cpu" in sys.argv:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402

import utils  # noqa: E402
from bench.common import LLAMA_SHAPES, random_llama  # noqa: E402
from bench.sweeps.kit import Log, bench_ms, graphed, on_gpu  # noqa: E402
from lessons import l08_llama_model as L  # noqa: E402

say = Log("l08k")
ENV = utils.mode.current()
GPU = on_gpu()
PROMPT, NEW = (512, 256) if GPU else (8, 8)
CONTEXT = PROMPT + NEW // 2

say(f"lesson 08 profile l08k on {ENV.gpu_name if GPU else 'CPU (interpreter)'}, torch {torch.__version__}, "
    f"triton {__import__('triton').__version__}; DECODE_FUSIONS {L.DECODE_FUSIONS}")  # fmt: skip
if GPU:
    args = L.ModelArgs(**LLAMA_SHAPES["Llama-3.2-1B"])
    model = random_llama("Llama-3.2-1B", torch.bfloat16)
else:
    args = L.ModelArgs(vocab_size=96, n_layers=2, dim=64, n_heads=4, n_kv_heads=2, ffn_dim=96, tie_embeddings=True)
    model = random_llama(args, torch.float32, device="cpu")
ids = torch.randint(0, args.vocab_size, (1, PROMPT), device=ENV.device)
L.generate(model, ids, 2, max_len=PROMPT + NEW)
(dec,) = [d for key, d in model.decoders.items() if key[:2] == (1, PROMPT + NEW)]


def step():
    dec.pos.fill_(CONTEXT)
    dec.step()


nbytes = L.decode_bytes(args, 1, CONTEXT + 1)
src = torch.empty(nbytes // 4, dtype=torch.int16, device=ENV.device)
dst = torch.empty_like(src)
copy = bench_ms(graphed(lambda: dst.copy_(src)))
ms = bench_ms(step)
say(f"decode_bytes {nbytes / 1e9:.3f} GB; copy of the same bytes {copy:.4f} ms")
say(f"step as make bench times it (fill, then the graph): {ms:.4f} ms = {100 * copy / ms:.1f}% of the copy")
if GPU:
    both = graphed(lambda: (dec.pos.fill_(CONTEXT), dec._step()))
    ms2 = bench_ms(both)
    say(f"fill and step in one graph: {ms2:.4f} ms = {100 * copy / ms2:.1f}% of the copy")
    dec.pos.fill_(CONTEXT - 64)
    torch.cuda.synchronize()
    t = []
    for _ in range(5):  # the graph alone, back to back, the cache at 576..580 (no L2 flush between)
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(10):
            dec.graph.replay()
        e1.record()
        torch.cuda.synchronize()
        t.append(e0.elapsed_time(e1) / 10)
        dec.pos.fill_(CONTEXT - 64)
    say(f"the step's graph alone, 10 back to back (L2 warm): {min(t):.4f} ms = {100 * copy / min(t):.1f}% of the copy")

    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        for _ in range(3):
            step()
        torch.cuda.synchronize()
    path = os.path.join(os.environ.get("OUT", tempfile.gettempdir()), "l08k_trace.json")
    prof.export_chrome_trace(path)
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    kernels = sorted((e for e in events if e.get("cat") == "kernel"), key=lambda e: e["ts"])
    # the last step: from the last fill kernel on
    fills = [i for i, e in enumerate(kernels) if "fill" in e["name"].lower()]
    last = kernels[fills[-1] :] if fills else kernels
    say(
        f"== one step under the profiler: {len(last)} kernels, span {(last[-1]['ts'] + last[-1]['dur'] - last[0]['ts']) / 1e3:.4f} ms"
    )
    C, F, V, H, KV, D = args.dim, args.ffn_dim, args.vocab_size, args.n_heads, args.n_kv_heads, args.head_dim
    weights = {"qkv": (H + 2 * KV) * D * C, "wo": C * H * D, "w13": 2 * F * C, "w2": C * F, "head": V * C}
    sums, end, gaps = {}, None, 0.0
    layer_kind = iter([])
    for e in last:
        name = e["name"]
        short = name.split("(")[0].split("<")[0][:48]
        gap = 0.0 if end is None else e["ts"] - end
        gaps += max(gap, 0.0)
        kind = short
        extra = ""
        if "qkv_rope" in name:
            kind = "qkv (rope, cache write)"
            extra = f" {2 * weights['qkv'] / e['dur'] / 1e3:7.0f} GB/s"
            layer_kind = iter(["wo", "w13", "w2"])
        elif "decode_gemv" in name:
            which = next(layer_kind, "head")
            kind = f"gemv {which}"
            extra = f" {2 * weights[which] / e['dur'] / 1e3:7.0f} GB/s"
        grid = e.get("args", {}).get("grid")
        say(f"  {short:48s} grid {str(grid):16s} {e['dur']:7.2f} us  gap {gap:6.2f} us{extra}")
        sums.setdefault(kind, [0, 0.0])
        sums[kind][0] += 1
        sums[kind][1] += e["dur"]
        end = max(end or 0.0, e["ts"] + e["dur"])
    say("== by kind: launches, us a step, share of the span")
    span = last[-1]["ts"] + last[-1]["dur"] - last[0]["ts"]
    for kind, (n, us) in sorted(sums.items(), key=lambda kv: -kv[1][1]):
        say(f"  {kind:48s} {n:4d} {us:9.1f} us {100 * us / span:5.1f}%")
    say(f"  gaps (idle between kernels): {gaps:.1f} us")
say(f"total {time.time() - T0:.0f} s")
