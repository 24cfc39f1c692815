// Library 1 of gallery step 13: a straightforward matmul, c = a @ b.
#include "matmul_library.h"

namespace opguide_mm {

at::Tensor matmul_naive(const at::Tensor& a, const at::Tensor& b) {
  check_matmul_args(a, b, "matmul_naive");
  const at::Tensor ac = a.contiguous(), bc = b.contiguous();
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  at::Tensor c = at::zeros({m, n}, a.options());
  AT_DISPATCH_FLOATING_TYPES(a.scalar_type(), "matmul_naive", [&] {
    const scalar_t* A = ac.const_data_ptr<scalar_t>();
    const scalar_t* B = bc.const_data_ptr<scalar_t>();
    scalar_t* C = c.mutable_data_ptr<scalar_t>();
    // i-p-j order: the inner loop walks rows of B and C contiguously.
    for (int64_t i = 0; i < m; ++i)
      for (int64_t p = 0; p < k; ++p)
        for (int64_t j = 0; j < n; ++j) C[i * n + j] += A[i * k + p] * B[p * n + j];
  });
  return c;
}

}  // namespace opguide_mm

// [register]
MATMUL_DEFINE(m) { m.def("matmul_naive(Tensor a, Tensor b) -> Tensor"); }
MATMUL_IMPL(CPU, m) { m.impl("matmul_naive", &opguide_mm::matmul_naive); }
// [register-end]
