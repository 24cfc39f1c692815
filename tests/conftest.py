"""Fixtures that several test modules of ``tests/`` share."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest


@pytest.fixture
def base_venv(tmp_path_factory):
    """A virtual environment that holds torch and nothing else, made once per run.

    The template's tests and the manifests' tests copy it for each project
    they build (``template_helpers.torch_only_venv``).
    """
    from template_helpers import torch_only_venv

    return torch_only_venv(tmp_path_factory)


def venvs_under(folder: Path, depth: int = 3) -> list[Path]:
    """The virtual environments (folders holding ``pyvenv.cfg``) at most ``depth`` levels down."""
    found = []
    for level in range(1, depth + 1):
        pattern = "/".join(["*"] * level) + "/pyvenv.cfg"
        found += [cfg.parent for cfg in folder.glob(pattern)]
    return found


@pytest.fixture(autouse=True)
def _remove_venvs_after_the_test(request):
    """Removes the virtual environments a test made in its ``tmp_path`` once it ends.

    Each holds Triton or a copy of torch's files, a gigabyte or more.
    pytest keeps a test's folder until the run ends (longer when it fails,
    ``tmp_path_retention_policy``), so without this the venvs of every
    project test would pile up on the disk at once. The project folders, with
    their build logs, stay.
    """
    yield
    tmp_path = request.node.funcargs.get("tmp_path")
    if isinstance(tmp_path, Path):
        for venv in venvs_under(tmp_path):
            shutil.rmtree(venv, ignore_errors=True)
