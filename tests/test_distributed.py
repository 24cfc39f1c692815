"""The sharding rules of ``opguide.distributed``, in two processes.

Each test spawns two processes that form a process group: NCCL with one GPU
each when the machine has two GPUs, gloo on the CPU otherwise. The checks run
in every process; a failure in either fails the test. What is checked:
placements of every output, values against one device, and the number of
collectives each call issues (``CommDebugMode``): none where the rows are
split.
"""

from __future__ import annotations

import os
import socket
import sys

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Partial, Replicate, Shard, distribute_tensor
from torch.distributed.tensor.debug import CommDebugMode

import opguide
import opguide.distributed  # noqa: F401  (the sharding rules)
from opguide.backends import triton_ready

pytestmark = pytest.mark.skipif(
    not dist.is_available() or not dist.is_gloo_available(),
    reason="torch.distributed with gloo is not available in this torch build",
)
WORLD = 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(rank: int, check, port: int) -> None:
    use_gpus = torch.cuda.is_available() and torch.cuda.device_count() >= WORLD
    device = torch.device("cuda", rank) if use_gpus else torch.device("cpu")
    if use_gpus:
        torch.cuda.set_device(device)
    dist.init_process_group(
        "nccl" if use_gpus else "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=WORLD,
    )
    try:
        check(init_device_mesh(device.type, (WORLD,)), device)
    finally:
        dist.destroy_process_group()
    # The check passed. With torch 2.13 on gloo the interpreter's shutdown
    # sometimes aborts after this point ("terminate called without an active
    # exception"); leave without it, as the many-GPU worker does.
    sys.stdout.flush()
    os._exit(0)


def run_on_two(check) -> None:
    """Runs ``check(mesh, device)`` in two processes; raises if either fails."""
    mp.spawn(_entry, args=(check, _free_port()), nprocs=WORLD, join=True)


def _same_randn_like(x: torch.Tensor, seed: int) -> torch.Tensor:
    """The same random tensor in every process (distribute_tensor expects it)."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(x.shape, generator=gen).to(x.device, x.dtype)


def _inputs(shape, device, dtype=torch.float32):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=gen).to(device, dtype)
    weight = (torch.rand(shape[-1], generator=gen) + 0.5).to(device, dtype)
    return x, weight


# The checks run in the spawned processes, so they are module-level functions.


def _check_forward_ops_keep_row_shards(mesh, device):

    ops = torch.ops.opguide
    for shape in [(6, 40), (5, 40), (2, 7, 40)]:  # (5, 40): uneven shards
        x, weight = _inputs(shape, device)
        w_d = distribute_tensor(weight, mesh, [Replicate()])
        expected, expected_inv = ops.rms_norm_forward(x, weight, 1e-6)
        for dim in range(len(shape) - 1):
            x_d = distribute_tensor(x, mesh, [Shard(dim)])
            with CommDebugMode() as comm:
                y = ops.rms_norm(x_d, w_d, 1e-6)
                y_forward, inv_rms = ops.rms_norm_forward(x_d, w_d, 1e-6)
                y_public = opguide.rms_norm(x_d, w_d, 1e-6)
            assert comm.get_total_counts() == 0, (shape, dim, comm.get_comm_counts())
            for out in (y, y_forward, y_public):
                assert out.placements == (Shard(dim),) and out.shape == x.shape
            assert inv_rms.placements == (Shard(dim),) and inv_rms.shape == shape[:-1]
            for out in (y, y_forward, y_public):
                torch.testing.assert_close(out.full_tensor(), expected)
            torch.testing.assert_close(inv_rms.full_tensor(), expected_inv)
        # Replicated in, replicated out, no communication.
        x_r = distribute_tensor(x, mesh, [Replicate()])
        with CommDebugMode() as comm:
            y = ops.rms_norm(x_r, w_d, 1e-6)
        assert comm.get_total_counts() == 0 and y.placements == (Replicate(),)
        torch.testing.assert_close(y.to_local(), expected)


def test_forward_ops_keep_row_shards_without_communication():
    run_on_two(_check_forward_ops_keep_row_shards)


def _check_normalised_dim_is_redistributed(mesh, device):

    x, weight = _inputs((6, 40), device)
    x_d = distribute_tensor(x, mesh, [Shard(1)])
    w_d = distribute_tensor(weight, mesh, [Replicate()])
    with CommDebugMode() as comm:
        y = opguide.rms_norm(x_d, w_d, 1e-6)
    # Whole rows first (at least one collective), then the kernel.
    assert comm.get_total_counts() >= 1
    assert all(not (isinstance(p, Shard) and p.dim == 1) for p in y.placements)
    torch.testing.assert_close(y.full_tensor(), opguide.rms_norm(x, weight, 1e-6))


def test_sharded_normalised_dimension_is_redistributed_and_correct():
    run_on_two(_check_normalised_dim_is_redistributed)


def _check_backward(mesh, device):

    x, weight = _inputs((4, 6, 40), device)
    grad_y = _same_randn_like(x, 1)
    x_1, w_1 = x.clone().requires_grad_(), weight.clone().requires_grad_()
    opguide.rms_norm(x_1, w_1, 1e-6).backward(grad_y)
    for dim in (0, 1):
        x_d = distribute_tensor(x, mesh, [Shard(dim)]).requires_grad_()
        w_d = distribute_tensor(weight, mesh, [Replicate()]).requires_grad_()
        grad_d = distribute_tensor(grad_y, mesh, [Shard(dim)])
        with CommDebugMode() as comm:
            opguide.rms_norm(x_d, w_d, 1e-6).backward(grad_d)
        assert comm.get_total_counts() == 0, comm.get_comm_counts()
        assert x_d.grad.placements == (Shard(dim),)
        assert w_d.grad.placements == (Partial("sum"),)
        torch.testing.assert_close(x_d.grad.full_tensor(), x_1.grad)
        torch.testing.assert_close(w_d.grad.full_tensor(), w_1.grad)
    # The backward operator called directly: the same placements.
    _, inv_rms = torch.ops.opguide.rms_norm_forward(x, weight, 1e-6)
    args = [distribute_tensor(t, mesh, [Shard(0)]) for t in (grad_y, x)]
    args.insert(2, distribute_tensor(weight, mesh, [Replicate()]))
    args.append(distribute_tensor(inv_rms, mesh, [Shard(0)]))
    grad_x, grad_weight = torch.ops.opguide.rms_norm_backward(*args)
    assert grad_x.placements == (Shard(0),) and grad_weight.placements == (Partial("sum"),)
    torch.testing.assert_close(grad_weight.full_tensor(), w_1.grad)


def test_backward_keeps_shards_and_returns_a_partial_weight_gradient():
    run_on_two(_check_backward)


def _check_fused(mesh, device):

    for shape in [(6, 40), (5, 40), (2, 7, 40)]:
        x, weight = _inputs(shape, device)
        residual = _same_randn_like(x, 2)
        for dim in range(len(shape) - 1):
            r_1 = residual.clone()
            out_1, inv_1 = opguide.fused_add_rms_norm_(x, r_1, weight)
            x_d = distribute_tensor(x, mesh, [Shard(dim)])
            r_d = distribute_tensor(residual, mesh, [Shard(dim)])
            w_d = distribute_tensor(weight, mesh, [Replicate()])
            with CommDebugMode() as comm:
                out, inv_rms = opguide.fused_add_rms_norm_(x_d, r_d, w_d)
            assert comm.get_total_counts() == 0
            assert out.placements == r_d.placements == (Shard(dim),)
            assert out.shape == x.shape and inv_rms.shape == shape[:-1]
            torch.testing.assert_close(out.full_tensor(), out_1)
            torch.testing.assert_close(inv_rms.full_tensor(), inv_1)
            torch.testing.assert_close(r_d.full_tensor(), r_1)  # updated in place
        # Without a weight, and x in another layout than residual: x moves.
        r_1 = residual.clone()
        out_1, _ = opguide.fused_add_rms_norm_(x, r_1, None)
        r_d = distribute_tensor(residual, mesh, [Shard(0)])
        out, _ = opguide.fused_add_rms_norm_(distribute_tensor(x, mesh, [Replicate()]), r_d, None)
        torch.testing.assert_close(out.full_tensor(), out_1)
        torch.testing.assert_close(r_d.full_tensor(), r_1)
    # residual split along its rows cannot be updated in place: a clear error.
    x, weight = _inputs((6, 40), device)
    r_d = distribute_tensor(_same_randn_like(x, 3), mesh, [Shard(1)])
    x_d = distribute_tensor(x, mesh, [Shard(1)])
    w_d = distribute_tensor(weight, mesh, [Replicate()])
    try:
        opguide.fused_add_rms_norm_(x_d, r_d, w_d)
    except RuntimeError as error:
        assert "residual is updated in place" in str(error) and "Shard(dim=1)" in str(error)
    else:
        raise AssertionError("a residual sharded along its rows was accepted")


def test_fused_op_updates_residual_shards_in_place():
    run_on_two(_check_fused)


def _check_triton(mesh, device):

    if not triton_ready():
        return
    from opguide.triton import INTERPRET

    if device.type == "cpu" and not INTERPRET:
        return
    x, weight = _inputs((6, 40), device)
    x_d = distribute_tensor(x, mesh, [Shard(0)]).requires_grad_()
    w_d = distribute_tensor(weight, mesh, [Replicate()]).requires_grad_()
    grad_y = _same_randn_like(x, 1)
    grad_d = distribute_tensor(grad_y, mesh, [Shard(0)])
    with CommDebugMode() as comm:
        y = opguide.rms_norm(x_d, w_d, 1e-6, backend="triton")
        y.backward(grad_d)
    assert y.placements == (Shard(0),) and w_d.grad.placements == (Partial("sum"),)
    assert comm.get_total_counts() == 0, comm.get_comm_counts()
    x_1, w_1 = x.clone().requires_grad_(), weight.clone().requires_grad_()
    opguide.rms_norm(x_1, w_1, 1e-6, backend="triton").backward(grad_y)
    torch.testing.assert_close(y.full_tensor(), opguide.rms_norm(x, weight, 1e-6))
    torch.testing.assert_close(w_d.grad.full_tensor(), w_1.grad)


def test_triton_backend_on_row_shards():
    pytest.importorskip("triton")
    run_on_two(_check_triton)
