"""The `make bench` driver: lessons found by file name, paired timing, the report's arithmetic, and its refusal to
time anything without a GPU."""

import pytest

import bench.common as common
from bench.__main__ import lessons, main
from bench.report import enrich, markdown
from utils import roofline, timing
from utils.mode import current

CEIL = roofline.Ceilings(
    bandwidth_gbs=4000.0, tflops={"fp32": 50.0, "bf16": 800.0}, gpu="test GPU", source="made up", measured=True
)  # bf16 ridge: 800e12 / 4000e9 = 200 FLOP/B


def row(**kw):
    fields = {"lesson": "99", "op": "x", "shape": "s", "dtype": "bf16", "impl": "triton", "baseline": "torch"}
    return common.Row(**{**fields, **kw})


def test_memory_bound_row_is_measured_against_copy_bandwidth():
    # 3 GB in 1 ms is 3000 GB/s: 75% of 4000 GB/s; the baseline took 1.5 ms
    (r,) = enrich([row(ms=1.0, baseline_ms=1.5, bytes=3e9, flops=1e9)], CEIL)
    assert r["GB/s"] == pytest.approx(3000) and r["TFLOP/s"] == pytest.approx(1.0)
    assert r["ratio"] == pytest.approx(1.5) and r["roof %"] == pytest.approx(75)


def test_compute_bound_row_is_measured_against_the_matmul_rate():
    # intensity 1000 FLOP/B is past the ridge: 2e12 FLOPs in 4 ms is 500 TFLOP/s, 62.5% of 800
    (r,) = enrich([row(ms=4.0, baseline_ms=3.0, bytes=2e9, flops=2e12)], CEIL)
    assert r["TFLOP/s"] == pytest.approx(500) and r["roof %"] == pytest.approx(62.5)
    assert r["ratio"] == pytest.approx(0.75)


def test_row_without_flops_uses_bandwidth():
    (r,) = enrich([row(ms=2.0, baseline_ms=2.0, bytes=4e9, flops=None)], CEIL)
    assert r["TFLOP/s"] is None and r["roof %"] == pytest.approx(50)
    table = markdown([r], "header")
    assert table.startswith("header\n") and "| 99 | x | s | bf16 | triton | 2 |" in table


def test_paired_times_the_baseline_around_each_impl_and_averages_its_two(monkeypatch):
    calls, clock = [], iter([3.0, 1.0, 5.0, 2.0, 9.0])  # baseline, impl a, baseline, impl b, baseline

    def fake_bench(fn, *, bytes=None, flops=None, label=None, **_):
        calls.append(label)
        return timing.Timing(label=label, ms=next(clock), ms_p20=0.0, ms_p80=0.0)

    warmed = []
    monkeypatch.setattr(timing, "bench", fake_bench)
    impls = {"a": lambda: warmed.append("a"), "b": lambda: warmed.append("b")}
    rows = common.paired(impls, ("base", lambda: warmed.append("base")), lesson="99", op="op", shape="s",
                         dtype="fp32", bytes=10.0)  # fmt: skip
    assert warmed == ["a", "b", "base"], "every function is called once before anything is timed"
    assert calls == ["base", "a", "base", "b", "base"]
    assert [(r.impl, r.ms, r.baseline_ms, r.bytes) for r in rows] == [("a", 1.0, 4.0, 10.0), ("b", 2.0, 7.0, 10.0)]
    with pytest.raises(ValueError):
        common.paired({}, ("base", lambda: None), lesson="99", op="op", shape="s", dtype="fp32")


def test_lessons_are_found_by_file_name():
    found = lessons()
    assert found and found == sorted(found) and all(len(n) == 2 and n.isdigit() for n in found)
    for n in found:
        module = __import__(f"bench.lesson{n}", fromlist=["run"])
        assert callable(module.run), f"bench/lesson{n}.py defines no run()"


@pytest.mark.skipif(current().is_gpu, reason="on a GPU `python -m bench` runs for real")
def test_refuses_without_a_gpu(capsys):
    assert main([]) == 2
    assert "needs an NVIDIA GPU" in capsys.readouterr().err


def test_unknown_lesson_is_a_usage_error(capsys):
    with pytest.raises(SystemExit):
        main(["--only", "42"])
    assert "no bench/lesson42.py" in capsys.readouterr().err


def test_runs_made_apart_merge_into_one_report(tmp_path):
    import pandas as pd

    from utils.lessons import ROOT

    recorded = pd.read_csv(ROOT / "results" / "bench.csv", dtype={"lesson": str})
    first, second = tmp_path / "a", tmp_path / "b"
    for folder, part in ((first, recorded[recorded.lesson <= "04"]), (second, recorded[recorded.lesson > "04"])):
        folder.mkdir()
        part.to_csv(folder / "bench.csv", index=False)
    assert main(["--merge", str(first), str(second), "--out", str(tmp_path / "out")]) == 0
    merged = pd.read_csv(tmp_path / "out" / "bench.csv", dtype={"lesson": str})
    assert len(merged) == len(recorded) and list(merged.columns) == list(recorded.columns)
    text = (tmp_path / "out" / "bench.md").read_text()
    assert "in 2 runs" in text and text.count("\n| ") == len(recorded) + 1  # the header row, then one per row
    assert (tmp_path / "out" / "roofline.png").stat().st_size > 10_000


def test_merge_refuses_a_folder_without_bench_csv_in_one_line(tmp_path):
    with pytest.raises(SystemExit, match=r"--merge .*empty: no bench.csv in that folder; give the folders"):
        main(["--merge", str(tmp_path / "empty"), "--out", str(tmp_path / "out")])
    stopped = tmp_path / "stopped"
    stopped.mkdir()
    (stopped / "bench-partial.csv").write_text("lesson\n")
    with pytest.raises(SystemExit, match="left bench-partial.csv: rename it"):
        main(["--merge", str(stopped), "--out", str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()


def test_merge_says_which_ceilings_a_run_did_not_measure(tmp_path):
    import pandas as pd

    from utils.lessons import ROOT

    recorded = pd.read_csv(ROOT / "results" / "bench.csv", dtype={"lesson": str})
    run = tmp_path / "run"
    run.mkdir()
    part = recorded[recorded.lesson == recorded.lesson.iloc[0]].drop(columns=["bf16 TFLOP/s (matmul)"])
    part.to_csv(run / "bench.csv", index=False)
    assert main(["--merge", str(run), "--out", str(tmp_path / "out")]) == 0
    assert "bf16 matmul not measured" in (tmp_path / "out" / "bench.md").read_text()
    part.drop(columns=["copy GB/s"]).to_csv(run / "bench.csv", index=False)
    with pytest.raises(SystemExit, match="recorded no copy bandwidth"):
        main(["--merge", str(run), "--out", str(tmp_path / "out2")])


def test_a_partial_run_keeps_what_it_measured_in_bench_csv_columns(tmp_path):
    """After each lesson the driver writes bench-partial.csv: a run cut short by a time limit keeps its finished
    lessons, in the columns --merge reads (the GPU and versions on every row)."""
    import pandas as pd

    from bench.__main__ import partial

    meta = {"gpu": "test GPU", "torch": "t", "triton": "x", "python": "3", "date": "d", "copy GB/s": 4000.0}
    partial([row(ms=1.0, baseline_ms=2.0, bytes=4e9), row(op="y", ms=3.0, baseline_ms=3.0, flops=1e12)], CEIL, meta,
            tmp_path)  # fmt: skip
    saved = pd.read_csv(tmp_path / "bench-partial.csv", dtype={"lesson": str})
    assert list(saved["op"]) == ["x", "y"] and set(saved["gpu"]) == {"test GPU"}
    assert list(saved["ratio"]) == [2.0, 1.0]


@pytest.mark.skipif(not current().is_gpu, reason="CUDA graphs need a GPU")
def test_a_graphed_function_keeps_the_memory_its_graph_uses():
    """graphed(fn) returns a replay that outlives fn: the tensors fn closes over must live as long as the replay,
    or a replay writes into memory the allocator has handed to someone else (bench.common.copy_of's buffers, made
    inside it, once did: an illegal memory access two rows later)."""
    import gc

    import torch

    def doubler(n):
        x = torch.ones(n, device="cuda")
        return lambda: x.mul_(2)

    replay = common.graphed(doubler(1 << 20))
    gc.collect()
    other = torch.full((1 << 20,), 7.0, device="cuda")  # the allocator hands out x's block if x was freed
    replay()
    torch.cuda.synchronize()
    assert bool((other == 7).all()), "the graph wrote into a tensor allocated after fn was dropped"


def test_a_peer_model_runs_its_linears_in_lesson_08s_steps():
    """bench.lesson12.peer_model puts a peer's linear (torchao's int4, on a GPU) in place of every projection and the
    LM head. With the plain product as the peer, prefill and a decode step give lesson 08's logits bit for bit; a
    peer that computes something else shows in them (so the peer's kernels are really the ones run)."""
    import torch

    from bench import lesson12 as B12
    from lessons import l07_llm_layer as L7
    from lessons import l08_llama_model as L8

    args = L8.ModelArgs(vocab_size=40, n_layers=2, dim=32, n_heads=4, n_kv_heads=2, ffn_dim=48)
    model = common.random_llama(args, torch.float32, "cpu")
    calls = []

    def plain(w):
        return lambda x: calls.append(w.shape) or x @ w.T

    tokens = torch.randint(0, args.vocab_size, (2, 5))

    def logits(m):
        cache = L8.new_cache(m, 2, 8)
        first = L8.prefill(m, tokens, cache, L7.REF_OPS)
        pos = torch.full((2,), 5, dtype=torch.int32)
        return first, L8.decode_step(m, tokens[:, -1], pos, cache, L8.REF_DECODE)

    want = logits(model)
    got = logits(B12.peer_model(model, plain))
    assert len(calls) == 2 * (4 * args.n_layers + 1), "every projection and the LM head, in prefill and in decode"
    for g, w in zip(got, want):
        assert torch.equal(g, w)
    doubled = logits(B12.peer_model(model, lambda w: lambda x: 2 * (x @ w.T)))
    assert not torch.allclose(doubled[0], want[0])
    assert B12.peer_model(model, lambda w: None) is None
