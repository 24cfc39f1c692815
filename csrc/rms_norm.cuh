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
    const T* __restrict__ x, const T* __restrict__ weight, T* __restrict__ y,
    typename AccType<T>::type* __restrict__ inv_rms_out, int64_t rows, int64_t cols,
    int64_t x_row_stride, float eps) {
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
  // rms_norm_fwd keeps the statistic for the backward pass; rms_norm does not.
  if (inv_rms_out != nullptr && threadIdx.x == 0) inv_rms_out[row] = inv_rms;

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
                                 typename AccType<T>::type* inv_rms, int64_t rows, int64_t cols,
                                 int64_t x_row_stride, float eps, cudaStream_t stream) {
  if (cfg.long_rows) {
    rms_norm_forward_kernel<T, kVec, kRegVecs, true><<<cfg.grid, cfg.block, 0, stream>>>(
        x, weight, y, inv_rms, rows, cols, x_row_stride, eps);
  } else {
    rms_norm_forward_kernel<T, kVec, kRegVecs, false><<<cfg.grid, cfg.block, 0, stream>>>(
        x, weight, y, inv_rms, rows, cols, x_row_stride, eps);
  }
}

// Launches the forward kernel on `stream`: 16-byte accesses when the row
// length, the row stride and every pointer allow it, one element otherwise.
// inv_rms (one value per row, may be null) receives 1/rms for the backward.
// Returns the launch's error code (cudaSuccess when it was queued).
template <typename T>
cudaError_t launch_rms_norm_forward(const T* x, const T* weight, T* y,
                                    typename AccType<T>::type* inv_rms, int64_t rows,
                                    int64_t cols, int64_t x_row_stride, float eps, int warp_size,
                                    cudaStream_t stream) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  constexpr int kWide = 16 / sizeof(T);
  const bool wide = cols % kWide == 0 && x_row_stride % kWide == 0 && is_aligned(x, 16) &&
                    is_aligned(weight, 16) && is_aligned(y, 16);
  const LaunchConfig cfg = rms_norm_forward_config(rows, cols, wide ? kWide : 1, warp_size);
  if (wide) {
    launch_rms_norm_forward_vec<T, kWide>(cfg, x, weight, y, inv_rms, rows, cols, x_row_stride,
                                          eps, stream);
  } else {
    launch_rms_norm_forward_vec<T, 1>(cfg, x, weight, y, inv_rms, rows, cols, x_row_stride, eps,
                                      stream);
  }
  return cudaGetLastError();
}
// [launch-end]

// [backward-kernel]
// Backward, per row with r = inv_rms[row]:
//   grad_x = r * g * w - x * (r^3 / N) * sum_k(g_k * w_k * x_k)
//   grad_w = sum over rows of g * x * r
// Each block walks rows blockIdx.x, blockIdx.x + gridDim.x, ... with
// blockDim.x threads per row; a thread keeps its slice of the weight in
// registers for all its rows and accumulates its slice of grad_w there too.
// At the end each block writes its partial grad_w row; a second kernel sums
// the partials in a fixed order, so the result does not depend on timing.
constexpr int kBwdRegVecs = 2;
// At most 512 threads per row: the registers this leaves each thread (up to
// 128) hold g, x and w slices and the grad_w sums without spilling (bfloat16
// spilled under the 64-register cap that 1024-thread blocks impose).
constexpr int kBwdMaxThreads = 512;

template <typename T, int kVec>
__global__ void __launch_bounds__(kBwdMaxThreads) rms_norm_backward_kernel(
    const T* __restrict__ grad_y, const T* __restrict__ x, const T* __restrict__ weight,
    const typename AccType<T>::type* __restrict__ inv_rms, T* __restrict__ grad_x,
    typename AccType<T>::type* __restrict__ grad_w_partial, int64_t rows, int64_t cols) {
  using Acc = typename AccType<T>::type;
  using V = Vec<T, kVec>;
  // Two buffers: iteration i reduces in shared[i % 2], so a fast warp that
  // starts the next row cannot overwrite what a slow warp is still reading.
  __shared__ Acc shared[2][kMaxWarpsPerBlock];
  const int64_t nvec = cols / kVec;
  const V* wv = reinterpret_cast<const V*>(weight);

  V w[kBwdRegVecs];
  Acc dw[kBwdRegVecs][kVec];
#pragma unroll
  for (int k = 0; k < kBwdRegVecs; ++k) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
    if (i < nvec) w[k] = wv[i];
#pragma unroll
    for (int e = 0; e < kVec; ++e) dw[k][e] = 0;
  }

  int parity = 0;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x, parity ^= 1) {
    const V* gr = reinterpret_cast<const V*>(grad_y + row * cols);
    const V* xr = reinterpret_cast<const V*>(x + row * cols);
    V* dxr = reinterpret_cast<V*>(grad_x + row * cols);
    V g[kBwdRegVecs], xv[kBwdRegVecs];
    Acc dot = 0;
#pragma unroll
    for (int k = 0; k < kBwdRegVecs; ++k) {
      const int64_t i = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
      if (i < nvec) {
        g[k] = load_streaming(gr + i);
        xv[k] = load_streaming(xr + i);
#pragma unroll
        for (int e = 0; e < kVec; ++e)
          dot += to_acc(g[k].val[e]) * to_acc(w[k].val[e]) * to_acc(xv[k].val[e]);
      }
    }
    dot = row_sum(dot, shared[parity]);
    const Acc r = inv_rms[row];
    const Acc c = dot * r * r * r / static_cast<Acc>(cols);
#pragma unroll
    for (int k = 0; k < kBwdRegVecs; ++k) {
      const int64_t i = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
      if (i < nvec) {
        V out;
#pragma unroll
        for (int e = 0; e < kVec; ++e) {
          const Acc gv = to_acc(g[k].val[e]);
          const Acc xe = to_acc(xv[k].val[e]);
          out.val[e] = from_acc<T>(r * gv * to_acc(w[k].val[e]) - c * xe);
          dw[k][e] += gv * xe * r;
        }
        store_streaming(dxr + i, out);
      }
    }
  }
  Acc* partial = grad_w_partial + static_cast<int64_t>(blockIdx.x) * cols;
#pragma unroll
  for (int k = 0; k < kBwdRegVecs; ++k) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
    if (i < nvec) {
#pragma unroll
      for (int e = 0; e < kVec; ++e) partial[i * kVec + e] = dw[k][e];
    }
  }
}

// grad_w[j] = sum over the blocks' partial rows, in block order.
template <typename T>
__global__ void rms_norm_backward_grad_w_kernel(const typename AccType<T>::type* __restrict__ partial,
                                                int64_t parts, int64_t cols, T* __restrict__ grad_w) {
  using Acc = typename AccType<T>::type;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= cols) return;
  Acc sum = 0;
  for (int64_t p = 0; p < parts; ++p) sum += partial[p * cols + j];
  grad_w[j] = from_acc<T>(sum);
}
// [backward-kernel-end]

// [backward-launch]
// Whether the backward kernel handles rows of `cols` elements of `elem_bytes`
// bytes: whole 16-byte vectors, at most kBwdMaxThreads x kBwdRegVecs of them
// (8192 bf16 or 4096 fp32 elements). The host wrapper falls back to ATen
// operations otherwise.
inline bool rms_norm_backward_supported(int64_t cols, int elem_bytes) {
  const int64_t vec = 16 / elem_bytes;
  return cols % vec == 0 && cols / vec <= static_cast<int64_t>(kBwdMaxThreads) * kBwdRegVecs;
}

// Blocks for the backward: as many as fit on the GPU at once (each then
// walks many rows), at most one per row. Also the number of grad_w partials.
template <typename T>
int64_t rms_norm_backward_blocks(int64_t rows, int64_t cols, int warp_size, int sm_count,
                                 dim3* block) {
  constexpr int kVec = 16 / sizeof(T);
  const int64_t nvec = cols / kVec;
  int64_t per_row = (nvec + kBwdRegVecs - 1) / kBwdRegVecs;
  per_row = ((per_row + warp_size - 1) / warp_size) * warp_size;
  *block = dim3(static_cast<unsigned>(per_row));
  int per_sm = 0;
  cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, rms_norm_backward_kernel<T, kVec>,
                                                static_cast<int>(per_row), 0);
  if (per_sm < 1) per_sm = 1;
  const int64_t blocks = static_cast<int64_t>(per_sm) * sm_count;
  return rows < blocks ? (rows > 0 ? rows : 1) : blocks;
}

// Launches both backward kernels on `stream`. grad_w_partial must hold
// `blocks * cols` accumulators (blocks from rms_norm_backward_blocks). All
// pointers must be 16-byte aligned and cols a multiple of 16 / sizeof(T).
template <typename T>
cudaError_t launch_rms_norm_backward(const T* grad_y, const T* x, const T* weight,
                                     const typename AccType<T>::type* inv_rms, T* grad_x,
                                     typename AccType<T>::type* grad_w_partial, T* grad_w,
                                     int64_t rows, int64_t cols, int64_t blocks, dim3 block,
                                     cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  if (rows > 0) {
    rms_norm_backward_kernel<T, kVec><<<static_cast<unsigned>(blocks), block, 0, stream>>>(
        grad_y, x, weight, inv_rms, grad_x, grad_w_partial, rows, cols);
  }
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  const int threads = 256;
  const int64_t parts = rows > 0 ? blocks : 0;
  rms_norm_backward_grad_w_kernel<T>
      <<<static_cast<unsigned>((cols + threads - 1) / threads), threads, 0, stream>>>(
          grad_w_partial, parts, cols, grad_w);
  return cudaGetLastError();
}
// [backward-launch-end]


}  // namespace cuda
}  // namespace opguide
