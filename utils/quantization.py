"""Harness for lesson 12 (quantized weights): the text its perplexity is measured on, and a bit-level table of the
int4 packing layout.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: a short English text that ships with the course (self-written): lesson 12's perplexity is measured on it
TEXT = ROOT / "data" / "tiny_text.txt"


def packing_table(codes, packed):
    """A DataFrame, one row per byte: the two codes it holds (k = 2j low nibble, k = 2j + 1 high nibble), and the
    byte in bits (high nibble first, as bits are written) and in decimal.

    ``codes``: one row of 4-bit codes (K,), ``packed``: the same row packed (K / 2,) uint8."""
    import pandas as pd

    codes, packed = [int(c) for c in codes], [int(b) for b in packed]
    if len(codes) != 2 * len(packed):
        raise ValueError(f"{len(codes)} codes but {len(packed)} bytes: a byte holds two codes")
    rows = []
    for j, byte in enumerate(packed):
        lo, hi = codes[2 * j], codes[2 * j + 1]
        rows.append(
            {
                "byte j": j,
                "k = 2j (low nibble)": lo,
                "k = 2j + 1 (high nibble)": hi,
                "bits (high | low)": f"{byte >> 4:04b} | {byte & 0xF:04b}",
                "byte": byte,
                "lo + 16 hi": lo + 16 * hi,
            }
        )
    return pd.DataFrame(rows).set_index("byte j")
