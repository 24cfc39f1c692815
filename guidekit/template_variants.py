"""The template's variants: its routes, kinds and operator names, and how one is rendered.

``tests/template_helpers.py`` and ``tools/record_template_gpu.py`` take their
variants from here, so that the tests and the GPU record name the same ones.
"""

from __future__ import annotations

import itertools
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "template"

#: (route, ABI) pairs: the C++ route comes with either ABI, the others with none of their own.
ROUTES = [("cpp", "classic"), ("cpp", "stable"), ("triton", "classic"), ("python", "classic")]
KINDS = ["elementwise", "rowwise", "indexed", "scatter", "grouped"]
#: The example operator of each kind (in-place variants append ``_``).
OP_NAMES = {
    "elementwise": "silu_mul",
    "rowwise": "scaled_norm",
    "indexed": "rope",
    "scatter": "store_kv",
    "grouped": "group_rows",
}

#: The tensors each route's scatter variant writes (the ``written`` question):
#: one, two and three, so that every count is built, tested and run on a GPU
#: somewhere; the C++ classic route keeps the template's default, the KV cache.
SCATTER_WRITTEN = {
    ("cpp", "classic"): "k,v",
    ("cpp", "stable"): "x",
    ("triton", "classic"): "k,v,extra",
    ("python", "classic"): "k,v",
}


def answers(
    route: str, abi: str, kind: str, inplace: bool, package: str, triton: bool = True,
    triton_aot: bool = False,
) -> dict[str, str | bool]:  # fmt: skip
    """The copier answers of one variant.

    ``triton=False`` renders the C++ route without its Triton variant (the
    ``triton`` question; the other routes do not ask it); ``triton_aot=True``
    the Triton route with its kernels compiled ahead of time.

    Raises:
        ValueError: if ``triton`` is False on a route other than ``cpp``, or
            ``triton_aot`` is True on a route other than ``triton``.
    """
    if not triton and route != "cpp":
        raise ValueError(f"triton=False applies to the cpp route only, got route={route!r}")
    if triton_aot and route != "triton":
        raise ValueError(f"triton_aot=True applies to the triton route only, got route={route!r}")
    out: dict[str, str | bool] = dict(package=package, route=route, kind=kind)
    out["op_name"] = op_name(kind, inplace)
    if route == "cpp":
        out["abi"] = abi
    if not triton:
        out["triton"] = False
    if triton_aot:
        out["triton_aot"] = True
    if kind == "scatter":
        out["written"] = SCATTER_WRITTEN[(route, abi)]
    return out


def supports(route: str, abi: str, kind: str, inplace: bool = False, triton: bool = False) -> bool:
    """Whether the template renders this variant (the questions' validators refuse the others).

    The scatter and grouped kinds have no in-place twin (the one only writes,
    the other's output has another size); the grouped kind comes on the C++
    route with the classic ABI and no Triton variant, and on the Python route.
    """
    if inplace and kind in ("scatter", "grouped"):
        return False
    if kind == "grouped":
        return route == "python" or (route, abi, triton) == ("cpp", "classic", False)
    return True


#: Every variant, as (route, abi, kind, inplace) tuples (the C++ route's with its
#: Triton variant, but the grouped kind's, which has none).
EVERY = [
    (r, a, k, i)
    for (r, a), k, i in itertools.product(ROUTES, KINDS, [False, True])
    if supports(r, a, k, i)
]


def op_name(kind: str, inplace: bool) -> str:
    """The operator a variant defines: ``silu_mul``, or ``silu_mul_`` for the in-place one."""
    return OP_NAMES[kind] + ("_" if inplace else "")


def package_name(route: str, abi: str, kind: str, inplace: bool, prefix: str = "tpl") -> str:
    """A variant's package name, e.g. ``tpl_cpp_stable_rowwise_inplace``."""
    return f"{prefix}_{route}_{abi}_{kind}{'_inplace' if inplace else ''}"


def render(dest: Path, **answers: str) -> Path:
    """Renders the template into ``dest`` with ``answers``, the rest by default (needs copier)."""
    import copier

    copier.run_copy(str(TEMPLATE), str(dest), data=answers, defaults=True, quiet=True)
    return dest


def render_variant(dest_parent: Path, route: str, abi: str, kind: str, inplace: bool,
                   prefix: str = "tpl", triton_aot: bool = False) -> Path:  # fmt: skip
    """Renders one variant into ``dest_parent/<package>``; returns the project folder.

    ``triton_aot=True`` (the Triton route's) renders it with its kernels
    compiled ahead of time, its package name prefixed ``<prefix>aot``.
    """
    package = package_name(route, abi, kind, inplace, prefix + ("aot" if triton_aot else ""))
    chosen = answers(route, abi, kind, inplace, package, triton_aot=triton_aot)
    return render(dest_parent / package, **chosen)
