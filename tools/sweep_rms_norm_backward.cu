// Sweeps variants of the RMSNorm backward kernels (csrc/rms_norm/rms_norm_backward.cuh,
// every knob a template parameter in sweep_rms_norm_backward_variants.cuh)
// on one GPU, without torch, and prints achieved bandwidth against a large
// device-to-device copy. Build and run (on a GPU machine):
//   nvcc -O3 -std=c++17 -arch=sm_90 -Icsrc tools/sweep_rms_norm_backward.cu -o /tmp/sweep_bwd
//   /tmp/sweep_bwd [bf16] [pipelined]
// "bf16" skips float16; "pipelined" sweeps the cp.async kernel
// (backward_pipelined_kernel) against the register-prefetch one.
// Times are per call of both kernels (rows, then the grad_w partial sums),
// each batch queued behind a spin kernel so launch latency is not counted.
// Bytes: read x and dy, write dx (3 M N s), as in guidekit.benchmark.
#include <string>

#include "sweep_common.cuh"
#include "sweep_rms_norm_backward_variants.cuh"

using namespace opguide::sweep;

// Timed batches per measurement.
constexpr int kBatches = 11;

template <typename T, int kRegs, bool kPrefetch, int kMinBlocks, bool kDwS, bool kWR>
void run_variant(const char* dtype, int64_t M, int64_t N, int sms, double copy_bw,
                 std::vector<T*>& xs, std::vector<T*>& gs, std::vector<T*>& dxs,
                 std::vector<float*>& rs, T* w, float* partial, T* dw, int min_threads) {
  using Acc = float;
  if (N / (16 / (int)sizeof(T)) > (int64_t)kBwdMaxThreads * kRegs) return;
  const BackwardConfig cfg =
      backward_config_for<T, kRegs, kPrefetch, kMinBlocks, kDwS, kWR>(M, N, 32, sms, min_threads);
  const int nbuf = (int)xs.size();
  float us = time_us([&](int i) {
    const int s = i % nbuf;
    CHECK((launch_backward_for<T, kRegs, kPrefetch, kMinBlocks, kDwS, kWR>(
        gs[s], xs[s], w, (const Acc*)rs[s], dxs[s], partial, dw, M, N, cfg, 0)));
  }, 20, kBatches);
  // The first kernel alone (rows and partials), without the grad_w sum.
  auto kernel = backward_kernel<T, 16 / sizeof(T), kRegs, kPrefetch, kMinBlocks, kDwS, kWR>;
  float us_rows = time_us([&](int i) {
    const int s = i % nbuf;
    kernel<<<(unsigned)cfg.blocks, cfg.block, cfg.shared_bytes>>>(gs[s], xs[s], w, rs[s], dxs[s],
                                                                  partial, M, N);
  }, 20, kBatches);
  cudaFuncAttributes attr;
  CHECK(cudaFuncGetAttributes(&attr, kernel));
  const double bytes = 3.0 * M * N * sizeof(T);
  printf("  %-4s %6lldx%-5lld vecs/thr %d prefetch %d minblk %d dw_smem %d w_regs %d "
         "blk %3ux%-2u grid %5lld regs %3d  %7.1f us %5.1f%%  rows kernel %7.1f us\n",
         dtype, (long long)M, (long long)N, kRegs, (int)kPrefetch, kMinBlocks, (int)kDwS, (int)kWR,
         cfg.block.x, cfg.block.y, (long long)cfg.blocks, attr.numRegs, us,
         100.0 * bytes / (us * 1e-6) / copy_bw, us_rows);
  fflush(stdout);
}

// The cp.async pipelined kernel: kStages rows of g and x in shared memory.
template <typename T, int kRegs, int kStages, int kMinBlocks>
void run_pipelined(const char* dtype, int64_t M, int64_t N, int sms, double copy_bw,
                   std::vector<T*>& xs, std::vector<T*>& gs, std::vector<T*>& dxs,
                   std::vector<float*>& rs, T* w, float* partial, T* dw, int min_threads,
                   int cap, bool pdl) {
  using Acc = float;
  if (N / (16 / (int)sizeof(T)) > (int64_t)kBwdMaxThreads * kRegs) return;
  const BackwardConfig cfg = backward_pipelined_config_for<T, kRegs, kStages, kMinBlocks>(
      M, N, 32, sms, min_threads, cap);
  if (cfg.shared_bytes > 227 * 1024) {
    (void)cudaGetLastError();  // the config's request for that much shared memory failed
    return;
  }
  const int nbuf = (int)xs.size();
  float us = time_us([&](int i) {
    const int s = i % nbuf;
    CHECK((launch_backward_pipelined_for<T, kRegs, kStages, kMinBlocks>(
        gs[s], xs[s], w, (const Acc*)rs[s], dxs[s], partial, dw, M, N, cfg, 0, pdl)));
  }, 20, kBatches);
  auto kernel = backward_pipelined_kernel<T, 16 / sizeof(T), kRegs, kStages, kMinBlocks>;
  float us_rows = time_us([&](int i) {
    const int s = i % nbuf;
    kernel<<<(unsigned)cfg.blocks, cfg.block, cfg.shared_bytes>>>(gs[s], xs[s], w, rs[s], dxs[s],
                                                                  partial, M, N);
  }, 20, kBatches);
  CHECK(cudaGetLastError());
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
  std::vector<T*> xs(nbuf), gs(nbuf), dxs(nbuf);
  std::vector<float*> rs(nbuf);
  for (int i = 0; i < nbuf; ++i) {
    CHECK(cudaMalloc(&xs[i], bytes));
    CHECK(cudaMalloc(&gs[i], bytes));
    CHECK(cudaMalloc(&dxs[i], bytes));
    CHECK(cudaMalloc(&rs[i], M * sizeof(float)));
    fill<<<1024, 256>>>(xs[i], M * N, 1 + i);
    fill<<<1024, 256>>>(gs[i], M * N, 100 + i);
    fill<<<1024, 256>>>(rs[i], M, 7 + i);
  }
  T *w, *dw;
  float* partial;
  CHECK(cudaMalloc(&w, N * sizeof(T)));
  CHECK(cudaMalloc(&dw, N * sizeof(T)));
  CHECK(cudaMalloc(&partial, (size_t)8192 * N * sizeof(float)));
  fill<<<64, 256>>>(w, N, 3);
  if (pipelined) {
    // The register-prefetch instance opguide used before, then the pipeline.
    run_variant<T, 2, true, 1, false, true>(dtype, M, N, sms, copy_bw, xs, gs, dxs, rs, w,
                                            partial, dw, 256);
    // (min threads per block, most blocks per SM (0: as many as fit), PDL)
    const int settings[][3] = {{512, 0, 1}, {256, 0, 1}, {256, 1, 1}};
    for (const auto& st : settings) {
      printf(" min threads per block %d, blocks per SM at most %d, pdl %d\n", st[0], st[1], st[2]);
#define P(R, S, B)                                                                          \
  run_pipelined<T, R, S, B>(dtype, M, N, sms, copy_bw, xs, gs, dxs, rs, w, partial, dw, st[0], \
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
  run_variant<T, R, P, B, D, W>(dtype, M, N, sms, copy_bw, xs, gs, dxs, rs, w, partial, dw, mt)
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
    cudaFree(dxs[i]);
    cudaFree(rs[i]);
  }
  cudaFree(w);
  cudaFree(dw);
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
