// "hostdev": a tiny out-of-tree backend on the PrivateUse1 dispatch key.
//
// Its "device memory" is ordinary host memory, so it runs anywhere, but it
// goes through every piece a real accelerator backend needs: an allocator, a
// device guard, and kernels for the ATen operators a small program touches
// (empty, empty_strided, _copy_from, fill_, neg, add), all registered with
// TORCH_LIBRARY_IMPL(aten, PrivateUse1, m). Python gives the key a device name
// with torch.utils.rename_privateuse1_backend("hostdev").
//
// Not part of opguide._C: the gallery step 12 and tests/test_dispatcher.py
// compile this file on its own with torch.utils.cpp_extension.load.
#include <ATen/core/Tensor.h>
#include <ATen/Dispatch.h>
#include <ATen/EmptyTensor.h>
#include <ATen/OpMathType.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <c10/core/Allocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/alloc_cpu.h>
#include <torch/library.h>

#include <string>

#include "override_switches.h"

namespace hostdev {

// [runtime]
// The device runtime. A GPU runtime reports a failed kernel launch through a
// status that the host must fetch afterwards (cudaGetLastError); this pretend
// runtime does the same, so the kernels below show where the check goes.
enum class Status { kSuccess, kInvalidValue };
thread_local Status last_error = Status::kSuccess;

Status get_last_error() {
  const Status status = last_error;
  last_error = Status::kSuccess;
  return status;
}

// "Launches" body(i) for i in [0, n). Like a GPU launch it never throws: a bad
// launch configuration only leaves an error status behind.
template <typename Body>
void launch(int64_t n, const void* data, Body body) {
  if (n < 0 || (n > 0 && data == nullptr)) {
    last_error = Status::kInvalidValue;
    return;
  }
  for (int64_t i = 0; i < n; ++i) body(i);
}

// Turns a launch error into a Python exception that names the kernel. The
// CUDA equivalent after a <<<...>>> launch is C10_CUDA_KERNEL_LAUNCH_CHECK().
#define HOSTDEV_CHECK_LAUNCH(kernel_name)                                   \
  TORCH_CHECK(::hostdev::get_last_error() == ::hostdev::Status::kSuccess, \
              "hostdev: launch of ", kernel_name, " failed: invalid value")
// [runtime-end]

// [allocator]
// Device memory. A real backend would call its driver's malloc/free here.
struct HostDevAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    void* data = nbytes > 0 ? c10::alloc_cpu(nbytes) : nullptr;
    // The DataPtr carries the device, which is how a tensor made from this
    // memory knows it lives on hostdev:0.
    return {data, data, &release, c10::Device(c10::DeviceType::PrivateUse1, 0)};
  }
  static void release(void* ptr) {
    if (ptr != nullptr) c10::free_cpu(ptr);
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

HostDevAllocator allocator;
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &allocator)
// [allocator-end]

// [guard]
// The device guard: how PyTorch asks "which hostdev device is current" and
// switches it (torch.device("hostdev:0") contexts, DeviceGuard in kernels).
// One device, one default stream.
struct HostDevGuardImpl final : c10::impl::DeviceGuardImplInterface {
  static constexpr c10::DeviceType kType = c10::DeviceType::PrivateUse1;
  c10::DeviceType type() const override { return kType; }
  c10::Device exchangeDevice(c10::Device device) const override {
    check(device);
    return c10::Device(kType, 0);
  }
  c10::Device getDevice() const override { return c10::Device(kType, 0); }
  void setDevice(c10::Device device) const override { check(device); }
  void uncheckedSetDevice(c10::Device) const noexcept override {}
  c10::Stream getStream(c10::Device device) const noexcept override {
    return c10::Stream(c10::Stream::DEFAULT, device);
  }
  c10::Stream exchangeStream(c10::Stream stream) const noexcept override {
    return c10::Stream(c10::Stream::DEFAULT, stream.device());
  }
  c10::DeviceIndex deviceCount() const noexcept override { return 1; }

 private:
  static void check(c10::Device device) {
    TORCH_CHECK(device.type() == kType && device.index() <= 0,
                "hostdev: there is one device, hostdev:0; got ", device.str());
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, HostDevGuardImpl);
// [guard-end]

constexpr c10::DispatchKeySet kHostDevKeys(c10::DispatchKey::PrivateUse1);

void check_device_index(std::optional<c10::Device> device) {
  TORCH_CHECK(!device.has_value() || device->index() <= 0,
              "hostdev: there is one device, hostdev:0; got ", *device);
}

// [empty]
// aten::empty.memory_format(SymInt[] size, *, ScalarType? dtype=None,
//     Layout? layout=None, Device? device=None, bool? pin_memory=None,
//     MemoryFormat? memory_format=None) -> Tensor
at::Tensor empty_memory_format(at::IntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<at::Layout> layout,
                               std::optional<c10::Device> device,
                               std::optional<bool> pin_memory,
                               std::optional<at::MemoryFormat> memory_format) {
  opguide_dispatch::log_call("aten::empty.memory_format", "hostdev", at::Tensor());
  TORCH_CHECK(layout.value_or(at::kStrided) == at::kStrided,
              "hostdev: empty supports only the strided layout");
  check_device_index(device);
  return at::detail::empty_generic(size, &allocator, kHostDevKeys,
                                   c10::dtype_or_default(dtype), memory_format);
}

// aten::empty_strided(SymInt[] size, SymInt[] stride, *, ...) -> Tensor.
// Tensor.to() asks for this one: it keeps the strides of the source.
at::Tensor empty_strided(at::IntArrayRef size, at::IntArrayRef stride,
                         std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                         std::optional<c10::Device> device, std::optional<bool> pin_memory) {
  opguide_dispatch::log_call("aten::empty_strided", "hostdev", at::Tensor());
  TORCH_CHECK(layout.value_or(at::kStrided) == at::kStrided,
              "hostdev: empty_strided supports only the strided layout");
  check_device_index(device);
  return at::detail::empty_strided_generic(size, stride, &allocator, kHostDevKeys,
                                           c10::dtype_or_default(dtype));
}
// [empty-end]

// [copy]
// A CPU tensor that aliases the memory of `t` (on hostdev or on the CPU). Only
// valid because hostdev memory is host memory; a real backend would issue a
// host<->device DMA through its runtime instead.
at::Tensor host_alias(const at::Tensor& t) {
  if (t.is_cpu()) return t;
  return at::from_blob(t.data_ptr(), t.sizes(), t.strides(),
                       t.options().device(c10::kCPU));
}

// aten::_copy_from(Tensor self, Tensor dst, bool non_blocking=False) -> Tensor.
// Tensor.copy_ calls it when one side is on a PrivateUse1 device; .to("hostdev")
// and .cpu() both end here. `self` is the source.
at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  opguide_dispatch::log_call("aten::_copy_from", "hostdev", self);
  for (const at::Tensor* t : {&self, &dst}) {
    TORCH_CHECK(t->is_cpu() || t->device().type() == c10::DeviceType::PrivateUse1,
                "hostdev: copies go between hostdev and cpu only, got a tensor on ",
                t->device().str());
  }
  // CPU copy_ handles strides, broadcasting and dtype conversion for us.
  host_alias(dst).copy_(host_alias(self));
  return dst;
}
// [copy-end]

// "torch.float32", as Python prints a dtype.
// Messages are built from strings (std::to_string), not by streaming numbers,
// so that no message goes through the locale facets of whichever libstdc++
// the process loaded.
std::string shape_str(at::IntArrayRef sizes) {
  std::string out = "[";
  for (size_t i = 0; i < sizes.size(); ++i) out += (i ? ", " : "") + std::to_string(sizes[i]);
  return out + "]";
}

std::string dtype_name(at::ScalarType t) {
  return "torch." + std::string(c10::getDtypeNames(t).first);
}

void check_hostdev(const at::Tensor& t, const char* op, const char* arg) {
  TORCH_CHECK(t.device().type() == c10::DeviceType::PrivateUse1, "hostdev ", op, ": ", arg,
              " must be on hostdev, got ", t.device().str());
  TORCH_CHECK(t.is_contiguous(), "hostdev ", op, ": ", arg,
              " must be contiguous (this small backend has no strided kernels)");
}

// aten::fill_.Scalar(Tensor(a!) self, Scalar value) -> Tensor(a!).
// torch.full, torch.zeros and torch.ones are empty + fill_.
at::Tensor& fill_scalar(at::Tensor& self, const at::Scalar& value) {
  opguide_dispatch::log_call("aten::fill_.Scalar", "hostdev", self);
  check_hostdev(self, "fill_", "self");
  AT_DISPATCH_ALL_TYPES_AND3(at::kHalf, at::kBFloat16, at::kBool, self.scalar_type(),
                             "hostdev_fill_", [&] {
                               const scalar_t v = value.to<scalar_t>();
                               scalar_t* out = self.mutable_data_ptr<scalar_t>();
                               launch(self.numel(), out, [&](int64_t i) { out[i] = v; });
                             });
  HOSTDEV_CHECK_LAUNCH("fill_");
  return self;
}

// [neg]
// aten::neg(Tensor self) -> Tensor
at::Tensor neg(const at::Tensor& self) {
  opguide_dispatch::log_call("aten::neg", "hostdev", self);
  check_hostdev(self, "neg", "self");
  TORCH_CHECK(self.scalar_type() != at::kBool,
              "hostdev neg: self must not be a bool tensor (use logical_not)");
  at::Tensor out = at::empty(self.sizes(), self.options());  // dispatches to our empty
  // One kernel instance per dtype: AT_DISPATCH_* switches on the runtime
  // dtype and names the C++ type scalar_t inside the lambda.
  AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, self.scalar_type(), "hostdev_neg", [&] {
    const scalar_t* in = self.const_data_ptr<scalar_t>();
    scalar_t* o = out.mutable_data_ptr<scalar_t>();
    launch(self.numel(), in, [&](int64_t i) { o[i] = -in[i]; });
  });
  HOSTDEV_CHECK_LAUNCH("neg");  // right after the launch, before anyone reads `out`
  return out;
}
// [neg-end]

// [add]
// aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor
at::Tensor add(const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
  opguide_dispatch::log_call("aten::add.Tensor", "hostdev", self);
  check_hostdev(self, "add", "self");
  // `x + 2.0` arrives as a 0-d CPU tensor ("wrapped number"); take its value.
  const bool other_is_number = other.is_cpu() && other.dim() == 0;
  if (!other_is_number) {
    check_hostdev(other, "add", "other");
    TORCH_CHECK(other.sizes() == self.sizes(), "hostdev add: other must have the shape of self ",
                shape_str(self.sizes()), " (no broadcasting here), got ", shape_str(other.sizes()));
  }
  TORCH_CHECK(other_is_number || other.scalar_type() == self.scalar_type(),
              "hostdev add: other must have the dtype of self (", dtype_name(self.scalar_type()),
              "), got ", dtype_name(other.scalar_type()));
  at::Tensor out = at::empty(self.sizes(), self.options());
  AT_DISPATCH_ALL_TYPES_AND2(at::kHalf, at::kBFloat16, self.scalar_type(), "hostdev_add", [&] {
    // Compute in float for half/bfloat16, as ATen does, and round once.
    using opmath_t = at::opmath_type<scalar_t>;
    const opmath_t a = alpha.to<opmath_t>();
    const scalar_t* x = self.const_data_ptr<scalar_t>();
    scalar_t* o = out.mutable_data_ptr<scalar_t>();
    if (other_is_number) {
      const opmath_t y = other.item().to<opmath_t>();
      launch(self.numel(), x, [&](int64_t i) {
        o[i] = static_cast<scalar_t>(static_cast<opmath_t>(x[i]) + a * y);
      });
    } else {
      const scalar_t* y = other.const_data_ptr<scalar_t>();
      launch(self.numel(), x, [&](int64_t i) {
        o[i] = static_cast<scalar_t>(static_cast<opmath_t>(x[i]) + a * static_cast<opmath_t>(y[i]));
      });
    }
  });
  HOSTDEV_CHECK_LAUNCH("add");
  return out;
}
// [add-end]

}  // namespace hostdev

// [register]
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  using opguide_dispatch::impl_unless_disabled;
  impl_unless_disabled(m, "empty.memory_format", &hostdev::empty_memory_format);
  impl_unless_disabled(m, "empty_strided", &hostdev::empty_strided);
  impl_unless_disabled(m, "_copy_from", &hostdev::copy_from);
  impl_unless_disabled(m, "fill_.Scalar", &hostdev::fill_scalar);
  impl_unless_disabled(m, "neg", &hostdev::neg);
  impl_unless_disabled(m, "add.Tensor", &hostdev::add);
}
// [register-end]
