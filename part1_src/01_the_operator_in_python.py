r"""
1. The operator in Python
=========================

An *operator* is a function that PyTorch knows by name, with a schema that
says its arguments and results. Written as one, RMSNorm works with autograd,
``torch.compile`` and ``torch.export`` like PyTorch's own functions. This page
writes it in Python with :func:`torch.library.custom_op`; the later pages
give it a C++ and a CUDA kernel behind the same schema, and keep the rest of
what this page writes.

On this page you will:

* declare the operator with :func:`torch.library.custom_op`;
* give it a *fake kernel* (:func:`torch.library.register_fake`), which the
  compilers call instead of the real one;
* give it a backward (:func:`torch.library.register_autograd`) and check the
  gradients with :func:`torch.autograd.gradcheck`;
* test the registration with :func:`torch.library.opcheck`;
* compile it with ``torch.compile(fullgraph=True)`` and export it with
  :func:`torch.export.export`.

RMSNorm normalises each row of ``x`` (its last dimension, of length ``N``) by
the root of its mean square, then scales it:
``y = x / sqrt(mean(x**2) + eps) * weight``, with ``weight`` of shape ``(N,)``.
The page needs only torch: it runs as it is in any folder.
"""

# %%
# The operator
# ------------
# ``custom_op`` turns a function with type annotations into the operator
# ``torch.ops.mylib.rms_norm``: the schema comes from the annotations, and
# ``mutates_args=()`` promises that no input is written. The body sums in
# float32 (float64 for float64 inputs) and rounds the result once, and returns
# a dense (contiguous) tensor whatever the strides of ``x``, as the compiled
# kernels will.
import torch


@torch.library.custom_op("mylib::rms_norm", mutates_args=())
def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    xf = x.to(acc)
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.to(acc)
    return y.to(x.dtype).contiguous()


print(torch.ops.mylib.rms_norm.default._schema)

# %%
# Called by its name through ``torch.ops``, or as the Python function, it
# gives what PyTorch's own :func:`torch.nn.functional.rms_norm` gives:
torch.manual_seed(0)
x = torch.randn(4, 8)
weight = torch.randn(8)
y = torch.ops.mylib.rms_norm(x, weight, 1e-6)
expected = torch.nn.functional.rms_norm(x, (8,), weight, eps=1e-6)
torch.testing.assert_close(y, expected)
print("largest difference from F.rms_norm:", (y - expected).abs().max().item())

# %%
# The fake kernel
# ---------------
# ``torch.compile`` and ``torch.export`` trace a program with *fake* tensors:
# they have a shape, a dtype, strides and a device, but no data. For an
# operator, they call its fake kernel, which must say what the real kernel
# returns without computing it: here a new tensor of ``x``'s shape and dtype,
# with dense (contiguous) strides, as the body returns.


@rms_norm.register_fake
def _(x, weight, eps):
    return torch.empty_like(x, memory_format=torch.contiguous_format)


# %%
# The backward
# ------------
# Autograd cannot look inside an operator: it needs the gradient formula.
# With ``r = 1 / sqrt(mean(x**2) + eps)`` for a row and ``g = grad_y * weight``,
# ``grad_x = r * g - x * r**3 * mean(g * x)``, and ``grad_weight`` adds
# ``grad_y * x * r`` over the rows. ``setup_context`` saves what the backward
# needs; the backward returns one gradient per input (``None`` for ``eps``),
# summed in float32 as the forward is.


def setup_context(ctx, inputs, output):
    x, weight, eps = inputs
    ctx.save_for_backward(x, weight)
    ctx.eps = eps


def backward(ctx, grad_y):
    x, weight = ctx.saved_tensors
    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    xf, wf, gf = x.to(acc), weight.to(acc), grad_y.to(acc)
    r = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + ctx.eps)
    g = gf * wf
    grad_x = r * g - xf * r.pow(3) * (g * xf).mean(-1, keepdim=True)
    grad_weight = (gf * xf * r).reshape(-1, x.shape[-1]).sum(0)
    return grad_x.to(x.dtype), grad_weight.to(weight.dtype), None


rms_norm.register_autograd(backward, setup_context=setup_context)

# %%
# :func:`torch.autograd.gradcheck` compares these gradients with finite
# differences of the operator, in float64, where the two agree closely:
x64 = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
weight64 = torch.randn(5, dtype=torch.float64, requires_grad=True)
print("gradcheck:", torch.autograd.gradcheck(rms_norm, (x64, weight64, 1e-6)))

# %%
# The same gradients as PyTorch's RMSNorm, in float32:
xg = x.clone().requires_grad_()
wg = weight.clone().requires_grad_()
rms_norm(xg, wg, 1e-6).sum().backward()
xe = x.clone().requires_grad_()
we = weight.clone().requires_grad_()
torch.nn.functional.rms_norm(xe, (8,), we, eps=1e-6).sum().backward()
torch.testing.assert_close((xg.grad, wg.grad), (xe.grad, we.grad))
print("grad_x and grad_weight match F.rms_norm's")

# %%
# Testing the registration: ``opcheck``
# -------------------------------------
# :func:`torch.library.opcheck` calls the operator on sample inputs in several
# ways and compares what it sees with the schema and the fake kernel: that no
# input is written, that the fake kernel's output matches the real one's, and
# that the autograd registration works through the dispatcher. It does not
# check the gradients' values: that is gradcheck's job. Each entry of the
# result says how one check went. The samples include a transposed ``x``,
# whose strides the fake kernel's dense output must match:
for dtype in (torch.float32, torch.bfloat16):
    for needs_grad, transposed in ((False, False), (True, False), (False, True)):
        shape = (33, 5) if transposed else (5, 33)
        xs = torch.randn(*shape, dtype=dtype)
        xs = (xs.t() if transposed else xs).requires_grad_(needs_grad)
        ws = torch.randn(33, dtype=dtype, requires_grad=needs_grad)
        result = torch.library.opcheck(rms_norm, (xs, ws, 1e-6))
        print(f"{dtype}, requires_grad={needs_grad}, transposed={transposed}:")
        for check, outcome in result.items():
            print(f"    {check}: {outcome}")

# %%
# ``torch.compile``
# -----------------
# ``fullgraph=True`` makes any graph break an error, so the call below proves
# that the function, operator included, is captured as one graph:


def block(x, weight):
    return rms_norm(x, weight, 1e-6) * 2.0


compiled = torch.compile(block, fullgraph=True)
torch.testing.assert_close(compiled(x, weight), block(x, weight))
print("torch.compile(fullgraph=True): same values as eager")

# %%
# ``torch.export``
# ----------------
# :func:`torch.export.export` records a module's whole program as a graph of
# operators. The operator is one node of it, by its name, so a program
# exported from a model that calls it runs this operator wherever the module
# that defines it (here, this script; in a package, its import) is loaded:


class Norm(torch.nn.Module):
    def __init__(self, n: int):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(n))

    def forward(self, x):
        return rms_norm(x, self.weight, 1e-6)


program = torch.export.export(Norm(8), (x,))
for node in program.graph.nodes:
    print(f"{node.op:14} {node.target}")
targets = [node.target for node in program.graph.nodes]
assert torch.ops.mylib.rms_norm.default in targets

# %%
# What the next pages add
# -----------------------
# This operator is complete and correct, and its body runs several PyTorch
# kernels, one after the other. The next page replaces the body with one C++
# kernel for CPU tensors and one CUDA kernel for GPU tensors, behind the same
# schema; the fake kernel and the backward stay in Python, as here.
