"""Measured figures quoted in prose come from committed results, and stay equal to them.

A figure in a solution notebook's markdown, README or docs/ that was measured is written right after a marker that
says which results it comes from; the marker renders as nothing (it is an HTML comment)::

    the autotuned kernel reaches <!-- fig lesson=05 op=matmul shape=4096x4096x4096 dtype=fp16 impl=triton
    col=ratio -->0.94× cuBLAS

Keys select rows of ``results/bench.csv`` (``file=`` names another CSV in ``results/``); ``col`` is the column
quoted; when several rows match, ``agg=min|max|mean|geomean`` combines them. The figure is compared with the
value rounded to the decimals it is written with.

    python -m utils.figures           # exit 1 and list every figure that no longer matches its results
    python -m utils.figures --update  # rewrite the figures from the results (after a new `make bench`)
    python -m utils.figures --stale   # the lessons' figures that a later run on the same GPU measured again

A two-decimal ratio such as ``0.94×`` (or ``0.94x``) written without a marker is reported too: a measured figure
must say where it comes from (predictions and rough figures are written without decimals: "about 4×").
"""

from __future__ import annotations

import argparse
import math
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"
# the keys run to the marker's end, and may hold a ">" (shape="1B 2048->8192 M=1")
MARKER = re.compile(r"<!--\s*fig\s+(?P<keys>(?:(?!-->)[^\n])*?)\s*-->(?P<value>-?\d[\d,]*(?:\.\d+)?)")
UNMARKED = re.compile(r"(?<![\d.>])\d+\.\d\d(?:×|x(?!\w))")  # 0.94× or 0.94x
AGGREGATES = {
    "min": min,
    "max": max,
    "mean": lambda v: sum(v) / len(v),
    "geomean": lambda v: math.exp(sum(math.log(x) for x in v) / len(v)),
}


@dataclass(frozen=True)
class Figure:
    where: str  # file, and cell for notebooks
    keys: dict
    text: str  # the figure as written
    start: int
    end: int

    def describe(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.keys.items())


def _table(name: str):
    import pandas as pd

    return pd.read_csv(RESULTS / name, dtype={"lesson": str}, keep_default_na=False, na_values=[""])


def value_of(keys: dict, tables: dict | None = None) -> float:
    """The value a marker's keys select from the results."""
    keys = dict(keys)
    tables = {} if tables is None else tables
    name, col, agg = keys.pop("file", "bench.csv"), keys.pop("col", None), keys.pop("agg", None)
    if col is None:
        raise ValueError("a figure marker needs col=<column>")
    rows = _rows(name, keys, tables, col)
    values = [float(v) for v in rows[col]]
    if not values:
        raise ValueError(f"no row of results/{name} has {keys}")
    if len(values) > 1 and agg is None:
        raise ValueError(f"{len(values)} rows of results/{name} have {keys}: add keys, or agg=min|max|mean|geomean")
    return AGGREGATES[agg](values) if agg else values[0]


def formatted(value: float, like: str) -> str:
    """``value`` with as many decimals as ``like`` has, and thousands separators if ``like`` uses them."""
    decimals = len(like.split(".")[1]) if "." in like else 0
    text = f"{value:,.{decimals}f}" if "," in like else f"{value:.{decimals}f}"
    return text


def _texts(root: Path):
    """(where, text, setter) for every markdown text that may quote figures."""
    import nbformat

    for path in sorted((root / "solutions").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        for k, cell in enumerate(nb.cells):
            if cell.cell_type == "markdown":
                yield f"{path.relative_to(root)}, cell {k}", cell.source, (path, k)
    for path in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        if path.exists():
            yield str(path.relative_to(root)), path.read_text(), (path, None)


def figures(text: str, where: str) -> list[Figure]:
    out = []
    for m in MARKER.finditer(text):
        keys = dict(part.split("=", 1) for part in shlex.split(m.group("keys")))
        out.append(Figure(where, keys, m.group("value"), m.start("value"), m.end("value")))
    return out


def unmarked(text: str) -> list[str]:
    """Two-decimal ratios written without a marker."""
    marked = {m.start("value") for m in MARKER.finditer(text)}
    return [m.group(0) for m in UNMARKED.finditer(text) if m.start() not in marked]


def problems(root: Path = ROOT) -> list[str]:
    """Every figure that does not match its results, every broken marker, every unmarked measured ratio."""
    found, tables = [], {}
    for where, text, _ in _texts(root):
        for fig in figures(text, where):
            try:
                want = formatted(value_of(fig.keys, tables), fig.text)
            except (ValueError, KeyError, FileNotFoundError) as e:
                found.append(f"{where}: marker `{fig.describe()}`: {e}")
                continue
            if want != fig.text:
                found.append(f"{where}: {fig.text} should be {want} ({fig.describe()})")
        for text_ in unmarked(text):
            found.append(f"{where}: {text_} is quoted without a `<!-- fig ... -->` marker saying which result it is")
    return found


def stale(root: Path = ROOT) -> list[str]:
    """Figures in the lessons (solutions/) whose row a later run on the same GPU measured again: a lesson quotes
    where its kernels stand now (history goes in docs/), so each is a place to look at after a new `make bench`.
    A later run may have measured another setting on purpose (a sweep's paired runs): the list is for a reader,
    not a test."""
    found, tables = [], {}
    runs = sorted(p.relative_to(RESULTS).as_posix() for p in RESULTS.rglob("bench.csv"))
    for where, text, _ in _texts(root):
        if not where.startswith("solutions"):
            continue
        for fig in figures(text, where):
            keys = {k: v for k, v in fig.keys.items() if k not in ("file", "col", "agg")}
            name = fig.keys.get("file", "bench.csv")

            def dated(run, keys=keys):  # the rows keys select in a run that records its GPU and date, or None
                try:
                    rows = _rows(run, keys, tables, "gpu", "date")
                except (ValueError, FileNotFoundError):
                    return None  # a marker problems() reports, or a run without those columns
                return rows if not rows.empty else None

            rows = dated(name)
            if rows is None:
                continue
            gpus, date = set(rows["gpu"].astype(str)), max(rows["date"].astype(str))
            newer = []
            for other in runs:
                later = dated(other) if other != name else None
                later = None if later is None else later[later["gpu"].astype(str).isin(gpus)]
                if later is not None and not later.empty and max(later["date"].astype(str)) > date:
                    newer.append((max(later["date"].astype(str)), other))
            if newer:
                when, last = max(newer)
                found.append(f"{where}: {fig.text} from results/{name} ({date}); measured again in results/{last} "
                             f"({when}, {len(newer)} later run{'s' * (len(newer) > 1)}): {fig.describe()}")  # fmt: skip
    return found


def _rows(name: str, keys: dict, tables: dict, *columns: str):
    """The rows of results/<name> (read once into tables) that keys select; a ValueError naming a key or one of
    ``columns`` that the file does not have."""
    if name not in tables:
        tables[name] = _table(name)
    frame = tables[name]
    for key in (*columns, *keys):
        if key not in frame.columns:
            raise ValueError(f"results/{name} has no column {key!r}")
    rows = frame
    for key, want in keys.items():
        rows = rows[rows[key].astype(str) == want]
    return rows


def update(root: Path = ROOT) -> list[str]:
    """Rewrites every marked figure from the results; returns what changed."""
    import nbformat

    changed, tables, notebooks = [], {}, {}
    for where, text, (path, cell) in _texts(root):
        new, shift = text, 0
        for fig in figures(text, where):
            want = formatted(value_of(fig.keys, tables), fig.text)
            if want != fig.text:
                new = new[: fig.start + shift] + want + new[fig.end + shift :]
                shift += len(want) - len(fig.text)
                changed.append(f"{where}: {fig.text} -> {want}")
        if new == text:
            continue
        if cell is None:
            path.write_text(new)
        else:
            nb = notebooks.setdefault(path, nbformat.read(path, as_version=4))
            nb.cells[cell].source = new
    for path, nb in notebooks.items():
        path.write_text(nbformat.writes(nb) + "\n")
    return changed


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Check (or rewrite) the measured figures quoted in prose.")
    parser.add_argument("--update", action="store_true", help="rewrite the figures from results/")
    parser.add_argument("--stale", action="store_true", help="list the lessons' figures a later run measured again")
    args = parser.parse_args(argv)
    if args.stale:
        for line in stale():
            print(line)
    if args.update:
        for line in update():
            print(line)
    bad = problems()
    for line in bad:
        print(line)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
