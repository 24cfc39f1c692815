// A kernel with a planted out-of-bounds access, for compute-sanitizer memcheck.
// Run without the tool it usually reports no error at all: the stray writes
// land in the slack of the allocation. That is the point of the demo.
#include <cstdio>

#include <cuda_runtime.h>

// [kernel]
__global__ void scale(float* x, int n, float s) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  // BUG (planted): no `if (i < n)`. The grid is rounded up to whole blocks
  // of 256 threads, so threads n..1023 read, then write, past the end of x.
  x[i] *= s;
}
// [kernel-end]

int main() {
  const int n = 1000;
  float* x = nullptr;
  cudaMalloc(&x, n * sizeof(float));
  cudaMemset(x, 0, n * sizeof(float));
  scale<<<(n + 255) / 256, 256>>>(x, n, 2.0f);
  // The two checks every launch needs: the launch itself, then the kernel's
  // execution (reported at the next synchronising call).
  const cudaError_t launch = cudaGetLastError();
  const cudaError_t run = cudaDeviceSynchronize();
  std::printf("launch: %s; execution: %s\n", cudaGetErrorString(launch),
              cudaGetErrorString(run));
  cudaFree(x);
  return launch == cudaSuccess && run == cudaSuccess ? 0 : 1;
}
