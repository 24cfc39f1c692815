"""The recorded GPU results that the pages print, and the bookkeeping that keeps them honest.

``docs/recorded/`` holds result files written on a GPU: JSON files of
``python -m guidekit.benchmark`` and of the ``tools/record_*.py`` tools, and
the text that the ``tools/sweep_*`` programs print.

* ``pages``: what a page calls to show a record: read it and print where and
  when it was measured, pick its rows, print them as a table, draw them;
  the page computes each sentence it states from the same rows
  (``tests/test_recorded.py`` runs these readers on small synthetic records
  and on the recorded files);
* ``sources``: the files each record measured, their stored hashes, and
  the sentence a page prints when they have changed since;
  ``equivalence``: the code of a file that those hashes cover (no comments);
  ``stamp``: the command that stores and checks the hashes.
"""

from __future__ import annotations

import importlib
import json
import re
import shlex
from collections.abc import Iterable, Sequence
from pathlib import Path

__all__ = [
    "GPU_PART",
    "describe",
    "installed_version",
    "listed",
    "load",
    "recorded_dir",
    "resolve",
    "short_gpu_name",
    "tool_command",
]


#: A GPU's part of a record's file name, as :func:`short_gpu_name` writes it
#: (``h100``, ``mi300x``); :func:`resolve` and ``tools/gpu_records.sh`` match it.
GPU_PART = "[a-z]+[0-9]+[a-z]*"


def short_gpu_name(device_name: str) -> str:
    """The GPU's part of a record's file name: ``"NVIDIA H100 80GB HBM3"`` -> ``"h100"``.

    Args:
        device_name: as ``torch.cuda.get_device_name()`` gives it.

    Returns:
        The first word of letters then digits, lower case; the whole name in
        lower case with ``_`` between words when there is none.
    """
    found = re.search(rf"\b({GPU_PART})\b", device_name.replace("NVIDIA", "").lower())
    if found:
        return found.group(1)
    return re.sub(r"[^a-z0-9]+", "_", device_name.lower()).strip("_")


def tool_command(tool: str, argv: Sequence[str]) -> str:
    """The command line a record states: ``--out``'s folder left out (it names a machine).

    Args:
        tool: the tool's path from the repository root, e.g.
            ``"tools/record_model_step.py"``.
        argv: the tool's arguments, as ``sys.argv[1:]`` holds them.

    Returns:
        ``python <tool> <arguments>``, with only the file name of ``--out FILE``
        or ``--out=FILE``.
    """
    shown, after_out = [], False
    for arg in argv:
        if after_out:
            arg = Path(arg).name
        elif arg.startswith("--out="):
            arg = "--out=" + Path(arg.removeprefix("--out=")).name
        after_out = arg == "--out"
        shown.append(arg)
    return shlex.join(["python", tool, *shown])


def recorded_dir() -> Path:
    """The folder of the recorded results, ``docs/recorded/`` of the source tree.

    Raises:
        FileNotFoundError: if no opguide source tree is found.
    """
    from guidekit.compile_checks import source_root

    return source_root() / "docs" / "recorded"


def resolve(name: str, directory: Path | None = None) -> str:
    """The record that ``name`` names, ``<gpu>`` standing for the GPU's part
    (``"sweep_<gpu>.json"``); ``tools/gpu_records.sh`` keeps one such record.

    Raises:
        FileNotFoundError: if not exactly one record matches.
    """
    if "<gpu>" not in name:
        return name
    folder = directory or recorded_dir()
    pattern = re.escape(name).replace(re.escape("<gpu>"), GPU_PART)
    found = sorted(p.name for p in folder.iterdir() if re.fullmatch(pattern, p.name))
    if len(found) != 1:
        raise FileNotFoundError(f"{name}: {len(found)} records match in {folder}: {found}")
    return found[0]


def load(name: str, directory: Path | None = None) -> dict:
    """A recorded JSON result file.

    Args:
        name: its file name, e.g. ``"sweep_<gpu>.json"`` (see :func:`resolve`).
        directory: where it is (default: :func:`recorded_dir`).

    Returns:
        The file's content.
    """
    return json.loads(((directory or recorded_dir()) / resolve(name, directory)).read_text())


def describe(name: str, data: dict) -> str:
    """``"name: device, date, torch version"``: where and when a result was measured."""
    return f"{name}: {data['device']}, {data['date'][:10]}, torch {data['torch']}"


def installed_version(module: str) -> str | None:
    """``module.__version__`` (``"triton"``, ``"kernels"``); None where it does not import."""
    try:
        return importlib.import_module(module).__version__
    except ImportError:
        return None


def listed(items: Iterable) -> str:
    """The items joined by ``", "``, or ``"none"`` when there are none."""
    return ", ".join(map(str, items)) or "none"
