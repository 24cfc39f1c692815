"""The template's pure-Python route: each variant passes its README's commands.

The operator's body is PyTorch operations registered with
``torch.library.custom_op``: no compiler and no Triton. The machinery (render,
the torch-only venv, the README's commands) is in ``template_helpers.py``;
the default cases are its :data:`SOME` of this route
(``OPGUIDE_TEMPLATE_FULL=1``: every combination).
"""

from __future__ import annotations

import pytest
from template_helpers import cases, check_generated_project


@pytest.mark.parametrize("route, abi, kind, op_name, wheel, wheel_venv", cases("python"))
def test_generated_project_passes_its_readme_commands(
    tmp_path, base_venv, route, abi, kind, op_name, wheel, wheel_venv
):
    check_generated_project(tmp_path, base_venv, route, abi, kind, op_name, wheel, wheel_venv)
