"""utils.roofline: ridge and attainable arithmetic, the datasheet table, lookup by device name, the picture, the
fallback without a GPU, and the checks of lesson 01's exercises (each must reject the classic wrong answers)."""

from __future__ import annotations

import random

import matplotlib
import pytest
from matplotlib.figure import Figure

import utils.roofline as rl
from utils.mode import current


def _ceilings(bw=None, peaks=None):
    bw = bw or random.uniform(200, 5000)
    peaks = peaks or {p: random.uniform(5, 1000) for p in rl.PRECISIONS}
    return rl.Ceilings(bandwidth_gbs=bw, tflops=peaks, gpu="test GPU", source="test")


# -- arithmetic -------------------------------------------------------------------------------------------------


def test_ridge_point():
    c = _ceilings(bw=2000, peaks={"bf16": 500, "fp32": 50})
    assert rl.ridge(c, "bf16") == pytest.approx(250.0)  # 500e12 FLOP/s / 2000e9 B/s
    assert rl.ridge(c, "fp32") == pytest.approx(25.0)
    c = _ceilings()
    for p in rl.PRECISIONS:
        assert c.ridge(p) == pytest.approx(c.tflops[p] * 1e12 / (c.bandwidth_gbs * 1e9))


def test_attainable_is_the_roofline():
    c = _ceilings()
    for p in rl.PRECISIONS:
        r = rl.ridge(c, p)
        below, above = r * random.uniform(0.01, 0.99), r * random.uniform(1.01, 100)
        assert rl.attainable(below, c, p) == pytest.approx(below * c.bandwidth_gbs / 1e3)
        assert rl.attainable(below, c, p) < c.tflops[p]
        assert rl.attainable(above, c, p) == c.tflops[p]
        assert rl.attainable(r, c, p) == pytest.approx(c.tflops[p])  # the roofs meet at the ridge


def test_unknown_precision_is_named():
    c = _ceilings(peaks={"fp16": 100.0})
    with pytest.raises(KeyError, match="bf16"):
        rl.ridge(c, "bf16")


def test_point():
    flops, nbytes, ms = random.randrange(1, 10**12), random.randrange(1, 10**10), random.uniform(0.01, 10)
    p = rl.point("op", flops, nbytes, ms=ms)
    assert p["label"] == "op"
    assert p["intensity"] == pytest.approx(flops / nbytes)
    assert p["tflops"] == pytest.approx(flops / (ms / 1e3) / 1e12)
    assert rl.point("op", flops, nbytes)["tflops"] is None
    with pytest.raises(ValueError):
        rl.point("op", 1, 0)


def test_summary_bound_and_fraction_of_roof():
    c = _ceilings(bw=1000, peaks={"bf16": 100.0})  # ridge 100 FLOP/B
    add = rl.point("add", 10**9, 12 * 10**9, ms=15.0)  # roofline time: 12e9 B / 1e12 B/s = 12 ms
    mm = rl.point("mm", 2 * 10**12, 10**9)  # compute-bound: 2e12 / 100e12 = 20 ms
    df = rl.summary([add, mm], c, "bf16")
    assert df["bound"].tolist() == ["memory", "compute"]
    assert df["roofline ms"].tolist() == pytest.approx([12.0, 20.0])
    assert df["% of roof"][0] == pytest.approx(80.0)
    assert df["% of roof"].isna()[1]


# -- the table --------------------------------------------------------------------------------------------------

REQUIRED = {"T4", "L4", "A10G", "A100 40GB", "A100 80GB SXM", "H100 SXM", "H200", "RTX 3090", "RTX 4090"}


def test_table_is_complete():
    names = {s.name for s in rl.GPUS}
    assert REQUIRED <= names
    assert len(names) == len(rl.GPUS), "duplicate names"
    for s in rl.GPUS:
        assert s.bandwidth_gbs > 0 and s.sms > 0 and s.l2_mb > 0, s.name
        for p in rl.PRECISIONS:
            assert getattr(s, p) > 0, (s.name, p)
        assert s.tf32 >= s.fp32 and s.fp16 >= s.tf32, s.name  # tensor cores never slower than the FP32 units
        assert len(s.source) > 10, s.name
    assert len(rl.spec_table()) == len(rl.GPUS)


@pytest.mark.parametrize(
    "device_name, expected",
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H200", "H200"),
        ("Tesla T4", "T4"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA A10G", "A10G"),
        ("NVIDIA A100-SXM4-40GB", "A100 40GB"),
        ("NVIDIA A100-SXM4-80GB", "A100 80GB SXM"),
        ("NVIDIA A100 80GB PCIe", "A100 80GB PCIe"),
        ("NVIDIA GeForce RTX 3090", "RTX 3090"),
        ("NVIDIA GeForce RTX 4090", "RTX 4090"),
        ("nvidia h100 pcie", "H100 PCIe"),
        ("NVIDIA L40S", None),  # not an L4
        ("NVIDIA GeForce GTX 1080", None),
        (None, None),
    ],
)
def test_lookup(device_name, expected):
    spec = rl.lookup(device_name)
    assert (spec.name if spec else None) == expected


def test_ceilings_without_a_gpu_are_an_h100_for_illustration():
    if current().is_gpu:
        pytest.skip("this machine has a GPU: ceilings() measures it")
    c = rl.ceilings()
    assert not c.measured
    assert c.gpu == "H100 SXM" and "illustration" in c.source
    assert c.bandwidth_gbs == rl.lookup("H100 SXM").bandwidth_gbs
    assert set(c.tflops) == set(rl.PRECISIONS)
    with pytest.raises(RuntimeError, match="GPU"):
        rl.measure_ceilings()


# -- the picture ------------------------------------------------------------------------------------------------


def _gids(ax, kind):
    return [a.get_gid() for a in getattr(ax, kind)]


def test_plot_draws_roofs_ridge_and_points():
    assert matplotlib.get_backend().lower() == "agg"
    c = rl.from_spec(rl.lookup("H100 SXM"))
    pts = [
        rl.point("add", 2**26, 12 * 2**26, ms=0.3),
        rl.point("matmul", 2 * 4096**3, 6 * 4096**2, ms=0.2),
        rl.point("softmax (predicted)", 5 * 2**24, 8 * 2**24),
    ]
    fig = rl.plot(pts, c, precision="bf16", title="test")
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    lines = _gids(ax, "lines")
    assert "roof:memory" in lines and "ridge" in lines
    assert all(f"roof:{p}" in lines for p in rl.PRECISIONS)
    assert lines.count("predicted") == 1
    measured = [col for col in ax.collections if col.get_gid() == "measured"]
    assert len(measured) == 1 and len(measured[0].get_offsets()) == 2
    texts = [t.get_text() for t in ax.texts]
    assert any("softmax (predicted)" in t for t in texts) and any("ridge" in t for t in texts)
    assert "test" in ax.get_title()
    # the bold roof is the one asked for, and the ridge point sits on it
    bold = [line for line in ax.lines if line.get_gid() == "roof:bf16"][0]
    assert bold.get_linewidth() > [line for line in ax.lines if line.get_gid() == "roof:fp32"][0].get_linewidth()
    ridge = [line for line in ax.lines if line.get_gid() == "ridge"][0]
    assert ridge.get_xdata()[0] == pytest.approx(rl.ridge(c, "bf16"))
    assert ridge.get_ydata()[0] == pytest.approx(c.tflops["bf16"])


def test_plot_without_the_precision_falls_back():
    c = _ceilings(peaks={"fp32": 8.0, "fp16": 65.0})
    fig = rl.plot([rl.point("x", 1, 1)], c, precision="bf16")
    assert "fp16 shown" in fig.axes[0].get_title()


def test_plot_into_given_axes():
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    assert rl.plot([], _ceilings(), precision="fp16", ax=ax) is fig
    plt.close(fig)


def test_memory_hierarchy_picture():
    from utils.pictures.hardware import H100_SXM, memory_hierarchy

    fig = memory_hierarchy()
    assert isinstance(fig, Figure) and len(fig.axes) == 2
    patches = [p.get_gid() for ax in fig.axes for p in ax.patches]
    assert sum(1 for g in patches if g and g.startswith("level:")) == 4
    assert patches.count("warp") == H100_SXM["warps_per_sm"]
    texts = " ".join(t.get_text() for ax in fig.axes for t in ax.texts)
    assert "50 MB" in texts and "3.35 TB/s" in texts
    # HBM is per GPU; the register file feeds 132 SMs x 128 lanes x 3 operands x 4 B at 1.98 GHz: about 401 TB/s
    assert "80 GB per GPU" in texts and "401 TB/s" in texts
    fig = memory_hierarchy(spec={"name": "other", "l2_mb": 6, "hbm_tbs": 0.6})
    texts = " ".join(t.get_text() for ax in fig.axes for t in ax.texts)
    assert "6 MB" in texts and "0.6 TB/s" in texts


# -- counts are checked; one reading of the roofline ------------------------------------------------------------


def test_plot_keeps_ops_without_flops_out_of_the_picture():
    """A copy does no arithmetic: it has no place on a log axis, so point() refuses it with a reason."""
    with pytest.raises(ValueError, match="copy"):
        rl.point("copy", 0, 2 * 2**30, ms=1.0)


@pytest.mark.parametrize(
    "flops, nbytes, ms, words",
    [
        (float("nan"), 100, None, "flops"),
        (100, float("nan"), None, "bytes"),
        (-1, 100, None, "flops"),
        (100, 0, None, "bytes"),
        (100, -5, None, "bytes"),
        (100, float("inf"), None, "bytes"),
        (100, 100, 0.0, "ms"),
        (100, 100, float("nan"), "ms"),
        ("many", 100, None, "flops"),
        (True, 100, None, "flops"),
    ],
)
def test_point_refuses_nan_and_non_positive_counts(flops, nbytes, ms, words):
    with pytest.raises(ValueError, match=words):
        rl.point("op", flops, nbytes, ms=ms)


def test_only_a_count_of_zero_flops_is_told_to_report_gb_s():
    with pytest.raises(ValueError, match="no place on the roofline"):
        rl.point("copy", 0, 100)
    for flops, nbytes, ms in ((100, 0, None), (100, 100, 0)):
        with pytest.raises(ValueError) as refused:
            rl.point("op", flops, nbytes, ms=ms)
        assert "FLOPs" not in str(refused.value)


@pytest.mark.parametrize(
    "bandwidth, peaks, words",
    [
        (-1000.0, {"bf16": 100.0}, "bandwidth_gbs .*finite positive number, got -1000.0"),
        (0.0, {"bf16": 100.0}, "bandwidth_gbs .*finite positive number, got 0.0$"),
        (float("nan"), {"bf16": 100.0}, "bandwidth_gbs .*finite positive"),
        (3000.0, {"bf16": 0.0}, "the bf16 peak .*finite positive"),
        (3000.0, {"fp32": 60.0, "bf16": -1.0}, "the bf16 peak .*finite positive"),
    ],
)
def test_ceilings_refuse_roofs_that_are_not_positive(bandwidth, peaks, words):
    with pytest.raises(ValueError, match=f"test GPU: {words}"):
        rl.Ceilings(bandwidth_gbs=bandwidth, tflops=peaks, gpu="test GPU", source="test")


def test_reading_and_summary_refuse_bad_counts():
    c = rl.from_spec(rl.lookup("H100 SXM"))
    with pytest.raises(ValueError, match="flops"):
        rl.reading(float("nan"), 1e6, c)
    with pytest.raises(ValueError, match="bytes"):
        rl.reading(1e6, 0, c)
    with pytest.raises(ValueError, match="intensity"):
        rl.attainable(float("nan"), c)
    bad = {"label": "bad", "flops": -1.0, "bytes": 8.0, "ms": None}
    with pytest.raises(ValueError, match="bad: flops"):
        rl.summary([bad], c)


def test_summary_and_explorer_share_one_reading():
    """bound and best time come from rl.reading in both places: they cannot disagree."""
    from utils.explorers import roofline_reading

    c = rl.from_spec(rl.lookup("H100 SXM"))
    ridge = rl.ridge(c, "bf16")
    for intensity in (0.1, ridge * 0.999, ridge * 1.001, 2731.0):
        flops = 1e12
        p = rl.point("op", flops, flops / intensity)
        row = rl.summary([p], c, "bf16").iloc[0]
        r = roofline_reading(intensity, c, "bf16", flops=flops)
        assert row["bound"] == r["bound"] == ("memory" if intensity < ridge else "compute")
        assert row["roofline ms"] == pytest.approx(r["best_ms"])
        assert r["best_ms"] == pytest.approx(max(r["memory_ms"], r["compute_ms"]))


def test_measured_plot_keeps_the_datasheet_roof():
    spec = rl.lookup("H200")
    measured = rl.Ceilings(4239, {"fp32": 51, "tf32": 364, "fp16": 667, "bf16": 715}, "NVIDIA H200", "test", True, spec)
    fig = rl.plot([rl.point("add", 2**28, 3 * 4 * 2**28, ms=0.741)], measured, precision="bf16")
    lines = [ln for ln in fig.axes[0].lines if ln.get_gid() == "roof:datasheet"]
    assert len(lines) == 1 and max(lines[0].get_ydata()) == pytest.approx(989.4)
    datasheet_only = rl.plot([], rl.from_spec(spec), precision="bf16")
    assert not [ln for ln in datasheet_only.axes[0].lines if ln.get_gid() == "roof:datasheet"]
