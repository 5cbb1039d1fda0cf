"""Lesson 08 / 12 profile, 2026-11-23 (session 7): where a batch-1 decode step's time goes, kernel by kernel (issues
11 and 15). Run from the repo root: ``PYTHONPATH=$PWD python3 bench/sweeps/l08p.py`` on the GPU (< 60 s); ``--cpu``
runs the steps under the interpreter (tiny model, no profile: a smoke test of the script).

Not a sweep: it chooses nothing. For lesson 08's bf16 step and lesson 12's int4 (g128) and int8 steps at
TinyLlama-1.1B's shape (random weights, as bench/sweeps/l08c.py builds them), batch 1, 640 tokens of context:
  - the step replayed from its CUDA graph (triton.testing.do_bench, L2 cleared before each repetition): the time a
    token costs;
  - the same step run 20 times under torch.profiler, without a graph: each kernel's GPU time a step (its name, how
    many launches a step, microseconds a launch and a step), summed. The kernels' sum against the graph's time is
    what the gaps between kernels cost; each kernel's share says where bytes or latency go.
Read with results/h100-2026-11-23-s7/sweeps/l08c.txt (the same model, the early launch's effect).
"""

import math
import os
import sys
import time
import warnings

T0 = time.time()
CPU = "--cpu" in sys.argv
if CPU:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch

import utils
from lessons import l07_llm_layer as L7
from lessons import l08_llama_model as L8
from lessons import l12_quantization as L12

ENV = utils.mode.current()
LINES = []


def say(line=""):
    print(line, flush=True)
    LINES.append(line)


if CPU:
    DT, G = torch.float32, 32
    ARGS = L8.ModelArgs(vocab_size=100, n_layers=2, dim=64, n_heads=4, n_kv_heads=2, ffn_dim=48, tie_embeddings=False)
    CONTEXT, MAX_LEN = 16, 24
else:
    DT, G = torch.bfloat16, 128
    ARGS = L8.ModelArgs(vocab_size=32000, n_layers=22, dim=2048, n_heads=32, n_kv_heads=4, ffn_dim=5632,
                        tie_embeddings=False)  # fmt: skip
    CONTEXT, MAX_LEN = 640, 768


def build_model():
    torch.manual_seed(0)
    layers = [L7.random_weights(ARGS.layer, DT, ENV.device) for _ in range(ARGS.n_layers)]
    embed = (0.1 * torch.randn(ARGS.vocab_size, ARGS.dim, device=ENV.device)).to(DT)
    norm = torch.ones(ARGS.dim, device=ENV.device, dtype=DT)
    head = (torch.randn(ARGS.vocab_size, ARGS.dim, device=ENV.device) / math.sqrt(ARGS.dim)).to(DT)
    return L8.Model(ARGS, embed, layers, norm, head)


def profile(label, step, reps=20):
    if CPU:
        step()
        say(f"{label}: ran")
        return
    import triton.testing

    from bench.common import graphed

    graph_ms = triton.testing.do_bench(graphed(step), warmup=5, rep=40)
    step()
    torch.cuda.synchronize()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(reps):
                step()
            torch.cuda.synchronize()
    rows = []
    for e in prof.key_averages():
        us = getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0)
        if us and e.device_type == torch.autograd.DeviceType.CUDA:
            rows.append((us / reps, e.count / reps, e.key))
    total = sum(r[0] for r in rows)
    say(f"== {label}: graph replay {graph_ms * 1e3:.0f} us a step; kernels {total:.0f} us a step (sum of GPU "
        f"times, run without a graph); gaps {graph_ms * 1e3 - total:.0f} us")  # fmt: skip
    for us, count, name in sorted(rows, reverse=True)[:14]:
        say(f"   {us:8.1f} us a step  {count:5.0f} launches  {us / max(count, 1):6.2f} us each  "
            f"{100 * us / total:5.1f} %  {name[:90]}")  # fmt: skip


say(f"lesson 08/12 profile of the batch-1 decode step on {ENV.gpu_name if ENV.is_gpu else 'CPU (interpreter)'}, "
    f"torch {torch.__version__}, triton {__import__('triton').__version__}; DECODE_FUSIONS {L8.DECODE_FUSIONS}, "
    f"QUANTIZED_PDL {L12.QUANTIZED_PDL}")  # fmt: skip
MODEL = build_model()
cache = L8.new_cache(MODEL, 1, MAX_LEN)
cache.k.normal_()
cache.v.normal_()
token = torch.tensor([7], device=ENV.device)
pos = torch.tensor([CONTEXT], dtype=torch.int32, device=ENV.device)
profile("bf16 (lesson 08)", lambda: L8.decode_step(MODEL, token, pos, cache, L8.TRITON_DECODE))
for bits in (4, 8):
    qm = L12.quantize_model(MODEL, bits, G)
    label = f"int{bits}" + (f" g{G}" if bits == 4 else "") + " (lesson 12)"
    profile(label, lambda qm=qm: L12.quantized_decode_step(qm, token, pos, cache, L12.QUANTIZED_DECODE))
say(f"total {time.time() - T0:.0f} s")
out = os.environ.get("OUT")
if out:
    with open(os.path.join(out, "sweep_l08p.txt"), "w") as f:
        f.write("\n".join(LINES) + "\n")
