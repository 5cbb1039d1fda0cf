"""Help for a learner who is stuck: the reference answer, and the reference code to carry on with.

Under each exercise a lesson has two folded hints (``<details>`` in markdown) and then this, for the full answer::

    utils.hints.answer("02", "add_kernel")

It shows the definition of ``add_kernel`` as it stands in ``solutions/02_*.ipynb`` right now: the same source
the lesson is checked against, so a hint can never drift from the solution.

A learner who fell behind does not need to finish an exercise to do the next one::

    add_kernel, add = utils.hints.checkpoint("02", "add_kernel", "add")

returns the reference kernel and launcher, ready to call, in place of their own (``utils.lessons.checkpoint``,
the same function).
"""

from __future__ import annotations

import re
import sys

from .lessons import checkpoint, solution_source

__all__ = ["answer", "checkpoint"]


def _in_ipython() -> bool:
    """True inside a Jupyter/IPython session that can show rich output."""
    ipython = sys.modules.get("IPython")
    return ipython is not None and ipython.get_ipython() is not None


def answer(lesson: str, name: str) -> None:
    """Shows the reference solution of ``name`` (a kernel, launcher, function or constant) in lesson ``lesson``.

    In a notebook it is displayed as a highlighted Python code block; elsewhere it is printed. It returns nothing,
    so the last line of a cell does not echo the source a second time (``utils.lessons.solution_source`` returns
    it as a string). Raises ``KeyError`` naming the lesson when its solution defines no ``name``, and
    ``FileNotFoundError`` when no lesson matches ``lesson``.
    """
    source = solution_source(lesson, name)
    title = f"Reference answer: {name} from lesson {lesson} (the solution notebook's current source)"
    plain = f"# {title}\n{source}"
    if _in_ipython():
        from IPython.display import display

        # a fence longer than any run of backticks in the source, so a docstring holding ``` cannot close it
        fence = "`" * max(3, 1 + max((len(run) for run in re.findall(r"`+", source)), default=0))
        markdown = f"**{title}**\n\n{fence}python\n{source}\n{fence}"
        # both forms: JupyterLab and Colab render the markdown, a terminal IPython prints the plain text
        display({"text/markdown": markdown, "text/plain": plain}, raw=True)
    else:
        print(plain)
