"""Lesson 12 sweep zk (lessons 08 and 12): is the 1B prefill, the time to first token, the host's time or the GPU's?

Run from the repo root: ``PYTHONPATH=$PWD python3 bench/sweeps/l12zk.py`` on the GPU (< 90 s); ``--cpu`` under the
interpreter (a tiny model, no timings: a smoke test of the script); ``--profile`` adds, for each model, one prefill
under cProfile (the host's costliest functions by own time); ``--dequant=512`` times the int8 and int4 models with
lesson 12's PREFILL_DEQUANT_M at None (the path off) and at 512 (prefill's dequantized matmul), whatever the lesson's
setting, in the same process; ``--generate`` also times lesson 08's ``generate(model, ids, 1)``, make bench's time to
first token, beside the prefill (session 50's make bench found the first token with the path on twice as long as
without, where this sweep's prefill was as long either way); ``--8b`` takes Llama-3-8B's shape (make bench's) instead
of Llama-3.2-1B's. Nothing to edit: it says whether launching with
less host work (utils.launch's prepared launches, as lesson 05's matmul does) could shorten the first token, and by
how much at most.

Why: make bench times the first token from Python. At Llama-3.2-1B's shape lesson 12's int4 model took 7.9 ms and
the bf16 model of lesson 08 5.1 ms (results/h100-2026-12-07-s46/bench-12-pinned-heads), and sweep l08r found lesson
08's bf16 prefill there to be 83 launches at about 55 us each, with lesson 12's launchers costing the host 39-57 us
a call against 11-19 us of GPU time at M = 1 and 16. If the prefill's kernels take less GPU time than their
launches take host time, the GPU waits, and the first token is the host's.

For bf16 (lesson 08), int8 and int4 (lesson 12) models of Llama-3.2-1B's shape (random weights), prompt 512: lesson
08's prefill (the forward that fills the cache, no sampling) timed as make bench times a call, and replayed from a
CUDA graph (the same kernels without the host: what the GPU needs), with the Triton launches of one prefill counted
(triton.knobs.runtime.launch_enter_hook). Host-bound where the first time is well above the second; the gap, over
the launches, is what each launch's host work costs beyond its kernel.
"""

import cProfile
import os
import sys
import time

T0 = time.time()
CPU = "--cpu" in sys.argv
if CPU:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402
import triton  # noqa: E402

import utils  # noqa: E402
from bench.sweeps.kit import Log, bench_ms, count_launches, graphed, say_profile  # noqa: E402
from lessons import l08_llama_model as L8  # noqa: E402
from lessons import l12_quantization as L12  # noqa: E402

# --dequant=512: each quantized model timed with lesson 12's PREFILL_DEQUANT_M at None (off) and at 512 (prefill's
# dequantized matmul from that many rows), in the same process, whatever the lesson's own setting
DEQUANT = [int(a.split("=", 1)[1]) for a in sys.argv if a.startswith("--dequant=")]
say = Log(f"l12zk-triton{triton.__version__}" + (f"-dequant{DEQUANT[0]}" if DEQUANT else "")
          + ("-8b" if "--8b" in sys.argv else ""))  # fmt: skip
ENV = utils.mode.current()


def main():
    from bench.common import random_llama

    say(f"lesson 12 sweep zk on {ENV.gpu_name if ENV.is_gpu else 'CPU (interpreter)'}, torch {torch.__version__}, "
        f"triton {triton.__version__}")  # fmt: skip
    if ENV.is_gpu and "--8b" in sys.argv:
        from bench.lesson12 import LLAMA3_8B

        model, prompt, name = random_llama(LLAMA3_8B, torch.bfloat16), 512, "Llama-3-8B"
    elif ENV.is_gpu:
        model, prompt, name = random_llama("Llama-3.2-1B", torch.bfloat16), 512, "Llama-3.2-1B"
    else:
        args = L8.ModelArgs(vocab_size=100, n_layers=2, dim=64, n_heads=4, n_kv_heads=2, ffn_dim=48,
                            tie_embeddings=False)  # fmt: skip
        model, prompt, name = random_llama(args, torch.float32, device="cpu"), 8, "tiny"
    ids = torch.randint(0, model.args.vocab_size, (1, prompt), device=ENV.device)
    models = {
        "bf16 (lesson 08)": model,
        "int8": L12.quantize_model(model, 8),
        "int4 g128": L12.quantize_model(model, 4, 128),
    }
    setting = {label: L12.PREFILL_DEQUANT_M for label in models}
    if DEQUANT:
        for label in ("int8", "int4 g128"):
            setting[label] = None  # the tiles, the path off
            models[f"{label}, dequant from {DEQUANT[0]}"] = models[label]
            setting[f"{label}, dequant from {DEQUANT[0]}"] = DEQUANT[0]
    say(f"== {name}, batch 1, prompt {prompt}: lesson 08's prefill (the forward that fills the cache); "
        f"PREFILL_DEQUANT_M {L12.PREFILL_DEQUANT_M}")  # fmt: skip
    rounds = 2 if DEQUANT else 1  # both settings twice, interleaved: a drift of the machine shows as a change
    for label, m in [item for _ in range(rounds) for item in models.items()]:
        cache = L8.new_cache(m, 1, prompt + 256)
        L12.PREFILL_DEQUANT_M = setting[label]  # read by fast_schedule at each call

        def run(m=m, cache=cache):
            return L8.prefill(m, ids, cache)

        try:
            run()  # compiled, autotuned, its launches prepared where a launcher prepares them
            n = count_launches(run)
            python_ms = bench_ms(run)
        except Exception as e:  # noqa: BLE001 - a model that does not run is a finding, the others still run
            say(f"  {label:26s} ERROR {type(e).__name__}: {str(e).strip()[:160]}")
            continue
        checked = L8._require_prompt  # its token range check reads tokens.min() and max() on the host: a sync, which
        L8._require_prompt = lambda tokens, model, cache: tuple(tokens.shape)  # a capture refuses (session 48)
        try:
            graph_ms = bench_ms(graphed(run))
        except Exception as e:  # noqa: BLE001 - a prefill that cannot be captured: say why
            say(f"  {label:26s} {n:4d} launches | from Python {python_ms:7.3f} ms | not captured: {type(e).__name__}: "
                f"{' '.join(str(e).split())[:400]}")  # fmt: skip
            continue
        finally:
            L8._require_prompt = checked
        gap = (python_ms - graph_ms) * 1e3 / max(n, 1)
        say(f"  {label:26s} {n:4d} launches | from Python {python_ms:7.3f} ms | replayed from a graph "
            f"{graph_ms:7.3f} ms | x{python_ms / graph_ms:.2f} | {gap:5.1f} us a launch beyond the GPU's time")  # fmt: skip
        if "--generate" in sys.argv:  # make bench's first token: prefill, then the sample, through generate
            first_ms = bench_ms(lambda m=m: L8.generate(m, ids, 1, max_len=prompt + 256))
            say(f"  {label:26s} generate's first token from Python {first_ms:7.3f} ms "
                f"(x{first_ms / python_ms:.2f} the prefill's)")  # fmt: skip
        if "--profile" in sys.argv:  # where the host's time goes: one prefill under cProfile, by own time
            profile = cProfile.Profile()
            profile.runcall(run)
            say_profile(say, profile, f"  {label}: one prefill's host work")
    say(f"total {time.time() - T0:.0f} s")


if __name__ == "__main__":
    main()
