"""Autograd for the Triton operators, registered with ``register_autograd``.

The training forward ``opguide::rms_norm_forward_triton`` saves x, weight and
inv_rms; its backward is ``opguide::rms_norm_backward_triton``, which takes
the arguments of the C++ ``opguide::rms_norm_backward``, so either backend's
backward serves either forward.
"""

import torch

from .ops import rms_norm_backward_triton, rms_norm_forward_triton


def _forward_setup_context(ctx, inputs, output):
    x, weight, _eps = inputs
    _y, inv_rms = output
    ctx.save_for_backward(x, weight, inv_rms)
    ctx.mark_non_differentiable(inv_rms)
    ctx.set_materialize_grads(False)  # no zeros allocated for inv_rms's gradient


def _forward_op_backward(ctx, grad_y, _grad_inv_rms):
    if grad_y is None:  # y took no part in the loss
        return None, None, None
    x, weight, inv_rms = ctx.saved_tensors
    grad_x, grad_weight = rms_norm_backward_triton(grad_y, x, weight, inv_rms)
    return (
        grad_x if ctx.needs_input_grad[0] else None,
        grad_weight if ctx.needs_input_grad[1] else None,
        None,  # no gradient for eps
    )


torch.library.register_autograd(
    "opguide::rms_norm_forward_triton", _forward_op_backward, setup_context=_forward_setup_context
)


# The inference operator keeps no inv_rms: called directly with inputs that
# require grad, its backward recomputes it first.
def _setup_context(ctx, inputs, output):
    x, weight, eps = inputs
    ctx.save_for_backward(x, weight)
    ctx.eps = eps


def _backward(ctx, grad_y):
    x, weight = ctx.saved_tensors
    _, inv_rms = rms_norm_forward_triton(x, weight, ctx.eps)
    grad_x, grad_weight = rms_norm_backward_triton(grad_y, x, weight, inv_rms)
    return grad_x, grad_weight, None  # no gradient for eps


torch.library.register_autograd("opguide::rms_norm_triton", _backward, setup_context=_setup_context)


# The backward operator has no derivative of its own. Without an autograd
# kernel a double backward (torch.autograd.grad(..., create_graph=True), then a
# second backward) would pass through it with a warning and zero gradients;
# with this one the second backward is an error that names the operator.
def _backward_op_backward(ctx, *grads):
    raise RuntimeError(
        "opguide::rms_norm_backward_triton has no derivative: a double backward "
        "through opguide's Triton RMSNorm is not supported"
    )


torch.library.register_autograd("opguide::rms_norm_backward_triton", _backward_op_backward)
