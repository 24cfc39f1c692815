"""The Markdown of the download notebooks (docs/_ext/notebook_markdown.py), cell by cell.

The site's own notebooks are checked in tests/test_site.py once the site is
built; these cases run without it, on cells written the way sphinx-gallery
writes them.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "docs" / "_ext"))
from notebook_markdown import leftover_rest, to_markdown  # noqa: E402

#: A published site's address (docs/conf.py's ``html_baseurl``).
SITE = "https://opguide.example.org/"
TARGETS = {
    ("py", "func", "torch.library.custom_op"): (
        "https://docs.pytorch.org/docs/stable/library.html#torch.library.custom_op",
        None,
    ),
    ("py", "class", "torch.utils.cpp_extension.BuildExtension"): (
        "https://docs.pytorch.org/docs/stable/cpp_extension.html"
        "#torch.utils.cpp_extension.BuildExtension",
        None,
    ),
    ("std", "doc", "08_autograd"): (f"{SITE}auto_examples/08_autograd.html", "Step 8: Autograd"),
}


def link(domain: str, role: str, target: str):
    domain = domain or ("std" if role == "doc" else "py")
    return TARGETS.get((domain, role, target))


def include(arg: str, options: dict[str, str]) -> tuple[str, str]:
    return options.get("language", ""), f"// the text of {arg}\nint x = 1;  // ```\n"


@pytest.mark.parametrize(
    "rest, markdown",
    [
        (
            "with :func:`torch.library.custom_op`.",
            "with [`torch.library.custom_op()`]"
            "(https://docs.pytorch.org/docs/stable/library.html#torch.library.custom_op).",
        ),
        (
            "a :class:`~torch.utils.cpp_extension.BuildExtension`",
            "a [`BuildExtension`](https://docs.pytorch.org/docs/stable/cpp_extension.html"
            "#torch.utils.cpp_extension.BuildExtension)",
        ),
        ("see :doc:`08_autograd`", f"see [Step 8: Autograd]({SITE}auto_examples/08_autograd.html)"),
        (
            "see :doc:`step 8\n<08_autograd>` and",
            f"see [step 8]({SITE}auto_examples/08_autograd.html) and",
        ),
        ("an unknown :func:`torch.no_grad`", "an unknown `torch.no_grad()`"),
        ("an unknown :py:class:`~a.b.C` here", "an unknown `C` here"),
        ("an unlinked :func:`!torch.compile`", "an unlinked `torch.compile()`"),
        ("an unknown page :doc:`/nowhere`", "an unknown page `/nowhere`"),
        ("MyST: {func}`torch.library.custom_op`", "MyST: [`torch.library.custom_op()`]"),
        ("a literal ``:func:`x``` stays", "a literal ``:func:`x``` stays"),
    ],
)
def test_roles_become_links_or_inline_code(rest, markdown):
    converted = to_markdown(rest, link, include)
    assert converted.startswith(markdown), converted
    assert converted == to_markdown(converted, link, include), "a second pass changes the cell"


def test_site_pages_unlinked_without_a_published_address():
    """With no ``html_baseurl``, the linker knows a page but gives no URL: no relative link."""

    def site(domain, role, target):  # as the linker resolves a page with no address
        found = link(domain, role, target)
        return (None, found[1]) if found and found[0].startswith(SITE) else found

    converted = to_markdown(
        "see :doc:`08_autograd`, :doc:`step 8 <08_autograd>` and :func:`torch.library.custom_op`",
        site,
    )
    assert converted == (
        "see Step 8: Autograd, step 8 and [`torch.library.custom_op()`]"
        "(https://docs.pytorch.org/docs/stable/library.html#torch.library.custom_op)"
    )
    assert "](" not in to_markdown("a :class:`~torch.utils.cpp_extension.BuildExtension`",
                                   lambda d, r, t: (None, None))  # fmt: skip


def test_list_table_becomes_a_markdown_table():
    rest = """The questions:

.. list-table:: Options
   :header-rows: 1
   :widths: 20 80

   * - question
     - what it sets
   * - ``package``
     - the Python package, see :doc:`step 8 <08_autograd>`;
       a second line | with a bar
   * - ``abi``
     -

After."""
    assert to_markdown(rest, link, include) == (
        "The questions:\n\n**Options**\n\n"
        "| question | what it sets |\n"
        "| --- | --- |\n"
        f"| ``package`` | the Python package, see [step 8]({SITE}auto_examples/08_autograd.html);"
        r" a second line \| with a bar |" + "\n"
        "| ``abi`` |  |\n\nAfter."
    )


def test_literalinclude_becomes_the_file_under_its_caption():
    rest = """A file:

.. literalinclude:: /../csrc/opguide.cpp
   :language: cpp
   :caption: csrc/opguide.cpp

After it."""
    assert to_markdown(rest, link, include) == (
        "A file:\n\n`csrc/opguide.cpp`:\n\n"
        "````cpp\n// the text of /../csrc/opguide.cpp\nint x = 1;  // ```\n````\n\nAfter it."
    )


def test_code_in_fences_is_left_alone():
    rest = """Text.

```python
def f():
    '''See :func:`g`.

    .. note:: kept
    '''
```
"""
    assert to_markdown(rest, link, include) == rest


def test_directives_become_readable_markdown():
    rest = """.. currentmodule:: torch

.. dropdown:: The whole file
   :open:

   .. tip::

      Read :func:`torch.no_grad` first.

.. sidebar:: Aside

   Some text.

.. code-block:: bash
   :caption: a shell

   pip install copier

.. a comment
   that goes on

Take ``r``::

    r = 1 / sqrt(mean(x**2) + eps)

End."""
    converted = to_markdown(rest, link, include)
    assert converted == (
        "**The whole file**\n\n> **Tip**\n>\n> Read `torch.no_grad()` first.\n\n"
        "**Aside**\n\nSome text.\n\n"
        "`a shell`:\n\n```bash\npip install copier\n```\n\n"
        "Take ``r``:\n\n```\nr = 1 / sqrt(mean(x**2) + eps)\n```\n\nEnd."
    )
    assert not leftover_rest(converted)


def test_leftover_rest_finds_roles_and_directives_outside_code():
    cell = "A :func:`f` and {doc}`page`.\n\n.. note:: raw\n\n```\n.. code:: kept\n```\n``:x:`y` ``"
    assert leftover_rest(cell) == [":func:`f`", "{doc}`page`", ".. note:: raw"]


def test_anonymous_links_lose_the_underscore_sphinx_gallery_leaves():
    """reST's ```t <url>`__`` comes out of sphinx-gallery as ``[t](url)_``: the tail goes."""
    cell = "See [its notes](https://example.org/a.html)_, and [b](https://x.org/b)_.\n\n```\nf(a)_\n```"
    assert leftover_rest(cell) == ["](https://example.org/a.html)_", "](https://x.org/b)_"]
    converted = to_markdown(cell)
    assert converted.rstrip() == (
        "See [its notes](https://example.org/a.html), and [b](https://x.org/b).\n\n```\nf(a)_\n```"
    )
    assert not leftover_rest(converted)
