"""What every sweep script needs besides its candidates: a log printed and kept as it goes, and timings that do
nothing under the interpreter. Import it after the script has set TRITON_INTERPRET for --cpu (it asks utils.mode).

    say = Log("l10w")                # prints, and rewrites $OUT/sweep_l10w.txt after every line
    ms = gtime(fn)                   # fn replayed from a CUDA graph, L2 cleared before each repetition
    ms = bench_ms(graphed(fn))       # the same replay, timed as make bench times a row
    ms = bench_ms(fn)                # fn called as make bench calls it (utils.timing)
    gbs = copy_gbs(say)              # a copy of 2**28 int32, the '% copy' ceiling, said and returned
    for label, model, step in quantized_decode_steps():    # lesson 12's int4 decode step at the 1B shapes
        ratios = paired_in_step(say, label, step, ref, {(L12, "INT4_DOTS"): "mma"}, rounds=2)  # a switch, paired
    compare_matmuls(say, shape, dtype, candidates, deadline)  # lesson 05's: checked, then timed between cuBLAS
    w, x, want, out, nbytes = int4_gemv_case(N, K, group, dtype)  # lesson 12's M = 1 GEMV problem, its fp64 answer
    err = in_bf16_tolerances(got, want)  # the worst error, in bf16's tolerances (above 1: outside)
    say_profile(say, profile, "matmul(out=), 100 calls")  # a cProfile's 12 costliest functions, by own time
    n = count_launches(fn)           # the Triton launches of one call of fn
    src = edited(inspect.getsource(L12.w4a16_stream_kernel.fn), [(old, new, 1)])   # a lesson kernel, patched
    module = module_from(LESSON12_GLOBALS + helpers + src, "l12zz_patched")  # ... in a module of its own, imported

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


def quantized_decode_steps(bits: int = 4, names=("Llama-3.2-1B", "TinyLlama-1.1B")):
    """Lesson 12's decode step with int4 weights (``bits`` 8: int8) at the 1B shapes (Llama-3.2-1B's and TinyLlama's,
    or ``names``: bench.common.LLAMA_SHAPES's names or (label, lesson 08's ModelArgs) pairs: random bf16 weights,
    int4 in groups of 128, the cache filled at random, one token at make bench's mean context of 640), or at a tiny
    fp32 model under the interpreter: yields (label, model, step), step() -> the logits; the GPU's cache emptied after
    each."""
    import torch

    from bench.common import random_llama
    from lessons import l08_llama_model as L8
    from lessons import l12_quantization as L12

    env = utils.mode.current()
    if on_gpu():
        dt, group, max_len, context = torch.bfloat16, 128, 768, 640  # make bench's decode rows: 512 + 256
        shapes = dict((name, name) if isinstance(name, str) else name for name in names)
    else:
        dt, group, max_len, context = torch.float32, 32, 24, 16
        shapes = {"tiny": L8.ModelArgs(vocab_size=100, n_layers=2, dim=64, n_heads=4, n_kv_heads=2, ffn_dim=48,
                                       tie_embeddings=False)}  # fmt: skip
    for label, shape in shapes.items():
        torch.manual_seed(0)
        model = L12.quantize_model(random_llama(shape, dt, env.device), bits, group_size=group)
        cache = L8.new_cache(model, 1, max_len)
        cache.k.normal_()
        cache.v.normal_()
        token = torch.tensor([7], device=env.device)
        pos = torch.tensor([context], dtype=torch.int32, device=env.device)
        yield label, model, lambda model=model, cache=cache: L12.quantized_decode_step(model, token, pos, cache)
        del model, cache
        if on_gpu():
            torch.cuda.empty_cache()


def paired_in_step(say, label, step, ref, switches: dict, rounds: int, exact: bool = False):
    """One variant of a step: switches {(module, name): value} set, its output checked against ref (the step as set;
    past 5e-2 relative, or with ``exact`` any bit apart, a FAIL, not timed), then timed between two timings of the
    step as set, `rounds` times, so that a drift of the machine shows as the two apart. Says a line; returns the
    ratios (as set / variant: above 1, the variant is faster), [] under the interpreter, None on a FAIL or an error.
    The switches are put back."""
    import torch

    was = {key: getattr(*key) for key in switches}

    def put(values):
        for (module, name), value in values.items():
            setattr(module, name, value)

    try:
        put(switches)
        got = step().float()
        rel = float((got - ref).norm() / ref.norm())
        if rel > 5e-2:
            say(f"  {label:44s} | FAIL: logits {rel:.1e} from the step as set")
            return None
        if exact and not torch.equal(got, ref):
            say(f"  {label:44s} | FAIL: the logits are not the step's as set bit for bit ({rel:.1e} apart)")
            return None
        times = []
        for _ in range(rounds):
            put(was)
            before = gtime(step)
            put(switches)
            ms = gtime(step)
            put(was)
            times.append((before, ms, gtime(step)))
        if not on_gpu():
            say(f"  {label:44s} | ran; logits {rel:.1e}")
            return []
        ratios = [(b + a) / 2 / ms for b, ms, a in times]
        line = "; ".join(f"{ms:.4f} ms between {b:.4f} and {a:.4f} (x{r:.3f})" for (b, ms, a), r in zip(times, ratios))
        say(f"  {label:44s} | {line}; logits {rel:.1e}")
        return ratios
    except Exception as e:  # noqa: BLE001
        first = str(e).strip().splitlines()[0][:150] if str(e).strip() else ""
        say(f"  {label:44s} | ERROR {type(e).__name__}: {first}")
        return None
    finally:
        put(was)


def compare_matmuls(say, shape, dtype, candidates, deadline: float, same_bits: bool = False):
    """Lesson 05's sweeps: each (label, fn(a, b, c) -> c) of candidates checked against an fp32 product of the same
    random a (M, K) and b (K, N) (out pre-filled with NaN; with same_bits, a second call must give the same bits), a
    FAIL never timed; then replayed from a CUDA graph between two cuBLAS timings (graphed too). Says a line each;
    returns [(x cuBLAS, label, fn)]. Past the time.time() ``deadline`` the rest is skipped."""
    import time

    import torch

    M, N, K = shape
    device = utils.mode.current().device
    gen = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(M, K, device=device, dtype=dtype, generator=gen)
    b = torch.randn(K, N, device=device, dtype=dtype, generator=gen)
    c = torch.empty(M, N, device=device, dtype=dtype)
    truth = a.float() @ b.float()
    tol = 0.02 * K**0.5
    say(f"== {M}x{N}x{K} {str(dtype).replace('torch.', '')}")
    base = gtime(lambda: torch.matmul(a, b), rep=25)
    results = []
    for label, fn in candidates:
        if time.time() > deadline:
            say(f"   {label}: SKIPPED (time budget)")
            continue
        try:
            c.fill_(float("nan"))
            first = fn(a, b, c).clone()
            err = (first.float() - truth).abs().max().item()
            if not err <= tol:  # NaN too: a block never stored
                say(f"   {label}: FAIL (max error {err:.3g})")
                continue
            if same_bits:
                c.fill_(float("nan"))
                if not torch.equal(fn(a, b, c), first):
                    say(f"   {label}: FAIL (a second call gave other bits)")
                    continue
            ms = gtime(lambda fn=fn: fn(a, b, c), rep=25)
        except Exception as e:  # noqa: BLE001
            say(f"   {label}: ERROR {type(e).__name__}: {str(e).splitlines()[0][:140] if str(e) else ''}")
            continue
        if ms is None:
            say(f"   {label}: checked{', the same bits twice' if same_bits else ''} (max error {err:.2g})")
            continue
        after = gtime(lambda: torch.matmul(a, b), rep=25)
        ratio = (base + after) / 2 / ms
        base = after
        results.append((ratio, label, fn))
        say(f"   {label:58s} {ms * 1e3:8.1f} us  x cuBLAS {ratio:.3f}")
    return results


def matmul_tma_at(a, b, c, tile):
    """Lesson 05's matmul_tma_kernel (no bias, no activation) at one tile (BLOCK_M, BLOCK_N, BLOCK_K, warps, stages,
    GROUP_M), one program an SM (at most one a tile), its descriptors built on the host as matmul_persistent_tma
    builds them: c = a @ b."""
    import triton
    from triton.tools.tensor_descriptor import TensorDescriptor

    from lessons import l05_matmul as L05

    (M, K), N = a.shape, b.shape[1]
    BM, BN, BK, warps, stages, G = tile
    n = min(L05.NUM_SMS, triton.cdiv(M, BM) * triton.cdiv(N, BN))
    descs = (TensorDescriptor.from_tensor(a, [BM, BK]), TensorDescriptor.from_tensor(b, [BK, BN]),
             TensorDescriptor.from_tensor(c, [BM, BN]))  # fmt: skip
    L05.matmul_tma_kernel.fn[(n,)](*descs, a, M, N, K, BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK, GROUP_M=G, NUM_SMS=n,
                                   HAS_BIAS=False, ACTIVATION=None, num_warps=warps, num_stages=stages)  # fmt: skip
    return c


def int4_gemv_case(N: int, K: int, group: int, dtype):
    """Lesson 12's M = 1 problem at (N, K): an int4 weight of N(0, 1 / K) values in groups of ``group`` (seed 0), a
    row of x, x @ W.T in fp64 (the answer), an out of x's dtype, and the bytes the GEMV moves (w4a16_bytes: the
    weight as stored, x and out). Returns (w, x, want, out, nbytes)."""
    import torch

    from lessons import l12_quantization as L12

    device = utils.mode.current().device
    torch.manual_seed(0)
    w = L12.quantize_int4_ref(torch.randn(N, K, device=device) / K**0.5, group)
    x = torch.randn(1, K, device=device, dtype=dtype)
    want = x.double() @ L12.dequantize(w, torch.float64).T
    out = torch.empty(1, N, device=device, dtype=dtype)
    return w, x, want, out, L12.w4a16_bytes(1, N, K, group)


def in_bf16_tolerances(got, want) -> float:
    """The worst error of got against want as a multiple of bf16's tolerance (atol + rtol |want|): above 1, outside
    it."""
    import torch

    t = utils.checking.default_tolerance(torch.bfloat16)
    return float(((got.double() - want).abs() / (t.atol + t.rtol * want.abs())).max())


def say_profile(say, profile, what: str, indent: str = "    ") -> None:
    """A cProfile.Profile's 12 costliest functions by own time (tottime), said line by line under a title."""
    import io
    import pstats

    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(12)
    say(f"{indent[:-2]}{what}, by own time:")
    for line in text.getvalue().splitlines():
        if line.strip() and ("{" in line or "/" in line or "ncalls" in line):
            say(indent + line.strip()[:150])


def count_launches(fn) -> int:
    """The Triton launches of one call of fn, counted by triton.knobs.runtime.launch_enter_hook (put back after;
    none under the interpreter, which calls no launch hook)."""
    import torch
    import triton

    count = [0]

    def counted(*_args, **_kwargs):
        count[0] += 1

    runtime = triton.knobs.runtime
    was, runtime.launch_enter_hook = runtime.launch_enter_hook, counted
    try:
        fn()
        if on_gpu():
            torch.cuda.synchronize()
    finally:
        runtime.launch_enter_hook = was
    return count[0]


# A patched kernel's module starts with this: the lesson's names, so that its copy calls the lesson's helpers.
LESSON12_GLOBALS = (
    "import triton\nimport triton.language as tl\n"
    "import lessons.l12_quantization as _lesson\n"
    "globals().update({k: v for k, v in vars(_lesson).items() if not k.startswith('__')})\n\n"
)


# Triton source of x's bf16 pairs (lesson 12's _x_pairs) made in each thread from x read as int32 words, for the sweeps
# that patch it into a copy of a lesson kernel (l12zm, l12zn).
X_WORDS = '''
@triton.jit
def _words_loaded(ptr, k0, GROUPS: tl.constexpr, WORDS: tl.constexpr):
    """x's 8 numbers (bf16, from column k0) under each code word of a step as 4 int32 words, (GROUPS, WORDS) each:
    word t holds x[8 j + 2 t] low, x[8 j + 2 t + 1] high. Unmasked: whole steps only."""
    offs = (tl.arange(0, GROUPS)[:, None, None] * WORDS + tl.arange(0, WORDS)[None, :, None]) * 4
    u = tl.load(ptr.to(tl.pointer_type(tl.int32)) + k0 // 2 + offs + tl.arange(0, 4)[None, None, :])
    a, b = tl.split(tl.reshape(u, (GROUPS, WORDS, 2, 2)))
    u0, u2 = tl.split(a)
    u1, u3 = tl.split(b)
    return u0, u1, u2, u3


@triton.jit
def _pairs_of(u0, u1, u2, u3):
    """x's words (word t: x[8 j + 2 t] low, x[8 j + 2 t + 1] high) as the dots' pairs (pair s: x[8 j + s] low,
    x[8 j + 4 + s] high): two bit operations each, in the thread."""
    p0 = (u0 & 0xFFFF) | (u2 << 16)
    p1 = ((u0 >> 16) & 0xFFFF) | (u2 & -65536)
    p2 = (u1 & 0xFFFF) | (u3 << 16)
    p3 = ((u1 >> 16) & 0xFFFF) | (u3 & -65536)
    return p0, p1, p2, p3


'''


def edited(src: str, edits, what: str = "the lesson's kernel") -> str:
    """src with each (old, new, count) of edits replaced, each old found exactly count times: else a RuntimeError
    (the lesson changed under the patch, which would otherwise time the lesson's own code)."""
    for old, new, count in edits:
        if src.count(old) != count:
            raise RuntimeError(f"{what} changed: {old[:70]!r} found {src.count(old)} times, not {count}")
        src = src.replace(old, new)
    return src


def module_from(text: str, name: str):
    """text written as module ``name`` in a folder of its own and imported: a patched copy of a kernel must live in
    a file, since Triton reads a kernel's source from its file."""
    import importlib
    import sys
    import tempfile

    folder = tempfile.mkdtemp(prefix=f"{name}_")
    with open(os.path.join(folder, f"{name}.py"), "w") as f:
        f.write(text)
    sys.path.insert(0, folder)
    return importlib.import_module(name)
