"""Every test process decides GPU or interpreter before any kernel is defined."""

import matplotlib

matplotlib.use("Agg")

from utils import setup  # noqa: E402

ENV = setup(quiet=True)


def pytest_collection_modifyitems(items):
    """The tests marked slow (whole notebooks, the offline compiler) run first: with two workers, a minute-long test
    drawn last keeps one worker busy while the other has nothing left to do."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # a stable sort: the rest keep their order
