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
``--check`` stamps nothing and lists the records whose sources changed, and
those that store no hashes at all; it exits 1 if there is one.

``--same-code-since REV`` carries the stamp of a record over a change that
touched only comments: a record whose stored hashes are those of its sources
at commit ``REV``, and whose every source that changed since has the same code
(``guidekit.recorded.equivalence.same_code``: comments and docstrings aside),
is stamped with the sources as they are now. Any other change leaves the
record as it was, and the line printed for it names the first file that
changed in code.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from guidekit.recorded import equivalence, sources  # noqa: E402


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


def code_changed(record: Path, commit: str, now: dict) -> str | None:
    """Why ``record``'s stamp cannot be carried over from ``commit``; None where it can.

    It can where the record's stored hashes are those of its sources at
    ``commit`` and every source changed since (``now``: :func:`sources.current`)
    differs in comments only.
    """
    stored = sources.read_stored(record)
    if stored is None:
        return "it stores no hashes"
    then = sources.files_at_commit(record.name, ROOT, commit)
    old = sources.digest(then)
    if old["sha256"] != stored["sha256"]:
        return f"it was not made from the sources at {commit}"
    if old["files"].keys() != now["files"].keys():
        return f"files added or removed: {sorted(old['files'].keys() ^ now['files'].keys())}"
    for path in sorted(p for p in now["files"] if old["files"][p] != now["files"][p]):
        if not equivalence.same_code(path, then[path], (ROOT / path).read_bytes()):
            return f"{path} changed in code"
    return None


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
    parser.add_argument(
        "--same-code-since",
        metavar="REV",
        help="restamp records made from the sources at REV where only comments changed since",
    )
    args = parser.parse_args(argv)
    records = [p.resolve() for p in args.records] or sorted(
        p for p in (ROOT / "docs" / "recorded").iterdir() if not p.name.endswith(sources.SIDECAR)
    )
    stale = 0
    for record in records:
        if args.check:
            if sources.read_stored(record) is None:
                note = (
                    f"{record.name}: stores no hashes of its sources "
                    f"(stamp it: tools/stamp_records.py docs/recorded/{record.name})"
                )
            else:
                note = sources.stale_note(record, ROOT)
            if note:
                print(note)
                stale += 1
            continue
        if args.same_code_since:
            stored = sources.current(record.name, ROOT)
            before = sources.read_stored(record)
            if before is None or before["sha256"] == stored["sha256"]:
                continue  # unstamped (see --from-git), or not stale
            why = code_changed(record, args.same_code_since, stored)
            if why is not None:
                print(f"{record.name}: left stale, {why}")
                continue
            how = f"only comments changed since {args.same_code_since}"
        elif args.from_git:
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
