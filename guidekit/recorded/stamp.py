"""Stores with each record in ``docs/recorded/`` the hashes of the code it measured.

After a record is (re)made on the GPU machine, from the repository root::

    python -m guidekit.recorded.stamp docs/recorded/sweep_<gpu>.json [MORE RECORDS...]

hashes the files that the record measured (:data:`~guidekit.recorded.sources.MEASURED`)
as they are in the work tree and stores the hashes with it.
``tools/gpu_records.sh`` runs it after every record it makes.
``--check`` stamps nothing: it lists each record whose listed files changed in
code, whose list differs from the one stored, or that stores none, and exits
1 if there is one.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import sources


def main(argv: list[str] | None = None) -> int:
    """Stamps (or checks) the records named (default: all); returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m guidekit.recorded.stamp", description=__doc__.split("\n")[0]
    )
    parser.add_argument("records", nargs="*", type=Path, help="record files (default: all)")
    parser.add_argument("--check", action="store_true", help="list stale records, stamp nothing")
    args = parser.parse_args(argv)
    folder = sources.ROOT / "docs" / "recorded"
    records = args.records or sorted(
        p for p in folder.iterdir() if not p.name.endswith(sources.SIDECAR)
    )
    stale = 0
    for record in records:
        if not args.check:
            stored = sources.stamp(record, sources.ROOT)
            print(f"{record.name}: {len(stored['files'])} files, sha256 {stored['sha256'][:16]}")
        elif sources.read_stored(record) is None:
            print(f"{record.name}: stores no hashes (python -m guidekit.recorded.stamp {record})")
            stale += 1
        elif note := sources.stale_note(record, sources.ROOT):
            print(note)
            stale += 1
    if args.check:
        print(f"{stale} of {len(records)} records measured sources that have changed since")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
