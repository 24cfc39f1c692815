// Sweeps the RMSNorm backward kernels (csrc/rms_norm/rms_norm_backward.cuh)
// on one GPU, without torch, and prints achieved bandwidth against a large
// device-to-device copy. Build and run (on a GPU machine):
//   nvcc -O3 -std=c++17 -arch=sm_90 -Icsrc tools/sweep_rms_norm_backward.cu -o /tmp/sweep_backward
//   /tmp/sweep_backward [bf16] [pipelined]
// "bf16" skips float16; "pipelined" sweeps the library's cp.async kernel
// (rms_norm_backward_pipelined_kernel, its knobs given as SweepKnobs) against
// the register-prefetch one. Times are per call of both kernels (rows, then
// the grad_weight partial sums), each batch queued behind a spin kernel so launch
// latency is not counted. Bytes: read x and grad_y, write grad_x (3 M N s), as in
// guidekit.benchmark.
#include <string>
#include <utility>

#include "rms_norm/rms_norm_launch.cuh"  // -Icsrc, as the sweeps are built
#include "sweep_common.cuh"

using namespace opguide;

// The pipelined kernel's knobs, other values than the library's PipelinedKnobs.
template <int kStagesValue, int kMinBlocksValue>
struct SweepKnobs {
  static constexpr int kStages = kStagesValue;
  static constexpr int kMinBlocks = kMinBlocksValue;
};

// The register-prefetch backward with its knobs as template parameters:
// kPrefetch (load the next row before reducing this one), kMinBlocks (the
// second argument of __launch_bounds__), kGradWeightShared (grad_weight sums in shared
// memory instead of registers), kWRegs (the weight slice in registers, or
// re-read from L1 each row). A copy, not the library's kernel: prefetch off,
// grad_weight in shared memory and the weight re-read are other code paths that
// the library does not ship; with (true, 1, false, true) it compiles to
// rms_norm_backward_kernel.
template <typename T, int kVec, int kRegVecs, bool kPrefetch, int kMinBlocks, bool kGradWeightShared,
          bool kWRegs>
__global__ void __launch_bounds__(kBackwardMaxThreads, kMinBlocks) backward_kernel(
    const T* __restrict__ grad_y, const T* __restrict__ x, const T* __restrict__ weight,
    const typename AccType<T>::type* __restrict__ inv_rms, T* __restrict__ grad_x,
    typename AccType<T>::type* __restrict__ grad_weight_partial, int64_t rows, int64_t cols) {
  using Acc = typename AccType<T>::type;
  using V = Vec<T, kVec>;
  // Two buffers: iteration i reduces in shared[i % 2], so a fast warp that
  // starts the next row cannot overwrite what a slow warp is still reading.
  __shared__ Acc shared[2][kMaxWarpsPerBlock];
  extern __shared__ __align__(16) unsigned char dynamic_shared[];
  wait_for_previous_grid();  // see launch.cuh
  allow_next_grid();
  const int64_t nvec = cols / kVec;
  const V* wv = reinterpret_cast<const V*>(weight);
  // kGradWeightShared: this slot's grad_weight sums live in shared memory, element e of
  // vector i at e * nvec + i (neighbouring threads, neighbouring banks).
  Acc* grad_weight_s = reinterpret_cast<Acc*>(dynamic_shared) + threadIdx.y * cols;

  V w[kRegVecs];
  Acc grad_weight[kGradWeightShared ? 1 : kRegVecs][kVec];
#pragma unroll
  for (int k = 0; k < kRegVecs; ++k) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
    if (kWRegs && i < nvec) w[k] = wv[i];
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      if constexpr (kGradWeightShared) {
        if (i < nvec) grad_weight_s[e * nvec + i] = 0;
      } else {
        grad_weight[k][e] = 0;
      }
    }
  }

  // Every thread of the block runs the same number of iterations (row_sum
  // synchronises the block); a slot past the last row just idles.
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.y;
  int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  V g[kRegVecs], xv[kRegVecs];
  if (kPrefetch && row < rows) {
    load_row_slice(reinterpret_cast<const V*>(grad_y + row * cols), nvec, g);
    load_row_slice(reinterpret_cast<const V*>(x + row * cols), nvec, xv);
  }
  int parity = 0;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * blockDim.y; base < rows;
       base += stride, row += stride, parity ^= 1) {
    const bool active = row < rows;
    if (!kPrefetch && active) {
      load_row_slice(reinterpret_cast<const V*>(grad_y + row * cols), nvec, g);
      load_row_slice(reinterpret_cast<const V*>(x + row * cols), nvec, xv);
    }
    const Acc r = active ? inv_rms[row] : Acc(0);
    Acc dot = 0;
    if (active) {
#pragma unroll
      for (int k = 0; k < kRegVecs; ++k) {
        const int64_t i = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
        if (i < nvec) {
          const V wk = kWRegs ? w[k] : wv[i];
#pragma unroll
          for (int e = 0; e < kVec; ++e)
            dot += to_acc(g[k].val[e]) * to_acc(wk.val[e]) * to_acc(xv[k].val[e]);
        }
      }
    }
    // The next row's loads go out now and arrive while this row is reduced.
    V g_next[kRegVecs], x_next[kRegVecs];
    if (kPrefetch && row + stride < rows) {
      load_row_slice(reinterpret_cast<const V*>(grad_y + (row + stride) * cols), nvec, g_next);
      load_row_slice(reinterpret_cast<const V*>(x + (row + stride) * cols), nvec, x_next);
    }
    dot = row_sum(dot, shared[parity]);
    if (active) {
      const Acc c = dot * r * r * r / static_cast<Acc>(cols);
      V* dxr = reinterpret_cast<V*>(grad_x + row * cols);
#pragma unroll
      for (int k = 0; k < kRegVecs; ++k) {
        const int64_t i = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
        if (i < nvec) {
          const V wk = kWRegs ? w[k] : wv[i];
          V out;
#pragma unroll
          for (int e = 0; e < kVec; ++e) {
            const Acc gv = to_acc(g[k].val[e]);
            const Acc xe = to_acc(xv[k].val[e]);
            out.val[e] = from_acc<T>(r * gv * to_acc(wk.val[e]) - c * xe);
            if constexpr (kGradWeightShared) {
              grad_weight_s[e * nvec + i] += gv * xe * r;
            } else {
              grad_weight[k][e] += gv * xe * r;
            }
          }
          store_streaming(dxr + i, out);
        }
      }
    }
    if constexpr (kPrefetch) {
#pragma unroll
      for (int k = 0; k < kRegVecs; ++k) {
        g[k] = g_next[k];
        xv[k] = x_next[k];
      }
    }
  }

  // The block's partial grad_weight row: the slots' sums added in slot order.
  Acc* partial = grad_weight_partial + static_cast<int64_t>(blockIdx.x) * cols;
  if constexpr (kGradWeightShared) {
    __syncthreads();
    const int threads = blockDim.x * blockDim.y;
    for (int64_t j = threadIdx.y * blockDim.x + threadIdx.x; j < cols; j += threads) {
      const int64_t at = (j % kVec) * nvec + j / kVec;
      Acc total = 0;
      for (int slot = 0; slot < static_cast<int>(blockDim.y); ++slot)
        total += reinterpret_cast<Acc*>(dynamic_shared)[slot * cols + at];
      partial[j] = total;
    }
  } else {
    store_partial_grad_weight<kVec>(grad_weight, nvec, partial, reinterpret_cast<Acc*>(dynamic_shared));
  }
}

// The library's one-block planner (rms_norm_backward_shape), with these
// instances and their knobs.
template <typename T, int kRegs, bool kPrefetch, int kMinBlocks, bool kGradWeightShared, bool kWRegs>
RmsNormBackwardPlan backward_plan_for(int64_t rows, int64_t cols, int min_threads) {
  constexpr int kVec = 16 / sizeof(T);
  BackwardShapeKnobs knobs{kVec, kRegs};
  knobs.min_threads = min_threads;
  knobs.sums_per_slot = kGradWeightShared;
  return rms_norm_backward_shape<T>(
      backward_kernel<T, kVec, kRegs, kPrefetch, kMinBlocks, kGradWeightShared, kWRegs>, rows, cols,
      knobs, device_info());
}

template <typename T, int kRegs, int kStages, int kMinBlocks>
RmsNormBackwardPlan backward_pipelined_plan_for(int64_t rows, int64_t cols, int min_threads,
                                                int max_blocks_per_sm) {
  constexpr int kVec = 16 / sizeof(T);
  BackwardShapeKnobs knobs{kVec, kRegs, kStages};
  knobs.min_threads = min_threads;
  knobs.max_blocks_per_sm = max_blocks_per_sm;
  return rms_norm_backward_shape<T>(
      rms_norm_backward_pipelined_kernel<T, kVec, kRegs, SweepKnobs<kStages, kMinBlocks>>, rows,
      cols, knobs, device_info());
}

// Timed batches per measurement.
constexpr int kBatches = 11;

// Times the plan's two kernels, then its first alone (rows and partials,
// without the grad_weight sum): {both, first} in microseconds.
template <typename T>
std::pair<float, float> time_plan(BackwardKernelFn<T> kernel, const RmsNormBackwardPlan& cfg,
                                  int64_t M, int64_t N, std::vector<T*>& xs,
                                  std::vector<T*>& gs, std::vector<T*>& grad_xs,
                                  std::vector<float*>& rs, T* w, float* partial, T* grad_weight,
                                  bool pdl) {
  const int nbuf = (int)xs.size();
  const float us = time_us([&](int i) {
    const int s = i % nbuf;
    CHECK(launch_backward_pair<T>(kernel, gs[s], xs[s], w, rs[s], grad_xs[s], partial, grad_weight, M, N, cfg,
                                  0, pdl));
  }, 20, kBatches);
  const float us_rows = time_us([&](int i) {
    const int s = i % nbuf;
    kernel<<<(unsigned)cfg.blocks, cfg.block, cfg.shared_bytes>>>(gs[s], xs[s], w, rs[s], grad_xs[s],
                                                                  partial, M, N);
  }, 20, kBatches);
  CHECK(cudaGetLastError());
  return {us, us_rows};
}

template <typename T, int kRegs, bool kPrefetch, int kMinBlocks, bool kGradWeightS, bool kWR>
void run_variant(const char* dtype, int64_t M, int64_t N, int sms, double copy_bw,
                 std::vector<T*>& xs, std::vector<T*>& gs, std::vector<T*>& grad_xs,
                 std::vector<float*>& rs, T* w, float* partial, T* grad_weight, int min_threads) {
  if (N / (16 / (int)sizeof(T)) > (int64_t)kBackwardMaxThreads * kRegs) return;
  const RmsNormBackwardPlan cfg =
      backward_plan_for<T, kRegs, kPrefetch, kMinBlocks, kGradWeightS, kWR>(M, N, min_threads);
  auto kernel = backward_kernel<T, 16 / sizeof(T), kRegs, kPrefetch, kMinBlocks, kGradWeightS, kWR>;
  const auto [us, us_rows] =
      time_plan<T>(kernel, cfg, M, N, xs, gs, grad_xs, rs, w, partial, grad_weight, false);
  cudaFuncAttributes attr;
  CHECK(cudaFuncGetAttributes(&attr, kernel));
  const double bytes = 3.0 * M * N * sizeof(T);
  printf("  %-4s %6lldx%-5lld vecs/thr %d prefetch %d minblk %d grad_weight_smem %d w_regs %d "
         "blk %3ux%-2u grid %5lld regs %3d  %7.1f us %5.1f%%  rows kernel %7.1f us\n",
         dtype, (long long)M, (long long)N, kRegs, (int)kPrefetch, kMinBlocks, (int)kGradWeightS, (int)kWR,
         cfg.block.x, cfg.block.y, (long long)cfg.blocks, attr.numRegs, us,
         100.0 * bytes / (us * 1e-6) / copy_bw, us_rows);
  fflush(stdout);
}

// The cp.async pipelined kernel: kStages rows of g and x in shared memory.
template <typename T, int kRegs, int kStages, int kMinBlocks>
void run_pipelined(const char* dtype, int64_t M, int64_t N, int sms, double copy_bw,
                   std::vector<T*>& xs, std::vector<T*>& gs, std::vector<T*>& grad_xs,
                   std::vector<float*>& rs, T* w, float* partial, T* grad_weight, int min_threads,
                   int cap, bool pdl) {
  if (N / (16 / (int)sizeof(T)) > (int64_t)kBackwardMaxThreads * kRegs) return;
  const RmsNormBackwardPlan cfg =
      backward_pipelined_plan_for<T, kRegs, kStages, kMinBlocks>(M, N, min_threads, cap);
  if (cfg.blocks == 0) return;  // more shared memory than a block may have
  auto kernel = rms_norm_backward_pipelined_kernel<T, 16 / sizeof(T), kRegs,
                                                   SweepKnobs<kStages, kMinBlocks>>;
  const auto [us, us_rows] =
      time_plan<T>(kernel, cfg, M, N, xs, gs, grad_xs, rs, w, partial, grad_weight, pdl);
  cudaFuncAttributes attr;
  CHECK(cudaFuncGetAttributes(&attr, kernel));
  const double bytes = 3.0 * M * N * sizeof(T);
  printf("  %-4s %6lldx%-5lld vecs/thr %d stages %d minblk %d pdl %d blk %3ux%-2u grid %5lld "
         "smem %3zu KiB regs %3d  %7.1f us %5.1f%%  rows kernel %7.1f us\n",
         dtype, (long long)M, (long long)N, kRegs, kStages, kMinBlocks, (int)pdl, cfg.block.x,
         cfg.block.y,
         (long long)cfg.blocks, cfg.shared_bytes / 1024, attr.numRegs, us,
         100.0 * bytes / (us * 1e-6) / copy_bw, us_rows);
  fflush(stdout);
}

template <typename T>
void run_dtype(const char* dtype, int64_t M, int64_t N, int sms, double copy_bw, size_t l2,
               bool pipelined) {
  const size_t bytes = (size_t)M * N * sizeof(T);
  const int nbuf = (int)std::max<size_t>(2, (3 * l2 + 3 * bytes - 1) / (3 * bytes));
  std::vector<T*> xs(nbuf), gs(nbuf), grad_xs(nbuf);
  std::vector<float*> rs(nbuf);
  for (int i = 0; i < nbuf; ++i) {
    CHECK(cudaMalloc(&xs[i], bytes));
    CHECK(cudaMalloc(&gs[i], bytes));
    CHECK(cudaMalloc(&grad_xs[i], bytes));
    CHECK(cudaMalloc(&rs[i], M * sizeof(float)));
    fill<<<1024, 256>>>(xs[i], M * N, 1 + i);
    fill<<<1024, 256>>>(gs[i], M * N, 100 + i);
    fill<<<1024, 256>>>(rs[i], M, 7 + i);
  }
  T *w, *grad_weight;
  float* partial;
  CHECK(cudaMalloc(&w, N * sizeof(T)));
  CHECK(cudaMalloc(&grad_weight, N * sizeof(T)));
  CHECK(cudaMalloc(&partial, (size_t)8192 * N * sizeof(float)));
  fill<<<64, 256>>>(w, N, 3);
  if (pipelined) {
    // The register-prefetch instance opguide used before, then the pipeline.
    run_variant<T, 2, true, 1, false, true>(dtype, M, N, sms, copy_bw, xs, gs, grad_xs, rs, w,
                                            partial, grad_weight, 256);
    // (min threads per block, most blocks per SM (0: as many as fit), PDL)
    const int settings[][3] = {{512, 0, 1}, {256, 0, 1}, {256, 1, 1}};
    for (const auto& st : settings) {
      printf(" min threads per block %d, blocks per SM at most %d, pdl %d\n", st[0], st[1], st[2]);
#define P(R, S, B)                                                                          \
  run_pipelined<T, R, S, B>(dtype, M, N, sms, copy_bw, xs, gs, grad_xs, rs, w, partial, grad_weight, st[0], \
                            st[1], st[2] != 0)
      P(1, 2, 1); P(1, 3, 1);
      P(2, 2, 1); P(2, 3, 1); P(2, 4, 1);
      P(4, 2, 1); P(4, 3, 1); P(4, 4, 1);
#undef P
    }
  }
  for (int mt : {128, 256}) {
    if (pipelined) break;
    printf(" min threads per block %d\n", mt);
#define V(R, P, B, D, W) \
  run_variant<T, R, P, B, D, W>(dtype, M, N, sms, copy_bw, xs, gs, grad_xs, rs, w, partial, grad_weight, mt)
    V(2, true, 1, false, true);
    V(2, true, 1, true, true);
    V(2, true, 1, false, false);
    V(2, true, 1, true, false);
    V(2, true, 2, true, false);
    V(4, false, 1, true, false);
    V(4, true, 1, true, false);
    V(4, true, 1, false, false);
    V(1, true, 1, true, false);
    V(1, true, 2, true, false);
#undef V
  }
  for (int i = 0; i < nbuf; ++i) {
    cudaFree(xs[i]);
    cudaFree(gs[i]);
    cudaFree(grad_xs[i]);
    cudaFree(rs[i]);
  }
  cudaFree(w);
  cudaFree(grad_weight);
  cudaFree(partial);
}

int main(int argc, char** argv) {
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  const double copy_bw = copy_bandwidth(prop, kBatches);
  const int64_t shapes[][2] = {{32768, 4096}, {8192, 4096}, {4096, 8192}, {65536, 1024}};
  bool only_bf16 = false, pipelined = false;
  for (int a = 1; a < argc; ++a) {
    const std::string arg = argv[a];
    if (arg == "bf16") only_bf16 = true;
    else if (arg == "pipelined") pipelined = true;
    else {
      printf("usage: %s [bf16] [pipelined]\n", argv[0]);
      return 2;
    }
  }
  for (auto& sh : shapes) {
    run_dtype<__nv_bfloat16>("bf16", sh[0], sh[1], prop.multiProcessorCount, copy_bw,
                             prop.l2CacheSize, pipelined);
    if (!only_bf16)
      run_dtype<__half>("fp16", sh[0], sh[1], prop.multiProcessorCount, copy_bw,
                        prop.l2CacheSize, pipelined);
  }
  return 0;
}
