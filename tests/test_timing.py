"""utils.timing: the arithmetic of GB/s and TFLOP/s, the tables, and the polite decline under the interpreter.

The GPU timer itself is replaced by a fake (``_measure``) so that all of this runs on the CPU; the fake returns
known times, so every number below is computed from inputs the test chose, never copied from a previous run.
"""

from __future__ import annotations

import random

import pandas as pd
import pytest

import utils.timing as timing


@pytest.fixture
def fake_gpu(monkeypatch):
    """Pretend there is a GPU: no decline, and ``_measure`` returns the ms registered for each callable."""
    times = {}

    def fake_measure(fn, warmup_ms, rep_ms):
        ms = times[fn]
        return ms, ms * 0.9, ms * 1.2

    monkeypatch.setattr(timing, "_decline_reason", lambda: None)
    monkeypatch.setattr(timing, "_measure", fake_measure)
    return times


def _fn():
    return lambda: None


# -- units ------------------------------------------------------------------------------------------------------


def test_units():
    # 1 GB moved in 1 ms is 1,000 GB/s; 1 TFLOP done in 1 s (1000 ms) is 1 TFLOP/s
    assert timing.gbps(1e9, 1.0) == pytest.approx(1000.0)
    assert timing.tflops(1e12, 1000.0) == pytest.approx(1.0)
    n = random.randrange(1, 10**9)
    ms = random.uniform(0.01, 10)
    assert timing.gbps(3 * 4 * n, ms) == pytest.approx(3 * 4 * n / (ms * 1e-3) / 1e9)
    assert timing.tflops(2 * n, ms) == pytest.approx(2 * n / (ms * 1e-3) / 1e12)


@pytest.mark.parametrize(
    "rate, count, ms, words",
    [
        (timing.gbps, -1e9, 1.0, "nbytes must be a finite positive number, got -1000000000.0"),
        (timing.gbps, 1e9, 0, "ms must be a finite positive number, got 0"),
        (timing.tflops, 1e12, -1.0, "ms must be a finite positive number"),
        (timing.tflops, float("nan"), 1.0, "flops must be a finite positive number"),
        (timing.gbps, "3", 1.0, r"nbytes must be a positive number, got '3' \(str\)"),
    ],
)
def test_rates_refuse_counts_and_times_that_are_not_positive(rate, count, ms, words):
    with pytest.raises(ValueError, match=words):
        rate(count, ms)


@pytest.mark.parametrize("counts", [dict(bytes=-8e9), dict(flops=0), dict(bytes=1e9, flops=float("inf"))])
def test_bench_and_compare_refuse_bad_counts_before_timing(fake_gpu, counts):
    fn = _fn()  # not registered with fake_gpu: timing it would raise a KeyError, not the ValueError
    with pytest.raises(ValueError, match="op: (bytes|flops) must be a finite positive number"):
        timing.bench(fn, label="op", **counts)
    with pytest.raises(ValueError, match="(bytes|flops) must be a finite positive number"):
        timing.compare({"a": fn}, **counts)


def test_bench_rates_come_from_counted_bytes_and_flops(fake_gpu):
    fn = _fn()
    ms = random.uniform(0.05, 5)
    fake_gpu[fn] = ms
    nbytes, flops = random.randrange(10**6, 10**10), random.randrange(10**6, 10**13)
    t = timing.bench(fn, bytes=nbytes, flops=flops, label="op")
    assert (t.ms, t.ms_p20, t.ms_p80) == (ms, ms * 0.9, ms * 1.2)
    assert t.gbps == pytest.approx(nbytes / (ms / 1e3) / 1e9)
    assert t.tflops == pytest.approx(flops / (ms / 1e3) / 1e12)
    assert t.label == "op" and "GB/s" in str(t) and "TFLOP/s" in str(t)


def test_bench_without_counts_gives_no_rates(fake_gpu):
    fn = _fn()
    fake_gpu[fn] = 1.0
    t = timing.bench(fn)
    assert t.gbps is None and t.tflops is None
    assert "GB/s" not in str(t)


# -- declining under the interpreter ----------------------------------------------------------------------------


def test_declines_on_the_cpu_once(monkeypatch, capsys):
    from utils.mode import current

    if not current().interpret:
        pytest.skip("this machine has a GPU: timing does not decline here")
    monkeypatch.setattr(timing, "_declined", False)

    def never(*args, **kwargs):
        raise AssertionError("the timer ran under the interpreter")

    monkeypatch.setattr(timing, "_measure", never)
    made = []
    assert timing.bench(_fn(), bytes=1) is None
    assert timing.compare({"a": _fn(), "b": _fn()}, bytes=1) is None
    assert timing.sweep(lambda n: made.append(n) or {"a": _fn()}, [1, 2]) is None
    assert made == [], "sweep must not allocate inputs when it is not going to time them"
    out = capsys.readouterr().out
    assert out.count("timing skipped") == 1, out
    assert "interpreter" in out


# -- tables -----------------------------------------------------------------------------------------------------


def test_compare_table_and_speedup(fake_gpu):
    ms = {"torch": random.uniform(0.5, 2), "triton": random.uniform(0.5, 2), "naive": random.uniform(2, 5)}
    impls = {name: _fn() for name in ms}
    for name, fn in impls.items():
        fake_gpu[fn] = ms[name]
    nbytes = random.randrange(10**6, 10**9)
    df = timing.compare(impls, bytes=nbytes, baseline="torch")
    assert isinstance(df, pd.DataFrame)
    assert list(df.columns) == ["impl", "ms", "GB/s", "TFLOP/s", "speedup"]
    assert list(df["impl"]) == list(ms)
    for _, row in df.iterrows():
        assert row["ms"] == ms[row["impl"]]
        assert row["GB/s"] == pytest.approx(nbytes / row["ms"] / 1e6)
        assert row["speedup"] == pytest.approx(ms["torch"] / ms[row["impl"]])
        assert pd.isna(row["TFLOP/s"])
    assert df.loc[df["impl"] == "torch", "speedup"].item() == pytest.approx(1.0)


def test_compare_baseline_defaults_to_first_and_must_exist(fake_gpu):
    impls = {"b": _fn(), "a": _fn()}
    fake_gpu[impls["b"]], fake_gpu[impls["a"]] = 2.0, 1.0
    df = timing.compare(impls, flops=1e9)
    assert df.attrs["baseline"] == "b"
    assert df.set_index("impl")["speedup"].to_dict() == {"b": 1.0, "a": 2.0}
    with pytest.raises(KeyError, match="baseline"):
        timing.compare(impls, baseline="missing")


def test_sweep_long_table(fake_gpu):
    sizes = [1000, 4097, 1 << 20]

    def make_impls(n):
        impls = {"torch": _fn(), "mine": _fn()}
        fake_gpu[impls["torch"]] = n * 1e-6
        fake_gpu[impls["mine"]] = n * 0.5e-6
        return impls

    df = timing.sweep(make_impls, sizes, bytes_fn=lambda n: 12 * n, flops_fn=lambda n: n, baseline="torch")
    assert list(df.columns) == ["size", "impl", "ms", "GB/s", "TFLOP/s", "speedup"]
    assert len(df) == 2 * len(sizes)
    assert list(df["size"]) == [s for s in sizes for _ in range(2)]
    mine = df[df["impl"] == "mine"]
    assert mine["speedup"].tolist() == pytest.approx([2.0] * len(sizes))
    assert mine["GB/s"].tolist() == pytest.approx([12 * n / (n * 0.5e-6) / 1e6 for n in sizes])
    assert mine["TFLOP/s"].tolist() == pytest.approx([n / (n * 0.5e-6) / 1e9 for n in sizes])


@pytest.mark.parametrize("sizes", [[], (), iter([])])
def test_sweep_refuses_no_sizes(fake_gpu, sizes):
    with pytest.raises(ValueError, match="sweep\\(\\) needs at least one size"):
        timing.sweep(lambda n: {"a": _fn()}, sizes)


def test_measure_uses_triton_quantiles(monkeypatch):
    """_measure asks do_bench for the median and the 20th/80th percentiles, in that order."""
    import triton.testing

    seen = {}

    def fake_do_bench(fn, warmup, rep, quantiles):
        seen.update(warmup=warmup, rep=rep, quantiles=quantiles)
        return [2.0, 1.5, 3.0]

    monkeypatch.setattr(triton.testing, "do_bench", fake_do_bench)
    assert timing._measure(_fn(), 25, 100) == (2.0, 1.5, 3.0)
    assert seen == {"warmup": 25, "rep": 100, "quantiles": [0.5, 0.2, 0.8]}


def test_an_error_in_the_timed_function_reaches_the_caller(monkeypatch):
    """A TypeError raised by the timed call itself (a wrong argument, say) is not mistaken for do_bench's own."""
    import triton.testing

    def fake_do_bench(fn, warmup, rep, quantiles):
        fn()
        raise AssertionError("the timed function's error was swallowed")

    def wrong_call():
        raise TypeError("add() got an unexpected keyword argument 'block'")

    monkeypatch.setattr(timing, "_decline_reason", lambda: None)
    monkeypatch.setattr(triton.testing, "do_bench", fake_do_bench)
    with pytest.raises(TypeError, match="unexpected keyword argument 'block'"):
        timing.bench(wrong_call)
    with pytest.raises(TypeError, match="unexpected keyword argument 'block'"):
        timing.compare({"mine": wrong_call})


# -- memory -----------------------------------------------------------------------------------------------------


def test_peak_memory_is_none_without_a_gpu(monkeypatch):
    monkeypatch.setattr(timing, "_decline_reason", lambda: "no GPU")
    ran = []
    assert timing.peak_memory(lambda: ran.append(1)) is None
    assert ran == [], "nothing is run where nothing can be measured"


def test_peak_memory_counts_what_the_call_adds(monkeypatch):
    import torch

    state = {"now": 1000, "peak": 1000}

    def grow():
        state["peak"] = max(state["peak"], state["now"] + 4096)

    monkeypatch.setattr(timing, "_decline_reason", lambda: None)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda: state.update(peak=state["now"]))
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda: state["now"])
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda: state["peak"])
    assert timing.peak_memory(grow) == 4096
