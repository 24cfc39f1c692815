"""One vocabulary across C++, CUDA, Triton, the tests and the pages.

The gradients are named after what they belong to (``grad_y``, ``grad_x``,
``grad_weight``), every kernel family has one name, defined in the guide's
glossary (``docs/index.md``) and in the list of words at the top of
``csrc/common/launch.cuh``, and every pointer parameter of a Triton kernel says
its shape and dtype in a comment.
"""

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Where readers and contributors read code and prose: everything tracked but
# the measured records (their text is what a tool printed when it ran).
SOURCE_SUFFIXES = {".py", ".cpp", ".cu", ".cuh", ".h", ".md", ".txt", ".jinja", ".patch", ".sh"}
SKIP = ("docs/recorded/", "tests/history_words.txt", "tests/test_vocabulary.py")

# The other names the same things have had, and the name to use instead.
RETIRED = {
    r"(?<![/\w])d(?:x|w|y|weight)\b": "grad_x, grad_weight, grad_y",
    r"\bgrad_w(?![A-Za-z0-9])": "grad_weight",
    r"\b(?:DwSum|DW_SUM|dw_sum|dwsum)\b|_dw_": "GradWeightSum, GRAD_WEIGHT_SUM, grad_weight_sum",
    r"kBlockLong|kLongRows|block-long|_long_kernel": "chunked (kChunked, *_chunked_kernel)",
    r"two_pass|TwoPass|two-pass": "chunked",
    r"RowKernel::kBlock\b": "RowKernel::kRegisters",
}


def _tracked_sources() -> list[Path]:
    """The sources git does not ignore (every file, in a source archive), records left out."""
    try:
        paths = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT, check=True, capture_output=True, text=True,
        ).stdout.splitlines()  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        paths = [p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*")]
        paths = [p for p in paths if not re.search(r"(^|/)(build|__pycache__)/", p)]
    return [
        ROOT / p
        for p in paths
        if Path(p).suffix in SOURCE_SUFFIXES
        and (ROOT / p).is_file()
        and not p.startswith(SKIP)
        and "/." not in f"/{p}"
    ]


def test_retired_names_are_gone():
    found = []
    for path in _tracked_sources():
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for pattern, instead in RETIRED.items():
                if re.search(pattern, line):
                    where = path.relative_to(ROOT)
                    found.append(f"{where}:{number}: {line.strip()[:80]}  (say {instead})")
    assert not found, "\n".join(found)


def _triton_signatures(text: str):
    """(kernel name, its parameter lines) of every @triton.jit function in text."""
    for match in re.finditer(r"@triton\.jit[^\n]*\n\s*def (\w+)\(", text):
        end = text.index(")", match.end())
        while not re.match(r"\)\s*(->[^:]*)?:", text[end:]):  # a ')' inside the list
            end = text.index(")", end + 1)
        yield match.group(1), text[match.end() : end].split("\n")


def test_every_triton_pointer_parameter_says_its_shape():
    missing = []
    kernels = 0
    for path in _tracked_sources():
        if path.suffix not in (".py", ".jinja", ".patch"):
            continue
        for name, lines in _triton_signatures(path.read_text()):
            kernels += 1
            for line in lines:
                code, _, comment = line.partition("#")
                pointers = [p for p in re.findall(r"\b(\w+_ptr)\b", code)]
                # One pointer per line, with its shape first: "x_ptr,  # [M, N] ...".
                if pointers and (len(pointers) > 1 or not comment.strip().startswith("[")):
                    missing.append(f"{path.relative_to(ROOT)}: {name}: {line.strip()}")
    assert kernels > 20, kernels  # the scan found the kernels
    assert not missing, "\n".join(missing)


def _families() -> set[str]:
    """The kernel family of every CUDA kernel enum member and Triton configuration."""
    names = set()
    for header in ("csrc/common/row_plan.cuh", "csrc/rms_norm/rms_norm_backward_planner.cuh"):
        text = (ROOT / header).read_text()
        for body in re.findall(r"enum class (?:RowKernel|BackwardKernel) \{([^}]*)\}", text):
            for member in re.findall(r"\bk([A-Z]\w*)", re.sub(r"//[^\n]*", "", body)):
                # kPipelined2, kNarrow8, kClusterLong: variants of one family.
                names.add(re.sub(r"(Long|\d+)$", "", member).lower())
    launch = (ROOT / "opguide/triton/launch.py").read_text()
    union = re.search(r"^Config = (.*)$", launch, re.M).group(1)
    names.update(name.strip().lower() for name in union.split("|"))
    return names


def test_every_kernel_family_is_defined_once_for_all():
    families = _families()
    assert {"registers", "chunked", "cluster", "split"} <= families, families
    index = (ROOT / "docs/index.md").read_text()
    glossary_terms = set()
    for block in re.findall(r"```\{glossary\}\n(.*?)```", index, re.S):
        glossary_terms.update(re.findall(r"^(\S[^\n]*)$", block, re.M))
    words = (ROOT / "csrc/common/launch.cuh").read_text()
    listed = set(re.findall(r"^//   ([a-z]+) {2,}", words, re.M))
    for family in sorted(families):
        assert family in glossary_terms, f"{family}: not a term of the glossary in docs/index.md"
        assert family in listed, f"{family}: not in the words of csrc/common/launch.cuh"


@pytest.mark.parametrize("name", ["grad_y", "grad_x", "grad_weight"])
def test_the_schema_uses_the_gradient_names(name):
    assert name in (ROOT / "csrc/rms_norm/rms_norm_schema.cpp").read_text()
