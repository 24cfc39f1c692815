r"""
Step 1: Your first operator
===========================

Part I writes RMSNorm as a Python :func:`torch.library.custom_op` with a fake
kernel and checks it with :func:`torch.library.opcheck`. This step runs that
operator again as the contract every later kernel honours, and adds what Part I
leaves out:

* what ``opcheck`` says when a fake kernel is wrong;
* how ``torch._dynamo.explain`` counts a function's graph breaks.

The running example of the whole guide is **RMSNorm**: for each row ``x`` of
length ``N``, ``y = x / sqrt(mean(x**2) + eps) * weight``.
"""

# %%
# The operator
# ------------
# The schema comes from the annotations; ``mutates_args=()`` promises that no
# input is written. The body computes in float32, as the compiled kernels of
# the later steps do for float32 and the 16-bit types (they sum float64 rows
# in float64, as Part I's operator does).
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
# Called through ``torch.ops`` by its qualified name:
torch.manual_seed(0)
x = torch.randn(4, 8)
w = torch.randn(8)
y = torch.ops.opguide_step1.rms_norm(x, w, 1e-6)
print(y[0])

# %%
# Checked against :func:`torch.nn.functional.rms_norm`:
expected = torch.nn.functional.rms_norm(x, (8,), w, eps=1e-6)
torch.testing.assert_close(y, expected)
print("matches torch.nn.functional.rms_norm")

# %%
# The fake kernel
# ---------------
# ``torch.compile`` traces on *fake* tensors (shape, dtype, device and
# strides, no data). The fake kernel must return exactly what the real kernel
# returns: here a new contiguous tensor with the shape and dtype of ``x``.


@rms_norm.register_fake
def _(x, weight, eps):
    return x.new_empty(x.shape)


# %%
# Testing the registration with ``opcheck``
# -----------------------------------------
# ``opcheck`` runs the operator eagerly, on fake tensors, and through autograd
# and functionalization, and compares each with the schema and the fake
# kernel. Each check maps to ``"SUCCESS"``:
for dtype in (torch.float32, torch.bfloat16):
    sample = (torch.randn(5, 33, dtype=dtype), torch.randn(33, dtype=dtype), 1e-6)
    result = torch.library.opcheck(rms_norm, sample)
    print(dtype, result)

# %%
# A fake kernel with the wrong dtype, so that you recognise the failure. The
# "(scroll up for stack trace)" at the end refers to the exception opcheck
# wraps, which pytest prints and this page does not:


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
# ``fullgraph=True`` makes a graph break an error, so this call proves that
# the function, operator included, is captured in one graph.


def block(x, w):
    return torch.ops.opguide_step1.rms_norm(x, w, 1e-6) * 2.0 + 1.0


compiled = torch.compile(block, fullgraph=True)
start = time.perf_counter()
out = compiled(x, w)
print(f"first call (compiles): {time.perf_counter() - start:.1f} s")
torch.testing.assert_close(out, block(x, w))
print("compiled output matches eager")

# %%
# ``torch._dynamo.explain`` counts graphs and graph breaks:
explanation = torch._dynamo.explain(block)(x, w)
print(f"graphs: {explanation.graph_count}, graph breaks: {explanation.graph_break_count}")
assert explanation.graph_break_count == 0

# %%
# What's next
# -----------
# This operator runs several PyTorch kernels (square, mean, add, rsqrt, two
# multiplies, and casts for half precision). Step 2 replaces them with one C++
# kernel behind a schema defined in C++.
