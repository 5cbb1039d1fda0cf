"""Lesson 08 sweep q, 2026-11-23 (session 7): the schedule of the qkv GEMV with RoPE and the cache write
(decode_qkv_rope), issue 11. Run from the repo root: ``PYTHONPATH=$PWD python3 bench/sweeps/l08q.py`` on the GPU
(< 90 s); ``--cpu``: tiny shapes under the interpreter (a smoke test).

Why: the profile (bench/sweeps/l08p.py, results/h100-2026-11-23-s7/sweeps/l08p.txt) had decode_qkv_rope_kernel at
6.3 us a launch for a 10.5 MB weight, 56 % of the copy bandwidth, where the other GEMVs of the step reached about
85 %. Its schedule is DECODE_GEMV_SCHEDULES' (2560, 2048) row, chosen for the plain GEMV before RoPE moved in, with
num_stages 1 (no prefetch: nothing to load before the early launch's wait either).

Part A: decode_qkv_rope alone at TinyLlama-1.1B's shape (2560 x 2048, bf16, pos 640), in a CUDA graph, each
candidate checked first by check_decode_qkv_rope with that schedule. Part B: the whole batch-1 step (l08c.py's model)
with the table's row and with Part A's best, in a CUDA graph.
  -> edit: DECODE_GEMV_SCHEDULES[(2560, 2048)] in solutions/08_llama_model.ipynb, if Part B's line says so.
"""

import math
import os
import sys
import time

T0 = time.time()
CPU = "--cpu" in sys.argv
if CPU:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch

import utils
from lessons import l07_llm_layer as L7
from lessons import l08_llama_model as L8

ENV = utils.mode.current()
LINES = []
GS = L8.GemvSchedule


def say(line=""):
    print(line, flush=True)
    LINES.append(line)


def gtime(fn):
    if CPU:
        fn()
        return None
    import triton.testing

    from bench.common import graphed

    return triton.testing.do_bench(graphed(fn), warmup=5, rep=40)


def first_line(e):
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0][:150] if text else ''}"


if CPU:
    DT = torch.float32
    ARGS = L8.ModelArgs(vocab_size=100, n_layers=2, dim=64, n_heads=4, n_kv_heads=2, ffn_dim=48, tie_embeddings=False)
    CONTEXT, MAX_LEN = 16, 24
    CANDIDATES = [GS(4, 32, 4, 1), GS(8, 64, 4, 2)]
else:
    DT = torch.bfloat16
    ARGS = L8.ModelArgs(vocab_size=32000, n_layers=22, dim=2048, n_heads=32, n_kv_heads=4, ffn_dim=5632,
                        tie_embeddings=False)  # fmt: skip
    CONTEXT, MAX_LEN = 640, 768
    CANDIDATES = [GS(4, 1024, 4, 2), GS(8, 1024, 4, 1), GS(8, 1024, 4, 2), GS(8, 512, 4, 2), GS(16, 512, 8, 2),
                  GS(16, 256, 4, 2), GS(8, 2048, 8, 2), GS(4, 2048, 4, 2), GS(2, 2048, 4, 2)]  # fmt: skip
KEY = ((ARGS.n_heads + 2 * ARGS.n_kv_heads) * ARGS.head_dim, ARGS.dim)
TABLE = L8.DECODE_GEMV_SCHEDULES.get(KEY, L8.DECODE_GEMV_SCHEDULES[None])

say(f"lesson 08 sweep q (decode_qkv_rope's schedule) on {ENV.gpu_name if ENV.is_gpu else 'CPU (interpreter)'}, torch "
    f"{torch.__version__}, triton {__import__('triton').__version__}; the table's row {KEY}: {TABLE}")  # fmt: skip

torch.manual_seed(0)
layers = [L7.random_weights(ARGS.layer, DT, ENV.device) for _ in range(ARGS.n_layers)]
embed = (0.1 * torch.randn(ARGS.vocab_size, ARGS.dim, device=ENV.device)).to(DT)
head = (torch.randn(ARGS.vocab_size, ARGS.dim, device=ENV.device) / math.sqrt(ARGS.dim)).to(DT)
MODEL = L8.Model(ARGS, embed, layers, torch.ones(ARGS.dim, device=ENV.device, dtype=DT), head)
cache = L8.new_cache(MODEL, 1, MAX_LEN)
cache.k.normal_()
cache.v.normal_()
pos = torch.tensor([CONTEXT], dtype=torch.int32, device=ENV.device)
x = torch.randn(1, ARGS.dim, device=ENV.device, dtype=DT)
w = layers[0]

say("== A. decode_qkv_rope alone (norm in front), CUDA graph: schedule | us | GB/s of the weight | x the table's row")
results = []
base = None
for s in [TABLE, *CANDIDATES]:
    try:
        L8.check_decode_qkv_rope(lambda *a, s=s, **kw: L8.decode_qkv_rope(*a, schedule=s, **kw), quiet=True)
        ms = gtime(lambda s=s: L8.decode_qkv_rope(x, w.wqkv, cache.cos, cache.sin, pos, cache.k[0], cache.v[0],
                                                  norm=w.attn_norm, schedule=s, pdl=False))  # fmt: skip
    except Exception as e:  # noqa: BLE001
        say(f"{s} | FAIL {first_line(e)}")
        continue
    if ms is None:
        say(f"{s} | ran")
        continue
    base = base or ms
    gbs = w.wqkv.numel() * w.wqkv.element_size() / (ms * 1e-3) / 1e9
    results.append((ms, s))
    say(f"{s}{' (the table)' if s is TABLE else ''} | {ms * 1e3:6.2f} us | {gbs:6.0f} GB/s | x{base / ms:5.2f}")
say(f"  ({time.time() - T0:.0f} s)")

say("== B. the batch-1 step (DECODE_FUSIONS as set), CUDA graph")
token = torch.tensor([7], device=ENV.device)
best = min(results, key=lambda r: r[0])[1] if results else CANDIDATES[0]
step_ms = {}
for label, s in (("the table's row", TABLE), ("A's best", best)):
    saved = L8.DECODE_GEMV_SCHEDULES.get(KEY)
    L8.DECODE_GEMV_SCHEDULES[KEY] = s
    try:
        step_ms[label] = gtime(lambda: L8.decode_step(MODEL, token, pos, cache, L8.TRITON_DECODE))
    except Exception as e:  # noqa: BLE001
        say(f"{label} {s} | ERROR {first_line(e)}")
    finally:
        if saved is None:
            del L8.DECODE_GEMV_SCHEDULES[KEY]
        else:
            L8.DECODE_GEMV_SCHEDULES[KEY] = saved
    ms = step_ms.get(label)
    say(f"{label} {s} | " + ("ran" if ms is None else f"{ms * 1e3:7.1f} us a step"))
a, b = step_ms.get("the table's row"), step_ms.get("A's best")
if a and b:
    edit = f"DECODE_GEMV_SCHEDULES[{KEY}] = {best}" if b < a * 0.99 else "keep the table's row"
    say(f"EDIT: {edit}  (the step x{a / b:.3f})")
say(f"total {time.time() - T0:.0f} s")
out = os.environ.get("OUT")
if out:
    with open(os.path.join(out, "sweep_l08q.txt"), "w") as f:
        f.write("\n".join(LINES) + "\n")
