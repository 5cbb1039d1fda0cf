"""The sweep scripts in bench/sweeps run on a GPU; here they must at least compile, and each must offer the --cpu
smoke mode its README promises."""

import ast
from pathlib import Path

import pytest

SWEEPS = sorted((Path(__file__).parent.parent / "bench" / "sweeps").glob("l[0-9]*.py"))


def test_there_are_sweeps_and_the_readme_lists_each():
    assert SWEEPS, "bench/sweeps has no sweep script"
    readme = (SWEEPS[0].parent / "README.md").read_text()
    for path in SWEEPS:
        assert f"`{path.name}`" in readme, f"bench/sweeps/README.md does not list {path.name}"


@pytest.mark.parametrize("path", SWEEPS, ids=lambda p: p.name)
def test_a_sweep_compiles_and_has_a_cpu_mode(path):
    source = path.read_text()
    compile(ast.parse(source), str(path), "exec")
    assert '"--cpu"' in source, f"{path.name} has no --cpu smoke mode"
