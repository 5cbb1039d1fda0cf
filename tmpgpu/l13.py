"""Lesson 13 sweep: the paged decode-attention kernel's schedule against lesson 08's contiguous flash-decoding.

Run from the repo root (branch wt-l13 merged): ``PYTHONPATH=$PWD python3 tmpgpu/l13.py`` on the GPU (under 150 s),
``PYTHONPATH=$PWD python3 tmpgpu/l13.py --cpu`` under the interpreter (tiny shapes, timings meaningless).

The four rows of bench/lesson13.py (bf16, pages of 16 tokens in shuffled order, same keys as the contiguous cache).
Per row: lesson 08's ``decode_attention`` (the baseline, timed before and after the candidates), then each
candidate schedule ``(BLOCK_N keys per loop step, programs per SM, num_warps, num_stages)`` through the lesson's
launcher ``paged_attention(..., trusted=True, n_splits=, BLOCK_N=, num_warps=, num_stages=)`` exactly as the bench
calls it, plus the kernel's general chunk path (ONE_QUERY=False, q_start read from memory) and the kernel before
this round (the block table read inside each step, so the key loads wait on it: offline sm_90 compiles show one
K/V buffer at 3 stages, against two with the table read one step ahead) for comparison.

Two times per line: ``ms`` is utils.timing.bench (do_bench with an L2 flush, what `make bench` reports: host launch
overhead shows when the GPU work is a few microseconds), ``graph ms`` is triton's do_bench_cudagraph (GPU time of
the launches only, and no L2 flush: the B=1 cache of 8 MB then sits in L2, for both sides alike). Past 135 s the
remaining candidates are skipped (printed as SKIPPED) so that the summary always prints.
``x`` = baseline ms / candidate ms (above 1: the paged kernel is faster).

The summary picks, per head dim, the schedule whose WORST ratio over that head dim's rows is the highest, and prints
the one-line edit: ``PAGED_SCHEDULES[D] = (...)`` in solutions/13_serving.ipynb (the export cell with
``def paged_schedule``), then ``make notebooks``.
"""

import math
import os
import sys
import time
import traceback

T0 = time.time()
CPU = "--cpu" in sys.argv
if CPU:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

import utils  # noqa: E402
from lessons import l08_llama_model as L08  # noqa: E402
from lessons import l13_serving as L  # noqa: E402

ENV = utils.mode.current()
LINES = []


def say(line=""):
    print(line, flush=True)
    LINES.append(line)


def save():
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "sweep_l13.txt"), "w") as f:
            f.write("\n".join(LINES) + "\n")


if CPU:
    DTYPE, P, TOL = torch.float32, 4, 1e-4
    ROWS = [(1, 4, 2, 16, 37), (3, 4, 1, 32, 50)]
    SMS = 2
else:
    DTYPE, P, TOL = torch.bfloat16, 16, 2e-2
    ROWS = [(1, 32, 4, 64, 8192), (8, 32, 4, 64, 8192), (8, 32, 4, 64, 4097), (4, 32, 8, 128, 8192)]
    SMS = ENV.sm_count or 132

# (BLOCK_N, programs per SM, num_warps, num_stages); the first is lesson 08's own schedule (the current default)
CANDIDATES = [
    (64, 2, 4, 3),
    (32, 2, 4, 3),
    (128, 2, 4, 3),
    (64, 1, 4, 3),
    (64, 4, 4, 3),
    (64, 2, 2, 3),
    (64, 2, 8, 3),
    (64, 2, 4, 2),
    (64, 2, 4, 4),
    (128, 2, 8, 3),
    (128, 4, 4, 2),
    (32, 4, 4, 4),
]
if CPU:
    CANDIDATES = [(16, 2, 4, 1), (32, 1, 4, 1), (16, 4, 2, 1)]


# the lesson's kernel before this round (a table load inside each step, no one-query path), for comparison
@triton.jit
def previous_paged_kernel(
    q_ptr,
    k_pages_ptr,
    v_pages_ptr,
    block_table_ptr,
    lengths_ptr,
    q_start_ptr,
    acc_ptr,
    m_ptr,
    l_ptr,
    H,
    KV,
    GROUP,
    split_len,
    qk_scale,
    stride_table,
    stride_page,
    stride_row,
    PAGE_SIZE: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_Q: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    # -- map program id to (request b, kv head, split of the keys, block of the queries)
    b = tl.program_id(0) // KV
    kv_h = tl.program_id(0) % KV
    split = tl.program_id(1)
    n_splits = tl.num_programs(1)
    q_block = tl.program_id(2)
    q_lo = tl.load(q_start_ptr + b)
    q_len = tl.load(q_start_ptr + b + 1) - q_lo
    length = tl.load(lengths_ptr + b)
    # -- the tile's rows: (query i, head g) pairs; query i sits at position length - q_len + i
    r = tl.arange(0, BLOCK_M)
    qi = q_block * BLOCK_Q + r // GROUP
    live = (r < BLOCK_Q * GROUP) & (qi < q_len)
    row = (q_lo + qi).to(tl.int64) * H + kv_h * GROUP + r % GROUP  # (token, head) flattened, as q is (N, H, D)
    pos = length - q_len + qi
    d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + row[:, None] * HEAD_DIM + d[None, :], mask=live[:, None], other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    # -- this split's keys, up to the last query of the block: [start, end)
    start = split * split_len
    last = tl.minimum(q_block * BLOCK_Q + BLOCK_Q, q_len)
    end = tl.minimum(start + split_len, length - q_len + last)
    table = block_table_ptr + b.to(tl.int64) * stride_table
    for n in range(start, end, BLOCK_N):
        cols = n + tl.arange(0, BLOCK_N)
        keep = cols < end
        # -- logical position -> physical row: the block table entry of its page, then the row in the page
        page = tl.load(table + cols // PAGE_SIZE, mask=keep, other=0).to(tl.int64)
        offs = page[:, None] * stride_page + (cols % PAGE_SIZE)[:, None] * stride_row + kv_h * HEAD_DIM + d[None, :]
        k = tl.load(k_pages_ptr + offs, mask=keep[:, None], other=0.0)
        v = tl.load(v_pages_ptr + offs, mask=keep[:, None], other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * qk_scale  # (BLOCK_M, BLOCK_N), base 2
        s = tl.where(keep[None, :] & (cols[None, :] <= pos[:, None]), s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row with no key yet: p = 0, not NaN
        p = tl.exp2(s - m_safe[:, None])
        alpha = tl.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
        m_i = m_new
    # -- this split's partial result, unnormalised: acc (N, H, n_splits, D), m and l (N, H, n_splits)
    part = row * n_splits + split
    tl.store(acc_ptr + part[:, None] * HEAD_DIM + d[None, :], acc, mask=live[:, None])
    tl.store(m_ptr + part, m_i, mask=live)
    tl.store(l_ptr + part, l_i, mask=live)


def n_splits_for(B, KV, capacity, block_n, per_sm):
    steps = -(-capacity // block_n)
    return max(1, min(steps, -(-per_sm * SMS // max(B * KV, 1))))


def generic_path(q, kp, vp, table, lengths, q_start, block_n=64, per_sm=2, warps=4, stages=3, previous=False):
    """The kernel's general (chunk) path on a decode step, as the launcher before the one-query path ran it
    (previous=True: the kernel before this round, with its table load inside each step)."""
    (N, H, D), (_, P_, KV, _) = q.shape, kp.shape
    B, W = table.shape
    GROUP = H // KV
    BLOCK_M = max(16, triton.next_power_of_2(GROUP))
    capacity = W * P_
    n = n_splits_for(B, KV, capacity, block_n, per_sm)
    per_split = -(-capacity // n)
    split_len = -(-per_split // block_n) * block_n
    n = -(-capacity // split_len)
    acc = torch.empty(N, H, n, D, device=q.device, dtype=torch.float32)
    m = torch.empty(N, H, n, device=q.device, dtype=torch.float32)
    l_ = torch.empty(N, H, n, device=q.device, dtype=torch.float32)
    kernel = previous_paged_kernel if previous else L.paged_attention_kernel
    flag = {} if previous else {"ONE_QUERY": False}
    kernel[(B * KV, n, 1)](
        q, kp, vp, table, lengths, q_start, acc, m, l_, H, KV, GROUP, split_len, L.LOG2E / math.sqrt(D),
        table.stride(0), kp.stride(0), kp.stride(1), PAGE_SIZE=P_, HEAD_DIM=D, BLOCK_Q=BLOCK_M // GROUP,
        BLOCK_M=BLOCK_M, BLOCK_N=block_n, **flag,
        DOT_PRECISION="ieee" if q.dtype == torch.float32 else "tf32", num_warps=1 if CPU else warps,
        num_stages=1 if CPU else stages,
    )  # fmt: skip
    return L.decode_combine(acc, m, l_, out=torch.empty_like(q))


def time_both(fn):
    """(ms as make bench times it, ms of the launches replayed from a CUDA graph) or (None, None) on the CPU."""
    if CPU:
        return None, None
    t = utils.timing.bench(fn)
    try:
        g = triton.testing.do_bench_cudagraph(fn, rep=20)
    except Exception as e:  # noqa: BLE001
        say(f"    (graph timing failed: {str(e).splitlines()[0][:120]})")
        g = None
    return t.ms, g


def fmt(x, spec=".4f"):
    return "n/a" if x is None else format(x, spec)


def main():
    say(f"lesson 13 sweep: {'CPU interpreter (timings meaningless)' if CPU else ENV.gpu_name}, torch "
        f"{torch.__version__}, triton {triton.__version__}, {SMS} SMs, dtype {DTYPE}, page {P}")  # fmt: skip
    gen = torch.Generator(device=ENV.device).manual_seed(0)
    results = {}  # (row, candidate) -> ratio (do_bench) ; None when FAIL
    for B, H, KV, D, context in ROWS:
        row = f"B={B} H={H} KV={KV} D={D} ctx={context}"
        W = -(-context // P)
        q = torch.randn(B, H, D, device=ENV.device, dtype=DTYPE, generator=gen)
        kc, vc = (torch.randn(B, W * P, KV, D, device=ENV.device, dtype=DTYPE, generator=gen) for _ in range(2))
        lengths = torch.full((B,), context, dtype=torch.int32, device=ENV.device)
        perm = torch.randperm(B * W, device=ENV.device, generator=gen)
        table = perm.view(B, W).int()
        kp, vp = (torch.empty(B * W, P, KV, D, device=ENV.device, dtype=DTYPE) for _ in range(2))
        kp[perm] = kc.view(-1, P, KV, D)
        vp[perm] = vc.view(-1, P, KV, D)
        q_start = torch.arange(B + 1, dtype=torch.int32, device=ENV.device)
        ref = L08.decode_attention_ref(q.float(), kc.float(), vc.float(), lengths).to(DTYPE)
        nbytes = L.paged_attention_bytes(B, H, KV, D, context, block_size=P, itemsize=q.element_size())

        def base():
            return L08.decode_attention(q, kc, vc, lengths)

        try:
            err = (base().float() - ref.float()).abs().max().item()
            b0, g0 = time_both(base)
        except Exception as e:  # noqa: BLE001
            say(f"{row} | baseline FAILED: {str(e).splitlines()[0][:160]}")
            continue
        say(f"{row} | baseline lesson 08 contiguous | ms {fmt(b0)} | graph ms {fmt(g0)} | "
            f"{fmt(None if b0 is None else nbytes / b0 / 1e6, '.0f')} GB/s | max err {err:.2e}")  # fmt: skip
        variants = {
            f"paged {c}": (lambda c=c: L.paged_attention(q, kp, vp, table, lengths, max_q_len=1, trusted=True,
                           n_splits=n_splits_for(B, KV, W * P, c[0], c[1]), BLOCK_N=c[0], num_warps=c[2],
                           num_stages=c[3]))  # fmt: skip
            for c in CANDIDATES
        }
        variants["paged default (PAGED_SCHEDULES)"] = lambda: L.paged_attention(
            q, kp, vp, table, lengths, max_q_len=1, trusted=True
        )
        variants["generic chunk path (ONE_QUERY=False), (64, 2, 4, 3)"] = lambda: generic_path(
            q, kp, vp, table, lengths, q_start
        )
        variants["previous kernel (table load in each step, no prefetch), (64, 2, 4, 3)"] = lambda: generic_path(
            q, kp, vp, table, lengths, q_start, previous=True
        )
        variants["previous kernel, (64, 2, 4, 5): 5 stages for its load chain"] = lambda: generic_path(
            q, kp, vp, table, lengths, q_start, stages=5, previous=True
        )
        timed = []
        for name, fn in variants.items():
            if not CPU and time.time() - T0 > 135:
                say(f"{row} | {name} | SKIPPED (time budget)")
                continue
            try:
                out = fn()
                err = (out.float() - ref.float()).abs().max().item()
                if not err <= TOL:
                    say(f"{row} | {name} | FAIL max err {err:.3e}")
                    results[(row, name)] = None
                    continue
                ms, g = time_both(fn)
                timed.append((name, ms, g))
                ratio = None if ms is None else b0 / ms
                gratio = None if (g is None or g0 is None) else g0 / g
                results[(row, name)] = ratio
                say(f"{row} | {name} | ms {fmt(ms)} | graph ms {fmt(g)} | "
                    f"{fmt(None if ms is None else nbytes / ms / 1e6, '.0f')} GB/s | x {fmt(ratio, '.3f')} | "
                    f"graph x {fmt(gratio, '.3f')} | max err {err:.2e}")  # fmt: skip
            except Exception as e:  # noqa: BLE001
                say(f"{row} | {name} | ERROR {type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}")
                if CPU:
                    traceback.print_exc()
        try:
            b1, g1 = time_both(base)
            say(f"{row} | baseline again | ms {fmt(b1)} | graph ms {fmt(g1)}")
        except Exception as e:  # noqa: BLE001
            say(f"{row} | baseline again FAILED: {str(e).splitlines()[0][:160]}")
        if timed and not CPU:
            best = min(timed, key=lambda t: t[1])
            say(f"{row} | BEST {best[0]} | ms {best[1]:.4f} | x {b0 / best[1]:.3f}")
        say(f"  ({time.time() - T0:.0f} s so far)")
        save()
    say("")
    say("best per shape (do_bench ratio, as make bench reports it):")
    rows = sorted({r for r, _ in results})
    for r in rows:
        cands = [(n, x) for (rr, n), x in results.items() if rr == r and x is not None]
        if cands:
            n, x = max(cands, key=lambda t: t[1])
            say(f"  {r}: {n} x {x:.3f}")
    say("per head dim, the schedule with the best WORST ratio over its rows -> the edit in PAGED_SCHEDULES:")
    for D in sorted({row[3] for row in ROWS}):
        rs = [r for r in rows if f" D={D} " in r]
        best, best_min = None, -1.0
        for c in CANDIDATES:
            xs = [results.get((r, f"paged {c}")) for r in rs]
            if xs and all(x is not None for x in xs) and min(xs) > best_min:
                best, best_min = c, min(xs)
        if best is not None:
            say(f"  D={D}: worst ratio {best_min:.3f} with {best} -> set PAGED_SCHEDULES[{D}] = {best}")
        else:
            say(f"  D={D}: no candidate passed on every row (or no timings on the CPU)")
    say(f"done in {time.time() - T0:.0f} s")
    save()


if __name__ == "__main__":
    main()
