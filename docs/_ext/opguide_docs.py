"""Sphinx extension of the opguide site: what the shown code and the downloads need.

* ``literalinclude`` drops the marker comments (``// [name]``, ``# [name-end]``)
  that ``:start-after:``/``:end-before:`` use, so a reader never sees them,
  whether a file is shown whole or in part.
* The notebooks that sphinx-gallery writes for download carry the code that the
  page shows: each ``.. literalinclude::`` becomes a code block with the file's
  text (read with Sphinx's own reader, so the options mean what they mean on
  the page), and a ``.. dropdown::`` becomes a bold title over its body.
* viewcode's pages of opguide's modules show marker lines as blank lines.
* ``_generated/opguide-source.tar.gz``: an archive of this source tree made at
  build time, offered on the landing page.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import tarfile
import textwrap
import zipfile
from pathlib import Path

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.directives.code import LiteralInclude, LiteralIncludeReader

# A line that holds nothing but a marker comment: "// [cpu-kernel]", "# [fake-end]".
MARKER_LINE = re.compile(r"^[ \t]*(?://|#)[ \t]*\[[A-Za-z0-9_-]+\][ \t]*$")
ARCHIVE_NAME = "opguide-source.tar.gz"
# Not part of the source: build trees, caches, the generated site.
ARCHIVE_SKIP = re.compile(
    r"^(build|\.nox|\.git|\.whl|\.gl|docs/_build|docs/auto_examples|docs/_generated)(/|$)"
    r"|(^|/)(__pycache__|\.pytest_cache|\.ruff_cache|\.hypothesis|[^/]+\.egg-info)(/|$)"
    r"|\.(so|pyd|pyc|inv)$|^docs/sg_execution_times\.rst$"
)


def strip_markers(text: str) -> str:
    """``text`` without its marker-comment lines."""
    return "".join(line for line in text.splitlines(True) if not MARKER_LINE.match(line))


class MarkerFreeLiteralInclude(LiteralInclude):
    """``literalinclude`` whose output leaves out marker-comment lines."""

    def run(self) -> list[nodes.Node]:
        result = super().run()
        for node in result:
            for block in node.findall(nodes.literal_block):
                text = strip_markers(block.astext())
                block.rawsource = text
                block.children = [nodes.Text(text)]
        return result


# ---------------------------------------------------------------- notebooks --
DIRECTIVE = re.compile(r"^(?P<indent>[ \t]*)\.\. (?P<name>[a-z-]+)::[ \t]*(?P<arg>.*)$")
OPTION = re.compile(r"^[ \t]+:(?P<key>[a-z-]+):[ \t]*(?P<value>.*)$")


def _block(lines: list[str], start: int, indent: str) -> int:
    """Index just past the body of the directive on line ``start``."""
    end = start + 1
    while end < len(lines):
        line = lines[end]
        if line.strip() and not line.startswith(indent + " "):
            break
        end += 1
    while end > start + 1 and not lines[end - 1].strip():
        end -= 1
    return end


def _included_code(arg: str, options: dict[str, str], srcdir: Path, config) -> tuple[str, str]:
    """(language, text) that ``.. literalinclude:: arg`` with ``options`` shows."""
    path = srcdir / arg.lstrip("/") if arg.startswith("/") else srcdir / "auto_examples" / arg
    reader_options = {k: (True if v == "" else v) for k, v in options.items()}
    text, _ = LiteralIncludeReader(str(path.resolve()), reader_options, config).read()
    return options.get("language", ""), strip_markers(text)


def markdown_with_code(markdown: str, srcdir: Path, config) -> str:
    """Replaces the literalinclude and dropdown directives of a notebook cell."""
    lines = markdown.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        found = DIRECTIVE.match(lines[i])
        if not found or found["name"] not in ("literalinclude", "dropdown"):
            out.append(lines[i])
            i += 1
            continue
        indent, name, arg = found["indent"], found["name"], found["arg"].strip()
        end = _block(lines, i, indent)
        options: dict[str, str] = {}
        j = i + 1
        while j < end and OPTION.match(lines[j]):
            option = OPTION.match(lines[j])
            options[option["key"]] = option["value"].strip()
            j += 1
        if name == "dropdown":
            body = textwrap.dedent("\n".join(lines[j:end]))
            body = markdown_with_code(body, srcdir, config)  # directives inside it
            out += [f"{indent}**{arg}**", ""]
            out += [indent + line if line else line for line in body.split("\n")]
        else:
            language, code = _included_code(arg, options, srcdir, config)
            caption = options.get("caption")
            if caption:
                out += [f"{indent}`{caption}`:", ""]
            out += [f"{indent}```{language}"]
            out += [indent + line if line else line for line in code.rstrip("\n").split("\n")]
            out += [f"{indent}```"]
        i = end
    return "\n".join(out)


def rewrite_gallery_notebooks(app: Sphinx) -> None:
    """Puts the shown code into the gallery's download notebooks (and their zips)."""
    gallery = Path(app.srcdir) / "auto_examples"
    for ipynb in sorted(gallery.glob("*.ipynb")):
        notebook = json.loads(ipynb.read_text())
        for cell in notebook["cells"]:
            if cell["cell_type"] != "markdown":
                continue
            source = "".join(cell["source"])
            if ".. literalinclude::" in source or ".. dropdown::" in source:
                new = markdown_with_code(source, Path(app.srcdir), app.config)
                cell["source"] = new.splitlines(True)
        ipynb.write_text(json.dumps(notebook, indent=1, ensure_ascii=False) + "\n")
        archive = ipynb.with_suffix(".zip")
        if archive.exists():
            with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
                for member in (ipynb.with_suffix(".py"), ipynb):
                    zf.write(member, member.name)


# ------------------------------------------------------------ source archive --
def _source_files(root: Path) -> list[str]:
    """The files of the source tree: git's list when there is one, else a walk."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        listed = [p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()]
    return sorted(f for f in listed if (root / f).is_file() and not ARCHIVE_SKIP.search(f))


def write_source_archive(app: Sphinx) -> None:
    """Writes docs/_generated/opguide-source.tar.gz from the tree the site is built from."""
    root = Path(app.srcdir).parent
    target = Path(app.srcdir) / "_generated" / ARCHIVE_NAME
    target.parent.mkdir(exist_ok=True)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name in _source_files(root):
            info = tar.gettarinfo(str(root / name), arcname=f"opguide/{name}")
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            with open(root / name, "rb") as fh:
                tar.addfile(info, fh)
    target.write_bytes(buffer.getvalue())


def viewcode_source(app: Sphinx, modname: str):
    """The source that viewcode shows for opguide's modules, marker lines blanked.

    Blank lines instead of removed ones keep every definition on its line, so
    viewcode's links from the API reference still land on it.
    """
    if modname != "opguide" and not modname.startswith("opguide."):
        return None
    from sphinx.pycode import ModuleAnalyzer

    analyzer = ModuleAnalyzer.for_module(modname)
    analyzer.find_tags()
    lines = analyzer.code.split("\n")
    code = "\n".join("" if MARKER_LINE.match(line) else line for line in lines)
    return code, analyzer.tags


def setup(app: Sphinx) -> dict:
    app.add_directive("literalinclude", MarkerFreeLiteralInclude, override=True)
    app.setup_extension("sphinx.ext.viewcode")  # defines the event connected here
    app.connect("viewcode-find-source", viewcode_source)
    # After sphinx-gallery (priority 500) has written the notebooks.
    app.connect("builder-inited", rewrite_gallery_notebooks, priority=900)
    app.connect("builder-inited", write_source_archive, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
