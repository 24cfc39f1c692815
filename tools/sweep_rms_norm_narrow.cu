// Times the RMSNorm forward and backward kernels of csrc/ with narrow
// accesses (8 bytes, 4 bytes, one element), for rows that are not whole
// 16-byte vectors, by accesses per thread and rows per block, bfloat16, on
// one GPU without torch.
//   nvcc -O3 -std=c++17 -arch=sm_90 -Icsrc tools/sweep_rms_norm_narrow.cu -o /tmp/sweep_narrow
//   /tmp/sweep_narrow
// Batches are queued behind an L2 clean and a spin kernel; launches use PDL
// as the library does. Rows are M * N = 2**26 elements, as in the sweep of
// guidekit.benchmark.
#include "sweep_common.cuh"

using namespace opguide;
using bf16 = __nv_bfloat16;

constexpr int kBatches = 11;
constexpr int64_t kElements = int64_t{1} << 26;

struct Buffers {
  std::vector<bf16*> xs, ys, gs;
  bf16 *w = nullptr, *grad_weight = nullptr;
  float *inv = nullptr, *partial = nullptr;
  int nbuf = 0;
};

Buffers make_buffers(int64_t M, int64_t N, size_t l2) {
  Buffers b;
  const size_t bytes = static_cast<size_t>(M * N) * sizeof(bf16);
  b.nbuf = static_cast<int>(std::max<size_t>(3, (3 * l2 + bytes - 1) / bytes));
  for (int i = 0; i < b.nbuf; ++i) {
    bf16 *x, *y, *g;
    CHECK(cudaMalloc(&x, bytes));
    CHECK(cudaMalloc(&y, bytes));
    CHECK(cudaMalloc(&g, bytes));
    fill<<<1024, 256>>>(x, M * N, 1 + i);
    fill<<<1024, 256>>>(g, M * N, 11 + i);
    b.xs.push_back(x);
    b.ys.push_back(y);
    b.gs.push_back(g);
  }
  CHECK(cudaMalloc(&b.w, N * sizeof(bf16)));
  CHECK(cudaMalloc(&b.grad_weight, N * sizeof(bf16)));
  CHECK(cudaMalloc(&b.inv, M * sizeof(float)));
  CHECK(cudaMalloc(&b.partial, static_cast<size_t>(4096) * N * sizeof(float)));
  fill<<<64, 256>>>(b.w, N, 3);
  fill<<<64, 256>>>(b.inv, M, 5);
  return b;
}

void free_buffers(Buffers& b) {
  for (int i = 0; i < b.nbuf; ++i) {
    cudaFree(b.xs[i]);
    cudaFree(b.ys[i]);
    cudaFree(b.gs[i]);
  }
  cudaFree(b.w);
  cudaFree(b.grad_weight);
  cudaFree(b.inv);
  cudaFree(b.partial);
}

template <int kVec, int kRegs>
void forward(const Buffers& b, int64_t M, int64_t N, double copy_bw) {
  if (N % kVec != 0) return;
  auto kernel = rms_norm_forward_kernel<bf16, kVec, kRegs, false>;
  cudaFuncAttributes attr;
  CHECK(cudaFuncGetAttributes(&attr, kernel));
  // Threads per row as the library's planner gives them.
  const RowPlan plan = rms_norm_forward_block_plan(M, N, kVec, 32, kRegs);
  if (plan.kernel != RowKernel::kRegisters) return;
  const int64_t per_row = plan.block.x;
  for (int rpb = 1; rpb * per_row <= 1024 && rpb <= 4; rpb *= 2) {
    const dim3 grid(static_cast<unsigned>((M + rpb - 1) / rpb));
    const dim3 block(static_cast<unsigned>(per_row), rpb);
    const float us = time_us(
        [&](int i) {
          const int s = i % b.nbuf;
          CHECK(launch_kernel(kernel, grid, block, 0, 0, true, (const bf16*)b.xs[s],
                              (const bf16*)b.w, b.ys[s], (float*)nullptr, M, N, N, 1e-6f));
        },
        20, kBatches);
    const double bytes = 2.0 * M * N * sizeof(bf16);
    printf("  forward  bf16 %6lldx%-5lld access %2dB vecs/thr %2d thr/row %4lld rows/blk %d "
           "regs %3d  %7.1f us %5.1f%%\n",
           (long long)M, (long long)N, static_cast<int>(kVec * sizeof(bf16)), kRegs,
           (long long)per_row, rpb, attr.numRegs, us, 100.0 * bytes / (us * 1e-6) / copy_bw);
    fflush(stdout);
  }
}

template <int kVec, int kRegs>
void backward(const Buffers& b, int64_t M, int64_t N, double copy_bw, int sms) {
  if (N % kVec != 0 || N / kVec > static_cast<int64_t>(kBackwardMaxThreads) * kRegs) return;
  for (int min_threads : {256, 512}) {
    // The library's one-block planner, with this instance and its knobs.
    auto kernel = rms_norm_backward_kernel<bf16, kVec, kRegs>;
    BackwardShapeKnobs knobs{kVec, kRegs};
    knobs.min_threads = min_threads;
    const RmsNormBackwardPlan cfg =
        rms_norm_backward_shape<bf16>(kernel, M, N, knobs, device_info());
    if (cfg.blocks > 4096) return;
    cudaFuncAttributes attr;
    CHECK(cudaFuncGetAttributes(&attr, kernel));
    const float us = time_us(
        [&](int i) {
          const int s = i % b.nbuf;
          CHECK(launch_backward_pair(kernel, (const bf16*)b.gs[s], (const bf16*)b.xs[s],
                                     (const bf16*)b.w, (const float*)b.inv, b.ys[s], b.partial,
                                     b.grad_weight, M, N, cfg, 0, true));
        },
        20, kBatches);
    const double bytes = 3.0 * M * N * sizeof(bf16);
    printf("  backward bf16 %6lldx%-5lld access %2dB vecs/thr %2d thr/row %4u rows/blk %u "
           "regs %3d  %7.1f us %5.1f%%\n",
           (long long)M, (long long)N, static_cast<int>(kVec * sizeof(bf16)), kRegs, cfg.block.x,
           cfg.block.y, attr.numRegs, us, 100.0 * bytes / (us * 1e-6) / copy_bw);
    fflush(stdout);
  }
}

int main() {
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  const double copy_bw = copy_bandwidth(prop, kBatches);
  printf("L2 cleaned before each batch\n");
  enable_l2_clean(prop);
  for (int64_t N : {2049, 2050, 2052, 5125, 12300}) {
    const int64_t M = kElements / N;
    Buffers b = make_buffers(M, N, prop.l2CacheSize);
    forward<4, 2>(b, M, N, copy_bw);
    forward<4, 4>(b, M, N, copy_bw);
    forward<4, 8>(b, M, N, copy_bw);
    forward<2, 4>(b, M, N, copy_bw);
    forward<2, 8>(b, M, N, copy_bw);
    forward<2, 16>(b, M, N, copy_bw);
    forward<1, 4>(b, M, N, copy_bw);
    forward<1, 8>(b, M, N, copy_bw);
    forward<1, 16>(b, M, N, copy_bw);
    backward<4, 4>(b, M, N, copy_bw, prop.multiProcessorCount);
    backward<4, 8>(b, M, N, copy_bw, prop.multiProcessorCount);
    backward<2, 4>(b, M, N, copy_bw, prop.multiProcessorCount);
    backward<2, 8>(b, M, N, copy_bw, prop.multiProcessorCount);
    backward<1, 8>(b, M, N, copy_bw, prop.multiProcessorCount);
    backward<1, 16>(b, M, N, copy_bw, prop.multiProcessorCount);
    free_buffers(b);
  }
  return 0;
}
