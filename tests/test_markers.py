"""The parts of files that pages show exist, and every marker in the sources is used by a page.

Pages (the gallery scripts of ``examples_src/``, the notebooks of
``tutorials/``, the Markdown pages of ``docs/``) show parts of real files with
``literalinclude`` and ``:start-after:``/``:end-before:`` (usually a marker
comment such as ``// [cpu-kernel]``), ``:start-at:``/``:end-at:``,
``:pyobject:`` or ``:lines:``. Sphinx turns a part it cannot find into a
warning, which the docs build (``-W``) fails on; these tests say the same in
a second, without building the site (and without Sphinx, which the test
environment does not hold):

* every ``literalinclude`` names a file that exists, and the part its options
  name is found as Sphinx finds it (:func:`find_part`: a line holding the
  ``start-*`` text, then a later line holding the ``end-*`` text; a
  ``pyobject`` a class or function defined by that dotted name);
* every marker line of a tracked file (``// [name]``, ``# [name-end]``) is
  named by an option of a ``literalinclude`` of that file, except those of
  :data:`UNUSED_IN_CSRC`, which must then still be there and unused.

A file that a gallery script writes while it runs (under ``build/``) is
checked by that script's own build, not here.
"""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
# The gallery's pages are written to docs/auto_examples/.
PAGES = {
    **{p: DOCS / "auto_examples" for p in sorted((ROOT / "examples_src").glob("*.py"))},
    **{p: DOCS / "tutorials" for p in sorted((ROOT / "tutorials").glob("*.md"))},
    **{p: p.parent for p in sorted(DOCS.glob("*.md"))},
}
DIRECTIVE = re.compile(r"literalinclude(?:::|\})[ \t]+(\S+)")
OPTION = re.compile(r"^[ \t]*(?:#[ \t]*)?:([a-z-]+):[ \t]*(.*?)[ \t]*$")
MARKER_LINE = re.compile(r"^[ \t]*(?://|#)[ \t]*(\[[A-Za-z0-9_-]+\])[ \t]*$", re.MULTILINE)
PART_OPTIONS = ("start-after", "end-before", "start-at", "end-at")
GENERATED = ROOT / "build"


def includes() -> list[tuple[str, Path, dict[str, str]]]:
    """(where, included file, options) for every ``literalinclude`` of every page."""
    found = []
    for page, folder in PAGES.items():
        lines = page.read_text().splitlines()
        for number, line in enumerate(lines):
            match = DIRECTIVE.search(line)
            if not match:
                continue
            arg = match[1]
            path = DOCS / arg.lstrip("/") if arg.startswith("/") else folder / arg
            options = {}
            for following in lines[number + 1 :]:
                option = OPTION.match(following)
                if not option:
                    break
                value = option[2]
                # MyST reads a directive's options as YAML, which drops quotes.
                if page.suffix == ".md" and len(value) > 1 and value[0] == value[-1] == '"':
                    value = value[1:-1]
                options[option[1]] = value
            where = f"{page.relative_to(ROOT)}:{number + 1}"
            found.append((where, Path(str(path.resolve())), options))
    return found


INCLUDES = includes()


def test_pages_include_files():
    assert len(INCLUDES) > 100, f"found only {len(INCLUDES)} literalinclude directives"


def _defines(body: list[ast.stmt], dotted: list[str]) -> bool:
    for node in body:
        kinds = (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
        if isinstance(node, kinds) and node.name == dotted[0]:
            return len(dotted) == 1 or _defines(node.body, dotted[1:])
    return False


def find_part(text: str, options: dict[str, str]) -> str | None:
    """Why Sphinx would not find the part ``options`` name in ``text``; None when it would."""
    if "pyobject" in options and not _defines(ast.parse(text).body, options["pyobject"].split(".")):
        return f"no class or function {options['pyobject']}"
    lines = text.splitlines()
    first = 0
    for key in ("start-after", "start-at"):
        if key in options:
            hits = [i for i, line in enumerate(lines) if options[key] in line]
            if not hits:
                return f"no line holds the {key} text {options[key]!r}"
            first = hits[0]
    for key in ("end-before", "end-at"):
        if key in options and not any(options[key] in line for line in lines[first + 1 :]):
            return f"no line after the start holds the {key} text {options[key]!r}"
    return None


def test_every_included_part_exists():
    missing = []
    for where, path, options in INCLUDES:
        if path.is_relative_to(GENERATED):
            continue
        if not path.is_file():
            missing.append(f"{where}: no file {path}")
            continue
        why = find_part(path.read_text(), options)
        if why:
            missing.append(f"{where}: {path.relative_to(ROOT)}: {why}")
    assert not missing, "parts that pages show and Sphinx cannot find:\n" + "\n".join(missing)


def tracked_text_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip(f"not a git checkout: {out.stderr.strip()}")
    files = []
    for name in out.stdout.splitlines():
        path = ROOT / name
        if path.is_file() and not path.is_symlink() and path.suffix not in (".so", ".png", ".svg"):
            files.append(path)
    return files


def test_every_marker_is_used_by_a_page():
    named: dict[Path, list[str]] = {}
    for _, path, options in INCLUDES:
        named.setdefault(path, []).extend(options.get(k, "") for k in PART_OPTIONS)
    unused = set()
    for path in tracked_text_files():
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for match in MARKER_LINE.finditer(text):
            if not any(match[1] in value for value in named.get(path.resolve(), [])):
                unused.add(f"{path.relative_to(ROOT)}: {match[1]}")
    assert not unused, "markers that no page uses:\n" + "\n".join(sorted(unused))
