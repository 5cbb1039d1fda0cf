"""Help for a learner who is stuck: the reference answer, and the reference code to carry on with.

Under each exercise a lesson has two folded hints (``<details>`` in markdown) and then this, for the full answer::

    utils.hints.answer("03", "add_kernel")

It shows the definition of ``add_kernel`` as it stands in ``solutions/03_*.ipynb`` right now: the same source
the lesson is checked against, so a hint can never drift from the solution.

A learner who fell behind does not need to finish an exercise to do the next one::

    add_kernel, add = utils.hints.checkpoint("03", "add_kernel", "add")

returns the reference kernel and launcher, ready to call, in place of their own.
"""
from __future__ import annotations

import re
import sys

from .lessons import checkpoint as _checkpoint
from .lessons import solution_source

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


def checkpoint(lesson: str, *names: str):
    """The reference versions of ``names`` from lesson ``lesson``, to carry on when you fell behind.

    Every later step of a lesson (and every later lesson) only needs the names it uses to exist. If your kernel
    does not pass its check yet and you would rather move on than fall further behind, take the reference one::

        add_kernel, add = utils.hints.checkpoint("03", "add_kernel", "add")   # several names -> a tuple
        softmax = utils.hints.checkpoint("04", "softmax")                      # one name -> that object

    and run the next cells as if you had written them. Come back to your own version later: your cell is still
    there, and re-running it puts your definition back.

    On a GPU, a kernel that has already run keeps the ``@triton.jit`` helpers it was compiled with. When you take
    a helper that your kernels have already called, take those kernels' launchers too, so nothing stale runs::

        tile_dot, matmul_tiled = utils.hints.checkpoint("05", "tile_dot", "matmul_tiled")

    Kernels defined further down compile on their first call and pick up the helper you took. Under the
    interpreter nothing is compiled, and this does not arise.

    Raises ``AttributeError`` for a name the lesson does not export (see its cells tagged ``export``).
    """
    return _checkpoint(lesson, *names)
