"""The `make bench` driver's arithmetic, and its refusal to time anything without a GPU."""

import pytest

from bench.__main__ import enrich, main
from utils import roofline
from utils.mode import current

CEIL = roofline.Ceilings(
    bandwidth_gbs=4000.0, tflops={"fp32": 50.0, "bf16": 800.0}, gpu="test GPU", source="made up", measured=True
)  # bf16 ridge: 800e12 / 4000e9 = 200 FLOP/B


def row(**kw):
    return {"op": "x", "shape": "s", "dtype": "bf16", "impl": "triton", "baseline": "torch", **kw}


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


@pytest.mark.skipif(current().is_gpu, reason="on a GPU `python -m bench` runs for real")
def test_refuses_without_a_gpu(capsys):
    assert main([]) == 2
    assert "needs an NVIDIA GPU" in capsys.readouterr().err
