"""Runs every CUDA kernel of opguide once per case, for compute-sanitizer.

    compute-sanitizer --tool memcheck  python3 tools/sanitize_kernels.py
    compute-sanitizer --tool racecheck python3 tools/sanitize_kernels.py
    compute-sanitizer --tool racecheck python3 tools/sanitize_kernels.py --fused-only

``--fused-only`` runs the fused kernel alone (CUDA and Triton), on a few
shapes: racecheck is slow, and this run reaches its summary in minutes.
``--long-rows`` runs the long-row kernels alone (clusters and two passes in
CUDA; the Triton split and chunked kernels), forward, backward and fused (the
CUDA fused kernel with a float32 residual too); add ``--cpp`` to run the CUDA
C++ kernels alone (racecheck is much slower over the Triton kernels), and
``--small`` for fewer, smaller rows that still give each cluster several rows
(racecheck of the full set takes minutes). ``--narrow`` runs the kernels on
rows that are not whole 16-byte vectors, or that start off a 16-byte boundary
(8-byte, 4-byte and one-element accesses; the Triton kernels with their ALIGN
hint), forward, backward and fused.

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

EPS = 1e-6


def tolerance(dtype: torch.dtype) -> float:
    return 1e-4 if dtype == torch.float32 else 6e-2


def check_training(x, w, backend: str, tol: float, per_row: float) -> None:
    """A forward and backward through ``backend`` against autograd through the reference.

    x.grad is held to ``tol``; w.grad, a sum over the rows, to ``per_row``
    times their number (absolute) and ``tol`` (relative).
    """
    x, w = x.detach().requires_grad_(), w.detach().requires_grad_()
    grad_y = torch.randn_like(x)
    opguide.rms_norm(x, w, backend=backend).backward(grad_y)
    xr = x.detach().float().requires_grad_()
    wr = w.detach().float().requires_grad_()
    rms_norm_reference(xr, wr, EPS).backward(grad_y.float())
    torch.testing.assert_close(x.grad.float(), xr.grad, atol=tol, rtol=tol)
    torch.testing.assert_close(w.grad.float(), wr.grad, atol=per_row * x.shape[0], rtol=tol)


def check_fused(x, residual, w, backend: str, tol: float) -> None:
    """The fused operator through ``backend`` (``residual`` updated in place) against
    the reference of ``residual + x``."""
    h = residual.float() + x.float()
    out, _ = opguide.fused_add_rms_norm_(x, residual, w, EPS, backend=backend)
    expected = rms_norm_reference(h.to(residual.dtype), w.to(residual.dtype), EPS)
    torch.testing.assert_close(out.float(), expected.float(), atol=tol, rtol=tol)


def backends(cpp_only: bool = False) -> list[str]:
    return ["cpp"] + (["triton"] if opguide.backends.triton_ready() and not cpp_only else [])


def randn(*shape, dtype):
    return torch.randn(*shape, device="cuda", dtype=dtype)


def long_rows(cpp_only: bool = False, small: bool = False) -> int:
    """The long-row kernels of each backend: clusters, split rows, two passes, chunks."""
    cases = 0
    for backend in backends(cpp_only):
        # float16 too for the CUDA kernels: each dtype is its own instantiation.
        dtypes = (torch.float32, torch.bfloat16) + ((torch.float16,) if backend == "cpp" else ())
        for dtype in dtypes:
            # 300 rows of 65536: more rows than the clusters that fit at once;
            # 100003: odd, the chunked kernels; 16384 float32: 4 vectors per thread.
            shapes = [(3, 65536), (300, 65536), (2, 131072), (3, 100003), (40, 16384)]
            if small:  # more rows than clusters fit at once, as in (300, 65536)
                shapes = [(40, 65536), (20, 131072), (3, 100003)]
            for m, n in shapes:
                x, w, t = randn(m, n, dtype=dtype), randn(n, dtype=dtype), tolerance(dtype)
                check_training(x, w, backend, t, t)
                check_fused(x, randn(m, n, dtype=dtype), w, backend, t)
                cases += 1
                if backend == "cpp" and dtype != torch.float32:
                    # The fused kernel with a float32 residual stream: x's
                    # vectors are then 8 bytes, staged with 8-byte cp.async.
                    check_fused(x, randn(m, n, dtype=torch.float32), w, backend, t)
                    cases += 1
    return done(cases, "long-row cases", backends(cpp_only))


def narrow() -> int:
    """Rows of 8-byte, 4-byte and one-element accesses, in every kernel that has them."""
    cases = 0
    for backend in backends():
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            t = tolerance(dtype)
            # 36 and 2052: 8-byte accesses (several rows per block for 36);
            # 2050: 4 bytes; 2049: one element; 8200: eight 8-byte vectors
            # per thread in the backward. offset 2 starts each row 4 bytes
            # past a 16-byte boundary (16-bit types) or 8 bytes (float32).
            for (m, n), offset in [((130, 36), 0), ((33, 2052), 0), ((33, 2050), 0),
                                   ((33, 2049), 0), ((9, 8200), 0), ((33, 2052), 2),
                                   ((9, 8200), 2)]:  # fmt: skip
                x = randn(m * n + offset, dtype=dtype)[offset:].view(m, n)
                w = randn(n, dtype=dtype)
                check_training(x, w, backend, t * 4, t)
                residual = randn(m * n + offset, dtype=dtype)[offset:].view(m, n)
                check_fused(x, residual, w, backend, t)
                cases += 1
    return done(cases, "narrow-access cases", backends())


def fused_only() -> int:
    """The fused kernel of each backend on the shapes of its code paths."""
    cases = 0
    for backend in backends():
        for dtype in (torch.float32, torch.bfloat16):
            # 40000: past the register cache of the CUDA kernel and of Triton's
            # (16384 float32 elements), whose fused kernel then walks the row in chunks.
            for m, n in [(5, 13), (33, 1024), (4, 8192), (2, 40000)]:
                x, w = randn(m, n, dtype=dtype), randn(n, dtype=dtype)
                check_fused(x, randn(m, n, dtype=dtype), w, backend, tolerance(dtype))
                cases += 1
    return done(cases, "fused cases", backends())


def every_kernel() -> int:
    """The compiled operators called directly, then the fused one, on every code path."""
    cases = 0
    for dtype, t in ((torch.float32, 1e-4), (torch.float16, 2e-2), (torch.bfloat16, 5e-2)):
        # Long rows (past the register cache), odd widths (scalar path),
        # short rows (several rows per block), a ragged last block, and more
        # rows than the backward grid has row slots (its pipeline cycles).
        shapes = [(7, 4096), (3, 40000), (5, 13), (33, 64), (130, 1024), (2, 8192),
                  (3000, 1024), (1500, 4096), (700, 8192)]  # fmt: skip
        for m, n in shapes:
            x, w = randn(m, n, dtype=dtype), randn(n, dtype=dtype)
            y = torch.ops.opguide.rms_norm(x, w, EPS)
            torch.testing.assert_close(y, rms_norm_reference(x, w, EPS), atol=t, rtol=t)
            y2, inv_rms = torch.ops.opguide.rms_norm_forward(x, w, EPS)
            torch.testing.assert_close(y2, y)
            grad_y = torch.randn_like(x)
            grad_x, grad_weight = torch.ops.opguide.rms_norm_backward(grad_y, x, w, inv_rms)
            xr = x.detach().float().requires_grad_()  # a copy also for float32 x
            wr = w.detach().float().requires_grad_()
            rms_norm_reference(xr, wr, EPS).backward(grad_y.float())
            torch.testing.assert_close(grad_x.float(), xr.grad, atol=t * 4, rtol=t * 4)
            torch.testing.assert_close(grad_weight.float(), wr.grad, atol=t * m, rtol=t * 4)
            check_fused(x, torch.randn_like(x), w, "cpp", t)
            cases += 1
        # Strided rows: a slice of a wider matrix.
        xs, w = randn(9, 4104, dtype=dtype)[:, :4096], randn(4096, dtype=dtype)
        y = torch.ops.opguide.rms_norm(xs, w, EPS)
        torch.testing.assert_close(y, rms_norm_reference(xs, w, EPS), atol=t, rtol=t)
        cases += 1
    return done(cases, "cases", ["cpp"])


def done(cases: int, what: str, ran: list[str]) -> int:
    torch.cuda.synchronize()
    print(f"{cases} {what} ({', '.join(ran)}) ran and matched the reference")
    return 0


def main(args: list[str]) -> int:
    torch.manual_seed(0)
    if "--fused-only" in args:
        return fused_only()
    if "--narrow" in args:
        return narrow()
    if "--long-rows" in args:
        return long_rows(cpp_only="--cpp" in args, small="--small" in args)
    return every_kernel()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
