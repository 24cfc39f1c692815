// A block reduction with a planted shared-memory race, for
// compute-sanitizer racecheck.
#include <cstdio>
#include <vector>

#include <cuda_runtime.h>

constexpr int kBlock = 256;

// [kernel]
__global__ void block_sum(const float* x, float* out) {
  __shared__ float buf[kBlock];
  const int t = threadIdx.x;
  buf[t] = x[blockIdx.x * kBlock + t];
  __syncthreads();
  for (int stride = kBlock / 2; stride > 0; stride /= 2) {
    if (t < stride) buf[t] += buf[t + stride];
    // BUG (planted): a __syncthreads() belongs here. Without it, a thread can
    // read buf[t + stride] before the thread that owns it has written this
    // round's value.
  }
  if (t == 0) out[blockIdx.x] = buf[0];
}
// [kernel-end]

int main() {
  const int blocks = 64, n = blocks * kBlock;
  std::vector<float> host(n);
  for (int i = 0; i < n; ++i) host[i] = static_cast<float>(i % 7);
  float *x = nullptr, *out = nullptr;
  cudaMalloc(&x, n * sizeof(float));
  cudaMalloc(&out, blocks * sizeof(float));
  cudaMemcpy(x, host.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  block_sum<<<blocks, kBlock>>>(x, out);
  const cudaError_t launch = cudaGetLastError();
  const cudaError_t run = cudaDeviceSynchronize();
  std::vector<float> sums(blocks);
  cudaMemcpy(sums.data(), out, blocks * sizeof(float), cudaMemcpyDeviceToHost);
  int wrong = 0;
  for (int b = 0; b < blocks; ++b) {
    float expected = 0.0f;
    for (int t = 0; t < kBlock; ++t) expected += host[b * kBlock + t];
    wrong += sums[b] != expected;
  }
  std::printf("launch: %s; execution: %s; blocks with a wrong sum: %d of %d\n",
              cudaGetErrorString(launch), cudaGetErrorString(run), wrong, blocks);
  cudaFree(x);
  cudaFree(out);
  return 0;
}
