"""A failure leaves inputs whole: every operator of opguide that writes an input.

``opguide.fused_add_rms_norm_`` writes its input ``residual`` (``residual += x``,
then RMSNorm). Every route allocates what it needs (the dense copy of a strided
``residual``, ``out``, ``inv_rms``) and plans its launch before the kernel
writes ``residual``, and writes a strided ``residual`` back from its copy only
after the kernel. So a call that fails after its argument checks, for want of
memory or at its launch, raises with ``residual`` as it was (values and version
counter), and the same call made again gives the right answer. This file
checks that on every route:

* the C++ CPU kernel and the Triton kernels in Triton's interpreter, with the
  address space of a child process capped just above what the inputs use, so
  that allocating ``out`` fails (Linux);
* the Triton route with a launch that raises, through the seam
  ``opguide.triton.ops.launchable``, on the CPU (interpreter) and on a GPU;
* the CUDA kernel and the compiled Triton kernels with the caching allocator
  capped by ``torch.cuda.set_per_process_memory_fraction``; and the CUDA
  kernel's refusal at its launch of more rows than a launch takes, after its
  outputs are allocated.

A kernel that fails while it runs (an illegal address on a GPU) is outside
this contract: it may have written part of ``residual``, and on a GPU it leaves
the context unusable, so no call can be retried.

The operators that write an input are found in the registry's schemas
(``(a!)``): one without a case here fails
``test_every_operator_that_writes_an_input_has_a_case``.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys

import pytest
import torch

import opguide
from opguide import registry
from opguide.backends import compiled_device_types, triton_ready

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
EPS = 1e-6

#: (operator, argument) for each input an operator writes, that this file covers.
COVERED = {("fused_add_rms_norm_", "residual"), ("fused_add_rms_norm_triton_", "residual")}


def written_arguments() -> set[tuple[str, str]]:
    """(operator, argument) for each argument that an operator of the registry writes."""
    found = set()
    for op in registry.OPERATORS:
        importlib.import_module(op.module)
        names = list(op.ops)
        if op.triton_ops and triton_ready():
            importlib.import_module(op.triton_module)
            names += op.triton_ops
        for name in names:
            schema = getattr(torch.ops.opguide, name).default._schema
            found |= {
                (name, a.name)
                for a in schema.arguments
                if a.alias_info is not None and a.alias_info.is_write
            }
    return found


def test_every_operator_that_writes_an_input_has_a_case():
    found = written_arguments()
    assert found, "no operator of the registry writes an input: the schema query is wrong"
    assert found <= COVERED, f"inputs written without a failure case here: {found - COVERED}"


def make_case(layout: str, rows: int, cols: int, device: str = "cpu"):
    """(x, residual, weight, storage): ``residual`` dense, or every other column of ``storage``.

    ``storage`` is the tensor that holds ``residual``'s memory; it is compared
    whole, so a write to the columns between a strided ``residual``'s shows too.
    """
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(rows, cols, generator=gen)
    weight = torch.randn(cols, generator=gen)
    if layout == "strided":
        storage = torch.randn(rows, 2 * cols, generator=gen).to(device)
        residual = storage[:, ::2]
        assert not residual.is_contiguous()
    else:
        storage = residual = torch.randn(rows, cols, generator=gen).to(device)
    return x.to(device), residual, weight.to(device), storage


def assert_retry_matches(x, residual, weight, backend, expected, storage, storage_before):
    """The call made again gives the reference's outputs and updated ``residual``."""
    out, inv_rms = opguide.fused_add_rms_norm_(x, residual, weight, EPS, backend=backend)
    want_out, want_inv_rms, want_residual = expected
    torch.testing.assert_close(residual, want_residual, rtol=0, atol=0)
    torch.testing.assert_close(out, want_out, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(inv_rms, want_inv_rms, rtol=1e-5, atol=1e-5)
    if storage is not residual:  # the columns between a strided residual's
        assert torch.equal(storage[:, 1::2], storage_before[:, 1::2])


def require_cuda_backend(backend: str) -> None:
    """Skips, saying why, when ``backend`` has no compiled kernel for CUDA tensors here."""
    if backend == "cpp" and "cuda" not in compiled_device_types("fused_add_rms_norm_"):
        pytest.skip("opguide._C was built without CUDA kernels")
    if backend == "triton" and (not triton_ready() or INTERPRET):
        pytest.skip("no compiled Triton kernels (triton missing, or TRITON_INTERPRET=1)")


# --- Out of memory on the CPU ------------------------------------------------

# Run in a child process, so that its cap on the address space (RLIMIT_AS)
# reaches no other test. MALLOC_MMAP_THRESHOLD_ in its environment has glibc
# map every allocation of 64 KiB or more on its own and unmap it when freed:
# the address space then measures exactly what is in use, and no freed block
# of the heap can serve the output without growing it.
_OUT_OF_MEMORY = r"""
import json, resource, sys
import torch
import opguide
from opguide.backends import triton_ready

sys.path.insert(0, sys.argv[1])
from test_failure_contract import EPS, make_case

# One thread: no thread (its stack, its malloc arena) starts under the cap.
torch.set_num_threads(1)
SOFT, HARD = resource.getrlimit(resource.RLIMIT_AS)


def address_space():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("/proc/self/status has no VmSize")


def run(backend, layout, rows, cols):
    x, residual, weight, storage = make_case(layout, rows, cols)
    expected = opguide.fused_add_rms_norm_reference(x, residual, weight, EPS)
    storage_before = storage.clone()
    version = residual._version
    # What a first call builds once (imports, caches) is built before the cap.
    small = make_case(layout, 2, 64)[:3]
    opguide.fused_add_rms_norm_(*small, EPS, backend=backend)
    out_bytes = x.numel() * x.element_size()
    # Room for the dense copy of a strided residual, and half of out.
    copy_bytes = out_bytes if layout == "strided" else 0
    resource.setrlimit(resource.RLIMIT_AS, (address_space() + copy_bytes + out_bytes // 2, HARD))
    try:
        opguide.fused_add_rms_norm_(x, residual, weight, EPS, backend=backend)
        raised = None
    except Exception as error:
        raised = error
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (SOFT, HARD))
    result = {
        "raised": None if raised is None else type(raised).__name__,
        "message": str(raised),
        "out_bytes": out_bytes,
        "whole": torch.equal(storage, storage_before),
        "version_kept": residual._version == version,
    }
    from test_failure_contract import assert_retry_matches
    try:
        assert_retry_matches(x, residual, weight, backend, expected, storage, storage_before)
        result["retry"] = "matches"
    except AssertionError as error:
        result["retry"] = str(error)
    return result


results = {}
for backend, rows, cols in (("cpp", 2048, 8192), ("triton", 128, 8192)):
    for layout in ("contiguous", "strided"):
        if backend == "triton" and not triton_ready():
            results[f"{backend}-{layout}"] = {"skip": "the Triton operators are not defined"}
            continue
        results[f"{backend}-{layout}"] = run(backend, layout, rows, cols)
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def out_of_memory_results():
    """What each route did with its output's allocation refused, from one child process."""
    if not sys.platform.startswith("linux") or not os.path.exists("/proc/self/status"):
        pytest.skip("caps the address space with RLIMIT_AS and reads /proc: Linux only")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    # The Triton kernels in the interpreter, on the CPU, on any machine.
    env.update(TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="", MALLOC_MMAP_THRESHOLD_="65536")
    here = os.path.dirname(os.path.abspath(__file__))
    proc = subprocess.run(
        [sys.executable, "-c", _OUT_OF_MEMORY, here],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


# The C++ kernel on the CPU: 64 MiB per tensor, milliseconds. The Triton kernels
# in the interpreter: 4 MiB per tensor, under a second.
@pytest.mark.parametrize("layout", ["contiguous", "strided"])
@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_cpu_out_of_memory_leaves_residual_whole(out_of_memory_results, backend, layout):
    result = out_of_memory_results[f"{backend}-{layout}"]
    if "skip" in result:
        pytest.skip(result["skip"])
    # c10's CPU allocator raises a RuntimeError (not torch.OutOfMemoryError)
    # naming the bytes asked for: those of out, after a strided residual's copy.
    assert result["raised"] == "RuntimeError", result
    assert "DefaultCPUAllocator: can't allocate memory" in result["message"], result
    assert f"you tried to allocate {result['out_bytes']} bytes" in result["message"], result
    assert result["whole"], f"{backend}: residual was written by a call that raised"
    assert result["version_kept"], f"{backend}: a call that raised bumped residual's version"
    assert result["retry"] == "matches", result["retry"]


# --- A launch that fails, on the Triton route --------------------------------


class FailingLaunch:
    """Stands in for a Triton kernel whose launch raises, as ``launchable`` returns it.

    It raises Triton's own error for a kernel that needs more shared memory
    than the GPU has, which a compiled launch raises before the kernel runs.
    """

    def __init__(self, kernel):
        self.kernel = kernel
        self.launched = []

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            from triton.runtime.errors import OutOfResources

            self.launched.append(getattr(self.kernel, "__name__", repr(self.kernel)))
            raise OutOfResources(1 << 30, 1 << 18, "shared memory")

        return launch


def _triton_devices():
    if not triton_ready():
        reason = "the Triton operators are not defined in this process"
        return [pytest.param("none", marks=pytest.mark.skip(reason=reason))]
    cpu = pytest.param(
        "cpu",
        marks=pytest.mark.skipif(
            not INTERPRET, reason="Triton's interpreter is off in this process (a GPU is visible)"
        ),
    )
    return [cpu, pytest.param("cuda", marks=pytest.mark.cuda)]


# Both launch sites: rows of 64 float32 take the kernel that holds a row in
# registers, rows of 16384 (64 KiB) the chunked one (launch.fused_config).
@pytest.mark.parametrize("shape", [(4, 64), (2, 16384)], ids=["short-rows", "long-rows"])
@pytest.mark.parametrize("layout", ["contiguous", "strided"])
@pytest.mark.parametrize("device", _triton_devices())
def test_triton_launch_failure_leaves_residual_whole(monkeypatch, device, layout, shape):
    from triton.runtime.errors import OutOfResources

    from opguide.triton import ops as triton_ops

    if device == "cuda":
        require_cuda_backend("triton")
    x, residual, weight, storage = make_case(layout, *shape, device=device)
    expected = opguide.fused_add_rms_norm_reference(x, residual, weight, EPS)
    storage_before = storage.clone()
    version = residual._version
    failing = []

    def launchable(kernel):
        failing.append(FailingLaunch(kernel))
        return failing[-1]

    with monkeypatch.context() as patch:
        patch.setattr(triton_ops, "launchable", launchable)
        with pytest.raises(OutOfResources, match="out of resource: shared memory"):
            opguide.fused_add_rms_norm_(x, residual, weight, EPS, backend="triton")
    launched = [name for f in failing for name in f.launched]
    assert len(launched) == 1 and "fused_add_rms_norm" in launched[0], launched
    assert torch.equal(storage, storage_before), "residual was written by a call that raised"
    assert residual._version == version, "a call that raised bumped residual's version"
    assert_retry_matches(x, residual, weight, "triton", expected, storage, storage_before)


# --- On a GPU ----------------------------------------------------------------


def _plug_free_blocks(device: torch.device, smallest: int) -> list[torch.Tensor]:
    """Tensors that take every free block of at least ``smallest`` bytes the allocator holds.

    An allocation takes the smallest free block that fits; each round takes
    blocks of the sizes the snapshot lists, until none of that size is free.
    """
    plugs: list[torch.Tensor] = []
    for _ in range(64):
        free = [
            block["size"]
            for segment in torch.cuda.memory_snapshot()
            if segment["device"] == device.index
            for block in segment["blocks"]
            if block["state"] == "inactive" and block["size"] >= smallest
        ]
        if not free:
            return plugs
        plugs += [torch.empty(size, dtype=torch.uint8, device=device) for size in free]
    raise AssertionError(f"free blocks of {smallest} bytes or more remain after 64 rounds")


@pytest.mark.cuda
@pytest.mark.parametrize("layout", ["contiguous", "strided"])
@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_cuda_out_of_memory_leaves_residual_whole(backend, layout):
    require_cuda_backend(backend)
    device = torch.device("cuda", torch.cuda.current_device())
    x, residual, weight, storage = make_case(layout, 2048, 8192, device="cuda")
    expected = opguide.fused_add_rms_norm_reference(x, residual, weight, EPS)
    storage_before = storage.clone()
    version = residual._version
    # The first call compiles the Triton kernel and reads the device's facts.
    opguide.fused_add_rms_norm_(x, residual.clone(), weight, EPS, backend=backend)
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    out_bytes = x.numel() * x.element_size()
    copy_bytes = out_bytes if layout == "strided" else 0
    # Free blocks left inside segments that also hold live tensors would serve
    # out without a new reservation: they are taken first.
    plugs = _plug_free_blocks(device, out_bytes // 2)
    # The caching allocator refuses to reserve past the fraction: room for the
    # dense copy of a strided residual and for half of out.
    allowed = torch.cuda.memory_reserved(device) + copy_bytes + out_bytes // 2
    total = torch.cuda.get_device_properties(device).total_memory
    torch.cuda.set_per_process_memory_fraction(allowed / total, device)
    try:
        with pytest.raises(torch.OutOfMemoryError, match="CUDA out of memory"):
            opguide.fused_add_rms_norm_(x, residual, weight, EPS, backend=backend)
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0, device)
        del plugs
    torch.cuda.synchronize(device)
    assert torch.equal(storage, storage_before), "residual was written by a call that raised"
    assert residual._version == version, "a call that raised bumped residual's version"
    assert_retry_matches(x, residual, weight, backend, expected, storage, storage_before)


@pytest.mark.cuda
def test_cuda_refusal_at_the_launch_leaves_residual_whole():
    """More rows than a launch takes: refused after out and inv_rms are allocated.

    No setting makes the CUDA kernel's launch itself fail (the planner makes
    only plans the kernel table has, and OPGUIDE_PDL, OPGUIDE_CLUSTERS only
    choose among valid launches); this check, in the launch function, is the
    one failure between the outputs' allocation and the launch. 2**31 rows of
    one float16 element take 4 GiB for each of x, residual and out and 8 GiB for inv_rms.
    """
    require_cuda_backend("cpp")
    rows = 2**31
    need = 3 * rows * 2 + rows * 4
    if torch.cuda.mem_get_info()[0] < need + (4 << 30):
        pytest.skip(f"needs {(need >> 30) + 4} GiB of free GPU memory")
    x = torch.ones(rows, 1, dtype=torch.float16, device="cuda")
    residual = torch.ones(rows, 1, dtype=torch.float16, device="cuda")
    version = residual._version
    try:
        with pytest.raises(RuntimeError, match=f"at most {2**31 - 1} rows, got {rows}"):
            opguide.fused_add_rms_norm_(x, residual, None, EPS, backend="cpp")
        torch.cuda.synchronize()
        # A write of residual would have made it 2.
        assert residual.min().item() == residual.max().item() == 1.0
        assert residual._version == version
    finally:
        del x, residual
        torch.cuda.empty_cache()
