"""The files a reader takes for each route of each operator (``manifests/<route>.txt``).

A manifest lists the files of this repository to copy, each to the same path
in the reader's project, and the files to write (``write PATH``), each made
here from this repository's file of that path, cut to the route:

* ``opguide/registry.py`` keeps the entries of the route's operators (on
  the C++ route without their Triton fields);
* ``opguide/__init__.py`` keeps the statements whose package imports are all
  copied, and the statements that use only what those bind.

:func:`problems` checks a manifest against the files it lists: every
``#include "..."`` of a copied C++/CUDA file and every module-level import of
a copied or written Python module of the package is itself copied, and every
copied header and Python module is reached from the route's sources. The
steps show a manifest with :func:`table`; ``tests/test_manifests.py`` copies
exactly its files into an empty project and builds and runs it.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

from opguide import registry

ROOT = Path(__file__).resolve().parent.parent
#: Every route of every operator of the registry, ``<route>_<operator>``.
ROUTES = tuple(name for op in registry.OPERATORS for name in op.manifests())
PACKAGE = "opguide"
# A line that holds only a marker comment, which pages use to cut files.
_MARKER = re.compile(r"^[ \t]*(?://|#)[ \t]*\[[A-Za-z0-9_-]+\][ \t]*$")
_REGISTRY_MODULE = re.compile(r'\b(?:triton_)?module="([A-Za-z0-9_.]+)"')
_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.MULTILINE)
_C_SOURCES = (".cpp", ".cu")
_C_HEADERS = (".h", ".cuh")


@dataclass(frozen=True)
class Manifest:
    """One route's files.

    Attributes:
        route: the manifest's name, ``manifests/<route>.txt``.
        about: the manifest's opening comment, as sentences.
        copy: the paths (relative to the repository root) to copy unchanged.
        write: the paths to write, each cut from this repository's file.
    """

    route: str
    about: str
    copy: tuple[str, ...]
    write: tuple[str, ...]


def read(route: str, root: Path = ROOT) -> Manifest:
    """Reads ``manifests/<route>.txt`` under ``root``.

    Raises:
        FileNotFoundError: there is no such manifest.
    """
    about, copy, write, opening = [], [], [], True
    for line in (root / "manifests" / f"{route}.txt").read_text().splitlines():
        if line.startswith("#"):
            if opening:
                about.append(line.lstrip("# "))
            continue
        opening = False
        if line.startswith("write "):
            write.append(line.split(None, 1)[1].strip())
        elif line.strip():
            copy.append(line.strip())
    text = " ".join(about).split(" Copy each file")[0]
    return Manifest(route, text, tuple(copy), tuple(write))


def includes(path: Path, root: Path = ROOT) -> list[str]:
    """The repository paths that ``#include "..."`` lines of ``path`` name."""
    root = root.resolve()
    targets = ((path.parent / name).resolve() for name in _INCLUDE.findall(path.read_text()))
    return [t.relative_to(root).as_posix() for t in targets if t.is_relative_to(root)]


def _module_file(module: str, root: Path) -> str:
    """``opguide.x.y`` -> the repository path of its file (a module or a package)."""
    base = module.replace(".", "/")
    for candidate in (f"{base}.py", f"{base}/__init__.py"):
        if (root / candidate).is_file():
            return candidate
    return f"{base}.py"


def _imported_modules(node: ast.AST, path: str) -> list[str]:
    """Modules of the package that ``node`` imports (``from . import x`` names ``x``)."""
    here = list(Path(path).parts[:-1])  # the package that the file is in
    found = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.ImportFrom):
            if sub.level:
                base = here[: len(here) - (sub.level - 1)]
                module = ".".join(base + ([sub.module] if sub.module else []))
            else:
                module = sub.module or ""
            if module.split(".")[0] != PACKAGE:
                continue
            found.append(module)
            if sub.module is None or sub.level == 0:
                found += [f"{module}.{alias.name}" for alias in sub.names]
        elif isinstance(sub, ast.Import):
            found += [a.name for a in sub.names if a.name.split(".")[0] == PACKAGE]
    return found


def python_imports(source: str, path: str, root: Path = ROOT) -> list[str]:
    """Repository files of the package that ``source`` (the file ``path``) imports at module level.

    Imports inside functions run on a call, for a feature the route may leave
    out; imports at module level, also under ``if``/``try``, run on import.
    A package's parents are imported with it, so each module brings the
    ``__init__.py`` of its folders below the top package.
    """
    found = []
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        for module in _imported_modules(node, path):
            parts = module.split(".")
            found += [f"{'/'.join(parts[:i])}/__init__.py" for i in range(2, len(parts))]
            file = _module_file(module, root)
            # "from . import name" also names attributes, which are no file.
            if (root / file).is_file() or module.count(".") == 1:
                found.append(file)
    return [f for f in dict.fromkeys(found) if f != path]


def _reached(start: list[str], edges) -> set[str]:
    seen, todo = set(), list(start)
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        todo += edges(path)
    return seen


def problems(manifest: Manifest, root: Path = ROOT) -> list[str]:
    """What is wrong with ``manifest``: each problem names the file and why.

    Empty when every listed file exists, every file that a copied or written
    file includes or imports is listed, and every listed header and Python
    module is included or imported by another listed file.
    """
    listed = set(manifest.copy) | set(manifest.write)
    found = [
        f"{p} is listed but is not in the repository"
        for p in manifest.copy
        if not (root / p).is_file()
    ]
    if found:
        return found
    written = {p: cut(manifest, p, root) for p in manifest.write}

    def needs(path: str) -> list[str]:
        if path.endswith(_C_SOURCES + _C_HEADERS):
            return includes(root / path, root)
        if not path.endswith(".py") or path == "setup.py":
            return []
        text = written[path] if path in written else (root / path).read_text()
        imported = python_imports(text, path, root)
        if path == "opguide/registry.py":
            # The package imports the modules that the registry's entries name.
            imported += [_module_file(m, root) for m in _REGISTRY_MODULE.findall(text)]
        return imported

    def edges(path: str) -> list[str]:
        needed = needs(path)
        for target in needed:
            if target not in listed:
                found.append(f"{path} needs {target}, which the manifest does not list")
        return [t for t in needed if t in listed]

    c_sources = [p for p in listed if p.endswith(_C_SOURCES)]
    # A reader imports the package, or one of its subpackages (opguide.triton).
    py_roots = [p for p in listed if p.endswith("__init__.py")]
    reached = _reached(c_sources + py_roots, edges)
    for path in sorted(listed - reached):
        if path.endswith(_C_HEADERS) or (path.endswith(".py") and path != "setup.py"):
            found.append(f"{path} is listed but no listed file includes or imports it")
    return sorted(set(found))


def _operator_of(manifest: Manifest) -> registry.Operator:
    """The registry's entry of the operator that ``manifest`` (``<route>_<operator>``) is for."""
    for op in registry.OPERATORS:
        if manifest.route in op.manifests():
            return op
    raise ValueError(f"manifests/{manifest.route}.txt: no operator of opguide.registry has it")


def _cut_registry(text: str, manifest: Manifest) -> str:
    """``opguide/registry.py`` with the route's operator alone; on the C++ route
    without its Triton operators, module and kernel families."""
    op = _operator_of(manifest)
    cpp = manifest.route.startswith("cpp_")
    lines = text.splitlines(True)
    tree = ast.parse(text)
    table = next(
        n for n in tree.body if isinstance(n, ast.AnnAssign) and n.target.id == "OPERATORS"
    )
    drop: set[int] = set()  # 0-based line numbers
    for entry in table.value.elts:
        name = next(k.value.value for k in entry.keywords if k.arg == "name")
        if name != op.name:
            drop |= set(range(entry.lineno - 1, entry.end_lineno))
            continue
        for keyword in entry.keywords if cpp else ():
            if keyword.arg in ("triton_ops", "triton_module", "routes"):
                drop |= set(range(keyword.lineno - 1, keyword.end_lineno))
            elif keyword.arg in ("kernels", "planning"):
                for key, value in zip(keyword.value.keys, keyword.value.values, strict=True):
                    if key.value.startswith("triton"):
                        drop |= set(range(key.lineno - 1, value.end_lineno))
    # A marker comment cuts a page's excerpt; the reader's copy has no page.
    kept = (line for i, line in enumerate(lines) if i not in drop)
    return "".join(line for line in kept if not _MARKER.match(line))


def _bound_names(node: ast.stmt) -> set[str]:
    names = {node.name} if isinstance(node, (ast.FunctionDef, ast.ClassDef)) else set()
    for sub in ast.walk(node):
        if isinstance(sub, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in sub.names}
        elif isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
            names.add(sub.id)
    return names


def _used_names(node: ast.stmt) -> set[str]:
    # The name an attribute is read from (``a`` of ``a.b = 1``) is loaded too.
    return {s.id for s in ast.walk(node) if isinstance(s, ast.Name) and isinstance(s.ctx, ast.Load)}


def _cut_init(text: str, path: str, listed: set[str], root: Path) -> str:
    """``opguide/__init__.py`` with the statements the listed modules allow."""
    tree = ast.parse(text)
    lines = text.splitlines(True)
    kept, dropped, previous_end = [], set(), 0
    for node in tree.body:
        start = node.lineno - 1
        # The comment lines right above a statement belong to it.
        while start > previous_end and lines[start - 1].lstrip().startswith("#"):
            start -= 1
        chunk = "".join(lines[start : node.end_lineno])
        previous_end = node.end_lineno
        files = [_module_file(m, root) for m in _imported_modules(node, path)]
        missing = [f for f in files if f not in listed and (root / f).is_file()]
        if missing or _used_names(node) & dropped:
            dropped |= _bound_names(node)
            continue
        kept.append((node, chunk))
    # The docstring describes this repository's package; the reader's is their own.
    if kept and isinstance(kept[0][0], ast.Expr) and isinstance(kept[0][0].value, ast.Constant):
        kept = kept[1:]
    strings = (sub for node, _ in kept for sub in ast.walk(node) if isinstance(sub, ast.Constant))
    exported = {sub.value for sub in strings if isinstance(sub.value, str)}
    # A name imported for a statement that was left out is not imported.
    kept = [
        (node, chunk)
        for i, (node, chunk) in enumerate(kept)
        if not (isinstance(node, ast.ImportFrom) and node.module and node.level)
        or {a.asname or a.name for a in node.names}
        & (exported | set().union(*(_used_names(n) for n, _ in kept[i + 1 :])))
    ]
    defined = set().union(*(_bound_names(n) for n, _ in kept))
    out = []
    for node, chunk in kept:
        target = getattr(node, "target", None) or (getattr(node, "targets", None) or [None])[0]
        # An empty __all__ is the list that later statements add to: kept as it is.
        if isinstance(target, ast.Name) and target.id == "__all__" and node.value.elts:
            names = [e.value for e in node.value.elts if e.value in defined]
            if not names:
                continue
            op = "+=" if isinstance(node, ast.AugAssign) else "="
            chunk = f"__all__ {op} {names!r}\n".replace("'", '"')
        out.append(chunk)
    parts = []
    for i, chunk in enumerate(out):
        chunk = chunk.strip("\n") + "\n"
        # Two blank lines around a function or class, one between other statements.
        blocks = (out[i - 1] if i else "", chunk)
        defs = any(re.match(r"(def|class|@)", c.lstrip("\n")) for c in blocks)
        parts.append(("\n\n" if defs else "\n") * bool(i) + chunk)
    return "".join(parts)


def cut(manifest: Manifest, path: str, root: Path = ROOT) -> str:
    """The text of ``path``, a file the manifest says to write, for this route.

    Raises:
        ValueError: ``path`` is not one of the files this module knows how to cut.
    """
    text = (root / path).read_text()
    listed = set(manifest.copy) | set(manifest.write)
    if path == "opguide/registry.py":
        return _cut_registry(text, manifest)
    if path.endswith("__init__.py"):
        return _cut_init(text, path, listed, root)
    raise ValueError(f"{manifest.route}: no rule cuts {path}")


def table(manifest: Manifest, root: Path = ROOT) -> str:
    """The manifest as a table for a page: each file, what to do with it and its lines."""
    rows = [(p, "copy", len((root / p).read_text().splitlines())) for p in manifest.copy]
    rows += [(p, "write", len(cut(manifest, p, root).splitlines())) for p in manifest.write]
    width = max(len(p) for p, _, _ in rows)
    out = [f"{'file':<{width}}  {'':5}  lines"]
    out += [f"{p:<{width}}  {what:5}  {n:5d}" for p, what, n in rows]
    copied = [n for _, what, n in rows if what == "copy"]
    out.append(f"{len(copied)} files to copy ({sum(copied)} lines), {len(manifest.write)} to write")
    return "\n".join(out)


def shown(route: str, root: Path = ROOT) -> str:
    """What a step prints for ``route``: the table, then each file to write, whole.

    When the manifest does not match the files of this tree, the problems
    instead, so that a page never shows a list that would not build.
    """
    manifest = read(route, root)
    found = problems(manifest, root)
    if found:
        return f"manifests/{route}.txt does not match this tree:\n" + "\n".join(found)
    parts = [table(manifest, root)]
    for path in manifest.write:
        parts.append(f"--- {path} (write it; this is this repository's, cut to the route)")
        parts.append(cut(manifest, path, root).rstrip())
    return "\n".join(parts)
