"""Which gallery scripts the docs build ran to the end, and on exactly which sources.

The docs command runs every gallery script (sphinx-gallery), and the test
command runs each again as a pytest item. When both run in one checkout, the
second run repeats the first on the same inputs. So the docs build writes
``build/gallery_runs.json``: the scripts that finished without an error, and a
key of everything their result can depend on:

* every file of the checkout that git tracks or would track (ignored files,
  such as build caches, are left out), by content: the compiled library is
  built from these sources with the torch below and the build switches among
  the variables below (its own bytes change with each link);
* the interpreter, torch's and Triton's versions, whether a GPU is visible;
* the environment variables that change what a script does (``TRITON_*``,
  ``TORCH*``, ``CUDA*``, ``OPGUIDE_*`` but ``OPGUIDE_JOBS``, ``USE_CUDA``,
  ``DEBUG``, ``CI``).

Each side computes the key before any script or test runs (the docs build
when its builder starts, the test run when pytest starts), since a script or
a test may change the environment. A gallery item of the test suite takes
the docs build's result only when the two keys are equal, and runs the
script otherwise. Without git
(a source archive), or with ``OPGUIDE_RERUN_GALLERY=1``, every script runs.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RECORD = ROOT / "build" / "gallery_runs.json"
_ENV_PREFIXES = ("TRITON_", "TORCH", "CUDA", "OPGUIDE_", "USE_CUDA", "DEBUG", "CI")
_ENV_LEFT_OUT = {"OPGUIDE_JOBS", "OPGUIDE_RERUN_GALLERY"}

#: The gallery scripts that take longest, longest first. The docs build
#: (``docs/conf.py``) and the test command (``conftest.py``) start these before
#: the others, so that a run ends with short scripts on every process instead
#: of one long script on one of them. Step 16 leads: on a GPU machine its
#: AOTInductor packages and CUDA graphs make it the longest by far.
LONGEST_FIRST = (
    "16_across_pytorch.py",
    "18_your_own_operator.py",
    "03_cuda_kernel.py",
    "20_your_operator_in_a_model.py",
    "19_ship_your_operator.py",
    "12_overriding_aten.py",
    "13_namespaces_and_fragments.py",
    "09_triton_kernel_2_long_rows.py",
)


def key(root: Path = ROOT) -> str | None:
    """The key of what a gallery script's result depends on here; None without git."""
    # The files git tracks or would track.
    command = ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"]
    try:
        done = subprocess.run(command, cwd=root, capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    digest = hashlib.sha256()
    for name in sorted(set(filter(None, done.stdout.decode().split("\0")))):
        path = root / name
        if path.is_file():
            digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    import torch

    from guidekit.recorded import installed_version

    env = {
        k: v
        for k, v in sorted(os.environ.items())
        if k.startswith(_ENV_PREFIXES) and k not in _ENV_LEFT_OUT
    }
    facts = [sys.executable, sys.version, torch.__version__, installed_version("triton")]
    facts += [torch.cuda.is_available(), env]
    digest.update(json.dumps(facts, sort_keys=True, default=str).encode())
    return digest.hexdigest()


def write(passed: list[str], root: Path = ROOT, at_start: str | None = None) -> None:
    """Records the gallery scripts (file names) that the docs build ran without an error.

    Args:
        passed: the scripts' file names.
        root: the checkout.
        at_start: :func:`key` as the build computed it before it ran any script.
    """
    record = {"key": at_start if at_start is not None else key(root), "passed": sorted(passed)}
    RECORD.parent.mkdir(parents=True, exist_ok=True)
    RECORD.write_text(json.dumps(record, indent=1))


def passed_in_docs_build(script: str, root: Path = ROOT, current_key: str | None = None) -> bool:
    """Whether the docs build ran ``script`` (a file name) to the end on these same inputs.

    Args:
        script: the gallery script's file name.
        root: the checkout.
        current_key: :func:`key` of ``root``, when the caller has computed it already.
    """
    if os.environ.get("OPGUIDE_RERUN_GALLERY") == "1" or not RECORD.is_file():
        return False
    try:
        record = json.loads(RECORD.read_text())
    except ValueError:
        return False
    if script not in record.get("passed", []) or record.get("key") is None:
        return False
    return record["key"] == (current_key if current_key is not None else key(root))
