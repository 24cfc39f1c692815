"""Stores with each record in ``docs/recorded/`` the hash of the sources it measured.

After a record is (re)made on the GPU machine, from the repository root::

    python3 tools/stamp_records.py docs/recorded/sweep_h100.json [MORE RECORDS...]

hashes the record's sources (``guidekit.recorded.sources.MEASURED``) as they
are in the work tree and stores the hashes with it (a ``"sources"`` field in a
JSON record, ``<record>.sources`` beside a text one). ``tools/gpu_suite.sh
records`` runs it after every record it makes.

``--from-git`` is for a record made before records stored their sources: it
takes the sources as they were at the commit that last changed the record
(``git log -1 -- RECORD``), and stamps only records that store no hash yet.
``--check`` stamps nothing and lists the records whose sources changed; it
exits 1 if there is one.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from guidekit.recorded import sources  # noqa: E402


def last_commit(record: Path) -> str | None:
    """The commit that last changed ``record``; None where git has no history of it."""
    try:
        out = subprocess.run(
            ["git", "log", "-1", "--format=%H", "--", str(record.relative_to(ROOT))],
            cwd=ROOT, check=True, capture_output=True, text=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return None
    return out or None


def main(argv: list[str] | None = None) -> int:
    """Stamps (or checks) the records named on the command line; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "records", nargs="*", type=Path, help="record files (default: all of docs/recorded/)"
    )
    parser.add_argument(
        "--from-git", action="store_true", help="unstamped records, from their last commit"
    )
    parser.add_argument("--check", action="store_true", help="list stale records, stamp nothing")
    args = parser.parse_args(argv)
    records = [p.resolve() for p in args.records] or sorted(
        p for p in (ROOT / "docs" / "recorded").iterdir() if not p.name.endswith(sources.SIDECAR)
    )
    stale = 0
    for record in records:
        if args.check:
            note = sources.stale_note(record, ROOT)
            if note:
                print(note)
                stale += 1
            continue
        if args.from_git:
            if sources.read_stored(record) is not None:
                continue
            commit = last_commit(record)
            if commit is None:
                print(f"{record.name}: no git history, left unstamped")
                continue
            stored = sources.at_commit(record.name, ROOT, commit)
            how = f"sources at {commit[:12]}"
        else:
            stored = sources.current(record.name, ROOT)
            how = "sources in the work tree"
        sources.write_stored(record, stored)
        print(f"{record.name}: {len(stored['files'])} files, {how}, sha256 {stored['sha256'][:16]}")
    if args.check:
        print(f"{stale} of {len(records)} records measured sources that have changed since")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
