"""Whether two versions of a source file differ in their comments only.

A record measured code, not prose: a comment that changes in a kernel's
source changes no instruction the record timed. ``tools/stamp_records.py
--same-code-since REV`` uses :func:`same_code` to carry a record's stamp over
such a change, and only over such a change: every file that differs must
have the same code as at ``REV``, compared as follows.

* Python (``.py``): the syntax trees, docstrings removed, are equal
  (comments and line breaks are not in the tree).
* C, C++ and CUDA (``.h``, ``.cuh``, ``.cu``, ``.cpp``, ``.c``): with ``//``
  and ``/* */`` comments removed (not inside string or character literals),
  the same non-empty lines, each with its runs of spaces made one. Code that
  only moved to another line counts as changed: this errs on the side of a
  stale record.
* A patch (``.patch``, the kernel variants of ``tools/variants/``): the same
  files and the same removed and added lines, in order; its context lines
  and hunk positions follow the sources, which are compared on their own.
* Anything else: byte for byte.
"""

from __future__ import annotations

import ast
import re

C_SUFFIXES = (".h", ".cuh", ".cu", ".cpp", ".c", ".hpp")

_C_TOKENS = re.compile(
    r'"(?:\\.|[^"\\\n])*"'  # a string literal
    r"|'(?:\\.|[^'\\\n])*'"  # a character literal
    r"|//[^\n]*"  # a line comment
    r"|/\*.*?\*/",  # a block comment
    re.S,
)


def strip_c_comments(text: str) -> list[str]:
    """The lines of C/C++/CUDA ``text`` without comments: stripped, spaces collapsed, none empty."""

    def keep_literals(m: re.Match) -> str:
        token = m.group(0)
        if token.startswith("//"):
            return ""
        if token.startswith("/*"):
            return "\n" * token.count("\n") or " "  # keep the line structure
        return token

    code = _C_TOKENS.sub(keep_literals, text)
    lines = (re.sub(r"\s+", " ", line).strip() for line in code.splitlines())
    return [line for line in lines if line]


def _python_tree(text: str) -> str:
    tree = ast.parse(text)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree)


def patch_changes(text: str) -> list[str]:
    """A patch's file names and its removed and added lines, in order (no context)."""
    return [line for line in text.splitlines() if line[:1] in "+-"]


def same_code(path: str, before: bytes, after: bytes) -> bool:
    """Whether ``after`` is ``before`` with only comments (and docstrings) changed.

    Args:
        path: the file's name (its suffix picks the language).
        before, after: the two versions' contents.
    """
    if before == after:
        return True
    try:
        old, new = before.decode(), after.decode()
    except UnicodeDecodeError:
        return False
    if path.endswith(".py"):
        try:
            return _python_tree(old) == _python_tree(new)
        except SyntaxError:
            return False
    if path.endswith(".patch"):
        return patch_changes(old) == patch_changes(new)
    if path.endswith(C_SUFFIXES):
        return strip_c_comments(old) == strip_c_comments(new)
    return False
