// RMSNorm forward on the CPU: one pass over each row, fp32 accumulation,
// rows spread over threads with at::parallel_for.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/EmptyTensor.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>

#ifdef __linux__
#include <sys/mman.h>
#endif

#include "rms_norm.h"

namespace opguide {
namespace {

// [cpu-kernel]
// A wheel is built for the oldest x86-64 CPUs, whose vectors are 4 floats
// wide (SSE2). With GCC on x86-64 Linux, target_clones compiles the function
// a second time for AVX2 (8 floats) and the loader picks the copy that the
// CPU running it supports. Elsewhere (and with Clang, which does not accept
// it on templates) the attribute is left out.
#if defined(__linux__) && defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define OPGUIDE_CPU_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define OPGUIDE_CPU_CLONES
#endif

template <typename scalar_t>
OPGUIDE_CPU_CLONES void rms_norm_rows(const scalar_t* x, const scalar_t* weight, scalar_t* y,
                                      at::opmath_type<scalar_t>* inv_rms_out,
                                      int64_t row_begin, int64_t row_end, int64_t n,
                                      double eps) {
  // float for float/half/bfloat16, double for double.
  using acc_t = at::opmath_type<scalar_t>;
  // Independent partial sums let the compiler keep several SIMD lanes busy;
  // a single accumulator would serialise every add on the previous one.
  constexpr int64_t kLanes = 16;
  for (int64_t row = row_begin; row < row_end; ++row) {
    const scalar_t* xr = x + row * n;
    scalar_t* yr = y + row * n;
    acc_t partial[kLanes] = {};
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes) {
      for (int64_t l = 0; l < kLanes; ++l) {
        const acc_t v = static_cast<acc_t>(xr[i + l]);
        partial[l] += v * v;
      }
    }
    acc_t sum_sq = 0;
    for (; i < n; ++i) {  // the tail when n is not a multiple of kLanes
      const acc_t v = static_cast<acc_t>(xr[i]);
      sum_sq += v * v;
    }
    for (int64_t l = 0; l < kLanes; ++l) sum_sq += partial[l];
    const acc_t inv_rms =
        acc_t(1) / std::sqrt(sum_sq / static_cast<acc_t>(n) + static_cast<acc_t>(eps));
    // rms_norm_fwd keeps the statistic for the backward pass (step 8).
    if (inv_rms_out != nullptr) inv_rms_out[row] = inv_rms;
    // The row was just read, so this second loop reads it from L1/L2, not DRAM.
    for (int64_t j = 0; j < n; ++j) {
      yr[j] = static_cast<scalar_t>(static_cast<acc_t>(xr[j]) * inv_rms *
                                    static_cast<acc_t>(weight[j]));
    }
  }
}
// [cpu-kernel-end]

// [huge-pages]
// A fresh output of many MiB comes straight from the operating system
// (glibc's malloc maps allocations this large), and the first write to each
// 4 KiB page traps into the kernel, which zeroes and maps it: for a 64 MiB
// output that is 16384 faults, which cost more than the loop that fills it.
// With transparent huge pages ("always" or "madvise" in
// /sys/kernel/mm/transparent_hugepage/enabled) one fault can map 2 MiB
// instead, if the memory is 2 MiB-aligned and advised as MADV_HUGEPAGE before
// its first write. This allocator does both; it is what PyTorch's own CPU
// allocator does under THP_MEM_ALLOC_ENABLE=1. The tensor owns the memory
// (its storage frees it), and resize_ works through the same allocator.
#ifdef __linux__
constexpr size_t kHugePage = size_t{2} << 20;

struct HugePageAllocator final : c10::Allocator {
  static void release(void* p) { std::free(p); }
  c10::DataPtr allocate(size_t nbytes) override {
    void* p = nullptr;
    if (nbytes > 0) {
      const int failed = posix_memalign(&p, kHugePage, nbytes);
      TORCH_CHECK(!failed, "rms_norm_cpu: out of memory allocating ", std::to_string(nbytes),
                  " bytes");
      // Only advice: where THP is "never" the pages are ordinary ones.
      (void)madvise(p, nbytes, MADV_HUGEPAGE);
    }
    return {p, p, &release, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, size_t count) const override {
    std::memcpy(dest, src, count);
  }
};
#endif

// The output of x's shape and dtype, contiguous, for the kernel to fill.
at::Tensor empty_output(const at::Tensor& x) {
#ifdef __linux__
  if (x.numel() * x.element_size() >= kHugePage) {
    // Never destroyed: a storage may outlive static destructors at exit.
    static HugePageAllocator* allocator = new HugePageAllocator();
    return at::detail::empty_generic(x.sizes(), allocator,
                                     c10::DispatchKeySet(c10::DispatchKey::CPU),
                                     x.scalar_type(), at::MemoryFormat::Contiguous);
  }
#endif
  return at::empty(x.sizes(), x.options().memory_format(at::MemoryFormat::Contiguous));
}
// [huge-pages-end]

}  // namespace

// [cpu-host]
// Writes y (and inv_rms when it is defined) for x and weight. y must be a
// contiguous tensor of the shape and dtype of x.
void rms_norm_cpu_kernel(const at::Tensor& x, const at::Tensor& weight, double eps,
                         const at::Tensor& y, const at::Tensor& inv_rms) {
  TORCH_CHECK(x.device().is_cpu(), "rms_norm_cpu: x must be a CPU tensor");
  // The kernel walks rows of a dense (M, N) buffer; a strided view is copied
  // once here instead of complicating the inner loop.
  const at::Tensor xc = x.contiguous();
  const at::Tensor wc = weight.contiguous();
  const int64_t n = xc.size(-1);
  const int64_t m = n == 0 ? 0 : xc.numel() / n;
  if (m == 0) return;
  // Give each task at least GRAIN_SIZE elements so that small inputs stay on
  // one thread instead of paying for a fork/join.
  const int64_t grain_rows = std::max<int64_t>(1, at::internal::GRAIN_SIZE / n);
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, xc.scalar_type(), "rms_norm_cpu", [&] {
        using acc_t = at::opmath_type<scalar_t>;
        const scalar_t* x_ptr = xc.const_data_ptr<scalar_t>();
        const scalar_t* w_ptr = wc.const_data_ptr<scalar_t>();
        scalar_t* y_ptr = y.mutable_data_ptr<scalar_t>();
        acc_t* r_ptr = inv_rms.defined() ? inv_rms.mutable_data_ptr<acc_t>() : nullptr;
        at::parallel_for(0, m, grain_rows, [&](int64_t begin, int64_t end) {
          rms_norm_rows<scalar_t>(x_ptr, w_ptr, y_ptr, r_ptr, begin, end, n, eps);
        });
      });
}

at::Tensor rms_norm_cpu(const at::Tensor& x, const at::Tensor& weight, double eps) {
  check_rms_norm_args(x, weight, eps);
  at::Tensor y = empty_output(x);
  at::Tensor no_inv_rms;  // undefined: the inference op does not keep it
  rms_norm_cpu_kernel(x, weight, eps, y, no_inv_rms);
  return y;
}

std::tuple<at::Tensor, at::Tensor> rms_norm_fwd_cpu(const at::Tensor& x,
                                                    const at::Tensor& weight, double eps) {
  check_rms_norm_args(x, weight, eps);
  // One statistic per row, in the accumulation type: shape x.shape[:-1].
  at::Tensor inv_rms = at::empty(x.sizes().slice(0, x.dim() - 1),
                                 x.options().dtype(rms_norm_acc_type(x.scalar_type())));
  at::Tensor y = empty_output(x);
  rms_norm_cpu_kernel(x, weight, eps, y, inv_rms);
  // A row of length 0 has no mean square: NaN, as mean() of an empty row.
  if (x.size(-1) == 0) inv_rms.fill_(std::numeric_limits<double>::quiet_NaN());
  return {y, inv_rms};
}
// [cpu-host-end]

// [cpu-into]
// _rms_norm_into: the same kernel writing into an existing tensor, so that a
// benchmark can time the loop apart from allocating (and first touching) the
// output. y must be a contiguous CPU tensor of x's shape and dtype that does
// not overlap x or weight.
void rms_norm_into_cpu(const at::Tensor& x, const at::Tensor& weight, double eps,
                       const at::Tensor& y) {
  check_rms_norm_args(x, weight, eps);
  TORCH_CHECK(y.device().is_cpu(), "_rms_norm_into: y must be a CPU tensor, got ",
              y.device().str());
  TORCH_CHECK_TYPE(y.scalar_type() == x.scalar_type(), "_rms_norm_into: y must have the dtype of x (",
                   dtype_name(x.scalar_type()), "), got ", dtype_name(y.scalar_type()));
  TORCH_CHECK_VALUE(y.sizes() == x.sizes(), "_rms_norm_into: y must have the shape of x ",
                    shape_str(x.sizes()), ", got ", shape_str(y.sizes()));
  TORCH_CHECK_VALUE(y.is_contiguous(), "_rms_norm_into: y must be contiguous");
  at::assert_no_overlap(y, x);
  at::assert_no_overlap(y, weight);
  rms_norm_cpu_kernel(x, weight, eps, y, at::Tensor());
}
// [cpu-into-end]

}  // namespace opguide

// [cpu-register]
TORCH_LIBRARY_IMPL(opguide, CPU, m) {
  m.impl("rms_norm", &opguide::rms_norm_cpu);
  m.impl("rms_norm_fwd", &opguide::rms_norm_fwd_cpu);
  m.impl("_rms_norm_into", &opguide::rms_norm_into_cpu);
}
// [cpu-register-end]
