"""The serving harness of lesson 13: a request trace, a clock, a replay loop, its metrics, and two pictures.

    from utils import serving
    trace = serving.make_trace(40, rate=8.0, seed=0, vocab_size=320)
    record = serving.replay(engine, trace, serving.CostClock())
    serving.metrics_table({"in-flight": record})

The lesson writes the engine (scheduler, paged KV cache, kernels); this module only feeds it requests at their
arrival times and writes down when each token came out. An engine is anything with ``add(request)``,
``has_work()`` and ``step() -> StepInfo``.

Two clocks: :class:`CostClock` turns what a step computed into a time with a small cost model (deterministic, so
the CPU gives the same numbers every run), :class:`WallClock` measures the step (on a GPU, after a synchronise).
The harness never sleeps: time jumps to the next arrival when the engine is idle.
"""

from __future__ import annotations

import math
import random
import time
import traceback
from dataclasses import dataclass, field

import matplotlib.pyplot as plt
import numpy as np


@dataclass(frozen=True)
class Request:
    """One user's request: its prompt (token ids), how many tokens it may generate, and when it arrives (s)."""

    id: int
    arrival: float
    prompt: tuple
    max_new_tokens: int
    system: int = 0  # how many of the prompt's first tokens are the shared system prompt (0: none)


def _lognormal_int(rng: random.Random, median: float, sigma: float, lo: int, hi: int) -> int:
    return int(min(hi, max(lo, round(rng.lognormvariate(math.log(median), sigma)))))


def make_trace(
    n: int,
    *,
    rate: float = 8.0,
    seed: int = 0,
    vocab_size: int = 320,
    prompt_median: int = 24,
    prompt_max: int = 96,
    output_median: int = 12,
    output_max: int = 64,
    system_len: int = 32,
    shared: float = 0.5,
) -> list[Request]:
    """``n`` requests, seeded: Poisson arrivals at ``rate`` per second (exponential gaps), prompt and output lengths
    log-normal around their medians (a long tail, as chat logs have: most short, a few very long), clipped to
    [1, max]. A fraction ``shared`` of the requests start with the same ``system_len``-token system prompt. Token
    ids lie in [3, vocab_size), past the usual special ids 0-2, where the vocabulary has more than those three."""
    if n < 0 or rate <= 0:
        raise ValueError(f"make_trace needs n >= 0 requests and a positive rate, got n={n}, rate={rate}")
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 1:
        raise ValueError(f"make_trace needs a vocab_size of at least one token, got {vocab_size!r}")
    first = 3 if vocab_size > 3 else 0  # a vocabulary of 3 tokens or fewer (a test config's) has only those
    rng = random.Random(seed)
    system = tuple(rng.randrange(first, vocab_size) for _ in range(system_len))
    trace, t = [], 0.0
    for i in range(n):
        t += rng.expovariate(rate)
        n_own = _lognormal_int(rng, prompt_median, 0.8, 1, prompt_max)
        own = tuple(rng.randrange(first, vocab_size) for _ in range(n_own))
        share = system_len > 0 and rng.random() < shared
        prompt = (system + own)[: max(prompt_max, system_len + 1)] if share else own
        out = _lognormal_int(rng, output_median, 0.9, 1, output_max)
        trace.append(Request(i, t, prompt, out, system_len if share else 0))
    return trace


def trace_summary(trace: list[Request]) -> str:
    """One line per quantity: what the trace asks of the server."""
    if not trace:
        return "an empty trace"
    p = np.array([len(r.prompt) for r in trace])
    o = np.array([r.max_new_tokens for r in trace])
    span = trace[-1].arrival - trace[0].arrival
    return (
        f"{len(trace)} requests over {span:.2f} s ({len(trace) / max(span, 1e-9):.1f}/s); "
        f"prompt tokens p50 {np.median(p):.0f}, p99 {np.percentile(p, 99):.0f}, max {p.max()}; "
        f"output tokens p50 {np.median(o):.0f}, p99 {np.percentile(o, 99):.0f}, max {o.max()}; "
        f"{sum(r.system > 0 for r in trace)} share a {max(r.system for r in trace)}-token system prompt"
    )


@dataclass
class StepInfo:
    """What one engine step did: the tokens it emitted ``(request id, token)``, how many token rows the model
    computed (padding included), how many cached keys attention read, and the KV memory held after it."""

    emitted: list = field(default_factory=list)
    finished: list = field(default_factory=list)  # request ids that completed in this step
    n_tokens: int = 0
    kv_read: int = 0
    kv_bytes: int = 0


class EchoModel:
    """A stand-in for the model when only the scheduling is measured: called like the lesson's ModelRunner
    (``(chunks, copies) -> one token per chunk``), it returns a token computed from the chunk's last token and
    position (never one of the ids below 3, so never an end-of-sequence token). Deterministic, no arithmetic."""

    def __init__(self, vocab_size: int = 320):
        self.vocab_size = vocab_size

    def __call__(self, chunks, copies) -> list:
        return [3 + (toks[-1] * 31 + start + len(toks)) % (self.vocab_size - 3) for toks, start, _ in chunks]


@dataclass(frozen=True)
class CostClock:
    """A step's time from a cost model: ``fixed_ms`` (reading every weight once: the same for 1 token or 100),
    plus ``token_ms`` per token row computed, plus ``kv_ms`` per cached key read. The defaults are a small model
    on a GPU in decode: memory-bound, so the fixed part dominates until the batch is large."""

    fixed_ms: float = 5.0
    token_ms: float = 0.02
    kv_ms: float = 0.0002

    def run(self, step) -> tuple[StepInfo, float]:
        info = step()
        return info, (self.fixed_ms + self.token_ms * info.n_tokens + self.kv_ms * info.kv_read) / 1e3


class WallClock:
    """A step's measured time (a GPU is synchronised before and after, so the time is the kernels')."""

    def run(self, step) -> tuple[StepInfo, float]:
        import torch

        sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
        sync()
        t0 = time.perf_counter()
        info = step()
        sync()
        return info, time.perf_counter() - t0


@dataclass
class Record:
    """A replay's log: per request its arrival and the times of its tokens; the KV memory after each step."""

    arrival: dict = field(default_factory=dict)  # request id -> s
    times: dict = field(default_factory=dict)  # request id -> [s of each token]
    tokens: dict = field(default_factory=dict)  # request id -> [token ids]
    memory: list = field(default_factory=list)  # (s, KV bytes held)
    end: float = 0.0
    steps: int = 0


def _unwritten(error: NotImplementedError) -> str:
    """What a stub's NotImplementedError leaves unsaid: its message, or else the function that raised it."""
    *_, (frame, _) = traceback.walk_tb(error.__traceback__)
    return str(error) or f"{frame.f_code.co_qualname} is not written yet"


def replay(engine, trace: list[Request], clock=None, *, max_steps: int = 1_000_000) -> Record | None:
    """Feeds ``trace`` to ``engine`` at the arrival times, steps it until every request is done, and logs each
    token's time. Returns None (saying why) when the engine's code is still an exercise stub."""
    clock = clock or CostClock()
    pending = sorted(trace, key=lambda r: r.arrival)
    rec, now, i = Record(), 0.0, 0
    try:
        while i < len(pending) or engine.has_work():
            while i < len(pending) and pending[i].arrival <= now:
                engine.add(pending[i])
                rec.arrival[pending[i].id] = pending[i].arrival
                rec.times[pending[i].id], rec.tokens[pending[i].id] = [], []
                i += 1
            if not engine.has_work():
                now = pending[i].arrival  # idle: jump to the next arrival
                continue
            info, dt = clock.run(engine.step)
            now += dt
            rec.steps += 1
            for rid, token in info.emitted:
                rec.times[rid].append(now)
                rec.tokens[rid].append(token)
            rec.memory.append((now, info.kv_bytes))
            if rec.steps >= max_steps:
                raise RuntimeError(f"the engine did not finish the trace in {max_steps} steps: does it make progress?")
    except NotImplementedError as e:
        print(f"replay skipped: part of the engine is still an exercise ({_unwritten(e)}); finish it, or take the "
              f"reference with utils.hints.checkpoint(...) as the exercise says")  # fmt: skip
        return None
    rec.end = now
    return rec


def snapshot(engine, trace: list[Request], steps: int):
    """Feeds every request of ``trace`` at once, runs ``steps`` engine steps, and returns the block tables and
    cached lengths of the requests running then (``({"req 3": [blocks]}, {"req 3": n_cached})``, for
    :func:`block_tables_picture`), or None (saying why) while the engine's code is still an exercise stub."""
    try:
        for r in trace:
            engine.add(r)
        for _ in range(steps):
            if engine.has_work():
                engine.step()
    except NotImplementedError as e:
        print(f"snapshot skipped: part of the engine is still an exercise ({_unwritten(e)})")
        return None
    running = [s for s in engine.running if s.blocks]
    return {f"req {s.request.id}": list(s.blocks) for s in running}, {
        f"req {s.request.id}": s.n_cached for s in running
    }


def metrics(rec: Record) -> dict:
    """Throughput (generated tokens / s from the first arrival to the last token), time to first token and time
    between tokens (p50, p99, in ms), peak and mean KV memory (MB)."""
    ttft = [rec.times[r][0] - rec.arrival[r] for r in rec.times if rec.times[r]]
    tbt = [b - a for ts in rec.times.values() for a, b in zip(ts, ts[1:])]
    n = sum(len(ts) for ts in rec.times.values())
    start = min(rec.arrival.values(), default=0.0)
    mem = np.array([m for _, m in rec.memory] or [0.0])

    def pct(xs, q):
        return 1e3 * float(np.percentile(xs, q)) if xs else float("nan")

    return {
        "requests": len(rec.arrival),
        "tokens": n,
        "steps": rec.steps,
        "tokens/s": n / max(rec.end - start, 1e-12),
        "TTFT p50 ms": pct(ttft, 50),
        "TTFT p99 ms": pct(ttft, 99),
        "TBT p50 ms": pct(tbt, 50),
        "TBT p99 ms": pct(tbt, 99),
        "KV peak MB": float(mem.max()) / 1e6,
        "KV mean MB": float(mem.mean()) / 1e6,
    }


def metrics_table(records: dict):
    """A DataFrame, one row per replay (``{"name": Record}``); replays that were skipped (None) are left out."""
    import pandas as pd

    rows = {name: metrics(rec) for name, rec in records.items() if rec is not None}
    if not rows:
        print("no replay to compare yet")
        return None
    return pd.DataFrame.from_dict(rows, orient="index").round(2)


def memory_picture(records: dict, budget_bytes: float | None = None):
    """KV memory held over time, one line per replay (``{"name": Record}``), with the budget as a dashed line."""
    fig, ax = plt.subplots(figsize=(7, 3), layout="constrained")
    for name, rec in records.items():
        if rec is None or not rec.memory:
            continue
        t, m = zip(*rec.memory)
        ax.step(t, np.array(m) / 1e6, where="post", label=name)
    if budget_bytes:
        ax.axhline(budget_bytes / 1e6, ls="--", color="gray", label="KV budget")
    ax.set(xlabel="time (s)", ylabel="KV cache held (MB)", title="KV memory in use")
    ax.legend(loc="upper right")
    plt.close(fig)  # shown once, as the cell's value, not a second time by the inline backend
    return fig


def block_tables_picture(tables: dict, n_blocks: int, block_size: int, lengths: dict | None = None):
    """The pool of ``n_blocks`` physical blocks (top row) and each request's block table below it (``{"name":
    [physical block of logical block 0, 1, ...]}``): a table entry is drawn in its request's colour and labelled
    with the physical block it points to; a block that several requests point at is hatched (shared: copy on
    write). ``lengths`` (tokens per request) shades how much of the last block is filled."""
    owners: dict = {}
    for name, table in tables.items():
        for blk in table:
            owners.setdefault(blk, []).append(name)
    colours = {name: plt.cm.tab10(i % 10) for i, name in enumerate(tables)}
    rows = len(tables) + 1
    width = max(n_blocks, max((len(t) for t in tables.values()), default=0))
    fig, ax = plt.subplots(figsize=(1.2 + 0.5 * width, 0.55 * rows + 0.9), layout="constrained")
    for blk in range(n_blocks):
        who = owners.get(blk, [])
        face = "white" if not who else colours[who[0]]
        ax.add_patch(plt.Rectangle((blk, rows - 1), 0.9, 0.8, fc=face, ec="black", hatch="//" if len(who) > 1 else ""))
        ax.text(blk + 0.45, rows - 0.6, str(blk), ha="center", va="center", fontsize=8)
    for r, (name, table) in enumerate(tables.items()):
        y = rows - 2 - r
        n = (lengths or {}).get(name)
        for j, blk in enumerate(table):
            fill = 1.0 if n is None else min(1.0, max(0.0, (n - j * block_size) / block_size))
            ax.add_patch(plt.Rectangle((j, y), 0.9, 0.8, fc="white", ec="black"))
            ax.add_patch(plt.Rectangle((j, y), 0.9 * fill, 0.8, fc=colours[name], alpha=0.6,
                                       hatch="//" if len(owners[blk]) > 1 else ""))  # fmt: skip
            ax.text(j + 0.45, y + 0.4, str(blk), ha="center", va="center", fontsize=8)
    ax.set_yticks([rows - 0.6 - r for r in range(rows)], ["pool"] + [f"{name}'s table" for name in tables])
    ax.set_xticks([])
    ax.set_xlim(-0.2, width + 0.2)
    ax.set_ylim(-0.2, rows)
    ax.set_title(f"pool of {n_blocks} blocks of {block_size} tokens (hatched: shared)", loc="left")
    for side in ("top", "right", "bottom", "left"):
        ax.spines[side].set_visible(False)
    plt.close(fig)
    return fig
