"""utils.pictures.grids: the arithmetic of program ids and tiles, and pictures that draw exactly that arithmetic."""

import random

import matplotlib.pyplot as plt
import numpy as np
import pytest

from utils import pictures
from utils.pictures import (
    block_offsets,
    cdiv,
    live_blocks,
    masked_lanes,
    num_programs,
    owner,
    program_grid,
    tile_grid,
    tile_of,
    tile_order,
)
from utils.pictures.grids import MAX_TILE_LABELS, shown_programs


def by_gid(fig, gid, kind="any"):
    ax = fig.axes[0]
    artists = {"texts": ax.texts, "patches": ax.patches, "any": ax.get_children()}[kind]
    return [a for a in artists if a.get_gid() == gid]


# -- 1-D arithmetic ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("BLOCK_SIZE", [1, 2, 8, 64, 100])
def test_every_element_has_exactly_one_owner_whose_offsets_hold_it(BLOCK_SIZE):
    n = 3 * BLOCK_SIZE + 5
    count = num_programs(n, BLOCK_SIZE)
    covered = np.concatenate([block_offsets(pid, BLOCK_SIZE) for pid in range(count)])
    assert sorted(covered) == list(range(count * BLOCK_SIZE))  # blocks tile 0..count*BLOCK_SIZE without overlap
    for i in range(n):
        pid = owner(i, BLOCK_SIZE)
        assert i in block_offsets(pid, BLOCK_SIZE)
        assert 0 <= pid < count


def test_cdiv_rounds_up_and_counts_the_masked_tail():
    for _ in range(200):
        n, b = random.randint(1, 10**6), random.choice([1, 2, 16, 128, 1024, 37])
        p = num_programs(n, b)
        assert (p - 1) * b < n <= p * b  # enough programs, and not one too many
        assert cdiv(n, b) == p
        assert masked_lanes(n, b) == p * b - n
        assert 0 <= masked_lanes(n, b) < b
    assert (num_programs(1, 1024), masked_lanes(1, 1024)) == (1, 1023)
    assert (num_programs(1024, 1024), masked_lanes(1024, 1024)) == (1, 0)
    assert (num_programs(1025, 1024), masked_lanes(1025, 1024)) == (2, 1023)


@pytest.mark.parametrize(
    "bad",
    [
        lambda: owner(-1, 8),
        lambda: owner(3, 0),
        lambda: num_programs(0, 8),
        lambda: num_programs(8, -2),
        lambda: owner(2.5, 8),
    ],
)
def test_bad_sizes_are_refused(bad):
    with pytest.raises(ValueError):
        bad()


def test_shown_programs_elides_the_middle_but_keeps_the_last_and_the_asked():
    assert shown_programs(5, 16) == [0, 1, 2, 3, 4]
    rows = shown_programs(100, 16, keep=[50])
    assert rows[0] == 0 and rows[-1] == 99 and 50 in rows and None in rows
    assert len([r for r in rows if r is not None]) <= 16
    shown = [r for r in rows if r is not None]
    assert shown == sorted(shown)
    # every None stands between two programs that are not neighbours
    for k, r in enumerate(rows):
        if r is None:
            assert rows[k + 1] - rows[k - 1] > 1


# -- 2-D arithmetic ----------------------------------------------------------------------------------------------


def test_tile_order_row_major_is_reading_order():
    order = tile_order(100, 70, 32, 16)  # 4 x 5 tiles, both edges partial
    assert order.shape == (4, 5)
    assert (order == np.arange(20).reshape(4, 5)).all()


def test_grouped_order_by_hand():
    # 5 rows x 3 columns of tiles, GROUP_M=2: groups of 2 tile rows swept column by column; the last group has 1 row
    want = np.array([[0, 2, 4], [1, 3, 5], [6, 8, 10], [7, 9, 11], [12, 13, 14]])
    assert (tile_order(5 * 16, 3 * 16, 16, 16, GROUP_M=2) == want).all()
    assert tile_of(13, 80, 48, 16, 16, GROUP_M=2) == (4, 1)


def test_grouped_order_extremes_and_permutation():
    for _ in range(30):
        M, N = random.randint(1, 700), random.randint(1, 700)
        BM, BN = random.choice([16, 32, 64]), random.choice([16, 32, 64])
        G = random.choice([1, 2, 3, 4, 8])
        order = tile_order(M, N, BM, BN, G)
        assert sorted(order.ravel()) == list(range(order.size))  # every tile computed exactly once
        assert (tile_order(M, N, BM, BN, 1) == tile_order(M, N, BM, BN)).all()  # GROUP_M=1 is row-major
        rows = order.shape[0]
        column_major = np.arange(order.size).reshape(order.shape[1], rows).T
        assert (tile_order(M, N, BM, BN, rows) == column_major).all()  # one group holding every row
        for pid in random.sample(range(order.size), min(5, order.size)):
            assert order[tile_of(pid, M, N, BM, BN, G)] == pid


def test_live_blocks_show_why_grouping_helps_l2():
    rm = tile_order(9 * 32, 9 * 32, 32, 32)
    gr = tile_order(9 * 32, 9 * 32, 32, 32, GROUP_M=3)
    assert live_blocks(rm, 9) == ([0], list(range(9)))  # 1 + 9 = 10 blocks for 9 tiles
    assert live_blocks(gr, 9) == ([0, 1, 2], [0, 1, 2])  # 3 + 3 = 6 blocks for the same 9 tiles
    assert live_blocks(gr, 1) == ([0], [0])


def test_tile_of_refuses_a_pid_outside_the_grid():
    with pytest.raises(ValueError):
        tile_of(20, 100, 70, 32, 16)


# -- program_grid --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n, BLOCK_SIZE", [(37, 8), (1, 4), (32, 8), (100, 32), (5, 1)])
def test_program_grid_shows_every_offset_and_the_masked_tail(n, BLOCK_SIZE):
    fig = program_grid(n, BLOCK_SIZE)
    count = num_programs(n, BLOCK_SIZE)
    labels = by_gid(fig, "offset", "texts")
    assert len(labels) == count * BLOCK_SIZE
    assert sorted(int(t.get_text()) for t in labels) == list(range(count * BLOCK_SIZE))
    for t in labels:  # the cell of offset o sits at row o // BLOCK_SIZE, column o % BLOCK_SIZE
        o = int(t.get_text())
        assert t.get_position() == (o % BLOCK_SIZE, o // BLOCK_SIZE)
    tails = by_gid(fig, "tail", "patches")
    if masked_lanes(n, BLOCK_SIZE):
        assert len(tails) == 1 and tails[0].get_width() == masked_lanes(n, BLOCK_SIZE)
        assert tails[0].get_x() + tails[0].get_width() == BLOCK_SIZE - 0.5  # it ends at the last lane
    else:
        assert tails == []
    assert f"({count},) programs" in fig.axes[0].get_title(loc="left")
    assert not plt.fignum_exists(fig.number)  # closed in pyplot: shown once, as the returned value


def test_program_grid_highlights_an_element_in_its_owners_row():
    fig = program_grid(37, 8, element=21)
    (box,) = by_gid(fig, "element", "patches")
    assert (box.get_x() + 0.5, box.get_y() + 0.5) == (21 % 8, 21 // 8)
    assert "pid 21 // 8 = 2" in fig.axes[0].get_title(loc="left")
    fig = program_grid(37, 8, highlight=3)
    (row,) = by_gid(fig, "highlight", "patches")
    assert row.get_y() + 0.5 == 3 and row.get_width() == 8


def test_program_grid_with_many_programs_keeps_the_highlight_and_the_tail():
    fig = program_grid(10_000, 16, element=5003)
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert f"pid {5003 // 16}" in labels and f"pid {num_programs(10_000, 16) - 1}" in labels and "⋮" in labels
    assert len(by_gid(fig, "tail", "patches")) == (masked_lanes(10_000, 16) > 0)
    big = program_grid(1000, 256)  # too many lanes for numbers: each row's range instead
    assert by_gid(big, "offset", "texts") == []
    assert by_gid(big, "range", "texts")[-1].get_text().strip() == "768…999"


@pytest.mark.parametrize("kwargs", [dict(highlight=5), dict(element=37), dict(element=-1)])
def test_program_grid_refuses_what_is_not_there(kwargs):
    with pytest.raises(ValueError):
        program_grid(37, 8, **kwargs)


def test_program_grid_draws_into_a_given_axes():
    fig, ax = plt.subplots()
    assert program_grid(10, 4, ax=ax) is fig
    assert plt.fignum_exists(fig.number)  # not closed: it is the caller's figure
    plt.close(fig)


# -- tile_grid -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("GROUP_M", [None, 2, 3])
def test_tile_grid_labels_equal_tile_order(GROUP_M):
    M, N, BM, BN = 150, 100, 32, 32  # 5 x 4 tiles; the last row and column are partial
    order = tile_order(M, N, BM, BN, GROUP_M)
    fig = tile_grid(M, N, BM, BN, GROUP_M=GROUP_M)
    tiles = by_gid(fig, "tile", "patches")
    assert len(tiles) == order.size
    labels = by_gid(fig, "order", "texts")
    assert len(labels) == order.size
    for t in labels:
        x, y = t.get_position()
        assert int(t.get_text()) == order[int(y // BM), int(x // BN)]
    partial = sum(
        1 for m in range(order.shape[0]) for n in range(order.shape[1]) if (m + 1) * BM > M or (n + 1) * BN > N
    )
    assert partial == 5 + 4 - 1
    assert len(by_gid(fig, "overhang", "patches")) == partial
    # partial tiles stop at the matrix edge
    assert max(p.get_x() + p.get_width() for p in tiles) == N
    assert max(p.get_y() + p.get_height() for p in tiles) == M
    groups = by_gid(fig, "group")
    assert len(groups) == (0 if GROUP_M is None else -(-order.shape[0] // GROUP_M) - 1)


def test_tile_grid_upto_labels_only_the_first_programs_and_marks_their_blocks():
    M = N = 9 * 32
    order = tile_order(M, N, 32, 32, GROUP_M=3)
    fig = tile_grid(M, N, 32, 32, GROUP_M=3, upto=9)
    assert sorted(int(t.get_text()) for t in by_gid(fig, "order", "texts")) == list(range(9))
    rows, cols = live_blocks(order, 9)
    a = by_gid(fig, "a_block", "patches")
    b = by_gid(fig, "b_block", "patches")
    assert len(a) == 9 and len(b) == 9
    orange = [p for p in a if p.get_facecolor()[:3] != a[-1].get_facecolor()[:3]]
    assert len(orange) == len(rows) == 3
    assert "3 row-blocks of A + 3 column-blocks of B = 6" in fig.axes[0].get_title(loc="left")
    rm = tile_grid(M, N, 32, 32, upto=9)
    assert "1 row-block of A + 9 column-blocks of B = 10" in rm.axes[0].get_title(loc="left")


def test_tile_grid_with_many_tiles_draws_one_image_in_launch_order():
    M, N, BM, BN = 64 * 21 - 5, 64 * 20, 64, 64
    assert 21 * 20 > MAX_TILE_LABELS
    order = tile_order(M, N, BM, BN, GROUP_M=4)
    fig = tile_grid(M, N, BM, BN, GROUP_M=4)
    assert by_gid(fig, "order", "texts") == [] and by_gid(fig, "tile", "patches") == []
    (image,) = by_gid(fig, "tiles")
    pixels = np.asarray(image.get_array())
    assert pixels.shape[:2] == order.shape
    # the colour runs along viridis with the program id: sorting tiles by colour sorts them by pid
    cmap = plt.get_cmap("viridis")
    ramp = cmap(np.linspace(0.15, 1, 256))[:, :3]
    position = np.abs(pixels[..., None, :3] - ramp).sum(-1).argmin(-1)
    assert (np.diff(position.ravel()[np.argsort(order.ravel())]) >= 0).all()
    assert len(by_gid(fig, "overhang", "patches")) == 1  # only the last tile row sticks out (M = 21 * 64 - 5)


def test_tile_grid_refuses_upto_outside_the_grid():
    with pytest.raises(ValueError):
        tile_grid(64, 64, 32, 32, upto=5)
    with pytest.raises(ValueError):
        tile_grid(64, 64, 32, 32, upto=0)


def test_the_package_exports_the_pictures():
    for name in ("program_grid", "tile_grid", "memory_hierarchy", "owner", "tile_order"):
        assert callable(getattr(pictures, name))
