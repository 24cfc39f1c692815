// Sweeps the cluster backward (csrc/rms_norm/rms_norm_backward_long_rows.cuh) for long rows on one
// GPU, without torch: the library's kernel at several block widths, vectors
// per thread, pipeline stages and blocks per multiprocessor, with and
// without pushing the next row's partial sum before waiting for this row's
// total ("ahead"). Each call runs the kernel and the grad_weight sum, timed as
// in guidekit.benchmark (bytes: read g and x, write grad_x, 3 M N s at
// M N = 2^26), against a large device-to-device copy with the L2 cleaned
// before each batch. Build and run (on a GPU machine with sm_90):
//   nvcc -O3 -std=c++17 -arch=sm_90 -Icsrc tools/sweep_rms_norm_backward_cluster.cu -o /tmp/bc
//   /tmp/bc
#include <cmath>

#include "rms_norm/rms_norm_launch.cuh"
#include "sweep_common.cuh"

using namespace opguide;

constexpr int kBatches = 11;

template <typename T>
struct Buffers {
  std::vector<T*> gs, xs, grad_xs;
  std::vector<float*> rs;
  T* w = nullptr;
  T* grad_weight = nullptr;
  float* partial = nullptr;  // room for one row per multiprocessor
};

// The largest difference from `want` (grad_x of the library's plan), in
// float: another cluster size sums a row in another order.
template <typename T>
double max_diff(const T* got_d, const T* want_d, int64_t n) {
  std::vector<T> got(n), want(n);
  CHECK(cudaMemcpy(got.data(), got_d, n * sizeof(T), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(want.data(), want_d, n * sizeof(T), cudaMemcpyDeviceToHost));
  double worst = 0;
  for (int64_t i = 0; i < n; ++i)
    worst = std::fmax(worst, std::fabs(__bfloat162float(got[i]) - __bfloat162float(want[i])));
  return worst;
}

template <int kThreads, int kRegVecs, int kStages, int kMinBlocks, bool kAhead, typename T>
void run(const char* name, int64_t M, int64_t N, double copy_bw, Buffers<T>& b, const T* want,
         int sms) {
  constexpr int kVec = 16 / sizeof(T);
  auto kernel =
      rms_norm_backward_cluster_kernel<T, kVec, kRegVecs, kThreads, kStages, kMinBlocks, kAhead>;
  // The library's cluster planner, with this instance and its knobs.
  const RmsNormBackwardPlan plan = rms_norm_backward_cluster_shape<T>(
      kernel, kThreads, kRegVecs, kStages, M, N / kVec, kMaxClusterBlocks);
  const int cluster = cluster_size_for(N / kVec, kMaxClusterBlocks, kThreads, kRegVecs);
  if (plan.blocks == 0) {
    printf("  %-34s cluster %2d: does not fit\n", name, cluster);
    return;
  }
  const int64_t clusters = plan.blocks;
  if (clusters > sms) {
    printf("  %-34s cluster %2d x %3lld: more partial rows than allocated\n", name, cluster,
           static_cast<long long>(clusters));
    return;
  }
  const int nbuf = static_cast<int>(b.xs.size());
  auto launch = [&](int i) {
    const int s = i % nbuf;
    CHECK(launch_backward_pair(kernel, b.gs[s], b.xs[s], b.w, b.rs[s], b.grad_xs[s], b.partial,
                               b.grad_weight, M, N, plan, nullptr, false));
  };
  launch(0);
  CHECK(cudaDeviceSynchronize());
  const double diff = max_diff(b.grad_xs[0], want, M * N);
  const float us = time_us(launch, 10, kBatches);
  const double bw = 3.0 * M * N * sizeof(T) / (us * 1e-6);
  printf("  %-34s cluster %2d x %3lld: %8.1f us  %5.0f GB/s  %.2f of copy  (max diff %.1e)\n",
         name, cluster, static_cast<long long>(clusters), us, bw / 1e9, bw / copy_bw, diff);
}

int main() {
  using T = __nv_bfloat16;
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  const double copy_bw = copy_bandwidth(prop, kBatches);
  enable_l2_clean(prop);
  const int sms = prop.multiProcessorCount;
  const int64_t total = int64_t{1} << 26;
  for (int64_t N : {32768, 65536, 131072}) {
    const int64_t M = total / N;
    Buffers<T> b;
    const int nbuf = 2;
    for (int i = 0; i < nbuf; ++i) {
      T *g, *x, *grad_x;
      float* r;
      CHECK(cudaMalloc(&g, total * sizeof(T)));
      CHECK(cudaMalloc(&x, total * sizeof(T)));
      CHECK(cudaMalloc(&grad_x, total * sizeof(T)));
      CHECK(cudaMalloc(&r, M * sizeof(float)));
      fill<<<1024, 256>>>(g, total, 3 + i);
      fill<<<1024, 256>>>(x, total, 5 + i);
      fill<<<256, 256>>>(r, M, 9 + i);
      b.gs.push_back(g);
      b.xs.push_back(x);
      b.grad_xs.push_back(grad_x);
      b.rs.push_back(r);
    }
    CHECK(cudaMalloc(&b.w, N * sizeof(T)));
    CHECK(cudaMalloc(&b.grad_weight, N * sizeof(T)));
    CHECK(cudaMalloc(&b.partial, static_cast<size_t>(sms) * N * sizeof(float)));
    fill<<<256, 256>>>(b.w, N, 7);
    T* want;
    CHECK(cudaMalloc(&want, total * sizeof(T)));
    // The library's plan for these rows (plan_rms_norm_backward).
    const LaunchSettings settings{nullptr, false, kMaxClusterBlocks};
    const RmsNormBackwardPlan plan =
        rms_norm_backward_plan_for<T>(b.gs[0], b.xs[0], b.w, M, N, settings);
    auto library = [&](int i, T* grad_x) {
      const int s = i % nbuf;
      CHECK(launch_rms_norm_backward<T>(plan, b.gs[s], b.xs[s], b.w, b.rs[s], grad_x, b.partial,
                                        b.grad_weight, M, N, settings));
    };
    library(0, want);
    const float lib_us = time_us([&](int i) { library(i, b.grad_xs[i % nbuf]); }, 10, kBatches);
    const double lib_bw = 3.0 * M * N * sizeof(T) / (lib_us * 1e-6);
    printf("bf16 M=%lld N=%lld: library %.1f us, %.0f GB/s, %.2f of copy\n",
           static_cast<long long>(M), static_cast<long long>(N), lib_us, lib_bw / 1e9,
           lib_bw / copy_bw);
    run<512, 4, 3, 1, false>("512 x 4, 3 stages", M, N, copy_bw, b, want, sms);
    run<512, 4, 2, 1, false>("512 x 4, 2 stages", M, N, copy_bw, b, want, sms);
    run<512, 4, 3, 1, true>("512 x 4, 3 stages, ahead", M, N, copy_bw, b, want, sms);
    run<512, 2, 3, 2, false>("512 x 2, 3 stages, 2/SM", M, N, copy_bw, b, want, sms);
    run<512, 2, 6, 1, false>("512 x 2, 6 stages", M, N, copy_bw, b, want, sms);
    run<512, 2, 6, 1, true>("512 x 2, 6 stages, ahead", M, N, copy_bw, b, want, sms);
    run<512, 2, 4, 1, true>("512 x 2, 4 stages, ahead", M, N, copy_bw, b, want, sms);
    run<256, 4, 3, 2, false>("256 x 4, 3 stages, 2/SM", M, N, copy_bw, b, want, sms);
    run<256, 4, 3, 2, true>("256 x 4, 3 stages, 2/SM, ahead", M, N, copy_bw, b, want, sms);
    run<1024, 2, 3, 1, false>("1024 x 2, 3 stages", M, N, copy_bw, b, want, sms);
    run<1024, 2, 3, 1, true>("1024 x 2, 3 stages, ahead", M, N, copy_bw, b, want, sms);
    for (int i = 0; i < nbuf; ++i) {
      cudaFree(b.gs[i]);
      cudaFree(b.xs[i]);
      cudaFree(b.grad_xs[i]);
      cudaFree(b.rs[i]);
    }
    cudaFree(b.w);
    cudaFree(b.grad_weight);
    cudaFree(b.partial);
    cudaFree(want);
  }
  return 0;
}
