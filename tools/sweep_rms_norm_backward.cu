// Sweeps variants of the RMSNorm backward kernels (csrc/rms_norm.cuh) on one
// GPU, without torch, and prints achieved bandwidth against a large
// device-to-device copy. Build and run (on a GPU machine):
//   nvcc -O3 -std=c++17 -arch=sm_90 -Icsrc tools/sweep_rms_norm_backward.cu -o /tmp/sweep_bwd
//   /tmp/sweep_bwd
// Times are per call of both kernels (rows, then the grad_w partial sums),
// each batch queued behind a spin kernel so launch latency is not counted.
// Bytes: read x and dy, write dx (3 M N s), as in opguide.benchmark.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "rms_norm.cuh"

using namespace opguide::cuda;

#define CHECK(x)                                                              \
  do {                                                                        \
    cudaError_t e = (x);                                                      \
    if (e != cudaSuccess) {                                                   \
      printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
      exit(1);                                                                \
    }                                                                         \
  } while (0)

__global__ void spin(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

template <typename T>
__global__ void fill(T* p, int64_t n, unsigned seed) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    unsigned h = (unsigned)i * 2654435761u + seed * 97u;
    h ^= h >> 13;
    p[i] = from_acc<T>(((h & 0xffff) / 32768.0f) - 1.0f);
  }
}

template <typename F>
float time_us(F&& launch, int calls = 20, int batches = 11) {
  for (int i = 0; i < 2 * calls; ++i) launch(i);
  CHECK(cudaDeviceSynchronize());
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  std::vector<float> t;
  int k = 0;
  for (int bt = 0; bt < batches; ++bt) {
    spin<<<1, 1>>>(2000000);
    CHECK(cudaEventRecord(a));
    for (int c = 0; c < calls; ++c) launch(k++);
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float ms;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms * 1000 / calls);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

template <typename T, int kRegs, bool kPrefetch, int kMinBlocks, bool kDwS, bool kWR>
void run_variant(const char* dtype, int64_t M, int64_t N, int sms, double copy_bw,
                 std::vector<T*>& xs, std::vector<T*>& gs, std::vector<T*>& dxs,
                 std::vector<float*>& rs, T* w, float* partial, T* dw, int min_threads) {
  using Acc = float;
  if (N / (16 / (int)sizeof(T)) > (int64_t)kBwdMaxThreads * kRegs) return;
  const BackwardConfig cfg =
      rms_norm_backward_config_for<T, kRegs, kPrefetch, kMinBlocks, kDwS, kWR>(M, N, 32, sms, min_threads);
  const int nbuf = (int)xs.size();
  float us = time_us([&](int i) {
    const int s = i % nbuf;
    CHECK((launch_rms_norm_backward_for<T, kRegs, kPrefetch, kMinBlocks, kDwS, kWR>(
        gs[s], xs[s], w, (const Acc*)rs[s], dxs[s], partial, dw, M, N, cfg, 0)));
  });
  // The first kernel alone (rows and partials), without the grad_w sum.
  auto kernel = rms_norm_backward_kernel<T, 16 / sizeof(T), kRegs, kPrefetch, kMinBlocks, kDwS, kWR>;
  float us_rows = time_us([&](int i) {
    const int s = i % nbuf;
    kernel<<<(unsigned)cfg.blocks, cfg.block, cfg.shared_bytes>>>(gs[s], xs[s], w, rs[s], dxs[s],
                                                                  partial, M, N);
  });
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

template <typename T>
void run_dtype(const char* dtype, int64_t M, int64_t N, int sms, double copy_bw, size_t l2) {
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
  for (int mt : {128, 256}) {
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
  const size_t n = (size_t)1 << 28;  // 1 GiB of float
  float *src, *dst;
  CHECK(cudaMalloc(&src, n * 4));
  CHECK(cudaMalloc(&dst, n * 4));
  fill<<<1024, 256>>>(src, n, 1);
  const float copy_us =
      time_us([&](int) { CHECK(cudaMemcpyAsync(dst, src, n * 4, cudaMemcpyDeviceToDevice)); }, 5);
  const double copy_bw = 2.0 * n * 4 / (copy_us * 1e-6);
  printf("%s, %d SMs, copy %.0f GB/s\n", prop.name, prop.multiProcessorCount, copy_bw / 1e9);
  cudaFree(src);
  cudaFree(dst);
  const int64_t shapes[][2] = {{32768, 4096}, {8192, 4096}, {4096, 8192}, {65536, 1024}};
  const bool only_bf16 = argc > 1;
  for (auto& sh : shapes) {
    run_dtype<__nv_bfloat16>("bf16", sh[0], sh[1], prop.multiProcessorCount, copy_bw,
                             prop.l2CacheSize);
    if (!only_bf16)
      run_dtype<__half>("fp16", sh[0], sh[1], prop.multiProcessorCount, copy_bw,
                        prop.l2CacheSize);
  }
  return 0;
}
