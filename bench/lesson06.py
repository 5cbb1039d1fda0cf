"""Lesson 06 for `make bench`: the flash attention kernel against torch's scaled_dot_product_attention, bf16.

Shapes (B, T, H query heads, KV key/value heads, D): D = 128 with 32 KV heads (plain multi-head) at T = 1024..4096,
and grouped-query heads (32 over 4) at D = 64 (TinyLlama-1.1B's) and 128, from T = 333 (not a multiple of any block)
to T = 8192; each causal and not. q, k, v are views into one qkv buffer, as the layer makes them; SDPA gets the same
tensors as free transposed views in its (B, heads, T, D) layout. Which SDPA backend ran is read from the profiler's
kernel names and written into the baseline's label. On a GPU with TMA both of the lesson's paths are timed: the
descriptor kernel (`attention`, "triton") and the pointer kernel older GPUs take ("triton, pointer loads"). Up to
T = SHORT the GPU's work takes at most ~0.15 ms, no more than what a launch can cost the host in Python (50-80 us on
the H100 that measured it, more with descriptors to build): those shapes are timed once more with both sides
replayed from CUDA graphs ("(CUDA graph)" rows, the GPU's work alone).

    flops = 4 B H T^2 D, halved when causal        bytes = (2 H + 2 KV) B T D * 2 (read q, k, v, write o once)
"""

import torch
import torch.nn.functional as F

from bench.common import Row, graphed, paired
from lessons.l06_flash_attention import attention, attention_bytes, attention_flops, attention_pointers, random_qkv
from utils.mode import current
from utils.profiling import sdpa_backend

DTYPE = torch.bfloat16
SHORT = 2048  # up to this many tokens, also timed with both sides replayed from CUDA graphs
SHAPES = [  # (B, T, H, KV, D)
    (1, 2048, 32, 32, 128),
    (1, 4096, 32, 32, 128),
    (8, 1024, 32, 32, 128),
    (1, 333, 32, 4, 64),
    (1, 512, 32, 4, 64),
    (1, 2048, 32, 4, 128),
    (1, 2048, 32, 4, 64),
    (8, 1024, 32, 4, 64),
    (1, 4096, 32, 4, 64),
    (1, 8192, 32, 4, 64),
    (1, 8192, 32, 4, 128),
]


def run() -> list[Row]:
    rows = []
    with torch.no_grad():
        for B, T, H, KV, D in SHAPES:
            q, k, v = random_qkv(B, T, H, KV, D, DTYPE, device="cuda")
            qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
            for causal in (True, False):

                def sdpa(causal=causal):
                    return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal, enable_gqa=KV != H)

                impls = {"triton": lambda causal=causal: attention(q, k, v, causal)}
                if current().supports_tma:  # attention() took the descriptors: time the pointer path beside it
                    impls["triton, pointer loads"] = lambda causal=causal: attention_pointers(q, k, v, causal)
                counts = dict(
                    lesson="06",
                    op="attention causal" if causal else "attention",
                    shape=f"B={B} H={H} KV={KV} T={T} D={D}",
                    dtype="bf16",
                    bytes=attention_bytes(B, H, T, D, KV, q.element_size()),
                    flops=attention_flops(B, H, T, D, causal),
                )
                backend = sdpa_backend(sdpa)
                rows += paired(impls, (f"SDPA ({backend})", sdpa), **counts)
                if T <= SHORT:  # little GPU work: the launch's host time shows above; graphs time the GPU alone
                    rows += paired(
                        {f"{name} (CUDA graph)": graphed(fn) for name, fn in impls.items()},
                        (f"SDPA ({backend}), CUDA graph", graphed(sdpa)),
                        **counts,
                    )
            q = k = v = qt = kt = vt = None
    return rows
