"""Every test process decides GPU or interpreter before any kernel is defined."""

import matplotlib

matplotlib.use("Agg")

from utils import setup  # noqa: E402

ENV = setup(quiet=True)
