#pragma once
#include <cstddef>
namespace opguide::triton_aot {
// One kernel compiled ahead of time for one target, as Triton's compiler left it.
struct Artifact {
  const char* key;             // opguide/triton/aot.py's key(): "kernel|target|dtype|C=v,...|spec|wN"
  const char* target;          // "sm_90", "gfx942"
  const char* function;        // the kernel's symbol in the image (Triton metadata "name")
  const unsigned char* image;  // the cubin or hsaco
  size_t image_size;
  int num_warps;
  int threads_per_warp;        // 32; 64 on AMD CDNA
  int shared_bytes;            // dynamic shared memory (Triton metadata "shared")
  bool launch_pdl;             // launched with programmatic dependent launch
};
// The table the build generated (opguide/triton/aot.py); empty in a build that named no target.
const Artifact* artifacts();
size_t artifact_count();
}  // namespace opguide::triton_aot
