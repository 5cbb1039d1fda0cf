"""Pictures for the lessons: plain matplotlib, no widgets (the interactive versions are in utils.explorers).

* grids: how program ids cover an array (program_grid) and a matrix's tiles (tile_grid), with the arithmetic they
  draw (owner, num_programs, block_offsets, masked_lanes, tile_of, tile_order, live_blocks);
* hardware: a GPU's memory hierarchy (memory_hierarchy).

Each picture returns a matplotlib Figure: end a notebook cell with it to show it.
"""

from .grids import (
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
from .hardware import memory_hierarchy

__all__ = [
    "program_grid",
    "tile_grid",
    "memory_hierarchy",
    "owner",
    "num_programs",
    "block_offsets",
    "masked_lanes",
    "cdiv",
    "tile_of",
    "tile_order",
    "live_blocks",
]
