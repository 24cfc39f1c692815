// What the torch-free sweep programs (tools/sweep_rms_norm_backward.cu,
// tools/sweep_rms_norm_forward_vectors.cu) share: error checks, input
// filling, timing queued behind a spin kernel, and the copy bandwidth that
// their percentages are relative to.
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "rms_norm/rms_norm_launch.cuh"
#include "rms_norm/rms_norm_backward.cuh"

#define CHECK(x)                                                              \
  do {                                                                        \
    cudaError_t e = (x);                                                      \
    if (e != cudaSuccess) {                                                   \
      printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
      exit(1);                                                                \
    }                                                                         \
  } while (0)

// Keeps the GPU busy while the host queues a batch (see time_us).
__global__ void spin(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

// Deterministic values in [-1, 1).
template <typename T>
__global__ void fill(T* p, int64_t n, unsigned seed) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    unsigned h = (unsigned)i * 2654435761u + seed * 97u;
    h ^= h >> 13;
    p[i] = opguide::from_acc<T>(((h & 0xffff) / 32768.0f) - 1.0f);
  }
}

// Reads a buffer of three times the L2 size, so that L2 holds none of the
// timed kernel's data, as in guidekit.benchmark (its _clean_l2). A sweep turns
// it on with enable_l2_clean(); time_us then runs it before every batch.
__global__ void read_all(const float4* p, int64_t n, float* sink) {
  float s = 0;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const float4 v = p[i];
    s += v.x + v.y + v.z + v.w;
  }
  if (s == 1234.5f) *sink = s;  // never true for zeros; keeps the loads
}

struct L2Clean {
  float4* buffer = nullptr;
  int64_t n = 0;
  float* sink = nullptr;
};
inline L2Clean& l2_clean() {
  static L2Clean state;
  return state;
}
inline void enable_l2_clean(const cudaDeviceProp& prop) {
  L2Clean& c = l2_clean();
  c.n = 3 * static_cast<int64_t>(prop.l2CacheSize) / 16;
  CHECK(cudaMalloc(&c.buffer, c.n * 16));
  CHECK(cudaMemset(c.buffer, 0, c.n * 16));
  CHECK(cudaMalloc(&c.sink, sizeof(float)));
}

// Median microseconds per call of launch(i) over `batches` batches of
// `calls` calls, each batch queued behind a spin kernel so that host launch
// latency is not counted (and behind an L2 clean, when enabled); two batches
// of warm-up first.
template <typename F>
float time_us(F&& launch, int calls, int batches) {
  for (int i = 0; i < 2 * calls; ++i) launch(i);
  CHECK(cudaDeviceSynchronize());
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  std::vector<float> t;
  int k = 0;
  for (int bt = 0; bt < batches; ++bt) {
    const L2Clean& clean = l2_clean();
    if (clean.buffer != nullptr) read_all<<<1024, 256>>>(clean.buffer, clean.n, clean.sink);
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

// Bytes per second (read + write) of a 1 GiB device-to-device copy; prints
// the device line that heads each sweep's output.
inline double copy_bandwidth(const cudaDeviceProp& prop, int batches) {
  const size_t n = (size_t)1 << 28;  // 1 GiB of float
  float *src, *dst;
  CHECK(cudaMalloc(&src, n * 4));
  CHECK(cudaMalloc(&dst, n * 4));
  fill<<<1024, 256>>>(src, n, 1);
  const float copy_us = time_us(
      [&](int) { CHECK(cudaMemcpyAsync(dst, src, n * 4, cudaMemcpyDeviceToDevice)); }, 5, batches);
  const double copy_bw = 2.0 * n * 4 / (copy_us * 1e-6);
  printf("%s, %d SMs, copy %.0f GB/s\n", prop.name, prop.multiProcessorCount, copy_bw / 1e9);
  cudaFree(src);
  cudaFree(dst);
  return copy_bw;
}
