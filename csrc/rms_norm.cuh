// RMSNorm forward, device code. Torch-free on purpose: this header compiles
// alone with nvcc, and with hipcc after torch's hipify, so both toolchains can
// check it on a machine without a GPU. The host wrapper (rms_norm_cuda.cu)
// holds everything that needs torch.
//
// Layout: x is M rows of N elements; row r starts at x + r * x_row_stride and
// its elements are contiguous. y is dense (M, N). weight is dense (N,).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>
// OPGUIDE_NO_BF16 leaves bfloat16 out, for toolchains that predate its header
// (ROCm before 5.7 has no hip_bf16.h). Normal builds never set it.
#if !defined(OPGUIDE_NO_BF16)
#include <cuda_bf16.h>
#endif

#include <cstdint>

namespace opguide {
namespace cuda {

// [portability]
// A warp is 32 threads on NVIDIA GPUs; on AMD GPUs a wavefront is 64 threads
// on CDNA (MI200/MI300, gfx90a/gfx94x) and 32 on RDNA. The compiler tells us.
#if defined(__HIP_PLATFORM_AMD__) || defined(__HIP__)
#if defined(__AMDGCN_WAVEFRONT_SIZE)
constexpr int kWarpSize = __AMDGCN_WAVEFRONT_SIZE;
#else
constexpr int kWarpSize = 64;
#endif
// HIP's shuffles take no mask: a wavefront always runs in lock step here.
#define OPGUIDE_SHFL_XOR(value, lane_mask) __shfl_xor((value), (lane_mask))
#else
constexpr int kWarpSize = 32;
#define OPGUIDE_SHFL_XOR(value, lane_mask) __shfl_xor_sync(0xffffffffu, (value), (lane_mask))
#endif
// The most warps a block of 1024 threads can hold.
constexpr int kMaxWarpsPerBlock = 1024 / kWarpSize;
// [portability-end]

// [convert]
// Accumulate in float, or in double for double inputs.
template <typename T> struct AccType { using type = float; };
template <> struct AccType<double> { using type = double; };

__device__ __forceinline__ float to_acc(float v) { return v; }
__device__ __forceinline__ double to_acc(double v) { return v; }
__device__ __forceinline__ float to_acc(__half v) { return __half2float(v); }
#if !defined(OPGUIDE_NO_BF16)
__device__ __forceinline__ float to_acc(__nv_bfloat16 v) { return __bfloat162float(v); }
#endif

template <typename T> __device__ __forceinline__ T from_acc(float v);
template <> __device__ __forceinline__ float from_acc<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_acc<__half>(float v) { return __float2half_rn(v); }
#if !defined(OPGUIDE_NO_BF16)
template <> __device__ __forceinline__ __nv_bfloat16 from_acc<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
#endif
template <typename T> __device__ __forceinline__ T from_acc(double v);
template <> __device__ __forceinline__ double from_acc<double>(double v) { return v; }
// [convert-end]

// [vector]
// kVec elements moved by one load or store instruction. With kVec * sizeof(T)
// == 16 this is one 128-bit access, the widest a thread can issue.
template <typename T, int kVec>
struct alignas(sizeof(T) * kVec) Vec {
  T val[kVec];
};

// x is read once and y written once: the .cs ("cache streaming") hints tell
// the GPU not to keep those lines in L2, which leaves L2 to the weight that
// every row reads again. HIP has no such intrinsics; plain accesses there.
template <typename V>
__device__ __forceinline__ V load_streaming(const V* p) {
#if !defined(__HIP_PLATFORM_AMD__) && !defined(__HIP__)
  if constexpr (sizeof(V) == 16) {
    const uint4 raw = __ldcs(reinterpret_cast<const uint4*>(p));
    V v;
    __builtin_memcpy(&v, &raw, sizeof(V));
    return v;
  }
#endif
  return *p;
}

template <typename V>
__device__ __forceinline__ void store_streaming(V* p, const V& v) {
#if !defined(__HIP_PLATFORM_AMD__) && !defined(__HIP__)
  if constexpr (sizeof(V) == 16) {
    uint4 raw;
    __builtin_memcpy(&raw, &v, sizeof(V));
    __stcs(reinterpret_cast<uint4*>(p), raw);
    return;
  }
#endif
  *p = v;
}
// [vector-end]

// [reduce]
template <typename Acc>
__device__ __forceinline__ Acc warp_sum(Acc v) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v += OPGUIDE_SHFL_XOR(v, offset);
  return v;
}

// Sums v over the threads of one row (blockDim.x threads, a multiple of the
// warp size, so warps never straddle two rows). Every thread gets the total.
template <typename Acc>
__device__ __forceinline__ Acc row_sum(Acc v, Acc* shared) {
  v = warp_sum(v);
  const int warps_per_row = blockDim.x / kWarpSize;
  if (warps_per_row == 1) return v;
  const int lane = threadIdx.x % kWarpSize;
  const int first_warp = threadIdx.y * warps_per_row;
  if (lane == 0) shared[first_warp + threadIdx.x / kWarpSize] = v;
  __syncthreads();
  Acc total = 0;
  for (int w = 0; w < warps_per_row; ++w) total += shared[first_warp + w];
  return total;
}
// [reduce-end]

// [kernel]
// One row per threadIdx.y, blockDim.x threads per row. Each thread keeps up to
// kRegVecs vectors of its row in registers, so x is read from memory once:
// pass 1 loads and sums squares, pass 2 scales what is already in registers.
// With kLongRows, rows longer than blockDim.x * kRegVecs vectors re-read the
// rest in pass 2 (from L2, which still holds it); without it that code is
// compiled out, which leaves the common case with fewer registers.
template <typename T, int kVec, int kRegVecs, bool kLongRows>
__global__ void __launch_bounds__(1024) rms_norm_forward_kernel(
    const T* __restrict__ x, const T* __restrict__ weight, T* __restrict__ y, int64_t rows,
    int64_t cols, int64_t x_row_stride, float eps) {
  using Acc = typename AccType<T>::type;
  using V = Vec<T, kVec>;
  __shared__ Acc shared[kMaxWarpsPerBlock];

  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  const bool active = row < rows;  // inactive threads still join __syncthreads
  const int64_t nvec = cols / kVec;
  const V* xr = reinterpret_cast<const V*>(x + (active ? row : 0) * x_row_stride);
  const V* wv = reinterpret_cast<const V*>(weight);
  V* yr = reinterpret_cast<V*>(y + (active ? row : 0) * cols);

  V cache[kRegVecs];
  Acc sum_sq = 0;
#pragma unroll
  for (int k = 0; k < kRegVecs; ++k) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
    if (active && i < nvec) {
      cache[k] = load_streaming(xr + i);
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        const Acc v = to_acc(cache[k].val[e]);
        sum_sq += v * v;
      }
    }
  }
  if constexpr (kLongRows) {
    for (int64_t i = threadIdx.x + static_cast<int64_t>(kRegVecs) * blockDim.x;
         active && i < nvec; i += blockDim.x) {
      const V v = xr[i];
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        const Acc a = to_acc(v.val[e]);
        sum_sq += a * a;
      }
    }
  }

  sum_sq = row_sum(sum_sq, shared);
  if (!active) return;
  const Acc inv_rms = Acc(1) / sqrt(sum_sq / static_cast<Acc>(cols) + static_cast<Acc>(eps));

#pragma unroll
  for (int k = 0; k < kRegVecs; ++k) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
    if (i < nvec) {
      const V w = wv[i];
      V out;
#pragma unroll
      for (int e = 0; e < kVec; ++e)
        out.val[e] = from_acc<T>(to_acc(cache[k].val[e]) * inv_rms * to_acc(w.val[e]));
      store_streaming(yr + i, out);
    }
  }
  if constexpr (kLongRows) {
    for (int64_t i = threadIdx.x + static_cast<int64_t>(kRegVecs) * blockDim.x; i < nvec;
         i += blockDim.x) {
      const V v = xr[i];
      const V w = wv[i];
      V out;
#pragma unroll
      for (int e = 0; e < kVec; ++e)
        out.val[e] = from_acc<T>(to_acc(v.val[e]) * inv_rms * to_acc(w.val[e]));
      store_streaming(yr + i, out);
    }
  }
}
// [kernel-end]

// [launch]
// Each thread keeps up to 4 vectors of its row in registers. 8 would halve
// the threads needed for long rows, but costs bfloat16 100 registers per
// thread (its conversions need more registers than float16's): occupancy
// halves and bandwidth drops by a third (measured on an H200; see the
// performance chapter). Past 1024 threads x 4 vectors (32768 bf16 elements)
// the kLongRows instantiation re-reads the rest of the row from L2.
constexpr int kRegVecs = 4;
constexpr int kMaxThreadsPerRow = 1024;

struct LaunchConfig {
  dim3 grid;
  dim3 block;
  bool long_rows;
};

// Chooses the block shape from the row length: as many threads per row as
// give each thread 4 vectors (fewer, busier threads measured faster than
// more, idler ones), and for short rows several rows per block so that a
// block has 256 threads.
inline LaunchConfig rms_norm_forward_config(int64_t rows, int64_t cols, int vec, int warp_size) {
  const int64_t nvec = (cols + vec - 1) / vec;
  int64_t per_row = (nvec + kRegVecs - 1) / kRegVecs;
  per_row = ((per_row + warp_size - 1) / warp_size) * warp_size;
  if (per_row > kMaxThreadsPerRow) per_row = kMaxThreadsPerRow;
  const int64_t rows_per_block = per_row < 128 ? 256 / per_row : 1;
  LaunchConfig cfg;
  cfg.block = dim3(static_cast<unsigned>(per_row), static_cast<unsigned>(rows_per_block));
  cfg.grid = dim3(static_cast<unsigned>((rows + rows_per_block - 1) / rows_per_block));
  cfg.long_rows = nvec > per_row * kRegVecs;
  return cfg;
}

inline bool is_aligned(const void* p, int bytes) {
  return reinterpret_cast<std::uintptr_t>(p) % static_cast<std::uintptr_t>(bytes) == 0;
}

template <typename T, int kVec>
void launch_rms_norm_forward_vec(const LaunchConfig& cfg, const T* x, const T* weight, T* y,
                                 int64_t rows, int64_t cols, int64_t x_row_stride, float eps,
                                 cudaStream_t stream) {
  if (cfg.long_rows) {
    rms_norm_forward_kernel<T, kVec, kRegVecs, true>
        <<<cfg.grid, cfg.block, 0, stream>>>(x, weight, y, rows, cols, x_row_stride, eps);
  } else {
    rms_norm_forward_kernel<T, kVec, kRegVecs, false>
        <<<cfg.grid, cfg.block, 0, stream>>>(x, weight, y, rows, cols, x_row_stride, eps);
  }
}

// Launches the forward kernel on `stream`: 16-byte accesses when the row
// length, the row stride and every pointer allow it, one element otherwise.
// Returns the launch's error code (cudaSuccess when it was queued).
template <typename T>
cudaError_t launch_rms_norm_forward(const T* x, const T* weight, T* y, int64_t rows, int64_t cols,
                                    int64_t x_row_stride, float eps, int warp_size,
                                    cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  constexpr int kWide = 16 / sizeof(T);
  const bool wide = cols % kWide == 0 && x_row_stride % kWide == 0 && is_aligned(x, 16) &&
                    is_aligned(weight, 16) && is_aligned(y, 16);
  const LaunchConfig cfg = rms_norm_forward_config(rows, cols, wide ? kWide : 1, warp_size);
  if (wide) {
    launch_rms_norm_forward_vec<T, kWide>(cfg, x, weight, y, rows, cols, x_row_stride, eps, stream);
  } else {
    launch_rms_norm_forward_vec<T, 1>(cfg, x, weight, y, rows, cols, x_row_stride, eps, stream);
  }
  return cudaGetLastError();
}
// [launch-end]

}  // namespace cuda
}  // namespace opguide
