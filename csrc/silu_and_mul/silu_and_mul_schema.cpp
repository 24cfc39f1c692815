// The schemas of silu_and_mul, on a fragment of the opguide namespace: an
// operator's schemas live in its own folder, so adding one edits no shared
// file. Kernels attach per dispatch key in silu_and_mul_cpu.cpp and
// silu_and_mul_cuda.cu; the fake kernels, autograd, vmap and autocast rules
// are registered from Python (opguide/_silu_and_mul/ops.py), all but the
// backward's Autograd kernel below.
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
#include <torch/library.h>

TORCH_LIBRARY_FRAGMENT(opguide, m) {
  // y = silu(x[..., :d]) * x[..., d:] for x of shape (..., 2*d); y is (..., d).
  m.def("silu_and_mul(Tensor x) -> Tensor");
  // grad_x (shape of x) from grad_y (shape of y) and the forward's input x.
  m.def("silu_and_mul_backward(Tensor grad_y, Tensor x) -> Tensor");
}

// The backward has no derivative of its own: a double backward through it is
// an error that names it, not a warning and zero gradients.
TORCH_LIBRARY_IMPL(opguide, Autograd, m) {
  m.impl("silu_and_mul_backward", torch::autograd::autogradNotImplementedFallback());
}
