"""Sphinx configuration for the opguide site.

The site is executable: sphinx-gallery runs every script in examples_src/ and
myst-nb runs every notebook in tutorials/ at build time, and any error in
either fails the build (nox -s docs builds with -W).
"""

from __future__ import annotations

import os
import sys
import zlib
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
BUILD = ROOT / "build"

# Every cache the examples fill stays in the build tree (nox sets these too).
for _name, _sub in (
    ("TORCH_EXTENSIONS_DIR", "torch_extensions"),
    ("TRITON_CACHE_DIR", "triton_cache"),
    ("TORCHINDUCTOR_CACHE_DIR", "inductor_cache"),
):
    os.environ.setdefault(_name, str(BUILD / _sub))
os.environ.setdefault("MPLBACKEND", "Agg")
# The gallery scripts run in this process and in the worker processes of
# sphinx-gallery's parallel mode, which inherit this environment. Without a GPU,
# the Triton steps need Triton's interpreter, chosen before any script (or
# torch.compile) imports triton.
import torch  # noqa: E402

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

project = "opguide"
author = "the opguide authors"
copyright = "2026, the opguide authors"

# docs/_ext/opguide_docs.py: marker-free literalinclude, notebook downloads
# that carry the shown code, and the source archive.
sys.path.insert(0, str(DOCS / "_ext"))

extensions = [
    "opguide_docs",
    "myst_nb",
    "sphinx_gallery.gen_gallery",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.intersphinx",
    "sphinx.ext.viewcode",
    "sphinx_copybutton",
    "sphinx_design",
    # MathJax from _static/mathjax rather than a CDN, so math renders offline
    "sphinx-mathjax-offline",
]

# Notebooks are MyST Markdown (tutorials/*.md); the .ipynb files that
# sphinx-gallery writes for download must not be executed a second time.
source_suffix = {".rst": "restructuredtext", ".md": "myst-nb"}
# myst-nb registers .ipynb itself; the gallery's download copies, and the
# notebooks and archive generated for download (_generated), are excluded here.
exclude_patterns = [
    "_build",
    "_generated",
    "Thumbs.db",
    ".DS_Store",
    "**.ipynb_checkpoints",
    "auto_examples/*.ipynb",
    "auto_part1/*.ipynb",
    "sg_execution_times.rst",
    "auto_examples/sg_execution_times.rst",
    "auto_part1/sg_execution_times.rst",
]
# dollarmath: $...$ and $$...$$ in the notebooks are math (MathJax renders it).
myst_enable_extensions = ["colon_fence", "deflist", "dollarmath"]
myst_heading_anchors = 3

# -- Notebooks (myst-nb) ------------------------------------------------------
# Always execute: a notebook that only re-used cached outputs would hide a
# broken kernel. A failing cell fails the build.
nb_execution_mode = "force"
nb_execution_raise_on_error = True
nb_execution_show_tb = True
nb_execution_timeout = 900

# -- Gallery (sphinx-gallery) -------------------------------------------------
# The thumbnails of the steps that plot nothing (docs/_ext/thumbnails.py).
from thumbnails import write_thumbnails  # noqa: E402

write_thumbnails(DOCS / "_thumbnails")

#: Gallery scripts run at once: OPGUIDE_JOBS, default 2 (1 on a one-core machine).
GALLERY_JOBS = int(os.environ.get("OPGUIDE_JOBS", min(2, os.cpu_count() or 1)))

sphinx_gallery_conf = {
    # Part I, "Add an operator" (part1_src/), then Part II, "Make it fast and
    # ship it" (examples_src/): two galleries, each with its own index page.
    "examples_dirs": [str(ROOT / "part1_src"), str(ROOT / "examples_src")],
    "gallery_dirs": ["auto_part1", "auto_examples"],
    # Run every numbered step, every build: a stale page would hide a broken kernel.
    "filename_pattern": r"/\d\d_",
    # A program that a step shows and launches (torchrun), not a page.
    "ignore_pattern": r"__init__\.py|_worker\.py$",
    # OPGUIDE_DOCS_GO_ON=1: a build that goes on from a stopped one runs only
    # the steps whose page this build tree does not hold yet for the same
    # script (each finished step's page stores the hash of its script).
    "run_stale_examples": os.environ.get("OPGUIDE_DOCS_GO_ON") != "1",
    # Scripts run GALLERY_JOBS at a time, in worker processes (most of their
    # time is spent compiling on one core); the few that time kernels on the
    # CPU say `# sphinx_gallery_parallel = False` and run first, alone.
    "parallel": GALLERY_JOBS,
    "abort_on_example_error": False,
    "only_warn_on_example_error": False,
    "within_subsection_order": "FileNameSortKey",
    "remove_config_comments": True,
    "download_all_examples": False,
    "image_scrapers": ("matplotlib",),
    "matplotlib_animations": False,
    "show_memory": False,
    "min_reported_time": 1,
    # No page of run times: nothing links to it, and its table loads
    # jQuery/DataTables from a CDN, which an offline reader cannot reach.
    "write_computation_times": False,
}

# The scripts that take longest start first (guidekit.gallery_runs.LONGEST_FIRST):
# the pool then ends with short scripts on both processes instead of one long
# script on one of them. Only the order in which they run changes;
# sphinx-gallery lists them in file order.
from guidekit.gallery_runs import LONGEST_FIRST  # noqa: E402

_unknown = [n for n in LONGEST_FIRST if not (ROOT / "examples_src" / n).is_file()]
if _unknown:
    raise RuntimeError(f"guidekit.gallery_runs.LONGEST_FIRST names no gallery script: {_unknown}")


def _longest_first_split():
    """Orders sphinx-gallery's parallel scripts by :data:`LONGEST_FIRST`, then file order.

    sphinx-gallery runs the parallel scripts in the order of its
    ``_split_parallel`` helper; where a release has no such helper, the
    scripts run in file order, as without this.
    """
    from sphinx_gallery import gen_rst

    split = getattr(gen_rst, "_split_parallel", None)
    if split is None:
        return

    def longest_first(*args, **kwargs):
        serial, parallel = split(*args, **kwargs)
        rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
        return serial, sorted(parallel, key=lambda f: rank.get(f, len(rank)))

    gen_rst._split_parallel = longest_first


_longest_first_split()

# -- Cross references ---------------------------------------------------------
autodoc_typehints = "description"
autodoc_member_order = "bysource"
# Defaults as written in the source (``sync=lambda: None``), not their repr.
autodoc_preserve_defaults = True
napoleon_google_docstring = True


def _write_inventory(listing: Path, target: Path, project_name: str) -> str:
    """Writes a Sphinx objects.inv from a committed plain-text listing.

    The build machines reach no documentation host, so intersphinx reads small
    inventories generated from docs/_inventories/*.txt (``name role uri``
    per line, uri relative to the project's docs root) instead of fetching
    the real ones. Links still point at the real online pages.
    """
    lines = []
    for raw in listing.read_text().splitlines():
        raw = raw.strip()
        if raw and not raw.startswith("#"):
            name, role, uri = raw.split()
            lines.append(f"{name} {role} 1 {uri} -")
    header = (
        "# Sphinx inventory version 2\n"
        f"# Project: {project_name}\n# Version: stable\n"
        "# The remainder of this file is compressed using zlib.\n"
    )
    target.write_bytes(header.encode() + zlib.compress(("\n".join(lines) + "\n").encode()))
    return str(target)


_INV = DOCS / "_inventories"
intersphinx_mapping = {
    "python": (
        "https://docs.python.org/3",
        _write_inventory(_INV / "python.txt", _INV / "python.inv", "Python"),
    ),
    "torch": (
        "https://docs.pytorch.org/docs/stable",
        _write_inventory(_INV / "torch.txt", _INV / "torch.inv", "PyTorch"),
    ),
}

# -- HTML -----------------------------------------------------------------------
# The published site's address, where there is one: the download notebooks'
# links to the site's pages are absolute to it; without it they are left out
# (a relative link breaks once the notebook is downloaded).
html_baseurl = os.environ.get("OPGUIDE_SITE_URL", "")
html_theme = "furo"
html_title = "opguide"
html_static_path = ["_static"]
html_css_files = ["opguide.css"]
templates_path = []
copybutton_prompt_text = r">>> |\.\.\. |\$ "
copybutton_prompt_is_regexp = True

sys.path.insert(0, str(ROOT))


def _always_rerun_notebooks(app, env, added, changed, removed):
    """Marks every notebook page as outdated, so that myst-nb executes it on
    every build: an unchanged page would otherwise keep the outputs of an
    earlier build even after a kernel it calls was broken."""
    return [name for name in env.found_docs if name.startswith("tutorials/")]


def _record_gallery_runs(app, exception):
    """Writes which gallery scripts ran to the end (guidekit.gallery_runs), after a good build."""
    if exception is not None:
        return
    from guidekit import gallery_runs

    conf = app.config.sphinx_gallery_conf
    if conf.get("failing_examples"):
        return
    gallery_runs.write(
        [Path(p).name for p in conf.get("passing_examples", [])], at_start=_GALLERY_KEY[0]
    )


_GALLERY_KEY: list = []


def _gallery_key_at_start(app):
    """guidekit.gallery_runs.key() before any script runs (a script may set variables)."""
    from guidekit import gallery_runs

    _GALLERY_KEY.append(gallery_runs.key())


def setup(app):
    app.connect("env-get-outdated", _always_rerun_notebooks)
    # After sphinx-gallery's own build-finished handler, which fails the build
    # on a failing script.
    app.connect("builder-inited", _gallery_key_at_start, priority=100)
    app.connect("build-finished", _record_gallery_runs, priority=900)
