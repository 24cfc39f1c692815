"""The site and its source archive tell the guide, not how the guide was made.

tests/history_words.txt lists, one regular expression a line, words that tell
the story of this project's own making; no page a reader sees and no file of
the source archive offered on the landing page may match one. These two files
are the guide's own checks of its prose: the archive leaves them out
(``ARCHIVE_SKIP`` in docs/_ext/opguide_docs.py), since they quote the words
they look for.
"""

from __future__ import annotations

import html
import re
import tarfile
from pathlib import Path

import pytest
from test_site import SITE, TAG, pages

ROOT = Path(__file__).resolve().parent.parent
HISTORY_WORDS = [
    re.compile(line.strip(), re.IGNORECASE)
    for line in (ROOT / "tests" / "history_words.txt").read_text().splitlines()
    if line.strip() and not line.startswith("#")
]
HIDDEN = re.compile(r"<(script|style)\b[^>]*>.*?</\1>", re.DOTALL | re.IGNORECASE)

needs_site = pytest.mark.skipif(
    not (SITE / "index.html").is_file(),
    reason="the site is not built (run the README's docs command first)",
)


def visible_text(page: Path) -> str:
    """A page's text as a reader sees it: no tags, scripts or style sheets."""
    return html.unescape(TAG.sub(" ", HIDDEN.sub(" ", page.read_text())))


def matches(text: str, where: str) -> list[str]:
    """Every history word in ``text``, with 40 characters either side."""
    found = []
    for word in HISTORY_WORDS:
        for match in word.finditer(text):
            around = " ".join(text[max(0, match.start() - 40) : match.end() + 40].split())
            found.append(f"{where}: {word.pattern!r} in '...{around}...'")
    return found


@needs_site
def test_no_development_history_on_pages():
    found = []
    for page in pages():
        if "_modules" in page.relative_to(SITE).parts:
            continue  # source listings of the Python modules, not prose
        found += matches(visible_text(page), str(page.relative_to(SITE)))
    assert not found, "\n".join(found)


@needs_site
def test_no_development_history_in_the_source_archive():
    archives = sorted((SITE / "_downloads").rglob("opguide-source.tar.gz"))
    assert archives, "no source archive among the downloads"
    found, read = [], 0
    with tarfile.open(archives[0]) as tar:
        for member in tar.getmembers():
            if not member.isfile():
                continue
            try:
                text = tar.extractfile(member).read().decode()
            except UnicodeDecodeError:
                continue  # images, wheels: no prose
            read += 1
            found += matches(text, member.name)
    assert read > 100, f"only {read} text files in the archive"
    assert not found, "\n".join(found)


def test_the_history_check_catches_a_word(tmp_path):
    # The checks above must fail on a page that tells a development story.
    page = tmp_path / "page.html"
    page.write_text("<html><body><p>As the lead engineer measured in round 3</p></body></html>")
    assert matches(visible_text(page), "page.html")
