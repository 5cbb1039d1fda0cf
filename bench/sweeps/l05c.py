"""Lesson 05 sweep c, 2026-11-27: the large square matmuls against cuBLAS (issue 12: >= 1.0x at 4096^3 and 8192^3,
fp16 and bf16), with Triton's automatic warp specialization of the K loop as the new candidate.

Run from the repo root: ``PYTHONPATH=$PWD python3 bench/sweeps/l05c.py`` on the GPU (< 190 s, compile time
included), ``PYTHONPATH=$PWD python3 bench/sweeps/l05c.py --cpu`` under the interpreter (tiny shapes, no timings;
the interpreter ignores warp specialization, so this only runs the code paths).

Timing: each call captured in a CUDA graph (bench.common.graphed), the replay timed by triton.testing.do_bench (L2
cleared before each repetition). torch.matmul (cuBLAS), captured the same way, is timed right before AND right after
each candidate, and the candidate's "x cuBLAS" uses the mean of the two: at 700+ TFLOP/s the H100 reaches its
power limit and its clocks fall over seconds, so a single cuBLAS time taken first favours it against candidates timed
later (the first run of this sweep, unpaired, put the same kernel at 1.02x and 0.92x, first and last in a shape).
Each candidate is first compared with an fp32 product of the same inputs (FAIL: the max error; a FAIL is never
chosen).

Candidates (config = BLOCK_M x BLOCK_N x BLOCK_K, warps, stages; GROUP_M = 8):
  matmul() / matmul_persistent_tma()  the lesson's launchers as shipped (autotuned; the pick is printed)
  tma   lessons.l05_matmul.matmul_tma_kernel at a fixed config (persistent, TMA, flattened loops)
  ws    a kernel of this script: one program a tile (grouped order), A and B through TMA descriptors, the K loop
        as tl.range(..., warp_specialize=True): the compiler gives the loads to one warp group and the tensor-core
        work to the others (Hopper: producer and consumer warp groups, setmaxnreg), so the loads of the next
        blocks never wait behind this block's math. C written with tl.store (no shared memory for it).
  wsp   the same K loop inside a persistent tile loop (NUM_SMS programs), C through a descriptor.
  epi   a kernel of this script: matmul_tma_kernel (persistent, TMA loads, flattened loops) with its C written three
        ways: "desc" through a descriptor (the lesson's: a BLOCK_M x BLOCK_N tile staged in shared memory, which
        leaves room for 3 stages of 128 x 256 x 64 only), "sub" through a descriptor in two BLOCK_N / 2 halves (half
        the staging: 4 stages fit), "ptr" with tl.store (no staging at all).
  A "ws"/"wsp" line that says ERROR means this Triton refused to compile it (warp specialization on Hopper came
  with recent Triton releases); the sweep goes on.

  -> edits, in solutions/05_matmul.ipynb, then ``python -m utils.notebooks``: if a ws/wsp config beats both shipped
     launchers at a shape, the kernel moves into the lesson as the extra step after persistent+TMA, and matmul()
     takes it on Hopper at those shapes (the EDIT line names the config).
"""

import os
import sys
import time

T0 = time.time()
CPU = "--cpu" in sys.argv
if CPU:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

import utils  # noqa: E402
from lessons import l05_matmul as L  # noqa: E402

ENV = utils.mode.current()
LINES = []
BUDGET_S = 170
RESULTS = {}  # shape label -> [(ms, name, base_ms)], base_ms paired


def say(line=""):
    print(line, flush=True)
    LINES.append(line)


def save():
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "sweep_l05c.txt"), "w") as f:
            f.write("\n".join(LINES) + "\n")


def late():
    return time.time() - T0 > BUDGET_S


def first_line(e):
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0][:150] if text else ''}"


def gtime(fn):
    """GPU ms of fn() replayed from a CUDA graph, L2 cleared before each repetition; None on the CPU."""
    if CPU:
        fn()
        return None
    import triton.testing

    from bench.common import graphed

    return triton.testing.do_bench(graphed(fn), warmup=5, rep=25)


@triton.jit
def ws_kernel(
    a_ptr, b_ptr, c_ptr, M, N, K, stride_cm,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, WS: tl.constexpr,
):  # fmt: skip
    """One program a tile; A and B blocks through TMA descriptors; the K loop warp-specialized (WS)."""
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[N, 1], block_shape=[BLOCK_K, BLOCK_N])
    pid_m, pid_n = L.grouped_tile(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in tl.range(0, K, BLOCK_K, warp_specialize=WS):
        a = a_desc.load([pid_m * BLOCK_M, k])
        b = b_desc.load([k, pid_n * BLOCK_N])
        acc = tl.dot(a, b, acc)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :], acc.to(c_ptr.dtype.element_ty), mask=mask)


@triton.jit
def wsp_kernel(
    a_ptr, b_ptr, c_ptr, M, N, K,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    NUM_SMS: tl.constexpr, WS: tl.constexpr,
):  # fmt: skip
    """ws_kernel's K loop inside a persistent loop over the tiles; C through a descriptor."""
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[N, 1], block_shape=[BLOCK_K, BLOCK_N])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N])
    num_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    for tile in range(tl.program_id(0), num_tiles, NUM_SMS):
        pid_m, pid_n = L.grouped_tile(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in tl.range(0, K, BLOCK_K, warp_specialize=WS):
            a = a_desc.load([pid_m * BLOCK_M, k])
            b = b_desc.load([k, pid_n * BLOCK_N])
            acc = tl.dot(a, b, acc)
        c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], acc.to(c_ptr.dtype.element_ty))


@triton.jit
def epi_kernel(
    a_ptr, b_ptr, c_ptr, M, N, K, stride_cm,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    NUM_SMS: tl.constexpr, EPI: tl.constexpr,
):  # fmt: skip
    """matmul_tma_kernel without bias or activation, C written as EPI says (0 desc, 1 sub, 2 ptr)."""
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[N, 1], block_shape=[BLOCK_K, BLOCK_N])
    if EPI == 0:
        c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N])
    if EPI == 1:
        c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N // 2])
    num_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    for tile in tl.range(tl.program_id(0), num_tiles, NUM_SMS, flatten=True):
        pid_m, pid_n = L.grouped_tile(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, K, BLOCK_K):
            a = a_desc.load([pid_m * BLOCK_M, k])
            b = b_desc.load([k, pid_n * BLOCK_N])
            acc = tl.dot(a, b, acc)
        c = acc.to(c_ptr.dtype.element_ty)
        if EPI == 0:
            c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], c)
        if EPI == 1:
            left, right = tl.split(tl.permute(tl.reshape(c, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1)))
            c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N], left)
            c_desc.store([pid_m * BLOCK_M, pid_n * BLOCK_N + BLOCK_N // 2], right)
        if EPI == 2:
            offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
            offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
            mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
            tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :], c, mask=mask)


def cfg(BM, BN, BK, w, s):
    return dict(BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK, num_warps=w, num_stages=s)


def name_of(c):
    return f"{c['BLOCK_M']}x{c['BLOCK_N']}x{c['BLOCK_K']} w{c['num_warps']} s{c['num_stages']}"


def tma(a, b, out, c):
    (M, K), N = a.shape, b.shape[1]
    triton.set_allocator(L.tma_scratch)
    L.matmul_tma_kernel.fn[L.persistent_grid(M, N)](
        a, b, out, a, M, N, K, GROUP_M=8, NUM_SMS=L.NUM_SMS, HAS_BIAS=False, ACTIVATION=None, **c
    )
    return out


def ws(a, b, out, c, WS=True):
    (M, K), N = a.shape, b.shape[1]
    triton.set_allocator(L.tma_scratch)
    grid = (triton.cdiv(M, c["BLOCK_M"]) * triton.cdiv(N, c["BLOCK_N"]),)
    ws_kernel[grid](a, b, out, M, N, K, out.stride(0), GROUP_M=8, WS=WS, **c)
    return out


def wsp(a, b, out, c, WS=True):
    (M, K), N = a.shape, b.shape[1]
    triton.set_allocator(L.tma_scratch)
    wsp_kernel[L.persistent_grid(M, N)](a, b, out, M, N, K, GROUP_M=8, NUM_SMS=L.NUM_SMS, WS=WS, **c)
    return out


def epi(a, b, out, c, EPI):
    (M, K), N = a.shape, b.shape[1]
    triton.set_allocator(L.tma_scratch)
    epi_kernel[L.persistent_grid(M, N)](a, b, out, M, N, K, out.stride(0), GROUP_M=8, NUM_SMS=L.NUM_SMS, EPI=EPI, **c)
    return out


KINDS = {
    "tma": tma,
    "ws": ws,
    "wsp": wsp,
    "epi-desc": lambda a, b, out, c: epi(a, b, out, c, 0),
    "epi-sub": lambda a, b, out, c: epi(a, b, out, c, 1),
    "epi-ptr": lambda a, b, out, c: epi(a, b, out, c, 2),
}

if CPU:
    SHAPES = [((40, 48, 64), torch.float16)]
    SMALL = cfg(16, 16, 16, 4, 1)
    CANDIDATES = [("tma", SMALL), ("ws", SMALL), ("wsp", SMALL), ("epi-desc", SMALL), ("epi-sub", SMALL),
                  ("epi-ptr", SMALL)]  # fmt: skip
else:
    SHAPES = [
        ((8192, 8192, 8192), torch.float16),
        ((4096, 4096, 4096), torch.bfloat16),
        ((8192, 8192, 8192), torch.bfloat16),
        ((4096, 4096, 4096), torch.float16),
    ]
    CANDIDATES = [  # the first run's (unpaired) leaders, then the epilogue variants
        ("tma", cfg(128, 256, 64, 8, 3)),
        ("wsp", cfg(128, 256, 64, 4, 3)),
        ("ws", cfg(128, 256, 64, 8, 3)),
        ("epi-desc", cfg(128, 256, 64, 8, 3)),
        ("epi-sub", cfg(128, 256, 64, 8, 4)),
        ("epi-ptr", cfg(128, 256, 64, 8, 4)),
        ("epi-sub", cfg(128, 256, 64, 8, 3)),
        ("epi-ptr", cfg(256, 128, 64, 8, 4)),
    ]

say(
    f"lesson 05 sweep c (large matmuls, warp specialization) on {ENV.gpu_name if ENV.is_gpu else 'CPU (interpreter)'},"
    f" torch {torch.__version__}, triton {triton.__version__}, {ENV.sm_count} SMs"
)


def picked(kernel):
    best = getattr(kernel, "best_config", None)
    if best is None:
        return "?"
    k = best.kwargs
    return f"{k['BLOCK_M']}x{k['BLOCK_N']}x{k['BLOCK_K']} w{best.num_warps} s{best.num_stages}"


def run_shape(shape, dtype):
    M, N, K = shape
    label = f"{M}x{N}x{K} {utils.dtype_name(dtype)}"
    torch.manual_seed(0)
    a = (torch.randn(M, K, device=ENV.device) * K**-0.25).to(dtype)
    b = (torch.randn(K, N, device=ENV.device) * K**-0.25).to(dtype)
    ref = a.float() @ b.float()
    flops = L.matmul_flops(M, N, K)
    tol = 0.05
    cublas = lambda: torch.matmul(a, b)  # noqa: E731
    base_ms = gtime(cublas)
    say(f"== {label}: cuBLAS {'n/a' if base_ms is None else f'{base_ms * 1e3:.1f} us'} (first)")
    results = RESULTS.setdefault(label, [])
    todo = [(f"{kind} {name_of(c)}", KINDS[kind], c) for kind, c in CANDIDATES]
    todo += [
        (name, (lambda a, b, out, c, fn=fn: fn(a, b, out=out)), kernel)
        for name, fn, kernel in [
            ("matmul()", L.matmul, L.matmul_kernel),
            ("matmul_persistent_tma()", L.matmul_persistent_tma, L.matmul_tma_kernel),
        ]
    ]
    for name, fn, c in todo:
        if late():
            say(f"   {name}: skipped (past {BUDGET_S} s)")
            continue
        out = torch.full((M, N), float("nan"), device=ENV.device, dtype=dtype)
        try:
            fn(a, b, out, c)
            err = (out.float() - ref).abs().max().item()
            ok = err <= tol and not out.isnan().any().item()
            before = gtime(cublas)
            ms = gtime(lambda: fn(a, b, out, c))
            base_ms = None if ms is None else (before + gtime(cublas)) / 2
        except Exception as e:
            say(f"   {name}: ERROR {first_line(e)}")
            continue
        extra = f" pick={picked(c)}" if not isinstance(c, dict) else ""
        verdict = "OK" if ok else f"FAIL max err {err:.3g}"
        if ms is None:
            say(f"   {name}: {verdict} (no timing on the CPU){extra}")
        else:
            say(
                f"   {name}: {ms * 1e3:8.1f} us {flops / ms / 1e9:7.1f} TFLOP/s {base_ms / ms:.3f}x cuBLAS "
                f"(cuBLAS {base_ms * 1e3:.1f} us around it) {verdict}{extra}"
            )
        if ok:
            results.append((1.0, name, 1.0) if ms is None else (ms, name, base_ms))


for shape, dtype in SHAPES:
    if late():
        say(f"== {shape} {utils.dtype_name(dtype)}: skipped (past {BUDGET_S} s)")
        continue
    try:
        run_shape(shape, dtype)
    except Exception as e:
        say(f"== {shape}: ERROR {first_line(e)}")
    if not CPU:
        torch.cuda.empty_cache()

say("")
say("== best per shape (correct candidates only)")
for label, results in RESULTS.items():
    if not results:
        say(f"   {label}: nothing timed")
        continue
    base_ms, name, ms = max((b / t, n, t) for t, n, b in results)  # the best ratio to its own paired cuBLAS
    base_ms *= ms
    shipped = [r for r in results if r[1].endswith("()")]
    best_shipped = min(shipped) if shipped else None
    gain = (
        f", the best shipped launcher {best_shipped[2] / best_shipped[0]:.3f}x ({best_shipped[1]})"
        if best_shipped
        else ""
    )
    say(f"   {label}: {name} {ms * 1e3:.1f} us = {base_ms / ms:.3f}x cuBLAS{gain}")
    if not name.endswith("()"):
        say(f"   EDIT ({label}): {name} beats the shipped launchers: the lesson's TMA kernel takes its variant")
say(f"done in {time.time() - T0:.0f} s")
save()
