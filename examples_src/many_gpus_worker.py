"""One process of a two-process run: opguide's operators on DTensors, then one
training step of a transformer block with tensor/sequence parallelism and
with FSDP2, each checked against the same block on one device.

Run it with PyTorch's launcher, one process per GPU (NCCL), or two processes
on the CPU (gloo) when there are fewer GPUs than processes::

    torchrun --nproc-per-node 2 examples_src/many_gpus_worker.py

Rank 0 prints what it checked; every rank raises if a check fails.
"""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor
from torch.distributed.tensor.debug import CommDebugMode
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)

import opguide

EPS = 1e-6


class RMSNorm(nn.Module):
    """torch.nn.RMSNorm's interface, computed by opguide.rms_norm."""

    def __init__(self, dim: int, eps: float = EPS):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return opguide.rms_norm(x, self.weight, self.eps)


class Attention(nn.Module):
    def __init__(self, dim: int, head_dim: int = 16):
        super().__init__()
        self.head_dim = head_dim
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim, bias=False) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        # -1 heads: under tensor parallelism each device holds some of them.
        q, k, v = (
            proj(x).view(b, t, -1, self.head_dim).transpose(1, 2)
            for proj in (self.q, self.k, self.v)
        )
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(attn.transpose(1, 2).reshape(b, t, -1))


class MLP(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.up = nn.Linear(dim, 4 * dim, bias=False)
        self.down = nn.Linear(4 * dim, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x)))


class Block(nn.Module):
    """A pre-norm transformer block; ``norm`` makes its two norms."""

    def __init__(self, dim: int, norm):
        super().__init__()
        self.attn_norm, self.attn = norm(dim), Attention(dim)
        self.mlp_norm, self.mlp = norm(dim), MLP(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x + self.attn(self.attn_norm(x))
        return h + self.mlp(self.mlp_norm(h))


def tensor_parallel_plan() -> dict:
    """Sequence parallel norms between column- and row-parallel projections.

    The residual stream stays sharded on the sequence dimension (Shard(1));
    the norms run on those rows; each projection block gathers the sequence
    on the way in and reduce-scatters it on the way out.
    """
    gather_sequence = PrepareModuleInput(
        input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)
    )
    back_to_rows = RowwiseParallel(output_layouts=Shard(1), use_local_output=False)
    return {
        "attn_norm": SequenceParallel(),
        "attn": gather_sequence,
        "attn.q": ColwiseParallel(),
        "attn.k": ColwiseParallel(),
        "attn.v": ColwiseParallel(),
        "attn.o": back_to_rows,
        "mlp_norm": SequenceParallel(),
        "mlp": gather_sequence,
        "mlp.up": ColwiseParallel(),
        "mlp.down": back_to_rows,
    }


def loss_of(out: torch.Tensor) -> torch.Tensor:
    # On a sharded output the mean is a partial result (Partial("avg")) that
    # DTensor reduces when the loss is read or differentiated.
    return out.float().pow(2).mean()


def collectives(comm: CommDebugMode) -> str:
    counts = {str(op).split(".")[-1]: n for op, n in comm.get_comm_counts().items()}
    return ", ".join(f"{n} {name}" for name, n in sorted(counts.items())) or "no collective"


def main() -> None:
    world = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ["LOCAL_RANK"])
    use_gpus = torch.cuda.is_available() and torch.cuda.device_count() >= world
    if use_gpus:
        torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank) if use_gpus else torch.device("cpu")
    dist.init_process_group("nccl" if use_gpus else "gloo", device_id=device if use_gpus else None)
    rank = dist.get_rank()
    mesh = init_device_mesh(device.type, (world,))

    def say(*parts) -> None:
        if rank == 0:
            print(*parts, flush=True)

    say(f"{world} processes, backend {dist.get_backend()}, device type {device.type}")

    # Every rank makes the same full tensors (same seed); distribute_tensor
    # keeps each rank's shard. (batch, sequence, hidden), sharded on the
    # sequence: the layout of sequence parallelism.
    torch.manual_seed(0)
    x = torch.randn(2, 64, 256, device=device)
    weight = torch.rand(256, device=device) + 0.5
    expected = opguide.rms_norm(x, weight, EPS)
    w_rep = distribute_tensor(weight, mesh, [Replicate()])
    for placement in (Shard(1), Shard(0), Shard(2)):
        x_d = distribute_tensor(x, mesh, [placement])
        with CommDebugMode() as comm:
            y_d = opguide.rms_norm(x_d, w_rep, EPS)
        torch.testing.assert_close(y_d.full_tensor(), expected)
        say(f"rms_norm x {placement} -> {y_d.placements[0]}: {collectives(comm)}; equal")
        if placement != Shard(2):
            assert comm.get_total_counts() == 0, "sharded rows need no communication"

    # Backward on sharded rows: the weight's gradient is a partial sum.
    x_d = distribute_tensor(x, mesh, [Shard(1)]).requires_grad_()
    w_d = distribute_tensor(weight, mesh, [Replicate()]).requires_grad_()
    grad_y = torch.randn_like(x)
    grad_y_d = distribute_tensor(grad_y, mesh, [Shard(1)])
    with CommDebugMode() as comm:
        opguide.rms_norm(x_d, w_d, EPS).backward(grad_y_d)
    x_1, w_1 = x.clone().requires_grad_(), weight.clone().requires_grad_()
    opguide.rms_norm(x_1, w_1, EPS).backward(grad_y)
    torch.testing.assert_close(x_d.grad.full_tensor(), x_1.grad)
    torch.testing.assert_close(w_d.grad.full_tensor(), w_1.grad)
    say(
        f"backward x S(1) -> grad_x {x_d.grad.placements[0]}, "
        f"grad_weight {w_d.grad.placements[0]}: {collectives(comm)}; equal"
    )
    assert comm.get_total_counts() == 0 and w_d.grad.placements[0].is_partial()

    # The fused op updates residual in place, on each rank's rows.
    residual = torch.randn_like(x)
    r_d = distribute_tensor(residual, mesh, [Shard(1)])
    x_d = distribute_tensor(x, mesh, [Shard(1)])
    with CommDebugMode() as comm:
        out_d, _ = opguide.fused_add_rms_norm_(x_d, r_d, w_rep)
    out_1, _ = opguide.fused_add_rms_norm_(x, residual, weight)
    torch.testing.assert_close(out_d.full_tensor(), out_1)
    torch.testing.assert_close(r_d.full_tensor(), residual)
    say(
        f"fused_add_rms_norm_ x, residual S(1) -> {out_d.placements[0]}: {collectives(comm)}; equal"
    )
    assert comm.get_total_counts() == 0

    # The same block twice, once with opguide's norm and once with
    # torch.nn.RMSNorm, from the same weights; and the reference: the torch
    # block on one device, on the whole batch.
    torch.manual_seed(0)
    dim = 256
    reference = Block(dim, lambda d: nn.RMSNorm(d, eps=EPS)).to(device)
    batch = torch.randn(2 * world, 64, dim, device=device)
    loss_ref = loss_of(reference(batch))
    loss_ref.backward()
    ref_grads = {name: p.grad for name, p in reference.named_parameters()}
    ref_params = {name: p.detach() for name, p in reference.named_parameters()}

    def full(t: torch.Tensor) -> torch.Tensor:
        return t.full_tensor() if isinstance(t, DTensor) else t

    def check(label: str, model: nn.Module, loss: torch.Tensor, comm: CommDebugMode) -> None:
        # Every rank takes part in each gather, in the same order.
        grads = {name: full(p.grad) for name, p in model.named_parameters()}
        for name, grad in grads.items():
            torch.testing.assert_close(grad, ref_grads[name], atol=2e-5, rtol=2e-4)
        torch.testing.assert_close(loss, loss_ref)
        # An optimizer step: DTensor reduces each partial gradient where it
        # updates a replicated weight.
        torch.optim.SGD(model.parameters(), lr=0.1).step()
        for name, p in model.named_parameters():
            expected = ref_params[name] - 0.1 * ref_grads[name]
            torch.testing.assert_close(full(p.detach()), expected, atol=2e-5, rtol=2e-4)
        say(f"{label}: loss {loss.item():.6f}, one device {loss_ref.item():.6f}")
        say(f"    {len(grads)} gradients and SGD updates equal; {collectives(comm)}")

    for label, norm in (("opguide.rms_norm", RMSNorm), ("torch.nn.RMSNorm", nn.RMSNorm)):
        # Tensor + sequence parallel: every rank sees the whole batch, and
        # holds a slice of the sequence and of each projection.
        model = Block(dim, norm).to(device)
        model.load_state_dict(reference.state_dict())
        parallelize_module(model, mesh, tensor_parallel_plan())
        batch_d = distribute_tensor(batch, mesh, [Shard(1)])
        with CommDebugMode() as comm:
            out = model(batch_d)
            loss = loss_of(out)
            loss.backward()
        check(f"TP/SP {label}", model, loss.full_tensor(), comm)

        # FSDP2: every rank holds a shard of every weight and its own part of
        # the batch; the weights are gathered for each use, the gradients
        # reduce-scattered (averaged).
        model = Block(dim, norm).to(device)
        model.load_state_dict(reference.state_dict())
        fully_shard(model, mesh=mesh)
        rows = batch.shape[0] // world
        with CommDebugMode() as comm:
            loss = loss_of(model(batch[rank * rows : (rank + 1) * rows]))
            loss.backward()
        mean_loss = loss.detach().clone()
        dist.all_reduce(mean_loss)
        check(f"FSDP2 {label}", model, mean_loss / world, comm)

    say("all checks passed")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
    # Every check has passed and the process group is destroyed. On gloo the
    # interpreter's shutdown can abort ("terminate called without an active
    # exception") after the checks are done, so the process leaves without it.
    sys.stdout.flush()
    os._exit(0)
