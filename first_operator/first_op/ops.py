"""first_op::rms_norm from Python: its entry point, fake kernel and autograd formula.

The compiled library (csrc/) defines the schema and the CPU and CUDA kernels;
its ``TORCH_LIBRARY`` block names this module with ``set_python_module``.
"""

import torch


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm over the last dimension: ``x / sqrt(mean(x**2, -1) + eps) * weight``.

    Args:
        x: a floating-point tensor of shape ``(..., N)``, on the CPU or a CUDA GPU.
        weight: shape ``(N,)``, with ``x``'s dtype and device.
        eps: added to the mean of the squares.

    Returns:
        A new contiguous tensor with ``x``'s shape and dtype.

    Raises:
        TypeError: ``x`` is not floating point, or ``weight`` has another dtype.
        ValueError: ``weight`` does not have shape ``(N,)``.
        RuntimeError: ``x`` and ``weight`` are on different devices.
    """
    return torch.ops.first_op.rms_norm(x, weight, eps)


@torch.library.register_fake("first_op::rms_norm")
def _(x, weight, eps):
    # What the kernels return: a new contiguous tensor of x's shape and dtype.
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _setup_context(ctx, inputs, output):
    x, weight, eps = inputs
    ctx.save_for_backward(x, weight)
    ctx.eps = eps


def _backward(ctx, grad_y):
    # With r = 1 / sqrt(mean(x**2) + eps) per row and y = x * r * weight:
    #   grad_x = r * g - x * r**3 * mean(g * x), where g = grad_y * weight;
    #   grad_weight = the sum over rows of grad_y * x * r.
    # Computed in float32 (float64 for float64), as the kernels compute.
    x, weight = ctx.saved_tensors
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    xf, wf, gf = x.to(acc), weight.to(acc), grad_y.to(acc)
    r = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + ctx.eps)
    g = gf * wf
    grad_x = r * g - xf * r.pow(3) * (g * xf).mean(-1, keepdim=True)
    grad_weight = (gf * xf * r).reshape(-1, x.shape[-1]).sum(0)
    return grad_x.to(x.dtype), grad_weight.to(weight.dtype), None


torch.library.register_autograd(
    "first_op::rms_norm",
    _backward,
    setup_context=_setup_context,
)
