"""utils.explorers: each widget builds without a browser, and its callback draws what the sliders say.

ipywidgets.interactive swallows exceptions raised by its callback outside IPython (it only logs them), so the tests
look at ``.result``, which changes only when a call succeeds, and also call ``.f`` directly.
"""

import ipywidgets as widgets
import pytest

from utils import explorers, pictures, roofline
from utils.explorers import roofline_reading
from utils.roofline import Ceilings


def controls(w):
    """description -> control widget, for the interactive's sliders and dropdowns."""
    return {c.description: c for c in w.children if isinstance(c, widgets.ValueWidget)}


def tail_width(fig):
    tails = [p for p in fig.axes[0].patches if p.get_gid() == "tail"]
    return tails[0].get_width() if tails else 0


# -- grid_explorer -------------------------------------------------------------------------------------------------


def test_grid_explorer_builds_and_draws_its_start():
    w = explorers.grid_explorer(n=37, BLOCK_SIZE=8, element=21)
    assert isinstance(w, widgets.interactive)
    c = controls(w)
    assert set(c) == {"n (elements)", "BLOCK_SIZE", "element i"}
    assert all(b & (b - 1) == 0 for b in c["BLOCK_SIZE"].options)  # powers of two only
    assert any(isinstance(ch, widgets.Output) for ch in w.children)
    assert "element 21: pid 21 // 8 = 2" in w.result.axes[0].get_title(loc="left")
    assert tail_width(w.result) == 3


def test_grid_explorer_callback_follows_the_sliders():
    w = explorers.grid_explorer()
    c = controls(w)
    c["BLOCK_SIZE"].value = 16
    c["n (elements)"].value = 100
    assert c["element i"].max == 99  # the index slider follows n
    assert tail_width(w.result) == pictures.masked_lanes(100, 16)
    c["element i"].value = 64
    assert "element 64: pid 64 // 16 = 4" in w.result.axes[0].get_title(loc="left")
    c["n (elements)"].value = 10  # shrinking n past the chosen element clamps it instead of failing
    assert c["element i"].value == 9
    assert "n = 10, BLOCK_SIZE = 16" in w.result.axes[0].get_title(loc="left")
    fig = w.f(n=1000, BLOCK_SIZE=128, element=999)
    assert tail_width(fig) == 24


# -- tile_explorer -------------------------------------------------------------------------------------------------


def test_tile_explorer_builds_and_draws_all_tiles_by_default():
    w = explorers.tile_explorer(M=300, N=330, BLOCK_M=32, BLOCK_N=32)
    c = controls(w)
    assert set(c) == {"M (rows of C)", "N (columns of C)", "BLOCK_M", "BLOCK_N", "GROUP_M", "programs started (upto)"}
    total = pictures.cdiv(300, 32) * pictures.cdiv(330, 32)
    assert c["programs started (upto)"].max == total == c["programs started (upto)"].value
    labels = [t for t in w.result.axes[0].texts if t.get_gid() == "order"]
    assert len(labels) == total


def test_tile_explorer_callback_and_upto_follow_the_sizes():
    w = explorers.tile_explorer(M=288, N=288, BLOCK_M=32, BLOCK_N=32, GROUP_M=3, upto=9)
    c = controls(w)
    assert "3 row-blocks of A + 3 column-blocks of B" in w.result.axes[0].get_title(loc="left")
    c["GROUP_M"].value = None
    assert "1 row-block of A + 9 column-blocks of B" in w.result.axes[0].get_title(loc="left")
    c["programs started (upto)"].value = c["programs started (upto)"].max  # "all of them" ...
    c["M (rows of C)"].value = 600
    assert c["programs started (upto)"].max == pictures.cdiv(600, 32) * 9  # ... stays all of them
    assert c["programs started (upto)"].value == c["programs started (upto)"].max
    c["BLOCK_M"].value = 128
    fig = w.result
    assert len([p for p in fig.axes[0].patches if p.get_gid() == "tile"]) == pictures.cdiv(600, 128) * 9
    fig = w.f(M=64, N=64, BLOCK_M=32, BLOCK_N=32, GROUP_M=2, upto=1)
    assert [t.get_text() for t in fig.axes[0].texts if t.get_gid() == "order"] == ["0"]


@pytest.mark.parametrize("GROUP_M", [0, -2, 1.5])
def test_tile_explorer_refuses_a_group_that_is_not_a_count(GROUP_M):
    with pytest.raises(ValueError):
        explorers.tile_explorer(GROUP_M=GROUP_M)


@pytest.mark.parametrize(
    "explorer, kwargs, words",
    [
        (explorers.grid_explorer, dict(n=37, element=100), r"element must be an integer from 0 to 36 .*got 100"),
        (explorers.grid_explorer, dict(n=0), "n must be an integer from 1 to 4,096, got 0"),
        (explorers.grid_explorer, dict(n=-5), "n must be an integer from 1"),
        (explorers.grid_explorer, dict(n=10.5), "n must be an integer"),
        (explorers.tile_explorer, dict(M=0), "M must be an integer from 1 to 2,048, got 0"),
        (explorers.tile_explorer, dict(N=-3), "N must be an integer from 1"),
        (explorers.tile_explorer, dict(upto=0), r"upto must be an integer from 1 to 110 \(the 110 programs"),
        (explorers.tile_explorer, dict(upto=10**6), "upto must be an integer from 1 to 110"),
    ],
)
def test_grid_and_tile_explorers_refuse_values_off_their_sliders(explorer, kwargs, words):
    """A slider would clamp these silently (or fail inside traitlets) and draw a picture of another value."""
    with pytest.raises(ValueError, match=words):
        explorer(**kwargs)


# -- roofline ------------------------------------------------------------------------------------------------------

TOY = Ceilings(
    bandwidth_gbs=1000.0,
    tflops={"fp32": 10.0, "tf32": 50.0, "fp16": 100.0, "bf16": 100.0},
    gpu="toy GPU",
    source="made up for the test",
)


def test_roofline_reading_by_hand():
    # ridge = 100 TFLOP/s / 1000 GB/s = 100 FLOP/byte
    r = roofline_reading(10.0, TOY, "bf16", flops=1e12)  # 1e11 bytes: 100 ms to move, 10 ms to compute
    assert r["bound"] == "memory" and r["ridge"] == pytest.approx(100.0)
    assert r["bytes"] == pytest.approx(1e11)
    assert (r["memory_ms"], r["compute_ms"], r["best_ms"]) == pytest.approx((100.0, 10.0, 100.0))
    assert r["tflops"] == pytest.approx(10.0)
    r = roofline_reading(1000.0, TOY, "bf16", bytes=1e9)  # 1e12 FLOPs: 1 ms to move, 10 ms to compute
    assert r["bound"] == "compute" and r["flops"] == pytest.approx(1e12)
    assert (r["memory_ms"], r["compute_ms"], r["best_ms"]) == pytest.approx((1.0, 10.0, 10.0))
    assert r["tflops"] == pytest.approx(100.0)
    r = roofline_reading(1000.0, TOY, "fp32", bytes=1e9)  # fp32's lower roof: ridge at 10
    assert r["ridge"] == pytest.approx(10.0) and r["best_ms"] == pytest.approx(100.0)


def test_roofline_reading_agrees_with_attainable():
    for intensity in (0.05, 1, 99, 101, 5000):
        r = roofline_reading(intensity, TOY, "bf16", flops=3e11)
        assert r["flops"] / (r["best_ms"] * 1e-3) / 1e12 == pytest.approx(roofline.attainable(intensity, TOY, "bf16"))


@pytest.mark.parametrize("bad", [dict(flops=1e9, bytes=1e9), dict()])
def test_roofline_reading_wants_one_amount(bad):
    with pytest.raises(TypeError):
        roofline_reading(1.0, TOY, **bad)


def test_roofline_explorer_builds_and_its_callback_reads_the_roof():
    w = explorers.roofline_explorer(intensity=0.1, work=1e9, unit="bytes", gpu="H100 SXM", precision="bf16")
    c = controls(w)
    assert set(c) >= {"intensity (FLOP/byte)", "work", "work counted in", "precision", "GPU"}
    assert [s.name for s in roofline.GPUS if s.name in c["GPU"].options] == [s.name for s in roofline.GPUS]
    r = w.result
    h100 = roofline.from_spec(roofline.lookup("H100 SXM"))
    assert r["bound"] == "memory"
    assert r["best_ms"] == pytest.approx(1e9 / (h100.bandwidth_gbs * 1e9) * 1e3)
    assert "memory roof binds" in r["text"]
    stars = [a for a in r["figure"].axes[0].lines if a.get_gid() == "best"]
    assert len(stars) == 1 and stars[0].get_ydata()[0] == pytest.approx(roofline.attainable(0.1, h100, "bf16"))
    c["intensity (FLOP/byte)"].value = 1000.0
    assert w.result["bound"] == "compute" and "compute roof binds" in w.result["text"]
    c["GPU"].value = "T4"
    t4 = roofline.from_spec(roofline.lookup("T4"))
    assert w.result["ridge"] == pytest.approx(roofline.ridge(t4, "bf16"))
    r = w.f(intensity=1.0, work=2e12, unit="FLOPs", precision="fp32", gpu="A100 80GB SXM")
    assert r["flops"] == 2e12 and r["bytes"] == pytest.approx(2e12)


def test_roofline_explorer_refuses_unknown_choices():
    with pytest.raises(ValueError):
        explorers.roofline_explorer(gpu="a GPU nobody makes")
    with pytest.raises(ValueError):
        explorers.roofline_explorer(precision="fp8")
    with pytest.raises(ValueError, match="unit must be 'FLOPs' or 'bytes'"):
        explorers.roofline_explorer(unit="bits")


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(intensity=1e5), "intensity must be a number from 0.01 to 10,000 FLOP/byte .*got 100000.0"),
        (dict(intensity=0.001), "intensity must be a number from 0.01"),
        (dict(intensity=-5), "intensity must be a number from 0.01"),
        (dict(intensity=0), "intensity must be a number from 0.01"),
        (dict(work=1e20), "work must be a number from 1,000 to 1e\\+16 FLOPs"),
        (dict(work=0), "work must be a number from 1,000"),
        (dict(work=0, unit="bytes"), "work must be a number from 1,000 to 1e\\+16 bytes"),
    ],
)
def test_roofline_explorer_refuses_values_off_its_sliders(kwargs, words):
    """A slider would clamp these silently and read the roofline for an op nobody asked about."""
    with pytest.raises(ValueError, match=words):
        explorers.roofline_explorer(**kwargs)
