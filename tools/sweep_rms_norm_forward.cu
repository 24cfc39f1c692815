// Sweeps launch shapes and kernel variants of the RMSNorm forward kernel on
// one GPU, without torch, and prints achieved bandwidth against a large
// device-to-device copy. Build and run (on a GPU machine):
//   nvcc -O3 -std=c++17 -arch=sm_90 -Icsrc tools/sweep_rms_norm_forward.cu -o /tmp/sweep && /tmp/sweep
// The variants here are experiments; what wins becomes a knob value in
// csrc/rms_norm/rms_norm_config.h.
#include <cstdio>
#include <vector>
#include <algorithm>

#include "rms_norm/rms_norm_launch.cuh"

using namespace opguide;
using bf16 = __nv_bfloat16;

#define CHECK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); exit(1);} } while (0)

// Variant: streaming cache hints, optional persistent row loop.
template <typename T, int kVec, int kRegVecs, int kMaxThreads, bool kHints, bool kPersistent>
__global__ void __launch_bounds__(kMaxThreads) variant_kernel(
    const T* __restrict__ x, const T* __restrict__ weight, T* __restrict__ y, int64_t rows,
    int64_t cols, float eps) {
  using Acc = float;
  using V = Vec<T, kVec>;
  __shared__ Acc shared[kMaxWarpsPerBlock];
  const int64_t nvec = cols / kVec;
  const V* wv = reinterpret_cast<const V*>(weight);
  const int64_t stride = kPersistent ? static_cast<int64_t>(gridDim.x) * blockDim.y : rows;
  for (int64_t row0 = static_cast<int64_t>(blockIdx.x) * blockDim.y; row0 < rows; row0 += stride) {
    const int64_t row = row0 + threadIdx.y;
    const bool active = row < rows;
    const V* xr = reinterpret_cast<const V*>(x + (active ? row : 0) * cols);
    V* yr = reinterpret_cast<V*>(y + (active ? row : 0) * cols);
    V cache[kRegVecs];
    Acc sum_sq = 0;
#pragma unroll
    for (int k = 0; k < kRegVecs; ++k) {
      const int64_t i = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
      if (active && i < nvec) {
        if constexpr (kHints) {
          const int4 raw = __ldcs(reinterpret_cast<const int4*>(xr + i));
          cache[k] = *reinterpret_cast<const V*>(&raw);
        } else {
          cache[k] = xr[i];
        }
#pragma unroll
        for (int e = 0; e < kVec; ++e) { const Acc v = to_acc(cache[k].val[e]); sum_sq += v * v; }
      }
    }
    sum_sq = row_sum(sum_sq, shared);
    if (kPersistent) __syncthreads();  // shared is reused by the next row
    const Acc inv_rms = Acc(1) / sqrtf(sum_sq / static_cast<Acc>(cols) + eps);
    if (active) {
#pragma unroll
      for (int k = 0; k < kRegVecs; ++k) {
        const int64_t i = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
        if (i < nvec) {
          const V w = wv[i];
          V out;
#pragma unroll
          for (int e = 0; e < kVec; ++e) out.val[e] = from_acc<T>(to_acc(cache[k].val[e]) * inv_rms * to_acc(w.val[e]));
          if constexpr (kHints) __stcs(reinterpret_cast<int4*>(yr + i), *reinterpret_cast<const int4*>(&out));
          else yr[i] = out;
        }
      }
    }
  }
}

__global__ void fill(bf16* p, int64_t n, unsigned seed) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    unsigned h = (unsigned)i * 2654435761u ^ seed;
    p[i] = __float2bfloat16_rn(((h >> 8) & 0xffff) / 32768.0f - 1.0f);
  }
}

template <typename F>
float time_us(F launch, int batches = 15, int calls = 20) {
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  for (int i = 0; i < 3 * calls; ++i) launch(i);
  std::vector<float> s;
  int k = 0;
  for (int bt = 0; bt < batches; ++bt) {
    cudaEventRecord(a);
    for (int c = 0; c < calls; ++c) launch(k++);
    cudaEventRecord(b); cudaEventSynchronize(b);
    float ms; cudaEventElapsedTime(&ms, a, b); s.push_back(ms * 1e3f / calls);
  }
  std::sort(s.begin(), s.end());
  CHECK(cudaGetLastError());
  return s[s.size() / 2];
}

int main() {
  const int64_t copy_bytes = 1ll << 30;
  void *src, *dst; CHECK(cudaMalloc(&src, copy_bytes)); CHECK(cudaMalloc(&dst, copy_bytes));
  const float copy_us = time_us([&](int) { cudaMemcpyAsync(dst, src, copy_bytes, cudaMemcpyDeviceToDevice); }, 10, 5);
  const double copy_bw = 2.0 * copy_bytes / (copy_us * 1e-6) / 1e9;
  cudaFree(src); cudaFree(dst);
  cudaDeviceProp prop; cudaGetDeviceProperties(&prop, 0);
  printf("%s, copy %.0f GB/s\n", prop.name, copy_bw);
  const int64_t shapes[][2] = {{32768, 4096}, {8192, 4096}, {4096, 8192}, {65536, 1024}};
  for (auto& sh : shapes) {
    const int64_t M = sh[0], N = sh[1];
    // Rotate through enough buffers to defeat the L2 cache.
    const int64_t bytes = M * N * 2;
    const int nbuf = std::max<int64_t>(1, (3 * 60ll << 20) / bytes + 1);
    std::vector<bf16*> xs(nbuf), ys(nbuf);
    for (int i = 0; i < nbuf; ++i) { CHECK(cudaMalloc(&xs[i], bytes)); CHECK(cudaMalloc(&ys[i], bytes)); fill<<<1024, 256>>>(xs[i], M * N, i); }
    bf16* w; CHECK(cudaMalloc(&w, N * 2)); fill<<<64, 256>>>(w, N, 99);
    const double moved = 2.0 * bytes + N * 2;
    auto report = [&](const char* name, float us) { printf("  %6lldx%-5lld %-44s %7.1f us %6.0f GB/s %5.1f%%\n", (long long)M, (long long)N, name, us, moved / (us * 1e-6) / 1e9, 100.0 * moved / (us * 1e-6) / 1e9 / copy_bw); };
    report("library launcher", time_us([&](int i) { run_rms_norm_forward<bf16>(xs[i % nbuf], w, ys[i % nbuf], nullptr, M, N, N, 1e-6f, LaunchSettings{nullptr, false, 0}); }));
    const int64_t nvec = N / 8;
    for (int per_row : {64, 128, 256, 512, 1024}) {
      if (per_row * 8 < nvec || per_row > nvec) continue;
      const int regvecs_needed = (int)((nvec + per_row - 1) / per_row);
      for (int rpb : {1, 2, 4, 8}) {
        if (per_row * rpb > 1024) continue;
        dim3 block(per_row, rpb);
        char name[96];
        const int64_t blocks = (M + rpb - 1) / rpb;
        auto run = [&](auto kernel, const char* tag, bool persistent, int occupancy_blocks) {
          int64_t grid = blocks;
          if (persistent) grid = std::min<int64_t>(blocks, (int64_t)prop.multiProcessorCount * occupancy_blocks);
          snprintf(name, sizeof name, "%s rows/blk %d thr/row %d", tag, rpb, per_row);
          report(name, time_us([&](int i) { kernel<<<(unsigned)grid, block>>>(xs[i % nbuf], w, ys[i % nbuf], M, N, 1e-6f); }));
        };
        if (regvecs_needed <= 4) {
          int occ = 0;
          cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, variant_kernel<bf16, 8, 4, 1024, false, true>, per_row * rpb, 0);
          run(variant_kernel<bf16, 8, 4, 1024, false, false>, "plain  r4", false, occ);
          run(variant_kernel<bf16, 8, 4, 1024, true, false>, "hints  r4", false, occ);
          run(variant_kernel<bf16, 8, 4, 1024, false, true>, "persist r4", true, occ);
          run(variant_kernel<bf16, 8, 4, 1024, true, true>, "persist+hints r4", true, occ);
        } else if (regvecs_needed <= 8) {
          int occ = 0;
          cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, variant_kernel<bf16, 8, 8, 1024, true, true>, per_row * rpb, 0);
          run(variant_kernel<bf16, 8, 8, 1024, false, false>, "plain  r8", false, occ);
          run(variant_kernel<bf16, 8, 8, 1024, true, false>, "hints  r8", false, occ);
          run(variant_kernel<bf16, 8, 8, 1024, true, true>, "persist+hints r8", true, occ);
        }
      }
    }
    for (int i = 0; i < nbuf; ++i) { cudaFree(xs[i]); cudaFree(ys[i]); }
    cudaFree(w);
  }
  return 0;
}
