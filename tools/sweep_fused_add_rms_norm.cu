// Times the fused residual-add + RMSNorm kernel of csrc/fused_add_rms_norm/fused_add_rms_norm.cuh
// with 0 (both passes read memory) or 1 vector per thread held in registers
// and 1 to 8 rows per block, for bfloat16 and float16, on one GPU without
// torch. (Two vectors per thread do not fit the kernel's 32 registers.)
//   nvcc -O3 -std=c++17 -arch=sm_90 -Icsrc tools/sweep_fused_add_rms_norm.cu -o /tmp/sweep_fused
//   /tmp/sweep_fused
// Each line: threads per row, rows per block, registers per thread, blocks
// per SM, then the median time and the bandwidth (x and the residual read,
// the residual and the output written) as a percentage of a 1 GiB copy.
// "library" is the launch the extension makes. Batches are queued behind an
// L2 clean and a spin kernel; launches use PDL as the library does. The
// shapes run twice, to show the run-to-run spread.
#include "fused_add_rms_norm/fused_add_rms_norm_launch.cuh"
#include "sweep_common.cuh"

using namespace opguide;

// Timed batches per measurement, calls per batch.
constexpr int kBatches = 15;
constexpr int kCalls = 20;

template <typename T>
struct Buffers {
  std::vector<T*> x, residual, out;
  T* weight = nullptr;
  float* inv_rms = nullptr;
};

template <typename T, int kRegVecs>
void sweep_reg_vecs(const char* dtype, int64_t m, int64_t n, const Buffers<T>& b, double bytes,
                    double copy_bw) {
  constexpr int kVec = 16 / sizeof(T);
  // The library's block plan with kRegVecs vectors a thread (0: the
  // chunked kernel, which re-reads the row, one vector per thread per
  // step), forced to each number of rows per block.
  RowPlan one_row = fused_block_plan(m, n, kVec, kRegVecs > 0 ? kRegVecs : 1, 32, 0);
  if (kRegVecs > 0 && one_row.kernel == RowKernel::kChunked) return;  // rows too long
  if (kRegVecs == 0) one_row.kernel = RowKernel::kChunked;
  const auto kernel = fused_add_rms_norm_kernel_for<T, T, T, float>(one_row);
  cudaFuncAttributes attr;
  CHECK(cudaFuncGetAttributes(&attr, kernel));
  const unsigned per_row = one_row.block.x;
  for (unsigned rows_per_block : {1u, 2u, 3u, 4u, 6u, 8u}) {
    if (per_row * rows_per_block > 1024) break;
    RowPlan forced = one_row;
    forced.block = dim3(per_row, rows_per_block);
    forced.grid = dim3(static_cast<unsigned>((m + rows_per_block - 1) / rows_per_block));
    int per_sm = 0;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, per_row * rows_per_block,
                                                        0));
    const int nbuf = static_cast<int>(b.x.size());
    const LaunchSettings pdl{nullptr, true};
    const float us = time_us(
        [&](int i) {
          const int s = i % nbuf;
          CHECK((launch_fused_add_rms_norm<T, T, T, float>(forced, b.x[s], b.residual[s], b.weight,
                                                           b.out[s], b.inv_rms, m, n, 1e-6f,
                                                           pdl)));
        },
        kCalls, kBatches);
    printf("  %-4s %6lldx%-5lld vecs/thr %d thr/row %4u rows/blk %u regs %2d stack %3d "
           "blocks/SM %2d  %7.2f us %5.1f%%\n",
           dtype, static_cast<long long>(m), static_cast<long long>(n), kRegVecs, per_row,
           rows_per_block, attr.numRegs, static_cast<int>(attr.localSizeBytes), per_sm, us,
           100.0 * bytes / (us * 1e-6) / copy_bw);
    fflush(stdout);
  }
}

template <typename T>
void run(const char* dtype, int64_t m, int64_t n, double copy_bw, size_t l2) {
  const size_t bytes = static_cast<size_t>(m) * n * sizeof(T);
  // Enough sets of buffers that consecutive calls never find their inputs in L2.
  const int nbuf = static_cast<int>(std::max<size_t>(2, (3 * l2 + 4 * bytes - 1) / (4 * bytes)));
  Buffers<T> b;
  b.x.resize(nbuf);
  b.residual.resize(nbuf);
  b.out.resize(nbuf);
  for (int i = 0; i < nbuf; ++i) {
    CHECK(cudaMalloc(&b.x[i], bytes));
    CHECK(cudaMalloc(&b.residual[i], bytes));
    CHECK(cudaMalloc(&b.out[i], bytes));
    fill<<<1024, 256>>>(b.x[i], m * n, 1 + i);
    fill<<<1024, 256>>>(b.residual[i], m * n, 7 + i);
  }
  CHECK(cudaMalloc(&b.weight, n * sizeof(T)));
  fill<<<64, 256>>>(b.weight, n, 3);
  CHECK(cudaMalloc(&b.inv_rms, m * sizeof(float)));
  const double moved = 4.0 * bytes;  // x and residual in, residual and output out

  const LaunchSettings settings{nullptr, true, kMaxClusterBlocks};
  const float us = time_us(
      [&](int i) {
        const int s = i % nbuf;
        const RowPlan plan = fused_add_rms_norm_plan_for<T, T, T, float>(
            b.x[s], b.residual[s], b.weight, b.out[s], m, n, settings);
        CHECK((launch_fused_add_rms_norm<T, T, T, float>(plan, b.x[s], b.residual[s], b.weight,
                                                         b.out[s], b.inv_rms, m, n, 1e-6f,
                                                         settings)));
      },
      kCalls, kBatches);
  printf("  %-4s %6lldx%-5lld library (vecs/thr %d, blocks of %d threads)%*s %7.2f us %5.1f%%\n",
         dtype, static_cast<long long>(m), static_cast<long long>(n), kFusedRegVecs,
         kFusedBlockThreads, 29, "", us, 100.0 * moved / (us * 1e-6) / copy_bw);
  sweep_reg_vecs<T, 0>(dtype, m, n, b, moved, copy_bw);
  sweep_reg_vecs<T, 1>(dtype, m, n, b, moved, copy_bw);

  for (int i = 0; i < nbuf; ++i) {
    cudaFree(b.x[i]);
    cudaFree(b.residual[i]);
    cudaFree(b.out[i]);
  }
  cudaFree(b.weight);
  cudaFree(b.inv_rms);
}

int main() {
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  const double copy_bw = copy_bandwidth(prop, kBatches);
  printf("L2 cleaned before each batch\n");
  enable_l2_clean(prop);
  const int64_t shapes[][2] = {{65536, 1024}, {32768, 4096}, {8192, 4096}, {4096, 8192}};
  for (int rep = 0; rep < 2; ++rep) {
    for (auto& sh : shapes) {
      run<__nv_bfloat16>("bf16", sh[0], sh[1], copy_bw, prop.l2CacheSize);
      run<__half>("fp16", sh[0], sh[1], copy_bw, prop.l2CacheSize);
    }
  }
  return 0;
}
