"""A source file's code, without its comments: what a record's hash of it covers.

A record measured code, not prose: a comment that changes in a kernel's
source changes no instruction the record timed. :func:`code` gives the part
of a file that a record's stored hash covers:

* Python (``.py``): the syntax tree, docstrings removed (comments and line
  breaks are not in the tree), written out by :func:`_tree` the same way on
  every Python version;
* C, C++ and CUDA (``.h``, ``.cuh``, ``.cu``, ``.cpp``, ``.c``): the lines
  without ``//`` and ``/* */`` comments (not inside string or character
  literals), each stripped with its runs of spaces made one, empty lines
  left out. Code that only moved to another line counts as changed: this
  errs on the side of a stale record;
* a patch (``.patch``, the kernel variants of ``tools/variants/``): its file
  names and its removed and added lines, in order; its context lines and hunk
  positions follow the sources, which are hashed on their own;
* shell scripts, TOML and YAML: the lines that are not ``#`` comments; in
  YAML also not a copier message (a top-level ``_message_...`` key and its
  lines), prose that copier prints to the reader and renders nothing;
* anything else: its bytes.
"""

from __future__ import annotations

import ast
import re

__all__ = ["code"]

C_SUFFIXES = (".h", ".cuh", ".cu", ".cpp", ".c", ".hpp")

_C_TOKENS = re.compile(
    r'"(?:\\.|[^"\\\n])*"'  # a string literal
    r"|'(?:\\.|[^'\\\n])*'"  # a character literal
    r"|//[^\n]*"  # a line comment
    r"|/\*.*?\*/",  # a block comment
    re.S,
)


def _c_lines(text: str) -> list[str]:
    def drop_comment(m: re.Match) -> str:
        token = m.group(0)
        if token.startswith("/*"):
            return "\n" * token.count("\n") or " "  # keep the line structure
        return "" if token.startswith("//") else token

    lines = (
        re.sub(r"\s+", " ", line).strip() for line in _C_TOKENS.sub(drop_comment, text).splitlines()
    )
    return [line for line in lines if line]


def _tree(node: object) -> str:
    """``ast.dump`` less empty fields, which Python versions write differently."""
    if isinstance(node, list):
        return "[" + ",".join(map(_tree, node)) + "]"
    if not isinstance(node, ast.AST):
        return repr(node)
    fields = ",".join(
        f"{name}={_tree(value)}"
        for name, value in ast.iter_fields(node)
        if value is not None and value != [] and name not in ("ctx", "type_comment", "kind")
    )
    return f"{type(node).__name__}({fields})"


def _python(text: str) -> str:
    tree = ast.parse(text)
    documented = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    for node in ast.walk(tree):
        if isinstance(node, documented) and ast.get_docstring(node, clean=False) is not None:
            node.body = node.body[1:] or [ast.Pass()]
    return _tree(tree)


def code(path: str, data: bytes) -> bytes:
    """The code of a file of the name ``path`` and the content ``data`` (see the module).

    A file that does not parse as its suffix says (a Python syntax error, bytes
    that are not UTF-8) is its bytes.
    """
    try:
        text = data.decode()
        if path.endswith(".py"):
            return _python(text).encode()
    except (UnicodeDecodeError, SyntaxError):
        return data
    if path.endswith(".patch"):
        lines = [line for line in text.splitlines() if line[:1] in "+-"]
    elif path.endswith(C_SUFFIXES):
        lines = _c_lines(text)
    elif path.endswith((".yml", ".yaml")):
        lines, message = [], False
        for line in text.splitlines():
            if line.lstrip().startswith("#"):
                continue
            if line.strip() and not line[0].isspace():  # a top-level key starts
                message = line.startswith("_message_")
            if not message:
                lines.append(line)
    elif path.endswith((".sh", ".toml")):
        lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    else:
        return data
    return "\n".join(lines).encode()
