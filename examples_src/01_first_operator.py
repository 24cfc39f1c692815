r"""
Step 1: Your first operator
===========================

Before any C++, an operator can be written in Python with
:func:`torch.library.custom_op`. Doing so first pins down the contract that
every later kernel must honour: the schema (argument and return types), what
the output looks like (shape, dtype, strides), and what ``torch.compile`` needs
to trace it.

In this step you will learn:

* how to declare an operator with :func:`torch.library.custom_op`;
* why it needs a *fake* kernel (:func:`torch.library.register_fake`), and what
  that kernel must return;
* how :func:`torch.library.opcheck` tests the registration;
* how to check that ``torch.compile(fullgraph=True)`` traces it without a
  graph break.

The running example of the whole guide is **RMSNorm**: for each row ``x`` of
length ``N``, ``y = x / sqrt(mean(x**2) + eps) * weight``.
"""

# %%
# The operator
# ------------
# ``custom_op`` turns a type-annotated Python function into an operator of the
# PyTorch dispatcher, here ``torch.ops.opguide_step1.rms_norm``. The schema is
# inferred from the annotations; ``mutates_args=()`` promises that no input is
# written to. The body computes in float32 for float32 and the 16-bit types,
# as the compiled kernels of the later steps do (they keep double for double;
# this first version does not).
import time

import torch


# sphinx_gallery_thumbnail_path = "_thumbnails/01.png"
@torch.library.custom_op("opguide_step1::rms_norm", mutates_args=())
def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    inv_rms = torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps)
    return (xf * inv_rms * weight.float()).to(x.dtype).contiguous()


print(rms_norm._opoverload._schema)

# %%
# The dispatcher now knows the operator by its qualified name, and calling it
# through ``torch.ops`` is the same as calling the Python function:
torch.manual_seed(0)
x = torch.randn(4, 8)
w = torch.randn(8)
y = torch.ops.opguide_step1.rms_norm(x, w, 1e-6)
print(y[0])

# %%
# Check it against PyTorch's own :func:`torch.nn.functional.rms_norm` on
# random data:
expected = torch.nn.functional.rms_norm(x, (8,), w, eps=1e-6)
torch.testing.assert_close(y, expected)
print("matches torch.nn.functional.rms_norm")

# %%
# The fake kernel
# ---------------
# While it traces, ``torch.compile`` does not run an operator's real kernel;
# it runs the operator on *fake* tensors, which have a shape, dtype, device
# and strides but no data.
# An operator's fake kernel computes the output's metadata from the inputs'.
# It must describe exactly what the real kernel returns: here a new
# contiguous tensor with the shape and dtype of ``x``.


@rms_norm.register_fake
def _(x, weight, eps):
    return x.new_empty(x.shape)


# %%
# Testing the registration with ``opcheck``
# -----------------------------------------
# :func:`torch.library.opcheck` runs the operator in several ways (eager, with
# fake tensors, through the autograd and functionalization machinery) and
# compares what it sees with the schema and the fake kernel. It is the first
# test to write for any custom operator. The result maps each check to
# ``"SUCCESS"``:
for dtype in (torch.float32, torch.bfloat16):
    sample = (torch.randn(5, 33, dtype=dtype), torch.randn(33, dtype=dtype), 1e-6)
    result = torch.library.opcheck(rms_norm, sample)
    print(dtype, result)

# %%
# Had the fake kernel returned the wrong dtype, opcheck would say so. Here is a
# second operator with a deliberately wrong fake kernel, so you can recognise
# the failure when you meet it. The message ends with "(scroll up for stack
# trace)": the trace is that of the exception opcheck wraps, which pytest
# would print and this page does not:


@torch.library.custom_op("opguide_step1::rms_norm_bad_fake", mutates_args=())
def rms_norm_bad_fake(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return rms_norm(x, weight, eps)


@rms_norm_bad_fake.register_fake
def _(x, weight, eps):
    return x.new_empty(x.shape, dtype=torch.float64)  # wrong: real output has x.dtype


try:
    torch.library.opcheck(rms_norm_bad_fake, (torch.randn(2, 8), torch.randn(8), 1e-6))
except Exception as err:  # opcheck raises OpCheckError
    print(type(err).__name__, ":", str(err).splitlines()[0][:300])
else:
    raise AssertionError("opcheck should have caught the wrong fake kernel")

# %%
# ``torch.compile`` with ``fullgraph=True``
# -----------------------------------------
# ``fullgraph=True`` turns any graph break into an error, so this proves that
# the whole function, custom operator included, is captured in one graph.


def block(x, w):
    return torch.ops.opguide_step1.rms_norm(x, w, 1e-6) * 2.0 + 1.0


compiled = torch.compile(block, fullgraph=True)
start = time.perf_counter()
out = compiled(x, w)
print(f"first call (compiles): {time.perf_counter() - start:.1f} s")
torch.testing.assert_close(out, block(x, w))
print("compiled output matches eager")

# %%
# ``torch._dynamo.explain`` reports how many graphs and graph breaks a
# function produces:
explanation = torch._dynamo.explain(block)(x, w)
print(f"graphs: {explanation.graph_count}, graph breaks: {explanation.graph_break_count}")
assert explanation.graph_break_count == 0

# %%
# What's next
# -----------
# This Python operator is correct but runs several PyTorch kernels (square,
# mean, add, rsqrt, two multiplies, and casts for half precision); on a
# float32 input four of them read the whole tensor and three also write one.
# The next step replaces the body with one C++ kernel that reads each row
# from memory once (its second pass over a row that fits in cache finds it
# there), behind a schema defined in C++.
