// Sweeps the cluster forward (csrc/rms_norm/rms_norm_forward.cuh) for long rows on one
// GPU, without torch, in bfloat16 and float16: the library's kernel (one row
// per cluster, each block's slice staged in shared memory with cp.async,
// "one row") at several block widths and vectors per thread (together the
// slice of a row each block takes, hence the cluster size), against
// persistent clusters that loop over rows with their slices in registers
// ("loop", the library's kernel before), one row per cluster held in
// registers ("row"), a row loop unrolled over a ring of register buffers
// ("ring"), and a row loop with x staged in shared memory several rows ahead
// ("staged"). The "one row" and "row" kernels launch one cluster per row;
// the others as many clusters as fit at once, two blocks to a
// multiprocessor where their registers allow. Prints achieved bandwidth
// against a large device-to-device copy, with the L2 cleaned before each
// batch. No kernel is launched with PDL here. Build and run (on a GPU machine with sm_90):
//   nvcc -O3 -std=c++17 -arch=sm_90 -Icsrc tools/sweep_rms_norm_forward_cluster.cu -o /tmp/fc
//   /tmp/fc
// Bytes: read x, write y (2 M N s) at M N = 2^26, as in guidekit.benchmark.
#include <cstring>

#include "rms_norm/rms_norm_launch.cuh"
#include "sweep_common.cuh"

using namespace opguide;

// The library's kernel before the one-row-per-cluster one: persistent
// clusters, cluster c normalising rows c, c + C, c + 2C, ... (C clusters, as
// many as fit on the GPU at once), each block holding the same slice of
// every row in registers and loading the next row's slice before this row is
// reduced. kKeepWeight keeps the block's slice of the weight in registers
// for every row rather than reading it again per row; the row's sum goes
// through push_sum (kPush) or cluster_sum. The stride between a thread's
// vectors is the constant block width, so addresses are one register plus
// constant offsets.
template <typename T, int kVec, int kRegVecs, int kThreads = kClusterThreads,
          bool kPush = true, bool kKeepWeight = (kThreads <= 512)>
__global__ void __launch_bounds__(kThreads, 1) forward_cluster_loop(
    const T* __restrict__ x, const T* __restrict__ weight, T* __restrict__ y,
    typename AccType<T>::type* __restrict__ inv_rms, int64_t rows, int64_t cols,
    int64_t x_row_stride, float eps) {
  using Acc = typename AccType<T>::type;
  using V = Vec<T, kVec>;
  constexpr int kWarps = kThreads / kWarpSize;
  __shared__ Acc shared[kPush ? 1 : 2][kPush ? 1 : kMaxWarpsPerBlock];
  __shared__ Acc slots[2];
  __shared__ PushSlots<Acc, kPush ? kWarps : 1> push;
  wait_for_previous_grid();
  allow_next_grid();
  if constexpr (kPush) push_slots_init(push);
  const Slice s = cluster_slice(cols / kVec);
  const int64_t clusters = gridDim.x / cluster_blocks();
  const int64_t first_row = blockIdx.x / cluster_blocks();
  const V* wv = reinterpret_cast<const V*>(weight) + s.begin;
  auto load = [&](int64_t r, V (&out)[kRegVecs]) {
    if (r >= rows) return;
    const V* xr = reinterpret_cast<const V*>(x + r * x_row_stride) + s.begin;
#pragma unroll
    for (int k = 0; k < kRegVecs; ++k) {
      const int64_t i = threadIdx.x + static_cast<int64_t>(k) * kThreads;
      if (i < s.count) out[k] = xr[i];
    }
  };

  V wkeep[kKeepWeight ? kRegVecs : 1];
  if constexpr (kKeepWeight) {
#pragma unroll
    for (int k = 0; k < kRegVecs; ++k) {
      const int64_t i = threadIdx.x + static_cast<int64_t>(k) * kThreads;
      if (i < s.count) wkeep[k] = wv[i];
    }
  }
  V cache[kRegVecs];
  load(first_row, cache);
  int64_t iteration = 0;
  for (int64_t row = first_row; row < rows; row += clusters, ++iteration) {
    Acc sum_sq = 0;
#pragma unroll
    for (int k = 0; k < kRegVecs; ++k) {
      const int64_t i = threadIdx.x + static_cast<int64_t>(k) * kThreads;
      if (i < s.count) {
#pragma unroll
        for (int e = 0; e < kVec; ++e) {
          const Acc v = to_acc(cache[k].val[e]);
          sum_sq += v * v;
        }
      }
    }
    V next[kRegVecs];
    load(row + clusters, next);
    if constexpr (kPush) {
      sum_sq = push_sum(sum_sq, push, iteration);
    } else {
      const int parity = static_cast<int>(iteration & 1);
      sum_sq = cluster_sum(row_sum(sum_sq, shared[parity]), &slots[parity]);
    }
    const Acc r = Acc(1) / sqrt(sum_sq / static_cast<Acc>(cols) + static_cast<Acc>(eps));
    if (inv_rms != nullptr && cluster_rank() == 0 && threadIdx.x == 0)
      inv_rms[row] = r;
    V* yr = reinterpret_cast<V*>(y + row * cols) + s.begin;
#pragma unroll
    for (int k = 0; k < kRegVecs; ++k) {
      const int64_t i = threadIdx.x + static_cast<int64_t>(k) * kThreads;
      if (i < s.count) {
        const V v = keep_packed(cache[k]);
        V wk;
        if constexpr (kKeepWeight) {
          wk = keep_packed(wkeep[k]);
        } else {
          wk = keep_packed(wv[i]);
        }
        V out;
#pragma unroll
        for (int e = 0; e < kVec; ++e)
          out.val[e] = from_acc<T>(to_acc(v.val[e]) * r * to_acc(wk.val[e]));
        yr[i] = out;
      }
    }
#pragma unroll
    for (int k = 0; k < kRegVecs; ++k) cache[k] = next[k];
  }
  // With cluster_sum, no block may leave while another still reads its slot.
  // (With push_sum a block reads only its own shared memory, and every push
  // into it has arrived once its last wait returns.)
  if constexpr (!kPush) cluster_barrier();
}

constexpr int kBatches = 11;

// The per-slice work of the two alternatives below: the sum of squares of
// a thread's vectors, and the scaled output written from them.
template <typename T, int kVec, int kThreads, int kRegVecs>
__device__ __forceinline__ float slice_sum_sq(const Vec<T, kVec> (&buf)[kRegVecs],
                                              int64_t count) {
  float sum_sq = 0;
#pragma unroll
  for (int k = 0; k < kRegVecs; ++k) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(k) * kThreads;
    if (i < count) {
#pragma unroll
      for (int e = 0; e < kVec; ++e) {
        const float v = to_acc(buf[k].val[e]);
        sum_sq += v * v;
      }
    }
  }
  return sum_sq;
}

template <typename T, int kVec, int kThreads, int kRegVecs>
__device__ __forceinline__ void store_slice(const Vec<T, kVec> (&buf)[kRegVecs],
                                            const Vec<T, kVec>* wv, float r,
                                            Vec<T, kVec>* yr, int64_t count) {
#pragma unroll
  for (int k = 0; k < kRegVecs; ++k) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(k) * kThreads;
    if (i < count) {
      const Vec<T, kVec> wk = wv[i];
      Vec<T, kVec> out;
#pragma unroll
      for (int e = 0; e < kVec; ++e)
        out.val[e] = from_acc<T>(to_acc(buf[k].val[e]) * r * to_acc(wk.val[e]));
      yr[i] = out;
    }
  }
}

// The slice [s.begin, s.begin + s.count) of row r into registers.
template <typename T, int kVec, int kThreads, int kRegVecs>
__device__ __forceinline__ void load_slice(const T* x, int64_t r, int64_t rows, int64_t cols,
                                           Slice s, Vec<T, kVec> (&out)[kRegVecs]) {
  if (r >= rows) return;
  const Vec<T, kVec>* xr = reinterpret_cast<const Vec<T, kVec>*>(x + r * cols) + s.begin;
#pragma unroll
  for (int k = 0; k < kRegVecs; ++k) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(k) * kThreads;
    if (i < s.count) out[k] = xr[i];
  }
}

// One row per cluster, no row loop: the GPU schedules clusters as others
// finish, and kMinBlocks blocks share a multiprocessor, so one block's loads
// overlap another's wait for the row's sum (cluster_sum, or push_sum with
// kPush).
template <typename T, int kVec, int kThreads, int kRegVecs, int kMinBlocks, bool kPush>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    forward_cluster_row(const T* __restrict__ x, const T* __restrict__ weight, T* __restrict__ y,
                        float* __restrict__, int64_t rows, int64_t cols, int64_t, float eps) {
  using V = Vec<T, kVec>;
  __shared__ float shared[kMaxWarpsPerBlock];
  __shared__ float slot;
  __shared__ PushSlots<float, kThreads / kWarpSize> push;
  if constexpr (kPush) push_slots_init(push);
  const Slice s = cluster_slice(cols / kVec);
  const int64_t row = blockIdx.x / cluster_blocks();
  V cache[kRegVecs];
  load_slice<T, kVec, kThreads, kRegVecs>(x, row, rows, cols, s, cache);
  float sum_sq = slice_sum_sq<T, kVec, kThreads, kRegVecs>(cache, s.count);
  if constexpr (kPush) {
    sum_sq = push_sum(sum_sq, push, 0);
  } else {
    sum_sq = cluster_sum(row_sum(sum_sq, shared), &slot);
  }
  const float r = 1.0f / sqrtf(sum_sq / static_cast<float>(cols) + eps);
  store_slice<T, kVec, kThreads, kRegVecs>(cache, reinterpret_cast<const V*>(weight) + s.begin,
                                           r, reinterpret_cast<V*>(y + row * cols) + s.begin,
                                           s.count);
  if constexpr (!kPush) cluster_barrier();  // no block leaves while another reads its slot
}

// The row loop unrolled kDepth times over a ring of kDepth row buffers, so
// that no buffer is copied into another (a copy waits for its load to land):
// step j works on buffer j and then loads the row kDepth rows ahead into it.
template <typename T, int kVec, int kThreads, int kRegVecs, int kDepth>
__global__ void __launch_bounds__(kThreads, 1)
    forward_cluster_ring(const T* __restrict__ x, const T* __restrict__ weight, T* __restrict__ y,
                         float* __restrict__, int64_t rows, int64_t cols, int64_t, float eps) {
  using V = Vec<T, kVec>;
  __shared__ float shared[2][kMaxWarpsPerBlock];
  __shared__ float slots[2];
  const Slice s = cluster_slice(cols / kVec);
  const int64_t clusters = gridDim.x / cluster_blocks();
  const int64_t first_row = blockIdx.x / cluster_blocks();
  const V* wv = reinterpret_cast<const V*>(weight) + s.begin;
  V buf[kDepth][kRegVecs];
#pragma unroll
  for (int a = 0; a < kDepth; ++a)
    load_slice<T, kVec, kThreads, kRegVecs>(x, first_row + a * clusters, rows, cols, s, buf[a]);
  int parity = 0;
  for (int64_t row0 = first_row; row0 < rows; row0 += kDepth * clusters) {
#pragma unroll
    for (int j = 0; j < kDepth; ++j) {
      const int64_t row = row0 + j * clusters;
      if (row >= rows) break;
      float sum_sq = slice_sum_sq<T, kVec, kThreads, kRegVecs>(buf[j], s.count);
      sum_sq = cluster_sum(row_sum(sum_sq, shared[parity]), &slots[parity]);
      parity ^= 1;
      const float r = 1.0f / sqrtf(sum_sq / static_cast<float>(cols) + eps);
      store_slice<T, kVec, kThreads, kRegVecs>(buf[j], wv, r,
                                               reinterpret_cast<V*>(y + row * cols) + s.begin,
                                               s.count);
      load_slice<T, kVec, kThreads, kRegVecs>(x, row + kDepth * clusters, rows, cols, s, buf[j]);
    }
  }
  cluster_barrier();
}

// The library's row loop with x staged in shared memory: each thread copies
// its own vectors of the rows kStages - 1 ahead with cp.async (so kStages - 1
// rows are in flight per block while it works on one, against one row in
// registers for the library's kernel) and reads back only its own vectors,
// so no barrier separates a copy from its read. A row's stage is refilled one
// row after it was read, when its values have been used.
template <typename T, int kVec, int kThreads, int kRegVecs, int kStages, int kMinBlocks>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    forward_cluster_staged(const T* __restrict__ x, const T* __restrict__ weight,
                           T* __restrict__ y, float* __restrict__ inv_rms, int64_t rows,
                           int64_t cols, int64_t, float eps) {
  using V = Vec<T, kVec>;
  __shared__ PushSlots<float, kThreads / kWarpSize> push;
  extern __shared__ __align__(16) unsigned char dynamic_shared[];
  push_slots_init(push);
  const Slice s = cluster_slice(cols / kVec);
  const int64_t clusters = gridDim.x / cluster_blocks();
  const int64_t first_row = blockIdx.x / cluster_blocks();
  const V* wv = reinterpret_cast<const V*>(weight) + s.begin;
  V* const mine = reinterpret_cast<V*>(dynamic_shared) + threadIdx.x;
  constexpr int kPerStage = kRegVecs * kThreads;
  auto fetch = [&](int64_t r, int stage) {
    if (r < rows) {
      const V* xr = reinterpret_cast<const V*>(x + r * cols) + s.begin;
#pragma unroll
      for (int k = 0; k < kRegVecs; ++k) {
        const int64_t i = threadIdx.x + static_cast<int64_t>(k) * kThreads;
        if (i < s.count) copy_async(mine + stage * kPerStage + k * kThreads, xr + i);
      }
    }
    copy_async_commit();
  };
#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) fetch(first_row + st * clusters, st);
  int stage = 0;
  int64_t iteration = 0;
  for (int64_t row = first_row; row < rows; row += clusters, ++iteration) {
    fetch(row + (kStages - 1) * clusters, stage == 0 ? kStages - 1 : stage - 1);
    copy_async_wait<kStages - 1>();
    V cache[kRegVecs];
#pragma unroll
    for (int k = 0; k < kRegVecs; ++k) cache[k] = mine[stage * kPerStage + k * kThreads];
    stage = stage + 1 == kStages ? 0 : stage + 1;
    float sum_sq = slice_sum_sq<T, kVec, kThreads, kRegVecs>(cache, s.count);
    sum_sq = push_sum(sum_sq, push, iteration);
    const float r = 1.0f / sqrtf(sum_sq / static_cast<float>(cols) + eps);
    if (inv_rms != nullptr && cluster_rank() == 0 && threadIdx.x == 0)
      inv_rms[row] = r;
    store_slice<T, kVec, kThreads, kRegVecs>(cache, wv, r,
                                             reinterpret_cast<V*>(y + row * cols) + s.begin,
                                             s.count);
  }
  copy_async_wait<0>();
}

template <typename T>
struct Buffers {
  std::vector<T*> xs, ys;
  T* w = nullptr;
};

// kKind 0: forward_cluster_loop (one row loaded ahead) at kThreads threads,
// its weight slice kept in registers (kKnob 1) or read for each row (kKnob
// 0); 1: forward_cluster_row with kKnob blocks per SM; 2:
// forward_cluster_ring kKnob rows deep; 3: forward_cluster_staged with kKnob
// stages (kPush true: two blocks per SM); 4: the library's kernel,
// rms_norm_forward_cluster_kernel, kRegVecs vectors a thread. kPush:
// push_sum rather than cluster_sum (kinds 0 and 1).
template <int kThreads, int kRegVecs, int kKind, int kKnob, bool kPush, typename T>
void run(const char* name, int64_t M, int64_t N, double copy_bw, Buffers<T>& b, T* ref) {
  constexpr int kVec = 16 / sizeof(T);
  const int cluster = cluster_size_for(N / kVec, kMaxClusterBlocks, kThreads, kRegVecs);
  using K = void (*)(const T*, const T*, T*, float*, int64_t, int64_t, int64_t, float);
  K kernel;
  if constexpr (kKind == 0) {
    kernel = forward_cluster_loop<T, kVec, kRegVecs, kThreads, kPush,
                                  kThreads <= 512 && kKnob == 1>;
  } else if constexpr (kKind == 1) {
    kernel = forward_cluster_row<T, kVec, kThreads, kRegVecs, kKnob, kPush>;
  } else if constexpr (kKind == 2) {
    kernel = forward_cluster_ring<T, kVec, kThreads, kRegVecs, kKnob>;
  } else if constexpr (kKind == 3) {
    kernel = forward_cluster_staged<T, kVec, kThreads, kRegVecs, kKnob, kPush ? 2 : 1>;
  } else {
    kernel = rms_norm_forward_cluster_kernel<T, kVec, kThreads, kRegVecs>;
  }
  const size_t shared = kKind == 3 ? static_cast<size_t>(kKnob) * kRegVecs * kThreads * 16 : 0;
  allow_shared_bytes(kernel, shared);
  allow_cluster_size(kernel, cluster);
  const int fit = cluster > 0 ? active_clusters(kernel, cluster, kThreads, shared) : 0;
  if (fit == 0) {
    printf("  %-28s cluster %2d: does not fit\n", name, cluster);
    return;
  }
  const int64_t clusters = kKind == 1 || kKind == 4 || M < fit ? M : fit;
  const int nbuf = static_cast<int>(b.xs.size());
  auto launch = [&](int i) {
    const int s = i % nbuf;
    CHECK(launch_kernel_in_clusters(kernel, dim3(static_cast<unsigned>(clusters * cluster)),
                                    dim3(kThreads), shared, nullptr, false, cluster, b.xs[s], b.w,
                                    b.ys[s], nullptr, M, N, N, 1e-6f));
  };
  launch(0);
  CHECK(cudaDeviceSynchronize());
  std::vector<T> got(M * N), want(M * N);
  CHECK(cudaMemcpy(got.data(), b.ys[0], M * N * sizeof(T), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(want.data(), ref, M * N * sizeof(T), cudaMemcpyDeviceToHost));
  int64_t differ = 0;
  for (int64_t i = 0; i < M * N; ++i)
    differ += std::memcmp(&got[i], &want[i], sizeof(T)) != 0;
  const float us = time_us(launch, 10, kBatches);
  const double bw = 2.0 * M * N * sizeof(T) / (us * 1e-6);
  printf("  %-28s cluster %2d x %3lld: %8.1f us  %5.0f GB/s  %.2f of copy%s\n", name, cluster,
         static_cast<long long>(clusters), us, bw / 1e9, bw / copy_bw,
         differ ? "  (other bits: another cluster size sums in another order)" : "");
}

template <typename T>
void sweep(const char* dtype, double copy_bw) {
  const int64_t total = int64_t{1} << 26;
  for (int64_t N : {16384, 32768, 65536, 131072}) {
    const int64_t M = total / N;
    Buffers<T> b;
    const int nbuf = 2;
    for (int i = 0; i < nbuf; ++i) {
      T *x, *y;
      CHECK(cudaMalloc(&x, total * sizeof(T)));
      CHECK(cudaMalloc(&y, total * sizeof(T)));
      fill<<<1024, 256>>>(x, total, 3 + i);
      b.xs.push_back(x);
      b.ys.push_back(y);
    }
    CHECK(cudaMalloc(&b.w, N * sizeof(T)));
    fill<<<256, 256>>>(b.w, N, 7);
    T* ref;
    CHECK(cudaMalloc(&ref, total * sizeof(T)));
    const LaunchSettings settings{nullptr, false, kMaxClusterBlocks};
    // The library's plan for each call (rms_norm_forward_plan_for), then its launch.
    const auto library = [&](const T* x, T* y) {
      const RowPlan plan = rms_norm_forward_plan_for<T>(x, b.w, y, M, N, N, settings);
      return launch_rms_norm_forward<T>(plan, x, b.w, y, nullptr, M, N, N, 1e-6f, settings);
    };
    CHECK(library(b.xs[0], ref));
    const float lib_us = time_us(
        [&](int i) { CHECK(library(b.xs[i % nbuf], b.ys[i % nbuf])); },
        10, kBatches);
    const double lib_bw = 2.0 * M * N * sizeof(T) / (lib_us * 1e-6);
    printf("%s M=%lld N=%lld: library %.1f us, %.0f GB/s, %.2f of copy\n", dtype,
           static_cast<long long>(M), static_cast<long long>(N), lib_us, lib_bw / 1e9,
           lib_bw / copy_bw);
    run<128, 8, 4, 0, true>("one row 128 x 8", M, N, copy_bw, b, ref);
    run<256, 8, 4, 0, true>("one row 256 x 8", M, N, copy_bw, b, ref);
    run<128, 4, 4, 0, true>("one row 128 x 4", M, N, copy_bw, b, ref);
    run<256, 4, 4, 0, true>("one row 256 x 4", M, N, copy_bw, b, ref);
    run<128, 16, 4, 0, true>("one row 128 x 16", M, N, copy_bw, b, ref);
    run<1024, 4, 0, 1, false>("loop 1024 x 4, barrier", M, N, copy_bw, b, ref);
    run<512, 4, 0, 1, true>("loop 512 x 4, push", M, N, copy_bw, b, ref);
    run<512, 4, 0, 0, true>("loop 512 x 4, push, w per row", M, N, copy_bw, b, ref);
    run<1024, 2, 0, 1, true>("loop 1024 x 2, push", M, N, copy_bw, b, ref);
    run<512, 4, 1, 2, true>("row 512 x 4, 2/SM, push", M, N, copy_bw, b, ref);
    run<512, 4, 3, 2, false>("staged 512 x 4, 2 stages", M, N, copy_bw, b, ref);
    run<512, 4, 3, 3, false>("staged 512 x 4, 3 stages", M, N, copy_bw, b, ref);
    run<512, 4, 3, 4, false>("staged 512 x 4, 4 stages", M, N, copy_bw, b, ref);
    run<512, 8, 3, 2, false>("staged 512 x 8, 2 stages", M, N, copy_bw, b, ref);
    run<512, 8, 3, 3, false>("staged 512 x 8, 3 stages", M, N, copy_bw, b, ref);
    run<256, 8, 3, 4, false>("staged 256 x 8, 4 stages", M, N, copy_bw, b, ref);
    run<1024, 4, 3, 3, false>("staged 1024 x 4, 3 stages", M, N, copy_bw, b, ref);
    run<256, 4, 3, 4, true>("staged 256 x 4, 4 st, 2/SM", M, N, copy_bw, b, ref);
    run<512, 2, 3, 4, true>("staged 512 x 2, 4 st, 2/SM", M, N, copy_bw, b, ref);
    run<256, 8, 3, 3, true>("staged 256 x 8, 3 st, 2/SM", M, N, copy_bw, b, ref);
    for (int i = 0; i < nbuf; ++i) {
      cudaFree(b.xs[i]);
      cudaFree(b.ys[i]);
    }
    cudaFree(b.w);
    cudaFree(ref);
  }
}

int main() {
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  const double copy_bw = copy_bandwidth(prop, kBatches);
  enable_l2_clean(prop);
  sweep<__nv_bfloat16>("bf16", copy_bw);
  sweep<__half>("fp16", copy_bw);
  return 0;
}
