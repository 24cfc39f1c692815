// A memory-bound kernel to profile with Nsight Compute (ncu).
#include <cstdio>

#include <cuda_runtime.h>

// [kernel]
__global__ void saxpy(int n, float a, const float* x, float* y) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
// [kernel-end]

int main() {
  const int n = 1 << 24;  // 64 MiB per array: far larger than L2
  float *x = nullptr, *y = nullptr;
  cudaMalloc(&x, n * sizeof(float));
  cudaMalloc(&y, n * sizeof(float));
  cudaMemset(x, 0, n * sizeof(float));
  cudaMemset(y, 0, n * sizeof(float));
  saxpy<<<(n + 255) / 256, 256>>>(n, 2.0f, x, y);
  const cudaError_t launch = cudaGetLastError();
  const cudaError_t run = cudaDeviceSynchronize();
  std::printf("launch: %s; execution: %s\n", cudaGetErrorString(launch),
              cudaGetErrorString(run));
  cudaFree(x);
  cudaFree(y);
  return 0;
}
