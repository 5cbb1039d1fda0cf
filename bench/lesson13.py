"""Lesson 13 for `make bench`: paged attention, in-flight batching and speculative decoding, bf16.

- paged decode attention against lesson 08's contiguous decode attention on the same keys (blocks of 16, in
  shuffled order), at 8192 cached tokens and at an awkward 4097: TinyLlama's heads (32 sharing 4, D = 64) at batch 1
  and 8, Llama-3-8B's (32 sharing 8, D = 128) at batch 4. The paged kernel runs the lesson's schedule
  (``PAGED_SCHEDULES``: keys per loop step, programs per SM, warps, stages; the impl names its keys per step) and
  lesson 08's combine; it is called with ``trusted=True`` (no host check of the table), as the engine calls it,
  since lesson 08's kernel does not check its lengths either. bytes = paged_attention_bytes;
- one trace (256 requests arriving at 1000/s: an overload, so tokens/s is the server's capacity) replayed on the
  wall clock through the lesson's engine and SmolLM2-135M's shape (30 layers, hidden 576, 9 heads sharing 3) with
  random weights and the course's small local vocabulary, a pool of 512 blocks of 16 tokens: in-flight batching
  (8 and 32 requests in flight, and 8 with steps of at most 16 tokens) against static batches of 8. ms is the
  replay's span (first arrival to last token) for the same tokens, so ``× baseline`` is the throughput ratio;
  tokens/s, p99 time between tokens, p99 time to first token and the peak KV memory (with lesson 08's contiguous
  worst case for 8 rows) are in the impl text;
- speculative decoding at batch 1, k = 4, 128 new tokens after a 64-token prompt, against the target alone through
  the same paged step. Random weights make any draft a poor guesser, so the target here is SmolLM2's shape whose
  layers after the third add little (their output projections scaled by 0.05) and the draft is its first three
  layers, so the draft nearly is the target and accepts every guess: the row measures the mechanism's cost at its
  best case, not what a trained pair reaches (published trained pairs accept a large share of the guesses, but
  well short of all, depending on the task and the draft, for speed-ups of about 2-3x in those papers).
"""

import tempfile

import torch

import utils.checkpoints
from bench.common import Row, graphed, paired
from lessons import l13_serving as L
from utils import serving

DTYPE = torch.bfloat16
P = 16


def paged_attention() -> list[Row]:
    rows = []
    for B, H, KV, D, context in ((1, 32, 4, 64, 8192), (8, 32, 4, 64, 8192), (8, 32, 4, 64, 4097),
                                 (4, 32, 8, 128, 8192)):  # fmt: skip
        W = -(-context // P)
        q = torch.randn(B, H, D, device="cuda", dtype=DTYPE)
        kc, vc = (torch.randn(B, W * P, KV, D, device="cuda", dtype=DTYPE) for _ in range(2))
        lengths = torch.full((B,), context, dtype=torch.int32, device="cuda")
        perm = torch.randperm(B * W, device="cuda")  # the physical block of each logical block, shuffled
        table = perm.view(B, W).int()
        kp, vp = (torch.empty(B * W, P, KV, D, device="cuda", dtype=DTYPE) for _ in range(2))
        kp[perm] = kc.view(-1, P, KV, D)
        vp[perm] = vc.view(-1, P, KV, D)
        out = L.paged_attention(q, kp, vp, table, lengths)  # checked once (host sync), then timed trusted
        keys_per_step = L.paged_schedule(B, KV, D, W * P, DTYPE)[2]
        torch.testing.assert_close(out, L.decode_attention(q, kc, vc, lengths), atol=2e-2, rtol=2e-2)
        paged = lambda: L.paged_attention(q, kp, vp, table, lengths, max_q_len=1, trusted=True)  # noqa: E731
        contiguous = lambda: L.decode_attention(q, kc, vc, lengths)  # noqa: E731
        counts = dict(
            lesson="13",
            op="decode attention, paged",
            shape=f"B={B} H={H} KV={KV} D={D} context={context} block={P}",
            dtype="bf16",
            bytes=L.paged_attention_bytes(B, H, KV, D, context, block_size=P),
            flops=L.paged_attention_flops(B, H, D, context),
        )
        name = f"triton paged, {keys_per_step} keys a step"
        rows += paired({name: paged}, ("triton contiguous (lesson 08)", contiguous), **counts)
        # a few microseconds of GPU work: the launch's host time shows above; replayed from CUDA graphs, both sides
        # are the GPU's work alone (what a serving loop that graphs its steps gets)
        rows += paired(
            {f"{name} (CUDA graph)": graphed(paged)},
            ("triton contiguous (lesson 08), CUDA graph", graphed(contiguous)),
            **counts,
        )
    return rows


def smollm2(quiet_layers_after=None):
    folder = utils.checkpoints.build_checkpoint(tempfile.mkdtemp(), utils.checkpoints.SMOLLM2_135M)
    model = L.load_model(folder, dtype=DTYPE)
    if quiet_layers_after is not None:
        for w in model.layers[quiet_layers_after:]:
            w.wo.mul_(0.05)
            w.w2.mul_(0.05)
    return model


def serving_trace(model) -> list[Row]:
    n_blocks, max_len = 512, 256
    block_mb = L.block_bytes(model.args, P) / 1e6
    configs = {  # name: (policy, rows, tokens a step may carry)
        "static, 8 rows": ("static", 8, 64),
        "in-flight, 8": ("in-flight", 8, 64),
        "in-flight, 8, 16-token steps": ("in-flight", 8, 16),  # less prefill per step: the p99 TBT trade
        "in-flight, 32": ("in-flight", 32, 64),
    }

    def replay(trace, policy, rows, step_tokens):
        runner, pool = L.ModelRunner(model, n_blocks, P, max_len), L.BlockPool(n_blocks, P)
        engine = L.Engine(runner, pool, policy=policy, max_seqs=rows, max_step_tokens=step_tokens,
                          block_bytes=L.block_bytes(model.args, P))  # fmt: skip
        return serving.replay(engine, trace, serving.WallClock())

    warm = serving.make_trace(48, rate=1000.0, seed=1, vocab_size=model.args.vocab_size)
    for config in configs.values():  # compiles every kernel variant (decode, chunks) before timing
        replay(warm, *config)
    trace = serving.make_trace(256, rate=1000.0, seed=0, vocab_size=model.args.vocab_size)
    span, stats = {}, {}
    for name, config in configs.items():
        rec = replay(trace, *config)
        span[name], stats[name] = rec.end - min(rec.arrival.values()), serving.metrics(rec)
        print(f"  {name}: " + ", ".join(f"{k} {v:.4g}" for k, v in stats[name].items()))
    longest = max(len(r.prompt) + r.max_new_tokens for r in trace)
    worst_mb = L.kv_cache_bytes(model.args, 8, longest) / 1e6
    base = "static, 8 rows"
    out = []
    for name in [n for n in configs if n != base]:
        s, b = stats[name], stats[base]
        out.append(
            Row(
                "13",
                "serve a trace (same tokens)",
                f"{len(trace)} requests, SmolLM2-135M shape, pool {n_blocks}x{P}",
                "bf16",
                f"{name}: {s['tokens/s']:.0f} tok/s, p99 TBT {s['TBT p99 ms']:.2f} ms (static {b['TBT p99 ms']:.2f}), "
                f"p99 TTFT {s['TTFT p99 ms']:.0f} ms (static {b['TTFT p99 ms']:.0f}), KV peak {s['KV peak MB']:.0f} MB "
                f"(static {b['KV peak MB']:.0f}, contiguous worst case {worst_mb:.0f}; block {block_mb:.2f} MB)",
                span[name] * 1e3,
                f"{base}: {b['tokens/s']:.0f} tok/s",
                span[base] * 1e3,
            )
        )
    return out


def speculative() -> list[Row]:
    model = smollm2(quiet_layers_after=3)
    draft = L.first_layers(model, 3)
    prompt = torch.randint(3, model.args.vocab_size, (64,), generator=torch.Generator().manual_seed(0)).tolist()
    n, k = 128, 4
    alone = L.SingleSequence(model, len(prompt) + n + 1)

    def target_alone():
        alone.n_cached, tokens = 0, list(prompt)
        tokens.append(int(alone.extend(tokens)[-1].argmax()))
        for _ in range(n - 1):
            tokens.append(int(alone.extend(tokens[-1:])[-1].argmax()))
        return tokens[len(prompt) :]

    ours, stats = L.speculative_generate(model, draft, prompt, n, k=k)
    same = ours == target_alone()  # bf16: a near tie may differ after the chunked verify; reported, not asserted
    rate = stats["accepted"] / stats["proposed"]
    return paired(
        {
            f"speculative k={k}, draft 3 of 30 layers, the other 27 damped x0.05 so the draft nearly is the target "
            f"(random weights; trained pairs accept fewer): acceptance {rate:.0%}, {n / stats['target passes']:.2f} "
            f"tokens per target pass, same tokens as alone: {same}": lambda: L.speculative_generate(
                model, draft, prompt, n, k=k
            )
        },
        ("target alone (same paged step)", target_alone),
        lesson="13",
        op="speculative decoding, batch 1",
        shape=f"prompt={len(prompt)} new={n}",
        dtype="bf16",
    )


def run() -> list[Row]:
    rows = paged_attention()
    rows += serving_trace(smollm2())
    rows += speculative()
    return rows
