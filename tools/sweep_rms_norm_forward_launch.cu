// Variants of the one-block RMSNorm forward (csrc/rms_norm/rms_norm_forward.cuh), for
// tools/sweep_rms_norm_forward_launch.py, which builds this torch-free file
// into a shared library with nvcc, loads it with ctypes and times every variant in the benchmark's round robin, next to
// the library and the other libraries. A variant is the library's kernel
// with one or more of its choices changed:
//   kRegs        16-byte vectors of its row that a thread keeps (1, 2, 4)
//   kPlainLoads  x and the weight through ld.global instead of the read-only
//                path (ld.global.nc, which const __restrict__ gives)
//   kWeightLate  the weight loaded after the sum of squares has waited for x,
//                so that its loads overlap the reduction and not x's loads
//   kFastInv     1/rms from rsqrtf (one MUFU instruction) instead of
//                1 / sqrt() with its IEEE slow path
// and the launch's threads per row and rows per block.
#include "rms_norm/rms_norm_launch.cuh"

namespace {

using namespace opguide;

template <typename V>
__device__ __forceinline__ V load_plain(const V* p) {
  static_assert(sizeof(V) == 16, "16-byte vectors only");
  uint4 raw;
  asm("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(raw.x), "=r"(raw.y), "=r"(raw.z), "=r"(raw.w)
      : "l"(p));
  V v;
  __builtin_memcpy(&v, &raw, sizeof(V));
  return v;
}

template <bool kPlain, typename V>
__device__ __forceinline__ V load(const V* p) {
  if constexpr (kPlain) return load_plain(p);
  return *p;
}

template <typename T, int kVec, int kRegs, bool kPlainLoads, bool kWeightLate, bool kFastInv>
__global__ void __launch_bounds__(1024) forward_variant(const T* __restrict__ x,
                                                        const T* __restrict__ weight,
                                                        T* __restrict__ y, int64_t rows,
                                                        int64_t cols, float eps) {
  using V = Vec<T, kVec>;
  __shared__ float shared[kMaxWarpsPerBlock];
  wait_for_previous_grid();
  allow_next_grid();
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  const bool active = row < rows;
  const int64_t nvec = cols / kVec;
  const V* xr = reinterpret_cast<const V*>(x + (active ? row : 0) * cols);
  const V* wv = reinterpret_cast<const V*>(weight);
  V* yr = reinterpret_cast<V*>(y + (active ? row : 0) * cols);
  V cache[kRegs];
  V wcache[kRegs];
#pragma unroll
  for (int k = 0; k < kRegs; ++k) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
    if (active && i < nvec) {
      cache[k] = load<kPlainLoads>(xr + i);
      if constexpr (!kWeightLate) wcache[k] = load<kPlainLoads>(wv + i);
    }
  }
  float sum_sq = 0;
#pragma unroll
  for (int k = 0; k < kRegs; ++k) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
    if (active && i < nvec) {
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        const float v = to_acc(cache[k].val[e]);
        sum_sq += v * v;
      }
    }
  }
  if constexpr (kWeightLate) {
#pragma unroll
    for (int k = 0; k < kRegs; ++k) {
      const int64_t i = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
      if (active && i < nvec) wcache[k] = load<kPlainLoads>(wv + i);
    }
  }
  sum_sq = row_sum(sum_sq, shared);
  if (!active) return;
  float inv_rms;
  if constexpr (kFastInv) {
    inv_rms = rsqrtf(sum_sq * (1.0f / static_cast<float>(cols)) + eps);
  } else {
    inv_rms = 1.0f / sqrt(sum_sq / static_cast<float>(cols) + eps);
  }
#pragma unroll
  for (int k = 0; k < kRegs; ++k) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
    if (i < nvec) {
      const V v = keep_packed(cache[k]);
      const V w = keep_packed(wcache[k]);
      V out;
#pragma unroll
      for (int e = 0; e < kVec; ++e)
        out.val[e] = from_acc<T>(to_acc(v.val[e]) * inv_rms * to_acc(w.val[e]));
      yr[i] = out;
    }
  }
}

template <typename T, int kRegs, bool kPlain, bool kLate, bool kFast>
int launch_one(const T* x, const T* w, T* y, int64_t rows, int64_t cols, float eps, int per_row,
               int rows_per_block, cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  const dim3 block(per_row, rows_per_block);
  const dim3 grid(static_cast<unsigned>((rows + rows_per_block - 1) / rows_per_block));
  return static_cast<int>(launch_kernel(forward_variant<T, kVec, kRegs, kPlain, kLate, kFast>,
                                        grid, block, 0, stream, true, x, w, y, rows, cols, eps));
}

template <typename T, int kRegs, int kFlags>
const void* kernel_of() {
  constexpr int kVec = 16 / sizeof(T);
  return reinterpret_cast<const void*>(
      forward_variant<T, kVec, kRegs, (kFlags & 1) != 0, (kFlags & 2) != 0, (kFlags & 4) != 0>);
}

template <typename T, int kRegs, int kFlags>
int run(const void* x, const void* w, void* y, int64_t rows, int64_t cols, float eps, int per_row,
        int rpb, cudaStream_t s) {
  return launch_one<T, kRegs, (kFlags & 1) != 0, (kFlags & 2) != 0, (kFlags & 4) != 0>(
      static_cast<const T*>(x), static_cast<const T*>(w), static_cast<T*>(y), rows, cols, eps,
      per_row, rpb, s);
}

// Every variant of one element type, by (regs, flags): its launcher and its kernel.
template <typename T>
struct Table {
  using Run = int (*)(const void*, const void*, void*, int64_t, int64_t, float, int, int,
                      cudaStream_t);
  Run runs[3][8];
  const void* kernels[3][8];
  template <int R, int F>
  void fill(int r) {
    runs[r][F] = run<T, R, F>;
    kernels[r][F] = kernel_of<T, R, F>();
    if constexpr (F < 7) fill<R, F + 1>(r);
  }
  Table() {
    fill<1, 0>(0);
    fill<2, 0>(1);
    fill<4, 0>(2);
  }
};

int slot(int regs) { return regs == 1 ? 0 : regs == 2 ? 1 : regs == 4 ? 2 : -1; }

}  // namespace

// y = rms_norm(x, weight) by one variant, on `stream`. dtype 0: bfloat16,
// 1: float16. flags: bit 0 plain loads, bit 1 weight late, bit 2 fast 1/rms.
// x and y dense (rows, cols), cols a multiple of 16 bytes. Returns the
// launch's cudaError_t, or -1 for a variant that does not exist.
extern "C" int forward_variant_launch(int dtype, const void* x, const void* w, void* y,
                                      int64_t rows, int64_t cols, float eps, int regs,
                                      int per_row, int rows_per_block, int flags, void* stream) {
  const int r = slot(regs);
  if (r < 0 || flags < 0 || flags > 7 || per_row * rows_per_block > 1024) return -1;
  const auto s = static_cast<cudaStream_t>(stream);
  if (dtype == 0) {
    static const Table<__nv_bfloat16> table;
    return table.runs[r][flags](x, w, y, rows, cols, eps, per_row, rows_per_block, s);
  }
  static const Table<__half> table;
  return table.runs[r][flags](x, w, y, rows, cols, eps, per_row, rows_per_block, s);
}

// Threads per row that the library's planner gives a row of `cols` elements
// in 16-byte vectors, each thread holding `regs` of them
// (rms_norm_forward_block_plan); -1 when the row does not fit in registers
// that way (the planner would take the long-row kernel).
extern "C" int forward_variant_threads(int dtype, int64_t cols, int regs) {
  const int vec = 16 / (dtype == 0 ? sizeof(__nv_bfloat16) : sizeof(__half));
  const RowPlan plan = rms_norm_forward_block_plan(1, cols, vec, 32, regs);
  return plan.kernel == RowKernel::kRegisters ? static_cast<int>(plan.block.x) : -1;
}

// Registers per thread of one variant's kernel, or -1.
extern "C" int forward_variant_registers(int dtype, int regs, int flags) {
  const int r = slot(regs);
  if (r < 0 || flags < 0 || flags > 7) return -1;
  cudaFuncAttributes attr{};
  static const Table<__nv_bfloat16> bf16;
  static const Table<__half> fp16;
  const void* fn = dtype == 0 ? bf16.kernels[r][flags] : fp16.kernels[r][flags];
  if (cudaFuncGetAttributes(&attr, fn) != cudaSuccess) return -1;
  return attr.numRegs;
}
