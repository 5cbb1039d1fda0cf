"""Notebook runs (`make test-notebooks`: nbval under pytest-xdist) start a kernel again when one dies while starting.

jupyter_client picks a kernel's five ports by binding to port 0 and releasing the socket; the kernel binds them a
moment later. Two workers starting kernels at the same instant can be handed the same free port, and the kernel
that loses exits before it answers `kernel_info` ("Kernel died before replying to kernel_info"), failing every cell
of its notebook though nothing in the notebook is wrong. It happened once in CI; a fresh start gets fresh ports.
"""

import warnings

try:
    import nbval.kernel
except ImportError:  # the unit tests run without nbval too
    nbval = None

ATTEMPTS = 3

if nbval is not None:
    _start_new_kernel = nbval.kernel.start_new_kernel

    def _start_new_kernel_again_if_it_dies(*args, **kwargs):
        for attempt in range(1, ATTEMPTS + 1):
            try:
                return _start_new_kernel(*args, **kwargs)
            except RuntimeError as error:  # "Kernel died before replying to kernel_info", or a start timeout
                if attempt == ATTEMPTS:
                    raise
                warnings.warn(f"kernel start {attempt} of {ATTEMPTS} failed ({error}); starting it again", stacklevel=2)

    nbval.kernel.start_new_kernel = _start_new_kernel_again_if_it_dies
