"""Lesson 12 profile, issue 15: why the int4 decode step at the 1B shapes is 1.5-1.6x bf16, not 2x.

Run from the repo root: ``PYTHONPATH=$PWD python3 bench/sweeps/l12ze.py`` on the GPU (< 120 s); ``--cpu`` runs a
tiny model's steps under the interpreter (no profile: a smoke test of the script).

Not a sweep: it chooses nothing. At Llama-3.2-1B's and TinyLlama's shapes (random weights, bf16 activations,
context 640 as make bench's decode rows), lesson 08's bf16 step and lesson 12's int4 (g128) and int8 steps, each:
  - the step as make bench times it (the fill, then the graph's replay; L2 cleared before each repetition), against
    a copy of the weights' bytes (model_weight_bytes + the KV cache read): the time the bytes alone would take;
  - one replay under torch.profiler (CUPTI sees each kernel inside the graph): the first layer's kernels in order
    with grid, time and gap (negative: launched early, PDL), the head and the step's tail; then every kernel name
    summed (launches, us a step, mean, share of the span) and the idle time between kernels.
At 8B (make bench: 2.24x) the weights' bytes set the int4 step's time; at 1B the question is which kernels take
longer than their bytes, and whether their number or their length is the cost.
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
from bench.common import random_llama  # noqa: E402
from bench.sweeps.kit import Log, bench_ms, graphed, on_gpu  # noqa: E402
from lessons import l08_llama_model as L8  # noqa: E402
from lessons import l12_quantization as L12  # noqa: E402

say = Log("l12ze")
ENV = utils.mode.current()
GPU = on_gpu()
PROMPT, NEW = (512, 256) if GPU else (8, 8)
CONTEXT = PROMPT + NEW // 2
GROUP = 128 if GPU else 32

say(f"lesson 12 profile l12ze on {ENV.gpu_name if GPU else 'CPU (interpreter)'}, torch {torch.__version__}, "
    f"triton {__import__('triton').__version__}; FUSED_INT4_KERNEL {L12.FUSED_INT4_KERNEL!r}, "
    f"INT4_PACKED_DOTS {L12.INT4_PACKED_DOTS}, QUANTIZED_PDL {L12.QUANTIZED_PDL}, DECODE_FUSIONS {L8.DECODE_FUSIONS}")  # fmt: skip


def decoder(model):
    ids = torch.randint(0, model.args.vocab_size, (1, PROMPT), device=ENV.device)
    L8.generate(model, ids, 2, max_len=PROMPT + NEW)
    (dec,) = [d for key, d in model.decoders.items() if key[:2] == (1, PROMPT + NEW)]
    return dec


def profile(dec, tag, n_layers):
    from torch.profiler import ProfilerActivity, profile

    def step():
        dec.pos.fill_(CONTEXT)
        dec.step()

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        for _ in range(3):
            step()
        torch.cuda.synchronize()
    path = os.path.join(os.environ.get("OUT", tempfile.gettempdir()), f"l12ze_{tag}.json")
    prof.export_chrome_trace(path)
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    os.remove(path)  # 1-2 MB a trace: the lines below are what is kept
    kernels = sorted((e for e in events if e.get("cat") == "kernel"), key=lambda e: e["ts"])
    fills = [i for i, e in enumerate(kernels) if "fill" in e["name"].lower()]
    last = kernels[fills[-1] :] if fills else kernels
    span = last[-1]["ts"] + last[-1]["dur"] - last[0]["ts"]
    say(f"  one step under the profiler: {len(last)} kernels, span {span / 1e3:.4f} ms")
    sums, end, gaps, lines = {}, None, 0.0, []
    for e in last:
        short = e["name"].split("(")[0].split("<")[0][:44]
        gap = 0.0 if end is None else e["ts"] - end
        gaps += max(gap, 0.0)
        lines.append(
            f"    {short:44s} grid {str(e.get('args', {}).get('grid')):16s} {e['dur']:7.2f} us  gap {gap:6.2f}"
        )
        sums.setdefault(short, [0, 0.0])
        sums[short][0] += 1
        sums[short][1] += e["dur"]
        end = max(end or 0.0, e["ts"] + e["dur"])
    per_layer = max(1, (len(last) - 8) // n_layers)
    say(f"  the first {3 + 2 * per_layer} kernels (the fill, the embedding, two layers) and the last 7:")
    for line in lines[: 3 + 2 * per_layer] + ["    ..."] + lines[-7:]:
        say(line)
    say("  by name: launches, us a step, us a launch, share of the span")
    for name, (n, us) in sorted(sums.items(), key=lambda kv: -kv[1][1]):
        say(f"    {name:44s} {n:4d} {us:9.1f} us {us / n:7.2f} {100 * us / span:5.1f}%")
    say(f"    idle between kernels: {gaps:.1f} us; kernels' sum {sum(v[1] for v in sums.values()):.1f} us")


shapes = ("Llama-3.2-1B", "TinyLlama-1.1B") if GPU else ("tiny",)
for shape in shapes:
    if GPU:
        base = random_llama(shape, torch.bfloat16)
    else:
        tiny = L8.ModelArgs(vocab_size=96, n_layers=2, dim=64, n_heads=4, n_kv_heads=2, ffn_dim=96, tie_embeddings=True)
        base = random_llama(tiny, torch.float32, device="cpu")
    model_args = base.args
    kv = L8.kv_cache_bytes(model_args, 1, CONTEXT)
    say(f"\n== {shape}: {model_args.n_layers} layers, dim {model_args.dim}, MLP {model_args.ffn_dim}, "
        f"vocabulary {model_args.vocab_size}")  # fmt: skip
    bf16_ms = None
    for fmt in ("bf16", "int4", "int8"):
        model = base if fmt == "bf16" else L12.quantize_model(base, 4 if fmt == "int4" else 8, GROUP)
        dec = decoder(model)
        nbytes = L12.model_weight_bytes(model) + kv
        src = torch.empty(nbytes // 4, dtype=torch.int16, device=ENV.device)
        dst = torch.empty_like(src)
        copy = bench_ms(graphed(lambda: dst.copy_(src)))
        del src, dst

        def step():
            dec.pos.fill_(CONTEXT)
            dec.step()

        ms = bench_ms(step)
        bf16_ms = ms if fmt == "bf16" else bf16_ms
        say(f"-- {shape} {fmt}: the step {ms:.4f} ms ({bf16_ms / ms:.2f}x bf16); {nbytes / 1e6:.0f} MB of weights "
            f"and cache, a copy of them {copy:.4f} ms ({100 * copy / ms:.1f}% of the step)")  # fmt: skip
        if GPU:
            profile(dec, f"{shape}_{fmt}", model_args.n_layers)
        if fmt != "bf16":
            model.decoders.clear()
            del model
    base.decoders.clear()
    del base
    if GPU:
        torch.cuda.empty_cache()
say(f"total {time.time() - T0:.0f} s")
