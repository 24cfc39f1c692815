// Asynchronous copies from global to shared memory (cp.async on sm_80 and
// later, plain copies elsewhere). Torch-free.
#pragma once

#include "vec.cuh"

namespace opguide {

// Asynchronous 16-byte copies from global to shared memory (cp.async, sm_80
// and later): the copy is queued and the thread goes on; commit closes a
// group of copies, and wait<N> returns once at most N of this thread's
// groups are still in flight. The copies bypass L1 (.cg): the data is read
// once. Elsewhere (HIP, older GPUs) the copy is an ordinary load and store,
// which is correct, only not asynchronous.
#if !defined(__HIP_PLATFORM_AMD__) && !defined(__HIP__) && defined(__CUDA_ARCH__) && \
    __CUDA_ARCH__ >= 800
#define OPGUIDE_HAVE_CP_ASYNC 1
#else
#define OPGUIDE_HAVE_CP_ASYNC 0
#endif

template <typename V>
__device__ __forceinline__ void copy_async(V* shared_dst, const V* global_src) {
  static_assert(sizeof(V) == 16, "copy_async moves 16-byte vectors");
#if OPGUIDE_HAVE_CP_ASYNC
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(shared_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(global_src)
               : "memory");
#else
  *shared_dst = *global_src;
#endif
}

__device__ __forceinline__ void copy_async_commit() {
#if OPGUIDE_HAVE_CP_ASYNC
  asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}

template <int kInFlight>
__device__ __forceinline__ void copy_async_wait() {
#if OPGUIDE_HAVE_CP_ASYNC
  asm volatile("cp.async.wait_group %0;" ::"n"(kInFlight) : "memory");
#endif
}

}  // namespace opguide
