// silu_and_mul's Triton kernels compiled ahead of time: the tile and key of a
// call (the key check of silu_and_mul_triton_aot.cpp exposes them in every
// build), and the JIT operators that a call no compiled kernel fits goes to.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "plan.h"
#include "route.h"
#include "triton_aot.h"

namespace opguide::triton_aot {

// opguide/_silu_and_mul/triton/ops.py's silu_and_mul_config, the tile of both
// kernels: `rows` rows of `block_n` columns of y a program (d rounded up to a
// power of two, at most 4096 columns; rows enough for 4096 elements), on 4
// warps. The grid is (cdiv(rows of y, rows), cdiv(d, block_n)).
struct SiluTile {
  int64_t block_n, rows, num_warps;
};

constexpr SiluTile silu_and_mul_tile(int64_t d) {
  const int64_t block_n = std::min<int64_t>(next_power_of_2(d), 4096);
  return SiluTile{block_n, std::max<int64_t>(1, 4096 / block_n), 4};
}

// The key of `kernel` ("silu_and_mul_forward" or "silu_and_mul_backward") for
// rows of `cols` (d) elements of y: opguide/_silu_and_mul/triton/aot.py's
// launches, as opguide/triton/aot.py's key() spells them.
inline std::string silu_and_mul_key(const char* kernel, const Device& d, const char* dtype,
                                    int64_t cols) {
  const SiluTile t = silu_and_mul_tile(cols);
  return make_key(kernel, d, dtype,
                  {{"BLOCK_N", t.block_n},
                   {"ROWS", t.rows},
                   {"ALIGN", align(cols)},
                   {"GDC", d.gdc}},
                  cols, t.num_warps);
}

// The JIT route's operators (opguide::silu_and_mul_triton and its backward),
// through triton_aot.h's jit_operator.
at::Tensor jit_silu_and_mul(const Fallback& why, const at::Tensor& x);
at::Tensor jit_silu_and_mul_backward(const Fallback& why, const at::Tensor& grad_y,
                                     const at::Tensor& x);

}  // namespace opguide::triton_aot
