"""The template's C++ route, classic ABI: each variant passes its README's commands; a break fails.

The machinery (render, the torch-only venv, the README's commands) is in
``template_helpers.py``; the default cases are its :data:`SOME` of this route
(``OPGUIDE_TEMPLATE_FULL=1``: every combination). The stable ABI's cases are
in ``test_template_stable.py``, so that pytest-xdist can run them beside these.
"""

from __future__ import annotations

import re

import pytest
from template_helpers import ReaderVenv, cases, check_generated_project, render


@pytest.mark.parametrize("route, abi, kind, op_name, wheel, wheel_venv", cases("cpp", "classic"))
def test_generated_project_passes_its_readme_commands(
    tmp_path, base_venv, route, abi, kind, op_name, wheel, wheel_venv
):
    check_generated_project(tmp_path, base_venv, route, abi, kind, op_name, wheel, wheel_venv)


def test_generated_tests_catch_a_broken_kernel(tmp_path, base_venv):
    """Breaks a generated in-place project twice: its tests must catch both.

    The CPU kernel of the functional operator loses a factor of its formula,
    and the in-place operator's version bump is deleted. One build holds both
    breaks; each is caught by tests that the other leaves passing. Only the
    C++ kernels are tested, so the project has no Triton variant: its install
    leaves out Triton's gigabyte.
    """
    package = "tpl_broken"
    project = render(
        tmp_path / package, package=package, op_name="silu_mul_", route="cpp", triton=False
    )
    assert not list(project.rglob("*triton*")), "rendered with a Triton variant"
    kernel = project / "csrc" / "silu_mul_cpu.cpp"
    source = kernel.read_text()
    right = "out[i] = static_cast<scalar_t>(v * sigmoid * static_cast<acc_t>(gate[i]));"
    assert right in source
    kernel.write_text(source.replace(right, "out[i] = static_cast<scalar_t>(v * sigmoid);"))
    inplace = project / "csrc" / "silu_mul_inplace.cpp"
    source = inplace.read_text()
    bump = "torch::autograd::increment_version(x);"
    assert bump in source
    inplace.write_text(source.replace(bump, ""))
    venv = ReaderVenv(base_venv, project)
    venv.install()
    tests = venv.test("-k", "cpp and not triton")
    assert tests.returncode == 1, tests.stdout + tests.stderr
    failed = set(re.findall(r"FAILED \S+::(\w+)\[", tests.stdout))
    assert "test_matches_reference" in failed, tests.stdout[-3000:]
    assert "test_inplace_write_is_seen_by_autograd" in failed, tests.stdout[-3000:]
    assert "test_inplace_refuses_inputs_that_need_grad" not in failed, tests.stdout[-3000:]
