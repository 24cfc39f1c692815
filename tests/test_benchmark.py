"""The benchmark package: its result file's structure and its bytes model.

Performance is measured, not asserted: these tests check that a run produces
every field the performance chapter reads, with small inputs so they stay fast.
"""

from __future__ import annotations

import json

import pytest
import torch

import opguide  # noqa: F401  (loads the operators)
import opguide.reference
from guidekit import benchmark
from guidekit.benchmark import fixed_shapes, sweep, timing

ENVIRONMENT_KEYS = {"date", "torch", "cuda", "triton", "python", "device", "cpu", "cpu_threads"}
ROW_KEYS = {"impl", "m", "n", "dtype", "seconds", "bytes", "GBps", "of_copy"}
OVERHEAD_IMPLS = {
    "torch.ops.opguide.rms_norm",
    "torch.ops.opguide.rms_norm, inference_mode",
    "torch.rms_norm",
    "F.rms_norm",
    "opguide.rms_norm",
    "Python custom_op",
}


@pytest.fixture(scope="module")
def cpu_only_result(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("bench") / "cpu.json"
    argv = ["--cpu-only", "--out", str(out), "--tiny-shape", "2x32", "--cpu-shape", "256x1024"]
    assert benchmark.main([*argv, "--cpu-rounds", "3"]) == 0
    return json.loads(out.read_text())


def test_cpu_only_file_has_environment_and_old_fields(cpu_only_result):
    assert ENVIRONMENT_KEYS <= cpu_only_result.keys()
    assert cpu_only_result["command"].startswith("python -m guidekit.benchmark --cpu-only --out ")
    assert cpu_only_result["format"] == benchmark.FORMAT
    assert cpu_only_result["torch"] == torch.__version__
    # Fields of the first format stay, so older readers still work.
    assert cpu_only_result["forward"] == []
    assert cpu_only_result["copy_bandwidth_GBps"] > 0
    assert cpu_only_result["skipped"] == []


def test_cpu_overhead_section(cpu_only_result):
    overhead = cpu_only_result["cpu_overhead"]
    assert overhead["shape"] == [2, 32]
    assert {r["impl"] for r in overhead["rows"]} == OVERHEAD_IMPLS
    for row in overhead["rows"]:
        assert row["seconds"] > 0
        base = next(r for r in overhead["rows"] if r["impl"] == "torch.rms_norm")
        assert row["vs_torch_rms_norm"] == pytest.approx(row["seconds"] / base["seconds"])


def test_cpu_kernel_section(cpu_only_result):
    kernel = cpu_only_result["cpu_kernel"]
    assert kernel["shape"] == [256, 1024]
    assert kernel["threads"] == torch.get_num_threads()
    rows = {r["impl"]: r for r in kernel["rows"]}
    assert set(rows) == {
        "copy_ (memory floor)",
        "clone (copy + new memory)",
        "opguide (C++ kernel)",
        "opguide into existing y",
        "F.rms_norm",
    }
    assert kernel["target_vs_copy"] == 2.5
    assert rows["copy_ (memory floor)"]["vs_copy"] == 1.0
    assert rows["copy_ (memory floor)"]["bytes"] == 2 * 256 * 1024 * 4
    assert rows["opguide (C++ kernel)"]["bytes"] == 2 * 256 * 1024 * 4 + 1024 * 4
    assert rows["opguide into existing y"]["bytes"] == rows["opguide (C++ kernel)"]["bytes"]
    for row in rows.values():
        assert row["GBps"] == pytest.approx(row["bytes"] / row["seconds"] / 1e9)


def test_device_passes_rows_and_bytes_model():
    # The GPU passes, run on the CPU with small inputs and without the
    # implementations that compile (torch.compile) or interpret (Triton).
    m, n, s = 64, 128, 2
    only = ["opguide", "opguide autograd", "F.rms_norm", "eager reference", "opguide triton",
            "eager add + F.rms_norm"]  # fmt: skip
    result = benchmark.measure(
        torch.device("cpu"),
        passes=["forward", "backward", "fused"],
        shapes=[(m, n)],
        dtypes=["bf16"],
        only=only,
        copy_bytes=2**22,
    )
    expected_bytes = {
        "forward": 2 * m * n * s + n * s,
        "backward": 3 * m * n * s + 2 * n * s + 4 * m,
        "fused": 4 * m * n * s + n * s,
    }
    for pass_name, moved in expected_bytes.items():
        rows = result[pass_name]
        assert rows, pass_name
        for row in rows:
            assert set(row) == ROW_KEYS
            assert (row["m"], row["n"], row["dtype"], row["bytes"]) == (m, n, "bf16", moved)
            assert row["of_copy"] == pytest.approx(row["GBps"] / result["copy_bandwidth_GBps"])
    assert {r["impl"] for r in result["backward"]} >= {"opguide", "opguide autograd"}
    # Triton on CPU tensors is its interpreter: skipped, with the reason.
    triton_skips = [s for s in result["skipped"] if s["impl"] == "opguide triton"]
    assert {s["pass"] for s in triton_skips} == {"forward", "backward", "fused"}
    assert all("interpreter" in s["reason"] for s in triton_skips)
    json.dumps(result)  # the result file is JSON


def test_failing_implementation_is_skipped_with_reason(monkeypatch):
    def broken(x, w):
        raise NotImplementedError("no kernel for this device\nmore detail")

    monkeypatch.setattr(fixed_shapes, "forward_implementations", lambda device=None: {"b": broken})
    result = benchmark.measure(
        torch.device("cpu"), passes=["forward"], shapes=[(4, 8)], dtypes=["fp32"], only=["b"],
        copy_bytes=2**20,
    )  # fmt: skip
    assert result["forward"] == []
    assert result["skipped"] == [
        {"pass": "forward", "impl": "b", "m": 4, "n": 8, "dtype": "fp32",
         "reason": "NotImplementedError: no kernel for this device"}
    ]  # fmt: skip


def test_unknown_pass_is_rejected():
    with pytest.raises(ValueError, match="passes must be among"):
        benchmark.measure(torch.device("cpu"), passes=["sideways"])


def test_round_robin_alternates_and_reports_every_function():
    # Batches are taken in turn, the order reversed every other round, so
    # that drift slows every function alike.
    order: list[str] = []
    fns = {name: (lambda name=name: order.append(name), [()]) for name in ("a", "b", "c")}
    seconds = benchmark.time_round_robin(
        fns, device=torch.device("cpu"), batches=4, calls_per_batch=2, warmup=1
    )
    assert set(seconds) == {"a", "b", "c"}
    assert all(t >= 0 for t in seconds.values())
    timed = order[3 * 2 * 1 :]  # after the warm-up calls (1 batch of 2 per function)
    batches = [timed[i] for i in range(0, len(timed), 2)]
    assert batches == ["a", "b", "c", "c", "b", "a", "a", "b", "c", "c", "b", "a"]


def test_cli_keep_l2_is_recorded(tmp_path, capsys):
    # --keep-l2 turns off the cleaning of L2 between batches; the file says which.
    out = tmp_path / "r.json"
    args = ["--device", "cpu", "--passes", "forward", "--shapes", "4x8", "--dtypes", "fp32",
            "--impls", "opguide,F.rms_norm", "--copy-mib", "1", "--out", str(out)]  # fmt: skip
    benchmark.main([*args, "--keep-l2"])
    assert json.loads(out.read_text())["clean_l2"] is False
    benchmark.main(args)
    assert json.loads(out.read_text())["clean_l2"] is True
    capsys.readouterr()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_pass_times_a_copy_of_the_same_bytes():
    result = benchmark.measure(
        torch.device("cuda"), passes=["forward", "backward"], shapes=[(256, 1024)],
        dtypes=["bf16"], only=["opguide", benchmark.SAME_SIZE_COPY], copy_bytes=2**26,
    )  # fmt: skip
    for pass_name in ("forward", "backward"):
        rows = {r["impl"]: r for r in result[pass_name]}
        assert set(rows) == {"opguide", benchmark.SAME_SIZE_COPY}, pass_name
        assert rows["opguide"]["bytes"] == rows[benchmark.SAME_SIZE_COPY]["bytes"]
    # The L2 sweep buffer is three times the L2 cache.
    buf = timing._L2_SWEEP[torch.device("cuda").index]
    assert buf.numel() * 4 >= 3 * timing._l2_bytes(torch.device("cuda"))


def test_sweep_rows_cover_every_n_and_pass_with_copy_ratio():
    # The N sweep on CPU tensors with a tiny total: every pass, every N, the
    # copy row in each round robin, and a ratio to it on every row.
    result = benchmark.run_sweep(
        torch.device("cpu"), dtypes=["fp32"], ns=[64, 256], elements=2**12,
        passes=list(benchmark.SWEEP_PASSES),
        only=["opguide", "F.rms_norm", benchmark.SAME_SIZE_COPY],
    )  # fmt: skip
    seen = {(r["pass"], r["n"], r["impl"]) for r in result["rows"]}
    for pass_name in benchmark.SWEEP_PASSES:
        for n in (64, 256):
            assert (pass_name, n, benchmark.SAME_SIZE_COPY) in seen
            assert (pass_name, n, "opguide") in seen
    for r in result["rows"]:
        assert r["m"] == 2**12 // r["n"] and r["seconds"] > 0 and r["vs_copy"] > 0
    # Peers that are not installed are named with the reason, not dropped silently.
    for name, why in result["peers_missing"].items():
        assert name in ("liger", "quack", *benchmark.FUSED_PEERS) and why
    report = benchmark.format_sweep_report({**benchmark.environment(torch.device("cpu")),
                                            "sweep": result})  # fmt: skip
    assert "training fp32" in report and "256" in report


def test_eager_mode_times_calls_against_f_rms_norm():
    result = benchmark.run_eager(
        torch.device("cpu"), dtype="fp32", ms=[1, 4], ns=[64], calls=3, rounds=3
    )
    modes = {(r["mode"], r["impl"], r["m"]) for r in result["rows"]}
    for mode in ("forward", "training"):
        for m in (1, 4):
            assert (mode, "opguide", m) in modes and (mode, "F.rms_norm", m) in modes
    base = [r for r in result["rows"] if r["impl"] == "F.rms_norm"]
    assert all(r["vs_F.rms_norm"] == pytest.approx(1.0) for r in base)
    # Training also times the operators without autograd (torch's and Triton's: GPU only).
    kernels = {r["impl"] for r in result["rows"] if r["mode"] == "training"}
    assert "opguide ops" in kernels and "F.rms_norm ops" not in kernels, kernels
    assert benchmark.EMPTY_FUNCTION in kernels and benchmark.FUNCTION_NODE in kernels
    assert not result["skipped"], result["skipped"]


def test_cli_sweep_writes_the_file(tmp_path, capsys):
    out = tmp_path / "sweep.json"
    assert benchmark.main([
        "--device", "cpu", "--sweep", "--sweep-ns", "128", "--sweep-elements", "4096",
        "--dtypes", "fp32",
        "--passes", "forward", "--impls", f"opguide,{benchmark.SAME_SIZE_COPY}",
        "--copy-mib", "1", "--out", str(out),
    ]) == 0  # fmt: skip
    data = json.loads(out.read_text())
    assert {r["impl"] for r in data["sweep"]["rows"]} == {"opguide", benchmark.SAME_SIZE_COPY}
    assert "forward fp32" in capsys.readouterr().out
    assert data["sweep"]["min_sets"] == benchmark.MIN_SETS


def test_rotation_never_reuses_the_previous_calls_inputs():
    # However large a set, a batch rotates through at least MIN_SETS of them,
    # so no call reads the set the call before it read (step 11, "How to time").
    cpu = torch.device("cpu")
    l2 = timing._l2_bytes(cpu)
    assert benchmark.MIN_SETS >= 2
    assert timing._rotation(100 * l2, cpu) == benchmark.MIN_SETS
    assert timing._rotation(l2 // 4, cpu) == 12  # 3x L2 of small sets
    assert timing._rotation(1, cpu) == 64  # capped
    assert timing._rotation(100 * l2, cpu, min_sets=1) == 1


def test_cli_min_sets_reaches_the_sweep(tmp_path, monkeypatch):
    seen = []
    real = timing._rotation
    monkeypatch.setattr(
        sweep, "_rotation", lambda b, d, m=benchmark.MIN_SETS: seen.append(m) or real(b, d, m)
    )
    out = tmp_path / "one_set.json"
    assert benchmark.main([
        "--device", "cpu", "--sweep", "--sweep-ns", "128", "--sweep-elements", "4096",
        "--dtypes", "fp32", "--passes", "forward", "--min-sets", "1",
        "--impls", f"opguide,{benchmark.SAME_SIZE_COPY}", "--copy-mib", "1", "--out", str(out),
    ]) == 0  # fmt: skip
    assert seen == [1]
    assert json.loads(out.read_text())["sweep"]["min_sets"] == 1


def test_merge_sweeps_keeps_min_sets_and_refuses_a_mix(tmp_path):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "tools" / "merge_sweeps.py"
    spec = importlib.util.spec_from_file_location("merge_sweeps", path)
    merge_sweeps = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(merge_sweeps)
    files = []
    for k, (dtype, sets) in enumerate((("fp32", 3), ("bf16", 3), ("bf16", 1))):
        run = {"torch": "t", "cuda": None, "python": "p", "device": "d", "triton": None,
               "format": 2, "date": f"2026-01-0{k + 1}", "copy_bandwidth_GBps": 1.0,
               "command": f"python -m guidekit.benchmark --sweep --dtypes {dtype}",
               "sweep": {"elements": 4096, "ns": [128], "dtypes": [dtype], "rows": [],
                         "skipped": [], "peers_missing": {}, "min_sets": sets}}  # fmt: skip
        files.append(tmp_path / f"{k}.json")
        files[-1].write_text(json.dumps(run))
    assert merge_sweeps.merge(files[:2])["sweep"]["min_sets"] == 3
    with pytest.raises(SystemExit, match="min-sets"):
        merge_sweeps.merge(files)


@pytest.mark.skipif(
    torch.cuda.is_available(),
    reason="runs the Triton rows on CPU tensors, in Triton's interpreter, which is off while a "
    "GPU is visible",
)
def test_eager_times_the_default_and_the_experimental_triton_paths(monkeypatch):
    # The Triton rows: the plain call, and the same call inside the opt-in
    # module's enabled(), entered once per batch; its direct launches without
    # autograd. Stand-ins for opguide.triton and the opt-in module, so that
    # the rows run here (Triton's interpreter on CPU tensors).
    import contextlib
    import sys
    import types

    from guidekit.benchmark import eager

    entered = []
    opt_in = types.ModuleType("opguide.experimental.triton_eager")

    @contextlib.contextmanager
    def enabled():
        entered.append(True)
        yield

    def direct_forward(x, weight, eps, training):
        return torch.ops.opguide.rms_norm_forward.default(x, weight, eps)

    def direct_backward(grad, x, weight, inv_rms):
        return torch.ops.opguide.rms_norm_backward.default(grad, x, weight, inv_rms)

    opt_in.enabled, opt_in.direct_forward = enabled, direct_forward
    opt_in.direct_backward = direct_backward
    package = types.ModuleType("opguide.experimental")
    package.triton_eager = opt_in
    monkeypatch.setitem(sys.modules, "opguide.experimental", package)
    monkeypatch.setitem(sys.modules, "opguide.experimental.triton_eager", opt_in)
    monkeypatch.setattr(eager, "_triton_available", lambda device=None: None)
    result = benchmark.run_eager(
        torch.device("cpu"), dtype="fp32", ms=[2], ns=[64], calls=2, rounds=1
    )
    assert not result["skipped"], result["skipped"]
    rows = {(r["mode"], r["impl"]) for r in result["rows"]}
    for mode in ("forward", "training"):
        assert (mode, "opguide triton") in rows and (mode, benchmark.TRITON_EXPERIMENTAL) in rows
    kernels = benchmark.EAGER_KERNELS
    assert ("training", kernels["opguide triton"]) in rows
    assert ("training", kernels[benchmark.TRITON_EXPERIMENTAL]) in rows
    # Per mode: the first call, two warm-up rounds and one timed round.
    assert len(entered) == 2 * 4


def test_into_existing_y_runs_the_librarys_row_loop():
    """The CPU row 'opguide into existing y' writes what the operator returns."""
    from guidekit.benchmark import cpu

    x, w = torch.randn(37, 300), torch.randn(300)
    assert cpu._into_existing_y(x, w) is not None  # builds rms_norm_into.cpp once
    into = torch.ops.opguide_benchmark.rms_norm_into.default
    y = torch.full_like(x, float("nan"))
    version = y._version
    into(x, w, 1e-6, y)
    assert y._version > version
    torch.testing.assert_close(y, torch.ops.opguide.rms_norm.default(x, w, 1e-6))
    with pytest.raises(RuntimeError, match="y must not require grad"):
        into(x, w, 1e-6, torch.empty_like(x, requires_grad=True))
    with pytest.raises(RuntimeError, match="float32 tensors only"):
        into(x.double(), w.double(), 1e-6, y.double())


def _fused_peer_stand_ins(monkeypatch) -> None:
    """Liger, Quack and vLLM modules whose fused functions compute opguide's reference."""
    import sys
    import types

    from opguide.reference import fused_add_rms_norm_reference as ref

    def module(name, **attrs):
        mod = types.ModuleType(name)
        mod.__dict__.update(attrs)
        monkeypatch.setitem(sys.modules, name, mod)

    def liger_apply(x, r, w, eps, offset, casting_mode, in_place):
        assert (offset, casting_mode, in_place) == (0.0, "llama", False)
        out, _, h = ref(x, r, w, eps)
        return out, h

    def quack_fwd(x, w, residual, eps):
        out, _, h = ref(x, residual, w, eps)
        return out, h, None

    def vllm_fused(x, r, w, eps):
        out, _, h = ref(x, r, w, eps)
        r.copy_(h)
        x.copy_(out)

    for name in ("liger_kernel", "liger_kernel.ops", "quack", "vllm"):
        module(name)
    function = types.SimpleNamespace(apply=liger_apply)
    module("liger_kernel.ops.fused_add_rms_norm", LigerFusedAddRMSNormFunction=function)
    module("quack.rmsnorm", rmsnorm_fwd=quack_fwd)
    module("vllm._custom_ops", fused_add_rms_norm=vllm_fused)


def test_fused_pass_peers_take_x_residual_weight(monkeypatch):
    _fused_peer_stand_ins(monkeypatch)
    peers, missing = benchmark.peer_implementations("fused")
    assert set(peers) == set(benchmark.FUSED_PEERS) and not missing
    x, r, w = torch.randn(4, 32), torch.randn(4, 32), torch.randn(32)
    out, _, h = opguide.reference.fused_add_rms_norm_reference(x, r, w, benchmark.EPS)
    for name in ("liger (fused)", "quack (residual)"):
        got = peers[name](x, r, w)
        torch.testing.assert_close((got[0], got[1]), (out, h), msg=name)
    x2, r2 = x.clone(), r.clone()
    peers["vllm"](x2, r2, w)  # in place: the norm into x, the sum into residual
    torch.testing.assert_close((x2, r2), (out, h))


def test_fused_pass_names_missing_peers_with_the_reason(monkeypatch):
    import sys

    for name in ("liger_kernel", "quack", "vllm"):
        # Each package and any of its modules that another test imported
        # (an import finds a module in sys.modules before its parent).
        loaded = [m for m in sys.modules if m == name or m.startswith(name + ".")]
        for module in loaded or [name]:
            monkeypatch.setitem(sys.modules, module, None)  # import fails: ImportError
    peers, missing = benchmark.peer_implementations("fused")
    assert not peers and set(missing) == set(benchmark.FUSED_PEERS)
    assert all(why.startswith(("ImportError", "ModuleNotFoundError")) for why in missing.values())
    # The fixed-shape fused pass records each as skipped at every shape.
    result = benchmark.measure(
        torch.device("cpu"), passes=["fused"], shapes=[(4, 32)], dtypes=["fp32"],
        only=["opguide", *benchmark.FUSED_PEERS], copy_bytes=2**20,
    )  # fmt: skip
    skipped = {s["impl"]: s for s in result["skipped"]}
    for name in benchmark.FUSED_PEERS:
        assert skipped[name]["m"] is None and skipped[name]["reason"] == missing[name]
    assert {r["impl"] for r in result["fused"]} == {"opguide"}


def test_fused_pass_times_the_peers_and_the_compiled_in_place_reference(monkeypatch):
    _fused_peer_stand_ins(monkeypatch)
    name = "compile(residual += x; F.rms_norm)"
    x, r, w = torch.randn(4, 32), torch.randn(4, 32), torch.randn(32)
    out, _, h = opguide.reference.fused_add_rms_norm_reference(x, r, w, benchmark.EPS)
    got = benchmark.fused_implementations(torch.device("cpu"))[name](x, r.clone(), w)
    torch.testing.assert_close(got, (out, h))
    result = benchmark.run_sweep(
        torch.device("cpu"), dtypes=["fp32"], ns=[64], elements=2**10, passes=["fused"],
        only=["opguide", name, *benchmark.FUSED_PEERS],
    )  # fmt: skip
    timed = {row["impl"] for row in result["rows"]}
    expected = {"opguide", name, *benchmark.FUSED_PEERS, benchmark.SAME_SIZE_COPY}
    assert timed == expected, result["skipped"]
    assert not result["peers_missing"]
