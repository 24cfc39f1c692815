// Library 2 of gallery step 13: the same product, computed in square tiles
// so that a tile of B is reused from cache by every row of the A tile.
#include <algorithm>

#include "matmul_library.h"

namespace opguide_mm {

at::Tensor matmul_tiled(const at::Tensor& a, const at::Tensor& b) {
  check_matmul_args(a, b, "matmul_tiled");
  const at::Tensor ac = a.contiguous(), bc = b.contiguous();
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  constexpr int64_t kTile = 64;
  at::Tensor c = at::zeros({m, n}, a.options());
  AT_DISPATCH_FLOATING_TYPES(a.scalar_type(), "matmul_tiled", [&] {
    const scalar_t* A = ac.const_data_ptr<scalar_t>();
    const scalar_t* B = bc.const_data_ptr<scalar_t>();
    scalar_t* C = c.mutable_data_ptr<scalar_t>();
    for (int64_t i0 = 0; i0 < m; i0 += kTile)
      for (int64_t p0 = 0; p0 < k; p0 += kTile)
        for (int64_t j0 = 0; j0 < n; j0 += kTile)
          for (int64_t i = i0; i < std::min(i0 + kTile, m); ++i)
            for (int64_t p = p0; p < std::min(p0 + kTile, k); ++p) {
              const scalar_t a_ip = A[i * k + p];
              for (int64_t j = j0; j < std::min(j0 + kTile, n); ++j)
                C[i * n + j] += a_ip * B[p * n + j];
            }
  });
  return c;
}

}  // namespace opguide_mm

MATMUL_DEFINE(m) { m.def("matmul_tiled(Tensor a, Tensor b) -> Tensor"); }
MATMUL_IMPL(CPU, m) { m.impl("matmul_tiled", &opguide_mm::matmul_tiled); }
// [register-end]
