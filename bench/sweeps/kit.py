"""What every sweep script needs besides its candidates: a log printed and kept as it goes, and timings that do
nothing under the interpreter. Import it after the script has set TRITON_INTERPRET for --cpu (it asks utils.mode).

    say = Log("l10w")                # prints, and rewrites $OUT/sweep_l10w.txt after every line
    ms = gtime(fn)                   # fn replayed from a CUDA graph, L2 cleared before each repetition
    ms = bench_ms(graphed(fn))       # the same replay, timed as make bench times a row
    ms = bench_ms(fn)                # fn called as make bench calls it (utils.timing)
    gbs = copy_gbs(say)              # a copy of 2**28 int32, the '% copy' ceiling, said and returned

Under the interpreter each timing calls fn once (a smoke test of the path) and returns None (gtime) or NaN
(bench_ms, copy_gbs), so a script's arithmetic on them still runs.
"""

import os

import utils


def on_gpu() -> bool:
    return utils.mode.current().is_gpu


class Log:
    """say(line): print the line and rewrite OUT/sweep_<name>.txt with every line so far (OUT: the folder the GPU
    machine hands back; a run stopped by its time limit keeps what it said)."""

    def __init__(self, name: str):
        self.name, self.lines = name, []

    def __call__(self, line: str = "") -> None:
        print(line, flush=True)
        self.lines.append(line)
        out = os.environ.get("OUT")
        if out:
            with open(os.path.join(out, f"sweep_{self.name}.txt"), "w") as f:
                f.write("\n".join(self.lines) + "\n")


def graphed(fn):
    """fn captured in a CUDA graph (bench.common.graphed), its replay returned; fn itself under the interpreter."""
    if not on_gpu():
        return fn
    from bench import common

    return common.graphed(fn)


def gtime(fn, warmup: int = 5, rep: int = 30):
    """GPU ms of fn() replayed from a CUDA graph (bench.common.graphed), L2 cleared before each repetition
    (triton.testing.do_bench); None under the interpreter, after one call of fn."""
    if not on_gpu():
        fn()
        return None
    import triton.testing

    return triton.testing.do_bench(graphed(fn), warmup=warmup, rep=rep)


def bench_ms(fn) -> float:
    """utils.timing's median ms of fn() (L2 flushed before each repetition), as make bench times a row; NaN under
    the interpreter, after one call of fn."""
    if not on_gpu():
        fn()
        return float("nan")
    from utils import timing

    return timing.bench(fn).ms


def copy_gbs(say, n: int = 2**28) -> float:
    """GB/s of a copy of n int32 (read + write) timed by bench_ms: the ceiling the sweeps' '% copy' is of. Says it;
    NaN under the interpreter (a small copy, once)."""
    import torch

    n = n if on_gpu() else 4096
    src = torch.randint(0, 9, (n,), device=utils.mode.current().device, dtype=torch.int32)
    dst = torch.empty_like(src)
    ms = bench_ms(lambda: dst.copy_(src))
    gbs = 2 * n * 4 / ms / 1e6
    say(f"copy 2^28 int32: {ms:.4f} ms, {gbs:.1f} GB/s (the '% copy' below)")
    return gbs
