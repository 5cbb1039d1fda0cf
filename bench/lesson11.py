"""Lesson 11 for `make bench`: backward passes, each timed forward + backward (gradients by torch.autograd.grad, so
nothing accumulates into .grad between calls).

- KL divergence, fp32, 2048 rows over a 128 256 vocabulary, reduction "batchmean": against F.kl_div in eager
  PyTorch, and against Liger-Kernel's LigerKLDivLossFunction when liger_kernel is installed (skipped quietly if
  not). bytes = kl_div_bytes (read input and target, read target, write the gradient), flops = kl_div_flops.
- Fused linear cross-entropy, bf16, T = 16 384 tokens, hidden 4096, vocabulary 128 256: against
  F.cross_entropy(x @ W.T) in eager PyTorch (and Liger's fused version if installed). flops = 3 matmuls,
  linear_cross_entropy_flops. Its peak memory is one more Row whose op says so: `ms` and `baseline_ms` hold
  megabytes (peak allocated during one forward + backward, above the inputs), not milliseconds.
- RMSNorm, bf16, 16 384 x 4096: against rmsnorm_ref (eager) and Liger's RMSNorm if installed, called as a user
  would and once more with every side replayed from a CUDA graph (the GPU's work alone);
  bytes = rmsnorm_bytes (5 M C: forward reads x, writes y; backward reads dy and x, writes dx).
- One training step (forward, backward, AdamW) of the lesson's Llama at dim 1024, 4 layers, 8 x 1024 byte tokens,
  fp32: PyTorch's ops against the lesson's kernels, eager and under torch.compile (compiled before timing); peak
  memory of one step in a Row of megabytes, as above.

Tensors are freed between cases: the eager cross-entropy alone holds about 13 GB.
"""

import torch
import torch.nn.functional as F

from bench.common import Row, graphed, paired, with_liger
from lessons.l11_backward_passes import (
    KERNEL_OPS,
    TORCH_OPS,
    LlamaArgs,
    byte_tokens,
    fused_linear_cross_entropy,
    kl_div,
    kl_div_bytes,
    kl_div_flops,
    linear_cross_entropy_flops,
    rmsnorm_bytes,
    rmsnorm_ref,
    rmsnorm_with_grad,
    rope_tables,
    text_batches,
    tiny_llama_loss,
    tiny_llama_weights,
)
from utils import timing

VOCAB = 128_256  # Llama 3's


def _peak_mb(fn) -> float:
    """Peak memory allocated while fn() runs, above what was allocated before it (MB)."""
    return timing.peak_memory(fn) / 1e6


def _memory_row(op, shape, dtype, ours, baseline, base_fn) -> Row:
    return Row(
        "11", f"{op} peak memory (MB, not ms)", shape, dtype, "triton", _peak_mb(ours), baseline, _peak_mb(base_fn)
    )


def _kl_div() -> list[Row]:
    M = 2048
    y = torch.randn(M, VOCAB, device="cuda").log_softmax(-1).requires_grad_()
    t = torch.randn(M, VOCAB, device="cuda").softmax(-1)
    ours = {"triton": lambda: torch.autograd.grad(kl_div(y, t, reduction="batchmean"), y)}
    meta = dict(lesson="11", op="KL divergence fwd+bwd", shape=f"{M}x{VOCAB}", dtype="fp32",
                bytes=kl_div_bytes(M, VOCAB, 4), flops=kl_div_flops(M, VOCAB))  # fmt: skip
    eager = ("F.kl_div (eager)", lambda: torch.autograd.grad(F.kl_div(y, t, reduction="batchmean"), y))
    rows = paired(ours, eager, **meta)
    rows += with_liger(
        "11",
        "kl_div",
        "LigerKLDivLossFunction",
        lambda liger: paired(
            ours, ("Liger-Kernel", lambda: torch.autograd.grad(liger.apply(y, t, "batchmean"), y)), **meta
        ),
    )
    return rows


def _fused_linear_cross_entropy() -> list[Row]:
    T, H = 16_384, 4096
    x = torch.randn(T, H, device="cuda", dtype=torch.bfloat16).requires_grad_()
    W = (torch.randn(VOCAB, H, device="cuda", dtype=torch.bfloat16) / H**0.5).requires_grad_()
    labels = torch.randint(0, VOCAB, (T,), device="cuda")
    shape, name = f"T={T} H={H} V={VOCAB}", "F.cross_entropy(x @ W.T) (eager)"

    def ours():
        return torch.autograd.grad(fused_linear_cross_entropy(x, W, labels), (x, W))

    def eager():
        return torch.autograd.grad(F.cross_entropy(x @ W.T, labels), (x, W))

    meta = dict(lesson="11", op="fused linear cross-entropy fwd+bwd", shape=shape, dtype="bf16",
                flops=linear_cross_entropy_flops(T, H, VOCAB))  # fmt: skip
    rows = [_memory_row("fused linear cross-entropy", shape, "bf16", ours, name, eager)]
    rows += paired({"triton": ours}, (name, eager), **meta)

    def against_liger(liger):
        def theirs():
            return torch.autograd.grad(liger.apply(x, W, labels)[0], (x, W))  # (loss, z_loss, accuracy, tokens)

        memory = _memory_row("fused linear cross-entropy", shape, "bf16", ours, "Liger-Kernel", theirs)
        return [memory, *paired({"triton": ours}, ("Liger-Kernel", theirs), **meta)]

    return rows + with_liger("11", "fused_linear_cross_entropy", "LigerFusedLinearCrossEntropyFunction", against_liger)


def _rmsnorm() -> list[Row]:
    M, C = 16_384, 4096
    x = torch.randn(M, C, device="cuda", dtype=torch.bfloat16).requires_grad_()
    w = torch.ones(C, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(M, C, device="cuda", dtype=torch.bfloat16)
    ours = {"triton": lambda: torch.autograd.grad(rmsnorm_with_grad(x, w, 1e-6), (x, w), dy)}
    meta = dict(lesson="11", op="RMSNorm fwd+bwd", shape=f"M={M} C={C}", dtype="bf16", bytes=rmsnorm_bytes(M, C, 2))
    rows = paired(
        ours, ("rmsnorm_ref (eager)", lambda: torch.autograd.grad(rmsnorm_ref(x, w, 1e-6), (x, w), dy)), **meta
    )
    rows += with_liger(
        "11",
        "rms_norm",
        "LigerRMSNormFunction",
        lambda liger: paired(
            ours, ("Liger-Kernel", lambda: torch.autograd.grad(liger.apply(x, w, 1e-6), (x, w), dy)), **meta
        ),
    )
    # autograd and three launches cost the host more than the GPU's 0.3 ms on a slow host CPU, and the timings above
    # include what the flush between repetitions does not hide; replayed from CUDA graphs, every side is the GPU's
    # work alone
    graphed_ours = {"triton (CUDA graph)": graphed(ours["triton"])}
    ref = graphed(lambda: torch.autograd.grad(rmsnorm_ref(x, w, 1e-6), (x, w), dy))
    rows += paired(graphed_ours, ("rmsnorm_ref (eager), CUDA graph", ref), **meta)
    rows += with_liger(
        "11",
        "rms_norm",
        "LigerRMSNormFunction",
        lambda liger: paired(
            graphed_ours,
            ("Liger-Kernel, CUDA graph", graphed(lambda: torch.autograd.grad(liger.apply(x, w, 1e-6), (x, w), dy))),
            **meta,
        ),
    )
    return rows


def _training_step() -> list[Row]:
    args, n_layers, B, T = LlamaArgs(dim=1024, n_heads=16, n_kv_heads=4, ffn_dim=2816), 4, 8, 1024
    (tokens,) = text_batches(byte_tokens(), B, T, 1, device="cuda")
    cos, sin = rope_tables(T, args.head_dim, args.rope_theta, device="cuda")
    shape = f"dim={args.dim} layers={n_layers} B={B} T={T}"

    def make_step(ops, compiled=False):
        w = {k: v.requires_grad_() for k, v in tiny_llama_weights(args, n_layers, device="cuda").items()}
        opt = torch.optim.AdamW(w.values(), lr=1e-4)
        loss_fn = torch.compile(tiny_llama_loss) if compiled else tiny_llama_loss

        def step():
            loss = loss_fn(w, tokens, args, n_layers, ops, cos, sin)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

        return step

    ours = make_step(KERNEL_OPS)
    eager = make_step(TORCH_OPS)
    meta = dict(lesson="11", op="training step (fwd+bwd+AdamW)", shape=shape, dtype="fp32")
    rows = [_memory_row("training step", shape, "fp32", ours, "PyTorch ops (eager)", eager)]
    rows += paired({"triton": ours}, ("PyTorch ops (eager)", eager), **meta)
    torch.compiler.reset()
    rows += paired({"triton": ours}, ("PyTorch ops (torch.compile)", make_step(TORCH_OPS, compiled=True)), **meta)
    return rows


def run() -> list[Row]:
    rows = []
    for case in (_kl_div, _fused_linear_cross_entropy, _rmsnorm, _training_step):
        rows += case()
        torch.cuda.empty_cache()  # each case's tensors are gone with its frame: hand the memory back between cases
    return rows
