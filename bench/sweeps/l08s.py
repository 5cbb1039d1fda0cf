"""Lesson 08 sweep s, 2026-12-07 (session 52): what the decode step's NaN flag costs.
Run from the repo root: ``PYTHONPATH=$PWD python3 bench/sweeps/l08s.py`` on the GPU (< 90 s;
``scripts/gpu-validate.sh sweep:l08s@120``); ``--cpu``: every part once under the interpreter (a smoke test, no
timings).

Why: session 52 made generate raise once its loop ends if a sequence's logits held a NaN at any step. The flag is
set on the GPU inside the graphed step (``Decoder._advance``: ``self.nan |= logits.isnan().any(-1)``, three small
kernels over the (B, V) logits), so that the loop never waits for the GPU. The prediction: a few microseconds a step,
under 1 % of a 1B model's step (about 0.55 ms in int4, 1 ms in bf16).

What: the decode step of lesson 08 (bf16) and of lesson 12 (int4, groups of 128) at TinyLlama's and Llama-3.2-1B's
shapes (random weights, one sequence at make bench's mean context of 640), replayed from a CUDA graph, with the flag
and with ``_advance`` as it was before it, paired (the step without the flag timed between two timings of the step
with it), three rounds. Nothing to edit: the ratios say what the flag costs.

Session 53 folded the greedy step's flag into the argmax's second launch (``argmax(logits, out=, nan=)``: the
finish kernel knows whether a row's best partial is a NaN), before this sweep had run: "with" is that step now, and
a third timing, "isnan", is session 52's flag (``self.nan |= logits.isnan().any(-1)`` after the argmax).
"""

import os
import sys
import time

T0 = time.time()
if "--cpu" in sys.argv:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch

import utils
from bench.common import random_llama
from bench.sweeps.kit import Log, gtime, on_gpu
from lessons import l08_llama_model as L8
from lessons import l12_quantization as L12

say = Log("l08s")
ROUNDS = 3


def without_the_flag(self, logits):
    """Decoder._advance as it was before session 52: the token drawn and the position, no NaN flag."""
    self.token.copy_(L8.sample(logits, **self.sampling, argmax=self.ops.argmax))
    self.pos += 1


def isnan_flag(self, logits):
    """Decoder._advance as session 52 left it: the token drawn, then the flag in three kernels of its own."""
    self.token.copy_(L8.sample(logits, **self.sampling, argmax=self.ops.argmax))
    self.nan |= logits.isnan().any(-1)
    self.pos += 1


def main():
    env = utils.mode.current()
    if on_gpu():
        dt, group, max_len, context, shapes = torch.bfloat16, 128, 768, 640, ("Llama-3.2-1B", "TinyLlama-1.1B")
    else:
        dt, group, max_len, context = torch.float32, 32, 24, 16
        shapes = (L8.ModelArgs(vocab_size=100, n_layers=2, dim=64, n_heads=4, n_kv_heads=2, ffn_dim=48,
                               tie_embeddings=False),)  # fmt: skip
    with_flag = L8.Decoder._advance
    say(f"{torch.cuda.get_device_name() if on_gpu() else 'CPU'}; the step replayed from a CUDA graph, ms")
    for shape in shapes:
        torch.manual_seed(0)
        bf16 = random_llama(shape, dt, env.device)
        for kind, model in (("bf16", bf16), (f"int4 g{group}", L12.quantize_model(bf16, 4, group_size=group))):
            ids = torch.randint(0, model.args.vocab_size, (1, 8), device=env.device)
            L8.generate(model, ids, 2, max_len=max_len, cuda_graph=False)  # the loop of this shape, no graph of it
            dec = model.decoders[next(iter(model.decoders))]

            def step(dec=dec):
                dec.pos.fill_(context)  # every replay the same position (a step moves it on)
                dec._step()

            times = []
            for _ in range(ROUNDS):
                before = gtime(step)
                L8.Decoder._advance = without_the_flag
                ms = gtime(step)
                L8.Decoder._advance = isnan_flag
                isnan = gtime(step)
                L8.Decoder._advance = with_flag
                times.append((before, ms, gtime(step), isnan))
            name = shape if isinstance(shape, str) else "tiny"
            if not on_gpu():
                say(f"  {name} {kind}: ran")
                continue
            cost = [(b + a) / 2 - ms for b, ms, a, _ in times]
            old = [nan - ms for _, ms, _, nan in times]
            line = "; ".join(f"with {(b + a) / 2:.4f} / without {ms:.4f} / isnan {nan:.4f}" for b, ms, a, nan in times)
            say(f"  {name} {kind}: {line}; the flag in the argmax {1e3 * min(cost):.1f} .. {1e3 * max(cost):.1f} us a "
                f"step ({100 * min(cost) / times[0][1]:.2f} .. {100 * max(cost) / times[0][1]:.2f} %), session 52's "
                f"isnan flag {1e3 * min(old):.1f} .. {1e3 * max(old):.1f} us")  # fmt: skip
            model.decoders.clear()
        del bf16, model
        if on_gpu():
            torch.cuda.empty_cache()
    say(f"done in {time.time() - T0:.0f} s")


if __name__ == "__main__":
    main()
