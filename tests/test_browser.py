"""The built site in a real browser: headless Chromium, driven through Selenium.

Every page of ``docs/_build/html`` is opened as a reader opens it (from disk,
with no network), and must:

* log no console error, which includes every request that failed (a missing
  image, script or style sheet, or one that needs the network);
* show every image, loaded and with a size;
* link only to pages and anchors that exist (internal links; external ones
  are not followed);
* render its math: a page whose source has math carries MathJax's output;
* show no code block (or inline code) with a marker comment or an en-dash,
  which is what ``--`` becomes when typography runs over a command line;
* need no sideways scrolling: in a 1280px window no ``pre`` block (code,
  program output, included file) is wider than its box, and in a 420px
  window (a phone) no table is wider than its container or sticks out of the
  page. No table may rely on a scrolling wrapper: on a phone its thin
  scrollbar is the only sign that columns are hidden.

The checks live in :class:`SiteCheck` and :func:`sideways`;
``test_the_checks_catch_a_broken_page`` feeds them a page with a missing image
and a dangling anchor, ``test_the_width_check_catches_wide_blocks`` one with a
code line and a table too wide for it, so that a check that could not fail
would show. Skipped, saying why, when the site is not
built or Selenium, Chromium or chromedriver is missing (``.ci/run`` installs
Debian's ``chromium`` and ``chromium-driver``; the README lists them).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from urllib.parse import unquote, urldefrag, urlparse

import pytest

# The site, its pages and the marker-comment pattern, as test_site.py reads them.
from test_site import MARKER, SITE, pages


def _browser_binary() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def _skip_reason() -> str | None:
    if not (SITE / "index.html").is_file():
        return "the site is not built (run the README's docs command first)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (it is in the 'test' extra)"
    if _browser_binary() is None:
        return "no Chromium on PATH (Debian: apt-get install chromium)"
    if shutil.which("chromedriver") is None:
        return "no chromedriver on PATH (Debian: apt-get install chromium-driver)"
    return None


SKIP_REASON = _skip_reason()
pytestmark = pytest.mark.skipif(SKIP_REASON is not None, reason=str(SKIP_REASON))


@pytest.fixture(scope="module")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = _browser_binary()
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    # An explicit chromedriver: Selenium would otherwise try to download one.
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def open_page(driver, page: Path, timeout: float = 60) -> None:
    """Opens ``page`` and returns once Chromium shows it, fully loaded.

    ``driver.get`` can return while the window still shows the page before
    (seen on a loaded machine), and a check that read it then would report
    that page's links and ids as this one's. So this waits, in the page, until
    the document is ``page`` itself and its load event has fired.

    Raises:
        selenium.common.exceptions.TimeoutException: not shown in ``timeout`` s.
    """
    from selenium.webdriver.support.ui import WebDriverWait

    url = page.as_uri()
    driver.get(url)
    WebDriverWait(driver, timeout).until(
        lambda d: d.execute_script(
            "return document.readyState === 'complete' && "
            "location.href.split('#')[0] === arguments[0];",
            url,
        )
    )


# What a loaded page reports about itself, read in the page.
PAGE_FACTS_JS = """
const done = arguments[arguments.length - 1];
const facts = () => ({
  ids: Array.from(document.querySelectorAll('[id], a[name]')).map(e => e.id || e.name),
  links: Array.from(document.querySelectorAll('a[href]')).map(a => a.href),
  broken_images: Array.from(document.images)
      .filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src),
  has_math: document.querySelector('.math, div.math, span.math') !== null,
  mathjax: document.querySelector('mjx-container') !== null,
  code: Array.from(document.querySelectorAll('pre, code')).map(e => e.innerText),
});
// MathJax typesets after the load event; give it a moment when the page has math.
const start = Date.now();
(function wait() {
  const f = facts();
  if (!f.has_math || f.mathjax || Date.now() - start > 10000) { done(f); return; }
  setTimeout(wait, 100);
})();
"""


class SiteCheck:
    """Reads pages in the browser and collects what is wrong with them.

    Links to other pages are checked against the files at once; their
    ``#fragment`` anchors once the target page was read too (:meth:`anchors`).
    """

    def __init__(self, driver, site: Path):
        self.driver, self.site = driver, site
        self.ids: dict[Path, set[str]] = {}  # page -> the ids of its elements
        self.wanted: dict[Path, set[tuple[Path, str]]] = {}  # page -> (from, fragment)

    def read(self, page: Path) -> list[str]:
        """Opens ``page`` and returns its problems, one line each."""
        self.driver.get_log("browser")  # drop what an earlier page logged
        open_page(self.driver, page)
        facts = self.driver.execute_async_script(PAGE_FACTS_JS)
        problems = [
            f"console error: {entry['message']}"
            for entry in self.driver.get_log("browser")
            if entry["level"] == "SEVERE"
        ]
        problems += [f"image does not load: {src}" for src in facts["broken_images"]]
        if facts["has_math"] and not facts["mathjax"]:
            problems.append("math on the page, but no MathJax output")
        for text in facts["code"]:
            dashed = [line.strip() for line in text.splitlines() if "\u2013" in line]
            problems += [f"en-dash in code: {line[:80]!r}" for line in dashed[:1]]
            marker = MARKER.search(text)
            if marker:
                problems.append(f"marker comment in code: {marker.group(0).strip()!r}")
        self.ids[page] = set(facts["ids"])
        for href in facts["links"]:
            url, fragment = urldefrag(href)
            parsed = urlparse(url)
            if parsed.scheme != "file":
                continue  # external: not followed
            target = Path(unquote(parsed.path))
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                problems.append(f"link to a missing file: {href}")
            elif fragment and target.suffix == ".html":
                self.wanted.setdefault(target, set()).add((page, unquote(fragment)))
        return [f"{self.name(page)}: {p}" for p in problems]

    def anchors(self) -> list[str]:
        """Links whose fragment names no element of their page (reading pages not yet read)."""
        problems = []
        for target, wanted in sorted(self.wanted.items()):
            if target not in self.ids:
                problems += self.read(target)
            for page, fragment in sorted(wanted):
                if fragment not in self.ids[target]:
                    problems.append(
                        f"{self.name(page)}: anchor #{fragment} not found in {self.name(target)}"
                    )
        return problems

    def name(self, page: Path) -> str:
        return str(page.relative_to(self.site)) if page.is_relative_to(self.site) else str(page)


# The window widths of the width check: a laptop for code blocks, a phone for tables.
LAPTOP, PHONE = 1280, 420

# Blocks of a loaded page that need sideways scrolling (and program output
# that needs scrolling at all), read in the page.
# Dropdowns are opened first, so that the blocks inside them are measured too.
SIDEWAYS_JS = """
const [checkPre, checkTables] = arguments;
document.querySelectorAll('details').forEach(d => { d.open = true; });
const right = document.documentElement.clientWidth + 1;  // the window, less its scrollbar
const out = [];
if (checkPre) {
  document.querySelectorAll('pre').forEach((p, i) => {
    if (p.scrollWidth > p.clientWidth + 1 || p.getBoundingClientRect().right > right) {
      const caption = p.closest('.literal-block-wrapper')?.querySelector('.caption-text');
      out.push(`pre block ${i}` + (caption ? ` (${caption.innerText})` : '') +
               ` scrolls sideways (${p.scrollWidth}px of text in ${p.clientWidth}px): ` +
               JSON.stringify(p.innerText.slice(0, 80)));
    }
    if (p.closest('.sphx-glr-script-out') && p.scrollHeight > p.clientHeight + 1) {
      out.push(`output block ${i} scrolls up and down (${p.scrollHeight}px of text in ` +
               `${p.clientHeight}px): ` + JSON.stringify(p.innerText.slice(0, 80)));
    }
  });
}
if (checkTables) {
  document.querySelectorAll('table').forEach((t, i) => {
    const box = t.parentElement.clientWidth;
    if (t.offsetWidth > box + 1 || t.getBoundingClientRect().right > right) {
      out.push(`table ${i} is ${t.offsetWidth}px wide in ${box}px: ` +
               JSON.stringify(t.innerText.replace(/\\s+/g, ' ').slice(0, 80)));
    }
  });
}
return out;
"""


def sideways(driver, page: Path, site: Path) -> list[str]:
    """The blocks of ``page`` a reader would have to scroll sideways to read.

    At :data:`LAPTOP` width every ``pre`` block must fit its box; at
    :data:`PHONE` width every table must fit its container and the page.

    Args:
        driver: a Selenium driver of Chromium.
        page: the HTML file to open.
        site: the site's root, for the page names in the problems.

    Returns:
        One line per block, naming the page, the width, the block's index
        among the page's blocks of its kind and the start of its text.
    """
    driver.set_window_size(LAPTOP, 900)
    open_page(driver, page)
    return sideways_of_open_page(driver, page, site)


def sideways_of_open_page(driver, page: Path, site: Path) -> list[str]:
    """:func:`sideways` of ``page``, which the window shows, loaded, at :data:`LAPTOP` width."""
    problems = []
    name = page.relative_to(site) if page.is_relative_to(site) else page
    for width, pre, tables in ((LAPTOP, True, False), (PHONE, False, True)):
        # The page is loaded once; narrowing the window re-applies the style
        # sheets' media queries, and reading a block's size lays it out anew.
        driver.set_window_size(width, 900)
        problems += [
            f"{name} at {width}px: {p}" for p in driver.execute_script(SIDEWAYS_JS, pre, tables)
        ]
    return problems


@pytest.fixture(scope="module")
def site_read(browser):
    """Every page of the site, each opened once at :data:`LAPTOP` width and read by both checks.

    Returns:
        The pages, :class:`SiteCheck`'s problems (anchors included) and
        :func:`sideways`'s problems.
    """
    size = browser.get_window_size()
    check = SiteCheck(browser, SITE)
    read, loads, widths = pages(), [], []
    try:
        for page in read:
            browser.set_window_size(LAPTOP, 900)
            loads += check.read(page)  # first: the width check opens the page's dropdowns
            widths += sideways_of_open_page(browser, page, SITE)
    finally:
        browser.set_window_size(size["width"], size["height"])
    return read, loads + check.anchors(), widths


def test_every_page_loads_clean_in_chromium(site_read):
    read, problems, _ = site_read
    print(f"{len(read)} pages read in Chromium")
    assert not problems, "\n".join(problems)


def test_the_checks_catch_a_broken_page(browser, tmp_path):
    # A copy of the site whose landing page gains a missing image and a link
    # to an anchor that does not exist: the checks must report both.
    site = tmp_path / "site"
    shutil.copytree(SITE, site, ignore=shutil.ignore_patterns(".doctrees", "_sources"))
    index = site / "index.html"
    index.write_text(
        index.read_text().replace(
            "</body>",
            '<img src="_images/no-such-image.png" alt="missing">'
            '<a href="index.html#no-such-anchor">dangling</a></body>',
        )
    )
    check = SiteCheck(browser, site)
    problems = check.read(index) + check.anchors()
    assert any("no-such-image.png" in p for p in problems), problems
    assert any("anchor #no-such-anchor not found" in p for p in problems), problems


def test_nothing_needs_sideways_scrolling(site_read):
    read, _, problems = site_read
    print(f"{len(read)} pages read at {LAPTOP}px and {PHONE}px")
    assert not problems, "\n".join(problems)


def test_the_width_check_catches_wide_blocks(browser, tmp_path):
    # The landing page with the site's style sheets (through <base>), plus a
    # code line of 200 columns and a table of 20 numeric columns: the width
    # check must report both.
    text = (SITE / "index.html").read_text()
    code = "x = " + " + ".join(["1"] * 66)
    cells = "".join(f"<td>{i}.12345</td>" for i in range(20))
    wide = (
        f'<div class="highlight-python notranslate"><div class="highlight"><pre>{code}</pre>'
        f'</div></div><table class="docutils"><tbody><tr>{cells}</tr></tbody></table>'
    )
    page = tmp_path / "index.html"
    page.write_text(
        text.replace("<head>", f'<head><base href="{SITE.as_uri()}/">', 1).replace(
            "</article>", wide + "</article>", 1
        )
    )
    size = browser.get_window_size()
    try:
        problems = sideways(browser, page, tmp_path)
    finally:
        browser.set_window_size(size["width"], size["height"])
    assert any("at 1280px: pre block" in p and code[:40] in p for p in problems), problems
    assert any("at 420px: table" in p and "0.12345" in p for p in problems), problems
