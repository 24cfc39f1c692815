"""The build side of the Triton kernels compiled ahead of time (opguide/triton/aot.py).

On the CPU, no GPU needed: the keys the library's planners give, Triton's own
binder agreeing with the signatures compiled, and a few launches compiled
for sm_90 and gfx942 into images, a manifest and the table's C++ file, which
a C++ compiler builds and reads back. Whether the images run is the GPU
tests' part (tests/test_triton_aot.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

pytest.importorskip("triton")

from opguide.triton import aot, launch  # noqa: E402

pytestmark = pytest.mark.cpu

ROOT = Path(__file__).resolve().parents[1]
CUDA0 = torch.device("cuda", 0)


def _child_env() -> dict:
    # Compiling needs Triton's compiler, which the interpreter (this process's) replaces.
    return {**os.environ, "TRITON_INTERPRET": "0", "TRITON_DEFAULT_FP_FUSION": "1"}


def _gdc(planner) -> bool:
    """GDC of an eager launch, as launch.pdl_options gives it."""
    return planner.pdl_options(torch.empty(1, device="meta")).get("GDC", False)


def _forward_key(target: str, rows: int, cols: int, dtype: torch.dtype, store_inv: bool) -> str:
    with aot.device_model(target) as planner:
        cfg = planner.forward_config(rows, cols, dtype, CUDA0)
        gdc = _gdc(planner)
    constexprs = {"BLOCK_N": cfg.block_n, "ROWS": cfg.rows, "STORE_INV": store_inv}
    constexprs |= {"GDC": gdc, "ALIGN": launch.align(cols)}
    return aot.key("rms_norm_forward", target, dtype, constexprs, cols, cfg.num_warps)


def _backward_key(target: str, rows: int, cols: int, dtype: torch.dtype) -> str:
    with aot.device_model(target) as planner:
        cfg = planner.backward_config(rows, cols, dtype, CUDA0)
        gdc = _gdc(planner)
    constexprs = {"BLOCK_N": cfg.block_n, "ROWS": cfg.rows, "STAGES": cfg.stages}
    constexprs |= {"GDC": gdc, "ALIGN": launch.align(cols)}
    return aot.key("rms_norm_backward", target, dtype, constexprs, cols, cfg.num_warps)


def test_key_format():
    # The planner's numbers, in the interface's layout: constexprs in the
    # kernel's order whatever the dict's, booleans as 0/1, spec from N.
    with aot.device_model("sm_90") as planner:
        cfg = planner.forward_config(8, 4104, torch.float16, CUDA0)
    constexprs = {"ALIGN": 8, "GDC": True, "STORE_INV": False, "ROWS": cfg.rows}
    constexprs["BLOCK_N"] = cfg.block_n
    got = aot.key("rms_norm_forward", "sm_90", torch.float16, constexprs, 4104, cfg.num_warps)
    words = f"BLOCK_N={cfg.block_n},ROWS={cfg.rows},STORE_INV=0,GDC=1,ALIGN=8"
    assert got == f"rms_norm_forward|sm_90|fp16|{words}|N|w{cfg.num_warps}"
    assert cfg.block_n == launch.next_power_of_2(4104)
    s = launch.GRAD_WEIGHT_SUM
    constexprs = {"BLOCK_P": s.block_p, "BLOCK_N": s.block_n, "GDC": 0, "ALIGN": launch.align(1)}
    got = aot.key("grad_weight_sum", "gfx942", "float32", constexprs, 1, s.num_warps)
    words = f"BLOCK_P={s.block_p},BLOCK_N={s.block_n},GDC=0,ALIGN=1"
    assert got == f"grad_weight_sum|gfx942|fp32|{words}|1|w{s.num_warps}"
    assert _forward_key("sm_80", 1, 4096, torch.bfloat16, True).endswith(",GDC=0,ALIGN=16|D|w8")
    assert "|sm_90|bf16|" in _forward_key("sm_90", 1, 4096, torch.bfloat16, True)
    with pytest.raises(ValueError, match="constexprs of rms_norm_backward must be"):
        aot.key("rms_norm_backward", "sm_90", torch.float32, {"BLOCK_N": 4}, 4, 4)
    with pytest.raises(ValueError, match="dtype must be one of"):
        aot.key("grad_weight_sum", "sm_90", torch.int32, {}, 4, 4)
    with pytest.raises(ValueError, match="no device model for target 'sm_75'"):
        aot.target("sm_75")


def test_launches_hold_the_plans_keys():
    found = aot.launches("sm_90")
    keys = [la.key for la in found]
    assert len(keys) == len(set(keys)), "two launches share a key"
    assert {la.kernel for la in found} == set(aot.KERNELS)
    for rows, cols in ((1, 4096), (8192, 4096)):
        for store_inv in (False, True):
            assert _forward_key("sm_90", rows, cols, torch.bfloat16, store_inv) in keys
        assert _backward_key("sm_90", rows, cols, torch.bfloat16) in keys
    # The plans' ends: the longest rows of each kernel, a row of one element, odd rows.
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        for cols in (1, 7, 4104, launch.MAX_REGISTER_ROW_BACKWARD):
            assert _backward_key("sm_90", 64, cols, dtype) in keys
        assert _forward_key("sm_90", 3, launch.MAX_REGISTER_ROW, dtype, True) in keys
    # The backward's STAGES follows the target's shared memory: fewer on sm_86 than on sm_90.
    bwd = [_backward_key(t, 64, 8192, torch.bfloat16) for t in ("sm_90", "sm_86")]
    assert bwd[0].replace("sm_90", "sm_86") != bwd[1]
    assert bwd[1] in {la.key for la in aot.launches("sm_86", cols=[8192])}
    print(f"launches('sm_90'): {len(keys)}")


# The oracle: Triton's own binder (what the JIT compiles for a launch) and the
# library's own launches, recorded by guidekit.triton_targets, for a sample of
# row lengths; run where the interpreter is off.
_ORACLE = textwrap.dedent(
    """
    import json, sys
    from opguide.triton import aot
    from guidekit.triton_targets.targets import TARGETS
    from guidekit.triton_targets.launches import library_launches
    from guidekit.triton_targets.compiling import _prepare

    cols = [1, 2, 7, 16, 24, 100, 1000, 4096, 4104, 5000, 8192, 8194, 16384]
    names = {fn: name for name, (_, fn) in aot.KERNELS.items()}
    n_arg = {"rms_norm_forward": 5, "rms_norm_backward": 7, "grad_weight_sum": 3}
    out = {}
    for target in sys.argv[1:]:
        # RMSNorm's: each operator's aot_module is checked by its own tests.
        mine = {la.key for la in aot.launches(target, cols) if la.kernel in n_arg}
        pdl_target = aot.target(target).backend == "cuda" and aot.target(target).capability[0] >= 9
        theirs, differ = set(), []
        for g in library_launches(TARGETS[target], row_lengths=cols):
            kernel, kw = names.get(g.kernel), g.kw
            if kernel is None or pdl_target and not kw.get("GDC"):
                continue  # not compiled ahead of time; GDC off: OPGUIDE_PDL=0, the JIT route
            x = g.args[1 if kernel == "grad_weight_sum" else 0][1:]
            la = aot.Launch(
                kernel, target, aot.DTYPES[x],
                tuple((c, int(kw[c])) for c in aot.CONSTEXPRS[kernel]),
                {1: "1", 16: "D", 17: "N"}[g.args[n_arg[kernel]]],
                kw["num_warps"], bool(kw.get("launch_pdl")),
            )
            theirs.add(la.key)
            _, _, (signature, constexprs, attrs, options) = _prepare(g, TARGETS[target])
            # Artifacts serve tensors of any size: no AMD pointer_range (see compile_inputs).
            attrs = {p: [a for a in v if a[0] != "tt.pointer_range"] for p, v in attrs.items()}
            bound = (signature, constexprs, {p: v for p, v in attrs.items() if v})
            bound += ({o: options[o] for o in ("num_warps", "enable_fp_fusion")},)
            bound += (options.get("launch_pdl", False),)
            _, sig, cx, at, opts = aot.compile_inputs(la)
            compiled = (sig, cx, at, {o: opts[o] for o in ("num_warps", "enable_fp_fusion")})
            compiled += (opts.get("launch_pdl", False),)
            if bound != compiled:
                differ.append([la.key, repr(bound), repr((sig, cx, at, opts))])
        out[target] = {"only_mine": sorted(mine - theirs), "only_theirs": sorted(theirs - mine),
                       "differ": differ, "count": len(theirs)}
    print(json.dumps(out))
    """
)


def test_launches_and_signatures_match_the_jit():
    targets = ["sm_90", "gfx942", "sm_80"]
    done = subprocess.run(
        [sys.executable, "-c", _ORACLE, *targets],
        capture_output=True, text=True, env=_child_env(), cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout.splitlines()[-1])
    for target in targets:
        r = result[target]
        assert r["count"] > 100, target
        assert not r["only_mine"] and not r["only_theirs"], (target, r)
        assert not r["differ"], (target, r["differ"][:3])


_READER = """
#include <cstdio>
#include "triton_aot/artifacts.h"
int main() {
  const opguide::triton_aot::Artifact* a = opguide::triton_aot::artifacts();
  for (size_t i = 0; i < opguide::triton_aot::artifact_count(); ++i) {
    std::printf("%s %s %s %zu %d %d %d %d", a[i].key, a[i].target, a[i].function,
                a[i].image_size, a[i].num_warps, a[i].threads_per_warp, a[i].shared_bytes,
                a[i].launch_pdl ? 1 : 0);
    for (size_t b = 0; b < a[i].image_size; b += 997) std::printf(" %02x", a[i].image[b]);
    std::printf("\\n");
  }
}
"""


def test_compile_a_few_launches(tmp_path):
    out = tmp_path / "out"
    command = [sys.executable, "-m", "opguide.triton.aot", "--targets", "sm_90,gfx942"]
    command += ["--out", str(out), "--cols", "4096", "--dtypes", "bfloat16", "--jobs", "1"]
    command += ["--only", "rms_norm_forward", "--only", "rms_norm_backward"]
    done = subprocess.run(command, capture_output=True, text=True, env=_child_env(), cwd=ROOT)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "triton aot sm_90: 3/3" in done.stdout and "triton aot gfx942: 3/3" in done.stdout
    manifest = json.loads((out / "manifest.json").read_text())
    entries = {e["key"]: e for e in manifest["artifacts"]}
    expected = {
        _forward_key(t, 1, 4096, torch.bfloat16, inv) for t in ("sm_90", "gfx942") for inv in (0, 1)
    } | {_backward_key(t, 8192, 4096, torch.bfloat16) for t in ("sm_90", "gfx942")}
    assert set(entries) == expected
    functions = {"rms_norm_forward": "_rms_norm_forward_kernel",
                 "rms_norm_backward": "_rms_norm_backward_kernel"}  # fmt: skip
    for k, e in entries.items():
        kernel, target, _, _, _, warps = k.split("|")
        gpu = aot.target(target)
        image = (out / e["image"]).read_bytes()
        assert image[:4] == b"\x7fELF" and len(image) == e["size"]
        blob = (out / f"{target}.bin").read_bytes()
        assert blob[e["offset"] : e["offset"] + e["size"]] == image
        assert e["function"] == functions[kernel] and f"w{e['num_warps']}" == warps
        assert e["threads_per_warp"] == gpu.warp_size and e["target"] == target
        assert e["launch_pdl"] == (target == "sm_90")
        assert 0 <= e["shared"] <= gpu.smem_optin
        if kernel == "rms_norm_backward" and target == "sm_90":
            assert e["shared"] > 0  # STAGES > 1: the loads ahead wait in shared memory
    cpp = (out / "triton_aot_artifacts.cpp").read_text()
    assert all(f'"{k}"' in cpp for k in entries)

    # The table compiles and holds the images: a C++ compiler reads it back.
    compiler = shutil.which(os.environ.get("CXX", "c++"))
    if compiler is None:
        pytest.skip("no C++ compiler to build the generated table with")
    (tmp_path / "reader.cpp").write_text(_READER)
    program = tmp_path / "reader"
    build = [compiler, "-std=c++17", f"-I{ROOT / 'csrc'}", str(tmp_path / "reader.cpp")]
    subprocess.run([*build, str(out / "triton_aot_artifacts.cpp"), "-o", str(program)], check=True)
    lines = subprocess.run([str(program)], capture_output=True, text=True, check=True).stdout
    read = {line.split()[0]: line.split()[1:] for line in lines.splitlines()}
    assert set(read) == set(entries)
    for k, e in entries.items():
        image = (out / e["image"]).read_bytes()
        words = [e["target"], e["function"], str(e["size"]), str(e["num_warps"])]
        words += [str(e["threads_per_warp"]), str(e["shared"]), str(int(e["launch_pdl"]))]
        words += [f"{image[b]:02x}" for b in range(0, len(image), 997)]
        assert read[k] == words


def test_an_empty_table(tmp_path):
    cpp = aot.write_outputs(tmp_path, [], {})
    assert "artifact_count() { return 0; }" in cpp.read_text()
    assert json.loads((tmp_path / "manifest.json").read_text())["artifacts"] == []


_ONE_PROCESS = """
import os, sys
from pathlib import Path

import triton
from triton.compiler import ASTSource

from opguide.triton import aot

before = (dict(os.environ), triton.knobs.compilation.disable_line_info)
todo = [la for la in aot.launches("sm_90", cols=[64], dtypes=["bfloat16"])
        if la.kernel == "rms_norm_forward"][:1]
compiled = aot.compile_launches(todo, Path(sys.argv[1]), jobs=1, log=lambda line: None)
after = (dict(os.environ), triton.knobs.compilation.disable_line_info)
# The same launch compiled with Triton's default, line tables on.
fn, signature, constexprs, attrs, options = aot.compile_inputs(todo[0])
gpu = aot.target("sm_90").gpu_target()
default = triton.compile(ASTSource(fn, signature, constexprs, attrs), target=gpu, options=options)
ours = compiled[todo[0].key][1]
print(len(compiled), before == after, before[1],
      b".debug_line" in ours, b".debug_line" in default.asm["cubin"])
"""


def test_compiling_on_one_process_leaves_the_callers_settings(tmp_path):
    # With --jobs 1 the compiles run in the calling process: they are made
    # without line tables, and the setting and the environment are put back.
    env = {k: v for k, v in _child_env().items() if k != "TRITON_DISABLE_LINE_INFO"}
    done = subprocess.run(
        [sys.executable, "-c", _ONE_PROCESS, str(tmp_path / "cache")],
        capture_output=True, text=True, env=env, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.split() == ["1", "True", "False", "False", "True"]


def test_arch_targets_reads_torchs_architecture_lists():
    from opguide.triton import aot_build

    assert aot_build.arch_targets("8.0;9.0+PTX") == ["sm_80", "sm_90"]
    assert aot_build.arch_targets("9.0a 10.0f;9.0") == ["sm_90", "sm_100"]
    assert aot_build.arch_targets("gfx90a;gfx942:xnack-", rocm=True) == ["gfx90a", "gfx942"]
    assert aot_build.arch_targets("") == []


def test_targets_come_from_the_variable_then_torchs_list_then_the_gpus(monkeypatch):
    from opguide.triton import aot_build

    gpus = []  # whether the visible GPUs were asked for
    visible = lambda: gpus.append(1) or ["sm_90", "sm_90"]  # noqa: E731
    for name in ("OPGUIDE_TRITON_AOT", "TORCH_CUDA_ARCH_LIST", "PYTORCH_ROCM_ARCH"):
        monkeypatch.delenv(name, raising=False)
    assert aot_build.targets(False, visible) == (["sm_90"], False)
    assert gpus == [1]
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "8.0;9.0+PTX")
    monkeypatch.setenv("PYTORCH_ROCM_ARCH", "gfx942")
    assert aot_build.targets(False, visible) == (["sm_80", "sm_90"], False)
    assert aot_build.targets(True, visible) == (["gfx942"], False)
    monkeypatch.setenv("OPGUIDE_TRITON_AOT", "gfx90a, sm_120,gfx90a,")
    assert aot_build.targets(False, visible) == (["gfx90a", "sm_120"], True)
    monkeypatch.setenv("OPGUIDE_TRITON_AOT", "0")
    assert aot_build.targets(True, visible) == ([], True)
    assert gpus == [1]


def test_inference_compiles_only_the_inference_forward(tmp_path):
    # What stable/setup.py asks for: the forward without inv_rms, nothing else.
    out = tmp_path / "out"
    command = [sys.executable, "-m", "opguide.triton.aot", "--targets", "sm_90", "--out", str(out)]
    command += ["--cols", "4096,100", "--dtypes", "bfloat16", "--jobs", "1", "--inference"]
    done = subprocess.run(command, capture_output=True, text=True, env=_child_env(), cwd=ROOT)
    assert done.returncode == 0, done.stderr[-4000:]
    keys = {e["key"] for e in json.loads((out / "manifest.json").read_text())["artifacts"]}
    assert keys == {_forward_key("sm_90", 1, n, torch.bfloat16, False) for n in (4096, 100)}
