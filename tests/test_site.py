"""Checks of the built site (``docs/_build/html``): what a reader sees and downloads.

The README's docs command builds the site before its test command runs, so in
CI these tests read the site that was just built. Without a built site they
skip, saying so.

* no rendered code block carries a marker comment (``// [name]``), and no page
  shows ``OPGUIDE_LIBRARY``: shown code registers with plain ``TORCH_LIBRARY``;
* steps 2 and 3 show a complete minimal kernel file, includes first;
* the downloadable notebooks carry the code their pages show, never a
  ``literalinclude`` directive, and their Markdown holds no reST (no role,
  no directive): its links reach the pages they name;
* the MyST notebook page offers itself as a valid Jupyter notebook;
* the source archive offered on the landing page holds the project, without
  the check of the site's prose (tests/test_history_words.py) and its words;
* read from the sources, so they run without a built site: the prose outside
  the API reference is at most 30 000 words, and no gallery page is over 2 000.
"""

from __future__ import annotations

import ast
import html
import json
import re
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SITE = ROOT / "docs" / "_build" / "html"
MARKER = re.compile(r"^\s*(?://|#)\s*\[[A-Za-z0-9_-]+\]\s*$", re.MULTILINE)
PRE = re.compile(r"<pre[^>]*>(.*?)</pre>", re.DOTALL)
TAG = re.compile(r"<[^>]+>")
CAPTIONED = re.compile(
    r'<div class="code-block-caption"><span class="caption-text">(.*?)</span>'
    r".*?<pre[^>]*>(.*?)</pre>",
    re.DOTALL,
)

# The checks of the built site skip without one; the prose counts read the sources.
needs_site = pytest.mark.skipif(
    not (SITE / "index.html").is_file(),
    reason="the site is not built (run the README's docs command first)",
)


def pages() -> list[Path]:
    return sorted(p for p in SITE.rglob("*.html") if "_static" not in p.parts)


# The number Sphinx puts before each line of a listing with :linenos:.
LINENO_SPAN = re.compile(r'<span class="linenos">[^<]*</span>')


def code_text(block: str) -> str:
    """A code block's HTML as text: its code, without line numbers."""
    return html.unescape(TAG.sub("", LINENO_SPAN.sub("", block)))


def code_blocks(page: Path) -> list[str]:
    """The text of every code block of a page, as a reader sees it."""
    return [code_text(block) for block in PRE.findall(page.read_text())]


def captioned_blocks(page: Path) -> dict[str, str]:
    """{caption: code} for the code blocks that carry a caption (a file path)."""
    found = {}
    for match in CAPTIONED.finditer(page.read_text()):
        found[html.unescape(TAG.sub("", match[1]))] = code_text(match[2])
    return found


@needs_site
def test_no_marker_comment_in_rendered_code():
    leaks = []
    for page in pages():
        for block in code_blocks(page):
            for line in MARKER.findall(block):
                leaks.append(f"{page.relative_to(SITE)}: {line.strip()}")
    assert not leaks, "marker comments shown to readers:\n" + "\n".join(leaks[:20])


LINENO = re.compile(r'<span class="linenos">\s*(\d+)</span>')


@needs_site
def test_numbered_listings_keep_the_file_s_line_numbers():
    """A numbered listing (``:linenos:``) blanks marker lines instead of dropping them, so
    each number shown is the line's number in the file, as a compiler or sanitizer names it."""
    checked, wrong = 0, []
    for page in pages():
        for match in CAPTIONED.finditer(page.read_text()):
            path = ROOT / html.unescape(TAG.sub("", match[1])).strip()
            if "linenos" not in match[2] or not path.is_file():
                continue
            lines = path.read_text().splitlines()
            for shown in match[2].splitlines():
                number = LINENO.search(shown)
                if number is None:
                    continue
                text = html.unescape(TAG.sub("", shown[number.end() :])).rstrip()
                expected = lines[int(number[1]) - 1]
                expected = "" if MARKER.match(expected) else expected.rstrip()
                checked += 1
                if text != expected:
                    wrong.append(f"{page.name}: {path.name}:{number[1]}: {text!r} != {expected!r}")
    assert checked, "no numbered listing found"
    assert not wrong, "\n".join(wrong[:10])


@needs_site
def test_building_page_shows_the_readme_s_gpu_commands_whole():
    """building.md quotes the README's GPU commands by line numbers: every command shows."""
    readme = (ROOT / "README.md").read_text()
    block = readme.split("<!-- gpu-commands -->", 1)[1].split("<!-- gpu-commands-end -->")[0]
    commands = [line.strip() for line in block.splitlines() if line.strip()]
    commands = [line for line in commands if not line.startswith("```")]
    shown = "\n".join(code_blocks(SITE / "building.html"))
    missing = [line for line in commands if line not in shown]
    assert not missing, f"building.html leaves out: {missing}"


@needs_site
def test_no_page_shows_the_library_registration_macros():
    shown = [str(p.relative_to(SITE)) for p in pages() if "OPGUIDE_LIBRARY" in p.read_text()]
    assert not shown, f"pages that show OPGUIDE_LIBRARY: {shown}"


@needs_site
@pytest.mark.parametrize(
    "page, files",
    [
        ("auto_examples/02_cpp_cpu_kernel.html", ["csrc/minimal/rms_norm_minimal.cpp"]),
        (
            "auto_examples/03_cuda_kernel.html",
            ["csrc/minimal/rms_norm_minimal.cuh", "csrc/minimal/rms_norm_minimal_cuda.cu"],
        ),
    ],
)
def test_steps_2_and_3_show_a_complete_minimal_kernel(page, files):
    blocks = captioned_blocks(SITE / page)
    for name in files:
        assert name in blocks, f"{page} shows no block captioned {name}: {sorted(blocks)}"
        shown = blocks[name]
        assert shown.strip() == (ROOT / name).read_text().strip(), f"{name} is not shown whole"
        code = [line for line in shown.splitlines() if line and not line.startswith("//")]
        assert code[0].startswith("#"), f"{name} does not start with its includes"
        assert "TORCH_LIBRARY" in shown or name.endswith(".cuh")


@needs_site
def test_downloaded_notebooks_carry_code_not_directives():
    notebooks = sorted((SITE / "_downloads").rglob("*.ipynb"))
    assert len(notebooks) >= 15, f"expected a notebook per gallery step, found {len(notebooks)}"
    for notebook in notebooks:
        cells = json.loads(notebook.read_text())["cells"]
        text = "\n".join("".join(cell["source"]) for cell in cells)
        assert "literalinclude" not in text, f"{notebook.name} holds a literalinclude directive"
        assert not MARKER.search(text), f"{notebook.name} holds a marker comment"
    step2 = next(n for n in notebooks if n.name == "02_cpp_cpu_kernel.ipynb")
    text = step2.read_text()
    assert "TORCH_LIBRARY(opguide_minimal, m)" in text, "step 2's notebook lacks the shown file"


FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})")
# A role, a directive, or the "_" of reST's `title <url>`__ after a Markdown link.
REST_LEFT = re.compile(r":[a-z][\w-]*:`|^[ \t]*\.\. [A-Za-z][\w:-]*::|\]\([^()\s]+\)_(?!\w)", re.M)
LINK = re.compile(r"\]\(([^)\s]+)\)")


def download_notebooks() -> list[Path]:
    return sorted((SITE / "_downloads").rglob("*.ipynb"))


def markdown_prose(notebook: Path) -> str:
    """The text of a notebook's Markdown cells outside fenced code and ``literals``."""
    prose, fence = [], None
    for cell in json.loads(notebook.read_text())["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        for line in "".join(cell["source"]).split("\n"):
            opened = FENCE.match(line)
            if fence is None and opened:
                fence = opened[1]
            elif fence is not None:
                if opened and opened[1].startswith(fence) and not line.strip().strip(fence[0]):
                    fence = None
            else:
                prose.append(line)
    return re.sub(r"``.+?``", "", "\n".join(prose), flags=re.DOTALL)


@needs_site
def test_downloaded_notebooks_hold_no_rest():
    # Jupyter shows a reST role or directive as raw text.
    leftovers = []
    for notebook in download_notebooks():
        for line in markdown_prose(notebook).split("\n"):
            if REST_LEFT.search(line):
                leftovers.append(f"{notebook.name}: {line.strip()}")
    assert not leftovers, "reST in the notebooks' Markdown:\n" + "\n".join(leftovers[:20])


@needs_site
def test_downloaded_notebooks_have_no_relative_link():
    """A downloaded notebook leaves the site: its links are absolute, or not there."""
    relative, absolute = [], 0
    for notebook in download_notebooks():
        for url in LINK.findall(markdown_prose(notebook)):
            if url.startswith(("#", "mailto:")):
                continue
            if "://" not in url:
                relative.append(f"{notebook.name}: {url}")
            absolute += 1
    assert not relative, f"relative links in downloaded notebooks: {relative[:20]}"
    step2 = next(n for n in download_notebooks() if n.name == "02_cpp_cpu_kernel.ipynb")
    text = markdown_prose(step2)
    assert "https://docs.pytorch.org/docs/stable/cpp_extension.html" in text, "no intersphinx link"
    assert absolute >= 20, f"the roles of the steps became only {absolute} links"


@needs_site
def test_the_myst_notebook_is_offered_as_a_jupyter_notebook():
    import jupytext
    import nbformat

    page = SITE / "tutorials" / "rms_norm_in_one_sitting.html"
    offered = re.findall(r'href="([^"]+\.ipynb)"', page.read_text())
    assert offered, "the one-sitting page offers no .ipynb download"
    path = (page.parent / offered[0]).resolve()
    assert path.is_file(), f"the offered notebook {offered[0]} is not in the site"
    notebook = nbformat.read(path, as_version=nbformat.NO_CONVERT)
    nbformat.validate(notebook)
    source = jupytext.read(ROOT / "tutorials" / "rms_norm_in_one_sitting.md")
    code = [c.source for c in notebook.cells if c.cell_type == "code"]
    assert code == [c.source for c in source.cells if c.cell_type == "code"]
    assert not REST_LEFT.search(markdown_prose(path))


@needs_site
def test_source_archive_holds_the_project():
    archives = sorted((SITE / "_downloads").rglob("opguide-source.tar.gz"))
    assert archives, "no source archive among the downloads"
    with tarfile.open(archives[0]) as tar:
        names = set(tar.getnames())
    needed_files = ["setup.py", "pyproject.toml", "csrc/opguide.cpp", "template/copier.yml"]
    # The template's questions, and the root copier.yml that serves it from a git URL.
    needed_files += ["template/questions.yml", "copier.yml"]
    # Part I's project, which its pages build.
    needed_files += ["first_operator/setup.py", "first_operator/csrc/rms_norm_cuda.cu"]
    for needed in needed_files:
        assert f"opguide/{needed}" in names, f"the archive lacks {needed}"
    assert not any("/build/" in n or n.endswith(".so") for n in names), "build output in archive"
    index = (SITE / "index.html").read_text()
    assert "opguide-source.tar.gz" in index, "the landing page does not offer the archive"
    # The check of this site's own prose, and the words it looks for, are the
    # guide's, not part of the project a reader takes away.
    for left_out in ("tests/history_words.txt", "tests/test_history_words.py"):
        assert f"opguide/{left_out}" not in names, f"the archive holds {left_out}"


# The guide's machinery (guidekit/: benchmark, build information, compile
# checks; the machine-code tests): pages quote what they need of these, whole
# files are not the point there.
MACHINERY = ("guidekit/", "tests/test_compile_checks.py")
INCLUDE = re.compile(r"literalinclude:: /\.\./(\S+)")


@needs_site
def test_every_file_a_step_shows_is_shown_whole_somewhere():
    """A file that a step quotes appears whole, captioned with its path, on some page."""
    quoted = set()
    for script in gallery_pages():  # Part I's and Part II's
        quoted |= {p for p in INCLUDE.findall(script.read_text()) if not p.startswith("build/")}
    whole = {}
    for page in pages():
        whole.update(captioned_blocks(page))
    missing, differ = [], []
    for path in sorted(p for p in quoted if not p.startswith(MACHINERY)):
        if path not in whole:
            missing.append(path)
        else:
            # The shown file is the source less its marker lines.
            shown = [line for line in whole[path].splitlines() if line.strip()]
            source = [
                line
                for line in (ROOT / path).read_text().splitlines()
                if line.strip() and not MARKER.match(line)
            ]
            if shown != source:
                differ.append(path)
    assert not missing, f"quoted but never shown whole with its path as caption: {missing}"
    assert not differ, f"shown under their path but not whole: {differ}"


# -- Prose: the words a reader reads -------------------------------------------
# Directives whose body is code, a file or a list of pages, never prose; the
# body of any other directive (a dropdown, a note, a card, a table) is prose.
CODE_DIRECTIVES = frozenset(
    {
        "code",
        "code-block",
        "code-cell",
        "csv-table",
        "doctest",
        "figure",
        "highlight",
        "image",
        "include",
        "literalinclude",
        "math",
        "raw",
        "recorded-sources",
        "sourcecode",
        "testcode",
        "testoutput",
        "toctree",
    }
)
REST_DIRECTIVE = re.compile(r"^(\s*)\.\. ([A-Za-z][\w:-]*)::(.*)$")
# A directive's option (``:language: cpp``) or a field: not prose.
REST_OPTION = re.compile(r"^\s*:[\w -]+:(\s|$)")
MYST_FENCE = re.compile(r"^\s*(`{3,}|~{3,}|:{3,})\s*(?:\{([\w:-]+)\})?(.*)$")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def rest_prose_words(text: str) -> int:
    """Words of prose in reST: outside literal blocks (``::``), comments, directive
    options and the bodies of :data:`CODE_DIRECTIVES`; a directive's title counts."""
    words = 0
    skip_deeper = None  # skip the lines indented deeper than this: a code body
    literal_after = None  # a paragraph ended with "::": an indented literal block follows
    for line in text.splitlines():
        if skip_deeper is not None:
            if not line.strip() or _indent(line) > skip_deeper:
                continue
            skip_deeper = None
        if literal_after is not None and line.strip():
            if _indent(line) > literal_after:
                skip_deeper, literal_after = literal_after, None
                continue
            literal_after = None
        directive = REST_DIRECTIVE.match(line)
        if directive:
            if directive[2] in CODE_DIRECTIVES:
                skip_deeper = _indent(line)
            else:
                words += len(directive[3].split())
            continue
        if line.lstrip().startswith(".."):  # a comment or a link target
            skip_deeper = _indent(line)
            continue
        if REST_OPTION.match(line):
            continue
        text_line = line.rstrip()
        if text_line.endswith("::"):
            literal_after = _indent(line)
            text_line = text_line[:-2]
        words += len(text_line.split())
    return words


def myst_prose_words(text: str) -> int:
    """Words of prose in a MyST Markdown page or notebook: outside its front matter,
    fenced code, the bodies of :data:`CODE_DIRECTIVES`, options and HTML comments."""
    lines = text.splitlines()
    if lines and lines[0].strip() == "---":
        lines = lines[lines.index("---", 1) + 1 :]
    words, fences, in_comment = 0, [], False  # fences: (fence, whether its body is prose)
    for line in lines:
        stripped = line.strip()
        if in_comment:
            in_comment = "-->" not in stripped
            continue
        if fences:
            fence, prose = fences[-1]
            if stripped and set(stripped) == {fence[0]} and len(stripped) >= len(fence):
                fences.pop()
                continue
            if not prose:
                continue
        if stripped.startswith("<!--"):
            in_comment = "-->" not in stripped
            continue
        opened = MYST_FENCE.match(line)
        if opened and (opened[1][0] != ":" or opened[2]):
            prose = bool(opened[2]) and opened[2] not in CODE_DIRECTIVES
            fences.append((opened[1], prose))
            words += len(opened[3].split()) if prose else 0
            continue
        if stripped == "+++" or (fences and REST_OPTION.match(line)):
            continue
        words += len(stripped.lstrip("#").split())  # a heading's "#" is no word
    return words


def gallery_prose_words(script: Path) -> int:
    """Words of prose in a gallery script: its docstring and its ``# %%`` text cells, as reST."""
    source = script.read_text()
    texts, cell = [ast.get_docstring(ast.parse(source)) or ""], None
    for line in source.splitlines():
        if line.startswith("# %%"):
            cell = []
            texts.append(cell)
        elif cell is not None and line.startswith("#"):
            cell.append(line[2:] if line.startswith("# ") else line[1:])
        else:
            cell = None
    return sum(rest_prose_words(t if isinstance(t, str) else "\n".join(t)) for t in texts)


def gallery_ignored() -> re.Pattern:
    """sphinx-gallery's ``ignore_pattern`` from docs/conf.py: scripts that are no page."""
    for node in ast.walk(ast.parse((ROOT / "docs" / "conf.py").read_text())):
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and key.value == "ignore_pattern":
                    return re.compile(ast.literal_eval(value))
    raise AssertionError("docs/conf.py's sphinx_gallery_conf has no ignore_pattern")


def gallery_folders() -> list[Path]:
    """Every gallery of the site (and sub-gallery): a folder with a GALLERY_HEADER.rst."""
    headers = list(ROOT.glob("*/GALLERY_HEADER.rst")) + list(ROOT.glob("*/*/GALLERY_HEADER.rst"))
    return sorted(
        h.parent for h in headers if h.relative_to(ROOT).parts[0] not in ("docs", "build")
    )


def gallery_pages() -> list[Path]:
    """The scripts every gallery makes a page of."""
    ignored = gallery_ignored()
    return [
        script
        for folder in gallery_folders()
        for script in sorted(folder.glob("*.py"))
        if not ignored.search(str(script))
    ]


# Pages whose words are not the guide's prose: the API reference is the
# docstrings, read when looked up.
NOT_PROSE = ("docs/reference.md",)
HIDDEN_FOLDERS = ("_build", "_generated", "auto_examples", "auto_part1", "tutorials")


def site_prose_words() -> dict[str, int]:
    """{page's source: words of prose} for every page of the site but the API reference."""
    counted = {}
    for script in gallery_pages():
        counted[str(script.relative_to(ROOT))] = gallery_prose_words(script)
    for folder in gallery_folders():
        header = folder / "GALLERY_HEADER.rst"
        counted[str(header.relative_to(ROOT))] = rest_prose_words(header.read_text())
    docs = ROOT / "docs"
    sources = [p for p in docs.rglob("*") if p.suffix in (".md", ".rst")]
    sources = [p for p in sources if not set(p.relative_to(docs).parts) & set(HIDDEN_FOLDERS)]
    sources += sorted((ROOT / "tutorials").rglob("*.md"))
    for page in sorted(sources):
        name = str(page.relative_to(ROOT))
        if name not in NOT_PROSE:
            count = myst_prose_words if page.suffix == ".md" else rest_prose_words
            counted[name] = count(page.read_text())
    return counted


#: The whole site's prose outside the API reference, in words: read in a few sittings.
SITE_PROSE_WORDS = 30_000


def test_site_prose_words_fit_the_budget():
    counted = site_prose_words()
    total = sum(counted.values())
    table = "\n".join(f"{words:7d}  {page}" for page, words in sorted(counted.items()))
    assert total <= SITE_PROSE_WORDS, f"{total} words of prose, over {SITE_PROSE_WORDS}:\n{table}"


def test_prose_words_leave_out_code():
    # The counters must see prose and nothing else, or the budget above means nothing.
    rest = "Some words here::\n\n    code not counted\n\n.. literalinclude:: /x.py\n   :lines: 1\n"
    rest += "\n.. dropdown:: Two words\n\n   Three more words\n"
    assert rest_prose_words(rest) == 3 + 2 + 3
    myst = "---\njupytext: {}\n---\n# Title\n```{code-cell}\nx = 1\n```\n:::{note}\n:class: y\n"
    myst += "One two\n:::\n```{literalinclude} a.py\n:language: python\n```\n<!-- hidden -->\n"
    assert myst_prose_words(myst) == 1 + 2


GALLERY_PAGES = gallery_pages()


@pytest.mark.parametrize("script", GALLERY_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_gallery_page_fits_one_sitting(script):
    # A page is read in one sitting: at most 2 000 words of prose.
    words = gallery_prose_words(script)
    assert 100 < words <= 2000, f"{script.name} has {words} words of prose"


# -- Part I, "Add an operator": the short path -------------------------------------
PART1 = ROOT / "part1_src"
PART1_PAGES = sorted(PART1.glob("[0-9][0-9]_*.py"))


def first_toctree(index: str) -> list[str]:
    """The entries of the first ``toctree`` of docs/index.md."""
    block = re.search(r"```\{toctree\}\n(.*?)```", index, re.DOTALL)
    assert block, "docs/index.md has no toctree"
    return [line.strip() for line in block[1].splitlines() if line.strip() and ":" not in line]


def test_part1_leads_the_site_and_fits_its_budget():
    """The landing page's first table of contents is Part I: at most 8 pages (its
    gallery's index and its steps) and 8 000 words of prose, none over 1 500."""
    assert first_toctree((ROOT / "docs" / "index.md").read_text()) == ["auto_part1/index"]
    words = {p.name: gallery_prose_words(p) for p in PART1_PAGES}
    words["GALLERY_HEADER.rst"] = rest_prose_words((PART1 / "GALLERY_HEADER.rst").read_text())
    assert len(words) <= 8, sorted(words)
    assert all(100 < n <= 1500 for n in words.values()), words
    assert sum(words.values()) <= 8000, words


@pytest.mark.parametrize("script", PART1_PAGES, ids=lambda p: p.name)
def test_part1_imports_only_torch_its_project_and_the_standard_library(script):
    # A downloaded step runs in the reader's own project: nothing of the guide's.
    allowed = {"torch", "first_op"} | set(sys.stdlib_module_names)
    found = set()
    for node in ast.walk(ast.parse(script.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            found.add((node.module or "").split(".")[0])
    assert found <= allowed, f"{script.name} imports {sorted(found - allowed)}"


def test_part1_shows_a_short_setup_py_and_set_python_module():
    setup_py = (ROOT / "first_operator" / "setup.py").read_text()
    assert len(setup_py.splitlines()) <= 40
    assert "CUDAExtension" in setup_py and "CppExtension" in setup_py
    shown = "".join(p.read_text() for p in PART1_PAGES)
    for path in ("first_operator/setup.py", "first_operator/csrc/rms_norm.cpp"):
        assert f"literalinclude:: /../{path}" in shown, f"Part I does not show {path}"
    source = (ROOT / "first_operator" / "csrc" / "rms_norm.cpp").read_text()
    assert 'm.set_python_module("first_op.ops");' in source


@needs_site
def test_part1_pages_show_the_setup_py_whole():
    setup_py = (ROOT / "first_operator" / "setup.py").read_text()
    blocks = captioned_blocks(SITE / "auto_part1" / "03_the_build.html")
    assert blocks.get("first_operator/setup.py", "").strip() == setup_py.strip()
