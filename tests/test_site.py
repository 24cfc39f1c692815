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
  the check of the site's prose (tests/test_history_words.py) and its words.
"""

from __future__ import annotations

import ast
import html
import json
import re
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

pytestmark = pytest.mark.skipif(
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


def test_no_marker_comment_in_rendered_code():
    leaks = []
    for page in pages():
        for block in code_blocks(page):
            for line in MARKER.findall(block):
                leaks.append(f"{page.relative_to(SITE)}: {line.strip()}")
    assert not leaks, "marker comments shown to readers:\n" + "\n".join(leaks[:20])


LINENO = re.compile(r'<span class="linenos">\s*(\d+)</span>')


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


def test_building_page_shows_the_readme_s_gpu_commands_whole():
    """building.md quotes the README's GPU commands by line numbers: every command shows."""
    readme = (ROOT / "README.md").read_text()
    block = readme.split("<!-- gpu-commands -->", 1)[1].split("<!-- gpu-commands-end -->")[0]
    commands = [line.strip() for line in block.splitlines() if line.strip()]
    commands = [line for line in commands if not line.startswith("```")]
    shown = "\n".join(code_blocks(SITE / "building.html"))
    missing = [line for line in commands if line not in shown]
    assert not missing, f"building.html leaves out: {missing}"


def test_no_page_shows_the_library_registration_macros():
    shown = [str(p.relative_to(SITE)) for p in pages() if "OPGUIDE_LIBRARY" in p.read_text()]
    assert not shown, f"pages that show OPGUIDE_LIBRARY: {shown}"


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


def test_downloaded_notebooks_hold_no_rest():
    # Jupyter shows a reST role or directive as raw text.
    leftovers = []
    for notebook in download_notebooks():
        for line in markdown_prose(notebook).split("\n"):
            if REST_LEFT.search(line):
                leftovers.append(f"{notebook.name}: {line.strip()}")
    assert not leftovers, "reST in the notebooks' Markdown:\n" + "\n".join(leftovers[:20])


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


def test_source_archive_holds_the_project():
    archives = sorted((SITE / "_downloads").rglob("opguide-source.tar.gz"))
    assert archives, "no source archive among the downloads"
    with tarfile.open(archives[0]) as tar:
        names = set(tar.getnames())
    needed_files = ["setup.py", "pyproject.toml", "csrc/opguide.cpp", "template/copier.yml"]
    # The template's questions, and the root copier.yml that serves it from a git URL.
    needed_files += ["template/questions.yml", "copier.yml"]
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


def test_every_file_a_step_shows_is_shown_whole_somewhere():
    """A file that a step quotes appears whole, captioned with its path, on some page."""
    quoted = set()
    for script in sorted((ROOT / "examples_src").glob("[0-9][0-9]_*.py")):
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


def gallery_prose_words(script: Path) -> int:
    """Words of prose in a gallery script: its docstring and the text of its ``# %%`` cells.

    reST directive lines and their options (``.. literalinclude::``,
    ``:language:``) are not prose and are not counted; code and output are not.
    """
    source = script.read_text()
    words = len((ast.get_docstring(ast.parse(source)) or "").split())
    in_text = False
    for line in source.splitlines():
        if line.startswith("# %%"):
            in_text = True
            continue
        if in_text and line.startswith("#"):
            text = line[1:].strip()
            if not text.startswith(("..", ":")):
                words += len(text.split())
        else:
            in_text = False
    return words


GALLERY_PAGES = sorted((ROOT / "examples_src").glob("[0-9][0-9]_*.py"))


@pytest.mark.parametrize("script", GALLERY_PAGES, ids=lambda p: p.name)
def test_every_gallery_page_fits_one_sitting(script):
    # A page is read in one sitting: at most 2 000 words of prose.
    words = gallery_prose_words(script)
    assert 100 < words <= 2000, f"{script.name} has {words} words of prose"
