// What it costs a writing kernel to report an index out of range, five ways.
//
// The kernel is the template's store_kv (copier --data kind=scatter): one
// block per token copies the token's row of k and of v into row slot[token]
// of two caches; a negative slot skips the token. A slot past the caches must
// write nothing; the five strategies differ in what the host learns of it:
//
//   skip        the token writes nothing, nobody is told (the floor);
//   flag_read   the kernel marks the first bad token in an error flag and the
//               host reads it after every launch, a wait for the kernel per
//               call (the template's CUDA and Triton kernels);
//   flag_later  the same flag, never reset or read per call: it keeps the
//               first bad token of any call until the host reads it where it
//               waits for the GPU anyway (once a step, say);
//   pre_pass    a checking kernel first, its result read by the host (a
//               wait), then the write;
//   trap        __trap() in the kernel: the launch fails, and with it every
//               later CUDA call of the process (the context is lost).
//
// Torch-free: tools/record_bad_index.py compiles this file into a shared
// library (nvcc -shared) and calls bad_index_store through ctypes with the
// tensors' pointers and PyTorch's current stream. Values are copied as 16-bit
// words, which is what a bf16 or fp16 cache row holds.
#include <cuda_runtime.h>

#include <cstdint>

namespace {

enum Strategy : int { kSkip = 0, kFlagRead = 1, kFlagLater = 2, kPrePass = 3, kTrap = 4 };

constexpr int kThreads = 128;                   // threads per block, as in the template
constexpr unsigned long long kNoBadToken = ~0ull;  // the flag while every slot is in range

template <int kMode>
__global__ void store_kernel(const uint16_t* __restrict__ k,        // [num_tokens, row_size]
                             const uint16_t* __restrict__ v,        // [num_tokens, row_size]
                             uint16_t* __restrict__ k_cache,        // [num_slots, row_size]
                             uint16_t* __restrict__ v_cache,        // [num_slots, row_size]
                             const int64_t* __restrict__ slot,      // [num_tokens]
                             int64_t row_size, int64_t num_slots,
                             unsigned long long* __restrict__ bad_token) {  // [1]
  const int64_t token = blockIdx.x;
  const int64_t s = slot[token];
  if (s < 0) return;  // a negative slot skips its token
  if (s >= num_slots) {
    if constexpr (kMode == kTrap) {
      __trap();
    } else if constexpr (kMode == kFlagRead || kMode == kFlagLater) {
      if (threadIdx.x == 0) atomicMin(bad_token, static_cast<unsigned long long>(token));
    }
    return;
  }
  for (int64_t i = threadIdx.x; i < row_size; i += blockDim.x) {
    k_cache[s * row_size + i] = k[token * row_size + i];
    v_cache[s * row_size + i] = v[token * row_size + i];
  }
}

// The pre-pass: the first token whose slot is past the caches, into the flag.
__global__ void check_kernel(const int64_t* __restrict__ slot,  // [num_tokens]
                             int64_t num_tokens, int64_t num_slots,
                             unsigned long long* __restrict__ bad_token) {  // [1]
  const int64_t token = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (token < num_tokens && slot[token] >= num_slots) {
    atomicMin(bad_token, static_cast<unsigned long long>(token));
  }
}

template <int kMode>
cudaError_t launch(const uint16_t* k, const uint16_t* v, uint16_t* k_cache, uint16_t* v_cache,
                   const int64_t* slot, int64_t num_tokens, int64_t row_size, int64_t num_slots,
                   unsigned long long* flag, cudaStream_t stream) {
  store_kernel<kMode><<<static_cast<unsigned int>(num_tokens), kThreads, 0, stream>>>(
      k, v, k_cache, v_cache, slot, row_size, num_slots, flag);
  return cudaGetLastError();
}

// Waits for the stream and reads the flag: kNoBadToken or the first bad token.
cudaError_t read_flag(const unsigned long long* flag, cudaStream_t stream,
                      unsigned long long* found) {
  cudaError_t err = cudaMemcpyAsync(found, flag, sizeof(*found), cudaMemcpyDeviceToHost, stream);
  return err == cudaSuccess ? cudaStreamSynchronize(stream) : err;
}

}  // namespace

// One call of the writing operator with the given strategy. flag points to
// one value on the GPU; flag_later expects it set to kNoBadToken once (by
// bad_index_reset_flag) and leaves it alone. *bad_token is set to the first
// bad token the call found, or -1: -1 always for skip, flag_later and trap,
// which tell the host nothing during the call. Returns the CUDA error code.
extern "C" int bad_index_store(int strategy, const uint16_t* k, const uint16_t* v,
                               uint16_t* k_cache, uint16_t* v_cache, const int64_t* slot,
                               int64_t num_tokens, int64_t row_size, int64_t num_slots,
                               unsigned long long* flag, void* stream_handle,
                               int64_t* bad_token) {
  auto stream = static_cast<cudaStream_t>(stream_handle);
  *bad_token = -1;
  if (num_tokens == 0 || row_size == 0) return cudaSuccess;
  unsigned long long found = kNoBadToken;
  cudaError_t err = cudaSuccess;
  switch (strategy) {
    case kSkip:
      return launch<kSkip>(k, v, k_cache, v_cache, slot, num_tokens, row_size, num_slots, flag,
                           stream);
    case kFlagRead:
      err = cudaMemsetAsync(flag, 0xFF, sizeof(*flag), stream);
      if (err == cudaSuccess) {
        err = launch<kFlagRead>(k, v, k_cache, v_cache, slot, num_tokens, row_size, num_slots,
                                flag, stream);
      }
      if (err == cudaSuccess) err = read_flag(flag, stream, &found);
      break;
    case kFlagLater:
      return launch<kFlagLater>(k, v, k_cache, v_cache, slot, num_tokens, row_size, num_slots,
                                flag, stream);
    case kPrePass: {
      const int threads = 256;
      const auto blocks = static_cast<unsigned int>((num_tokens + threads - 1) / threads);
      err = cudaMemsetAsync(flag, 0xFF, sizeof(*flag), stream);
      if (err == cudaSuccess) {
        check_kernel<<<blocks, threads, 0, stream>>>(slot, num_tokens, num_slots, flag);
        err = cudaGetLastError();
      }
      if (err == cudaSuccess) err = read_flag(flag, stream, &found);
      if (err == cudaSuccess && found == kNoBadToken) {
        err = launch<kSkip>(k, v, k_cache, v_cache, slot, num_tokens, row_size, num_slots, flag,
                            stream);
      }
      break;
    }
    case kTrap:
      return launch<kTrap>(k, v, k_cache, v_cache, slot, num_tokens, row_size, num_slots, flag,
                           stream);
    default:
      return cudaErrorInvalidValue;
  }
  if (found != kNoBadToken) *bad_token = static_cast<int64_t>(found);
  return err;
}

// Sets the flag to "no bad token" (for flag_later, before its calls).
extern "C" int bad_index_reset_flag(unsigned long long* flag, void* stream_handle) {
  return cudaMemsetAsync(flag, 0xFF, sizeof(*flag), static_cast<cudaStream_t>(stream_handle));
}

// Reads the flag, waiting for the stream: the first bad token since the last
// reset, or -1.
extern "C" int bad_index_read_flag(const unsigned long long* flag, void* stream_handle,
                                   int64_t* bad_token) {
  unsigned long long found = kNoBadToken;
  const cudaError_t err = read_flag(flag, static_cast<cudaStream_t>(stream_handle), &found);
  *bad_token = found == kNoBadToken ? -1 : static_cast<int64_t>(found);
  return err;
}

extern "C" const char* bad_index_error_string(int err) {
  return cudaGetErrorString(static_cast<cudaError_t>(err));
}
