"""Lesson 10 for `make bench`: sorting, top-k, scans and a small analytical query, against PyTorch and pandas.

- segmented sort: rows of 256, 1024 and 4096 fp32 (2**24 elements in all), sort_rows (its SORT_ROWS_SCHEDULES
  network, rows a program and warps per row length: "tiled" is bitonic_sort_tiled's network carrying the indices
  in packed keys, "reg8" the same network with 8 elements a thread in registers, then also "tiled") vs
  torch.sort (both return values and int64 indices); bytes = read x + write values + write indices = 16 bytes per
  element; where the table's network is not tl.sort, sort_rows with tl.sort too (the
  former default); sort_rows at 4096x4096 fp16 (12 bytes per element); plus exercise 1's bitonic_sort (values
  only, credited with the same bytes) at rows of 1024, and bitonic_sort_tiled (values only, the same bytes;
  BITONIC_TILED_SCHEDULES' rows a program and warps) at rows of 1024 and 4096;
- top-k at a vocabulary of 131072 (and 152064), k = 50 and 64, batch 1, 8 and 64: top_k (TOP_K_SCHEDULES'
  method per batch) and exercise 2's whole-block sort (method "sort") vs torch.topk; bytes = top_k_bytes (read
  the logits, write k values and indices);
- device-wide prefix sum of 2**28 int32 and fp32 vs torch.cumsum (same dtype out), bytes = cumsum_bytes (read
  once, write once: the minimum): the one-pass look-back (SCAN_SCHEDULES' block size) and exercise 3's
  reduce-then-scan (which really moves 3/2 of it), plus the default (SCAN_METHOD) when it is neither of those
  schedules; compaction of 2**28 fp32 with half the flags set vs x[keep], both methods likewise (COMPACT_METHOD;
  COMPACT_LOADS: how the values load, e.g. all of them before the look-back; reduce-then-scan at 2048 with one
  block a program, the default with COMPACT_CHUNKS blocks a program), and the look-back with a value and a
  slot an element ("lookback-local": COMPACT_SCHEDULES and COMPACT_LOCAL), bytes = compact_bytes; the same
  without the host's wait for the length (compact_on_device, reduce-then-scan at its COMPACT_SCHEDULES with
  COMPACT_CHUNKS blocks a program and with one, and lookback-local, the count left on the GPU) vs
  x[torch.nonzero_static(keep, size=n)], torch's compaction that does not wait either;
- the query (filter + group-by, sum / count / mean) on 10**8 rows, 16 and 10**7 keys: the atomic, the
  partial-sums (a persistent grid of per-program sums for up to 64 keys, PARTIALS_VARIANT's kernel: 4-bit
  counters and one multiply-add a key for the sums by default; more keys fall back to the atomic plan),
  the packed-atomic (2 atomics a row into one 16-byte slot per key) and the sort-then-reduce plans (query's
  default, GROUPBY_METHODS, is one of them) vs the same query in PyTorch ops (groupby_dense_ref then boolean
  masks), and vs pandas on the machine's CPU: pandas is timed ONCE, with time.perf_counter, in this run, on the
  same 10**8 rows (its row is written by hand: paired() times GPU work with CUDA events, which cannot time a CPU
  library); and the default plan prepared once (prepare_query: its group-by replayed from a CUDA graph, the
  threshold written and the result waited for at every call, as query() does), and its graph replayed alone (the
  threshold's copy, the zeroed accumulators and the group-by's kernel: no finish, no wait), what the kernels
  reach without the host's part;
- the hash join of 2 * 10**7 fact rows with 10**6 unique dimension keys (about 1 in 11 fact keys missing): vs
  the same join in PyTorch ops (sort the right keys, searchsorted) and vs pandas' merge, timed once likewise.

bytes for the query: query_bytes (each of the three columns read once); for the join, both key columns read once
plus the two int64 row-index outputs.
"""

import time

import numpy as np
import torch

from bench.common import Row, paired
from lessons.l10_sort_scan_data import (
    COMPACT_CHUNKS,
    COMPACT_METHOD,
    COMPACT_SCHEDULES,
    SCAN_METHOD,
    SCAN_SCHEDULES,
    bitonic_sort,
    bitonic_sort_tiled,
    bitonic_tiled_schedule,
    compact,
    compact_bytes,
    compact_on_device,
    cumsum,
    cumsum_bytes,
    groupby_dense_ref,
    hash_join,
    prepare_query,
    query,
    query_bytes,
    query_ref,
    random_table,
    sort_rows,
    sort_rows_schedule,
    table_from_pandas,
    top_k,
    top_k_bytes,
    top_k_schedule,
)

QUERY_ROWS = 10**8
JOIN_LEFT, JOIN_RIGHT = 2 * 10**7, 10**6


def _pandas_row(op, shape, dtype, impl, ms, pandas_ms, nbytes):
    return Row("10", op, shape, dtype, impl, ms, "pandas (CPU, timed once)", pandas_ms, bytes=nbytes)


def _once_ms(fn):
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


def _sorts() -> list[Row]:
    rows = []
    for N in (256, 1024, 4096):
        x = torch.randn(2**24 // N, N, device="cuda")
        network, _, _ = sort_rows_schedule(N)
        impls = {f"triton sort_rows ({network})": lambda: sort_rows(x)}
        if network != "tl.sort":  # the former default, on the same rows
            impls["triton sort_rows (tl.sort)"] = lambda: sort_rows(x, network="tl.sort")
        if network.startswith("reg"):  # the register network's table line: the tiled network it replaced, too
            impls["triton sort_rows (tiled)"] = lambda: sort_rows(x, network="tiled")
        rows += paired(
            impls,
            ("torch.sort", lambda: torch.sort(x, dim=-1)),
            lesson="10",
            op="segmented sort",
            shape=f"{x.shape[0]}x{N}",
            dtype="fp32",
            bytes=x.numel() * (4 + 4 + 8),
        )
    x = torch.randn(4096, 4096, device="cuda").half()  # fp16 packs into int32 keys: half the bits of fp32's
    network, _, _ = sort_rows_schedule(4096, torch.float16)
    rows += paired(
        {f"triton sort_rows ({network}, fp16)": lambda: sort_rows(x)},  # a name of its own beside fp32's
        ("torch.sort", lambda: torch.sort(x, dim=-1)),
        lesson="10",
        op="segmented sort",
        shape="4096x4096",
        dtype="fp16",
        bytes=x.numel() * (2 + 2 + 8),
    )
    x = torch.randn(2**24 // 1024, 1024, device="cuda")  # exercise 1's network (values only) on the same footing
    rows += paired(
        {"triton bitonic_sort (tl.gather network)": lambda: bitonic_sort(x)},
        ("torch.sort", lambda: torch.sort(x, dim=-1)),
        lesson="10",
        op="segmented sort",
        shape=f"{x.shape[0]}x1024",
        dtype="fp32",
        bytes=x.numel() * (4 + 4 + 8),
    )
    for N in (1024, 4096):  # the same network on (rows, 32) tiles: its j < 32 steps as warp shuffles
        x = torch.randn(2**24 // N, N, device="cuda")
        ROWS, num_warps = bitonic_tiled_schedule(N)
        rows += paired(
            {f"triton bitonic_sort_tiled (ROWS={ROWS}, {num_warps} warps)": lambda: bitonic_sort_tiled(x)},
            ("torch.sort", lambda: torch.sort(x, dim=-1)),
            lesson="10",
            op="segmented sort",
            shape=f"{x.shape[0]}x{N}",
            dtype="fp32",
            bytes=x.numel() * (4 + 4 + 8),
        )
    return rows


def _top_k() -> list[Row]:
    rows = []
    for B, V, k in [(1, 131072, 50), (8, 131072, 50), (64, 131072, 64), (64, 152064, 50)]:
        logits = torch.randn(B, V, device="cuda")
        method, block, _ = top_k_schedule(B)
        rows += paired(
            {
                f"triton top_k ({method}, BLOCK_SIZE={block})": lambda: top_k(logits, k),
                "triton top_k (exercise 2: sort each block)": lambda: top_k(logits, k, BLOCK_SIZE=2048, method="sort"),
            },
            ("torch.topk", lambda: torch.topk(logits, k)),
            lesson="10",
            op=f"top-k (k={k})",
            shape=f"{B}x{V}",
            dtype="fp32",
            bytes=top_k_bytes(B, V, k),
        )
    return rows


def _default_row(op, method, schedules, fn, more=""):
    """A row for the default only when it is not one of the rows above (the look-backs at their schedules,
    reduce-then-scan at 2048): then the table says which method the default is (and `more` of its settings)."""
    if method.startswith("lookback") or schedules[method][0] == 2048:
        return {}
    return {f"triton {op} (default: {method}, BLOCK_SIZE={schedules[method][0]}{more})": fn}


def _scans() -> list[Row]:
    n = 2**28
    rows = []
    for name, dtype in (("int32", torch.int32), ("fp32", torch.float32)):
        x = torch.randint(0, 9, (n,), device="cuda").to(dtype)
        rows += paired(
            {
                "triton cumsum (lookback)": lambda: cumsum(x, method="lookback"),
                "triton cumsum (reduce-then-scan)": lambda: cumsum(x, BLOCK_SIZE=2048, method="reduce-then-scan"),
            }
            | _default_row("cumsum", SCAN_METHOD, SCAN_SCHEDULES, lambda: cumsum(x)),
            ("torch.cumsum", lambda: torch.cumsum(x, 0, dtype=dtype)),
            lesson="10",
            op="prefix sum",
            shape="2^28",
            dtype=name,
            bytes=cumsum_bytes(n, 4),
        )
    keep = torch.rand(n, device="cuda") < 0.5
    kept = int(keep.sum())
    rows += paired(
        {
            "triton compact (lookback)": lambda: compact(x, keep, method="lookback"),
            "triton compact (lookback-local)": lambda: compact(x, keep, method="lookback-local"),
            "triton compact (reduce-then-scan)": lambda: compact(
                x, keep, BLOCK_SIZE=2048, method="reduce-then-scan", CHUNKS=1
            ),
        }
        | _default_row(
            "compact", COMPACT_METHOD, COMPACT_SCHEDULES, lambda: compact(x, keep), f", CHUNKS={COMPACT_CHUNKS}"
        ),
        ("x[keep]", lambda: x[keep]),
        lesson="10",
        op="compaction (half kept)",
        shape="2^28",
        dtype="fp32",
        bytes=compact_bytes(n, kept, 4),
    )
    out = torch.empty_like(x)  # the count stays on the GPU: what the kernels move, without the host's wait
    block = COMPACT_SCHEDULES["reduce-then-scan"][0]
    rows += paired(
        {
            f"triton compact_on_device (reduce-then-scan, BLOCK_SIZE={block}, CHUNKS={chunks})": (
                lambda chunks=chunks: compact_on_device(x, keep, out=out, method="reduce-then-scan", CHUNKS=chunks)
            )
            for chunks in sorted({1, COMPACT_CHUNKS}, reverse=True)  # a segment of blocks a program, or one block
        }
        | {
            f"triton compact_on_device (lookback-local, BLOCK_SIZE={COMPACT_SCHEDULES['lookback-local'][0]})": (
                lambda: compact_on_device(x, keep, out=out, method="lookback-local")
            )
        },
        ("x[nonzero_static(keep)]", lambda: x[torch.nonzero_static(keep, size=n, fill_value=0).squeeze(1)]),
        lesson="10",
        op="compaction, no wait (half kept)",
        shape="2^28",
        dtype="fp32",
        bytes=compact_bytes(n, kept, 4),
    )
    return rows


def _query_torch(table, threshold, num_keys):
    """The same query in PyTorch ops: the dense spec on the GPU, then boolean masks for the keys present."""
    sums, counts, n_rows = groupby_dense_ref(table["key"], table["value"], table["x"], threshold, num_keys)
    present = n_rows > 0
    keys = torch.arange(num_keys, device=sums.device)[present]
    return keys, sums[present], counts[present], sums[present] / counts[present]


def _query_at(num_keys) -> list[Row]:
    df = random_table(QUERY_ROWS, num_keys)
    pandas_ms = _once_ms(lambda: query_ref(df, 0.5))
    table = table_from_pandas(df, "cuda")
    shape = f"{QUERY_ROWS:.0e} rows, {num_keys} keys"
    nbytes = query_bytes(QUERY_ROWS)
    prepared = prepare_query(table, num_keys)  # the default plan, its group-by replayed from a CUDA graph
    impls = {
        "triton atomics": lambda: query(table, 0.5, num_keys, method="atomic"),
        "triton partial sums + atomics": lambda: query(table, 0.5, num_keys, method="partials"),
        "triton packed atomics": lambda: query(table, 0.5, num_keys, method="packed"),
        "triton sort-then-reduce": lambda: query(table, 0.5, num_keys, method="sorted"),
        f"triton prepared query ({prepared.method}, CUDA graph)": lambda: prepared(0.5),
    }
    if prepared.graph is not None:  # what the query's kernels alone take: the same graph, no finish, no wait
        impls[f"triton prepared query's group-by alone ({prepared.method}, its graph replayed, no wait)"] = (
            prepared.graph.replay
        )
    timed = paired(
        impls,
        ("PyTorch ops", lambda: _query_torch(table, 0.5, num_keys)),
        lesson="10",
        op="filter + group-by",
        shape=shape,
        dtype="fp32",
        bytes=nbytes,
    )
    whole = [r for r in timed if "alone" not in r.impl]  # against pandas: whole queries only
    return timed + [_pandas_row(r.op, r.shape, r.dtype, r.impl, r.ms, pandas_ms, nbytes) for r in whole]


def _join_torch(left_keys, right_keys):
    """The same many-to-one join in PyTorch ops: sort the right keys, binary-search every left key."""
    sorted_keys, order = torch.sort(right_keys)
    pos = torch.searchsorted(sorted_keys, left_keys).clamp_max(right_keys.numel() - 1)
    found = sorted_keys[pos] == left_keys
    return torch.nonzero(found).flatten(), order[pos[found]]


def _join() -> list[Row]:
    import pandas as pd

    rng = np.random.default_rng(0)
    right = rng.choice(2**40, size=JOIN_RIGHT, replace=False).astype(np.int64)
    pool = np.concatenate([right, rng.integers(2**40, 2**41, JOIN_RIGHT // 10)])  # 1 in 11 has no match
    left = rng.choice(pool, size=JOIN_LEFT)
    left_df = pd.DataFrame({"key": left, "qty": rng.integers(0, 9, JOIN_LEFT)})
    right_df = pd.DataFrame({"key": right, "price": rng.random(JOIN_RIGHT)})
    pandas_ms = _once_ms(lambda: left_df.merge(right_df, on="key", how="inner"))
    lk, rk = torch.from_numpy(left).cuda(), torch.from_numpy(right).cuda()
    shape = f"{JOIN_LEFT:.0e} x {JOIN_RIGHT:.0e} rows"
    nbytes = (JOIN_LEFT + JOIN_RIGHT) * 8 + 2 * 8 * int(np.isin(left, right).sum())
    timed = paired(
        {"triton hash join": lambda: hash_join(lk, rk)},
        ("PyTorch ops (sort + searchsorted)", lambda: _join_torch(lk, rk)),
        lesson="10",
        op="inner join (keys only)",
        shape=shape,
        dtype="int64",
        bytes=nbytes,
    )
    return timed + [_pandas_row(r.op, r.shape, r.dtype, r.impl, r.ms, pandas_ms, nbytes) for r in timed]


def run() -> list[Row]:
    rows = []
    for part in (_sorts, _top_k, _scans, lambda: _query_at(16), lambda: _query_at(10**7), _join):
        rows += part()
        torch.cuda.empty_cache()
    return rows
