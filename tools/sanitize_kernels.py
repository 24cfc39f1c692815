"""Runs every CUDA kernel of opguide once per case, for compute-sanitizer.

    compute-sanitizer --tool memcheck  python3 tools/sanitize_kernels.py
    compute-sanitizer --tool racecheck python3 tools/sanitize_kernels.py
    compute-sanitizer --tool racecheck python3 tools/sanitize_kernels.py --fused-only

``--fused-only`` runs the fused kernel alone (CUDA and Triton), on a few
shapes: racecheck is slow, and this run reaches its summary in minutes.
``--long-rows`` runs the long-row kernels alone (csrc/rms_norm/*_cluster.cuh,
csrc/rms_norm/rms_norm_backward_chunked.cuh, csrc/fused_add_rms_norm/*_cluster.cuh:
clusters and two passes; the Triton split and chunked kernels), forward,
backward and fused (the CUDA fused kernel with a float32 residual too);
add ``--cpp`` to run the CUDA C++ kernels alone (racecheck is much slower
over the Triton kernels), and ``--small`` for fewer, smaller rows that still
give each cluster several rows (racecheck of the full set takes minutes).
``--narrow`` runs the kernels on rows that are not whole 16-byte vectors, or
that start off a 16-byte boundary (8-byte, 4-byte and one-element accesses;
the Triton kernels with their ALIGN hint), forward, backward and fused.

Each case checks its result against the reference, so a run that the
sanitizer passes also computed the right numbers. The cases cover the vector
and scalar paths, rows longer than the register cache, several rows per
block, strided rows, the backward kernels and the fused kernel. Exits non-zero
on a wrong result.
"""

import sys

import torch

import opguide
from opguide.reference import rms_norm_reference


def check_training(x, w, backend: str, tol: float, per_row: float) -> None:
    """A forward and backward through ``backend`` against autograd through the reference.

    x.grad is held to ``tol``; w.grad, a sum over the rows, to ``per_row``
    times their number (absolute) and ``tol`` (relative).
    """
    m = x.shape[0]
    grad_y = torch.randn_like(x)
    opguide.rms_norm(x, w, backend=backend).backward(grad_y)
    xr = x.detach().float().requires_grad_()
    wr = w.detach().float().requires_grad_()
    rms_norm_reference(xr, wr, 1e-6).backward(grad_y.float())
    torch.testing.assert_close(x.grad.float(), xr.grad, atol=tol, rtol=tol)
    torch.testing.assert_close(w.grad.float(), wr.grad, atol=per_row * m, rtol=tol)


def long_rows(cpp_only: bool = False, small: bool = False) -> int:
    """The long-row kernels of each backend: clusters, split rows, two passes, chunks."""
    torch.manual_seed(0)
    with_triton = opguide.backends.triton_ready() and not cpp_only
    backends = ["cpp"] + (["triton"] if with_triton else [])
    cases = 0
    for backend in backends:
        # float16 too for the CUDA kernels: each dtype is its own instantiation.
        dtypes = (torch.float32, torch.bfloat16) + ((torch.float16,) if backend == "cpp" else ())
        for dtype in dtypes:
            # 300 rows of 65536: more rows than the clusters that fit at once;
            # 100003: odd, the chunked kernels; 16384 float32: 4 vectors per thread.
            shapes = [(3, 65536), (300, 65536), (2, 131072), (3, 100003), (40, 16384)]
            if small:  # more rows than clusters fit at once, as in (300, 65536)
                shapes = [(40, 65536), (20, 131072), (3, 100003)]
            for m, n in shapes:
                x = torch.randn(m, n, device="cuda", dtype=dtype, requires_grad=True)
                w = torch.randn(n, device="cuda", dtype=dtype, requires_grad=True)
                t = 1e-4 if dtype == torch.float32 else 6e-2
                check_training(x, w, backend, t, t)
                res = torch.randn(m, n, device="cuda", dtype=dtype)
                xd, wd = x.detach(), w.detach()
                out, _ = opguide.fused_add_rms_norm_(xd, res.clone(), wd, 1e-6, backend=backend)
                h = (res.float() + xd.float()).to(dtype)
                torch.testing.assert_close(
                    out, rms_norm_reference(h, wd, 1e-6), atol=t, rtol=t
                )  # fmt: skip
                cases += 1
                if backend == "cpp" and dtype != torch.float32:
                    # The fused kernel with a float32 residual stream: x's
                    # vectors are then 8 bytes, staged with 8-byte cp.async.
                    res = torch.randn(m, n, device="cuda", dtype=torch.float32)
                    out, _ = opguide.fused_add_rms_norm_(xd, res.clone(), wd, 1e-6)
                    expected = rms_norm_reference(res + xd.float(), wd.float(), 1e-6)
                    torch.testing.assert_close(out.float(), expected, atol=t, rtol=t)
                    cases += 1
    torch.cuda.synchronize()
    print(f"{cases} long-row cases ({', '.join(backends)}) ran and matched the reference")
    return 0


def narrow() -> int:
    """Rows of 8-byte, 4-byte and one-element accesses, in every kernel that has them."""
    torch.manual_seed(0)
    backends = ["cpp"] + (["triton"] if opguide.backends.triton_ready() else [])
    cases = 0
    for backend in backends:
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            t = 1e-4 if dtype == torch.float32 else 6e-2
            # 36 and 2052: 8-byte accesses (several rows per block for 36);
            # 2050: 4 bytes; 2049: one element; 8200: eight 8-byte vectors
            # per thread in the backward. offset 2 starts each row 4 bytes
            # past a 16-byte boundary (16-bit types) or 8 bytes (float32).
            for (m, n), offset in [((130, 36), 0), ((33, 2052), 0), ((33, 2050), 0),
                                   ((33, 2049), 0), ((9, 8200), 0), ((33, 2052), 2),
                                   ((9, 8200), 2)]:  # fmt: skip
                flat = torch.randn(m * n + offset, device="cuda", dtype=dtype)
                x = flat[offset:].view(m, n).requires_grad_()
                w = torch.randn(n, device="cuda", dtype=dtype, requires_grad=True)
                check_training(x, w, backend, t * 4, t)
                xd, wd = x.detach(), w.detach()
                res = torch.randn(m * n + offset, device="cuda", dtype=dtype)[offset:].view(m, n)
                h = (res.float() + xd.float()).to(dtype)
                out, _ = opguide.fused_add_rms_norm_(xd, res, wd, 1e-6, backend=backend)
                torch.testing.assert_close(out, rms_norm_reference(h, wd, 1e-6), atol=t, rtol=t)
                cases += 1
    torch.cuda.synchronize()
    print(f"{cases} narrow-access cases ({', '.join(backends)}) ran and matched the reference")
    return 0


def fused_only() -> int:
    """The fused kernel of each backend on the shapes of its code paths."""
    torch.manual_seed(0)
    backends = ["cpp"] + (["triton"] if opguide.backends.triton_ready() else [])
    cases = 0
    for backend in backends:
        for dtype in (torch.float32, torch.bfloat16):
            # 40000: past the register cache of the CUDA kernel and of Triton's
            # (16384 float32 elements), whose fused kernel then walks the row in chunks.
            shapes = [(5, 13), (33, 1024), (4, 8192), (2, 40000)]
            for m, n in shapes:
                x = torch.randn(m, n, device="cuda", dtype=dtype)
                w = torch.randn(n, device="cuda", dtype=dtype)
                res = torch.randn_like(x)
                out, _ = opguide.fused_add_rms_norm_(x, res.clone(), w, 1e-6, backend=backend)
                h = (res.float() + x.float()).to(dtype)
                t = 1e-4 if dtype == torch.float32 else 5e-2
                expected = rms_norm_reference(h, w, 1e-6)
                torch.testing.assert_close(out, expected, atol=t, rtol=t)
                cases += 1
    torch.cuda.synchronize()
    print(f"{cases} fused cases ({', '.join(backends)}) ran and matched the reference")
    return 0


def main() -> int:
    if "--fused-only" in sys.argv[1:]:
        return fused_only()
    if "--narrow" in sys.argv[1:]:
        return narrow()
    if "--long-rows" in sys.argv[1:]:
        return long_rows(cpp_only="--cpp" in sys.argv[1:], small="--small" in sys.argv[1:])
    torch.manual_seed(0)
    dev = "cuda"
    tol = {torch.float32: 1e-4, torch.float16: 2e-2, torch.bfloat16: 5e-2}
    cases = 0
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        # Long rows (past the register cache), odd widths (scalar path),
        # short rows (several rows per block), a ragged last block, and more
        # rows than the backward grid has row slots (its pipeline cycles).
        shapes = [(7, 4096), (3, 40000), (5, 13), (33, 64), (130, 1024), (2, 8192),
                  (3000, 1024), (1500, 4096), (700, 8192)]  # fmt: skip
        for m, n in shapes:
            x = torch.randn(m, n, device=dev, dtype=dtype)
            w = torch.randn(n, device=dev, dtype=dtype)
            t = tol[dtype]
            y = torch.ops.opguide.rms_norm(x, w, 1e-6)
            torch.testing.assert_close(y, rms_norm_reference(x, w, 1e-6), atol=t, rtol=t)
            y2, inv_rms = torch.ops.opguide.rms_norm_fwd(x, w, 1e-6)
            torch.testing.assert_close(y2, y)
            grad_y = torch.randn_like(x)
            grad_x, grad_weight = torch.ops.opguide.rms_norm_backward(grad_y, x, w, inv_rms)
            xr = x.float().requires_grad_()
            wr = w.float().requires_grad_()
            rms_norm_reference(xr, wr, 1e-6).backward(grad_y.float())
            torch.testing.assert_close(grad_x.float(), xr.grad, atol=t * 4, rtol=t * 4)
            torch.testing.assert_close(grad_weight.float(), wr.grad, atol=t * m, rtol=t * 4)
            res = torch.randn_like(x)
            out, _ = opguide.fused_add_rms_norm_(x, res.clone(), w, 1e-6)
            h = (res.float() + x.float()).to(dtype)
            torch.testing.assert_close(out, rms_norm_reference(h, w, 1e-6), atol=t, rtol=t)
            cases += 1
        # Strided rows: a slice of a wider matrix.
        wide = torch.randn(9, 4104, device=dev, dtype=dtype)
        xs = wide[:, :4096]
        w = torch.randn(4096, device=dev, dtype=dtype)
        y = torch.ops.opguide.rms_norm(xs, w, 1e-6)
        torch.testing.assert_close(
            y, rms_norm_reference(xs, w, 1e-6), atol=tol[dtype], rtol=tol[dtype]
        )
        cases += 1
    torch.cuda.synchronize()
    print(f"{cases} cases ran and matched the reference")
    return 0


if __name__ == "__main__":
    sys.exit(main())
