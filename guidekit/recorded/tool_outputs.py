"""The text that the ``tools/sweep_*`` programs print, read back.

The CUDA sweep programs (``tools/sweep_*.cu``) print a device line
(``NVIDIA ...``), then per shape the library's kernel and each variant with
its settings and its fraction or % of a copy; ``tools/sweep_triton.py split``
prints each split variant at each launch and the best launch. These parsers
take the text and return the numbers.
"""

from __future__ import annotations

import re

CLUSTER_LINE = re.compile(
    r"^  (?P<name>.+?)\s+cluster\s+(?P<cluster>\d+) x\s+\d+:.*?(?P<frac>\d\.\d\d) of copy"
)
LIBRARY_LINE = re.compile(r"(\w+) M=\d+ N=(\d+): library .*?(\d\.\d\d) of copy")
CLUSTER_VARIANT = re.compile(r"^  (.+?)\s+cluster\s+(\d+) x\s+(\d+):.*?(\d\.\d\d) of copy", re.M)
SPLIT_LINE = re.compile(r"^\s+(best\s+)?\d+x(\d+) (\w+) (.+?)\s+[\d.]+ us\s+([\d.]+)%")
FIELD = re.compile(r"([a-z][A-Za-z_/]*[A-Za-z])\s+(\d+)(?![\d.x])")  # "regs  57"


def recorded_when(text: str) -> str | None:
    """The date of a text record: ``YYYY-MM-DD`` from its first line, which
    ``tools/gpu_records.sh`` writes as ``# <GPU>, torch ..., triton ..., <date>``; None
    when the first line has no date."""
    first = text.split("\n", 1)[0]
    found = re.search(r"\b(\d{4}-\d\d-\d\d)\s*$", first) if first.startswith("# ") else None
    return found[1] if found else None


def device_lines(text: str) -> list[str]:
    """The lines that name the device (``NVIDIA ...``)."""
    return [line for line in text.splitlines() if line.startswith("NVIDIA")]


def cluster_sweep(
    text: str, before: str, dtype: str = "bf16", after: str = "library"
) -> dict[int, tuple[float, float]]:
    """N -> the ``before`` and ``after`` variants' fractions of the copy, in ``dtype``.

    Args:
        text: the output of ``tools/sweep_rms_norm_*_cluster.cu``.
        before, after: variant names (``"library"``: the library's kernel).
        dtype: ``"bf16"`` or ``"fp16"``.
    """
    found_at: dict = {"library": {}, before: {}, after: {}}
    key = None
    for line in text.splitlines():
        head = LIBRARY_LINE.match(line)
        if head:
            key = (head[1], int(head[2]))
            found_at["library"][key] = float(head[3])
        found = CLUSTER_LINE.match(line)
        if found and found["name"] in found_at:
            found_at[found["name"]][key] = float(found["frac"])
    old, new = found_at[before], found_at[after]
    return {k[1]: (old[k], new[k]) for k in sorted(old) if k[0] == dtype}


def cluster_variants(text: str) -> tuple[dict, dict]:
    """``({(dtype, N, variant): fraction}, {(dtype, N): the library's fraction})``."""
    variant, library = {}, {}
    for section in re.split(r"\n(?=\w+ M=)", text)[1:]:
        head = LIBRARY_LINE.match(section)
        dtype, n = head[1], int(head[2])
        library[(dtype, n)] = float(head[3])
        for found in CLUSTER_VARIANT.finditer(section):
            variant[(dtype, n, found[1])] = float(found[4])
    return variant, library


def cluster_sizes(text: str, names: tuple[str, ...], dtype: str = "bf16") -> dict[int, tuple]:
    """N -> the cluster size of each of ``names`` (None where a variant is missing), in ``dtype``.

    Args:
        text: the output of ``tools/sweep_rms_norm_*_cluster.cu``.
        names: variant names, as the tool prints them.
        dtype: ``"bf16"`` or ``"fp16"``.
    """
    sizes: dict[int, dict[str, int]] = {}
    n = None
    for line in text.splitlines():
        head = LIBRARY_LINE.match(line)
        if head:
            n = int(head[2]) if head[1] == dtype else None
            if n is not None:
                sizes[n] = {}
        found = CLUSTER_LINE.match(line)
        if found and n is not None and found["name"] in names:
            sizes[n][found["name"]] = int(found["cluster"])
    return {n: tuple(got.get(name) for name in names) for n, got in sorted(sizes.items())}


def split_sweep(text: str) -> tuple[dict, dict]:
    """``({(pass, variant, N): (%, its best launch)}, {(pass, variant, launch, N): %})``."""
    best, every = {}, {}
    for line in text.splitlines():
        if found := SPLIT_LINE.match(line):
            n, pass_name, label, pct = int(found[2]), found[3], found[4], float(found[5])
            variant, launch = label.split(" SEG ")
            if found[1]:
                best[(pass_name, variant, n)] = (pct, "SEG " + launch)
            else:
                every[(pass_name, variant, "SEG " + launch, n)] = pct
    return best, every


def launch(text: str) -> str:
    """``'SEG 4096 warps 2'`` as ``'(4096, 2 warps)'``."""
    seg, warps = re.findall(r"\d+", text)[:2]
    return f"({seg}, {warps} warps)"


def read_sweep(text: str) -> tuple[list[str], list[dict]]:
    """The device lines before the first data line, and the data lines of a sweep.

    Each data line is a dict: ``dtype``, ``shape``, ``pct`` (% of the copy),
    ``section`` (the ``OPGUIDE_...`` setting it ran under), ``line`` and
    every ``name value`` field of the line (``regs``, ``vecs/thr``, ...).
    """
    header, out, section = [], [], ""
    for line in text.splitlines():
        if line.startswith("NVIDIA") and not out:
            header.append(line)
        if line.startswith("OPGUIDE_"):
            section = line.split(",")[0]
        percent = re.search(r"(\d+\.\d)%", line)
        if line.startswith("  ") and percent:
            dtype, shape = line.split()[:2]
            fields = {k: int(v) for k, v in FIELD.findall(line)}
            out.append({"dtype": dtype, "shape": shape, "pct": float(percent[1]),
                        "section": section, "line": line, **fields})  # fmt: skip
    return header, out


def best(lines: list[dict], **want) -> dict | None:
    """The fastest line whose fields equal ``want`` (None if there is none)."""
    found = [r for r in lines if all(r.get(k) == v for k, v in want.items())]
    return max(found, key=lambda r: r["pct"], default=None)
