"""The repository's shape: no import cycles, settings documented, files of a readable length.

* the modules of ``opguide/``, ``guidekit/`` and ``tools/*.py`` import each
  other without a cycle (:func:`import_cycles`), counting imports inside
  functions too: a deferred import that dodges a cycle at load time still
  ties the two modules together;
* every ``OPGUIDE_*`` environment variable that the code reads has a row in
  the README's "Settings" table, and every row names one that it reads;
* no file of the library (``opguide/``, ``csrc/``, ``stable/``) is longer
  than :data:`MAX_LINES`, but those of :data:`LONG_FILES`.
"""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest

THIS_FILE = Path(__file__).resolve()
ROOT = THIS_FILE.parent.parent


def python_modules(root: Path) -> dict[str, Path]:
    """``{dotted name: file}`` for the modules of ``opguide/``, ``guidekit/`` and ``tools/*.py``.

    A tool runs as a script with ``tools/`` on its path, so ``tools/x.py`` is
    ``tools.x`` and another tool reaches it as ``import x``.
    """
    modules = {}
    for package in ("opguide", "guidekit"):
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    for path in sorted((root / "tools").glob("*.py")):
        modules[f"tools.{path.stem}"] = path
    return modules


def _type_checking_only(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    name = test.attr if isinstance(test, ast.Attribute) else getattr(test, "id", None)
    return isinstance(node, ast.If) and name == "TYPE_CHECKING"


def imported(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of ``modules`` that ``name`` (at ``path``) imports, anywhere in the file.

    ``import a.b`` and ``from a import b`` name ``a.b`` where it is a module of
    ``modules``, else the nearest package above it that is; relative imports
    are resolved against ``name``'s package. Imports under ``if TYPE_CHECKING:``
    do not run and are left out.
    """
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tools = {m.partition(".")[2] for m in modules if m.startswith("tools.")}

    def known(dotted: str) -> str | None:
        while dotted and dotted not in modules:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    found = set()
    stack = [ast.parse(path.read_text(), str(path))]
    while stack:
        node = stack.pop()
        if _type_checking_only(node):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = alias.name
                if name.startswith("tools.") and target.partition(".")[0] in tools:
                    target = f"tools.{target}"
                found.add(known(target))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if name.startswith("tools.") and source.partition(".")[0] in tools:
                source = f"tools.{source}"
            for alias in node.names:
                whole = f"{source}.{alias.name}"
                found.add(whole if whole in modules else known(source))
    return found - {None, name}


def import_cycles(modules: dict[str, Path]) -> list[list[str]]:
    """Each group of ``modules`` that import each other in a cycle, as a sorted list of names."""
    graph = {name: imported(name, path, modules) for name, path in modules.items()}
    # Tarjan's strongly connected components, iterative: a component of more
    # than one module is a cycle.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    cycles.append(sorted(group))
    return sorted(cycles)


def test_no_import_cycles():
    modules = python_modules(ROOT)
    assert "guidekit.model_swap" in modules and any(m.startswith("tools.") for m in modules)
    cycles = import_cycles(modules)
    assert not cycles, "modules that import each other in a cycle:\n" + "\n".join(
        " <-> ".join(c) for c in cycles
    )


def test_import_cycles_are_found(tmp_path):
    files = {
        # absolute, deferred into a function
        "guidekit/a.py": "def f():\n    from guidekit.b import g\n",
        "guidekit/b.py": "import guidekit.a\n",
        # relative, through a package's __init__
        "opguide/__init__.py": "from . import c\n",
        "opguide/c.py": "from .d import x\n",
        "opguide/d.py": "from opguide import c\n",
        # a tool reaches another by its bare name
        "tools/e.py": "import f\n",
        "tools/f.py": "from e import y\n",
        # no cycle: only for type checkers
        "guidekit/g.py": "import typing\nif typing.TYPE_CHECKING:\n    import guidekit.h\n",
        "guidekit/h.py": "import guidekit.g\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert import_cycles(python_modules(tmp_path)) == [
        ["guidekit.a", "guidekit.b"],
        ["opguide.c", "opguide.d"],
        ["tools.e", "tools.f"],
    ]


# -- Settings ---------------------------------------------------------------------

#: Where the repository's code reads its settings: the library, the C++ and
#: stable sources, the guide's machinery, tools, tests, pages and build files.
SETTINGS_CODE = (
    "opguide", "csrc", "stable", "guidekit", "tools", "tests", "examples_src",
    "docs/_ext", "docs/conf.py", "conftest.py", "noxfile.py", "setup.py", ".ci",
)  # fmt: skip
SETTING = re.compile(r"\bOPGUIDE_[A-Z0-9_]+")
#: A preprocessor name of the C++/CUDA sources: a compile-time switch, not a setting.
MACRO = re.compile(
    r"(?:#\s*(?:define|ifdef|ifndef|if|elif)\s+!?|defined\s*\(\s*|-D)(OPGUIDE_[A-Z0-9_]+)"
)
#: Names of the form that are neither settings nor macros, and why.
NOT_SETTINGS = {
    "OPGUIDE_CALL": "a regular expression of step 20",
    "OPGUIDE_LOG": "tests/test_dispatcher.py clears the settings that start so",
    "OPGUIDE_OVERRIDE": "tests/test_dispatcher.py clears the settings that start so",
    "OPGUIDE_LIBRARY": "a macro that tests/test_site.py makes sure no page shows",
    "OPGUIDE_CSRC": "a constant of stable/setup.py: the folder of opguide's C++ sources",
}


def code_texts(root: Path) -> dict[Path, str]:
    """The text of every file of :data:`SETTINGS_CODE` under ``root`` (binaries left out).

    This file is left out: its own examples and lists are no use of a name.
    """
    texts = {}
    for name in SETTINGS_CODE:
        top = root / name
        for path in sorted(top.rglob("*") if top.is_dir() else [top]):
            if not path.is_file() or "__pycache__" in path.parts or path == THIS_FILE:
                continue
            try:
                texts[path] = path.read_text()
            except UnicodeDecodeError:
                continue
    return texts


def settings_read(texts: dict[Path, str]) -> dict[str, list[str]]:
    """``{OPGUIDE_* setting: files that name it}``: every such name but macros and NOT_SETTINGS.

    A name that ends in ``_`` (``OPGUIDE_DISABLE_OVERRIDE_<name>``) is one
    setting per operator name.
    """
    macros = {m for text in texts.values() for m in MACRO.findall(text)}
    found: dict[str, list[str]] = {}
    for path, text in texts.items():
        for name in sorted(set(SETTING.findall(text)) - macros - set(NOT_SETTINGS)):
            found.setdefault(name, []).append(str(path.relative_to(ROOT)))
    return found


def settings_table() -> dict[str, str]:
    """``{OPGUIDE_* name: effect}`` of the README's "### Settings" table."""
    text = (ROOT / "README.md").read_text()
    section = text.split("### Settings", 1)[1].split("\n#", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) >= 2:
            for name in SETTING.findall(cells[0]):
                rows[name] = cells[1]
    return rows


def test_every_setting_is_in_the_readme_table():
    read = settings_read(code_texts(ROOT))
    assert "OPGUIDE_PDL" in read and "OPGUIDE_JOBS" in read  # the search finds settings
    table = settings_table()
    missing = [f"{name} (read in {', '.join(where)})" for name, where in read.items()
               if name not in table]  # fmt: skip
    assert not missing, "settings missing from README.md's Settings table:\n" + "\n".join(missing)
    unused = sorted(set(table) - set(read))
    assert not unused, f"README.md's Settings table names settings no code reads: {unused}"
    empty = sorted(name for name, effect in table.items() if not effect)
    assert not empty, f"Settings rows without an effect: {empty}"


def test_not_settings_are_still_named_in_the_code():
    texts = code_texts(ROOT).values()
    named = {m for text in texts for m in SETTING.findall(text)}
    gone = sorted(set(NOT_SETTINGS) - named)
    assert not gone, f"NOT_SETTINGS names no longer in the code, to drop from the list: {gone}"


def test_macros_are_not_taken_for_settings(tmp_path):
    texts = {
        ROOT / "a.cuh": "#ifndef OPGUIDE_SWITCH\n#define OPGUIDE_SWITCH 1\n#endif\n",
        ROOT / "b.py": 'flags = ["-DOPGUIDE_FLAG"]\nx = os.environ.get("OPGUIDE_READ")\n',
        ROOT / "c.cu": "#if !defined(OPGUIDE_OTHER)\n#endif\n",
    }
    assert settings_read(texts) == {"OPGUIDE_READ": ["b.py"]}


# -- File length --------------------------------------------------------------------

#: The most lines a file of the library may have: one a reader can hold in their head.
MAX_LINES = 400
LIBRARY = ("opguide", "csrc", "stable")
#: Files longer than MAX_LINES until they are split, which changes what the
#: records measured and so waits for a GPU run. Exact: a file that falls to
#: MAX_LINES or under leaves the list.
LONG_FILES: set[str] = set()


def library_files() -> list[Path]:
    """The library's files: tracked, or new and not ignored (build outputs left out)."""
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", *LIBRARY],
        cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    if out.returncode != 0:
        pytest.skip(f"not a git checkout: {out.stderr.strip()}")
    return [ROOT / name for name in out.stdout.splitlines() if (ROOT / name).is_file()]


def line_count(path: Path) -> int | None:
    """Lines of a text file; None for a binary one."""
    try:
        return len(path.read_text().splitlines())
    except UnicodeDecodeError:
        return None


def test_no_library_file_is_too_long():
    lengths = {str(p.relative_to(ROOT)): line_count(p) for p in library_files()}
    assert "opguide/__init__.py" in lengths and LONG_FILES <= set(lengths)
    long = {name for name, lines in lengths.items() if lines and lines > MAX_LINES}
    over = {name: lengths[name] for name in sorted(long - LONG_FILES)}
    assert not over, f"files over {MAX_LINES} lines: {over}"
    assert LONG_FILES - long == set(), (
        f"LONG_FILES of {MAX_LINES} lines or fewer, to drop from the list: {LONG_FILES - long}"
    )


# -- Operator outputs ---------------------------------------------------------------

#: C++ that makes memory of its own, or makes a tensor over memory that PyTorch
#: did not allocate: operator outputs must come from PyTorch's allocator
#: (``at::empty``, ``empty_like``, ``torch::stable::empty_like``) instead.
#: Matched in code only: comments and string literals are left out.
OWN_MEMORY = re.compile(
    r"\b(?:mmap|munmap|madvise|posix_memalign|aligned_alloc|memalign|valloc|pvalloc"
    r"|malloc|calloc|realloc|free|alloc_cpu|free_cpu|cudaMalloc\w*|cudaHostAlloc|cudaFree"
    r"|hipMalloc\w*|hipFree|from_blob|for_blob|empty_generic|empty_strided_generic)\s*\("
    r"|\b(?:Allocator|DataPtr|DeleterFnPtr|InefficientStdFunctionContext)\b"
    r"|^\s*#\s*include\s*<sys/mman\.h>"
)
#: The C++ of the library that may allocate memory itself, and why.
OWN_MEMORY_ALLOWED = {
    # A custom device backend: its allocator is the device's memory (the one
    # exception the design allows).
    "csrc/dispatcher/hostdev_backend.cpp",
}
CPP_SUFFIXES = {".cpp", ".cc", ".h", ".hpp", ".cu", ".cuh"}
# A comment, or a string or character literal: what OWN_MEMORY does not read.
NOT_CODE = re.compile(r"//[^\n]*|/\*.*?\*/|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'", re.DOTALL)


def own_memory(text: str) -> list[tuple[int, str]]:
    """``(line number, line)`` of each line of C++ ``text`` whose code matches OWN_MEMORY."""
    code = NOT_CODE.sub(lambda m: " " * len(m[0].replace("\n", "")) + "\n" * m[0].count("\n"), text)
    lines = text.splitlines()
    return [
        (number, lines[number - 1].strip())
        for number, line in enumerate(code.splitlines(), start=1)
        if OWN_MEMORY.search(line)
    ]


def test_operator_outputs_come_from_pytorchs_allocator():
    cpp = [
        p
        for p in library_files()
        if p.suffix in CPP_SUFFIXES and p.relative_to(ROOT).parts[0] in ("csrc", "stable")
    ]
    assert (
        ROOT / "csrc/rms_norm/rms_norm_cpu.cpp" in cpp and ROOT / "stable/csrc/rms_norm.cpp" in cpp
    )
    found = {str(p.relative_to(ROOT)): own_memory(p.read_text()) for p in cpp}
    hits = {
        name: lines for name, lines in found.items() if lines and name not in OWN_MEMORY_ALLOWED
    }
    assert not hits, f"library C++ that allocates memory of its own: {hits}"
    unneeded = {name for name in OWN_MEMORY_ALLOWED if not found.get(name)}
    assert not unneeded, f"OWN_MEMORY_ALLOWED names files that allocate nothing: {unneeded}"


def test_own_memory_is_found():
    # The shape of a huge-page allocator for large outputs: an Allocator
    # subclass over posix_memalign and madvise, its deleter, empty_generic.
    allocator = """
    #include <sys/mman.h>
    // Outputs of 2 MiB and more come from malloc(); see madvise(2).
    struct HugePageAllocator final : c10::Allocator {
      static void release(void* p) { std::free(p); }
      c10::DataPtr allocate(size_t nbytes) override {
        void* p = nullptr;
        TORCH_CHECK(!posix_memalign(&p, 2 << 20, nbytes), "malloc( failed");
        (void)madvise(p, nbytes, MADV_HUGEPAGE);
        return {p, p, &release, c10::Device(c10::DeviceType::CPU)};
      }
      c10::DeleterFnPtr raw_deleter() const override { return &release; }
    };
    at::Tensor y = at::detail::empty_generic(sizes, allocator, keys, dtype, format);
    at::Tensor z = at::from_blob(data, sizes, [](void* p) { munmap(p, n); });
    """
    # every line but the comment, the blank ones and those of plain C++
    found = [number for number, _ in own_memory(allocator)]
    assert found == [2, 4, 5, 6, 8, 9, 12, 14, 15], own_memory(allocator)
    # PyTorch's allocator, and the words in comments and strings only: nothing.
    clean = """
    // Not malloc(): at::empty, so THP_MEM_ALLOC_ENABLE=1 reaches it; see madvise(2).
    /* from_blob(data, deleter) would wrap memory of our own. */
    at::Tensor y = at::empty(x.sizes(), x.options());
    TORCH_CHECK(ok, "mmap(", n, ") is not used");
    auto freed = at::empty_like(x);  // free(x) is never called
    """
    assert own_memory(clean) == []
