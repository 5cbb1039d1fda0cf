"""Lesson 08 sweep, issue 11: flash-decoding's keys and values through TMA, toward 80 % of HBM at 8192 tokens.

Run from the repo root: ``PYTHONPATH=$PWD python3 bench/sweeps/l08d.py`` on the GPU (< 150 s),
``PYTHONPATH=$PWD python3 bench/sweeps/l08d.py --cpu`` under the interpreter (tiny shapes, no timings).

Every time here is the GPU's, as bench/ times: decode_attention (both kernels) captured in a CUDA graph
(bench.common.graphed), the replay timed by triton.testing.do_bench, which clears L2 before each repetition.
Columns: time, GB/s of decode_attention_bytes, % of the big copy (bench.common.plain_copy_gbs, 1 GiB copies: the
rate bench's roof % divides by), % of a copy of the same bytes (read + write = the op's bytes, in a graph, timed
the same way: the practical ceiling at that size), x torch SDPA on the same cache (graphed). Each candidate is
first compared with decode_attention_ref (FAIL: max error), with the cache past each length full of NaN (a block
that read those rows as values would make NaN).

Shapes: context 8192 at B=1 and B=8 with TinyLlama's heads (32/4, D=64), B=4 with Llama-3-8B's (32/8, D=128), and
the batch-1 decode step's attention at context 640 (cache max_len 768, bench/lesson08.py's decode step).
Candidates = DecodeSchedule(BLOCK_N, PROGRAMS_PER_SM, MIN_BLOCK_N, num_warps, num_stages, TMA, WHOLE_WAVES):
"table" = DECODE_ATTENTION_SCHEDULES's row (the pointer kernel today), "tma table" = DECODE_ATTENTION_TMA_SCHEDULES's
row; TMA "device" (descriptors each program builds over its sequence's rows) or "host" (built once, the ragged last
block through pointers), see TMA_MODES; a pointer candidate in whole waves tells what the wave alone is worth.
  -> edit: DECODE_ATTENTION_TMA_SCHEDULES[D] = DecodeSchedule(...) (the TMA candidate of the best mean time over
     that head_dim's shapes, relative to the table's row at each), and USE_TMA_DECODE_ATTENTION = True if those
     rows beat the table's at every shape of both head_dims, in solutions/08_llama_model.ipynb (the export cell with
     ``def decode_attention_tma_kernel``), then ``make notebooks``. A pointer candidate that beats the table's row
     at every shape of its head_dim is printed as an EDIT of DECODE_ATTENTION_SCHEDULES[D].
"""

import os
import sys
import time

T0 = time.time()
CPU = "--cpu" in sys.argv
if CPU:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import utils  # noqa: E402
from lessons import l08_llama_model as L  # noqa: E402

ENV = utils.mode.current()
LINES = []
BUDGET_S = 130
DS = L.DecodeSchedule


def say(line=""):
    print(line, flush=True)
    LINES.append(line)


def save():
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "sweep_l08d.txt"), "w") as f:
            f.write("\n".join(LINES) + "\n")


def late(limit=BUDGET_S):
    return time.time() - T0 > limit


def gtime(fn):
    """GPU ms of fn() replayed from a CUDA graph, L2 cleared before each repetition; None on the CPU."""
    if CPU:
        fn()
        return None
    import triton.testing

    from bench.common import graphed

    return triton.testing.do_bench(graphed(fn), warmup=5, rep=30)


def copy_fn(nbytes):
    src = torch.empty(max(nbytes // 4, 1), dtype=torch.int16, device=ENV.device)
    dst = torch.empty_like(src)
    return lambda: dst.copy_(src)


def fmt(ms):
    return "   n/a  " if ms is None else f"{ms * 1e3:8.2f} us"


def name(s):
    """(BLOCK_N, PROGRAMS_PER_SM, MIN_BLOCK_N, num_warps, num_stages[, TMA][, whole waves])"""
    flags = (f", TMA {s.TMA}" if s.TMA else "") + (", whole waves" if s.WHOLE_WAVES else "")
    return f"({s.BLOCK_N}, {s.PROGRAMS_PER_SM}, {s.MIN_BLOCK_N}, {s.num_warps}, {s.num_stages}{flags})"


def host(*fields):
    return DS(*fields, TMA="host", WHOLE_WAVES=True)


def device(*fields):
    return DS(*fields, TMA="device", WHOLE_WAVES=True)


if CPU:
    DTYPE, TOL = torch.float32, 1e-4
    SHAPES = [(1, 4, 2, 16, 40, 40), (2, 8, 2, 32, 70, 64), (1, 8, 1, 128, 24, 19)]  # (B, H, KV, D, max_len, length)
else:
    DTYPE, TOL = torch.bfloat16, 3e-2
    SHAPES = [(8, 32, 4, 64, 8192, 8192), (1, 32, 4, 64, 8192, 8192), (4, 32, 8, 128, 8192, 8192),
              (1, 32, 4, 64, 768, 640)]  # fmt: skip

# smem a TMA program holds: num_stages x (K + V) x BLOCK_N x D x 2 bytes; 228 KB an SM on an H100
CANDIDATES = {
    64: [
        L.DECODE_ATTENTION_SCHEDULES[64],
        L.DECODE_ATTENTION_TMA_SCHEDULES[64],
        L.DECODE_ATTENTION_SCHEDULES[64]._replace(TMA="device"),  # the table's schedule, only the loads changed
        L.DECODE_ATTENTION_SCHEDULES[64]._replace(TMA="host"),
        DS(64, 2, 64, 4, 3, WHOLE_WAVES=True),  # one wave of pointer programs: the wave alone
        host(64, 2, 64, 4, 3),
        device(64, 2, 64, 4, 3),
        host(64, 2, 64, 4, 4),
        device(64, 2, 64, 4, 4),
        host(64, 3, 64, 4, 4),
        host(64, 1, 64, 4, 4),
        host(128, 1, 64, 8, 3),
        host(32, 2, 16, 4, 6),
        # fewer warps a program: with 2 or 4 warps each row of the scores is split between warps, so every step's
        # max and sum meet in shared memory (9 bar.sync a step in the sm_90 PTX); one warp: 3 bar.sync a step
        DS(64, 4, 64, 2, 3, WHOLE_WAVES=True),
        host(64, 4, 64, 2, 3),
        host(32, 8, 32, 1, 3),
        device(32, 8, 32, 1, 3),
    ],
    128: [
        L.DECODE_ATTENTION_SCHEDULES[128],
        L.DECODE_ATTENTION_TMA_SCHEDULES[128],
        L.DECODE_ATTENTION_SCHEDULES[128]._replace(TMA="device"),
        L.DECODE_ATTENTION_SCHEDULES[128]._replace(TMA="host"),
        DS(32, 2, 16, 4, 3, WHOLE_WAVES=True),
        host(32, 2, 16, 4, 3),
        device(32, 2, 16, 4, 3),
        host(32, 2, 16, 4, 4),
        host(64, 1, 16, 4, 3),
        host(64, 2, 16, 8, 3),
        host(32, 1, 16, 4, 6),
        device(64, 1, 16, 8, 4),
        DS(32, 4, 16, 2, 3, WHOLE_WAVES=True),
        host(32, 4, 16, 2, 3),
        host(16, 6, 16, 1, 4),
    ],
}
CANDIDATES = {D: list(dict.fromkeys(c)) for D, c in CANDIDATES.items()}  # the tables' rows may meet a candidate

# ---------------------------------------------------------------------------------------------------------------
say(f"lesson 08 sweep l08d on {ENV.gpu_name if ENV.is_gpu else 'CPU (interpreter)'}, torch {torch.__version__}, "
    f"triton {__import__('triton').__version__}, {ENV.sm_count} SMs, TMA {ENV.supports_tma or ENV.interpret}")  # fmt: skip
big_gbs = None
if not CPU:
    from bench.common import plain_copy_gbs

    big_gbs = plain_copy_gbs(copies=20)
    say(f"big copy (1 GiB, back-to-back, events): {big_gbs:.0f} GB/s")
say("== decode attention (graph, L2 cleared): shape | candidate | time | GB/s | % big copy | % same-bytes copy | "
    "x SDPA | (n_splits, split_len, BLOCK_N)")  # fmt: skip
times = {}  # shape -> {candidate: ms}
for B, H, KV, D, max_len, length in SHAPES:
    shape = f"B={B} H={H} KV={KV} D={D} context={length} max_len={max_len}"
    try:
        q = torch.randn(B, H, D, device=ENV.device, dtype=DTYPE)
        k, v = (torch.randn(B, max_len, KV, D, device=ENV.device, dtype=DTYPE) for _ in range(2))
        lengths = torch.full((B,), length, dtype=torch.int32, device=ENV.device)
        ref = L.decode_attention_ref(q.float(), k.float(), v.float(), lengths)
        k[:, length:], v[:, length:] = float("nan"), float("nan")  # never read as values (the reference did not)
        nbytes = L.decode_attention_bytes(B, H, KV, D, length, q.element_size())
        kt, vt = k[:, :length].transpose(1, 2), v[:, :length].transpose(1, 2)
        sdpa = None if CPU else gtime(lambda: F.scaled_dot_product_attention(q[:, :, None], kt, vt, enable_gqa=True))
        copy = gtime(copy_fn(nbytes))
        say(f"{shape} | torch SDPA | {fmt(sdpa)} | copy of the same {nbytes / 1e6:.1f} MB {fmt(copy)}"
            + ("" if copy is None else f" = {nbytes / copy / 1e6:.0f} GB/s"))  # fmt: skip
    except Exception as e:  # noqa: BLE001
        say(f"{shape} | setup ERROR {str(e).splitlines()[0][:150]}")
        continue
    times[shape] = {}
    for s in CANDIDATES[64 if D <= 64 else 128]:
        tag = {L.decode_schedule(D): " table", L.decode_schedule_tma(D): " tma table"}.get(s, "")
        if late():
            say(f"{shape} | {name(s)}{tag} | SKIPPED (time budget)")
            continue
        try:
            out = torch.full_like(q, float("nan"))
            L.decode_attention(q, k, v, lengths, out=out, schedule=s)
            err = (out.float() - ref).abs().max().item()
            if not err <= TOL:  # NaN fails too
                say(f"{shape} | {name(s)}{tag} | FAIL max error {err:.3g}")
                continue
            ms = gtime(lambda s=s, out=out: L.decode_attention(q, k, v, lengths, out=out, schedule=s))
            splits = L.decode_split(B, KV, max_len, head_dim=D, schedule=s)
            if ms is None:
                say(f"{shape} | {name(s)}{tag} | ok (err {err:.2g}) splits={splits}")
                continue
            times[shape][s] = ms
            say(f"{shape} | {name(s)}{tag} | {fmt(ms)} | {nbytes / ms / 1e6:6.0f} GB/s | "
                f"{100 * nbytes / ms / 1e6 / big_gbs:5.1f}% big copy | {100 * copy / ms:5.1f}% same-bytes copy | "
                f"x{sdpa / ms:5.2f} SDPA | {splits}")  # fmt: skip
        except Exception as e:  # noqa: BLE001
            say(f"{shape} | {name(s)}{tag} | ERROR {str(e).splitlines()[0][:150]}")
    q = k = v = kt = vt = None
    save()

# ---------------------------------------------------------------------------------------------------------------
say("== choice: each candidate's time / the table's row at each shape of its head_dim (mean; < 1 = faster)")
wins = {}
for D in (64, 128):
    shapes = [sh for sh in times if f" D={D} " in sh]
    table = L.decode_schedule(D)
    if not shapes or not all(table in times[sh] for sh in shapes):
        say(f"D={D}: no timings of the table's row at every shape (CPU run, or skipped): no choice")
        continue
    ratio = {}
    for s in CANDIDATES[D]:
        if all(s in times[sh] for sh in shapes):
            ratio[s] = [times[sh][s] / times[sh][table] for sh in shapes]
            say(f"D={D} | {name(s)} | " + " ".join(f"{r:.3f}" for r in ratio[s])
                + f" | mean {sum(ratio[s]) / len(shapes):.3f}")  # fmt: skip
    tma = {s: r for s, r in ratio.items() if s.TMA}
    if tma:
        best = min(tma, key=lambda s: sum(tma[s]))
        wins[D] = all(r < 1 for r in tma[best])
        say(f"EDIT: DECODE_ATTENTION_TMA_SCHEDULES[{D}] = {best}   (x{1 / max(tma[best]):.3f} the table's row at "
            f"its worst shape, {'faster' if wins[D] else 'NOT faster'} at every shape)")  # fmt: skip
    pointer = {s: r for s, r in ratio.items() if not s.TMA and s != table and all(x < 1 for x in r)}
    if pointer:
        best = min(pointer, key=lambda s: sum(pointer[s]))
        say(f"EDIT: DECODE_ATTENTION_SCHEDULES[{D}] = {best}   (the pointer kernel, faster at every shape)")
if len(wins) == 2:
    say("EDIT: USE_TMA_DECODE_ATTENTION = True" if all(wins.values()) else
        "keep USE_TMA_DECODE_ATTENTION = False (the TMA rows are not faster at every shape)")  # fmt: skip
say(f"total {time.time() - T0:.0f} s")
save()
