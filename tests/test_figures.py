"""utils.figures: a measured figure quoted in prose must match the committed results it names."""

import nbformat
import pytest

from utils import figures

CSV = """lesson,op,shape,dtype,impl,baseline,ratio,GB/s
05,matmul,4096,fp16,triton,cuBLAS,0.938809,100
05,matmul,8192,fp16,triton,cuBLAS,1.049214,200
03,vector add,2^26,fp32,triton,torch.add,1.0,4228.5
"""


@pytest.fixture
def root(tmp_path, monkeypatch):
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "bench.csv").write_text(CSV)
    (tmp_path / "solutions").mkdir()
    (tmp_path / "docs").mkdir()
    monkeypatch.setattr(figures, "RESULTS", tmp_path / "results")
    return tmp_path


def _notebook(root, markdown):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(markdown), nbformat.v4.new_code_cell("x = 0.50×1")]
    nbformat.write(nb, root / "solutions" / "05_x.ipynb")


def test_figures_that_match_pass_and_wrong_ones_are_named(root):
    ok = "<!-- fig lesson=05 shape=4096 col=ratio -->0.94× and <!-- fig lesson=03 col=GB/s -->4,228 GB/s"
    _notebook(root, ok)
    (root / "README.md").write_text("mean <!-- fig lesson=05 op=matmul col=ratio agg=geomean -->0.99×\n")
    assert figures.problems(root) == []
    _notebook(root, ok.replace("0.94×", "0.98×"))
    (found,) = figures.problems(root)
    assert "cell 0" in found and "0.98 should be 0.94" in found


def test_broken_markers_and_unmarked_ratios_are_reported(root):
    text = (
        "<!-- fig lesson=05 col=ratio -->0.9× two rows, no agg; <!-- fig lesson=07 col=ratio -->1.0× no row; "
        "<!-- fig lesson=05 shape=4096 col=nope -->1 no column; and a bare 1.23× ratio, 0.93x spelt with an x, 0x1f hex"
    )
    (root / "README.md").write_text(text)
    found = "\n".join(figures.problems(root))
    assert "2 rows" in found and "agg=" in found
    assert "no row of results/bench.csv" in found
    assert "no column 'nope'" in found
    assert "1.23× is quoted without" in found and "0.93x is quoted without" in found and "0x1f" not in found


def test_keys_with_an_arrow_are_read(root):
    """A shape such as "2048->8192" holds a ">": its marker is still one (it was once skipped without a word)."""
    (root / "results" / "bench.csv").write_text(CSV + "12,GEMV,1B 2048->8192 M=1,bf16,triton,cuBLAS,1.65,10\n")
    (root / "README.md").write_text('<!-- fig lesson=12 shape="1B 2048->8192 M=1" col=ratio -->0.00×\n')
    (found,) = figures.problems(root)
    assert "0.00 should be 1.65" in found
    figures.update(root)
    assert figures.problems(root) == []


def test_update_rewrites_figures_with_their_own_rounding(root):
    _notebook(root, "ratio <!-- fig lesson=05 shape=8192 col=ratio -->0.9× and <!-- fig lesson=03 col=GB/s -->4,000")
    (root / "docs" / "x.md").write_text("<!-- fig lesson=05 shape=4096 col=ratio -->0.900×\n")
    changed = figures.update(root)
    assert len(changed) == 3
    cell = nbformat.read(root / "solutions" / "05_x.ipynb", as_version=4).cells[0].source
    assert cell == "ratio <!-- fig lesson=05 shape=8192 col=ratio -->1.0× and <!-- fig lesson=03 col=GB/s -->4,228"
    assert (root / "docs" / "x.md").read_text() == "<!-- fig lesson=05 shape=4096 col=ratio -->0.939×\n"
    assert figures.problems(root) == []


def test_every_measured_figure_in_the_course_matches_its_results():
    """README, docs/ and every solution notebook: each marked figure equals its committed result, and no two-decimal
    ratio is quoted without a marker."""
    assert figures.problems() == [], "run `python -m utils.figures` for the list"


def test_stale_lists_lesson_figures_a_later_run_on_the_same_gpu_measured_again(root):
    """stale(): a lesson's figure whose row a later run on the same GPU has too is listed, naming the later run; a
    later run on another GPU, an earlier run, and a figure outside the lessons (README, docs/) are not."""
    head = "gpu,date,lesson,op,shape,dtype,impl,baseline,ratio\n"
    row = "05,matmul,4096,fp16,triton,cuBLAS,{}\n"
    (root / "results" / "bench.csv").write_text(head + "H200,2026-11-21 06:08 UTC," + row.format(0.94))
    for folder, gpu, date, ratio in (("h200-late", "H200", "2026-11-28 12:57 UTC", 0.97),
                                     ("h100-later", "H100", "2026-12-01 00:00 UTC", 0.90),
                                     ("h200-early", "H200", "2026-11-20 00:00 UTC", 0.80)):  # fmt: skip
        (root / "results" / folder).mkdir()
        (root / "results" / folder / "bench.csv").write_text(head + f"{gpu},{date}," + row.format(ratio))
    marker = "<!-- fig lesson=05 shape=4096 col=ratio -->0.94×"
    _notebook(root, marker)
    (root / "README.md").write_text(marker + "\n")
    (found,) = figures.stale(root)
    assert found.startswith("solutions/05_x.ipynb, cell 0: 0.94 from results/bench.csv")
    assert "results/h200-late/bench.csv (2026-11-28 12:57 UTC, 1 later run)" in found
    _notebook(root, marker.replace("lesson=05", "file=h200-late/bench.csv lesson=05").replace("0.94", "0.97"))
    assert figures.stale(root) == []
