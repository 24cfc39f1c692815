"""Markdown for the notebooks that sphinx-gallery offers for download.

sphinx-gallery turns a script's reST text into Markdown with a few regular
expressions (``sphinx_gallery.notebook.rst2md``: headings, math, links, notes
and plain code blocks). The rest of reST it leaves as it is, and Jupyter would
show it as raw text. :func:`to_markdown` converts what is left in one cell:

* a role (``:func:`torch.compile```, ``:doc:`step 8 <08_autograd>```) becomes a
  link where ``link`` knows its target, else inline code;
* ``literalinclude`` becomes a fenced block holding the text that ``include``
  reads, under its caption;
* ``list-table`` becomes a Markdown table;
* an admonition (``tip``, ``seealso``, ...) becomes a quote under its title,
  ``code-block`` a fenced block, ``math`` a display formula, and any other
  directive (``dropdown``, ``tab-item``, ...) its title in bold over its body;
  directives that only configure Sphinx (``currentmodule``), and comments,
  disappear;
* a paragraph that ends in ``::`` and its indented block become a paragraph
  that ends in ``:`` and a fenced block.

Text inside fenced code blocks and inline literals is left as it is.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Callable

#: ``link(domain, role, target)``: ``(url, title)`` of a role's target, or None
#: when it is unknown; ``title`` is the target's own title (a page's), or None;
#: ``url`` is None for a target known but not to be linked (a page of a site
#: with no published address: a relative link breaks in a download).
Link = Callable[[str, str, str], "tuple[str, str | None] | None"]
#: ``include(argument, options)``: ``(language, text)`` that a literalinclude shows.
Include = Callable[[str, "dict[str, str]"], "tuple[str, str]"]

DIRECTIVE = re.compile(
    r"^(?P<indent>[ \t]*)\.\. (?P<name>[A-Za-z][\w-]*(?::[\w-]+)?)::(?:[ \t]+(?P<arg>.*))?$"
)
OPTION = re.compile(r"^[ \t]+:(?P<key>[\w-]+):(?:[ \t]+(?P<value>.*))?$")
COMMENT = re.compile(r"^(?P<indent>[ \t]*)\.\.(?:[ \t]|$)")
FENCE = re.compile(r"^[ \t]*(?P<fence>`{3,}|~{3,})")
# A role outside an inline literal (``x``): reST's :func:`x` or :py:func:`x`,
# or MyST's {func}`x` (in the MyST notebooks).
ROLE = re.compile(
    r"(?P<literal>``.+?``)"
    r"|(?<![\w`:]):(?:(?P<domain>[a-z][\w-]*):)?(?P<role>[a-z][\w-]*):`(?P<content>[^`]+)`(?!`)"
    r"|(?<![\w`])\{(?:(?P<mdomain>[a-z][\w-]*):)?(?P<mrole>[a-z][\w-]*)\}"
    r"`(?P<mcontent>[^`]+)`(?!`)",
    re.DOTALL,
)
EXPLICIT = re.compile(r"^(?P<title>.*?)\s*<(?P<target>[^<>]+)>$", re.DOTALL)
# sphinx-gallery turns reST's `title <url>`_ into [title](url), and leaves one
# "_" of an anonymous link's "__" behind it: [title](url)_.
LINK_TAIL = re.compile(r"(?P<link>\]\([^()\s]+\))_(?!\w)")

ADMONITIONS = {
    "attention": "Attention",
    "caution": "Caution",
    "danger": "Danger",
    "error": "Error",
    "hint": "Hint",
    "important": "Important",
    "note": "Note",
    "seealso": "See also",
    "tip": "Tip",
    "warning": "Warning",
}
CODE = {"code-block", "code", "sourcecode", "code-cell"}
# Directives that configure Sphinx and show nothing themselves.
SILENT = {
    "currentmodule",
    "module",
    "highlight",
    "default-role",
    "default-domain",
    "index",
    "meta",
    "rst-class",
    "tags",
    "sectionauthor",
    "codeauthor",
    "toctree",
    "minigallery",
}
# Roles whose text Sphinx shows as code; the others show as text.
TEXT_ROLES = {"doc", "ref", "term", "abbr", "dfn", "emphasis", "strong", "title-reference"}
# Roles that Sphinx shows with "()" after a name without an explicit title.
CALL_ROLES = {"func", "meth"}


def _body_end(lines: list[str], start: int, indent: str) -> int:
    """Index just past the indented block that belongs to line ``start``."""
    end = start + 1
    while end < len(lines):
        line = lines[end]
        if line.strip() and not line.startswith((indent + " ", indent + "\t")):
            break
        end += 1
    while end > start + 1 and not lines[end - 1].strip():
        end -= 1
    return end


def _past_blank(lines: list[str], end: int, out: list[str]) -> int:
    """Where to go on after a block that shows nothing: past one blank line, when
    the output already ends in one (or is empty), so none is left where it stood."""
    if (not out or not out[-1].strip()) and end < len(lines) and not lines[end].strip():
        return end + 1
    return end


def _fenced(code: str, language: str = "", indent: str = "") -> list[str]:
    """A fenced code block holding ``code``, its fence longer than any run of backticks in it."""
    longest = max((len(run) for run in re.findall(r"`+", code)), default=0)
    fence = "`" * max(3, longest + 1)
    body = [indent + line if line else line for line in code.rstrip("\n").split("\n")]
    return [f"{indent}{fence}{language}", *body, f"{indent}{fence}"]


def _indented(text: str, indent: str) -> list[str]:
    return [indent + line if line else line for line in text.split("\n")]


def _split_cells(body: str) -> list[list[str]]:
    """The rows of a ``list-table`` body, each a list of its cells' text."""
    rows: list[list[list[str]]] = []
    for line in body.split("\n"):
        row = re.match(r"^[*-][ \t]+[*-](?:[ \t]+(?P<text>.*))?$", line)
        cell = re.match(r"^[ \t]{1,3}[*-](?:[ \t]+(?P<text>.*))?$", line)
        if row:
            rows.append([[row["text"] or ""]])
        elif cell and rows:
            rows[-1].append([cell["text"] or ""])
        elif rows and line.strip():
            rows[-1][-1].append(line.strip())
    return [[" ".join(" ".join(cell).split()) for cell in row] for row in rows]


def _table(title: str, options: dict[str, str], body: str) -> list[str]:
    """A Markdown table from a ``list-table`` directive's title, options and body."""
    rows = _split_cells(body)
    if not rows:
        return []
    width = max(len(row) for row in rows)
    rows = [[cell.replace("|", r"\|") for cell in row] + [""] * (width - len(row)) for row in rows]
    header_rows = int(options.get("header-rows", "0") or 0)
    header = rows[0] if header_rows else [""] * width
    rest = rows[1:] if header_rows else rows
    out = [f"**{title}**", ""] if title else []
    out.append("| " + " | ".join(header) + " |")
    out.append("|" + "|".join(" --- " for _ in header) + "|")
    # Further header rows become bold body rows (Markdown tables have one header).
    for i, row in enumerate(rest):
        cells = [f"**{c}**" if c and i < header_rows - 1 else c for c in row]
        out.append("| " + " | ".join(cells) + " |")
    return out


def _directive(
    name: str, arg: str, options: dict[str, str], body: str, include: Include | None
) -> list[str] | None:
    """Markdown lines (unindented) for one directive; None when it shows nothing."""
    short = name.split(":")[-1]
    if short in SILENT:
        return None
    if short == "literalinclude":
        if include is None:
            return [f"`{arg}`"]
        language, code = include(arg, options)
        caption = options.get("caption")
        return ([f"`{caption}`:", ""] if caption else []) + _fenced(code, language)
    if short in CODE:
        caption = options.get("caption")
        language = arg.split()[0] if arg else ""
        return ([f"`{caption}`:", ""] if caption else []) + _fenced(body, language)
    if short == "list-table":
        return _table(arg, options, body)
    if short == "math":
        return ["$$", "\n".join(filter(None, [arg, body])).strip(), "$$"]
    if short == "raw":
        return body.split("\n") if "html" in arg.split() else None
    if short in ("image", "figure"):
        image = f"![{options.get('alt', '')}]({arg})"
        return [image] + (["", *body.split("\n")] if body.strip() else [])
    if short in ADMONITIONS or short == "admonition":
        title = arg if short == "admonition" else ADMONITIONS[short]
        text = body if short == "admonition" else "\n".join(filter(None, [arg, body]))
        quoted = [f"> {line}" if line else ">" for line in text.split("\n")]
        return [f"> **{title}**", ">", *quoted]
    return ([f"**{arg}**", ""] if arg else []) + body.split("\n")


def _directives(text: str, include: Include | None) -> str:
    """``text`` with every directive, comment and ``::`` block converted (see the module)."""
    lines = text.split("\n")
    out: list[str] = []
    fence = None
    i = 0
    while i < len(lines):
        line = lines[i]
        opened = FENCE.match(line)
        if fence is not None or opened:
            out.append(line)
            if fence is None:
                fence = opened["fence"]
            elif opened and opened["fence"][0] == fence[0] and len(opened["fence"]) >= len(fence):
                if not line.strip().strip(fence[0]):
                    fence = None
            i += 1
            continue
        found = DIRECTIVE.match(line)
        if found:
            indent, name = found["indent"], found["name"]
            arg_lines = [found["arg"] or ""]
            end = _body_end(lines, i, indent)
            j = i + 1
            while j < end and lines[j].strip() and not OPTION.match(lines[j]):
                arg_lines.append(lines[j].strip())  # an argument that goes on
                j += 1
            options: dict[str, str] = {}
            while j < end and OPTION.match(lines[j]):
                option = OPTION.match(lines[j])
                options[option["key"]] = (option["value"] or "").strip()
                j += 1
            arg = " ".join(" ".join(arg_lines).split())
            body = textwrap.dedent("\n".join(lines[j:end])).strip("\n")
            if name.split(":")[-1] not in CODE | {"literalinclude", "raw", "math"}:
                body = _directives(body, include)  # directives inside it
            converted = _directive(name, arg, options, body, include)
            if converted is not None:
                out += _indented("\n".join(converted), indent)
            else:
                end = _past_blank(lines, end, out)
            i = end
            continue
        if COMMENT.match(line) and not re.match(r"^[ \t]*\.\. _", line):
            end = _body_end(lines, i, COMMENT.match(line)["indent"])  # a comment
            i = _past_blank(lines, end, out)
            continue
        literal = re.match(r"^(?P<indent>[ \t]*)(?P<text>.*?)[ \t]*::$", line)
        if literal and i + 2 < len(lines) and not lines[i + 1].strip():
            indent = literal["indent"]
            end = _body_end(lines, i, indent)
            if end > i + 2:
                text = literal["text"]
                if text:
                    out += [f"{indent}{text}{'' if text.endswith(':') else ':'}", ""]
                out += _fenced(textwrap.dedent("\n".join(lines[i + 2 : end])), "", indent)
                i = end
                continue
        out.append(line)
        i += 1
    return "\n".join(out)


def _role(match: re.Match, link: Link | None) -> str:
    """Markdown for one role (or an inline literal, left as it is)."""
    if match["literal"]:
        return match[0]
    domain = match["domain"] or match["mdomain"] or ""
    role, raw = match["role"] or match["mrole"], match["content"] or match["mcontent"]
    content = " ".join(raw.split())
    explicit = EXPLICIT.match(content)
    title, target = (explicit["title"], explicit["target"]) if explicit else (None, content)
    as_code = role not in TEXT_ROLES
    if role == "math":
        return f"${raw}$"
    if role == "download":
        return f"`{title or target}`"
    resolved = None
    if not target.startswith("!") and link is not None:
        resolved = link(domain, role, target.lstrip("~"))
    if title is None:
        title = target.lstrip("!")
        if title.startswith("~"):
            title = title[1:].rsplit(".", 1)[-1]
        if role in CALL_ROLES and not title.endswith(")"):
            title += "()"
        if resolved and resolved[1] and not as_code:
            title = resolved[1]
    if resolved is None:
        return f"`{title}`"
    if resolved[0] is None:
        return f"`{title}`" if as_code else title
    label = f"`{title}`" if as_code else title.replace("[", r"\[").replace("]", r"\]")
    return f"[{label}]({resolved[0]})"


def _prose(lines: list[str], link: Link | None) -> str:
    """Lines of prose (no fenced code) with their roles and link tails converted."""
    text = ROLE.sub(lambda m: _role(m, link), "\n".join(lines))
    return LINK_TAIL.sub(r"\g<link>", text)


def _roles(text: str, link: Link | None) -> str:
    """``text`` with every role outside fenced code blocks converted."""
    out: list[str] = []
    prose: list[str] = []
    fence = None
    for line in text.split("\n"):
        opened = FENCE.match(line)
        if fence is None and opened:
            fence = opened["fence"]
            out.append(_prose(prose, link))
            prose = []
            out.append(line)
        elif fence is not None:
            out.append(line)
            closing = opened and opened["fence"][0] == fence[0]
            if closing and len(opened["fence"]) >= len(fence) and not line.strip().strip(fence[0]):
                fence = None
        else:
            prose.append(line)
    out.append(_prose(prose, link))
    return "\n".join(part for part in out)


def to_markdown(text: str, link: Link | None = None, include: Include | None = None) -> str:
    """One notebook cell's Markdown with the reST that sphinx-gallery left in it converted.

    Args:
        text: the cell's source, as sphinx-gallery wrote it.
        link: resolves a role's target to ``(url, title)``, or None when unknown;
            without it every role becomes inline code.
        include: reads what a ``literalinclude`` shows; without it the
            directive becomes its file name in inline code.

    Returns:
        The cell's source in Markdown.
    """
    return _roles(_directives(text, include), link)


def leftover_rest(text: str) -> list[str]:
    """The reST (and MyST) roles and reST directive lines left in Markdown ``text``.

    Args:
        text: a notebook cell's Markdown.

    Returns:
        Each role (``:func:`x```, ``{doc}`x```) and directive line
        (``.. note::``) found outside fenced code blocks and inline literals.
    """
    found = []
    prose, fence = [], None
    for line in text.split("\n"):
        opened = FENCE.match(line)
        if fence is None and opened:
            fence = opened["fence"]
        elif fence is not None:
            closing = opened and opened["fence"][0] == fence[0]
            if closing and len(opened["fence"]) >= len(fence) and not line.strip().strip(fence[0]):
                fence = None
        else:
            prose.append(line)
    outside = re.sub(r"``.+?``", "", "\n".join(prose), flags=re.DOTALL)
    found += re.findall(r":[a-z][\w-]*:`[^`\n]*`?|\{[a-z][\w:-]*\}`[^`\n]*`?", outside)
    found += [m.strip() for m in re.findall(r"^[ \t]*\.\. [A-Za-z][\w:-]*::.*$", outside, re.M)]
    found += [m["link"] + "_" for m in LINK_TAIL.finditer(outside)]
    return found
