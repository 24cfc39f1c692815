// Times the RMSNorm forward kernel of csrc/rms_norm/rms_norm_forward.cuh with 1, 2 or 4
// vectors per thread and several block sizes, for bfloat16 and float16, on
// one GPU without torch.
//   nvcc -O3 -std=c++17 -arch=sm_90 -Icsrc tools/sweep_rms_norm_forward_vectors.cu -o /tmp/sweep_vec
//   /tmp/sweep_vec
// Add -DOPGUIDE_KEEP_PACKED=0 to see the kernel without keep_packed (its
// registers and speed). Batches are queued behind an L2 clean and a spin
// kernel, launches use PDL as the library does.
#include "sweep_common.cuh"

using namespace opguide;

// Timed batches per measurement.
constexpr int kBatches = 15;

template <typename T, int kRegs>
void run(const char* dtype, int64_t M, int64_t N, double copy_bw, size_t l2, int sms) {
  constexpr int kVec = 16 / sizeof(T);
  const size_t bytes = (size_t)M * N * sizeof(T);
  const int nbuf = (int)std::max<size_t>(2, (3 * l2 + 2 * bytes - 1) / (2 * bytes));
  std::vector<T*> xs(nbuf), ys(nbuf);
  for (int i = 0; i < nbuf; ++i) {
    CHECK(cudaMalloc(&xs[i], bytes));
    CHECK(cudaMalloc(&ys[i], bytes));
    fill<<<1024, 256>>>(xs[i], M * N, 1 + i);
  }
  T* w;
  CHECK(cudaMalloc(&w, N * sizeof(T)));
  fill<<<64, 256>>>(w, N, 3);
  auto kernel = rms_norm_forward_kernel<T, kVec, kRegs, false>;
  CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
  cudaFuncAttributes attr;
  CHECK(cudaFuncGetAttributes(&attr, kernel));
  // Threads per row as the library's planner gives them (one row per block
  // there; the rows per block are what this sweep varies).
  const RowPlan plan = rms_norm_forward_block_plan(M, N, kVec, 32, kRegs);
  if (plan.kernel != RowKernel::kRegisters) return;
  const int per_row = static_cast<int>(plan.block.x);
  for (int block_threads : {64, 128, 256, 512}) {
    if (block_threads < per_row) continue;
    const int rpb = block_threads / per_row;
    for (int cap : {0}) {
      const size_t smem = cap == 0 ? 0 : (size_t)(227 * 1024 / cap) - 1024;
      int per_sm = 0;
      CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, per_row * rpb, smem));
      const dim3 grid((unsigned)((M + rpb - 1) / rpb)), block(per_row, rpb);
      const float us = time_us([&](int i) {
        const int s = i % nbuf;
        CHECK(launch_kernel(kernel, grid, block, smem, 0, true, (const T*)xs[s], (const T*)w,
                            ys[s], (float*)nullptr, M, N, N, 1e-6f));
      }, 20, kBatches);
      printf("  %-4s %6lldx%-5lld vecs/thr %d thr/row %4d rows/blk %2d regs %3d blocks/SM %2d "
             "(threads/SM %4d)  %7.1f us %5.1f%%\n",
             dtype, (long long)M, (long long)N, kRegs, per_row, rpb, attr.numRegs, per_sm,
             per_sm * per_row * rpb, us, 100.0 * 2 * bytes / (us * 1e-6) / copy_bw);
      fflush(stdout);
    }
  }
  for (int i = 0; i < nbuf; ++i) {
    cudaFree(xs[i]);
    cudaFree(ys[i]);
  }
  cudaFree(w);
}

int main() {
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  const double copy_bw = copy_bandwidth(prop, kBatches);
  printf("OPGUIDE_KEEP_PACKED=%d, L2 cleaned before each batch\n", OPGUIDE_KEEP_PACKED);
  enable_l2_clean(prop);
  const int64_t shapes[][2] = {{32768, 4096}, {8192, 4096}, {4096, 8192}, {65536, 1024}};
  for (auto& sh : shapes) {
    run<__nv_bfloat16, 4>("bf16", sh[0], sh[1], copy_bw, prop.l2CacheSize, prop.multiProcessorCount);
    run<__nv_bfloat16, 2>("bf16", sh[0], sh[1], copy_bw, prop.l2CacheSize, prop.multiProcessorCount);
    run<__nv_bfloat16, 1>("bf16", sh[0], sh[1], copy_bw, prop.l2CacheSize, prop.multiProcessorCount);
    run<__half, 4>("fp16", sh[0], sh[1], copy_bw, prop.l2CacheSize, prop.multiProcessorCount);
    run<__half, 2>("fp16", sh[0], sh[1], copy_bw, prop.l2CacheSize, prop.multiProcessorCount);
    run<__half, 1>("fp16", sh[0], sh[1], copy_bw, prop.l2CacheSize, prop.multiProcessorCount);
  }
  return 0;
}
