"""The recorded GPU results that step 11's pages print, read, analysed and plotted.

``docs/recorded/`` holds result files written on a GPU: JSON files of
``python -m guidekit.benchmark`` and text files of the ``tools/sweep_*``
programs. The functions here turn them into the tables and the counts that
the performance pages print (targets met or missed, points behind a peer,
gains of an optimisation), so that every claim the page makes comes out of a
function that ``tests/test_recorded.py`` runs on small synthetic records and
on the recorded files themselves.

* :mod:`.fixed_shapes`: two fixed-shape runs side by side, in % of the copy;
* :mod:`.sweeps`: the sweep over the row length: floors, targets, misses,
  peers;
* :mod:`.long_rows`: long rows split over blocks or programs, and odd row
  lengths;
* :mod:`.tool_outputs`: the text that the ``tools/sweep_*`` programs print;
* :mod:`.lessons`: the tuning changes measured before and after, ranked;
* :mod:`.eager`: wall-clock times per call, and the parts of a training call;
* :mod:`.pages`: what a page calls in one line: read a file and print its
  device and date, print computed lines, report what a page measures live;
* :mod:`.plots`: the pages' figures, drawn from the same records.

Functions that return ``list[str]`` return lines to print; the others return
the numbers that those lines state.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

__all__ = ["describe", "listed", "load", "recorded_dir"]


def recorded_dir() -> Path:
    """The folder of the recorded results, ``docs/recorded/`` of the source tree.

    Raises:
        FileNotFoundError: if no opguide source tree is found.
    """
    from guidekit.compile_checks import source_root

    return source_root() / "docs" / "recorded"


def load(name: str, directory: Path | None = None) -> dict:
    """A recorded JSON result file.

    Args:
        name: its file name, e.g. ``"sweep_h100.json"``.
        directory: where it is (default: :func:`recorded_dir`).

    Returns:
        The file's content.
    """
    return json.loads(((directory or recorded_dir()) / name).read_text())


def describe(name: str, data: dict) -> str:
    """``"name: device, date, torch version"``: where and when a result was measured."""
    return f"{name}: {data['device']}, {data['date'][:10]}, torch {data['torch']}"


def listed(items: Iterable) -> str:
    """The items joined by ``", "``, or ``"none"`` when there are none."""
    return ", ".join(map(str, items)) or "none"
