"""Sphinx extension of the opguide site: what the shown code and the downloads need.

* ``literalinclude`` drops the marker comments (``// [name]``, ``# [name-end]``)
  that ``:start-after:``/``:end-before:`` use, so a reader never sees them,
  whether a file is shown whole or in part.
* The notebooks that sphinx-gallery writes for download read as Markdown
  (notebook_markdown.py): a role becomes a link to what it names on this site
  or in Python's and PyTorch's documentation (resolved as the page resolves
  it), each ``.. literalinclude::`` a code block with the code that the page
  shows (read with Sphinx's own reader, so the options mean what they mean
  there), a ``.. list-table::`` a Markdown table, and other directives their
  title over their body.
* Every MyST notebook page (tutorials/*.md) ends with its downloads, as a
  gallery page does: the Jupyter notebook (jupytext's conversion, under
  ``_generated/notebooks/``) and the MyST file.
* viewcode's pages of opguide's modules show marker lines as blank lines.
* ``recorded-sources``: beside a record a page shows, which of the sources it
  measured have changed since (``guidekit.recorded.sources``).
* ``_generated/opguide-source.tar.gz``: an archive of this source tree made at
  build time, offered on the landing page.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import tarfile
import zipfile
from pathlib import Path, PurePosixPath

from docutils import nodes
from notebook_markdown import to_markdown
from sphinx import addnodes
from sphinx.application import Sphinx
from sphinx.directives.code import LiteralInclude, LiteralIncludeReader
from sphinx.errors import ExtensionError, NoUri
from sphinx.util.docutils import SphinxDirective

# A line that holds nothing but a marker comment: "// [cpu-kernel]", "# [fake-end]".
MARKER_LINE = re.compile(r"^[ \t]*(?://|#)[ \t]*\[[A-Za-z0-9_-]+\][ \t]*$")
ARCHIVE_NAME = "opguide-source.tar.gz"
# Not part of the source: build trees, caches, the generated site. Nor the
# check of this site's own prose and the words it looks for, which quote what
# no page may say: they are the guide's, not the project's.
ARCHIVE_SKIP = re.compile(
    r"^(build|\.nox|\.git|\.whl|\.gl|docs/_build|docs/auto_\w+|docs/_generated)(/|$)"
    r"|(^|/)(__pycache__|\.pytest_cache|\.ruff_cache|\.hypothesis|[^/]+\.egg-info)(/|$)"
    r"|\.(so|pyd|pyc|inv)$|^docs/sg_execution_times\.rst$"
    r"|^tests/(history_words\.txt|test_history_words\.py)$"
)


def strip_markers(text: str, blank: bool = False) -> str:
    """``text`` without its marker-comment lines, or with them blank (``blank``),
    which keeps every other line at its number in the file."""
    lines = text.splitlines(True)
    if blank:
        return "".join("\n" if MARKER_LINE.match(line) else line for line in lines)
    return "".join(line for line in lines if not MARKER_LINE.match(line))


class RecordedSources(SphinxDirective):
    """``.. recorded-sources:: NAME``: the sentence that says which of the sources
    the record ``docs/recorded/NAME`` measured have changed since it was made
    (:func:`guidekit.recorded.sources.stale_note`); nothing when none has."""

    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        from guidekit.recorded import recorded_dir, sources

        path = recorded_dir() / self.arguments[0]
        self.env.note_dependency(str(path))
        note = sources.stale_note(path)
        return [nodes.paragraph(text=note)] if note else []


class MarkerFreeLiteralInclude(LiteralInclude):
    """``literalinclude`` whose output leaves out marker-comment lines. With line
    numbers (``:linenos:`` or ``:lineno-match:``) it blanks them instead, so the
    numbers shown are the file's, as compilers and sanitizers print them."""

    def run(self) -> list[nodes.Node]:
        result = super().run()
        numbered = "linenos" in self.options or "lineno-match" in self.options
        for node in result:
            for block in node.findall(nodes.literal_block):
                text = strip_markers(block.astext(), blank=numbered)
                block.rawsource = text
                block.children = [nodes.Text(text)]
        return result


# ---------------------------------------------------------------- notebooks --
#: literalinclude's options that take a number, as its directive converts them.
NUMBER_OPTIONS = ("dedent", "lineno-start", "tab-width")


def _option_value(key: str, value: str):
    """An option's text as ``LiteralInclude`` hands it to its reader: a flag is True,
    a number an int (``:dedent:`` alone: None, every common indent)."""
    if key in NUMBER_OPTIONS:
        return int(value) if value else None
    return True if value == "" else value


def _included_code(arg: str, options: dict[str, str], base: Path, app: Sphinx) -> tuple[str, str]:
    """(language, text) that ``.. literalinclude:: arg`` with ``options`` shows."""
    srcdir = Path(app.srcdir)
    path = srcdir / arg.lstrip("/") if arg.startswith("/") else base / arg
    reader_options = {k: _option_value(k, v) for k, v in options.items()}
    text, _ = LiteralIncludeReader(str(path.resolve()), reader_options, app.config).read()
    numbered = "linenos" in options or "lineno-match" in options
    return options.get("language", ""), strip_markers(text, blank=numbered)


def _site_root(app: Sphinx) -> str | None:
    """The site's absolute root URL (``html_baseurl``), or None where it has none.

    A downloaded notebook leaves the site, so a link relative to the site
    breaks there: a link to one of the site's pages is absolute, or, with no
    published address to point at, no link at all (the page's title stays).
    """
    return app.config.html_baseurl.rstrip("/") + "/" if app.config.html_baseurl else None


def _linker(app: Sphinx, refdoc: str, root: str | None):
    """``link(domain, role, target)`` for :func:`notebook_markdown.to_markdown`.

    A target resolves the way Sphinx resolves it on the page ``refdoc``: in its
    domain (opguide's API, the pages), then through ``missing-reference``
    (intersphinx: Python's and PyTorch's online documentation). A link inside
    the site is prefixed with ``root``, the site's absolute root URL; with
    ``root`` None it resolves to no URL, only the target's title.
    """
    env = app.env
    py_roles = env.get_domain("py").roles
    root_doc = app.config.root_doc
    root_uri = app.builder.get_target_uri(root_doc)

    def link(domain_name: str, role: str, target: str) -> tuple[str, str | None] | None:
        domain_name = domain_name or ("py" if role in py_roles else "std")
        try:
            domain = env.get_domain(domain_name)
        except ExtensionError:
            return None
        node = addnodes.pending_xref(
            "", refdomain=domain_name, reftype=role, reftarget=target, refdoc=refdoc
        )
        node["refexplicit"] = node["refwarn"] = False
        contnode = nodes.literal(target, target)
        try:
            found = domain.resolve_xref(env, root_doc, app.builder, role, target, node, contnode)
            if found is None:
                found = app.events.emit_firstresult(
                    "missing-reference", env, node, contnode, allowed_exceptions=(NoUri,)
                )
        except NoUri:
            return None
        if not isinstance(found, nodes.reference):
            return None  # unknown, or a builtin that Sphinx does not link
        uri = found.get("refuri") or f"{root_uri}#{found.get('refid', '')}"
        if "://" not in uri:
            if root is None:
                return None, found.astext()
            uri = root + uri
        return uri, found.astext()

    return link


def markdown_cells_converted(app: Sphinx, path: Path, refdoc: str) -> None:
    """Rewrites the Markdown cells of the notebook ``path`` (see notebook_markdown.py).

    ``refdoc`` is the page the notebook belongs to: relative targets of
    ``:doc:`` and ``literalinclude`` are read from its folder.
    """
    notebook = json.loads(path.read_text())
    link = _linker(app, refdoc, _site_root(app))
    base = Path(app.srcdir) / PurePosixPath(refdoc).parent

    def include(arg: str, options: dict[str, str]) -> tuple[str, str]:
        return _included_code(arg, options, base, app)

    for cell in notebook["cells"]:
        if cell["cell_type"] == "markdown":
            source = "".join(cell["source"])
            cell["source"] = to_markdown(source, link, include).splitlines(True)
    path.write_text(json.dumps(notebook, indent=1, ensure_ascii=False) + "\n")


def rewrite_gallery_notebooks(app: Sphinx, env) -> None:
    """Converts the gallery's download notebooks (and their zips) to Markdown that reads well.

    Runs once every page is read, so that every target a role names is known,
    and before the downloads are copied into the site.
    """
    if app.builder.format != "html":
        return
    srcdir = Path(app.srcdir)
    galleries = app.config.sphinx_gallery_conf["gallery_dirs"]
    galleries = [galleries] if isinstance(galleries, str) else galleries
    notebooks = [nb for gallery in galleries for nb in sorted((srcdir / gallery).glob("*.ipynb"))]
    for ipynb in notebooks:
        markdown_cells_converted(app, ipynb, ipynb.relative_to(srcdir).with_suffix("").as_posix())
        archive = ipynb.with_suffix(".zip")
        if archive.exists():
            with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
                for member in (ipynb.with_suffix(".py"), ipynb):
                    zf.write(member, member.name)
    for docname in sorted(getattr(env, "opguide_notebooks", ())):
        markdown_cells_converted(app, _notebook_download(app, docname), docname)


# The MyST notebooks (tutorials/*.md) offered as Jupyter notebooks.
NOTEBOOKS = "_generated/notebooks"


def _notebook_download(app: Sphinx, docname: str) -> Path:
    return Path(app.srcdir) / NOTEBOOKS / f"{docname}.ipynb"


def write_notebook_downloads(app: Sphinx, env, docnames: list[str]) -> None:
    """Writes a Jupyter notebook (jupytext's conversion) of every MyST notebook page."""
    import jupytext
    from myst_nb.core.read import is_myst_markdown_notebook

    env.opguide_notebooks = set()
    for docname in sorted(env.found_docs):
        source = Path(env.doc2path(docname))
        if source.suffix != ".md":
            continue
        text = source.read_text()
        if not is_myst_markdown_notebook(text):
            continue
        target = _notebook_download(app, docname)
        target.parent.mkdir(parents=True, exist_ok=True)
        notebook = jupytext.reads(text, fmt="md:myst")
        target.write_text(jupytext.writes(notebook, fmt="ipynb"))
        env.opguide_notebooks.add(docname)


def _download_button(kind: str, label: str, reftarget: str, docname: str) -> nodes.container:
    """One download button, as sphinx-gallery draws its own."""
    name = PurePosixPath(reftarget).name
    reference = addnodes.download_reference(
        "", "", reftarget=reftarget, refdoc=docname, refexplicit=True
    )
    reference += nodes.literal(name, f"{label}: {name}", classes=["xref", "download"])
    classes = ["sphx-glr-download", f"sphx-glr-download-{kind}"]
    return nodes.container("", nodes.paragraph("", "", reference), classes=classes)


def add_notebook_downloads(app: Sphinx, doctree: nodes.document) -> None:
    """Ends a MyST notebook page with its downloads: the Jupyter notebook and the MyST file."""
    docname = app.env.docname
    if docname not in getattr(app.env, "opguide_notebooks", ()):
        return
    source = Path(app.env.doc2path(docname)).relative_to(app.srcdir).as_posix()
    footer = nodes.container(classes=["sphx-glr-footer", "sphx-glr-footer-example"])
    footer += _download_button(
        "jupyter", "Download Jupyter notebook", f"/{NOTEBOOKS}/{docname}.ipynb", docname
    )
    footer += _download_button("python", "Download MyST notebook", f"/{source}", docname)
    sections = list(doctree.findall(nodes.section))
    (sections[0] if sections else doctree).append(footer)


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
    app.add_directive("recorded-sources", RecordedSources)
    app.setup_extension("sphinx.ext.viewcode")  # defines the event connected here
    app.connect("viewcode-find-source", viewcode_source)
    app.connect("env-before-read-docs", write_notebook_downloads)
    # Before Sphinx collects the page's downloads (priority 500).
    app.connect("doctree-read", add_notebook_downloads, priority=400)
    app.connect("env-updated", rewrite_gallery_notebooks)
    app.connect("builder-inited", write_source_archive, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
