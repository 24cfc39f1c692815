"""Fixtures that several test modules of ``tests/`` share."""

from __future__ import annotations

import pytest


@pytest.fixture
def base_venv(tmp_path_factory):
    """A virtual environment that holds torch and nothing else, made once per run.

    The template's tests and the manifests' tests copy it for each project
    they build (``template_helpers.torch_only_venv``).
    """
    from template_helpers import torch_only_venv

    return torch_only_venv(tmp_path_factory)
